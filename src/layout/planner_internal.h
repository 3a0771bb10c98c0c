// Internals shared by the planners (src/layout/ only): step building, the greedy planner, the
// min-cost search, the emulation of upstream's graph-based planner, and the search budget.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/plan.h"
#include "dtsim/layout/planner.h"
#include "dtsim/layout/spec.h"

namespace dtsim {
namespace planner_internal {

// ---- plan_steps.cc ----
// Every rank's coordinate, indexed by rank position.
std::vector<std::vector<int64_t>> Coordinates(const DeviceMesh& mesh);
// Every rank's local shape under `placements`.
std::vector<std::vector<int64_t>> LocalShapes(const DTensorSpec& spec, const Placements& placements,
                                              const std::vector<std::vector<int64_t>>& coords);
// Per mesh dim, every rank's logical shape as upstream's greedy planner computes it.
std::vector<std::vector<std::vector<int64_t>>> GreedyLogicalShapes(
    const DTensorSpec& src, const std::vector<std::vector<int64_t>>& coords);
// Every rank's logical shape of `mesh_dim` in layout `state`.
std::vector<std::vector<int64_t>> StateLogicalShapes(
    const DTensorSpec& src, const Placements& state, int64_t mesh_dim,
    const std::vector<std::vector<int64_t>>& coords);
// The step on `mesh_dim` from layout `before` to layout `after` that runs upstream's `from` → `to`
// transition (from/to are before/after's placements on mesh_dim, except in upstream's graph-based
// plans, which run normalised Shard placements on layouts that _StridedShard encodes).
PlanStep BuildStepExec(const DTensorSpec& src, const Placements& before, const Placements& after,
                       int64_t mesh_dim, const Placement& from, const Placement& to,
                       const std::vector<std::vector<int64_t>>& logical, const CostModel& model,
                       const std::vector<std::vector<int64_t>>& local_shapes);
// BuildStep (planner.h) with the coordinates and local shapes already computed.
PlanStep BuildStepWith(const DTensorSpec& src, const Placements& before, int64_t mesh_dim,
                       const Placement& to, const std::vector<std::vector<int64_t>>& logical,
                       const CostModel& model, const std::vector<std::vector<int64_t>>& coords,
                       const std::vector<std::vector<int64_t>>& local_shapes);
// An empty plan of `planner` from `src` to `dst` (mesh, labels, shape, dtype filled in).
Plan NewPlan(const DTensorSpec& src, const Placements& dst, PlannerKind planner);

// ---- greedy_planner.cc ----
Plan GreedyPlan(const DTensorSpec& src, const Placements& dst, const CostModel& model,
                const std::vector<std::vector<int64_t>>& coords);
// True if every step only removes or adds a shard-like placement on the innermost mesh dim
// splitting its tensor dim.
bool KeepsNesting(const Plan& plan);

// The work a search may do before it is refused (kMaxPlannerSearchWork in planner.h): both searches
// grow exponentially with the number of mesh dims, so a deterministic work count — not a clock —
// bounds them and the refusal names the case.
class SearchBudget {
 public:
  SearchBudget(const DTensorSpec& src, const Placements& dst, std::string planner)
      : src_(src), dst_(dst), planner_(std::move(planner)) {}
  // Spends `units` (one per rank of a per-rank computation, one per state or edge); throws when the
  // budget is spent.
  void Spend(int64_t units) {
    spent_ += units;
    if (spent_ <= kMaxPlannerSearchWork) return;
    const DeviceMesh& mesh = src_.mesh();
    throw InputError(
        "planner", StrCat("the ", planner_, " planner's search from ",
                          ExcerptText(ToString(src_.placements())), " to ",
                          ExcerptText(ToString(dst_)), " on ", ExcerptText(mesh.ToString()), " (",
                          mesh.ndim(), " mesh dims, ", mesh.size(), " ranks) with a ", src_.ndim(),
                          "-d tensor is too large: it stopped after ", kMaxPlannerSearchWork,
                          " work units (the search grows exponentially with the mesh dims); use "
                          "--planner greedy or a mesh with fewer dims"));
  }
  int64_t spent() const { return spent_; }

 private:
  const DTensorSpec& src_;
  const Placements& dst_;
  std::string planner_;
  int64_t spent_ = 0;
};

// ---- min_cost_search.cc ----
Plan MinCostSearch(const DTensorSpec& src, const Placements& dst, const CostModel& model,
                   const std::vector<std::vector<int64_t>>& coords, SearchBudget& budget);

// ---- graph_planner.cc ----
struct GraphState {
  Placements placements;  // Shard / Replicate / Partial only
  std::map<int64_t, std::vector<int64_t>>
      order;  // tensor dim → mesh dims in split order (no empty lists)

  std::string Key() const {
    std::string key = ToString(placements);
    for (const auto& [td, mds] : order) key += StrCat("|", td, ":", IntListToString(mds));
    return key;
  }
};

std::optional<GraphState> DecodeShardOrder(const Placements& placements, const DeviceMesh& mesh);
Plan UpstreamGraphPlan(const DTensorSpec& src, const GraphState& start, const GraphState& goal,
                       const Placements& src_placements, const Placements& dst_placements,
                       const CostModel& model, const std::vector<std::vector<int64_t>>& coords,
                       SearchBudget& budget);

}  // namespace planner_internal
}  // namespace dtsim
