// GroupSet: the factories and text form of disjoint rank groups (dtsim/collectives.h).
#include "dtsim/collectives.h"

#include <sstream>

#include "dtsim/error.h"

namespace dtsim {

GroupSet GroupSet::AlongMeshDim(const DeviceMesh& mesh, int64_t dim) {
  if (dim < 0 || dim >= mesh.ndim()) {
    throw InputError("mesh dim", StrCat("mesh dim ", dim, " is out of range for mesh ", mesh.ToString(), " with ",
                                        mesh.ndim(), " dims"));
  }
  return GroupSet{mesh.GroupsAlong(dim)};
}

GroupSet GroupSet::Of(std::vector<int64_t> ranks) { return GroupSet{{std::move(ranks)}}; }

std::string GroupSet::ToString() const {
  std::ostringstream out;
  out << "[";
  for (size_t g = 0; g < groups.size(); ++g) {
    out << (g ? ", " : "") << "[";
    for (size_t i = 0; i < groups[g].size(); ++i) out << (i ? ", " : "") << groups[g][i];
    out << "]";
  }
  out << "]";
  return out.str();
}

}  // namespace dtsim
