// The redistribution executor (see the table in include/dtsim/core/redistribute.h).
#include "dtsim/core/redistribute.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "dtsim/layout/error.h"
#include "dtsim/layout/planner.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/mesh_view.h"

namespace dtsim {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Pads `t` with zeros at the end of `dim` up to `size` (no copy when already that size).
at::Tensor PadTo(const at::Tensor& t, int64_t dim, int64_t size) {
  const int64_t have = t.size(dim);
  DTSIM_CHECK(have <= size, "pad ", have, " to ", size);
  if (have == size) return t.contiguous();
  std::vector<int64_t> pad(2 * t.dim(), 0);
  pad[2 * (t.dim() - 1 - dim) + 1] = size - have;
  return at::constant_pad_nd(t, pad, 0);
}

// The pieces of `t` along `dim` at `intervals` (in order), concatenated into a new contiguous
// tensor: what an index select of those indices gives, built from narrow views so that it runs on
// meta tensors too.
at::Tensor GatherIntervals(const at::Tensor& t, int64_t dim,
                           const std::vector<Interval>& intervals) {
  if (intervals.size() == 1)
    return t.narrow(dim, intervals[0].lo, intervals[0].size()).clone(at::MemoryFormat::Contiguous);
  if (intervals.empty()) return t.narrow(dim, 0, 0).clone(at::MemoryFormat::Contiguous);
  std::vector<at::Tensor> pieces;
  pieces.reserve(intervals.size());
  for (const Interval& v : intervals) pieces.push_back(t.narrow(dim, v.lo, v.size()));
  return at::cat(pieces, dim);
}

class Executor {
 public:
  Executor(const DTensorSpec& spec, const PlanStep& step, Collectives& collectives)
      : spec_(spec),
        step_(step),
        view_(spec.mesh()),
        collectives_(collectives),
        n_(spec.mesh().size(step.mesh_dim)) {}

  // Runs the step's collective (the planner and this executor read it off transition.h's one
  // table).
  at::Tensor Run(const at::Tensor& x) {
    const Placement& from = step_.from;
    const Placement& to = step_.to;
    at::Tensor y;
    switch (step_.collective) {
      case CollectiveKind::kNone:
        return x;
      case CollectiveKind::kLocalSplit:
        return ReplicateToShardLike(x, to);
      case CollectiveKind::kLocalPartition:
        return ReplicateToPartial(x, to.reduce_op());
      case CollectiveKind::kAllGather:
        y = from.is_shard() ? ShardToReplicate(x, from.dim()) : StridedToReplicate(x, from);
        break;
      case CollectiveKind::kAllReduce:
        y = collectives_.AllReduce(x, Groups(), from.reduce_op());
        break;
      case CollectiveKind::kReduceScatter:
        return PartialToShard(x, from.reduce_op(), to.dim());
      case CollectiveKind::kAllToAll:
        return ShardToShard(x, from.dim(), to.dim());
      default:
        DTSIM_CHECK(false, "a plan step cannot run ", ToString(step_.collective));
    }
    return step_.then_local_split ? ReplicateToShardLike(y, to) : y;
  }

 private:
  template <typename F>
  at::Tensor MapShards(const at::Tensor& t, F&& fn) const {
    return collectives_.MapShards(t, std::forward<F>(fn));
  }
  GroupSet Groups() const { return view_.Groups(step_.mesh_dim); }
  // The rank's logical size of tensor dim `dim` at this step: its size after the shard-like
  // placements of the mesh dims before this one (per rank, in O(mesh dims), no allocation: this
  // runs for every rank of big worlds).
  int64_t Logical(int64_t rank, int64_t dim) const {
    int64_t size = spec_.shape()[dim];
    for (int64_t m = 0; m < step_.mesh_dim; ++m) {
      const Placement& p = spec_.placements()[m];
      if (p.is_shard_like() && p.dim() == dim) {
        size = ShardLength(p, size, spec_.mesh().size(m), view_.CoordinateAlong(rank, m));
      }
    }
    return size;
  }
  int64_t MyChunk(int64_t rank) const { return view_.CoordinateAlong(rank, step_.mesh_dim); }

  at::Tensor ShardToReplicate(const at::Tensor& x, int64_t d) {
    at::Tensor padded = MapShards(x, [&](int64_t rank, const at::Tensor& s) {
      return PadTo(s, d, CeilDiv(Logical(rank, d), n_));
    });
    at::Tensor gathered = collectives_.AllGather(padded, Groups(), d);
    return MapShards(gathered, [&](int64_t rank, const at::Tensor& g) {
      const int64_t length = Logical(rank, d);
      return length == g.size(d)
                 ? g
                 : g.narrow(d, 0, length).contiguous();  // unpad (nothing to cut: as is)
    });
  }

  at::Tensor ShardToShard(const at::Tensor& x, int64_t old_dim, int64_t new_dim) {
    at::Tensor padded = MapShards(x, [&](int64_t rank, const at::Tensor& s) {
      at::Tensor p = PadTo(s, old_dim, CeilDiv(Logical(rank, old_dim), n_));
      return PadTo(p, new_dim, n_ * CeilDiv(Logical(rank, new_dim), n_));
    });
    at::Tensor exchanged = collectives_.AllToAll(padded, Groups(), new_dim, old_dim);
    return MapShards(exchanged, [&](int64_t rank, const at::Tensor& e) {
      const int64_t old_size = Logical(rank, old_dim);
      const int64_t new_size = ChunkRange(Logical(rank, new_dim), n_, MyChunk(rank)).size();
      return e.narrow(old_dim, 0, old_size).narrow(new_dim, 0, new_size).contiguous();
    });
  }

  at::Tensor ReplicateToShardLike(const at::Tensor& x, const Placement& to) {
    return MapShards(x, [&](int64_t rank, const at::Tensor& s) {
      const int64_t d = to.dim();
      if (to.is_shard()) {  // one interval: no list to build
        const Interval v = ChunkRange(s.size(d), n_, MyChunk(rank));
        return s.narrow(d, v.lo, v.size()).clone(at::MemoryFormat::Contiguous);
      }
      return GatherIntervals(s, d, ShardIndices(to, s.size(d), n_, MyChunk(rank)));
    });
  }

  at::Tensor PartialToShard(const at::Tensor& x, ReduceOp op, int64_t d) {
    at::Tensor padded = MapShards(x, [&](int64_t rank, const at::Tensor& s) {
      return PadTo(s, d, n_ * CeilDiv(s.size(d), n_));
    });
    // Every rank of a group holds the same logical size; remember it per rank before the sizes
    // change.
    at::Tensor scattered = collectives_.ReduceScatter(padded, Groups(), op, d);
    return MapShards(scattered, [&](int64_t rank, const at::Tensor& s) {
      const int64_t size = ChunkRange(Logical(rank, d), n_, MyChunk(rank)).size();
      return s.narrow(d, 0, size).contiguous();
    });
  }

  at::Tensor ReplicateToPartial(const at::Tensor& x, ReduceOp op) {
    switch (op) {
      case ReduceOp::kSum:
        return MapShards(x, [&](int64_t, const at::Tensor& s) { return at::div(s, n_); });
      case ReduceOp::kAvg:
      case ReduceOp::kMin:
      case ReduceOp::kMax:
        return x;
      default:
        throw InputError("placements", StrCat("Replicate to P(", ToString(op),
                                              ") is not supported: no value ", "splits into ", n_,
                                              " parts whose ", ToString(op), " is the original"));
    }
  }

  at::Tensor StridedToReplicate(const at::Tensor& x, const Placement& from) {
    const int64_t d = from.dim();
    at::Tensor padded = MapShards(x, [&](int64_t rank, const at::Tensor& s) {
      const int64_t largest = ShardSize(from, Logical(rank, d), 0);
      return PadTo(s, d, largest);
    });
    at::Tensor gathered = collectives_.AllGather(padded, Groups(), d);
    return MapShards(gathered, [&](int64_t rank, const at::Tensor& g) {
      const int64_t length = Logical(rank, d);
      const int64_t largest = ShardSize(from, length, 0);
      // Rank r's k-th element sits at r * largest + k of `g`; walk the global indices in order, one
      // run of consecutive indices held by one rank at a time.
      std::vector<std::pair<int64_t, Interval>> runs;  // (global start, the run's positions in g)
      for (int64_t r = 0; r < n_; ++r) {
        int64_t k = 0;
        for (const Interval& v : ShardIndices(from, length, n_, r)) {
          runs.push_back({v.lo, Interval{r * largest + k, r * largest + k + v.size()}});
          k += v.size();
        }
      }
      std::sort(runs.begin(), runs.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<Interval> in_g;
      for (const auto& [start, run] : runs) {
        if (!in_g.empty() && in_g.back().hi == run.lo) {
          in_g.back().hi = run.hi;
        } else {
          in_g.push_back(run);
        }
      }
      return GatherIntervals(g, d, in_g);
    });
  }

  int64_t ShardSize(const Placement& p, int64_t length, int64_t r) const {
    return ShardLength(p, length, n_, r);
  }

  const DTensorSpec& spec_;
  const PlanStep& step_;
  MeshView view_;
  Collectives& collectives_;
  const int64_t n_;
};

}  // namespace

at::Tensor ApplyStep(const at::Tensor& local, const DTensorSpec& current, const PlanStep& step,
                     Collectives& collectives) {
  DTSIM_CHECK(step.mesh_dim >= 0 && step.mesh_dim < current.mesh().ndim(), "mesh dim ",
              step.mesh_dim);
  DTSIM_CHECK(current.placements()[step.mesh_dim] == step.from, "step from ", step.from.ToString(),
              " but the spec has ", current.placements()[step.mesh_dim].ToString());
  if (auto why = WhyNotExecutable(current.placements(), current.mesh().shape(), step))
    DTSIM_CHECK(false, *why);
  // Redistribution records no autograd graph (as upstream, gradients would need their own
  // redistribute): dispatch below the autograd keys, which halves the per-op cost of the small
  // pads, narrows and copies.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return Executor(current, step, collectives).Run(local);
}

DTensor ExecutePlan(const DTensor& input, const Plan& plan, const StepObserver& on_step) {
  const DTensorSpec& spec = input.spec();
  Placements canonical;
  for (const Placement& p : spec.placements()) canonical.push_back(p.Canonical());
  if (!plan.mesh.empty() && plan.mesh != spec.mesh().ToString()) {
    throw InputError("plan", StrCat("the plan is for ", plan.mesh, ", the tensor lives on ",
                                    spec.mesh().ToString()));
  }
  if (plan.src != canonical) {
    throw InputError("plan", StrCat("the plan starts at ", ToString(plan.src), ", the tensor is ",
                                    ToString(spec.placements())));
  }
  if (!plan.shape.empty() && plan.shape != spec.shape()) {
    throw InputError("plan", StrCat("the plan is for shape ", IntListToString(plan.shape),
                                    ", the tensor has ", IntListToString(spec.shape())));
  }
  if (auto why = WhyNotExecutable(plan, spec.mesh().shape())) throw InputError("plan", *why);
  DTensorSpec current = DTensorSpec::Create(spec.mesh(), canonical, spec.shape(), spec.dtype());
  at::Tensor local = input.to_local();
  for (const PlanStep& step : plan.steps) {
    local = ApplyStep(local, current, step, input.collectives());
    current = SpecAfter(current, Transition{step.mesh_dim, step.from, step.to});
    if (on_step) on_step(step, current, local);
  }
  return MakeDTensor(std::move(current), std::move(local), input.collectives_ptr(), input.stride());
}

PlanStep StepFor(const DTensorSpec& current, const Transition& t) {
  PlanStep step;
  step.mesh_dim = t.mesh_dim;
  step.from = step.upstream_from = t.from;
  step.to = step.upstream_to = t.to;
  const TransitionRule rule = RuleFor(t.from, t.to, current.mesh().size(t.mesh_dim), t.mesh_dim);
  step.collective = rule.collective;
  step.then_local_split = rule.then_local_split;
  step.placements_before = current.placements();
  step.placements_after = current.placements();
  step.placements_after[t.mesh_dim] = t.to;
  return step;
}

at::Tensor ApplyTransition(const at::Tensor& local, const DTensorSpec& current, const Transition& t,
                           Collectives& collectives) {
  return ApplyStep(local, current, StepFor(current, t), collectives);
}

DTensorSpec SpecAfter(const DTensorSpec& current, const Transition& t) {
  Placements next = current.placements();
  next[t.mesh_dim] = t.to;
  return DTensorSpec::Create(current.mesh(), next, current.shape(), current.dtype());
}

DTensor PartitionReplicas(const DTensor& dt, const Placements& target) {
  if (dt.placements() == target) return dt;
  at::Tensor local = dt.to_local();
  DTensorSpec spec = dt.spec();
  for (size_t m = 0; m < target.size(); ++m) {
    if (spec.placements()[m] == target[m]) continue;
    const Transition t{static_cast<int64_t>(m), spec.placements()[m], target[m]};
    local = ApplyTransition(local, spec, t, dt.collectives());
    spec = SpecAfter(spec, t);
  }
  return MakeDTensor(spec, local, dt.collectives_ptr(), dt.stride());
}

DTensor RedistributeInternal(const DTensor& input, const Placements& target, Plan* plan) {
  const Placements planned = WithoutNewPartials(input.placements(), target);
  DTensor dt = input;
  if (dt.placements() != planned) {
    Plan p = PlanFor(dt.spec(), planned);
    dt = ExecutePlan(dt, p);
    if (plan) *plan = std::move(p);
  } else if (plan) {
    *plan = Plan{};
  }
  return PartitionReplicas(dt, target);
}

}  // namespace dtsim
