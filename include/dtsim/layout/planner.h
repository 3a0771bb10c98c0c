// Planner: turns (source spec, target placements) into a Plan (include/dtsim/layout/plan.h). Two
// planners:
//
//   * kGreedy — upstream's default, DTensorRedistributePlanner.generate_greedy_transform_infos,
//   step for step:
//     on a 1-D mesh one direct step; otherwise, when the source has any sharding (num_shards > 1),
//     a reverse pass over the mesh dims (last → first) that first replaces a target Shard(d) by
//     Replicate whenever the mesh dims BEFORE it shard tensor dim d differently in the current and
//     target lists (misaligned nested sharding), then a forward pass (first → last) for whatever
//     still differs. The per-rank logical shapes are upstream's too: the logical shape of mesh dim
//     i is the global shape with the SOURCE's Shard placements on mesh dims < i applied in order (a
//     _StridedShard does not narrow it). Where upstream does not use these passes — any
//     _StridedShard in the source or target — kGreedy gives what upstream runs instead: its
//     graph-based planner, emulated exactly (see kUpstreamGraph).
//   * kUpstreamGraph — upstream's DTensorRedistributePlanner.generate_graph_based_transform_infos
//   for every case:
//     Dijkstra over (Shard/Replicate/Partial placements, shard order) states with upstream's edge
//     order, cost function (one_step_redistribute_cost, MeshTopoInfo) and tie-breaking;
//     _StridedShard lists decode into shard orders and each state encodes back into a dtsim
//     placement list. When upstream cannot decode a _StridedShard it falls back to its greedy
//     passes; where those would gather an outer mesh dim while an inner one still splits the same
//     tensor dim (upstream's nesting check ignores _StridedShard), dtsim uses its own search.
//   * kMinCost — Dijkstra over placement lists (states), one mesh dim changing per edge, using only
//   transitions the
//     executor supports and that keep the left-to-right nesting valid, minimising the CostModel
//     below; upstream's default plan and its graph-based plan are candidates too, so min-cost is
//     never costlier than upstream's default plan and ends at the same layout.
//
// Validity (upstream's refusals, as InputError naming the field and value):
//   * "to" must have one placement per mesh dim, shard dims within the tensor rank (negative dims
//   normalised);
//   * a target Partial must equal the source placement on that mesh dim (upstream: "redistributing
//   to Partial is for
//     internal use only") — this covers R → P, S → P and P(a) → P(b);
//   * a placement list must not mix Partial reduce ops, except sum with avg.
// _S(d,1) is planned as S(d) (the same layout; upstream decodes it so too).
// A mesh dim of size 1 keeps its step (upstream's transform infos keep it) with collective "none"
// and 0 bytes.
#pragma once

#include <string>
#include <string_view>

#include "dtsim/layout/plan.h"
#include "dtsim/layout/spec.h"

namespace dtsim {

// The work the searches of one PlanRedistribute call may do together (min-cost: one unit per rank
// of every step it builds; upstream's graph-based planner: one unit per mesh dim of every edge it
// weighs). Both searches grow exponentially with the number of mesh dims (mesh (2,)*8 with a 2-d
// tensor took 30 s and 1 GB); past this bound (a second or two) PlanRedistribute throws
// InputError("planner") naming the case instead. Meshes of up to 6 dims of size 2 with 2-d tensors
// and of up to 5 with 4-d tensors plan inside it (3-d meshes of 16x16x16 too); the greedy planner
// needs no search unless a _StridedShard is involved.
inline constexpr int64_t kMaxPlannerSearchWork = int64_t{1} << 20;

// Alpha-beta cost of one collective on one group of n ranks, in the style of nccl-tests and
// upstream's torch/distributed/tensor/_collective_utils.py (allgather_cost, reduce_scatter_cost,
// allreduce_cost):
//   est_us = base_latency_us + hops * hop_latency_us + S * busbw_factor / bandwidth
// with S the message size in bytes as nccl-tests counts it (all_gather: the gathered output;
// reduce_scatter and all_to_all: the input; all_reduce: the buffer), the largest over the group's
// ranks, and
//   all_gather, reduce_scatter, all_to_all: hops = n-1, busbw_factor = (n-1)/n;  all_reduce:
//   2(n-1), 2(n-1)/n.
// A step's estimate is its slowest group (groups run concurrently); local steps and "none" cost 0.
// Defaults are upstream's intra-host (NVLink, Ampere/Hopper) constants from
// MeshTopoInfo.build_from_mesh.
struct CostModel {
  double base_latency_us = 6.6;  // fixed launch latency per collective (upstream: 6.6 us)
  double hop_latency_us = 0.6;   // per ring hop (upstream intra-host: 0.6 us; inter-host 2.7 us)
  // Bus bandwidth in GiB/s (2^30 bytes per second): upstream computes bytes / 2^30 / 87.7 seconds.
  double bandwidth_gib_per_s = 87.7;
  // Devices per host that upstream's graph-based planner assumes when it picks a path (MeshTopoInfo
  // uses the device count of the mesh's device type: 1 for "cpu", the GPU count on CUDA hosts).
  // Only used to emulate that planner's choice, not for dtsim's own estimates.
  int64_t upstream_devices_per_host = 1;
  // Estimated microseconds of `collective` over a group of `n` ranks whose largest message is
  // `message_bytes`. 0 for local steps and "none".
  double EstimateUs(CollectiveKind collective, int64_t n, int64_t message_bytes) const;
};

// Plans the redistribution of `src` to `dst` (same mesh, same shape). Throws InputError("to" /
// "from") for the refusals listed above. Example: mesh (2, 2), shape (4, 4), [S(0), S(1)] → [S(1),
// S(0)] with kGreedy gives three steps: mesh dim 1 S(1) → R (all_gather), mesh dim 0 S(0) → S(1)
// (all_to_all), mesh dim 1 R → S(0) (local_split).
Plan PlanRedistribute(const DTensorSpec& src, const Placements& dst, PlannerKind kind,
                      const CostModel& model = CostModel());

// Checks and normalises `dst` for redistributing `src` (the refusals above); returns the normalised
// list.
Placements ValidateRedistribute(const DTensorSpec& src, const Placements& dst);

// Builds the step that changes mesh dim `mesh_dim` of `before` to `to` for a tensor of `src`'s
// mesh/shape/dtype, with the given per-rank logical shapes (indexed like mesh.ranks()): the
// collective, groups, exact padded bytes, peak memory and estimate. Precondition: `before` is valid
// for `src`'s mesh and shape; `to` is normalised.
PlanStep BuildStep(const DTensorSpec& src, const Placements& before, int64_t mesh_dim,
                   const Placement& to,
                   const std::vector<std::vector<int64_t>>& logical_shape_per_rank,
                   const CostModel& model);

}  // namespace dtsim
