// Upstream's greedy planner (_gen_transform_infos_non_cached): its transitions, and the plan of
// them.
//
// Terms used below:
//   * state — a full placement list (one placement per mesh dim), read left to right: a later mesh
//     dim that shards the same tensor dim splits what the earlier ones left (spec.h's "nested
//     sharding").
//   * rank position — the index of a rank in mesh.ranks(); every per-rank vector is indexed by it.
//   * logical shape (of mesh dim i, for one rank) — the global shape with the shards of the other
//     mesh dims applied; upstream pads uneven collectives on mesh dim i to ceil(logical size / n).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "dtsim/layout/checked_math.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/planner.h"
#include "dtsim/layout/transition.h"
#include "layout/planner_internal.h"

namespace dtsim {
namespace planner_internal {

// upstream's generate_greedy_transform_infos, transition by transition.
std::vector<Transition> GreedyTransitions(const DeviceMesh& mesh, const Placements& src,
                                          const Placements& dst) {
  std::vector<Transition> out;
  const int64_t ndim = mesh.ndim();
  if (ndim == 1) {
    if (src[0] != dst[0]) out.push_back({0, src[0], dst[0]});
    return out;
  }
  int64_t num_shards = 1;
  for (int64_t i = 0; i < ndim; ++i) {
    if (src[i].is_shard_like()) num_shards *= mesh.size(i);
  }
  Placements cur = src;
  if (num_shards > 1) {
    // Reverse pass: clear misaligned nested shardings, inner mesh dims first.
    for (int64_t md = ndim - 1; md >= 0; --md) {
      Placement target = dst[md];
      if (target.is_shard()) {
        const int64_t d = target.dim();
        std::vector<int64_t> cur_sharding, target_sharding;
        for (int64_t i = 0; i < md; ++i) {
          if (cur[i].is_shard() && cur[i].dim() == d) cur_sharding.push_back(i);
          if (dst[i].is_shard() && dst[i].dim() == d) target_sharding.push_back(i);
        }
        if (cur_sharding != target_sharding) target = Placement::Replicate();
      }
      if (cur[md] != target) {
        out.push_back({md, cur[md], target});
        cur[md] = target;
      }
    }
  }
  // Forward pass: whatever still differs, outer mesh dims first.
  for (int64_t md = 0; md < ndim; ++md) {
    if (cur[md] != dst[md]) {
      out.push_back({md, cur[md], dst[md]});
      cur[md] = dst[md];
    }
  }
  return out;
}

Plan GreedyPlan(const DTensorSpec& src, const Placements& dst, const CostModel& model,
                const std::vector<std::vector<int64_t>>& coords) {
  Plan plan = NewPlan(src, dst, PlannerKind::kGreedy);
  auto logical = GreedyLogicalShapes(src, coords);
  Placements cur = src.placements();
  for (const Transition& t : GreedyTransitions(src.mesh(), src.placements(), dst)) {
    DTSIM_CHECK(cur[t.mesh_dim] == t.from,
                "greedy transition does not start at the current placement");
    PlanStep step = BuildStepWith(src, cur, t.mesh_dim, t.to, logical[t.mesh_dim], model, coords,
                                  LocalShapes(src, cur, coords));
    cur = step.placements_after;
    plan.total_est_us += step.est_us;
    plan.steps.push_back(std::move(step));
  }
  DTSIM_CHECK(cur == dst, "greedy plan ends at ", ToString(cur), " instead of ", ToString(dst));
  return plan;
}

// True if every step of `plan` only removes or adds a shard-like placement on the innermost mesh
// dim splitting its tensor dim (the rule the search follows, which makes each step's collective
// produce its target layout).
bool KeepsNesting(const Plan& plan) {
  for (const PlanStep& s : plan.steps) {
    if (!StepRunsLeftToRight(s.placements_before, s.mesh_dim, s.from, s.to)) return false;
  }
  return true;
}

}  // namespace planner_internal

}  // namespace dtsim
