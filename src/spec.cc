// DTensorSpec and the per-rank layout arithmetic (see the narrative in include/dtsim/spec.h).
#include "dtsim/spec.h"

#include <algorithm>

#include "dtsim/error.h"

namespace dtsim {
namespace {

}  // namespace

std::vector<Interval> ShardIndices(const Placement& p, int64_t length, int64_t n, int64_t r) {
  DTSIM_CHECK(p.is_shard_like(), "ShardIndices of ", p.ToString());
  std::vector<Interval> out;
  if (p.is_shard()) {
    Interval range = ChunkRange(length, n, r);
    if (range.size() > 0) out.push_back(range);
    return out;
  }
  const int64_t k = p.split_factor();
  // Pieces past the end are empty: with chunk size c only ceil(length / c) pieces hold anything (a split factor far
  // larger than the dim costs nothing).
  const int64_t c = (length + k - 1) / k;
  const int64_t pieces = c == 0 ? 0 : std::min(k, (length + c - 1) / c);
  for (int64_t j = 0; j < pieces; ++j) {
    Interval piece = ChunkRange(length, k, j);
    Interval sub = ChunkRange(piece.size(), n, r);
    if (sub.size() == 0) continue;
    Interval global{piece.lo + sub.lo, piece.lo + sub.hi};
    if (!out.empty() && out.back().hi == global.lo) {
      out.back().hi = global.hi;
    } else {
      out.push_back(global);
    }
  }
  return out;
}

int64_t ShardLength(const Placement& p, int64_t length, int64_t n, int64_t r) {
  DTSIM_CHECK(p.is_shard_like(), "ShardLength of ", p.ToString());
  if (p.is_shard()) return ChunkRange(length, n, r).size();
  // Every piece but the last has the chunk size c; the last has what is left (see ShardIndices).
  const int64_t k = p.split_factor();
  const int64_t c = (length + k - 1) / k;
  if (c == 0) return 0;
  const int64_t pieces = std::min(k, (length + c - 1) / c);
  return (pieces - 1) * ChunkRange(c, n, r).size() + ChunkRange(length - (pieces - 1) * c, n, r).size();
}

std::vector<int64_t> LocalShapeAt(const std::vector<int64_t>& global_shape, const std::vector<int64_t>& mesh_shape,
                                  const std::vector<int64_t>& coordinate, const Placements& placements) {
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

// Maps local index intervals through `owned` (the global indices of local positions 0, 1, ...).
std::vector<Interval> Compose(const std::vector<Interval>& owned, const std::vector<Interval>& local) {
  std::vector<Interval> out;
  auto push = [&](Interval v) {
    if (v.size() <= 0) return;
    if (!out.empty() && out.back().hi == v.lo) {
      out.back().hi = v.hi;
    } else {
      out.push_back(v);
    }
  };
  for (const Interval& want : local) {
    int64_t pos = 0;  // local position of the start of the current owned interval
    for (const Interval& have : owned) {
      int64_t lo = std::max(want.lo, pos), hi = std::min(want.hi, pos + have.size());
      if (lo < hi) push({have.lo + (lo - pos), have.lo + (hi - pos)});
      pos += have.size();
      if (pos >= want.hi) break;
    }
  }
  return out;
}

}  // namespace

Interval ChunkRange(int64_t length, int64_t n, int64_t r) {
  DTSIM_CHECK(n >= 1 && r >= 0 && r < n, "chunk ", r, " of ", n);
  const int64_t chunk = (length + n - 1) / n;
  const int64_t lo = std::min(length, chunk * r);
  const int64_t hi = std::min(length, chunk * (r + 1));
  return {lo, std::max(lo, hi)};
}

int64_t RankLayout::numel() const {
  int64_t n = 1;
  for (int64_t s : local_shape) n *= s;
  return n;
}

RankLayout ComputeRankLayout(const std::vector<int64_t>& global_shape, const std::vector<int64_t>& mesh_shape,
                             const std::vector<int64_t>& coordinate, const Placements& placements, int64_t rank) {
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
    DTSIM_CHECK(d >= 0 && d < static_cast<int64_t>(ndim), "placement ", p.ToString(), " not normalised");
    std::vector<Interval> local = ShardIndices(p, layout.local_shape[d], mesh_shape[m], coordinate[m]);
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

DTensorSpec DTensorSpec::Create(DeviceMesh mesh, Placements placements, std::vector<int64_t> shape, DType dtype) {
  if (placements.size() != static_cast<size_t>(mesh.ndim())) {
    throw InputError("placements", StrCat(placements.size(), " placement", placements.size() == 1 ? "" : "s", " ",
                                          dtsim::ToString(placements), " for ", mesh.ToString(), " of ", mesh.ndim(),
                                          " dim", mesh.ndim() == 1 ? "" : "s", "; give one per mesh dim"));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      throw InputError("shape", StrCat("dim ", d, " has size ", shape[d], " in ", IntListToString(shape),
                                       "; sizes must be >= 0"));
    }
  }
  long double elements = 1;
  for (int64_t d : shape) elements *= static_cast<long double>(d);
  if (elements > static_cast<long double>(int64_t{1} << 62)) {
    throw InputError("shape", StrCat(IntListToString(shape), " has more than 2^62 elements"));
  }
  for (Placement& p : placements) p = p.Normalized(static_cast<int64_t>(shape.size()));
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
  return ComputeRankLayout(shape_, mesh_.shape(), coordinate, placements_, mesh_.RankAt(coordinate));
}

RankLayout DTensorSpec::LayoutOfRank(int64_t rank) const { return LayoutAt(mesh_.GetCoordinate(rank)); }

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
  return StrCat(mesh_.ToString(), " ", dtsim::ToString(placements_), " shape=", IntListToString(shape_), " ",
                dtsim::ToString(dtype_));
}

}  // namespace dtsim
