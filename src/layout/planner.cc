// PlanRedistribute (see the narrative in include/dtsim/layout/planner.h): refusals, the choice
// between upstream's plan, its graph-based plan and dtsim's search, and the executor-facing form.
// The planners themselves: greedy_planner.cc, min_cost_search.cc, graph_planner.cc; steps:
// plan_steps.cc.
//
// Terms used below:
//   * state — a full placement list (one placement per mesh dim), read left to right: a later mesh
//     dim that shards the same tensor dim splits what the earlier ones left (spec.h's "nested
//     sharding").
//   * rank position — the index of a rank in mesh.ranks(); every per-rank vector is indexed by it.
//   * logical shape (of mesh dim i, for one rank) — the global shape with the shards of the other
//     mesh dims applied; upstream pads uneven collectives on mesh dim i to ceil(logical size / n).
#include "dtsim/layout/planner.h"

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
#include "dtsim/layout/transition.h"
#include "layout/planner_internal.h"

namespace dtsim {

using namespace planner_internal;

Placements ValidateRedistribute(const DTensorSpec& src, const Placements& dst) {
  const DeviceMesh& mesh = src.mesh();
  CheckNoMixedPartials(src.placements(), "from");
  if (static_cast<int64_t>(dst.size()) != mesh.ndim()) {
    throw InputError(
        "to", StrCat("'", ExcerptText(ToString(dst)), "' has ", dst.size(), " placement",
                     dst.size() == 1 ? "" : "s", " for ", mesh.ToString(), " of ", mesh.ndim(),
                     " dim", mesh.ndim() == 1 ? "" : "s"));
  }
  Placements out;
  for (const Placement& p : dst) out.push_back(p.Normalized(src.ndim(), "to").Canonical());
  for (int64_t i = 0; i < mesh.ndim(); ++i) {
    if (out[i].is_partial() && src.placements()[i].Canonical() != out[i]) {
      throw InputError("to", StrCat("mesh dim ", mesh.DimLabel(i), ": cannot redistribute ",
                                    src.placements()[i].ToString(), " to ", out[i].ToString(),
                                    ": redistributing to Partial is for internal use only"));
    }
  }
  CheckNoMixedPartials(out, "to");
  return out;
}

// The executor-facing form of a plan: layouts in canonical form, from/to read off them; upstream's
// transition kept aside in upstream_from/upstream_to.
static Plan ExecutorForm(Plan plan) {
  auto canonical = [](Placements list) {
    for (Placement& p : list) p = p.Canonical();
    return list;
  };
  plan.src = canonical(plan.src);
  plan.dst = canonical(plan.dst);
  for (PlanStep& step : plan.steps) {
    step.upstream_from = step.from;
    step.upstream_to = step.to;
    step.placements_before = canonical(step.placements_before);
    step.placements_after = canonical(step.placements_after);
    step.from = step.placements_before[step.mesh_dim];
    step.to = step.placements_after[step.mesh_dim];
  }
  return plan;
}

// True when the executor runs `plan` (the one rule, WhyNotExecutable in plan.h) once in executor
// form.
static bool Executable(const Plan& plan, const DeviceMesh& mesh) {
  return !WhyNotExecutable(ExecutorForm(plan), mesh.shape());
}

static Plan PlanRedistributeUnflagged(const DTensorSpec& given_src, const Placements& dst,
                                      PlannerKind kind, const CostModel& model) {
  const Placements target = ValidateRedistribute(given_src, dst);
  const auto coords = Coordinates(given_src.mesh());
  SearchBudget budget(given_src, target, ToString(kind));  // shared by every search of this plan
  // Upstream's own choice (_gen_transform_infos_non_cached) works on the placements as given
  // (negative dims normalised); dtsim's search on canonical ones (_S(d,1) is S(d)).
  Placements raw_dst;
  for (const Placement& p : dst) raw_dst.push_back(p.Normalized(given_src.ndim(), "to"));
  Placements canonical_src;
  for (const Placement& p : given_src.placements()) canonical_src.push_back(p.Canonical());
  const DTensorSpec src =
      DTensorSpec::Create(given_src.mesh(), canonical_src, given_src.shape(), given_src.dtype());

  bool strided = false;
  for (const Placements* list :
       {&given_src.placements(), static_cast<const Placements*>(&raw_dst)}) {
    for (const Placement& p : *list) strided = strided || p.is_strided_shard();
  }
  // What upstream plans (its default selection, or its graph-based planner when asked for).
  Plan upstream;
  bool upstream_valid = true;
  if (strided || kind == PlannerKind::kUpstreamGraph) {
    auto a = DecodeShardOrder(given_src.placements(), given_src.mesh());
    auto b = DecodeShardOrder(raw_dst, given_src.mesh());
    if (a && b) {
      upstream = UpstreamGraphPlan(given_src, *a, *b, given_src.placements(), target, model, coords,
                                   budget);
      if (strided) {
        upstream.note =
            "_StridedShard involved: upstream's graph-based planner (emulated); "
            "upstream_from/upstream_to are the "
            "normalised Shard placements upstream runs on layouts that _StridedShard encodes";
      }
    } else {
      upstream = GreedyPlan(given_src, raw_dst, model, coords);
      upstream_valid = KeepsNesting(upstream);
      upstream.note =
          upstream_valid
              ? "_StridedShard that upstream cannot decode into a shard order: its greedy fallback"
              : "";
    }
  } else {
    upstream = GreedyPlan(given_src, raw_dst, model, coords);
  }
  upstream.dst = target;
  if (kind != PlannerKind::kMinCost && upstream_valid) {
    upstream.planner = kind;
    return upstream;
  }
  Plan searched = MinCostSearch(src, target, model, coords, budget);
  if (kind != PlannerKind::kMinCost) {
    // Upstream's greedy fallback would gather an outer mesh dim while an inner one still splits the
    // same tensor dim (its nesting check ignores _StridedShard; upstream then fails or computes the
    // wrong layout).
    searched.planner = kind;
    searched.note =
        "_StridedShard that upstream cannot decode: its greedy fallback is not executable here, "
        "dtsim's min-cost "
        "search stands in (same end placements, different steps)";
    return searched;
  }
  // Candidates, preferred in this order on ties: upstream's default plan, upstream's graph-based
  // plan (it may use shard orders, i.e. _StridedShard-encoded intermediate layouts, that dtsim's
  // search does not visit), the search. Only plans the executor runs compete (Executable), so it
  // can run whatever min-cost returns.
  Plan best = searched;
  if (!strided) {
    auto a = DecodeShardOrder(given_src.placements(), given_src.mesh());
    auto b = DecodeShardOrder(raw_dst, given_src.mesh());
    if (a && b) {
      Plan graph = UpstreamGraphPlan(given_src, *a, *b, given_src.placements(), target, model,
                                     coords, budget);
      if (Executable(graph, src.mesh()) && graph.total_est_us <= best.total_est_us) {
        graph.note = "upstream's graph-based plan is the cheapest found";
        best = std::move(graph);
      }
    }
  }
  if (upstream_valid && Executable(upstream, src.mesh()) &&
      upstream.total_est_us <= best.total_est_us) {
    upstream.note = "upstream's plan is already the cheapest found";
    best = std::move(upstream);
  }
  best.planner = PlannerKind::kMinCost;
  best.dst = target;
  return best;
}

Plan PlanRedistribute(const DTensorSpec& src, const Placements& dst, PlannerKind kind,
                      const CostModel& model) {
  Plan plan = ExecutorForm(PlanRedistributeUnflagged(src, dst, kind, model));
  plan.runs_left_to_right = !WhyNotExecutable(plan, src.mesh().shape());
  return plan;
}

}  // namespace dtsim
