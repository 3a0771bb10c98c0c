// Sharding strategies of the random op family (upstream:
// torch/distributed/tensor/_ops/_random_ops.py): the in-place samplers and dropout keep their
// input's sharding (never a Partial input: sampling a partial value is undefined); multinomial
// shards only its batch dims.
//
// The values differ from upstream's: upstream's offset-based RNG tracker draws each shard as the
// matching part of one tensor drawn unsharded, while dtsim's simulated ranks draw from their own
// seeded generators (their SimWorld, sim_world.h). The placements, shapes and communication are
// upstream's.
#include <ATen/core/function_schema.h>

#include "dtsim/ops/strategy.h"
#include "ops/families.h"

namespace dtsim {
namespace ops {
namespace {

// One rule per dim of self: every tensor output and self sharded on it.
std::vector<SingleDimRule> FollowSelfRules(const OpCallInfo& call) {
  size_t num_outputs = 0;
  for (const c10::Argument& r : call.schema->returns()) {
    if (r.type()->kind() == c10::TypeKind::TensorType) ++num_outputs;
  }
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < call.inputs.at(0).ndim(); ++d) {
    rules.push_back(SingleDimRule(num_outputs + 1, RulePlacement::ShardOn(d)));
  }
  return rules;
}

// multinomial(self [*, categories], num_samples, ...): the batch dims only.
std::vector<SingleDimRule> MultinomialRules(const OpCallInfo& call) {
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d + 1 < call.inputs.at(0).ndim(); ++d) {
    rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d)});
  }
  return rules;
}

}  // namespace

void RegisterRandomOps() {
  SingleDimOptions uneven;
  uneven.allow_uneven_sharding = true;
  RegisterSingleDimStrategy(
      {"aten::normal_", "aten::uniform_", "aten::native_dropout", "aten::bernoulli_.float",
       "aten::bernoulli", "aten::log_normal_", "aten::exponential_", "aten::geometric_"},
      FollowSelfRules, uneven);
  RegisterSingleDimStrategy({"aten::multinomial"}, MultinomialRules);
}

}  // namespace ops
}  // namespace dtsim
