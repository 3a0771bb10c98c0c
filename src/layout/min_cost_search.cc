// dtsim's min-cost search: Dijkstra over layouts read left to right (planner.md).
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

// Dijkstra over states. Edges: change one mesh dim to R, S(d) for any tensor dim d, or the target
// placement of that mesh dim (covers _StridedShard targets); never to Partial (only R → P would be
// executable, and a target Partial always equals the source there), never away from a target
// Partial. Shard-like placements may only be removed or added on the innermost mesh dim splitting
// their tensor dim. Cost: (est_us, number of steps), lexicographic.
Plan MinCostSearch(const DTensorSpec& src, const Placements& dst, const CostModel& model,
                   const std::vector<std::vector<int64_t>>& coords, SearchBudget& budget) {
  const DeviceMesh& mesh = src.mesh();
  using Key = std::string;
  struct Info {
    double cost = 0;
    int64_t steps = 0;
    Key prev;
    int64_t mesh_dim = -1;
    Placements state;
  };
  std::map<Key, Info> best;
  std::set<Key> done;
  using Entry = std::tuple<double, int64_t, Key>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  const Key start = ToString(src.placements()), goal = ToString(dst);
  best[start] = {0, 0, "", -1, src.placements()};
  queue.push({0, 0, start});
  while (!queue.empty()) {
    auto [cost, steps, key] = queue.top();
    queue.pop();
    if (done.count(key)) continue;
    done.insert(key);
    if (key == goal) break;
    const Placements state = best[key].state;
    budget.Spend(1 + mesh.size());
    const auto local_shapes = LocalShapes(src, state, coords);
    for (int64_t md = 0; md < mesh.ndim(); ++md) {
      const Placement& cur = state[md];
      if (dst[md].is_partial()) continue;
      if (!StepRunsLeftToRight(state, md, cur, Placement::Replicate()))
        continue;  // cur not innermost
      std::vector<Placement> targets = {Placement::Replicate(), dst[md]};
      for (int64_t d = 0; d < src.ndim(); ++d) targets.push_back(Placement::Shard(d));
      const auto logical = StateLogicalShapes(src, state, md, coords);
      for (const Placement& to : targets) {
        if (to == cur || to.is_partial()) continue;
        if (!StepRunsLeftToRight(state, md, cur, to)) continue;
        budget.Spend(1 + mesh.size());
        PlanStep step = BuildStepWith(src, state, md, to, logical, model, coords, local_shapes);
        const Key next = ToString(step.placements_after);
        if (done.count(next)) continue;
        const double c = cost + step.est_us;
        const int64_t s = steps + 1;
        auto it = best.find(next);
        if (it == best.end() || std::tie(c, s) < std::tie(it->second.cost, it->second.steps)) {
          best[next] = {c, s, key, md, step.placements_after};
          queue.push({c, s, next});
        }
      }
    }
  }
  Plan plan = NewPlan(src, dst, PlannerKind::kMinCost);
  DTSIM_CHECK(done.count(goal), "min-cost search did not reach ", goal);
  // Walk back, then rebuild the steps forward (with their logical shapes).
  std::vector<const Info*> chain;
  for (Key k = goal; k != start; k = best[k].prev) chain.push_back(&best[k]);
  std::reverse(chain.begin(), chain.end());
  Placements cur = src.placements();
  for (const Info* info : chain) {
    const int64_t md = info->mesh_dim;
    PlanStep step =
        BuildStepWith(src, cur, md, info->state[md], StateLogicalShapes(src, cur, md, coords),
                      model, coords, LocalShapes(src, cur, coords));
    cur = step.placements_after;
    plan.total_est_us += step.est_us;
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

}  // namespace planner_internal

}  // namespace dtsim
