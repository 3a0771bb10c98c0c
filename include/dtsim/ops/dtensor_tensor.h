// DTensor as an at::Tensor: a wrapper tensor whose sizes, strides and dtype are the DTensor's
// global ones, so ATen ops — and LibTorch code built on them (torch::nn modules, functional calls,
// autograd) — run on DTensors unchanged, as upstream's DTensor is a torch.Tensor subclass.
//
// Every ATen op with a DTensor argument reaches one kernel (dispatch key PrivateUse2; ops with a
// CompositeImplicitAutograd kernel decompose first, exactly as they do before upstream's
// __torch_dispatch__). The kernel asks sharding propagation (sharding_prop.h) for the placements,
// redistributes the inputs that need it through the DTensor's planner and collectives (simulated or
// real), runs the op on the local data (a LocalTensor in simulation, this rank's tensor on a real
// backend) and wraps the results with the chosen specs. A 0-d plain tensor mixed in is a replicated
// scalar; any other plain tensor is refused, as upstream does.
//
// Example (8 simulated ranks):
// clang-format off
//   DeviceMesh mesh = DeviceMesh::Create({2, 4}, {"dp", "tp"});
//   at::Tensor x = AsTensor(DistributeTensor(at::randn({8, 16}), mesh, ParsePlacements("S(0),R")));
//   at::Tensor w = AsTensor(DistributeTensor(at::randn({16, 12}), mesh, ParsePlacements("R,S(1)")));
//   at::Tensor y = at::mm(x, w);     // no communication: y is [S(0), S(1)] of shape [8, 12]
//   GetDTensor(y).placements();      // [S(0), S(1)]
// clang-format on
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "dtsim/core/dtensor.h"
#include "dtsim/layout/plan.h"
#include "dtsim/ops/sharding_prop.h"
#include "dtsim/trace/collective_event.h"
#include "dtsim/trace/observers.h"

namespace dtsim {
namespace ops {

// Wraps `dt` (no copy: the wrapper holds the DTensor, whose local data it shares).
at::Tensor AsTensor(DTensor dt);
bool IsDTensor(const at::Tensor& t);
// The DTensor behind a wrapper, or nullopt for any other tensor.
std::optional<DTensor> FindDTensor(const at::Tensor& t);
// The DTensor behind a wrapper; InputError(field) for any other tensor.
DTensor GetDTensor(const at::Tensor& t, const std::string& field = "tensor");

// One input's implicit redistribution inside an op call.
struct OpRedistribution {
  size_t input = 0;  // index among the op's tensor inputs (OpCallInfo::inputs order)
  Placements from;
  Placements to;
  Plan plan;  // the steps that ran (empty steps for a change that ran locally only: R -> P)
};

// What one op call on DTensors did.
struct OpEvent {
  std::string op;                            // "aten::mm"
  std::vector<TensorMeta> inputs;            // global metadata of the tensor inputs
  std::vector<Placements> input_placements;  // before any redistribution
  ShardingDecision decision;
  std::vector<OpRedistribution> redistributions;
  std::vector<std::optional<DTensorSpec>> outputs;  // per tensor output (nullopt: undefined)
  bool cache_hit = false;  // the decision came from the (op, input specs) cache
  // How the local op ran over the simulated ranks: batched, computed once, or per rank and why
  // (LastRankExecution, local_tensor.h); empty on real ranks.
  std::string local_execution;
};

// Receives every op call on DTensors made by this thread while registered (ThreadOpObservers).
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void OnOp(const OpEvent& event) = 0;
  // An implicit redistribution of tensor input `input` (OpRedistribution::input) of `op` runs
  // `plan` on `source` (ExecutePlan): OnRedistributeStep hears every step as ExecutePlan's
  // StepObserver does, OnRedistributeEnd the result. Only the planned part is reported: a local
  // R -> P that may follow moves no data. All three come before the op's OnOp. Default: nothing.
  virtual void OnRedistributeBegin(const std::string& op, size_t input, const DTensor& source,
                                   const Plan& plan) {}
  virtual void OnRedistributeStep(const PlanStep& step, const DTensorSpec& spec,
                                  const at::Tensor& local) {}
  virtual void OnRedistributeEnd(const DTensor& result) {}
  // A collective run outside any redistribution plan (fully_shard's all-gather and reduce-scatter
  // of a parameter group, say) as planned: kind, mesh dim, groups, max bytes, est_us and cause, no
  // rows. Default: nothing.
  virtual void OnCollective(const CollectiveEvent& call) {}
};

// The calling thread's op observers: each hears every op call on DTensors this thread makes while
// registered (OpObservers::Scoped), in the order added.
using OpObservers = Observers<OpObserver>;
OpObservers& ThreadOpObservers();

// ExecutePlan(source, plan), told to the thread's op observers (OnRedistributeBegin/Step/End with
// `op` and `input`) when one is registered: how the op kernel and the differentiable conversions
// (dtensor_autograd.h) run every redistribution.
DTensor ExecutePlanObserved(const std::string& op, size_t input, const DTensor& source,
                            const Plan& plan);

// Registers the DTensor kernel with the dispatcher (done by AsTensor; idempotent).
void EnsureDTensorDispatch();

// Clears the (op, input specs) → decision cache (benchmarks measure the uncached path with it).
void ClearShardingCache();

}  // namespace ops
}  // namespace dtsim
