// Sharding strategies of the embedding op family (upstream:
// torch/distributed/tensor/_ops/_embedding_ops.py).
//
// Upstream's row-wise rule (weight sharded on the vocabulary, dim 0) gives the output and the
// indices a _MaskPartial placement: every rank looks up only the indices its rows hold (the others
// masked to row 0 and their output rows zeroed), and the output is the sum over the ranks. dtsim
// spells that placement P(sum) — the same reduction — and the DTensor kernel runs the masked lookup
// (dtensor_tensor.cc, MaskedEmbedding). The indices keep Replicate. Upstream's mask placement
// cannot be reached from sharded indices (its cost is infinite there), so the rule is offered only
// when no mesh dim shards the indices.
#include "dtsim/ops/strategy.h"
#include "ops/families.h"

namespace dtsim {
namespace ops {
namespace {

// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse): [output, weight, indices].
std::vector<SingleDimRule> EmbeddingRules(const OpCallInfo& call) {
  const int64_t index_dims = call.inputs.at(1).ndim();
  std::vector<SingleDimRule> rules;
  // Column-wise: the embedding dim sharded.
  rules.push_back({RulePlacement::Of(Placement::Shard(index_dims)),
                   RulePlacement::Of(Placement::Shard(1)), RulePlacement::R()});
  // Row-wise (upstream's _MaskPartial): weight on the vocabulary, output a partial sum.
  bool indices_sharded = false;
  if (call.current.size() > 1) {
    for (const Placement& p : call.current[1])
      indices_sharded = indices_sharded || p.is_shard_like();
  }
  if (!indices_sharded) {
    rules.push_back(
        {RulePlacement::P(), RulePlacement::Of(Placement::Shard(0)), RulePlacement::R()});
  }
  // Batch: the weight replicated, the indices sharded on any dim, the output following them.
  for (int64_t i = 0; i < index_dims; ++i) {
    rules.push_back({RulePlacement::Of(Placement::Shard(i)), RulePlacement::R(),
                     RulePlacement::Of(Placement::Shard(i))});
  }
  return rules;
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
// [weight grad, grad_output, indices].
std::vector<SingleDimRule> EmbeddingBackwardRules(const OpCallInfo& call) {
  const int64_t grad_dims = call.inputs.at(0).ndim();
  const int64_t index_dims = call.inputs.at(1).ndim();
  std::vector<SingleDimRule> rules;
  rules.push_back({RulePlacement::Of(Placement::Shard(1)),
                   RulePlacement::Of(Placement::Shard(grad_dims - 1)), RulePlacement::R()});
  for (int64_t i = 0; i < index_dims; ++i) {
    rules.push_back({RulePlacement::P(), RulePlacement::Of(Placement::Shard(i)),
                     RulePlacement::Of(Placement::Shard(i))});
  }
  rules.push_back({RulePlacement::P(), RulePlacement::P(), RulePlacement::R()});
  return rules;
}

}  // namespace

void RegisterEmbeddingOps() {
  RegisterSingleDimStrategy({"aten::embedding"}, EmbeddingRules);
  RegisterSingleDimStrategy({"aten::embedding_dense_backward"}, EmbeddingBackwardRules);
}

}  // namespace ops
}  // namespace dtsim
