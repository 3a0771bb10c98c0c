// Building plan steps: per-rank local and logical shapes, the exact padded bytes of a step's
// collective, its peak memory and its estimate (CostModel). Shared by every planner.
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

// The bytes of a buffer of `shape` with `item`-byte elements; InputError("shape") naming the step
// when the count does not fit in 64 bits (a shape near 2^62 elements of an 8-byte dtype, or its
// padded all_gather output).
int64_t Bytes(int64_t item, const std::vector<int64_t>& shape, int64_t times,
              const DTensorSpec& src, int64_t mesh_dim, CollectiveKind collective) {
  std::vector<int64_t> factors = shape;
  factors.push_back(item);
  if (times != 1) factors.push_back(times);
  return MulOrThrow(factors, "shape",
                    StrCat(IntListToString(src.shape()), " ", ToString(src.dtype()),
                           ": the bytes of the ", ToString(collective), " on mesh dim ", mesh_dim,
                           " (buffer shape ", IntListToString(shape), " x ", item, " bytes",
                           times != 1 ? StrCat(" x ", times) : "", ")"));
}

// The coordinate of every rank position.
std::vector<std::vector<int64_t>> Coordinates(const DeviceMesh& mesh) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(mesh.size());
  for (int64_t rank : mesh.ranks()) out.push_back(mesh.GetCoordinate(rank));
  return out;
}

// Local shapes of every rank position under `placements`.
std::vector<std::vector<int64_t>> LocalShapes(const DTensorSpec& spec, const Placements& placements,
                                              const std::vector<std::vector<int64_t>>& coords) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(coords.size());
  for (const auto& c : coords) {
    out.push_back(LocalShapeAt(spec.shape(), spec.mesh().shape(), c, placements));
  }
  return out;
}

// Upstream greedy's logical shapes: [mesh_dim][rank position], from the SOURCE placements: mesh dim
// i sees the global shape with the source's Shard (not _StridedShard) placements on mesh dims < i
// applied in order.
std::vector<std::vector<std::vector<int64_t>>> GreedyLogicalShapes(
    const DTensorSpec& src, const std::vector<std::vector<int64_t>>& coords) {
  const DeviceMesh& mesh = src.mesh();
  std::vector<std::vector<std::vector<int64_t>>> out(mesh.ndim());
  for (const auto& c : coords) {
    std::vector<int64_t> cur = src.shape();
    for (int64_t i = 0; i < mesh.ndim(); ++i) {
      out[i].push_back(cur);
      const Placement& p = src.placements()[i];
      if (p.is_shard()) cur[p.dim()] = ChunkRange(cur[p.dim()], mesh.size(i), c[i]).size();
    }
  }
  return out;
}

// The logical shapes of mesh dim `mesh_dim` in `state` (upstream's get_logical_shape for the
// default shard order): every other mesh dim's shard applied in mesh-dim order.
std::vector<std::vector<int64_t>> StateLogicalShapes(
    const DTensorSpec& src, const Placements& state, int64_t mesh_dim,
    const std::vector<std::vector<int64_t>>& coords) {
  const DeviceMesh& mesh = src.mesh();
  std::vector<std::vector<int64_t>> out;
  out.reserve(coords.size());
  for (const auto& c : coords) {
    std::vector<int64_t> cur = src.shape();
    for (int64_t j = 0; j < mesh.ndim(); ++j) {
      if (j == mesh_dim || !state[j].is_shard_like()) continue;
      cur[state[j].dim()] = ShardLength(state[j], cur[state[j].dim()], mesh.size(j), c[j]);
    }
    out.push_back(std::move(cur));
  }
  return out;
}

// The step on `mesh_dim` from layout `before` to layout `after` that runs upstream's `from` → `to`
// transition (for every planner but upstream's graph-based one, from/to are before/after's
// placements on mesh_dim; the graph-based one runs normalised Shard placements on layouts that
// _StridedShard encodes).
PlanStep BuildStepExec(const DTensorSpec& src, const Placements& before, const Placements& after,
                       int64_t mesh_dim, const Placement& from, const Placement& to,
                       const std::vector<std::vector<int64_t>>& logical, const CostModel& model,
                       const std::vector<std::vector<int64_t>>& local_shapes) {
  const DeviceMesh& mesh = src.mesh();
  const int64_t num_ranks = mesh.size();
  const int64_t n = mesh.size(mesh_dim);
  const int64_t item = ItemSize(src.dtype());
  PlanStep step;
  step.mesh_dim = mesh_dim;
  step.from = from;
  step.to = to;
  step.placements_before = before;
  step.placements_after = after;
  step.logical_shape_per_rank = logical;
  step.bytes_sent_per_rank.assign(num_ranks, 0);
  step.bytes_received_per_rank.assign(num_ranks, 0);
  step.peak_extra_bytes_per_rank.assign(num_ranks, 0);
  const TransitionRule rule = RuleFor(step.from, to, n, mesh_dim);
  step.collective = rule.collective;
  step.then_local_split = rule.then_local_split;
  if (!step.communicates()) return step;
  step.groups = mesh.GroupsAlong(mesh_dim);

  // message[r]: the message size nccl-tests would report for rank r's part of the collective.
  std::vector<int64_t> message(num_ranks, 0);
  for (int64_t r = 0; r < num_ranks; ++r) {
    std::vector<int64_t> shape = local_shapes[r];
    const std::vector<int64_t>& lshape = logical[r];
    int64_t in = 0, out = 0;
    bool padded = false;
    if (step.collective == CollectiveKind::kAllReduce) {
      in = out = Bytes(item, shape, 1, src, mesh_dim, step.collective);
      message[r] = in;
    } else if (step.collective == CollectiveKind::kAllGather) {
      const Placement& f = step.from;
      const int64_t d = f.dim();
      const int64_t length = lshape[d];
      int64_t chunk = shape[d];
      if (f.is_shard()) {
        if (length % n != 0)
          chunk = CeilDiv(length, n);  // _maybe_pad_tensor pads to the full chunk
      } else {
        chunk = ShardLength(f, length, n, 0);  // _StridedShard pads to rank 0's (the largest) piece
      }
      padded = chunk != shape[d];
      shape[d] = chunk;
      in = Bytes(item, shape, 1, src, mesh_dim, step.collective);
      out = Bytes(item, shape, n, src, mesh_dim, step.collective);
      message[r] = out;
    } else if (step.collective == CollectiveKind::kReduceScatter) {
      const int64_t d = to.dim();
      const int64_t length = shape[d];  // _reduce_shard_tensor pads the local tensor itself
      const int64_t chunk = CeilDiv(length, n);
      padded = length % n != 0;
      shape[d] = chunk * n;  // <= length + n - 1: fits
      in = Bytes(item, shape, 1, src, mesh_dim, step.collective);
      out = in / n;
      message[r] = in;
    } else {  // all_to_all S(a) → S(b)
      const int64_t a = step.from.dim(), b = to.dim();
      if (lshape[a] % n != 0) {
        shape[a] = CeilDiv(lshape[a], n);
        padded = true;
      }
      if (lshape[b] % n != 0) {
        shape[b] = CeilDiv(lshape[b], n) * n;
        padded = true;
      }
      in = out = Bytes(item, shape, 1, src, mesh_dim, step.collective);
      message[r] = in;
    }
    step.bytes_sent_per_rank[r] = in;
    step.bytes_received_per_rank[r] = out;
    const auto peak = CheckedAdd(out, padded ? in : 0);
    if (!peak) {
      throw InputError("shape", StrCat(IntListToString(src.shape()), " ", ToString(src.dtype()),
                                       ": the peak extra bytes of the ", ToString(step.collective),
                                       " on mesh dim ", mesh_dim, " overflow 64-bit integers"));
    }
    step.peak_extra_bytes_per_rank[r] = *peak;
  }
  for (const auto& group : step.groups) {
    int64_t largest = 0;
    for (int64_t rank : group) largest = std::max(largest, message[mesh.PositionOf(rank)]);
    step.est_us = std::max(step.est_us, model.EstimateUs(step.collective, n, largest));
  }
  return step;
}

PlanStep BuildStepWith(const DTensorSpec& src, const Placements& before, int64_t mesh_dim,
                       const Placement& to, const std::vector<std::vector<int64_t>>& logical,
                       const CostModel& model, const std::vector<std::vector<int64_t>>& coords,
                       const std::vector<std::vector<int64_t>>& local_shapes) {
  Placements after = before;
  after[mesh_dim] = to;
  return BuildStepExec(src, before, after, mesh_dim, before[mesh_dim], to, logical, model,
                       local_shapes);
}

Plan NewPlan(const DTensorSpec& src, const Placements& dst, PlannerKind planner) {
  Plan plan;
  plan.planner = planner;
  plan.mesh = src.mesh().ToString();
  for (int64_t i = 0; i < src.mesh().ndim(); ++i)
    plan.mesh_dim_labels.push_back(src.mesh().DimLabel(i));
  plan.src = src.placements();
  plan.dst = dst;
  plan.shape = src.shape();
  plan.dtype = src.dtype();
  return plan;
}

}  // namespace planner_internal

using planner_internal::BuildStepWith;
using planner_internal::Coordinates;
using planner_internal::LocalShapes;

double CostModel::EstimateUs(CollectiveKind collective, int64_t n, int64_t message_bytes) const {
  if (n <= 1) return 0;
  double hops = 0, factor = 0;
  if (collective == CollectiveKind::kAllGather || collective == CollectiveKind::kReduceScatter ||
      collective == CollectiveKind::kAllToAll) {
    hops = n - 1;
    factor = static_cast<double>(n - 1) / n;
  } else if (collective == CollectiveKind::kAllReduce) {
    hops = 2.0 * (n - 1);
    factor = 2.0 * (n - 1) / n;
  } else {
    return 0;
  }
  const double seconds = message_bytes * factor / (bandwidth_gib_per_s * 1024.0 * 1024.0 * 1024.0);
  return base_latency_us + hops * hop_latency_us + seconds * 1e6;
}

PlanStep BuildStep(const DTensorSpec& src, const Placements& before, int64_t mesh_dim,
                   const Placement& to,
                   const std::vector<std::vector<int64_t>>& logical_shape_per_rank,
                   const CostModel& model) {
  const auto coords = Coordinates(src.mesh());
  return BuildStepWith(src, before, mesh_dim, to, logical_shape_per_rank, model, coords,
                       LocalShapes(src, before, coords));
}

}  // namespace dtsim
