// The global-tensor judge (see include/dtsim/core/global_view.h).
#include "dtsim/core/global_view.h"

#include <ATen/ATen.h>

#include "dtsim/core/dtensor.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {
namespace {

// Calls fn(global_block, local_block) for every block of the product of `layout`'s intervals.
void ForEachBlock(const at::Tensor& global, const at::Tensor& local, const RankLayout& layout,
                  const std::function<void(at::Tensor, at::Tensor)>& fn) {
  const int64_t ndim = static_cast<int64_t>(layout.intervals.size());
  if (layout.numel() == 0) return;
  std::vector<size_t> which(ndim, 0);
  std::vector<int64_t> local_start(ndim, 0);
  while (true) {
    at::Tensor g = global, l = local;
    for (int64_t d = 0; d < ndim; ++d) {
      const Interval& v = layout.intervals[d][which[d]];
      int64_t start = 0;
      for (size_t k = 0; k < which[d]; ++k) start += layout.intervals[d][k].size();
      g = g.narrow(d, v.lo, v.size());
      l = l.narrow(d, start, v.size());
    }
    fn(g, l);
    int64_t d = ndim - 1;
    for (; d >= 0; --d) {
      if (++which[d] < layout.intervals[d].size()) break;
      which[d] = 0;
    }
    if (d < 0) break;
  }
}

}  // namespace

at::Tensor ShardOf(const at::Tensor& global, const RankLayout& layout) {
  at::Tensor out = global;
  for (size_t d = 0; d < layout.intervals.size(); ++d) {
    const auto& intervals = layout.intervals[d];
    if (intervals.size() == 1 && intervals[0].lo == 0 && intervals[0].hi == global.size(d))
      continue;
    if (intervals.empty()) {
      out = out.narrow(d, 0, 0);
      continue;
    }
    std::vector<at::Tensor> pieces;
    for (const Interval& v : intervals) pieces.push_back(out.narrow(d, v.lo, v.size()));
    out = pieces.size() == 1 ? pieces[0] : at::cat(pieces, d);
  }
  return out.clone(at::MemoryFormat::Contiguous);
}

at::Tensor ReducePartials(const std::map<std::vector<int64_t>, at::Tensor>& values,
                          const DTensorSpec& spec, const std::vector<int64_t>& partial_dims) {
  if (partial_dims.empty()) return values.begin()->second;
  // Reduce the first partial dim: group by the remaining coordinates.
  const int64_t m = partial_dims[0];
  const ReduceOp op = spec.placements()[m].reduce_op();
  std::map<std::vector<int64_t>, std::vector<at::Tensor>> groups;
  for (const auto& [coord, value] : values) {
    groups[std::vector<int64_t>(coord.begin() + 1, coord.end())].push_back(value);
  }
  std::map<std::vector<int64_t>, at::Tensor> reduced;
  for (auto& [rest, items] : groups) {
    at::Tensor acc = items[0].clone();
    for (size_t i = 1; i < items.size(); ++i) {
      const at::Tensor& v = items[i];
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc.add_(v);
          break;
        case ReduceOp::kMin:
          acc = at::minimum(acc, v);
          break;
        case ReduceOp::kMax:
          acc = at::maximum(acc, v);
          break;
        case ReduceOp::kProduct:
          acc.mul_(v);
          break;
        case ReduceOp::kBand:
          acc.bitwise_and_(v);
          break;
        case ReduceOp::kBor:
          acc.bitwise_or_(v);
          break;
        case ReduceOp::kBxor:
          acc.bitwise_xor_(v);
          break;
      }
    }
    if (op == ReduceOp::kAvg)
      acc = at::div(acc, static_cast<int64_t>(items.size())).to(acc.scalar_type());
    reduced[rest] = acc;
  }
  return ReducePartials(reduced, spec,
                        std::vector<int64_t>(partial_dims.begin() + 1, partial_dims.end()));
}

Assembled AssembleGlobal(const DTensorSpec& spec, const at::Tensor& local) {
  Assembled result;
  std::vector<int64_t> partial_dims;
  for (int64_t m = 0; m < spec.mesh().ndim(); ++m) {
    if (spec.placements()[m].is_partial()) partial_dims.push_back(m);
  }
  MeshView view(spec.mesh());
  std::map<std::vector<int64_t>, at::Tensor> globals, covered;
  std::map<std::vector<int64_t>, std::vector<std::pair<int64_t, at::Tensor>>> writers;
  for (int64_t rank : view.ranks()) {
    const std::vector<int64_t> coordinate = view.Coordinate(rank);
    std::vector<int64_t> key;
    for (int64_t m : partial_dims) key.push_back(coordinate[m]);
    RankLayout layout =
        ComputeRankLayout(spec.shape(), spec.mesh().shape(), coordinate, spec.placements(), rank);
    at::Tensor shard = LocalShard(local, rank);
    if (shard.sizes().vec() != layout.local_shape) {
      result.problem = StrCat("rank ", rank, " holds shape ", IntListToString(shard.sizes().vec()),
                              " but the layout ", "gives ", IntListToString(layout.local_shape));
      return result;
    }
    if (!globals.count(key)) {
      globals[key] = at::zeros(spec.shape(), shard.options());
      covered[key] = at::zeros(spec.shape(), at::kInt);
    }
    at::Tensor& g = globals[key];
    at::Tensor& c = covered[key];
    at::Tensor seen = ShardOf(c, layout);
    bool first = seen.numel() == 0 || seen.max().item<int>() == 0;
    bool all = seen.numel() == 0 || seen.min().item<int>() > 0;
    if (!first && !all) {
      result.problem = StrCat("rank ", rank, " overlaps other ranks' blocks only in part");
      return result;
    }
    if (all && !first) {
      at::Tensor before = ShardOf(g, layout);
      if (!SameValues(before, shard)) {
        result.problem = StrCat("rank ", rank, " disagrees with a replica holding the same block");
        return result;
      }
      continue;
    }
    ForEachBlock(g, shard, layout, [](at::Tensor gb, at::Tensor lb) { gb.copy_(lb); });
    ForEachBlock(c, shard, layout, [](at::Tensor cb, at::Tensor) { cb.fill_(1); });
  }
  for (const auto& [key, c] : covered) {
    if (c.numel() > 0 && c.min().item<int>() == 0) {
      result.problem = "some elements of the global tensor are held by no rank";
      return result;
    }
  }
  result.global = ReducePartials(globals, spec, partial_dims);
  return result;
}

bool SameValues(const at::Tensor& a, const at::Tensor& b, double rtol) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (rtol > 0 && at::isFloatingType(a.scalar_type())) {
    return at::allclose(a.to(at::kDouble), b.to(at::kDouble), rtol, 1e-9, /*equal_nan=*/true);
  }
  return at::equal(a, b);
}

}  // namespace dtsim
