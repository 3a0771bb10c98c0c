// The plan a redistribution runs, as DTensor::Redistribute (core/redistribute.h), `dtsim replay`
// and the viewer's view of a recording all choose it — pure placement arithmetic, no LibTorch.
//
// Example: PlanFor(spec of [S(0), R] on mesh[dp=2, tp=4], [R, S(1)]) is the greedy plan (a
// local_split on tp, then an all_gather on dp); WithoutNewPartials([R, S(0)], [P(sum), R]) is
// [R, R]: the R -> P part is local (core's PartitionReplicas), the planner runs the rest.
#pragma once

#include "dtsim/layout/plan.h"
#include "dtsim/layout/planner.h"
#include "dtsim/layout/spec.h"

namespace dtsim {

// The plan DTensor::Redistribute runs for `src` -> `dst`: PlanRedistribute(src, dst, kind), or its
// kMinCost plan when that one breaks the executability rule (WhyNotExecutable in plan.h: upstream's
// graph-based plans on some _StridedShard layouts read placements in upstream's shard order).
// Refusals as PlanRedistribute.
Plan PlanFor(const DTensorSpec& src, const Placements& dst,
             PlannerKind kind = PlannerKind::kGreedy);

// Upstream's internal redistributions (op dispatch, and what runs inside recorded programs) may
// also turn Replicate into Partial, locally (sum divides by the group size), which the public
// redistribute refuses. What the planner runs of such a change: `target` with every new R -> P
// kept at `current`'s Replicate (the rest is core's PartitionReplicas).
Placements WithoutNewPartials(const Placements& current, const Placements& target);

}  // namespace dtsim
