// The redistribution planners (see the narrative in include/dtsim/layout/planner.h).
//
// Terms used below:
//   * state — a full placement list (one placement per mesh dim), read left to right: a later mesh
//   dim that shards
//     the same tensor dim splits what the earlier ones left (spec.h's "nested sharding").
//   * rank position — the index of a rank in mesh.ranks(); every per-rank vector is indexed by it.
//   * logical shape (of mesh dim i, for one rank) — the global shape with the shards of the other
//   mesh dims applied;
//     upstream pads uneven collectives on mesh dim i to ceil(logical size / n).
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

namespace dtsim {
namespace {

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
  // Case 4: R → S(d), appended to d's order (local split).
  for (size_t md = 0; md < p.size(); ++md) {
    if (!p[md].is_replicate()) continue;
    for (int64_t dst = 0; dst < ndim; ++dst) {
      GraphState next = cur;
      next.placements[md] = Placement::Shard(dst);
      next.order[dst].push_back(md);
      add(std::move(next));
    }
  }
  // Case 5: P → S(d) (reduce-scatter).
  for (size_t md = 0; md < p.size(); ++md) {
    if (!p[md].is_partial()) continue;
    for (int64_t dst = 0; dst < ndim; ++dst) {
      GraphState next = cur;
      next.placements[md] = Placement::Shard(dst);
      next.order[dst].push_back(md);
      add(std::move(next));
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

}  // namespace

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

PlanStep BuildStep(const DTensorSpec& src, const Placements& before, int64_t mesh_dim,
                   const Placement& to,
                   const std::vector<std::vector<int64_t>>& logical_shape_per_rank,
                   const CostModel& model) {
  const auto coords = Coordinates(src.mesh());
  return BuildStepWith(src, before, mesh_dim, to, logical_shape_per_rank, model, coords,
                       LocalShapes(src, before, coords));
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
