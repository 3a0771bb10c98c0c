// Sharding strategies of the pointwise op family (upstream:
// torch/distributed/tensor/_ops/_pointwise_ops.py).
#include <ATen/core/function_schema.h>

#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/ops/strategy.h"
#include "ops/families.h"

namespace dtsim {
namespace ops {
namespace {

using Rules = std::vector<SingleDimRule>;

RulePlacement R() { return RulePlacement::R(); }
RulePlacement Sum() { return RulePlacement::P(ReduceOp::kSum); }
RulePlacement Avg() { return RulePlacement::P(ReduceOp::kAvg); }
RulePlacement Max() { return RulePlacement::P(ReduceOp::kMax); }
RulePlacement Min() { return RulePlacement::P(ReduceOp::kMin); }

Rules Concat(Rules a, const Rules& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The extra Partial rule sets of upstream, each [output, tensor args...] for the positional tensor
// arguments only. A set may mix lengths (mul: unary rules for a scalar operand, binary ones for two
// tensors); PointwiseRules keeps only those of the call's length.
Rules UnaryLinearRules() { return {{Sum(), Sum()}, {Avg(), Avg()}}; }
// add/sub: P+P keeps sum and avg; P(avg/max/min)+R keeps the partial kind; R+P(avg) keeps avg.
Rules BinaryAdditiveRules() {
  return {{Sum(), Sum(), Sum()}, {Avg(), Avg(), Avg()}, {Avg(), Avg(), R()},
          {Max(), Max(), R()},   {Min(), Min(), R()},   {Avg(), R(), Avg()}};
}
// mul: a Partial operand times a replicated one, on either side (plus the unary rules for a scalar
// operand).
Rules MulRules() {
  return Concat(
      UnaryLinearRules(),
      {{Sum(), Sum(), R()}, {Avg(), Avg(), R()}, {Sum(), R(), Sum()}, {Avg(), R(), Avg()}});
}
// div: only the numerator may be Partial.
Rules DivRules() { return Concat(UnaryLinearRules(), {{Sum(), Sum(), R()}, {Avg(), Avg(), R()}}); }
Rules NonDecreasingRules() { return {{Max(), Max()}, {Min(), Min()}}; }
Rules NonIncreasingRules() { return {{Min(), Max()}, {Max(), Min()}}; }
// Bessel K: decreasing but defined only for x > 0, so only P(min) input -> P(max) output.
Rules PositiveDomainNonIncreasingRules() { return {{Max(), Min()}}; }
Rules NegRules() { return Concat(UnaryLinearRules(), NonIncreasingRules()); }
// xlog1py(x, y) is linear in x with y replicated.
Rules Xlog1pyRules() { return {{Sum(), Sum(), R()}, {Avg(), Avg(), R()}}; }
Rules AllPartialPreservingRules() {
  return {{Sum(), Sum()}, {Avg(), Avg()}, {Max(), Max()}, {Min(), Min()}};
}
Rules AllPartialBinaryPreservingRules() {
  return {
      {Sum(), Sum(), Sum()}, {Avg(), Avg(), Avg()}, {Max(), Max(), Max()}, {Min(), Min(), Min()}};
}
// Increasing in both arguments: one Partial(max/min) operand with the other replicated.
Rules MonotoneBinaryRules() {
  return {{Max(), Max(), R()}, {Max(), R(), Max()}, {Min(), Min(), R()}, {Min(), R(), Min()}};
}
Rules MonotoneMaxPreservingRules() {
  return Concat(MonotoneBinaryRules(), {{Max(), Max(), Max()}});
}
Rules MonotoneMinPreservingRules() {
  return Concat(MonotoneBinaryRules(), {{Min(), Min(), Min()}});
}

// Upstream's _common_pointwise_single_dim_strategy wrapped by _register_single_dim_pointwise, for
// one call.
//
// Upstream's strategy sees the positional arguments and the kwarg-only ones apart (as
// __torch_dispatch__ passes them): the positional tensors broadcast to a common shape, and each dim
// i of it gives the rule [S(i) per tensor output, per positional tensor: S(its dim mapped from i)
// or R where broadcast]; then come the extra rules of the positional length. Each kwarg-only tensor
// (out=, the named outs of backward ops) is appended to every rule: a tensor named exactly "out"
// takes the rule's first entry, any other name (frexp's mantissa / exponent, grad_input) Replicate:
// upstream's wrapper does exactly that.
Rules PointwiseRules(const OpCallInfo& info, const Rules& extra_rules) {
  std::vector<const TensorMeta*> positional;
  std::vector<bool> kwarg_is_out;  // one per kwarg-only tensor, in schema order
  for (size_t i = 0; i < info.num_args(); ++i) {
    if (!info.IsTensor(i)) continue;
    const bool kwarg_only = info.schema != nullptr && i < info.schema->arguments().size() &&
                            info.schema->arguments()[i].kwarg_only();
    if (kwarg_only) {
      kwarg_is_out.push_back(info.schema->arguments()[i].name() == "out");
    } else {
      positional.push_back(&*info.meta[i]);
    }
  }
  // Upstream counts the returns whose type names a Tensor (frexp has two; equal-like bool returns
  // none).
  size_t num_outputs = info.outputs.size();
  if (info.schema != nullptr) {
    num_outputs = 0;
    for (const c10::Argument& ret : info.schema->returns()) {
      if (ret.type()->str().find("Tensor") != std::string::npos) ++num_outputs;
    }
  }

  std::vector<std::vector<int64_t>> shapes;
  for (const TensorMeta* meta : positional) shapes.push_back(meta->shape);
  const std::vector<int64_t> common = BroadcastShapes(shapes);
  std::vector<std::vector<int64_t>> dims_maps;
  for (const TensorMeta* meta : positional)
    dims_maps.push_back(BroadcastDimsMap(common, meta->shape));

  Rules rules;
  for (size_t i = 0; i < common.size(); ++i) {
    SingleDimRule rule(num_outputs, RulePlacement::ShardOn(static_cast<int64_t>(i)));
    for (const std::vector<int64_t>& dims_map : dims_maps) {
      rule.push_back(dims_map[i] >= 0 ? RulePlacement::ShardOn(dims_map[i]) : R());
    }
    rules.push_back(std::move(rule));
  }
  for (const SingleDimRule& rule : extra_rules) {
    if (rule.size() == num_outputs + positional.size()) rules.push_back(rule);
  }
  if (kwarg_is_out.empty()) return rules;
  for (SingleDimRule& rule : rules) {
    // Upstream reads s[0] for "out": with no tensor output and no positional tensor there is none.
    const RulePlacement first = rule.empty() ? R() : rule[0];
    for (bool is_out : kwarg_is_out) rule.push_back(is_out ? first : R());
  }
  return rules;
}

// Registers the overloads `names` (without the "aten::" prefix) with the pointwise strategy and
// `extra_rules`; upstream registers every pointwise op with allow_uneven_sharding.
void RegisterPointwise(const std::vector<std::string>& names, Rules extra_rules = {}) {
  std::vector<std::string> ops;
  ops.reserve(names.size());
  for (const std::string& name : names) ops.push_back("aten::" + name);
  SingleDimOptions options;
  options.allow_uneven_sharding = true;
  RegisterSingleDimStrategy(
      ops,
      [extra_rules = std::move(extra_rules)](const OpCallInfo& info) {
        return PointwiseRules(info, extra_rules);
      },
      options);
}

// Upstream's pointwise ops without extra Partial rules: the aten overloads tagged
// torch.Tag.pointwise plus its _extra_pointwise_ops, less the specially registered ones below and
// those another file claims (exponential_ is a random op), as resolved in torch 2.13's registry.
// Foreach, fused-optimizer and prims ops are left out: dtsim dispatches none of them.
const char* const kGenericPointwiseOps[] = {
    "__ilshift__.Scalar",
    "__ilshift__.Tensor",
    "__irshift__.Scalar",
    "__irshift__.Tensor",
    "__ixor__.Scalar",
    "__ixor__.Tensor",
    "__lshift__.Scalar",
    "__lshift__.Tensor",
    "__rshift__.Scalar",
    "__rshift__.Tensor",
    "__xor__.Scalar",
    "__xor__.Tensor",
    "_conj",
    "abs",
    "abs.out",
    "abs_",
    "acos",
    "acos.out",
    "acos_",
    "acosh",
    "acosh.out",
    "acosh_",
    "add.Scalar",
    "add_.Scalar",
    "addcdiv",
    "addcdiv.out",
    "addcdiv_",
    "addcmul",
    "addcmul.out",
    "addcmul_",
    "angle",
    "angle.out",
    "asin",
    "asin.out",
    "asin_",
    "atan2",
    "atan2.out",
    "atan2_",
    "atanh",
    "atanh.out",
    "atanh_",
    "bitwise_and.Scalar",
    "bitwise_and.Scalar_Tensor",
    "bitwise_and.Scalar_out",
    "bitwise_and.Tensor",
    "bitwise_and.Tensor_out",
    "bitwise_and_.Scalar",
    "bitwise_and_.Tensor",
    "bitwise_left_shift.Scalar_Tensor",
    "bitwise_left_shift.Tensor",
    "bitwise_left_shift.Tensor_Scalar",
    "bitwise_left_shift.Tensor_Scalar_out",
    "bitwise_left_shift.Tensor_out",
    "bitwise_left_shift_.Tensor",
    "bitwise_left_shift_.Tensor_Scalar",
    "bitwise_not",
    "bitwise_not.out",
    "bitwise_not_",
    "bitwise_or.Scalar",
    "bitwise_or.Scalar_Tensor",
    "bitwise_or.Scalar_out",
    "bitwise_or.Tensor",
    "bitwise_or.Tensor_out",
    "bitwise_or_.Scalar",
    "bitwise_or_.Tensor",
    "bitwise_right_shift.Scalar_Tensor",
    "bitwise_right_shift.Tensor",
    "bitwise_right_shift.Tensor_Scalar",
    "bitwise_right_shift.Tensor_Scalar_out",
    "bitwise_right_shift.Tensor_out",
    "bitwise_right_shift_.Tensor",
    "bitwise_right_shift_.Tensor_Scalar",
    "bitwise_xor.Scalar",
    "bitwise_xor.Scalar_Tensor",
    "bitwise_xor.Scalar_out",
    "bitwise_xor.Tensor",
    "bitwise_xor.Tensor_out",
    "bitwise_xor_.Scalar",
    "bitwise_xor_.Tensor",
    "celu",
    "celu_",
    "clamp",
    "clamp.Tensor",
    "clamp.Tensor_out",
    "clamp.out",
    "clamp_",
    "clamp_.Tensor",
    "clamp_max",
    "clamp_max.Tensor_out",
    "clamp_max.out",
    "clamp_max_",
    "clamp_max_.Tensor",
    "clamp_min",
    "clamp_min.Tensor_out",
    "clamp_min.out",
    "clamp_min_",
    "clamp_min_.Tensor",
    "clip",
    "clip.Tensor",
    "clip.out",
    "clip_",
    "clip_.Tensor",
    "clone",
    "conj_physical",
    "conj_physical.out",
    "conj_physical_",
    "copysign.Scalar",
    "copysign.Scalar_out",
    "copysign.Tensor",
    "copysign.out",
    "copysign_.Scalar",
    "copysign_.Tensor",
    "cos",
    "cos.out",
    "cos_",
    "cosh",
    "cosh.out",
    "cosh_",
    "digamma",
    "digamma.out",
    "digamma_",
    "div.Scalar_mode",
    "div.Tensor_mode",
    "div.out_mode",
    "div_.Scalar_mode",
    "div_.Tensor_mode",
    "elu",
    "elu_",
    "eq.Scalar",
    "eq.Scalar_out",
    "eq.Tensor",
    "eq.Tensor_out",
    "erfinv",
    "erfinv.out",
    "erfinv_",
    "float_power.Scalar",
    "float_power.Scalar_out",
    "float_power.Tensor_Scalar",
    "float_power.Tensor_Scalar_out",
    "float_power.Tensor_Tensor",
    "float_power.Tensor_Tensor_out",
    "float_power_.Scalar",
    "float_power_.Tensor",
    "fmod.Scalar",
    "fmod.Scalar_out",
    "fmod.Tensor",
    "fmod.Tensor_out",
    "fmod_.Scalar",
    "fmod_.Tensor",
    "frac",
    "frac.out",
    "frac_",
    "frexp.Tensor",
    "frexp.Tensor_out",
    "gcd",
    "gcd.out",
    "ge.Scalar",
    "ge.Scalar_out",
    "ge.Tensor",
    "ge.Tensor_out",
    "gelu",
    "gelu_backward",
    "gt.Scalar",
    "gt.Scalar_out",
    "gt.Tensor",
    "gt.Tensor_out",
    "hardsigmoid",
    "hardsigmoid_",
    "hardtanh",
    "hardtanh_",
    "heaviside",
    "heaviside.out",
    "hypot",
    "hypot.out",
    "hypot_",
    "i0",
    "i0.out",
    "i0_",
    "igamma",
    "igamma.out",
    "igamma_",
    "igammac",
    "igammac.out",
    "igammac_",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isneginf.out",
    "isposinf",
    "isposinf.out",
    "lcm",
    "lcm.out",
    "ldexp.Tensor",
    "ldexp.out",
    "ldexp_",
    "le.Scalar",
    "le.Scalar_out",
    "le.Tensor",
    "le.Tensor_out",
    "leaky_relu",
    "leaky_relu_",
    "lerp.Scalar",
    "lerp.Scalar_out",
    "lerp.Tensor",
    "lerp.Tensor_out",
    "lerp_.Scalar",
    "lerp_.Tensor",
    "lgamma",
    "lgamma.out",
    "lgamma_",
    "log",
    "log.out",
    "log10",
    "log10.out",
    "log10_",
    "log1p",
    "log1p.out",
    "log1p_",
    "log2",
    "log2.out",
    "log2_",
    "log_",
    "logical_and",
    "logical_and.out",
    "logical_and_",
    "logical_not",
    "logical_not.out",
    "logical_not_",
    "logical_or",
    "logical_or.out",
    "logical_or_",
    "logical_xor",
    "logical_xor.out",
    "logical_xor_",
    "logit",
    "logit.out",
    "logit_",
    "logit_backward",
    "logit_backward.grad_input",
    "lt.Scalar",
    "lt.Scalar_out",
    "lt.Tensor",
    "lt.Tensor_out",
    "masked_fill.Scalar",
    "masked_fill_.Scalar",
    "max.other",
    "max.out",
    "min.other",
    "min.out",
    "mish",
    "mvlgamma",
    "mvlgamma.out",
    "mvlgamma_",
    "native_dropout_backward",
    "native_dropout_backward.out",
    "ne.Scalar",
    "ne.Scalar_out",
    "ne.Tensor",
    "ne.Tensor_out",
    "nextafter",
    "nextafter.out",
    "nextafter_",
    "polygamma",
    "polygamma.out",
    "polygamma_",
    "pow.Scalar",
    "pow.Scalar_out",
    "pow.Tensor_Scalar",
    "pow.Tensor_Scalar_out",
    "pow.Tensor_Tensor",
    "pow.Tensor_Tensor_out",
    "pow_.Scalar",
    "pow_.Tensor",
    "reciprocal",
    "reciprocal.out",
    "reciprocal_",
    "relu6",
    "remainder.Scalar",
    "remainder.Scalar_Tensor",
    "remainder.Scalar_out",
    "remainder.Tensor",
    "remainder.Tensor_out",
    "remainder_.Scalar",
    "remainder_.Tensor",
    "rrelu_with_noise",
    "rsqrt",
    "rsqrt.out",
    "rsqrt_",
    "rsub.Scalar",
    "selu",
    "selu_",
    "sigmoid_backward",
    "sigmoid_backward.grad_input",
    "signbit",
    "signbit.out",
    "silu",
    "silu.out",
    "silu_",
    "silu_backward",
    "silu_backward.grad_input",
    "sin",
    "sin.out",
    "sin_",
    "sinc",
    "sinc.out",
    "sinc_",
    "softplus",
    "softshrink",
    "special_airy_ai",
    "special_airy_ai.out",
    "special_bessel_j0",
    "special_bessel_j0.out",
    "special_bessel_j1",
    "special_bessel_j1.out",
    "special_bessel_y0",
    "special_bessel_y0.out",
    "special_bessel_y1",
    "special_bessel_y1.out",
    "special_chebyshev_polynomial_t",
    "special_chebyshev_polynomial_t.n_scalar",
    "special_chebyshev_polynomial_t.n_scalar_out",
    "special_chebyshev_polynomial_t.out",
    "special_chebyshev_polynomial_t.x_scalar",
    "special_chebyshev_polynomial_t.x_scalar_out",
    "special_chebyshev_polynomial_u",
    "special_chebyshev_polynomial_u.n_scalar",
    "special_chebyshev_polynomial_u.n_scalar_out",
    "special_chebyshev_polynomial_u.out",
    "special_chebyshev_polynomial_u.x_scalar",
    "special_chebyshev_polynomial_u.x_scalar_out",
    "special_chebyshev_polynomial_v",
    "special_chebyshev_polynomial_v.n_scalar",
    "special_chebyshev_polynomial_v.n_scalar_out",
    "special_chebyshev_polynomial_v.out",
    "special_chebyshev_polynomial_v.x_scalar",
    "special_chebyshev_polynomial_v.x_scalar_out",
    "special_chebyshev_polynomial_w",
    "special_chebyshev_polynomial_w.n_scalar",
    "special_chebyshev_polynomial_w.n_scalar_out",
    "special_chebyshev_polynomial_w.out",
    "special_chebyshev_polynomial_w.x_scalar",
    "special_chebyshev_polynomial_w.x_scalar_out",
    "special_entr",
    "special_entr.out",
    "special_hermite_polynomial_h",
    "special_hermite_polynomial_h.n_scalar",
    "special_hermite_polynomial_h.n_scalar_out",
    "special_hermite_polynomial_h.out",
    "special_hermite_polynomial_h.x_scalar",
    "special_hermite_polynomial_h.x_scalar_out",
    "special_hermite_polynomial_he",
    "special_hermite_polynomial_he.n_scalar",
    "special_hermite_polynomial_he.n_scalar_out",
    "special_hermite_polynomial_he.out",
    "special_hermite_polynomial_he.x_scalar",
    "special_hermite_polynomial_he.x_scalar_out",
    "special_i0e",
    "special_i0e.out",
    "special_i1",
    "special_i1.out",
    "special_i1e",
    "special_i1e.out",
    "special_laguerre_polynomial_l",
    "special_laguerre_polynomial_l.n_scalar",
    "special_laguerre_polynomial_l.n_scalar_out",
    "special_laguerre_polynomial_l.out",
    "special_laguerre_polynomial_l.x_scalar",
    "special_laguerre_polynomial_l.x_scalar_out",
    "special_legendre_polynomial_p",
    "special_legendre_polynomial_p.n_scalar",
    "special_legendre_polynomial_p.n_scalar_out",
    "special_legendre_polynomial_p.out",
    "special_legendre_polynomial_p.x_scalar",
    "special_legendre_polynomial_p.x_scalar_out",
    "special_log_ndtr",
    "special_log_ndtr.out",
    "special_modified_bessel_i0",
    "special_modified_bessel_i0.out",
    "special_modified_bessel_i1.out",
    "special_modified_bessel_k0.out",
    "special_modified_bessel_k1.out",
    "special_ndtri",
    "special_ndtri.out",
    "special_scaled_modified_bessel_k0.out",
    "special_scaled_modified_bessel_k1.out",
    "special_shifted_chebyshev_polynomial_t",
    "special_shifted_chebyshev_polynomial_t.n_scalar",
    "special_shifted_chebyshev_polynomial_t.n_scalar_out",
    "special_shifted_chebyshev_polynomial_t.out",
    "special_shifted_chebyshev_polynomial_t.x_scalar",
    "special_shifted_chebyshev_polynomial_t.x_scalar_out",
    "special_shifted_chebyshev_polynomial_u",
    "special_shifted_chebyshev_polynomial_u.n_scalar",
    "special_shifted_chebyshev_polynomial_u.n_scalar_out",
    "special_shifted_chebyshev_polynomial_u.out",
    "special_shifted_chebyshev_polynomial_u.x_scalar",
    "special_shifted_chebyshev_polynomial_u.x_scalar_out",
    "special_shifted_chebyshev_polynomial_v",
    "special_shifted_chebyshev_polynomial_v.n_scalar",
    "special_shifted_chebyshev_polynomial_v.n_scalar_out",
    "special_shifted_chebyshev_polynomial_v.out",
    "special_shifted_chebyshev_polynomial_v.x_scalar",
    "special_shifted_chebyshev_polynomial_v.x_scalar_out",
    "special_shifted_chebyshev_polynomial_w",
    "special_shifted_chebyshev_polynomial_w.n_scalar",
    "special_shifted_chebyshev_polynomial_w.n_scalar_out",
    "special_shifted_chebyshev_polynomial_w.out",
    "special_shifted_chebyshev_polynomial_w.x_scalar",
    "special_shifted_chebyshev_polynomial_w.x_scalar_out",
    "special_spherical_bessel_j0",
    "special_spherical_bessel_j0.out",
    "special_xlog1py.other_scalar_out",
    "special_xlog1py.out",
    "special_xlog1py.self_scalar",
    "special_xlog1py.self_scalar_out",
    "special_zeta",
    "special_zeta.other_scalar",
    "special_zeta.other_scalar_out",
    "special_zeta.out",
    "special_zeta.self_scalar",
    "special_zeta.self_scalar_out",
    "sqrt",
    "sqrt.out",
    "sqrt_",
    "square",
    "square.out",
    "square_",
    "sub.Scalar",
    "sub_.Scalar",
    "tan",
    "tan.out",
    "tan_",
    "tanh_backward",
    "tanh_backward.grad_input",
    "threshold_backward",
    "true_divide.Tensor",
    "where.self",
    "where.self_out",
    "xlogy.OutScalar_Other",
    "xlogy.OutScalar_Self",
    "xlogy.OutTensor",
    "xlogy.Scalar_Other",
    "xlogy.Scalar_Self",
    "xlogy.Tensor",
    "xlogy_.Scalar_Other",
    "xlogy_.Tensor",
};

}  // namespace

void RegisterPointwiseOps() {
  RegisterPointwise(
      std::vector<std::string>(std::begin(kGenericPointwiseOps), std::end(kGenericPointwiseOps)));

  RegisterPointwise(
      {"add.Tensor", "add_.Tensor", "add.out", "sub.Tensor", "sub_.Tensor", "sub.out"},
      BinaryAdditiveRules());
  RegisterPointwise({"mul.Tensor", "mul_.Tensor", "mul.out"}, MulRules());
  RegisterPointwise({"div.Tensor", "div_.Tensor", "div.out"}, DivRules());
  // Multiplying or dividing by a number keeps P(sum) and P(avg).
  RegisterPointwise({"div.Scalar", "div_.Scalar", "mul.Scalar", "mul_.Scalar"}, UnaryLinearRules());

  // Non-decreasing on their whole domain: f(max(a, b)) = max(f(a), f(b)), likewise for min.
  RegisterPointwise({"asinh",
                     "asinh_",
                     "asinh.out",
                     "atan",
                     "atan_",
                     "atan.out",
                     "ceil",
                     "ceil_",
                     "ceil.out",
                     "deg2rad",
                     "deg2rad_",
                     "deg2rad.out",
                     "erf",
                     "erf_",
                     "erf.out",
                     "exp",
                     "exp_",
                     "exp.out",
                     "exp2",
                     "exp2_",
                     "exp2.out",
                     "expm1",
                     "expm1_",
                     "expm1.out",
                     "floor",
                     "floor_",
                     "floor.out",
                     "rad2deg",
                     "rad2deg_",
                     "rad2deg.out",
                     "relu",
                     "relu_",
                     "round.decimals",
                     "round",
                     "round_.decimals",
                     "round_",
                     "round.decimals_out",
                     "round.out",
                     "sgn",
                     "sgn_",
                     "sgn.out",
                     "sigmoid",
                     "sigmoid_",
                     "sigmoid.out",
                     "sign",
                     "sign_",
                     "sign.out",
                     "sinh",
                     "sinh_",
                     "sinh.out",
                     "tanh",
                     "tanh_",
                     "tanh.out",
                     "trunc",
                     "trunc_",
                     "trunc.out",
                     "nan_to_num",
                     "nan_to_num_",
                     "nan_to_num.out",
                     "hardshrink",
                     "special_modified_bessel_i1",
                     "threshold"},
                    NonDecreasingRules());
  RegisterPointwise({"erfc", "erfc_", "erfc.out", "special_erfcx", "special_erfcx.out"},
                    NonIncreasingRules());
  RegisterPointwise({"special_modified_bessel_k0", "special_modified_bessel_k1",
                     "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1"},
                    PositiveDomainNonIncreasingRules());
  RegisterPointwise({"neg", "neg_", "neg.out"}, NegRules());
  RegisterPointwise({"special_xlog1py", "special_xlog1py.other_scalar"}, Xlog1pyRules());
  RegisterPointwise({"to.dtype", "positive"}, AllPartialPreservingRules());
  RegisterPointwise({"copy_"}, AllPartialBinaryPreservingRules());
  RegisterPointwise({"logaddexp", "logaddexp.out", "logaddexp2", "logaddexp2.out"},
                    MonotoneBinaryRules());
  RegisterPointwise({"clamp_min.Tensor", "fmax", "fmax.out", "maximum", "maximum.out"},
                    MonotoneMaxPreservingRules());
  RegisterPointwise({"clamp_max.Tensor", "fmin", "fmin.out", "minimum", "minimum.out"},
                    MonotoneMinPreservingRules());
}

}  // namespace ops
}  // namespace dtsim
