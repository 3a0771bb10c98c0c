// The plan a redistribution runs (see plan_for.h).
#include "dtsim/layout/plan_for.h"

namespace dtsim {

Plan PlanFor(const DTensorSpec& src, const Placements& dst, PlannerKind kind) {
  Plan plan = PlanRedistribute(src, dst, kind);
  if (!plan.runs_left_to_right)
    plan = PlanRedistribute(src, dst, PlannerKind::kMinCost);  // only returns plans that run
  return plan;
}

Placements WithoutNewPartials(const Placements& current, const Placements& target) {
  Placements planned = target;
  for (size_t m = 0; m < target.size() && m < current.size(); ++m) {
    if (current[m].is_replicate() && target[m].is_partial()) planned[m] = current[m];
  }
  return planned;
}

}  // namespace dtsim
