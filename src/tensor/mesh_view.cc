// MeshView (see include/dtsim/tensor/mesh_view.h).
#include "dtsim/tensor/mesh_view.h"

namespace dtsim {

bool IsFamilySubmesh(const DeviceMesh& mesh) {
  if (mesh.is_root()) return false;
  for (const auto& dims : mesh.root_dims()) {
    if (dims.size() != 1) return false;
  }
  return true;
}

const std::vector<int64_t>& MeshView::ranks() const {
  return IsFamilySubmesh(*mesh_) ? mesh_->root().ranks() : mesh_->ranks();
}

std::vector<int64_t> MeshView::Coordinate(int64_t rank) const {
  if (!IsFamilySubmesh(*mesh_)) return mesh_->GetCoordinate(rank);
  std::vector<int64_t> root = mesh_->root().GetCoordinate(rank);
  std::vector<int64_t> out;
  for (const auto& dims : mesh_->root_dims()) out.push_back(root[dims[0]]);
  return out;
}

int64_t MeshView::CoordinateAlong(int64_t rank, int64_t dim) const {
  const bool family = IsFamilySubmesh(*mesh_);
  const DeviceMesh& mesh = family ? mesh_->root() : *mesh_;
  const int64_t d = family ? mesh_->root_dims().at(dim)[0] : dim;
  const int64_t position = mesh.PositionOf(rank);
  if (position < 0) return Coordinate(rank).at(dim);  // throws InputError naming the rank
  int64_t stride = 1;
  for (int64_t k = mesh.ndim() - 1; k > d; --k) stride *= mesh.size(k);
  return (position / stride) % mesh.size(d);
}

GroupSet MeshView::Groups(int64_t dim) const {
  if (!IsFamilySubmesh(*mesh_)) return GroupSet::AlongMeshDim(*mesh_, dim);
  return GroupSet::AlongMeshDim(mesh_->root(), mesh_->root_dims()[dim][0]);
}

}  // namespace dtsim
