// Fuzz target: the --mesh, --names and --shape parsers and DeviceMesh/DTensorSpec validation. The
// input is
// "<mesh>\n<names>\n<shape>". Properties: every refusal is an InputError naming mesh, names, shape
// or placements with a capped message; an accepted mesh has ndim <= 64 and <= 2^20 ranks, prints
// names that are valid UTF-8, and its shape prints (IntListToString) to text that parses back to
// the same shape; an accepted tensor shape builds a spec (replicated) whose layout of the first and
// last rank is the whole tensor.
#include <cstdint>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/spec.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  const std::vector<std::string> parts = fuzz::SplitParts(fuzz::AsText(data, size), '\n', 3);
  const std::string mesh_text = parts[0];
  const std::string names_text = parts.size() > 1 ? parts[1] : "";
  const std::string shape_text = parts.size() > 2 ? parts[2] : "";
  auto check_error = [](const InputError& e) {
    const std::string f = e.field();
    DTSIM_FUZZ_EXPECT(f == "mesh" || f == "names" || f == "shape" || f == "placements", e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 1024,
                      "capped message: ", std::string(e.what()).size());
  };
  std::vector<int64_t> shape;
  bool shape_ok = true;
  try {
    shape = ParseIntList(shape_text, "shape");
    const std::vector<int64_t> again = ParseIntList(IntListToString(shape), "shape");
    DTSIM_FUZZ_EXPECT(again == shape, IntListToString(shape));
  } catch (const InputError& e) {
    check_error(e);
    shape_ok = false;
  }
  try {
    const DeviceMesh mesh = DeviceMesh::Parse(mesh_text, names_text);
    DTSIM_FUZZ_EXPECT(mesh.ndim() >= 1 && mesh.ndim() <= kMaxMeshDims, mesh.ndim());
    DTSIM_FUZZ_EXPECT(mesh.size() >= 1 && mesh.size() <= kMaxMeshRanks, mesh.size());
    for (const std::string& name : mesh.names()) DTSIM_FUZZ_EXPECT(IsValidUtf8(name), "name");
    DTSIM_FUZZ_EXPECT(DeviceMesh::Parse(IntListToString(mesh.shape())).shape() == mesh.shape(),
                      mesh.ToString());
    const int64_t last = mesh.ranks().back();
    DTSIM_FUZZ_EXPECT(mesh.RankAt(mesh.GetCoordinate(last)) == last, mesh.ToString());
    if (!shape_ok) return 0;
    const DTensorSpec spec = DTensorSpec::Create(
        mesh, Placements(mesh.ndim(), Placement::Replicate()), shape, DType::kFloat32);
    for (int64_t rank : {mesh.ranks().front(), last}) {
      DTSIM_FUZZ_EXPECT(spec.LayoutOfRank(rank).local_shape == shape, spec.ToString());
    }
  } catch (const InputError& e) {
    check_error(e);
  }
  return 0;
}
