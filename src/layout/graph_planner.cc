// Upstream's graph-based planner, emulated (DTensorRedistributePlanner.find_min_cost_path).
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

// ---- upstream's graph-based planner, emulated (DTensorRedistributePlanner.find_min_cost_path)
// ----
//
// Upstream plans every redistribution that involves a _StridedShard (and any redistribution when
// the min-cost plan is forced) with Dijkstra over states (placements, shard order): the placements
// are plain Shard / Replicate / Partial, and the shard order lists, for each sharded tensor dim,
// the mesh dims in the order they split it. A _StridedShard list decodes into such a state
// (_maybe_convert_StridedShard_to_shard_order) and every state encodes back into a dtsim placement
// list with _StridedShard (_convert_shard_order_to_StridedShard). The emulation follows upstream's
// edge order (get_next_state: a2a, gather, all-reduce, split, reduce-scatter, partition), its cost
// (one_step_redistribute_cost with MeshTopoInfo: 6.6 us + hops * latency + bytes/bandwidth,
// computed in the same floating-point order), and its tie-breaking (a heap ordered by (cost, push
// counter)).

// _maybe_convert_StridedShard_to_shard_order + normalisation; nullopt when upstream cannot decode
// the split factors.
std::optional<GraphState> DecodeShardOrder(const Placements& placements, const DeviceMesh& mesh) {
  GraphState state;
  std::map<int64_t, std::vector<int64_t>> order;
  for (int64_t md = static_cast<int64_t>(placements.size()) - 1; md >= 0; --md) {
    const Placement& p = placements[md];
    if (!p.is_shard_like()) continue;
    std::vector<int64_t>& mds = order[p.dim()];
    const int64_t sf = p.is_strided_shard() ? p.split_factor() : 1;
    int64_t acc = 1;
    bool found = false;
    for (size_t i = 0; i <= mds.size(); ++i) {
      if (acc == sf) {
        mds.insert(mds.begin() + i, md);
        found = true;
        break;
      }
      if (i < mds.size()) acc *= mesh.size(mds[i]);
    }
    if (!found) return std::nullopt;
  }
  for (const Placement& p : placements) {
    state.placements.push_back(p.is_strided_shard() ? Placement::Shard(p.dim()) : p);
  }
  state.order = std::move(order);
  return state;
}

// _convert_shard_order_to_StridedShard: the dtsim placement list whose left-to-right layout is this
// state.
Placements EncodeShardOrder(const GraphState& state, const DeviceMesh& mesh) {
  Placements out = state.placements;
  for (const auto& [td, mds] : state.order) {
    for (size_t idx = 0; idx < mds.size(); ++idx) {
      int64_t sf = 1;
      for (size_t j = 0; j < idx; ++j) {
        if (mds[j] > mds[idx]) sf *= mesh.size(mds[j]);
      }
      out[mds[idx]] = sf == 1 ? Placement::Shard(td) : Placement::StridedShard(td, sf);
    }
  }
  return out;
}

// upstream's MeshTopoInfo.build_from_mesh with `devices_per_host` devices per host.
struct UpstreamTopo {
  std::vector<double> bandwidth, latency;
  UpstreamTopo(const DeviceMesh& mesh, int64_t devices_per_host) {
    bandwidth.assign(mesh.ndim(), 87.7);
    latency.assign(mesh.ndim(), 0.6);
    int64_t total = 1;
    for (int64_t md = mesh.ndim() - 1; md >= 0; --md) {
      total *= mesh.size(md);
      if (total > devices_per_host) {
        bandwidth[md] *= 0.22;
        latency[md] = 2.7;
      }
    }
  }
  // allgather_cost / reduce_scatter_cost (hop_factor 1) and allreduce_cost (hop_factor 2), same
  // operation order.
  double Cost(double bytes_gb, int64_t n, int64_t md, int64_t hop_factor) const {
    const int64_t hops = hop_factor * (n - 1);
    const double lat = 6.6 + hops * latency[md];
    const double bw = (bytes_gb * hops / n) / bandwidth[md];
    return lat + bw * 1e6;
  }
};

// one_step_redistribute_cost between states differing on one mesh dim.
double UpstreamStepCost(const GraphState& cur, const GraphState& next, const DTensorSpec& src,
                        const UpstreamTopo& topo) {
  const DeviceMesh& mesh = src.mesh();
  int64_t md = -1;
  for (int64_t i = 0; i < mesh.ndim(); ++i) {
    if (cur.placements[i] != next.placements[i]) md = i;
  }
  if (md < 0) return 0.0;
  int64_t num_shards = 1;
  for (int64_t i = 0; i < mesh.ndim(); ++i) {
    if (cur.placements[i].is_shard_like()) num_shards *= mesh.size(i);
  }
  int64_t numel = 1;
  for (int64_t s : src.shape()) numel *= s;  // <= 2^62 (DTensorSpec)
  // Upstream multiplies Python integers; the product fits in int64 except for the largest tensors,
  // which dtsim refuses when it builds the step's byte counts anyway.
  const auto bytes = CheckedMul(ItemSize(src.dtype()), numel);
  double bytes_gb =
      (bytes ? static_cast<double>(*bytes)
             : static_cast<double>(static_cast<long double>(numel) * ItemSize(src.dtype()))) /
      static_cast<double>(num_shards);
  bytes_gb = bytes_gb / 1024 / 1024 / 1024;
  const Placement& a = cur.placements[md];
  const Placement& b = next.placements[md];
  const int64_t n = mesh.size(md);
  if (a.is_shard() && b.is_replicate()) return topo.Cost(bytes_gb * n, n, md, 1);
  if (a.is_shard() && b.is_shard()) return topo.Cost(bytes_gb, n, md, 1) + 1.0;
  if (a.is_partial() && b.is_replicate()) return topo.Cost(bytes_gb, n, md, 2);
  if (a.is_partial() && b.is_shard()) return topo.Cost(bytes_gb, n, md, 1);
  if ((a.is_shard() && b.is_partial()) || (a.is_partial() && b.is_partial())) {
    return std::numeric_limits<double>::infinity();
  }
  return 0.0;
}

// get_next_state, in upstream's order; a state reached twice keeps its first position and its last
// cost.
std::vector<std::pair<GraphState, double>> UpstreamNextStates(
    const GraphState& cur, const DTensorSpec& src, const std::vector<std::string>& partial_ops,
    const UpstreamTopo& topo) {
  std::vector<std::pair<GraphState, double>> out;
  std::map<std::string, size_t> index;
  auto add = [&](GraphState next) {
    for (auto it = next.order.begin(); it != next.order.end();) {
      it = it->second.empty() ? next.order.erase(it) : std::next(it);
    }
    const double cost = UpstreamStepCost(cur, next, src, topo);
    const std::string key = next.Key();
    auto it = index.find(key);
    if (it != index.end()) {
      out[it->second].second = cost;
    } else {
      index[key] = out.size();
      out.emplace_back(std::move(next), cost);
    }
  };
  const int64_t ndim = src.ndim();
  const Placements& p = cur.placements;
  // Case 1: S(a) → S(b) on the last mesh dim splitting a (all-to-all).
  for (const auto& [td, mds] : cur.order) {
    const int64_t md = mds.back();
    if (!p[md].is_shard()) continue;
    for (int64_t dst = 0; dst < ndim; ++dst) {
      if (dst == td) continue;
      GraphState next = cur;
      next.order[td].pop_back();
      next.order[dst].push_back(md);
      next.placements[md] = Placement::Shard(dst);
      add(std::move(next));
    }
  }
  // Case 2: S → R on the last mesh dim splitting a tensor dim (all-gather).
  for (const auto& [td, mds] : cur.order) {
    const int64_t md = mds.back();
    if (!p[md].is_shard()) continue;
    GraphState next = cur;
    next.order[td].pop_back();
    next.placements[md] = Placement::Replicate();
    add(std::move(next));
  }
  // Case 3: P → R (all-reduce).
  for (size_t md = 0; md < p.size(); ++md) {
    if (!p[md].is_partial()) continue;
    GraphState next = cur;
    next.placements[md] = Placement::Replicate();
    add(std::move(next));
  }
  // Case 4: R → S(d), appended to d's order (local split); case 5: P → S(d) (reduce-scatter), in
  // upstream's order (every R mesh dim first, then every P one).
  for (const bool from_partial : {false, true}) {
    for (size_t md = 0; md < p.size(); ++md) {
      if (from_partial ? !p[md].is_partial() : !p[md].is_replicate()) continue;
      for (int64_t dst = 0; dst < ndim; ++dst) {
        GraphState next = cur;
        next.placements[md] = Placement::Shard(dst);
        next.order[dst].push_back(md);
        add(std::move(next));
      }
    }
  }
  // Case 6: R → P(op) for the reduce ops of the source and target, unless that mixes ops (sum with
  // avg may mix).
  for (size_t md = 0; md < p.size(); ++md) {
    if (!p[md].is_replicate()) continue;
    for (const std::string& op : partial_ops) {
      GraphState next = cur;
      next.placements[md] = Placement::Partial(*FindReduceOp(op));
      std::set<std::string> ops;
      for (const Placement& q : next.placements) {
        if (q.is_partial()) ops.insert(ToString(q.reduce_op()));
      }
      if (ops.size() > 1 && ops != std::set<std::string>{"avg", "sum"}) continue;
      add(std::move(next));
    }
  }
  return out;
}

// upstream's get_logical_shape for the transition of `mesh_dim` out of `state`, for every rank
// position.
std::vector<std::vector<int64_t>> UpstreamGraphLogicalShapes(
    const DTensorSpec& src, const GraphState& state, int64_t mesh_dim,
    const std::vector<std::vector<int64_t>>& coords) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& c : coords) {
    std::vector<int64_t> shape = src.shape();
    for (const auto& [td, mds] : state.order) {
      for (int64_t md : mds) {
        if (md == mesh_dim) continue;
        shape[td] = ChunkRange(shape[td], src.mesh().size(md), c[md]).size();
      }
    }
    out.push_back(std::move(shape));
  }
  return out;
}

// The emulated graph-based plan from the decoded source to the decoded target state.
Plan UpstreamGraphPlan(const DTensorSpec& src, const GraphState& start, const GraphState& goal,
                       const Placements& src_placements, const Placements& dst_placements,
                       const CostModel& model, const std::vector<std::vector<int64_t>>& coords,
                       SearchBudget& budget) {
  const UpstreamTopo topo(src.mesh(), model.upstream_devices_per_host);
  std::set<std::string> op_set;
  for (const Placements* list : {&src_placements, &dst_placements}) {
    for (const Placement& p : *list) {
      if (p.is_partial()) op_set.insert(ToString(p.reduce_op()));
    }
  }
  const std::vector<std::string> partial_ops(op_set.begin(), op_set.end());
  struct Entry {
    GraphState state;
    double cost;
    int64_t parent;
  };
  std::vector<Entry> entries;
  using Item = std::tuple<double, int64_t>;  // (cost, counter = index into entries)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  std::set<std::string> visited;
  entries.push_back({start, 0.0, -1});
  heap.push({0.0, 0});
  const std::string goal_key = goal.Key();
  int64_t found = -1;
  while (!heap.empty()) {
    const int64_t at = std::get<1>(heap.top());
    heap.pop();
    const std::string key = entries[at].state.Key();
    if (key == goal_key) {
      found = at;
      break;
    }
    if (!visited.insert(key).second) continue;
    const GraphState cur = entries[at].state;
    const double cost = entries[at].cost;
    auto next_states = UpstreamNextStates(cur, src, partial_ops, topo);
    budget.Spend(1 + static_cast<int64_t>(next_states.size()) * src.mesh().ndim());
    for (auto& [next, step_cost] : next_states) {
      if (visited.count(next.Key())) continue;
      const double total = cost + step_cost;
      entries.push_back({std::move(next), total, at});
      heap.push({total, static_cast<int64_t>(entries.size()) - 1});
    }
  }
  DTSIM_CHECK(found >= 0, "upstream's graph search found no path to ", goal_key);
  std::vector<int64_t> path;
  for (int64_t at = found; at >= 0; at = entries[at].parent) path.push_back(at);
  std::reverse(path.begin(), path.end());
  Plan plan = NewPlan(src, dst_placements, PlannerKind::kUpstreamGraph);
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const GraphState& a = entries[path[i]].state;
    const GraphState& b = entries[path[i + 1]].state;
    if (a.placements == b.placements) continue;
    int64_t md = 0;
    while (a.placements[md] == b.placements[md]) ++md;
    const Placements before = EncodeShardOrder(a, src.mesh());
    const Placements after = EncodeShardOrder(b, src.mesh());
    PlanStep step = BuildStepExec(src, before, after, md, a.placements[md], b.placements[md],
                                  UpstreamGraphLogicalShapes(src, a, md, coords), model,
                                  LocalShapes(src, before, coords));
    plan.total_est_us += step.est_us;
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

}  // namespace planner_internal

}  // namespace dtsim
