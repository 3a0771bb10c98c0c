// The redistribution executor: runs one plan step — one placement change on one mesh dim — over
// local data, with the collective the step names (transition.h's table, shared with the planner). A
// plan (planner.h) is a list of steps; the executor is the same for every backend.
//
// What each change does, per rank (L = the rank's logical size of the tensor dim at this mesh dim,
// i.e. its local size after the shards of the earlier mesh dims; n = mesh dim size; c = the rank's
// coordinate on it):
// clang-format off
//   S(d) -> R         pad to ceil(L/n) along d, all_gather along d, keep the first L
//   S(d) -> S(e)      pad d to ceil(Ld/n) and e to n*ceil(Le/n), all_to_all (split e, concat d),
//                     unpad both
//   R -> S(d)         local: chunk c of torch.chunk(L, n) along d (a copy)
//   P(op) -> R        all_reduce(op)
//   P(op) -> S(d)     pad d to n*ceil(L/n), reduce_scatter(op) along d, keep the rank's chunk size
//   R -> P(op)        local: sum divides by n; avg, min, max keep the value; other ops refuse
//   _S(d,k) -> R      pad to the largest strided chunk, all_gather, put every element back by index
//   R -> _S(d,k)      local: the rank's strided sub-pieces
//   S <-> _S, _S -> _S, P -> _S    through R
// clang-format on
// A mesh dim of size 1 and an unchanged placement never communicate.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "dtsim/core/dtensor.h"
#include "dtsim/layout/plan.h"
#include "dtsim/layout/plan_for.h"
#include "dtsim/layout/planner.h"
#include "dtsim/layout/spec.h"
#include "dtsim/layout/transition.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {

// PlanFor (the plan DTensor::Redistribute runs) and WithoutNewPartials: layout/plan_for.h.

// Runs `plan` on `input` step by step through input's collectives (simulated or real) and returns
// the DTensor at plan.dst (canonical placements), calling `on_step` after each step. The plan may
// come from any planner, from JSON (PlanFromJson) or be built by hand; InputError("plan") when it
// does not fit `input` (its mesh, source placements or shape differ) or breaks the executability
// rule (WhyNotExecutable in plan.h, naming the step).
DTensor ExecutePlan(const DTensor& input, const Plan& plan, const StepObserver& on_step = {});

// Runs `step` on `local` (the data of a DTensor whose spec is `current`, with
// current.placements()[step.mesh_dim]
// == step.from) and returns the new local data: the step's collective (step.collective, then a
// local split when step.then_local_split), with the padding and unpadding of the table above.
// Precondition: WhyNotExecutable(current.placements(), mesh shape, step) is nullopt (plan.h;
// InternalError otherwise). InputError for changes upstream refuses (R -> P(product)).
at::Tensor ApplyStep(const at::Tensor& local, const DTensorSpec& current, const PlanStep& step,
                     Collectives& collectives);

// The step that runs `t` (its collective from transition.h's table; no bytes or estimates): what
// DistributeTensor runs. InputError for the changes the table refuses (S -> P, P(a) -> P(b)).
PlanStep StepFor(const DTensorSpec& current, const Transition& t);

// ApplyStep(local, current, StepFor(current, t), collectives).
at::Tensor ApplyTransition(const at::Tensor& local, const DTensorSpec& current, const Transition& t,
                           Collectives& collectives);

// The spec after `t`.
DTensorSpec SpecAfter(const DTensorSpec& current, const Transition& t);

// Upstream's internal redistributions (op dispatch, and what runs inside recorded programs) may
// also turn Replicate into Partial, locally (sum divides by the group size), which the public
// redistribute refuses. Split in two parts: WithoutNewPartials (layout/plan_for.h), what the
// planner runs; then the remaining R -> P changes of `dt` to `target`, locally, mesh dim by mesh
// dim:
DTensor PartitionReplicas(const DTensor& dt, const Placements& target);
// Both: PlanFor(WithoutNewPartials) run by ExecutePlan (its plan in `plan`), then
// PartitionReplicas.
DTensor RedistributeInternal(const DTensor& input, const Placements& target, Plan* plan = nullptr);

}  // namespace dtsim
