// DTensorSpec: a mesh, one placement per mesh dim, a global shape and a dtype; and, for every rank,
// exactly which part of the global tensor it holds.
//
// Terms used here and in src/layout/spec.cc:
//   * chunk split — upstream shards a dim of current length L over n ranks the way torch.chunk
//   does: chunk size
//     c = ceil(L/n), rank r holds [min(L, r·c), min(L, (r+1)·c)). L=9,n=4 → 3,3,3,0; L=2,n=8 →
//     1,1,0,0,0,0,0,0.
//   * strided split (_S(d,k)) — chunk-split the current length into k pieces, chunk-split each
//   piece over the n
//     ranks, rank r holds its sub-piece of every piece, concatenated in order.
//   * left to right — placements apply in mesh-dim order; a second shard of the same tensor dim
//   splits what the
//     first one left (nested sharding), so the inner size depends on the outer coordinate.
//   * owned indices — for each tensor dim, the sorted global indices a rank holds, kept as
//   half-open intervals;
//     local index i along dim d is the i-th owned index. Strided shards own several intervals.
//   * global offset — upstream's compute_local_shape_and_global_offset: the first owned index, 0
//   for dims no
//     placement shards, and the global dim size L for an empty shard (not the start it would have
//     had).
// Global (13, 2) on mesh (4, 2) with [S(0), S(0)]: the rank at coordinate (3, 1) holds 0 rows at
// offset 13.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtsim/layout/dtype.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"

namespace dtsim {

// The most dims a tensor may have, and the most elements (every byte count of a plan then fits in
// 64 bits or is refused with a clear error).
inline constexpr int64_t kMaxTensorDims = 64;
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 62;
// The most separate index ranges one rank may own along one tensor dim (a _S(d,k) with many small
// pieces).
inline constexpr int64_t kMaxShardIntervals = int64_t{1} << 20;

// A half-open range [lo, hi) of global indices along one tensor dim.
struct Interval {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t size() const { return hi - lo; }
  bool operator==(const Interval& o) const { return lo == o.lo && hi == o.hi; }
};

// What one rank holds.
struct RankLayout {
  int64_t rank = 0;
  std::vector<int64_t> coordinate;     // in the mesh
  std::vector<int64_t> local_shape;    // upstream's local shape
  std::vector<int64_t> global_offset;  // upstream's global offset
  // intervals[d]: the owned global indices along tensor dim d, sorted, non-empty intervals only (an
  // empty shard or a dim of size 0 has none). The local shard is the product of these sets, in this
  // order.
  std::vector<std::vector<Interval>> intervals;

  int64_t numel() const;
};

// Computes what the rank at `coordinate` of a mesh of `mesh_shape` holds, with `placements` already
// normalised. Pure arithmetic, the same rule as upstream's _compute_local_shape_and_global_offset;
// `rank` is copied through.
RankLayout ComputeRankLayout(const std::vector<int64_t>& global_shape,
                             const std::vector<int64_t>& mesh_shape,
                             const std::vector<int64_t>& coordinate, const Placements& placements,
                             int64_t rank = 0);

class DTensorSpec {
 public:
  // Validates and normalises: one placement per mesh dim ("placements: 3 placements for mesh[dp=2,
  // tp=4] of 2 dims"), at most kMaxTensorDims dims and kMaxTensorElements elements, shape entries
  // >= 0 ("shape: dim 1 has size -3"), shard dims within the tensor rank (negative ones are
  // normalised), Partial reduce ops that can reduce the dtype (band/bor/bxor need an integer or
  // bool dtype, avg a floating one, as c10d's). Throws InputError naming the field.
  static DTensorSpec Create(DeviceMesh mesh, Placements placements, std::vector<int64_t> shape,
                            DType dtype = DType::kFloat32);

  const DeviceMesh& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const;

  // The layout of the rank at `coordinate` / of global rank `rank` (InputError if not in the mesh).
  RankLayout LayoutAt(const std::vector<int64_t>& coordinate) const;
  RankLayout LayoutOfRank(int64_t rank) const;
  // Every rank of the mesh, in mesh (row-major) order.
  std::vector<RankLayout> AllLayouts() const;

  // True if some mesh dim is Partial.
  bool has_partial() const;
  // True if the same tensor dim is sharded on more than one mesh dim, or by a StridedShard.
  bool has_nested_shards() const;

  // "mesh[dp=2, tp=4] [S(0), R] shape=[5, 10] float32".
  std::string ToString() const;

 private:
  DTensorSpec(DeviceMesh mesh) : mesh_(std::move(mesh)) {}

  DeviceMesh mesh_;
  Placements placements_;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kFloat32;
};

// The local shape alone of the rank at `coordinate` (ComputeRankLayout(...).local_shape without the
// intervals): what per-rank loops over big worlds need, with no allocation beyond the result.
std::vector<int64_t> LocalShapeAt(const std::vector<int64_t>& global_shape,
                                  const std::vector<int64_t>& mesh_shape,
                                  const std::vector<int64_t>& coordinate,
                                  const Placements& placements);

// Local index range [lo, hi) that the chunk split gives rank `r` of `n` on a dim of length
// `length`.
Interval ChunkRange(int64_t length, int64_t n, int64_t r);

// The indices (relative to the current extent `length`, sorted, as intervals) that the shard-like
// placement `p` gives rank `r` of `n`: one interval for S(d), up to k for _S(d,k). Empty for an
// empty shard. _S(0,2) on length 8 over 2 ranks, rank 0: {0:2, 4:6}. Closed-form (no loop over the
// split factor); InputError("placements") when a rank would own more than kMaxShardIntervals
// separate ranges.
std::vector<Interval> ShardIndices(const Placement& p, int64_t length, int64_t n, int64_t r);
// How many indices ShardIndices(p, length, n, r) holds, in O(1) and never refused: _S(0,2) on
// length 8 over 2 ranks, rank 0: 4.
int64_t ShardLength(const Placement& p, int64_t length, int64_t n, int64_t r);

}  // namespace dtsim
