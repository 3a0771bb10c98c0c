// The redistribution planners (see the narrative in include/dtsim/planner.h).
//
// Terms used below:
//   * state — a full placement list (one placement per mesh dim), read left to right: a later mesh dim that shards
//     the same tensor dim splits what the earlier ones left (spec.h's "nested sharding").
//   * rank position — the index of a rank in mesh.ranks(); every per-rank vector is indexed by it.
//   * logical shape (of mesh dim i, for one rank) — the global shape with the shards of the other mesh dims applied;
//     upstream pads uneven collectives on mesh dim i to ceil(logical size / n).
#include "dtsim/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "dtsim/error.h"

namespace dtsim {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// Size along its dim of the piece that shard-like `p` gives rank `r` of `n` of a dim of length `length`.
int64_t ShardSize(const Placement& p, int64_t length, int64_t n, int64_t r) {
  if (p.is_shard()) return ChunkRange(length, n, r).size();
  int64_t total = 0;
  for (int64_t j = 0; j < p.split_factor(); ++j) {
    total += ChunkRange(ChunkRange(length, p.split_factor(), j).size(), n, r).size();
  }
  return total;
}

// Refuses a placement list that mixes Partial reduce ops other than sum with avg (upstream's
// assert_no_mixed_partial_types).
void CheckNoMixedPartials(const Placements& placements, const std::string& field) {
  std::set<std::string> ops;
  for (const Placement& p : placements) {
    if (p.is_partial()) ops.insert(ToString(p.reduce_op()));
  }
  if (ops.size() <= 1) return;
  if (ops == std::set<std::string>{"avg", "sum"}) return;
  std::string names;
  for (const std::string& op : ops) names += (names.empty() ? "" : ", ") + op;
  throw InputError(field, StrCat("'", ToString(placements), "' mixes Partial reduce ops {", names,
                                 "}; only sum with avg may be mixed (upstream refuses the rest)"));
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
    out.push_back(ComputeRankLayout(spec.shape(), spec.mesh().shape(), c, placements).local_shape);
  }
  return out;
}

// Upstream greedy's logical shapes: [mesh_dim][rank position], from the SOURCE placements: mesh dim i sees the global
// shape with the source's Shard (not _StridedShard) placements on mesh dims < i applied in order.
std::vector<std::vector<std::vector<int64_t>>> GreedyLogicalShapes(const DTensorSpec& src,
                                                                   const std::vector<std::vector<int64_t>>& coords) {
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

// The logical shapes of mesh dim `mesh_dim` in `state` (upstream's get_logical_shape for the default shard order):
// every other mesh dim's shard applied in mesh-dim order.
std::vector<std::vector<int64_t>> StateLogicalShapes(const DTensorSpec& src, const Placements& state,
                                                     int64_t mesh_dim,
                                                     const std::vector<std::vector<int64_t>>& coords) {
  const DeviceMesh& mesh = src.mesh();
  std::vector<std::vector<int64_t>> out;
  out.reserve(coords.size());
  for (const auto& c : coords) {
    std::vector<int64_t> cur = src.shape();
    for (int64_t j = 0; j < mesh.ndim(); ++j) {
      if (j == mesh_dim || !state[j].is_shard_like()) continue;
      cur[state[j].dim()] = ShardSize(state[j], cur[state[j].dim()], mesh.size(j), c[j]);
    }
    out.push_back(std::move(cur));
  }
  return out;
}

// What upstream's redistribute_local_tensor runs for from → to on a mesh dim of size n > 1.
std::string CollectiveFor(const Placement& from, const Placement& to, bool* then_split) {
  *then_split = false;
  if (to.is_replicate()) return from.is_partial() ? collective::kAllReduce : collective::kAllGather;
  if (to.is_shard()) {
    if (from.is_partial()) return collective::kReduceScatter;
    if (from.is_replicate()) return collective::kLocalSplit;
    if (from.is_shard()) return collective::kAllToAll;
    *then_split = true;  // _S → S: gather, then split
    return collective::kAllGather;
  }
  if (to.is_strided_shard()) {
    if (from.is_replicate()) return collective::kLocalSplit;
    *then_split = true;
    return from.is_partial() ? collective::kAllReduce : collective::kAllGather;
  }
  // to is Partial: only R → P is executable (ValidateRedistribute refuses the rest for users).
  DTSIM_CHECK(from.is_replicate(), "no executable transition ", from.ToString(), " -> ", to.ToString());
  return collective::kLocalPartition;
}

PlanStep BuildStepWith(const DTensorSpec& src, const Placements& before, int64_t mesh_dim, const Placement& to,
                       const std::vector<std::vector<int64_t>>& logical, const CostModel& model,
                       const std::vector<std::vector<int64_t>>& coords,
                       const std::vector<std::vector<int64_t>>& local_shapes) {
  const DeviceMesh& mesh = src.mesh();
  const int64_t num_ranks = mesh.size();
  const int64_t n = mesh.size(mesh_dim);
  const int64_t item = ItemSize(src.dtype());
  PlanStep step;
  step.mesh_dim = mesh_dim;
  step.from = before[mesh_dim];
  step.to = to;
  step.placements_before = before;
  step.placements_after = before;
  step.placements_after[mesh_dim] = to;
  step.logical_shape_per_rank = logical;
  step.bytes_sent_per_rank.assign(num_ranks, 0);
  step.bytes_received_per_rank.assign(num_ranks, 0);
  step.peak_extra_bytes_per_rank.assign(num_ranks, 0);
  if (step.from == to || n == 1) {
    step.collective = collective::kNone;
    return step;
  }
  step.collective = CollectiveFor(step.from, to, &step.then_local_split);
  if (!step.communicates()) return step;
  step.groups = mesh.GroupsAlong(mesh_dim);

  // message[r]: the message size nccl-tests would report for rank r's part of the collective.
  std::vector<int64_t> message(num_ranks, 0);
  for (int64_t r = 0; r < num_ranks; ++r) {
    std::vector<int64_t> shape = local_shapes[r];
    const std::vector<int64_t>& lshape = logical[r];
    int64_t in = 0, out = 0;
    bool padded = false;
    if (step.collective == collective::kAllReduce) {
      in = out = item * Product(shape);
      message[r] = in;
    } else if (step.collective == collective::kAllGather) {
      const Placement& f = step.from;
      const int64_t d = f.dim();
      const int64_t length = lshape[d];
      int64_t chunk = shape[d];
      if (f.is_shard()) {
        if (length % n != 0) chunk = CeilDiv(length, n);  // _maybe_pad_tensor pads to the full chunk
      } else {
        chunk = ShardSize(f, length, n, 0);  // _StridedShard pads to rank 0's (the largest) piece
      }
      padded = chunk != shape[d];
      shape[d] = chunk;
      in = item * Product(shape);
      out = in * n;
      message[r] = out;
    } else if (step.collective == collective::kReduceScatter) {
      const int64_t d = to.dim();
      const int64_t length = shape[d];  // _reduce_shard_tensor pads the local tensor itself
      const int64_t chunk = CeilDiv(length, n);
      padded = length % n != 0;
      shape[d] = chunk * n;
      in = item * Product(shape);
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
      in = out = item * Product(shape);
      message[r] = in;
    }
    step.bytes_sent_per_rank[r] = in;
    step.bytes_received_per_rank[r] = out;
    step.peak_extra_bytes_per_rank[r] = out + (padded ? in : 0);
  }
  // Position of each global rank, to look up the group members' messages.
  std::map<int64_t, int64_t> position;
  for (int64_t r = 0; r < num_ranks; ++r) position[mesh.ranks()[r]] = r;
  for (const auto& group : step.groups) {
    int64_t largest = 0;
    for (int64_t rank : group) largest = std::max(largest, message[position[rank]]);
    step.est_us = std::max(step.est_us, model.EstimateUs(step.collective, n, largest));
  }
  (void)coords;
  return step;
}

struct Transition {
  int64_t mesh_dim;
  Placement from, to;
};

// upstream's generate_greedy_transform_infos, transition by transition.
std::vector<Transition> GreedyTransitions(const DeviceMesh& mesh, const Placements& src, const Placements& dst) {
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

Plan NewPlan(const DTensorSpec& src, const Placements& dst, const std::string& planner) {
  Plan plan;
  plan.planner = planner;
  plan.mesh = src.mesh().ToString();
  for (int64_t i = 0; i < src.mesh().ndim(); ++i) plan.mesh_dim_labels.push_back(src.mesh().DimLabel(i));
  plan.src = src.placements();
  plan.dst = dst;
  plan.shape = src.shape();
  plan.dtype = ToString(src.dtype());
  return plan;
}

Plan GreedyPlan(const DTensorSpec& src, const Placements& dst, const CostModel& model,
                const std::vector<std::vector<int64_t>>& coords) {
  Plan plan = NewPlan(src, dst, ToString(PlannerKind::kGreedy));
  auto logical = GreedyLogicalShapes(src, coords);
  Placements cur = src.placements();
  for (const Transition& t : GreedyTransitions(src.mesh(), src.placements(), dst)) {
    DTSIM_CHECK(cur[t.mesh_dim] == t.from, "greedy transition does not start at the current placement");
    PlanStep step = BuildStepWith(src, cur, t.mesh_dim, t.to, logical[t.mesh_dim], model, coords,
                                  LocalShapes(src, cur, coords));
    cur = step.placements_after;
    plan.total_est_us += step.est_us;
    plan.steps.push_back(std::move(step));
  }
  DTSIM_CHECK(cur == dst, "greedy plan ends at ", ToString(cur), " instead of ", ToString(dst));
  return plan;
}

// True if no mesh dim after `mesh_dim` shards tensor dim `dim` in `state`: mesh dim `mesh_dim` is then the innermost
// split of that dim, so gathering it or splitting it further keeps the left-to-right nesting.
bool InnermostFor(const Placements& state, int64_t mesh_dim, int64_t dim) {
  for (size_t j = mesh_dim + 1; j < state.size(); ++j) {
    if (state[j].is_shard_like() && state[j].dim() == dim) return false;
  }
  return true;
}

// True if every step of `plan` only removes or adds a shard-like placement on the innermost mesh dim splitting its
// tensor dim (the rule the search follows, which makes each step's collective produce its target layout).
bool KeepsNesting(const Plan& plan) {
  for (const PlanStep& s : plan.steps) {
    const Placements& before = s.placements_before;
    if (s.from.is_shard_like() && !InnermostFor(before, s.mesh_dim, s.from.dim())) return false;
    if (s.to.is_shard_like() && !InnermostFor(before, s.mesh_dim, s.to.dim())) return false;
  }
  return true;
}

// Dijkstra over states. Edges: change one mesh dim to R, S(d) for any tensor dim d, or the target placement of that
// mesh dim (covers _StridedShard targets); never to Partial (only R → P would be executable, and a target Partial
// always equals the source there), never away from a target Partial. Shard-like placements may only be removed or
// added on the innermost mesh dim splitting their tensor dim. Cost: (est_us, number of steps), lexicographic.
Plan MinCostSearch(const DTensorSpec& src, const Placements& dst, const CostModel& model,
                   const std::vector<std::vector<int64_t>>& coords) {
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
    const auto local_shapes = LocalShapes(src, state, coords);
    for (int64_t md = 0; md < mesh.ndim(); ++md) {
      const Placement& cur = state[md];
      if (dst[md].is_partial()) continue;
      if (cur.is_shard_like() && !InnermostFor(state, md, cur.dim())) continue;
      std::vector<Placement> targets = {Placement::Replicate(), dst[md]};
      for (int64_t d = 0; d < src.ndim(); ++d) targets.push_back(Placement::Shard(d));
      const auto logical = StateLogicalShapes(src, state, md, coords);
      for (const Placement& to : targets) {
        if (to == cur || to.is_partial()) continue;
        if (to.is_shard_like() && !InnermostFor(state, md, to.dim())) continue;
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
  Plan plan = NewPlan(src, dst, ToString(PlannerKind::kMinCost));
  DTSIM_CHECK(done.count(goal), "min-cost search did not reach ", goal);
  // Walk back, then rebuild the steps forward (with their logical shapes).
  std::vector<const Info*> chain;
  for (Key k = goal; k != start; k = best[k].prev) chain.push_back(&best[k]);
  std::reverse(chain.begin(), chain.end());
  Placements cur = src.placements();
  for (const Info* info : chain) {
    const int64_t md = info->mesh_dim;
    PlanStep step = BuildStepWith(src, cur, md, info->state[md], StateLogicalShapes(src, cur, md, coords), model,
                                  coords, LocalShapes(src, cur, coords));
    cur = step.placements_after;
    plan.total_est_us += step.est_us;
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

}  // namespace

std::string ToString(PlannerKind kind) { return kind == PlannerKind::kGreedy ? "greedy" : "min-cost"; }

PlannerKind ParsePlannerKind(std::string_view text, const std::string& field) {
  if (text == "greedy") return PlannerKind::kGreedy;
  if (text == "min-cost" || text == "min_cost" || text == "mincost") return PlannerKind::kMinCost;
  throw InputError(field, StrCat("unknown planner '", text, "' (expected greedy or min-cost)"));
}

double CostModel::EstimateUs(const std::string& collective, int64_t n, int64_t message_bytes) const {
  if (n <= 1) return 0;
  double hops = 0, factor = 0;
  if (collective == collective::kAllGather || collective == collective::kReduceScatter ||
      collective == collective::kAllToAll) {
    hops = n - 1;
    factor = static_cast<double>(n - 1) / n;
  } else if (collective == collective::kAllReduce) {
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
    throw InputError("to", StrCat("'", ToString(dst), "' has ", dst.size(), " placement", dst.size() == 1 ? "" : "s",
                                  " for ", mesh.ToString(), " of ", mesh.ndim(), " dim", mesh.ndim() == 1 ? "" : "s"));
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

PlanStep BuildStep(const DTensorSpec& src, const Placements& before, int64_t mesh_dim, const Placement& to,
                   const std::vector<std::vector<int64_t>>& logical_shape_per_rank, const CostModel& model) {
  const auto coords = Coordinates(src.mesh());
  return BuildStepWith(src, before, mesh_dim, to, logical_shape_per_rank, model, coords,
                       LocalShapes(src, before, coords));
}

Plan PlanRedistribute(const DTensorSpec& given_src, const Placements& dst, PlannerKind kind,
                      const CostModel& model) {
  const Placements target = ValidateRedistribute(given_src, dst);
  Placements canonical_src;
  for (const Placement& p : given_src.placements()) canonical_src.push_back(p.Canonical());
  const DTensorSpec src = DTensorSpec::Create(given_src.mesh(), canonical_src, given_src.shape(), given_src.dtype());
  const auto coords = Coordinates(src.mesh());
  bool strided = false;
  for (const Placements* list : {&src.placements(), &target}) {
    for (const Placement& p : *list) strided = strided || p.is_strided_shard();
  }
  if (strided) {
    // Upstream plans these with its graph-based search over (placements, shard order) states, not with the greedy
    // passes (whose nesting check ignores _StridedShard and would gather out of order). dtsim runs its own search.
    Plan searched = MinCostSearch(src, target, model, coords);
    searched.planner = ToString(kind);
    searched.note =
        "_StridedShard involved: upstream uses its graph-based planner here; dtsim's min-cost search stands in "
        "(same end placements, possibly different steps)";
    return searched;
  }
  Plan greedy = GreedyPlan(src, target, model, coords);
  if (kind == PlannerKind::kGreedy) return greedy;
  Plan searched = MinCostSearch(src, target, model, coords);
  // Keep greedy's (upstream's) plan unless the search is strictly cheaper.
  if (greedy.total_est_us <= searched.total_est_us && KeepsNesting(greedy)) {
    greedy.planner = ToString(PlannerKind::kMinCost);
    greedy.note = "upstream's greedy plan is already the cheapest found";
    return greedy;
  }
  return searched;
}

}  // namespace dtsim
