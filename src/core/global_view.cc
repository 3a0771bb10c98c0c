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
  // covered: 0 where no rank wrote yet, else the writing rank + 1 (to name it when a replica
  // disagrees).
  std::map<std::vector<int64_t>, at::Tensor> globals, covered;
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
      covered[key] = at::zeros(spec.shape(), at::kLong);
    }
    at::Tensor& g = globals[key];
    at::Tensor& c = covered[key];
    at::Tensor seen = ShardOf(c, layout);
    bool first = seen.numel() == 0 || seen.max().item<int64_t>() == 0;
    bool all = seen.numel() == 0 || seen.min().item<int64_t>() > 0;
    if (!first && !all) {
      result.problem = StrCat("rank ", rank, " overlaps other ranks' blocks only in part");
      return result;
    }
    if (all && !first) {
      at::Tensor before = ShardOf(g, layout);
      if (!SameValues(before, shard)) {
        // Without the expected values neither replica can be blamed (JudgeAgainstGlobal can).
        const int64_t other = seen.max().item<int64_t>() - 1;
        result.problem = StrCat("ranks ", std::min(other, rank), " and ", std::max(other, rank),
                                " hold the same block but disagree on its values");
        return result;
      }
      continue;
    }
    ForEachBlock(g, shard, layout, [](at::Tensor gb, at::Tensor lb) { gb.copy_(lb); });
    ForEachBlock(c, shard, layout, [rank](at::Tensor cb, at::Tensor) { cb.fill_(rank + 1); });
  }
  for (const auto& [key, c] : covered) {
    if (c.numel() > 0 && c.min().item<int64_t>() == 0) {
      result.problem = "some elements of the global tensor are held by no rank";
      return result;
    }
  }
  result.global = ReducePartials(globals, spec, partial_dims);
  return result;
}

Judgement JudgeAgainstGlobal(const DTensorSpec& spec, const at::Tensor& local,
                             const at::Tensor& expected, double rtol) {
  Judgement out;
  for (const Placement& p : spec.placements()) {
    if (!p.is_partial()) continue;
    // A Partial shard is a summand, not a part of `expected`: put the world back together.
    Assembled assembled = AssembleGlobal(spec, local);
    if (!assembled.global) {
      out.problem = assembled.problem;
    } else if (!SameValues(*assembled.global, expected, rtol)) {
      out.problem = "the global tensor differs from the expected one";
    }
    out.ok = out.problem.empty();
    return out;
  }
  // Every rank's shard against its own part of `expected`: the ranks named are the ones that are
  // wrong, whichever replica comes first.
  std::string example;
  MeshView view(spec.mesh());
  for (int64_t rank : view.ranks()) {
    const RankLayout layout = ComputeRankLayout(spec.shape(), spec.mesh().shape(),
                                                view.Coordinate(rank), spec.placements(), rank);
    const at::Tensor shard = LocalShard(local, rank);
    if (shard.sizes().vec() != layout.local_shape) {
      if (out.wrong_ranks.empty()) {
        example = StrCat("rank ", rank, " holds shape ", IntListToString(shard.sizes().vec()),
                         " but its layout gives ", IntListToString(layout.local_shape));
      }
      out.wrong_ranks.push_back(rank);
      continue;
    }
    const at::Tensor want = ShardOf(expected, layout);
    if (SameValues(shard, want, rtol)) continue;
    if (out.wrong_ranks.empty()) {
      const bool approx = rtol > 0 && at::isFloatingType(shard.scalar_type());
      const at::Tensor differs =
          approx ? at::logical_not(at::isclose(shard.to(at::kDouble), want.to(at::kDouble), rtol,
                                               1e-9, /*equal_nan=*/true))
                 : at::ne(shard, want);
      example = StrCat("rank ", rank, ": ", differs.sum().item<int64_t>(), " of ", shard.numel(),
                       " elements differ");
    }
    out.wrong_ranks.push_back(rank);
  }
  if (!out.wrong_ranks.empty()) {
    const size_t n = out.wrong_ranks.size();
    std::string list;
    for (size_t i = 0; i < std::min<size_t>(n, 16); ++i) {
      list += StrCat(i ? ", " : "", out.wrong_ranks[i]);
    }
    if (n > 16) list += StrCat(", … (", n, " ranks)");
    out.problem = StrCat("rank", n == 1 ? " " : "s ", list, n == 1 ? " holds" : " hold",
                         " values that differ from the expected global tensor (", example, ")");
  }
  out.ok = out.problem.empty();
  return out;
}

bool SameValues(const at::Tensor& a, const at::Tensor& b, double rtol) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  if (rtol > 0 && at::isFloatingType(a.scalar_type())) {
    return at::allclose(a.to(at::kDouble), b.to(at::kDouble), rtol, 1e-9, /*equal_nan=*/true);
  }
  return at::equal(a, b);
}

}  // namespace dtsim
