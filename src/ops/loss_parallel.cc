// Loss parallelism: upstream's custom handlers for cross entropy on class-sharded logits.
#include "dtsim/ops/loss_parallel.h"

#include <ATen/ATen.h>

#include "dtsim/core/dtensor.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/planner.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/tensor/mesh_view.h"

namespace dtsim {
namespace ops {
namespace {

// where(keep, x, 0) with the zero a 0-dim tensor of x's device and dtype: the Scalar overload wraps
// a CPU tensor, which metadata runs (meta tensors) cannot mix in.
at::Tensor ElseZero(const at::Tensor& keep, const at::Tensor& x) {
  return at::where(keep, x, at::scalar_tensor(0, x.options()));
}

thread_local bool g_enabled = false;

// The mesh dim that shards tensor dim `dim` of `dt` (exactly one, as upstream requires).
int64_t AllReduceMeshDim(const DTensor& dt, int64_t dim, const std::string& op) {
  int64_t found = -1, count = 0;
  for (size_t m = 0; m < dt.placements().size(); ++m) {
    const Placement& p = dt.placements()[m];
    if (p.is_shard() && p.Normalized(static_cast<int64_t>(dt.shape().size())).dim() == dim) {
      found = static_cast<int64_t>(m);
      ++count;
    }
  }
  if (count != 1) {
    throw InputError("loss-parallel",
                     "aten." + op + " under loss parallelism needs its input sharded on dim " +
                         std::to_string(dim) + " over exactly one mesh dim; got " +
                         ToString(dt.placements()) + " (" + std::to_string(count) + " such dims)");
  }
  return found;
}

GroupSet Groups(const DeviceMesh& mesh, int64_t mesh_dim) {
  return GroupSet::AlongMeshDim(mesh.root(), mesh.root_dims().at(mesh_dim).at(0));
}

// An all-reduce of `local` over `mesh_dim`, told to the observer. Over a mesh dim of size 1 nothing
// moves, but the call is still told (0 bytes): upstream's handlers call funcol.all_reduce whatever
// the group's size, and its CommDebugMode counts those calls, so the per-module counts stay equal
// on a tp mesh of 1.
at::Tensor AllReduce(const DTensor& ref, int64_t mesh_dim, const at::Tensor& local, ReduceOp op,
                     const std::string& cause) {
  Collectives& coll = ref.collectives();
  const DeviceMesh& mesh = ref.mesh();
  const bool alone = mesh.size(mesh_dim) == 1;
  const GroupSet groups = Groups(mesh, mesh_dim);
  at::Tensor out = alone ? local : coll.AllReduce(local, groups, op);
  if (ThreadOpObservers().observed()) {
    int64_t bytes = 0;
    for (int64_t r : alone ? std::vector<int64_t>{} : coll.HeldRanks(local)) {
      const at::Tensor s = coll.Shard(local, r);
      bytes = std::max<int64_t>(bytes, s.numel() * static_cast<int64_t>(s.element_size()));
    }
    CollectiveEvent call;
    call.kind = CollectiveKind::kAllReduce;
    call.mesh_dim = mesh.DimLabel(mesh_dim);
    call.groups = groups.groups;
    call.max_bytes_sent = bytes;
    call.max_bytes_received = bytes;
    call.est_us = CostModel().EstimateUs(CollectiveKind::kAllReduce, mesh.size(mesh_dim), bytes);
    call.cause = cause;
    ThreadOpObservers().Notify([&call](OpObserver& o) { o.OnCollective(call); });
  }
  return out;
}

// A plain argument (a LocalTensor in simulation, this rank's tensor on a real backend) or a DTensor
// (made `target` first) as local data.
at::Tensor LocalOf(const at::Tensor& t, const Placements& target) {
  if (auto dt = FindDTensor(t)) {
    if (dt->placements() != target) {
      return ExecutePlanObserved("loss_parallel target", 0, *dt, PlanFor(dt->spec(), target))
          .to_local();
    }
    return dt->to_local();
  }
  return t;
}

// Upstream's target placements: the input's, with the class dim's shards made Replicate and that
// dim removed (for [N, C] sharded S(1): [R]).
Placements TargetPlacements(const DTensor& x, int64_t channel) {
  Placements out;
  for (const Placement& p : x.placements()) {
    if (p.is_shard_like()) {
      const int64_t d = p.Normalized(static_cast<int64_t>(x.shape().size())).dim();
      if (d == channel) {
        out.push_back(Placement::Replicate());
      } else {
        out.push_back(d > channel ? Placement::Shard(d - 1) : p);
      }
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// [lo, hi): the class range rank `rank`'s shard of `x` holds.
std::pair<int64_t, int64_t> ClassRange(const DTensor& x, int64_t channel, int64_t rank) {
  MeshView view(x.mesh());
  const RankLayout layout = x.spec().LayoutAt(view.Coordinate(rank));
  const int64_t lo = layout.global_offset.at(channel);
  return {lo, lo + layout.local_shape.at(channel)};
}

void LogSoftmax(torch::jit::Stack* stack) {
  const bool half_to_float = stack->back().toBool();
  const int64_t dim_arg = (*stack)[stack->size() - 2].toInt();
  const at::Tensor self = (*stack)[stack->size() - 3].toTensor();
  torch::jit::drop(*stack, 3);
  const DTensor x = GetDTensor(self, "self");
  const int64_t dim = c10::maybe_wrap_dim(dim_arg, static_cast<int64_t>(x.shape().size()));
  const int64_t mesh_dim = AllReduceMeshDim(x, dim, "_log_softmax");
  if (half_to_float) {
    throw InputError("loss-parallel", "_log_softmax with half_to_float is not supported");
  }
  const at::Tensor local = x.to_local().contiguous();
  at::Tensor shifted = local;
  if (x.spec().numel() > 0) {
    at::Tensor x_max = AllReduce(x, mesh_dim, at::amax(local, {dim}, true), ReduceOp::kMax,
                                 "loss_parallel _log_softmax max");
    shifted = local - x_max;
  }
  at::Tensor sumexp = AllReduce(x, mesh_dim, at::sum(at::exp(shifted), {dim}, true), ReduceOp::kSum,
                                "loss_parallel _log_softmax sum of exp");
  at::Tensor result = shifted - at::log(sumexp);
  torch::jit::push(*stack, AsTensor(MakeDTensor(x.spec(), result, x.collectives_ptr())));
}

void LogSoftmaxBackward(torch::jit::Stack* stack) {
  // Upstream computes the whole gradient in nll_loss_backward: this passes it through.
  const c10::ScalarType dtype = stack->back().toScalarType();
  const at::Tensor grad = (*stack)[stack->size() - 4].toTensor();
  torch::jit::drop(*stack, 4);
  const DTensor g = GetDTensor(grad, "grad_output");
  if (grad.scalar_type() == dtype) {
    torch::jit::push(*stack, grad);
    return;
  }
  DTensorSpec spec =
      DTensorSpec::Create(g.mesh(), g.placements(), g.shape(), FromScalarType(dtype));
  torch::jit::push(*stack,
                   AsTensor(MakeDTensor(spec, g.to_local().to(dtype), g.collectives_ptr())));
}

// Reads the shared nll_loss arguments (self, target, weight, reduction, ignore_index).
struct NllArgs {
  DTensor x;
  at::Tensor target;  // local
  int64_t reduction = 1;
  int64_t ignore_index = -100;
  int64_t channel = 1;
  int64_t mesh_dim = 0;
};

NllArgs ReadNll(const at::Tensor& self, const at::Tensor& target, const c10::IValue& weight,
                int64_t reduction, int64_t ignore_index, const std::string& op) {
  if (!weight.isNone() && weight.toTensor().defined()) {
    throw InputError("loss-parallel", "aten." + op + " with class weights is not supported");
  }
  NllArgs a{GetDTensor(self, "self"), at::Tensor(), reduction, ignore_index, 1, 0};
  a.channel = a.x.shape().size() >= 2 ? 1 : 0;
  a.mesh_dim = AllReduceMeshDim(a.x, a.channel, op);
  a.target = LocalOf(target, TargetPlacements(a.x, a.channel));
  return a;
}

void NllLossForward(torch::jit::Stack* stack) {
  const int64_t ignore_index = (*stack)[stack->size() - 1].toSymInt().expect_int();
  const int64_t reduction = (*stack)[stack->size() - 2].toInt();
  const c10::IValue weight = (*stack)[stack->size() - 3];
  const at::Tensor target = (*stack)[stack->size() - 4].toTensor();
  const at::Tensor self = (*stack)[stack->size() - 5].toTensor();
  torch::jit::drop(*stack, 5);
  const NllArgs a = ReadNll(self, target, weight, reduction, ignore_index, "nll_loss_forward");
  Collectives& coll = a.x.collectives();
  const int64_t ch = a.channel;
  // Each rank's log-probability of each target it holds (0 elsewhere), summed over the group.
  at::Tensor partial =
      coll.MapShards(std::vector<at::Tensor>{a.x.to_local(), a.target},
                     [&](int64_t rank, const std::vector<at::Tensor>& s) {
                       const auto [lo, hi] = ClassRange(a.x, ch, rank);
                       const at::Tensor safe = ElseZero(s[1] != a.ignore_index, s[1]);
                       const at::Tensor outside = (safe < lo).bitwise_or(safe >= hi);
                       const at::Tensor idx = (safe - lo).masked_fill(outside, 0).unsqueeze(ch);
                       return at::gather(s[0], ch, idx).squeeze(ch).masked_fill(outside, 0);
                     });
  at::Tensor picked =
      AllReduce(a.x, a.mesh_dim, partial, ReduceOp::kSum, "loss_parallel nll_loss_forward");
  at::Tensor total_weight;
  at::Tensor result = coll.MapShards(std::vector<at::Tensor>{picked, a.target, a.x.to_local()},
                                     [&](int64_t, const std::vector<at::Tensor>& s) {
                                       const at::Tensor keep = s[1] != a.ignore_index;
                                       at::Tensor r = ElseZero(keep, -s[0]);
                                       if (a.reduction == 0) return r;  // none
                                       r = r.sum();
                                       if (a.reduction == 1)
                                         r = r / keep.sum().to(s[2].scalar_type());  // mean
                                       return r;
                                     });
  total_weight = coll.MapShards(std::vector<at::Tensor>{a.target, a.x.to_local()},
                                [&](int64_t, const std::vector<at::Tensor>& s) {
                                  return (s[0] != a.ignore_index).sum().to(s[1].scalar_type());
                                });
  const DeviceMesh& mesh = a.x.mesh();
  Placements out_placements;
  std::vector<int64_t> out_shape;
  if (a.reduction == 0) {
    out_placements = TargetPlacements(a.x, ch);
    out_shape = a.x.shape();
    out_shape.erase(out_shape.begin() + ch);
  } else {
    for (size_t m = 0; m < a.x.placements().size(); ++m) {
      const Placement& p = a.x.placements()[m];
      out_placements.push_back(static_cast<int64_t>(m) == a.mesh_dim ? Placement::Replicate()
                               : p.is_shard()                        ? Placement::Partial()
                                                                     : p);
    }
  }
  DTensorSpec spec = DTensorSpec::Create(mesh, out_placements, out_shape, a.x.spec().dtype());
  torch::jit::push(*stack, AsTensor(MakeDTensor(spec, result, a.x.collectives_ptr())));
  torch::jit::push(*stack, total_weight);
}

void NllLossBackward(torch::jit::Stack* stack) {
  const at::Tensor total_weight_arg = (*stack)[stack->size() - 1].toTensor();
  const int64_t ignore_index = (*stack)[stack->size() - 2].toSymInt().expect_int();
  const int64_t reduction = (*stack)[stack->size() - 3].toInt();
  const c10::IValue weight = (*stack)[stack->size() - 4];
  const at::Tensor target = (*stack)[stack->size() - 5].toTensor();
  const at::Tensor self = (*stack)[stack->size() - 6].toTensor();
  const at::Tensor grad_output = (*stack)[stack->size() - 7].toTensor();
  torch::jit::drop(*stack, 7);
  const NllArgs a = ReadNll(self, target, weight, reduction, ignore_index, "nll_loss_backward");
  Collectives& coll = a.x.collectives();
  const int64_t ch = a.channel;
  DTensor go = GetDTensor(grad_output, "grad_output");
  if (a.reduction == 0) {
    const Placements tp = TargetPlacements(a.x, ch);
    if (go.placements() != tp) {
      go = ExecutePlanObserved("loss_parallel grad_output", 0, go, PlanFor(go.spec(), tp));
    }
  }
  const at::Tensor total_weight =
      LocalOf(total_weight_arg, Placements(a.x.mesh().ndim(), Placement::Replicate()));
  at::Tensor grad =
      coll.MapShards(std::vector<at::Tensor>{go.to_local(), a.x.to_local(), a.target, total_weight},
                     [&](int64_t rank, const std::vector<at::Tensor>& s) {
                       const auto [lo, hi] = ClassRange(a.x, ch, rank);
                       at::Tensor g = s[0];
                       if (a.reduction == 1) g = g / s[3];
                       const at::Tensor t = s[2].unsqueeze(ch);
                       const at::Tensor safe = ElseZero(t != a.ignore_index, t);
                       const at::Tensor outside = (safe < lo).bitwise_or(safe >= hi);
                       const at::Tensor idx = (safe - lo).masked_fill(outside, 0);
                       // -1 at each held target's class, 0 elsewhere; then d(loss)/d(logits) =
                       // (onehot' + p) g.
                       at::Tensor update = outside.to(s[1].scalar_type()) - 1.0;
                       at::Tensor grad_input = at::zeros_like(s[1]).scatter(ch, idx, update);
                       if (grad_input.dim() > g.dim() && g.dim() > 0) g = g.unsqueeze(ch);
                       g = ElseZero(t != a.ignore_index, g);
                       return (grad_input + at::exp(s[1])) * g;
                     });
  torch::jit::push(*stack, AsTensor(MakeDTensor(a.x.spec(), grad, a.x.collectives_ptr())));
}

}  // namespace

LossParallel::LossParallel() : saved_(g_enabled) { g_enabled = true; }
LossParallel::~LossParallel() { g_enabled = saved_; }
bool LossParallelEnabled() { return g_enabled; }

std::vector<CustomHandlerEntry> LossParallelHandlers() {
  // Each entry adapts a stack function of this file to the handler signature.
  return {
      {HandlerSet::kLossParallel, "aten::_log_softmax",
       [](const c10::OperatorHandle&, torch::jit::Stack* stack) { LogSoftmax(stack); }},
      {HandlerSet::kLossParallel, "aten::_log_softmax_backward_data",
       [](const c10::OperatorHandle&, torch::jit::Stack* stack) { LogSoftmaxBackward(stack); }},
      {HandlerSet::kLossParallel, "aten::nll_loss_forward",
       [](const c10::OperatorHandle&, torch::jit::Stack* stack) { NllLossForward(stack); }},
      {HandlerSet::kLossParallel, "aten::nll_loss_backward",
       [](const c10::OperatorHandle&, torch::jit::Stack* stack) { NllLossBackward(stack); }},
  };
}

}  // namespace ops
}  // namespace dtsim
