// DTensorSpec and the per-rank layout arithmetic (see the narrative in
// include/dtsim/layout/spec.h).
#include "dtsim/layout/spec.h"

#include <algorithm>
#include <limits>

#include "dtsim/layout/checked_math.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

// Appends `v` to the sorted intervals `out`, merged with the last one where they touch; empty
// intervals are dropped.
void AppendMerged(std::vector<Interval>& out, Interval v) {
  if (v.size() <= 0) return;
  if (!out.empty() && out.back().hi == v.lo) {
    out.back().hi = v.hi;
  } else {
    out.push_back(v);
  }
}

}  // namespace

std::vector<Interval> ShardIndices(const Placement& p, int64_t length, int64_t n, int64_t r) {
  DTSIM_CHECK(p.is_shard_like(), "ShardIndices of ", p.ToString());
  std::vector<Interval> out;
  auto push = [&](Interval v) { AppendMerged(out, v); };
  if (p.is_shard()) {
    push(ChunkRange(length, n, r));
    return out;
  }
  // The chunk split into k pieces of size c = ceil(length / k) gives q = length / c full pieces,
  // then one partial piece of rem = length - q·c indices (when rem > 0), then empty pieces: a split
  // factor far larger than the dim costs nothing. Rank r takes the same sub-range of every full
  // piece, so this is closed-form.
  const int64_t k = p.split_factor();
  const int64_t c = CeilDiv(length, k);
  if (c == 0) return out;
  const int64_t q = length / c;
  const int64_t rem = length - q * c;
  const Interval full = ChunkRange(c, n, r);
  if (full.size() == c) {
    push({0, q * c});  // whole pieces: one range
  } else if (full.size() > 0) {
    if (q > kMaxShardIntervals) {
      throw InputError("placements", StrCat("'", p.ToString(), "' on a dim of size ", length,
                                            " over ", n, " ranks gives each rank ", q,
                                            " separate index ranges; dtsim keeps at most ",
                                            kMaxShardIntervals, " per rank and dim"));
    }
    out.reserve(q + 1);
    for (int64_t j = 0; j < q; ++j) push({j * c + full.lo, j * c + full.hi});
  }
  if (rem > 0) {
    const Interval part = ChunkRange(rem, n, r);
    push({q * c + part.lo, q * c + part.hi});
  }
  return out;
}

int64_t ShardLength(const Placement& p, int64_t length, int64_t n, int64_t r) {
  DTSIM_CHECK(p.is_shard_like(), "ShardLength of ", p.ToString());
  if (p.is_shard()) return ChunkRange(length, n, r).size();
  // Every piece but the last has the chunk size c; the last has what is left (see ShardIndices).
  const int64_t k = p.split_factor();
  const int64_t c = CeilDiv(length, k);
  if (c == 0) return 0;
  const int64_t pieces = std::min(k, (length + c - 1) / c);
  return (pieces - 1) * ChunkRange(c, n, r).size() +
         ChunkRange(length - (pieces - 1) * c, n, r).size();
}

std::vector<int64_t> LocalShapeAt(const std::vector<int64_t>& global_shape,
                                  const std::vector<int64_t>& mesh_shape,
                                  const std::vector<int64_t>& coordinate,
                                  const Placements& placements) {
  DTSIM_CHECK(placements.size() == mesh_shape.size() && coordinate.size() == mesh_shape.size(),
              "placements/coordinate do not match the mesh");
  std::vector<int64_t> shape = global_shape;
  for (size_t m = 0; m < placements.size(); ++m) {
    const Placement& p = placements[m];
    if (!p.is_shard_like()) continue;
    int64_t& size = shape.at(p.dim());
    size = ShardLength(p, size, mesh_shape[m], coordinate[m]);
  }
  return shape;
}

namespace {

// Maps local index intervals (sorted) through `owned` (the global indices of local positions 0, 1,
// ...), in one pass over both lists.
std::vector<Interval> Compose(const std::vector<Interval>& owned,
                              const std::vector<Interval>& local) {
  std::vector<Interval> out;
  auto push = [&](Interval v) { AppendMerged(out, v); };
  size_t i = 0;     // the owned interval under consideration
  int64_t pos = 0;  // local position of the start of owned[i]
  for (const Interval& want : local) {
    while (i < owned.size() && pos + owned[i].size() <= want.lo) pos += owned[i++].size();
    for (size_t j = i; j < owned.size();) {
      const Interval& have = owned[j];
      const int64_t lo = std::max(want.lo, pos), hi = std::min(want.hi, pos + have.size());
      if (lo < hi) push({have.lo + (lo - pos), have.lo + (hi - pos)});
      if (pos + have.size() > want.hi)
        break;  // owned[j] continues past this want: the next want may use it
      pos += have.size();
      i = ++j;
    }
  }
  return out;
}

}  // namespace

Interval ChunkRange(int64_t length, int64_t n, int64_t r) {
  DTSIM_CHECK(n >= 1 && r >= 0 && r < n && length >= 0, "chunk ", r, " of ", n, " of length ",
              length);
  const int64_t chunk = CeilDiv(length, n);
  if (chunk == 0) return {0, 0};
  // chunk * r may exceed int64 when n is a huge split factor; from piece ceil(length / chunk) on,
  // the start is clamped to `length` anyway.
  const int64_t filled = CeilDiv(length, chunk);
  const int64_t lo = r >= filled ? length : std::min(length, chunk * r);
  const int64_t hi = r + 1 >= filled ? length : std::min(length, chunk * (r + 1));
  return {lo, std::max(lo, hi)};
}

int64_t RankLayout::numel() const {
  int64_t n = 1;
  for (int64_t s : local_shape) n *= s;
  return n;
}

RankLayout ComputeRankLayout(const std::vector<int64_t>& global_shape,
                             const std::vector<int64_t>& mesh_shape,
                             const std::vector<int64_t>& coordinate, const Placements& placements,
                             int64_t rank) {
  DTSIM_CHECK(placements.size() == mesh_shape.size() && coordinate.size() == mesh_shape.size(),
              "placements/coordinate do not match the mesh");
  const size_t ndim = global_shape.size();
  RankLayout layout;
  layout.rank = rank;
  layout.coordinate = coordinate;
  layout.local_shape = global_shape;
  layout.global_offset.assign(ndim, 0);
  layout.intervals.resize(ndim);
  std::vector<bool> sharded(ndim, false), emptied(ndim, false);
  for (size_t d = 0; d < ndim; ++d) {
    if (global_shape[d] > 0) layout.intervals[d].push_back({0, global_shape[d]});
  }
  for (size_t m = 0; m < placements.size(); ++m) {
    const Placement& p = placements[m];
    if (!p.is_shard_like()) continue;
    const int64_t d = p.dim();
    DTSIM_CHECK(d >= 0 && d < static_cast<int64_t>(ndim), "placement ", p.ToString(),
                " not normalised");
    std::vector<Interval> local =
        ShardIndices(p, layout.local_shape[d], mesh_shape[m], coordinate[m]);
    int64_t size = 0;
    for (const Interval& v : local) size += v.size();
    layout.local_shape[d] = size;
    sharded[d] = true;
    layout.intervals[d] = Compose(layout.intervals[d], local);
    emptied[d] = size == 0;
  }
  for (size_t d = 0; d < ndim; ++d) {
    if (!sharded[d]) continue;
    layout.global_offset[d] = emptied[d] ? global_shape[d] : layout.intervals[d].front().lo;
  }
  return layout;
}

DTensorSpec DTensorSpec::Create(DeviceMesh mesh, Placements placements, std::vector<int64_t> shape,
                                DType dtype) {
  if (placements.size() != static_cast<size_t>(mesh.ndim())) {
    throw InputError(
        "placements",
        StrCat(placements.size(), " placement", placements.size() == 1 ? "" : "s", " ",
               ExcerptText(dtsim::ToString(placements)), " for ", mesh.ToString(), " of ",
               mesh.ndim(), " dim", mesh.ndim() == 1 ? "" : "s", "; give one per mesh dim"));
  }
  if (static_cast<int64_t>(shape.size()) > kMaxTensorDims) {
    throw InputError("shape", StrCat(ExcerptText(IntListToString(shape)), " has ", shape.size(),
                                     " dims; a tensor has at most ", kMaxTensorDims));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      throw InputError("shape", StrCat("dim ", d, " has size ", shape[d], " in ",
                                       IntListToString(shape), "; sizes must be >= 0"));
    }
  }
  long double elements = 1;
  for (int64_t d : shape) elements *= static_cast<long double>(d);
  if (elements > static_cast<long double>(kMaxTensorElements)) {
    throw InputError("shape", StrCat(IntListToString(shape), " has more than 2^62 elements"));
  }
  // A tensor's bytes must fit ATen's storage size (int64): 2^62 four-byte elements do not.
  if (elements * static_cast<long double>(ItemSize(dtype)) >
      static_cast<long double>(std::numeric_limits<int64_t>::max())) {
    throw InputError("shape", StrCat(IntListToString(shape), " ", dtsim::ToString(dtype),
                                     " is more than 2^63 - 1 bytes, the most a tensor's storage "
                                     "holds"));
  }
  for (Placement& p : placements) p = p.Normalized(static_cast<int64_t>(shape.size()));
  for (const Placement& p : placements) {
    if (!p.is_partial()) continue;
    const ReduceOp op = p.reduce_op();
    if ((op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor) &&
        !IsIntegral(dtype)) {
      throw InputError("placements", StrCat("'", p.ToString(),
                                            "' reduces with a bitwise op, which needs an integer "
                                            "or bool dtype, not ",
                                            dtsim::ToString(dtype)));
    }
    if (op == ReduceOp::kAvg && IsIntegral(dtype)) {
      throw InputError("placements",
                       StrCat("'", p.ToString(), "' divides, which needs a floating dtype, not ",
                              dtsim::ToString(dtype)));
    }
  }
  DTensorSpec spec(std::move(mesh));
  spec.placements_ = std::move(placements);
  spec.shape_ = std::move(shape);
  spec.dtype_ = dtype;
  return spec;
}

int64_t DTensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

RankLayout DTensorSpec::LayoutAt(const std::vector<int64_t>& coordinate) const {
  return ComputeRankLayout(shape_, mesh_.shape(), coordinate, placements_,
                           mesh_.RankAt(coordinate));
}

RankLayout DTensorSpec::LayoutOfRank(int64_t rank) const {
  return LayoutAt(mesh_.GetCoordinate(rank));
}

std::vector<RankLayout> DTensorSpec::AllLayouts() const {
  std::vector<RankLayout> out;
  out.reserve(mesh_.size());
  for (int64_t rank : mesh_.ranks()) out.push_back(LayoutOfRank(rank));
  return out;
}

bool DTensorSpec::has_partial() const {
  for (const Placement& p : placements_) {
    if (p.is_partial()) return true;
  }
  return false;
}

bool DTensorSpec::has_nested_shards() const {
  std::vector<int> count(shape_.size(), 0);
  for (const Placement& p : placements_) {
    if (p.is_strided_shard()) return true;
    if (p.is_shard() && ++count[p.dim()] > 1) return true;
  }
  return false;
}

std::string DTensorSpec::ToString() const {
  return StrCat(mesh_.ToString(), " ", dtsim::ToString(placements_),
                " shape=", IntListToString(shape_), " ", dtsim::ToString(dtype_));
}

}  // namespace dtsim
