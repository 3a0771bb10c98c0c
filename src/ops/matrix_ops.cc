// Sharding strategies of the matrix op family (upstream:
// torch/distributed/tensor/_ops/_matrix_ops.py): mm, addmm, bmm and baddbmm as einsum-style
// single-dim strategies, and t.
#include <algorithm>
#include <string>

#include "dtsim/layout/error.h"
#include "dtsim/ops/strategy.h"
#include "ops/families.h"

namespace dtsim {
namespace ops {
namespace {

// The single-dim rules of an einsum equation with two inputs ("mk,kn->mn"), in upstream's order
// (gen_single_dim_einsum_strategies): dims are visited in sorted order and classified as batch (in
// every input and the output), contracting (not in the output), lhs-only or rhs-only; then
//   1. each batch dim: output, lhs and rhs sharded on it;
//   2. each contracting dim: output P(sum), both inputs sharded on it;
//   3. each lhs-only dim: output and lhs sharded on it, rhs R;  4. each rhs-only dim likewise;
//   5. per-input linearity for sum and avg: [P(op), P(op), R] and [P(op), R, P(op)];
//   6. when every dim is a batch dim: all inputs P(op) too.
// With `bias_shape` (addmm, baddbmm) a bias entry follows the output entry: the output's placement,
// with a shard on a dim the bias broadcasts (missing or of size 1) replaced by R.
std::vector<SingleDimRule> EinsumRules(const std::string& equation,
                                       const std::vector<int64_t>* bias_shape) {
  const size_t arrow = equation.find("->");
  const std::string inputs = equation.substr(0, arrow);
  const std::string output = equation.substr(arrow + 2);
  const size_t comma = inputs.find(',');
  const std::vector<std::string> in = {inputs.substr(0, comma), inputs.substr(comma + 1)};
  std::string chars = in[0] + in[1];
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  std::string batch, contracting, lhs_only, rhs_only;
  for (char c : chars) {
    const bool in_out = output.find(c) != std::string::npos;
    const bool in_l = in[0].find(c) != std::string::npos;
    const bool in_r = in[1].find(c) != std::string::npos;
    if (!in_out) {
      contracting += c;
    } else if (in_l && in_r) {
      batch += c;
    } else if (in_l) {
      lhs_only += c;
    } else {
      rhs_only += c;
    }
  }
  auto pos = [](const std::string& dims, char c) { return static_cast<int64_t>(dims.find(c)); };
  auto with_bias = [&](SingleDimRule rule) {
    if (bias_shape == nullptr) return rule;
    const RulePlacement& o = rule[0];
    RulePlacement bias = o;
    if (o.kind() == RulePlacement::Kind::kShardOn) {
      const int64_t pad =
          static_cast<int64_t>(output.size()) - static_cast<int64_t>(bias_shape->size());
      const int64_t bias_dim = o.dim() - pad;
      if (bias_dim < 0 || (*bias_shape)[bias_dim] == 1) {
        bias = RulePlacement::R();
      } else {
        bias = RulePlacement::ShardOn(bias_dim);
      }
    }
    rule.insert(rule.begin() + 1, bias);
    return rule;
  };
  std::vector<SingleDimRule> rules;
  for (char c : batch) {
    rules.push_back(
        with_bias({RulePlacement::ShardOn(pos(output, c)), RulePlacement::ShardOn(pos(in[0], c)),
                   RulePlacement::ShardOn(pos(in[1], c))}));
  }
  for (char c : contracting) {
    rules.push_back(with_bias({RulePlacement::P(), RulePlacement::ShardOn(pos(in[0], c)),
                               RulePlacement::ShardOn(pos(in[1], c))}));
  }
  for (char c : lhs_only) {
    rules.push_back(with_bias({RulePlacement::ShardOn(pos(output, c)),
                               RulePlacement::ShardOn(pos(in[0], c)), RulePlacement::R()}));
  }
  for (char c : rhs_only) {
    rules.push_back(with_bias({RulePlacement::ShardOn(pos(output, c)), RulePlacement::R(),
                               RulePlacement::ShardOn(pos(in[1], c))}));
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    rules.push_back(with_bias({RulePlacement::P(op), RulePlacement::P(op), RulePlacement::R()}));
    rules.push_back(with_bias({RulePlacement::P(op), RulePlacement::R(), RulePlacement::P(op)}));
  }
  if (contracting.empty() && lhs_only.empty() && rhs_only.empty()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      rules.push_back(
          with_bias({RulePlacement::P(op), RulePlacement::P(op), RulePlacement::P(op)}));
    }
  }
  return rules;
}

SingleDimStrategyFn Einsum(const std::string& equation, bool bias) {
  return [equation, bias](const OpCallInfo& call) {
    if (!bias) return EinsumRules(equation, nullptr);
    DTSIM_CHECK(!call.inputs.empty(), call.name, ": no bias input");
    return EinsumRules(equation, &call.inputs[0].shape);
  };
}

// t(): a 0-d or 1-d input keeps its placements; a 2-d one swaps shard dims 0 and 1. The input never
// moves.
std::vector<Candidate> TransposeStrategy(const OpCallInfo& call,
                                         const std::vector<Placements>& current) {
  Candidate c;
  c.inputs = {current[0]};
  Placements out;
  for (const Placement& p : current[0]) {
    if (call.inputs[0].ndim() <= 1 || !p.is_shard_like()) {
      out.push_back(p);
    } else if (p.is_strided_shard()) {
      out.push_back(Placement::StridedShard(1 - p.dim(), p.split_factor()));
    } else {
      out.push_back(Placement::Shard(1 - p.dim()));
    }
  }
  c.outputs = {out};
  return {c};
}

}  // namespace

void RegisterMatrixOps() {
  RegisterSingleDimStrategy({"aten::mm"}, Einsum("mk,kn->mn", false));
  RegisterSingleDimStrategy({"aten::bmm"}, Einsum("bmk,bkn->bmn", false));
  RegisterSingleDimStrategy({"aten::addmm"}, Einsum("mk,kn->mn", true));
  RegisterSingleDimStrategy({"aten::baddbmm"}, Einsum("bmk,bkn->bmn", true));
  RegisterOpStrategy({"aten::t"}, TransposeStrategy);
}

}  // namespace ops
}  // namespace dtsim
