// The redistribution executor: runs one plan step — one placement change on one mesh dim — over local data, with the
// collective the step names (transition.h's table, shared with the planner). A plan (planner.h) is a list of steps;
// the executor is the same for every backend.
//
// What each change does, per rank (L = the rank's logical size of the tensor dim at this mesh dim, i.e. its local
// size after the shards of the earlier mesh dims; n = mesh dim size; c = the rank's coordinate on it):
//   S(d) -> R        pad to ceil(L/n) along d, all_gather along d, keep the first L
//   S(d) -> S(e)     pad d to ceil(Ld/n) and e to n*ceil(Le/n), all_to_all (split e, concat d), unpad both
//   R -> S(d)        local: chunk c of torch.chunk(L, n) along d (a copy)
//   P(op) -> R       all_reduce(op)
//   P(op) -> S(d)    pad d to n*ceil(L/n), reduce_scatter(op) along d, keep the rank's chunk size
//   R -> P(op)       local: sum divides by n; avg, min, max keep the value; other ops refuse
//   _S(d,k) -> R     pad to the largest strided chunk, all_gather, put every element back by index
//   R -> _S(d,k)     local: the rank's strided sub-pieces
//   S <-> _S, _S -> _S, P -> _S   through R
// A mesh dim of size 1 and an unchanged placement never communicate.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "dtsim/collectives.h"
#include "dtsim/plan.h"
#include "dtsim/spec.h"
#include "dtsim/transition.h"

namespace dtsim {

// Runs `step` on `local` (the data of a DTensor whose spec is `current`, with current.placements()[step.mesh_dim]
// == step.from) and returns the new local data: the step's collective (step.collective, then a local split when
// step.then_local_split), with the padding and unpadding of the table above. Precondition: WhyNotExecutable is
// nullopt (InternalError otherwise). InputError for changes upstream refuses (R -> P(product)).
at::Tensor ApplyStep(const at::Tensor& local, const DTensorSpec& current, const PlanStep& step,
                     Collectives& collectives);

// The step that runs `t` (its collective from transition.h's table; no bytes or estimates): what DistributeTensor
// runs. InputError for the changes the table refuses (S -> P, P(a) -> P(b)).
PlanStep StepFor(const DTensorSpec& current, const Transition& t);

// ApplyStep(local, current, StepFor(current, t), collectives).
at::Tensor ApplyTransition(const at::Tensor& local, const DTensorSpec& current, const Transition& t,
                           Collectives& collectives);

// The spec after `t`.
DTensorSpec SpecAfter(const DTensorSpec& current, const Transition& t);

// Why the executor cannot run `step` on `current`, or nullopt if it can: (1) the step's collective must be the one
// transition.h's table gives for its from -> to (upstream's graph planner names upstream's transition, which may
// differ on _StridedShard layouts); (2) the planner's StepRunsLeftToRight rule (a change that gathers or splits
// tensor dim d on mesh dim i needs every later mesh dim to leave d unsharded), except that a step on a mesh dim of
// size 1, or one that changes nothing, always runs (it moves no data). Upstream's graph planner emits steps that
// break the rule for _StridedShard layouts, reading placements in its shard order.
std::optional<std::string> WhyNotExecutable(const DTensorSpec& current, const PlanStep& step);

}  // namespace dtsim
