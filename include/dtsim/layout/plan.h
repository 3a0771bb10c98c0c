// Plan: a redistribution as DATA — the list of per-mesh-dim steps that turn one placement list into
// another, with the collective each step runs, its process groups, exact per-rank byte counts and
// an estimated time. Planners (include/dtsim/layout/planner.h) produce it; executors (LocalTensor
// simulation, MPI, NCCL) interpret it; `Explain` prints it for people and `ToJson` for tools.
//
// Terms:
//   * step — one transition of ONE mesh dim from placement `from` to placement `to`, all other mesh
//   dims unchanged
//     (upstream's _TransformInfo). Mesh (2, 4), [S(0), S(1)] → [S(0), R]: one step, mesh dim 1,
//     S(1) → R, an all_gather in each of the groups {0,1,2,3} and {4,5,6,7}.
//   * collective — what upstream's redistribute_local_tensor runs for the step (CollectiveKind,
//   transition.h's table).
//   * logical shape — upstream's per-rank "logical shape" of the step: the shape of the tensor that
//   the mesh dim
//     shards, i.e. the global shape with the OTHER mesh dims' shards applied. It decides the
//     padding of uneven collectives: a dim of logical size L over n ranks is padded to the full
//     chunk c = ceil(L/n) on every rank.
//   * bytes sent / received — the exact size of the buffer a rank hands to the collective (after
//   upstream's padding)
//     and of the buffer it gets back (before unpadding). Padded collectives move padded bytes:
//     shape (5, 10) float32 S(0) → R over 4 ranks gathers chunks of 2 rows on every rank (the last
//     rank has 0 real rows, pads to 2): 80 bytes sent and 320 received by every rank. Local steps
//     (split, partition) and "none" move 0 bytes.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/layout/dtype.h"
#include "dtsim/layout/placement.h"

namespace dtsim {

// Which planner made a plan. kGreedy: upstream's DEFAULT plan (its greedy passes, or its
// graph-based planner where upstream uses that: any _StridedShard). kUpstreamGraph: upstream's
// graph-based planner for every case (what upstream runs under use_min_cost_redistribution_plan()).
// kMinCost: dtsim's own search, never costlier than upstream's default.
enum class PlannerKind { kGreedy, kMinCost, kUpstreamGraph };

// "greedy", "min-cost", "graph".
std::string ToString(PlannerKind kind);
// Reads "greedy", "min-cost" (also "min_cost", "mincost"), "graph"; throws InputError(field) naming
// the text otherwise.
PlannerKind ParsePlannerKind(std::string_view text, const std::string& field = "planner");

// One step of a plan. Per-rank vectors are indexed by the rank's position in mesh.ranks()
// (row-major mesh order).
struct PlanStep {
  int64_t mesh_dim = 0;
  // The placement of mesh_dim before and after the step: always placements_before[mesh_dim] and
  // placements_after[mesh_dim], in canonical form (_S(d,1) is S(d)). An executor that reads layouts
  // left to right runs (from, to); WhyNotExecutable below says when it can.
  Placement from = Placement::Replicate();
  Placement to = Placement::Replicate();
  // The transition as upstream's redistribute_local_tensor runs it (its _TransformInfo), which
  // `collective`, the bytes and `logical_shape_per_rank` describe. Equal to from/to except in plans
  // of upstream's graph-based planner (any _StridedShard, or PlannerKind::kUpstreamGraph): there
  // the layouts encode a shard order with _StridedShard while upstream runs normalised Shard
  // placements. [_S(0,2), S(0)] → [R, S(0)] on a (2, 2) mesh is one step on mesh dim 0 with from =
  // _S(0,2), to = R, upstream_from = S(0), upstream_to = R: upstream runs a plain all_gather
  // (concatenate in coordinate order), which a left-to-right executor cannot express as _S(0,2) → R
  // (mesh dim 1 still splits dim 0). Upstream's spelling is kept here (_S(d,1) stays _S(d,1)).
  Placement upstream_from = Placement::Replicate();
  Placement upstream_to = Placement::Replicate();
  // What the transition runs, from the one table of transition.h (RuleFor(upstream_from,
  // upstream_to)): all_gather for S → _S / _S → S / _S → _S too, where upstream gathers, then
  // splits locally (`then_local_split` says so). JSON and traces carry its text name
  // ("all_gather").
  CollectiveKind collective = CollectiveKind::kNone;
  // True when the step gathers/reduces and then keeps a local chunk (S → _S, _S → S, _S → _S, P →
  // _S).
  bool then_local_split = false;
  // The process groups along mesh_dim (global ranks, ordered by their coordinate on mesh_dim);
  // empty for local steps and "none".
  std::vector<std::vector<int64_t>> groups;
  // Bytes of the buffer each rank passes to the collective (after padding) / gets back (before
  // unpadding).
  std::vector<int64_t> bytes_sent_per_rank;
  std::vector<int64_t> bytes_received_per_rank;
  // Upstream's logical shape of this step for each rank (see the header comment).
  std::vector<std::vector<int64_t>> logical_shape_per_rank;
  // The whole placement list (the layout, read left to right as in spec.h) before and after this
  // step.
  Placements placements_before;
  Placements placements_after;
  // Estimated time of the step under the planner's CostModel (the slowest group), microseconds.
  double est_us = 0;
  // Extra memory each rank needs at the peak of the step beyond its input local tensor: the padded
  // input copy (when padding happens) plus the collective's output buffer. 0 for local steps and
  // "none".
  std::vector<int64_t> peak_extra_bytes_per_rank;

  // True when the step moves data between ranks.
  bool communicates() const;
};

// A whole redistribution. Steps run in order; an empty plan means nothing to do.
struct Plan {
  std::vector<PlanStep> steps;
  double total_est_us = 0;  // sum of the steps' est_us
  PlannerKind planner = PlannerKind::kGreedy;
  std::string note;  // why the plan differs from the plain algorithm, if it does ("" otherwise)
  // Set by the planner: !WhyNotExecutable(*this, mesh shape) — every step runs on layouts read left
  // to right.
  bool runs_left_to_right = true;
  // What the plan redistributes (for Explain / JSON): "mesh[dp=2, tp=4]", one label per mesh dim
  // ("dp" or "0"), the source and target placements, the global shape and element size.
  std::string mesh;
  std::vector<std::string> mesh_dim_labels;
  Placements src;
  Placements dst;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  // Number of steps that communicate.
  int64_t num_collectives() const;
};

// THE executability rule, the one place that says which steps an executor runs (the simulated
// executor and the real backends share redistribute.h's, which checks it before every step; the
// planner flags its plans with it; DTensor::Redistribute re-plans with kMinCost when a plan breaks
// it). Why changing mesh dim step.mesh_dim of the layout `before` (on a mesh of `mesh_shape`)
// cannot run as `step` says, or nullopt when it can:
//   (1) step.from == before[step.mesh_dim] (canonical forms compared) and the step's collective is
//   the one
//       transition.h's table gives for from -> to (upstream's graph planner names upstream's
//       transition, which may differ on _StridedShard layouts);
//   (2) StepRunsLeftToRight on `before` with mesh dims of size 1 read as Replicate (they split
//   nothing), except that
//       a step on a mesh dim of size 1, or one that changes nothing, always runs (it moves no
//       data).
std::optional<std::string> WhyNotExecutable(const Placements& before,
                                            const std::vector<int64_t>& mesh_shape,
                                            const PlanStep& step);
// The same for a whole plan: the first step that cannot run ("step 2: ..."), a step whose
// placements_before are not the previous step's placements_after (plan.src for the first), or a
// plan that does not end at plan.dst; nullopt when an executor runs it from plan.src to plan.dst.
std::optional<std::string> WhyNotExecutable(const Plan& plan,
                                            const std::vector<int64_t>& mesh_shape);

// True when changing mesh dim `mesh_dim` of `before` from `from` to `to` runs on layouts read left
// to right (as compute_local_shape_and_global_offset reads them): a shard-like `from` or `to` on
// tensor dim d needs every later mesh dim to leave d unsharded. Part (2) of WhyNotExecutable; the
// planner's searches also follow it.
bool StepRunsLeftToRight(const Placements& before, int64_t mesh_dim, const Placement& from,
                         const Placement& to);

// {"mesh_dim", "mesh_dim_name", "from", "to", "upstream_from", "upstream_to", "collective",
// "then_local_split", "groups", "bytes_per_rank" (= bytes sent per rank),
// "bytes_received_per_rank", "logical_shape_per_rank", "placements_before", "placements_after",
// "est_us", "peak_extra_bytes_per_rank"}. `mesh_dim_labels` may be empty (then "mesh_dim_name" is
// the index).
nlohmann::json ToJson(const PlanStep& step, const std::vector<std::string>& mesh_dim_labels = {});
// {"plan": [steps...], "planner", "total_est_us", "num_collectives", "mesh", "from", "to", "shape",
// "dtype", "note", "runs_left_to_right"}.
nlohmann::json ToJson(const Plan& plan);

// The step ToJson wrote (mesh_dim_name is read too, into `mesh_dim_name` when given).
// InputError(field) naming the path of anything missing or invalid, e.g. "trace: steps[1].from:
// 'S(' has '(' without ')'"; values are checked for type and range (non-negative bytes and shapes),
// not against a mesh.
PlanStep PlanStepFromJson(const nlohmann::json& json, const std::string& field,
                          const std::string& path, std::string* mesh_dim_name = nullptr);
// The plan ToJson wrote.
Plan PlanFromJson(const nlohmann::json& json, const std::string& field,
                  const std::string& path = "");

// Text: a header, then one line per step —
//   "step 1  tp(1): S(1) → R  all_gather  groups [[0, 1, 2, 3], [4, 5, 6, 7]]  bytes/rank 80
//   est 12.3 us"
// (bytes/rank prints one number when all ranks agree, else "min..max"), then the total.
std::string Explain(const Plan& plan);

}  // namespace dtsim
