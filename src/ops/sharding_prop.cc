// Sharding propagation: candidate expansion, upstream's redistribute cost and upstream's choice
// among candidates.
#include "dtsim/ops/sharding_prop.h"

#include <ATen/core/function_schema.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/layout/planner.h"
#include "dtsim/tensor/aten_dtype.h"

namespace dtsim {
namespace ops {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Upstream's MeshTopoInfo.build_from_mesh for a mesh of device type "cpu" (torch.cpu.device_count()
// == 1 device per host): a mesh dim is inter-host once the devices from it to the last dim exceed
// one.
struct MeshTopo {
  std::vector<int64_t> devices;
  std::vector<double> bandwidth;
  std::vector<double> latency;
};
MeshTopo BuildTopo(const DeviceMesh& mesh) {
  constexpr int64_t kDevicesPerHost = 1;
  MeshTopo t;
  const int64_t n = mesh.ndim();
  t.devices.assign(n, 1);
  t.bandwidth.assign(n, 87.7);
  t.latency.assign(n, 0.6);
  int64_t total = 1;
  for (int64_t d = n - 1; d >= 0; --d) {
    t.devices[d] = mesh.size(d);
    total *= mesh.size(d);
    if (total > kDevicesPerHost) {
      t.bandwidth[d] *= 0.22;
      t.latency[d] = 2.7;
    }
  }
  return t;
}

double RingCost(double bytes_gb, const MeshTopo& topo, int64_t dim, int64_t hop_factor) {
  const int64_t n = topo.devices[dim];
  const int64_t hops = hop_factor * (n - 1);
  const double latency = 6.6 + static_cast<double>(hops) * topo.latency[dim];
  const double bw =
      (bytes_gb * static_cast<double>(hops) / static_cast<double>(n)) / topo.bandwidth[dim];
  return latency + bw * 1e6;
}

// Upstream's _compute_placement_transition_cost: the cost of one step and the bytes the next step
// moves.
double TransitionCost(const Placement& from, const Placement& to, const MeshTopo& topo, int64_t dim,
                      double* bytes_gb) {
  if (from == to) return 0.0;
  const int64_t n = topo.devices[dim];
  // Upstream's is_shard() is false for _StridedShard.
  if (from.is_shard() && to.is_replicate()) {
    *bytes_gb *= static_cast<double>(n);
    return RingCost(*bytes_gb, topo, dim, 1);
  }
  if (from.is_shard() && to.is_shard()) return RingCost(*bytes_gb, topo, dim, 1) + 1.0;
  if (from.is_partial() && to.is_replicate()) return RingCost(*bytes_gb, topo, dim, 2);
  if (from.is_partial() && to.is_shard()) {
    const double cost = RingCost(*bytes_gb, topo, dim, 1);
    *bytes_gb /= static_cast<double>(n);
    return cost;
  }
  if (from.is_shard() && to.is_partial()) return kInf;
  if (from.is_partial() && to.is_partial()) return kInf;
  if (from.is_replicate() && to.is_shard()) {
    *bytes_gb /= static_cast<double>(n);
    return 0.0;
  }
  return 0.0;
}

// Upstream's is_tensor_shardable: every sharded tensor dim has at least as many elements as shards.
bool Shardable(const std::vector<int64_t>& shape, const DeviceMesh& mesh, const Placements& p) {
  std::vector<int64_t> shards(shape.size(), 1);
  for (size_t i = 0; i < p.size(); ++i) {
    if (!p[i].is_shard_like()) continue;
    const int64_t d = p[i].dim();
    if (d < 0 || d >= static_cast<int64_t>(shape.size())) return false;
    shards[d] *= mesh.size(static_cast<int64_t>(i));
    const int64_t lower = p[i].is_strided_shard() ? shards[d] * p[i].split_factor() : shards[d];
    if (shape[d] < lower) return false;
  }
  return true;
}

struct InputFlags {
  bool positional = true;  // in upstream's args_spec (not a kwarg-only tensor such as out=)
  bool is_out = false;
};
std::vector<InputFlags> FlagsOf(const OpCallInfo& call) {
  std::vector<InputFlags> flags;
  const auto& args = call.schema->arguments();
  for (size_t i = 0; i < args.size() && i < call.meta.size(); ++i) {
    if (call.meta[i]) flags.push_back({!args[i].kwarg_only(), args[i].is_out()});
    if (i < call.list_meta.size()) {
      for (size_t k = 0; k < call.list_meta[i].size(); ++k)
        flags.push_back({!args[i].kwarg_only(), false});
    }
  }
  return flags;
}

std::string PlacementsText(const std::vector<Placements>& lists) {
  std::ostringstream out;
  for (size_t i = 0; i < lists.size(); ++i) out << (i ? ", " : "") << ToString(lists[i]);
  return out.str();
}

// Expands single-dim rules over the mesh as upstream's expand_to_full_mesh_op_strategy (filters
// included).
std::vector<Candidate> ExpandSingleDim(const OpCallInfo& call, const DeviceMesh& mesh,
                                       const std::vector<Placements>& current,
                                       std::vector<SingleDimRule> rules,
                                       const SingleDimOptions& options,
                                       const std::vector<InputFlags>& flags) {
  const size_t n_in = call.inputs.size();
  size_t n_out = call.outputs.size();
  if (!rules.empty()) {
    DTSIM_CHECK(rules[0].size() >= n_in, call.name, ": a rule has ", rules[0].size(),
                " entries for ", n_in, " tensor inputs");
    n_out = rules[0].size() - n_in;
  }
  for (const SingleDimRule& r : rules) {
    DTSIM_CHECK(r.size() == n_out + n_in, call.name, ": rules of different lengths");
  }
  // The all-Replicate rule first, unless one exists (masked outputs stay None).
  bool has_replicate = false;
  for (const SingleDimRule& r : rules) {
    bool all = true;
    for (const RulePlacement& p : r) {
      all = all && (p.kind() == RulePlacement::Kind::kNone ||
                    (p.kind() == RulePlacement::Kind::kPlacement && p.placement().is_replicate()));
    }
    has_replicate = has_replicate || all;
  }
  if (!has_replicate) {
    SingleDimRule r(n_out + n_in, RulePlacement::R());
    for (size_t o = 0; o < n_out && o < call.outputs.size(); ++o) {
      if (!call.outputs[o]) r[o] = RulePlacement::None();
    }
    rules.insert(rules.begin(), r);
  }
  // Shard kinds used by the inputs: plain Shard first, then each split factor of _StridedShard.
  bool plain_shard = false;
  std::vector<int64_t> split_factors;
  for (const Placements& p : current) {
    for (const Placement& x : p) {
      if (x.is_shard()) plain_shard = true;
      if (x.is_strided_shard() && std::find(split_factors.begin(), split_factors.end(),
                                            x.split_factor()) == split_factors.end()) {
        split_factors.push_back(x.split_factor());
      }
    }
  }
  std::vector<int64_t> builders;  // 0 = Shard, k > 0 = _StridedShard(split_factor k)
  if (plain_shard) builders.push_back(0);
  for (int64_t sf : split_factors) builders.push_back(sf);
  // Concrete rules: entries are placements or "none".
  std::vector<std::vector<std::optional<Placement>>> concrete;
  for (const SingleDimRule& r : rules) {
    bool placeholder = std::any_of(r.begin(), r.end(), [](const RulePlacement& p) {
      return p.kind() == RulePlacement::Kind::kShardOn;
    });
    if (!placeholder) {
      std::vector<std::optional<Placement>> c;
      for (const RulePlacement& p : r) {
        c.push_back(p.kind() == RulePlacement::Kind::kNone
                        ? std::nullopt
                        : std::optional<Placement>(p.placement()));
      }
      concrete.push_back(std::move(c));
      continue;
    }
    for (int64_t b : builders) {
      std::vector<std::optional<Placement>> c;
      for (const RulePlacement& p : r) {
        switch (p.kind()) {
          case RulePlacement::Kind::kShardOn:
            c.push_back(b == 0 ? Placement::Shard(p.dim()) : Placement::StridedShard(p.dim(), b));
            break;
          case RulePlacement::Kind::kNone:
            c.push_back(std::nullopt);
            break;
          case RulePlacement::Kind::kPlacement:
            c.push_back(p.placement());
            break;
        }
      }
      concrete.push_back(std::move(c));
    }
  }
  // Every combination over the mesh dims, mesh dim 0 varying slowest (itertools.product).
  const int64_t m = mesh.ndim();
  const size_t k = concrete.size();
  std::vector<Candidate> out;
  if (k == 0) return out;
  std::vector<size_t> idx(m, 0);
  const bool inplace = call.inplace();
  const bool out_variant = call.out_variant();
  while (true) {
    Candidate c;
    bool skip = false;
    const size_t width = n_out + n_in;
    std::vector<std::optional<Placements>> specs(width);
    for (size_t pos = 0; pos < width; ++pos) {
      if (!concrete[idx[0]][pos]) continue;  // upstream looks at the first mesh dim's entry only
      Placements p;
      for (int64_t d = 0; d < m; ++d) {
        const auto& e = concrete[idx[d]][pos];
        p.push_back(e ? *e : Placement::Replicate());
      }
      if (HasMixedPartials(p)) skip = true;
      specs[pos] = std::move(p);
    }
    for (size_t o = 0; o < n_out; ++o) c.outputs.push_back(specs[o]);
    for (size_t i = 0; i < n_in && !skip; ++i) {
      if (!specs[n_out + i]) {
        skip = true;  // a tensor input without a placement: the rule does not apply
        break;
      }
      c.inputs.push_back(*specs[n_out + i]);
    }
    if (!skip && inplace && n_in > 0) {
      skip =
          c.inputs[0] != current[0] || (n_out > 0 && c.outputs[0] && *c.outputs[0] != current[0]);
    }
    if (!skip && out_variant) {
      size_t out_index = 0;
      for (size_t i = 0; i < n_in && !skip; ++i) {
        if (!flags[i].is_out) continue;
        if (out_index >= n_out || !c.outputs[out_index] || *c.outputs[out_index] != current[i])
          skip = true;
        ++out_index;
      }
    }
    for (size_t i = 0; i < n_in && !skip; ++i) {
      const bool keep_uneven = options.allow_uneven_sharding && current[i] == c.inputs[i];
      if (!keep_uneven && !Shardable(call.inputs[i].shape, mesh, c.inputs[i])) skip = true;
    }
    if (!skip) out.push_back(std::move(c));
    // Next combination.
    int64_t d = m - 1;
    while (d >= 0 && ++idx[d] == k) idx[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

}  // namespace

double RedistributeCost(const DTensorSpec& current, const Placements& target) {
  const Placements& cur = current.placements();
  if (std::all_of(cur.begin(), cur.end(), [](const Placement& p) { return p.is_replicate(); }))
    return 0.0;
  if (cur == target) return 0.0;
  // _StridedShard: inside op propagation upstream's specs carry use_strided_shard_as_shard_order =
  // False (the _StridedShard comes from a view op, or the strategy inherits the flag), so the shard
  // order is the default one and every step from or to a _StridedShard costs 0 in
  // _compute_placement_transition_cost (its is_shard() is false for _StridedShard). dtsim plans the
  // same move with _S(d,k) read as S(d) and prices those steps at 0.
  Placements plain_cur = cur, to = target;
  std::vector<bool> strided_dim(cur.size(), false);
  for (size_t i = 0; i < cur.size(); ++i) {
    strided_dim[i] = cur[i].is_strided_shard() || target[i].is_strided_shard();
    if (cur[i].is_strided_shard()) plain_cur[i] = Placement::Shard(cur[i].dim());
    if (target[i].is_strided_shard()) to[i] = Placement::Shard(target[i].dim());
  }
  // R → P runs locally at no cost and leaves the bytes alone (upstream's transition cost falls
  // through to 0): plan to the target with those mesh dims left Replicate (planning through a
  // mixed-Partial state such as [P(min), P(sum)] would be refused although upstream runs it).
  for (size_t i = 0; i < to.size(); ++i) {
    if (plain_cur[i].is_replicate() && to[i].is_partial()) to[i] = plain_cur[i];
  }
  if (plain_cur == to) return 0.0;
  const MeshTopo topo = BuildTopo(current.mesh());
  int64_t num_shards = 1;
  for (size_t i = 0; i < cur.size(); ++i) {
    if (cur[i].is_shard()) num_shards *= current.mesh().size(static_cast<int64_t>(i));
  }
  double bytes_gb = static_cast<double>(ItemSize(current.dtype()) * current.numel()) /
                    static_cast<double>(num_shards) / 1024.0 / 1024.0 / 1024.0;
  Plan plan;
  try {
    const bool strided = plain_cur != cur;
    plan = PlanRedistribute(
        strided ? DTensorSpec::Create(current.mesh(), plain_cur, current.shape(), current.dtype())
                : current,
        to, PlannerKind::kGreedy);
  } catch (const InputError&) {
    return kInf;  // a move upstream refuses (S → P, P(a) → P(b), mixed Partials)
  }
  double cost = 0.0;
  for (const PlanStep& step : plan.steps) {
    if (strided_dim[step.mesh_dim])
      continue;  // upstream prices a step touching a _StridedShard at 0
    const double c =
        TransitionCost(step.upstream_from, step.upstream_to, topo, step.mesh_dim, &bytes_gb);
    if (std::isinf(c)) return kInf;
    cost += c;
  }
  return cost;
}

void ThrowNoStrategy(const std::string& op_name, const std::vector<Placements>& current) {
  const size_t colon = op_name.find("::");
  const std::string op_text = colon == std::string::npos ? op_name : op_name.substr(colon + 2);
  throw InputError(
      "op", StrCat("Operator aten.", op_text, " does not have a sharding strategy registered ",
                   "(input placements: ", PlacementsText(current), "); dtsim never replicates ",
                   "silently: redistribute the inputs and run the op on to_local() instead"));
}

std::string ShardingDecision::ToString() const {
  std::ostringstream out;
  out << PlacementsText(input_placements) << " -> ";
  for (size_t i = 0; i < output_placements.size(); ++i) {
    out << (i ? ", " : "")
        << (output_placements[i] ? dtsim::ToString(*output_placements[i]) : "None");
  }
  return out.str();
}

ShardingDecision PropagateSharding(const OpCallInfo& call, const DeviceMesh& mesh,
                                   const std::vector<Placements>& current) {
  DTSIM_CHECK(current.size() == call.inputs.size(), call.name, ": ", current.size(),
              " placements for ", call.inputs.size(), " inputs");
  const StrategyEntry* entry = FindStrategy(call.name);
  const std::string op_text =
      call.name.substr(call.name.find("::") == std::string::npos ? 0 : call.name.find("::") + 2);
  if (entry == nullptr) ThrowNoStrategy(call.name, current);
  const std::vector<InputFlags> flags = FlagsOf(call);
  std::vector<Candidate> candidates;
  if (entry->single_dim) {
    candidates =
        ExpandSingleDim(call, mesh, current, (*entry->single_dim)(call), entry->options, flags);
  } else {
    candidates = (*entry->op_strategy)(call, current);
  }
  if (candidates.empty()) {
    throw InputError(
        "op", StrCat("aten.", op_text, ": no sharding strategy applies to input placements ",
                     PlacementsText(current),
                     call.inplace() ? " (an in-place op cannot change the placements of self; use "
                                      "the out-of-place op)"
                                    : ""));
  }
  ShardingDecision d;
  int64_t no_redistribute = -1;
  int64_t zero_cost = -1;
  for (size_t s = 0; s < candidates.size(); ++s) {
    const Candidate& c = candidates[s];
    DTSIM_CHECK(c.inputs.size() == current.size(), call.name, ": candidate with ", c.inputs.size(),
                " inputs for ", current.size());
    double cost = 0.0;
    for (size_t i = 0; i < current.size(); ++i) {
      const TensorMeta& meta = call.inputs[i];
      const DTensorSpec spec =
          DTensorSpec::Create(mesh, current[i], meta.shape, FromScalarType(meta.dtype));
      cost += RedistributeCost(spec, c.inputs[i]);
    }
    d.candidates.push_back({c, cost});
    if (cost == 0.0) {
      bool moves = false;
      for (size_t i = 0; i < current.size(); ++i)
        moves = moves || (flags[i].positional && c.inputs[i] != current[i]);
      if (!moves) {
        no_redistribute = static_cast<int64_t>(s);
      } else if (zero_cost < 0) {
        zero_cost = static_cast<int64_t>(s);
      }
    }
  }
  if (candidates.size() == 1) {
    d.chosen = 0;
    d.reason = "only strategy";
  } else if (no_redistribute >= 0) {
    d.chosen = static_cast<size_t>(no_redistribute);
    d.reason = "no redistribution";
  } else if (zero_cost >= 0) {
    d.chosen = static_cast<size_t>(zero_cost);
    d.reason = "zero cost";
  } else {
    size_t best = 0;
    for (size_t s = 1; s < d.candidates.size(); ++s) {
      if (d.candidates[s].cost < d.candidates[best].cost) best = s;
    }
    d.chosen = best;
    d.reason = "minimum cost";
  }
  const ScoredCandidate& chosen = d.candidates[d.chosen];
  if (std::isinf(chosen.cost)) {
    throw InputError(
        "op", StrCat("aten.", op_text, ": every sharding strategy needs a redistribution upstream ",
                     "cannot run from input placements ", PlacementsText(current)));
  }
  d.input_placements = chosen.candidate.inputs;
  d.output_placements = chosen.candidate.outputs;
  d.cost = chosen.cost;
  return d;
}

}  // namespace ops
}  // namespace dtsim
