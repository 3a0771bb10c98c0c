// DeviceMesh: an n-D grid of global ranks with optional dim names, as upstream
// torch.distributed.DeviceMesh.
//
// A mesh of shape (2, 4) named ("dp", "tp") over ranks 0..7 lays them out row-major:
//     tp: 0  1  2  3
//   dp 0: 0  1  2  3
//   dp 1: 4  5  6  7
// Rank 6 has coordinate (1, 2); its group along "tp" is {4, 5, 6, 7} and along "dp" is {2, 6}.
// A DeviceMesh that exists is valid (checked once in Create): every dim >= 1, at most kMaxMeshRanks
// ranks, names unique and one per dim, ranks unique and non-negative, one per mesh element.
// Submeshes and flattened meshes remember their root mesh and which root dims each of their dims
// covers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtsim {

// The most ranks a mesh may have (2^20): every per-rank table dtsim prints or computes stays finite
// in time.
inline constexpr int64_t kMaxMeshRanks = int64_t{1} << 20;
// The most dims a mesh may have (upstream meshes have a handful; traces allow 64 too).
inline constexpr int64_t kMaxMeshDims = 64;
// The longest mesh dim name, in bytes.
inline constexpr size_t kMaxMeshDimNameBytes = 256;
// Integer-list texts (--mesh, --shape) longer than this are refused before parsing.
inline constexpr size_t kMaxIntListTextBytes = size_t{1} << 16;

class DeviceMesh {
 public:
  // Builds a mesh. `shape` has 1 to kMaxMeshDims dims; `names` is empty or one unique non-empty
  // name per dim (valid UTF-8 without control characters, at most kMaxMeshDimNameBytes bytes);
  // `ranks` is empty (meaning 0..N-1) or the N = prod(shape) global ranks in row-major order.
  // Throws InputError naming "mesh", "names" or "ranks". Example: DeviceMesh::Create({2, 4}, {"dp",
  // "tp"}).
  static DeviceMesh Create(std::vector<int64_t> shape, std::vector<std::string> names = {},
                           std::vector<int64_t> ranks = {});

  // Parses the command-line forms: shape "2x4" (also "2,4" or "8"), names "dp,tp" (may be empty).
  static DeviceMesh Parse(std::string_view shape, std::string_view names = "");

  int64_t ndim() const { return static_cast<int64_t>(s_->shape.size()); }
  // Number of ranks in the mesh.
  int64_t size() const { return static_cast<int64_t>(s_->ranks->size()); }
  // Size of mesh dim `dim` (0 <= dim < ndim).
  int64_t size(int64_t dim) const { return s_->shape.at(dim); }
  const std::vector<int64_t>& shape() const { return s_->shape; }
  // Empty when the mesh has no dim names.
  const std::vector<std::string>& names() const { return s_->names; }
  // The ranks in row-major order of the mesh coordinates.
  const std::vector<int64_t>& ranks() const { return *s_->ranks; }
  // True when the ranks are 0..N-1 in row-major order (rank r sits at position r).
  bool default_order() const { return s_->default_order; }
  // The position of `rank` in ranks() (row-major index of its coordinate), or -1 if the rank is not
  // in the mesh. O(1) for the default order, O(log N) otherwise.
  int64_t PositionOf(int64_t rank) const;

  // The name of mesh dim `dim`, or its index as text when the mesh is unnamed ("dp" or "0").
  std::string DimLabel(int64_t dim) const;
  // Index of the dim called `name`, or nullopt.
  std::optional<int64_t> FindDim(std::string_view name) const;
  // Index of the dim called `name` (or given as its index, "1"); throws InputError(field) if there
  // is none.
  int64_t GetDim(std::string_view name, const std::string& field = "mesh dim") const;

  // The coordinate of `rank` in the mesh, or nullopt if the rank is not in it.
  std::optional<std::vector<int64_t>> FindCoordinate(int64_t rank) const;
  // Like FindCoordinate; throws InputError("rank") if the rank is not in the mesh.
  std::vector<int64_t> GetCoordinate(int64_t rank) const;
  // The rank at `coordinate` (each entry within its dim).
  int64_t RankAt(const std::vector<int64_t>& coordinate) const;

  // The ranks that share every coordinate of `rank` except along `dim`, ordered by their coordinate
  // on `dim`. Mesh (2,4), rank 6: GroupAlong(0, 6) = {2, 6}; GroupAlong(1, 6) = {4, 5, 6, 7}.
  std::vector<int64_t> GroupAlong(int64_t dim, int64_t rank) const;
  // Every group along `dim`, ordered by the coordinates of the other dims: mesh (2,4), dim 0 →
  // {0,4},{1,5},{2,6},{3,7}.
  std::vector<std::vector<int64_t>> GroupsAlong(int64_t dim) const;

  // The submesh over the named dims (in the given order) that contains `rank`; it remembers this
  // mesh's root. Mesh (2,4) named (dp,tp): Submesh({"tp"}, 6) is mesh[tp=4] over ranks {4,5,6,7}.
  DeviceMesh Submesh(const std::vector<std::string>& dim_names, int64_t rank) const;
  // Merges the named dims into one dim called `flat_name`, placed where the first of them was; the
  // ranks of the merged dim run row-major over the merged dims. Mesh (2,2,2) named (a,b,c):
  // Flatten({"a","c"}, "ac") has shape (4, 2).
  DeviceMesh Flatten(const std::vector<std::string>& dim_names, const std::string& flat_name) const;

  // The mesh this one was cut from by Submesh/Flatten (itself for a root mesh).
  const DeviceMesh& root() const { return s_->root ? *s_->root : *this; }
  bool is_root() const { return s_->root == nullptr; }
  // For each dim of this mesh, the dims of the root mesh it covers (one for a plain dim, several
  // for a flattened one).
  const std::vector<std::vector<int64_t>>& root_dims() const { return s_->root_dims; }

  // "mesh[dp=2, tp=4]" for a named mesh, "mesh[2, 4]" otherwise; with a non-default rank order the
  // ranks follow: "mesh[2, 2](ranks=[0, 2, 1, 3])".
  std::string ToString() const;

  // Same shape, names and rank layout (roots are not compared).
  bool operator==(const DeviceMesh& other) const;
  // Equal, with equal roots and the same ranks: the mesh `other` stands for. Cheap for copies of
  // one mesh (shared rank list and root).
  bool SameMesh(const DeviceMesh& other) const;
  bool operator!=(const DeviceMesh& other) const { return !(*this == other); }

 private:
  DeviceMesh() = default;
  std::vector<int64_t> Strides() const;

  // Everything a mesh is, shared between copies (a mesh is immutable once built): copying a mesh,
  // as every DTensorSpec copy does, costs one reference count, whatever its rank count.
  struct State {
    std::vector<int64_t> shape;
    std::vector<std::string> names;
    std::shared_ptr<const std::vector<int64_t>> ranks;
    bool default_order = true;
    // Non-default orders only: (rank, position) sorted by rank.
    std::shared_ptr<const std::vector<std::pair<int64_t, int64_t>>> positions;
    std::vector<std::vector<int64_t>> root_dims;
    std::shared_ptr<const DeviceMesh> root;
  };
  std::shared_ptr<const State> s_;  // set by Create, Submesh and Flatten; null only once moved from
};

// Parses a comma- or x-separated list of integers ("2x4", "5,10", "[5, 10]"); `field` names it in
// errors ("is not an integer", "is too large", text over kMaxIntListTextBytes). Empty text gives an
// empty list (a 0-d shape).
std::vector<int64_t> ParseIntList(std::string_view text, const std::string& field);
// Splits "dp,tp" into names, trimming blanks.
std::vector<std::string> ParseNameList(std::string_view text);
// "[5, 10]"
std::string IntListToString(const std::vector<int64_t>& values);
// A rank's coordinate by the mesh's dim names: "[dp=0, tp=3]" ("[0, 3]" for an unnamed mesh).
std::string CoordinateText(const DeviceMesh& mesh, const std::vector<int64_t>& coordinate);

}  // namespace dtsim
