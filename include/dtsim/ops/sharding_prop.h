// Sharding propagation: for one op call on DTensors, which placements its tensor inputs must have
// and which its outputs get — upstream's ShardingPropagator
// (torch/distributed/tensor/_sharding_prop.py) step for step.
//
// A single-dim strategy (strategy.h) is expanded as upstream's expand_to_full_mesh_op_strategy: the
// all-Replicate rule first, placeholders filled with the shard kinds the inputs use, every
// combination over the mesh dims (mesh dim 0 varying slowest), dropping combinations with mixed
// Partial kinds, an in-place op whose self would change, an out= op whose output differs from
// `out`, and inputs with fewer elements on a sharded dim than shards. Each candidate costs the sum
// of its inputs' redistribute costs (RedistributeCost). The choice is upstream's
// _select_min_cost_strategy: the last candidate that needs no redistribution, else the first of
// zero cost, else the first of minimum cost.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/mesh.h"
#include "dtsim/layout/spec.h"
#include "dtsim/ops/strategy.h"

namespace dtsim {
namespace ops {

struct ScoredCandidate {
  Candidate candidate;
  double cost =
      0;  // microseconds under upstream's cost model; infinity when upstream cannot redistribute
};

struct ShardingDecision {
  // Per tensor input (OpCallInfo::inputs order): the placements it must have when the op runs.
  std::vector<Placements> input_placements;
  // Per tensor output: its placements (nullopt for an undefined output).
  std::vector<std::optional<Placements>> output_placements;
  double cost = 0;
  // Every candidate considered, in upstream's order, and the index of the chosen one.
  std::vector<ScoredCandidate> candidates;
  size_t chosen = 0;
  // Why it was chosen: "no redistribution", "zero cost", "minimum cost" or "only strategy".
  std::string reason;
  // "[S(0), R], [R, S(1)] -> [S(0), S(1)]": the chosen input and output placements.
  std::string ToString() const;
};

// Upstream's redistribute_cost (torch/distributed/tensor/_collective_utils.py) of moving `current`
// to `target`: 0 when `current` is all-Replicate or equal to `target`; infinity for refused moves
// (S → P, P(a) → P(b)); a step from or to a _StridedShard costs 0 (inside op propagation upstream's
// specs treat _StridedShard with the default shard order, and its transition cost prices such steps
// at 0: _StridedShard is not is_shard()); otherwise the alpha-beta cost of the steps of upstream's
// default plan, with the bytes of each step as upstream tracks them (all_gather multiplies by the
// group size, reduce_scatter divides) and upstream's MeshTopoInfo for a CPU mesh (one device per
// host: every mesh dim of more than one rank is inter-host, 87.7 × 0.22 GB/s and 2.7 us per hop). R
// → P costs 0.
double RedistributeCost(const DTensorSpec& current, const Placements& target);

// Chooses the placements of a call whose tensor inputs (call.inputs) lie on `mesh` with `current`
// placements. Throws InputError("op") naming the op and the input placements when the op has no
// strategy, or when no candidate remains (an in-place op whose self would have to change).
ShardingDecision PropagateSharding(const OpCallInfo& call, const DeviceMesh& mesh,
                                   const std::vector<Placements>& current);

// The error PropagateSharding throws for an op without a registered strategy (callers check first,
// before any work): "Operator aten.flip does not have a sharding strategy registered (input
// placements: [S(0)]) ...".
[[noreturn]] void ThrowNoStrategy(const std::string& op_name,
                                  const std::vector<Placements>& current);

}  // namespace ops
}  // namespace dtsim
