// The redistribution executor: runs one placement change on one mesh dim over local data, with the collectives the
// change needs. A plan (planner.h) is a list of these; the executor is the same for every backend.
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

namespace dtsim {

// One placement change on one mesh dim.
struct Transition {
  int64_t mesh_dim = 0;
  Placement from = Placement::Replicate();
  Placement to = Placement::Replicate();
};

// Runs `t` on `local` (the data of a DTensor whose spec is `current`, current.placements()[t.mesh_dim] == t.from)
// and returns the new local data. InputError for changes upstream refuses (S -> P, P(a) -> P(b), R -> P(product)).
at::Tensor ApplyTransition(const at::Tensor& local, const DTensorSpec& current, const Transition& t,
                           Collectives& collectives);

// The spec after `t`.
DTensorSpec SpecAfter(const DTensorSpec& current, const Transition& t);

// Why the executor cannot run `t` on `current`, or nullopt if it can. The executor's rule: a change on mesh dim i
// that gathers or splits tensor dim d needs every mesh dim after i to leave d unsharded (their shards would be
// nested inside the one being changed). Upstream's graph planner emits such steps for _StridedShard layouts, reading
// placements in its shard order; dtsim reads placements left to right and plans around them.
std::optional<std::string> WhyNotExecutable(const DTensorSpec& current, const Transition& t);

// A plan the executor can always run: first every mesh dim, innermost first, whose placement differs from the
// target in its prefix goes to Replicate (Partial stays), then every mesh dim, outermost first, goes to its target.
// Used when a planner's plan has a step WhyNotExecutable refuses. `planner` names it in the plan.
Plan PlanViaReplicate(const DTensorSpec& src, const Placements& dst);

}  // namespace dtsim
