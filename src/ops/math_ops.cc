// Sharding strategies of the math op family (upstream: torch/distributed/tensor/_ops/_math_ops.py,
// torch 2.13).
#include <ATen/core/function_schema.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/ops/strategy.h"
#include "ops/families.h"

namespace dtsim {
namespace ops {
namespace {

// ---------------------------------------------------------------------------------------------------------------------
// Call helpers.
// ---------------------------------------------------------------------------------------------------------------------

// The mesh shape of the call: upstream needs mesh dim sizes for its evenness checks (mean,
// nll_loss) and for DTensorSpec.num_shards (softmax backward).
std::optional<std::vector<int64_t>> MeshShapeOf(const OpCallInfo& call) { return call.mesh_shape; }

// The size of mesh dim `i`, or 2 where the mesh shape is unknown (the smallest size that
// communicates).
int64_t MeshDimSize(const std::optional<std::vector<int64_t>>& mesh_shape, size_t i) {
  if (mesh_shape.has_value() && i < mesh_shape->size()) return (*mesh_shape)[i];
  return 2;
}

// The length upstream's op_schema.args_schema has for this call: the positional (not kwarg-only)
// arguments, with trailing ones that equal their schema default dropped (as the dispatcher hands
// arguments to __torch_dispatch__).
size_t UpstreamArgCount(const OpCallInfo& call) {
  if (call.schema == nullptr) return call.args.size();
  const auto& arguments = call.schema->arguments();
  size_t n = 0;
  while (n < arguments.size() && n < call.args.size() && !arguments[n].kwarg_only()) ++n;
  while (n > 0) {
    const auto& default_value = arguments[n - 1].default_value();
    if (!default_value.has_value() || !(call.args[n - 1] == *default_value)) break;
    --n;
  }
  return n;
}

// The position of the argument named `name` in the schema, or nullopt.
std::optional<size_t> ArgIndex(const OpCallInfo& call, const std::string& name) {
  if (call.schema == nullptr) return std::nullopt;
  const auto& arguments = call.schema->arguments();
  for (size_t i = 0; i < arguments.size() && i < call.args.size(); ++i) {
    if (arguments[i].name() == name) return i;
  }
  return std::nullopt;
}

// The number of out= tensor arguments (kwarg-only written arguments) of the schema.
size_t NumOutArgs(const OpCallInfo& call) {
  if (call.schema == nullptr) return 0;
  size_t n = 0;
  for (const auto& argument : call.schema->arguments()) {
    if (argument.is_out()) ++n;
  }
  return n;
}

// The number of tensor inputs other than out= tensors (upstream's count of TensorMeta args of the
// base op).
size_t NumBaseTensorInputs(const OpCallInfo& call) {
  return call.inputs.size() - std::min(call.inputs.size(), NumOutArgs(call));
}

// The global metadata of tensor argument `i`; InputError when it is not a tensor.
const TensorMeta& MetaOf(const OpCallInfo& call, size_t i) {
  if (!call.IsTensor(i))
    throw InputError(call.name, "argument " + std::to_string(i) + " is not a tensor");
  return *call.meta[i];
}

// Upstream's as_list on a dims argument: None -> nullopt, an int -> [int], an int list -> itself.
std::optional<std::vector<int64_t>> DimsValue(const c10::IValue& value) {
  if (value.isNone()) return std::nullopt;
  if (value.isInt()) return std::vector<int64_t>{value.toInt()};
  if (value.isIntList()) return value.toIntVector();
  throw InputError("dim", "expected an int, an int list or None, got " + value.tagKind());
}

// Upstream's normalize_dim: a negative dim plus ndim, without a range check.
int64_t NormalizeDimNoCheck(int64_t dim, int64_t ndim) { return dim >= 0 ? dim : dim + ndim; }

// Upstream's _infer_reduction_dims: nullopt means "every dim". `value` is the dims argument as
// passed.
std::optional<std::vector<int64_t>> InferReductionDims(const c10::IValue& value, int64_t ndim) {
  std::optional<std::vector<int64_t>> dims = DimsValue(value);
  if (!dims.has_value()) return std::nullopt;
  const bool empty_like =
      dims->empty() || (dims->size() == 1 && ((*dims)[0] == 0 || (*dims)[0] == -1));
  if (ndim == 0 && value.isIntList() && empty_like) return std::nullopt;
  for (int64_t& d : *dims) d = NormalizeDimNoCheck(d, ndim);
  return dims;
}

std::vector<int64_t> AllDims(int64_t ndim) {
  std::vector<int64_t> dims(static_cast<size_t>(std::max<int64_t>(ndim, 0)));
  for (int64_t d = 0; d < ndim; ++d) dims[static_cast<size_t>(d)] = d;
  return dims;
}

bool Contains(const std::vector<int64_t>& dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

// ---------------------------------------------------------------------------------------------------------------------
// Placement transforms (upstream's helpers of _math_ops.py and utils.py).
// ---------------------------------------------------------------------------------------------------------------------

// Shard dims mapped onto a tensor of `ndim` dims (current placements may carry negative dims).
Placements NormalizedPlacements(const Placements& placements, int64_t ndim) {
  Placements out;
  out.reserve(placements.size());
  for (const Placement& p : placements) out.push_back(p.is_shard_like() ? p.Normalized(ndim) : p);
  return out;
}

// A shard-like placement moved to tensor dim `dim`, keeping its kind and split factor.
Placement WithShardDim(const Placement& p, int64_t dim) {
  return p.is_strided_shard() ? Placement::StridedShard(dim, p.split_factor())
                              : Placement::Shard(dim);
}

// Upstream's replicate_reduction_dims: Partial -> R, and a shard on one of `dims` -> R.
Placements ReplicateReductionDims(const Placements& placements, const std::vector<int64_t>& dims) {
  Placements out;
  for (const Placement& p : placements) {
    if (p.is_partial() || (p.is_shard_like() && Contains(dims, p.dim()))) {
      out.push_back(Placement::Replicate());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// Upstream's _replicate_dims_start_at: Partial -> R, and a shard on a dim >= start_dim -> R.
Placements ReplicateDimsStartAt(const Placements& placements, int64_t start_dim = 0) {
  Placements out;
  for (const Placement& p : placements) {
    if (p.is_partial() || (p.is_shard_like() && p.dim() >= start_dim)) {
      out.push_back(Placement::Replicate());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// Upstream's _skip_dim: shards on dims >= skipped_dim move down by one (callers replicate
// skipped_dim first).
Placements SkipDim(const Placements& placements, int64_t skipped_dim) {
  Placements out;
  for (const Placement& p : placements) {
    out.push_back(p.is_shard_like() && p.dim() >= skipped_dim ? WithShardDim(p, p.dim() - 1) : p);
  }
  return out;
}

// Upstream's _infer_reduce_dims_map: per input dim its output dim, or -1 when reduced away.
std::vector<int64_t> InferReduceDimsMap(const std::vector<int64_t>& reduction_dims,
                                        int64_t input_ndim, bool keep_dim) {
  std::vector<int64_t> map;
  int64_t new_dim_count = 0;
  for (int64_t d = 0; d < input_ndim; ++d) {
    if (Contains(reduction_dims, d) && !keep_dim) {
      map.push_back(-1);
    } else {
      map.push_back(new_dim_count++);
    }
  }
  return map;
}

// Upstream's ReductionOpType: a reduce op name, or NormReduction(norm_type) for a p-norm.
struct ReductionKind {
  ReduceOp op = ReduceOp::kSum;
  std::optional<double> norm_type;  // set: NormReduction(*norm_type)
};

ReductionKind Reduce(ReduceOp op) { return ReductionKind{op, std::nullopt}; }

// Upstream's get_placement_from_reduction_op. A p-norm with p not in {0, inf, -inf} needs
// upstream's _NormPartial, which dtsim's Placement cannot express: InputError.
Placement PlacementFromReduction(const std::string& op_name, const ReductionKind& kind) {
  if (kind.norm_type.has_value()) {
    if (*kind.norm_type == 0) return Placement::Partial(ReduceOp::kSum);
    throw InputError(
        op_name,
        "a " + std::to_string(*kind.norm_type) +
            "-norm over a sharded dim gives upstream's _NormPartial placement, which dtsim does "
            "not support; replicate the reduced dims first");
  }
  return Placement::Partial(kind.op);
}

// Upstream's map_placements_after_reduction.
Placements MapPlacementsAfterReduction(const std::string& op_name, const Placements& placements,
                                       const std::vector<int64_t>& reduction_dims,
                                       const std::vector<int64_t>& reduction_dims_map,
                                       const ReductionKind& kind) {
  Placements out;
  for (const Placement& p : placements) {
    if (p.is_replicate() || p.is_partial()) {
      out.push_back(p);
      continue;
    }
    const int64_t shard_dim = p.dim();
    if (shard_dim < 0 || shard_dim >= static_cast<int64_t>(reduction_dims_map.size())) {
      throw InputError(op_name,
                       "placement " + p.ToString() + " shards a dim the input does not have");
    }
    const int64_t new_dim = reduction_dims_map[static_cast<size_t>(shard_dim)];
    if (new_dim == -1 || Contains(reduction_dims, shard_dim)) {
      out.push_back(PlacementFromReduction(op_name, kind));
    } else {
      out.push_back(WithShardDim(p, new_dim));
    }
  }
  return out;
}

// Upstream's is_tensor_evenly_shardable_on_dim (mesh dim sizes from `mesh_shape`).
bool EvenlyShardableOnDim(const std::vector<int64_t>& shape, const Placements& placements,
                          int64_t dim, const std::optional<std::vector<int64_t>>& mesh_shape) {
  dim = NormalizeDimNoCheck(dim, static_cast<int64_t>(shape.size()));
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size())) return true;
  int64_t num_shards = 1;
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (p.is_shard_like() && p.dim() == dim) {
      num_shards *= MeshDimSize(mesh_shape, i);
      if (p.is_strided_shard() &&
          shape[static_cast<size_t>(dim)] % (p.split_factor() * num_shards) != 0)
        return false;
    }
  }
  return shape[static_cast<size_t>(dim)] % num_shards == 0;
}

// Upstream's is_tensor_evenly_shardable.
bool EvenlyShardable(const std::vector<int64_t>& shape, const Placements& placements,
                     const std::optional<std::vector<int64_t>>& mesh_shape) {
  std::vector<int64_t> num_shards(shape.size(), 1);
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (!p.is_shard_like()) continue;
    const int64_t d = p.dim();
    if (d < 0 || d >= static_cast<int64_t>(shape.size())) return false;
    num_shards[static_cast<size_t>(d)] *= MeshDimSize(mesh_shape, i);
    const int64_t divisor = p.is_strided_shard()
                                ? p.split_factor() * num_shards[static_cast<size_t>(d)]
                                : num_shards[static_cast<size_t>(d)];
    if (shape[static_cast<size_t>(d)] % divisor != 0) return false;
  }
  return true;
}

// Upstream's DTensorSpec.num_shards: the product of the mesh dim sizes that shard.
int64_t NumShards(const Placements& placements,
                  const std::optional<std::vector<int64_t>>& mesh_shape) {
  int64_t n = 1;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].is_shard_like()) n *= MeshDimSize(mesh_shape, i);
  }
  return n;
}

Placements AllReplicate(size_t mesh_ndim) { return Placements(mesh_ndim, Placement::Replicate()); }

// A candidate whose outputs all get `out` and whose tensor inputs keep their current placements;
// callers then set the inputs upstream's strategy names. Out= tensors are never redistributed
// upstream (kwargs are not), so they stay.
Candidate BaseCandidate(const OpCallInfo& call, const std::vector<Placements>& current,
                        const Placements& out) {
  Candidate c;
  c.outputs.assign(std::max<size_t>(call.outputs.size(), 1), out);
  c.inputs = current;
  return c;
}

// ---------------------------------------------------------------------------------------------------------------------
// Reductions (op strategies).
// ---------------------------------------------------------------------------------------------------------------------

// Upstream's common_reduction_strategy for the single current spec of tensor input 0: the one
// candidate.
Candidate CommonReduction(const OpCallInfo& call, const std::vector<Placements>& current,
                          const std::vector<int64_t>& reduce_dims, bool keep_dim,
                          bool reduction_linear, const ReductionKind& kind) {
  const TensorMeta& meta = call.inputs.at(0);
  const Placements placements = NormalizedPlacements(current.at(0), meta.ndim());
  bool linear = reduction_linear;
  if (!kind.norm_type.has_value() && kind.op == ReduceOp::kAvg) {
    const auto mesh_shape = MeshShapeOf(call);
    for (int64_t d : reduce_dims) {
      if (!EvenlyShardableOnDim(meta.shape, placements, d, mesh_shape)) {
        linear = false;  // avg over uneven shards is not linear
        break;
      }
    }
  }
  for (const Placement& p : placements) {
    // A pending Partial of another reduce op (any Partial for a p-norm) cannot be delayed through
    // this reduction.
    if (p.is_partial() && (kind.norm_type.has_value() || p.reduce_op() != kind.op)) {
      linear = false;
      break;
    }
  }
  const Placements input_placements =
      linear ? placements : ReplicateReductionDims(placements, reduce_dims);
  const std::vector<int64_t> dims_map = InferReduceDimsMap(reduce_dims, meta.ndim(), keep_dim);
  const Placements out =
      MapPlacementsAfterReduction(call.name, input_placements, reduce_dims, dims_map, kind);
  Candidate c = BaseCandidate(call, current, out);
  c.inputs[0] = input_placements;
  return c;
}

// The reduction dims and keepdim of an op read as upstream's positional args_schema[dims_pos] /
// [keep_pos].
struct DimsAndKeep {
  std::vector<int64_t> reduce_dims;
  bool keep_dim = false;
};

DimsAndKeep PositionalDimsAndKeep(const OpCallInfo& call, size_t dims_pos, size_t keep_pos) {
  const int64_t ndim = call.inputs.at(0).ndim();
  const size_t n = UpstreamArgCount(call);
  std::optional<std::vector<int64_t>> dims;
  if (n > dims_pos) dims = InferReductionDims(call.args[dims_pos], ndim);
  DimsAndKeep result;
  result.reduce_dims = dims.has_value() ? *dims : AllDims(ndim);
  result.keep_dim = n > keep_pos && call.args[keep_pos].isBool() && call.args[keep_pos].toBool();
  return result;
}

// Upstream's linear_reduction_strategy / argmax_argmin_strategy.
OpStrategyFn PositionalReduction(ReduceOp op, bool reduction_linear) {
  return [op, reduction_linear](const OpCallInfo& call, const std::vector<Placements>& current) {
    if (call.IsTensor(1))
      throw InputError(call.name, "a reduction's dims argument cannot be a tensor");
    const DimsAndKeep dk = PositionalDimsAndKeep(call, 1, 2);
    return std::vector<Candidate>{
        CommonReduction(call, current, dk.reduce_dims, dk.keep_dim, reduction_linear, Reduce(op))};
  };
}

// Upstream's std_var_reduction_strategy: dims positional, keepdim a keyword.
std::vector<Candidate> StdVarStrategy(const OpCallInfo& call,
                                      const std::vector<Placements>& current) {
  const int64_t ndim = call.inputs.at(0).ndim();
  std::optional<std::vector<int64_t>> dims;
  if (UpstreamArgCount(call) > 1) dims = InferReductionDims(call.args[1], ndim);
  const std::vector<int64_t> reduce_dims = dims.has_value() ? *dims : AllDims(ndim);
  bool keep_dim = false;
  if (auto i = ArgIndex(call, "keepdim"); i.has_value() && call.args[*i].isBool())
    keep_dim = call.args[*i].toBool();
  return {CommonReduction(call, current, reduce_dims, keep_dim, false, Reduce(ReduceOp::kSum))};
}

// Upstream's _get_norm_reduction_op on a Scalar / string ord.
ReductionKind NormReductionOf(const c10::IValue& ord) {
  double p = 2;
  if (ord.isString()) {
    const std::string s = ord.toStringRef();
    if (s == "inf") return Reduce(ReduceOp::kMax);
    if (s == "-inf") return Reduce(ReduceOp::kMin);
    throw InputError("ord", "expected a number, 'inf' or '-inf', got '" + s + "'");
  }
  if (ord.isInt()) {
    p = static_cast<double>(ord.toInt());
  } else if (ord.isDouble()) {
    p = ord.toDouble();
  } else if (ord.isScalar()) {
    p = ord.toScalar().toDouble();
  } else {
    throw InputError("ord", "expected a number, got " + ord.tagKind());
  }
  if (std::isinf(p)) return Reduce(p > 0 ? ReduceOp::kMax : ReduceOp::kMin);
  return ReductionKind{ReduceOp::kSum, p};
}

// Upstream's vector_norm_strategy (powsum = false) and powsum_strategy (powsum = true).
OpStrategyFn NormStrategy(bool powsum) {
  return [powsum](const OpCallInfo& call, const std::vector<Placements>& current) {
    const int64_t ndim = call.inputs.at(0).ndim();
    const size_t n = UpstreamArgCount(call);
    std::optional<std::vector<int64_t>> dims;
    if (n > 2) dims = InferReductionDims(call.args[2], ndim);
    const std::vector<int64_t> reduce_dims = dims.has_value() ? *dims : AllDims(ndim);
    const bool keep_dim = n > 3 && call.args[3].isBool() && call.args[3].toBool();
    ReductionKind kind = Reduce(ReduceOp::kSum);
    if (!powsum) kind = n > 1 ? NormReductionOf(call.args[1]) : ReductionKind{ReduceOp::kSum, 2.0};
    return std::vector<Candidate>{
        CommonReduction(call, current, reduce_dims, keep_dim, true, kind)};
  };
}

// Upstream's scan_strategy (cumsum, cumprod, logcumsumexp): the dim is used as given (not
// normalised), as upstream.
std::vector<Candidate> ScanStrategy(const OpCallInfo& call,
                                    const std::vector<Placements>& current) {
  return {CommonReduction(call, current, {call.Int(1)}, true, false, Reduce(ReduceOp::kSum))};
}

// Upstream's global_median_strategy.
std::vector<Candidate> GlobalMedianStrategy(const OpCallInfo& call,
                                            const std::vector<Placements>& current) {
  return {CommonReduction(call, current, AllDims(call.inputs.at(0).ndim()), false, false,
                          Reduce(ReduceOp::kSum))};
}

// Upstream's logsumexp_strategy. Upstream reads keepdim from the keyword arguments only, but
// keepdim is positional in the schema, so upstream always maps the output as keepdim=False;
// reproduced.
std::vector<Candidate> LogsumexpStrategy(const OpCallInfo& call,
                                         const std::vector<Placements>& current) {
  const int64_t ndim = call.inputs.at(0).ndim();
  const std::optional<std::vector<int64_t>> dims = InferReductionDims(call.args.at(1), ndim);
  if (!dims.has_value()) throw InputError(call.name, "Expected reduce_dims to not be None");
  return {CommonReduction(call, current, *dims, false, false, Reduce(ReduceOp::kSum))};
}

// Upstream's linalg_replicate_strategy: input 0 and every output replicated.
std::vector<Candidate> ReplicateStrategy(const OpCallInfo& call,
                                         const std::vector<Placements>& current) {
  Candidate c = BaseCandidate(call, current, AllReplicate(current.at(0).size()));
  c.inputs[0] = AllReplicate(current.at(0).size());
  return {c};
}

// ---------------------------------------------------------------------------------------------------------------------
// Softmax and losses (op strategies).
// ---------------------------------------------------------------------------------------------------------------------

// Upstream's softmax_strategy: input replicated on the softmax dim (and Partial cleared); output
// follows.
std::vector<Candidate> SoftmaxStrategy(const OpCallInfo& call,
                                       const std::vector<Placements>& current) {
  const int64_t ndim = call.inputs.at(0).ndim();
  const int64_t dim = NormalizeDimNoCheck(call.Int(1), ndim);
  const Placements target =
      ReplicateReductionDims(NormalizedPlacements(current.at(0), ndim), {dim});
  Candidate c = BaseCandidate(call, current, target);
  c.inputs[0] = target;
  return {c};
}

// Upstream's softmax_backward_strategy: follow whichever of grad_output / output has more shards
// (grad_output on a tie), replicated on the softmax dim; both inputs and the output get that.
std::vector<Candidate> SoftmaxBackwardStrategy(const OpCallInfo& call,
                                               const std::vector<Placements>& current) {
  const int64_t ndim = call.inputs.at(0).ndim();
  const int64_t dim = NormalizeDimNoCheck(call.Int(2), ndim);
  const auto mesh_shape = MeshShapeOf(call);
  const Placements grad_out = NormalizedPlacements(current.at(0), ndim);
  const Placements out = NormalizedPlacements(current.at(1), call.inputs.at(1).ndim());
  const Placements& src =
      NumShards(grad_out, mesh_shape) >= NumShards(out, mesh_shape) ? grad_out : out;
  const Placements target = ReplicateReductionDims(src, {dim});
  Candidate c = BaseCandidate(call, current, target);
  c.inputs[0] = target;
  c.inputs[1] = target;
  return {c};
}

constexpr int64_t kReductionNone = 0;
constexpr int64_t kReductionMean = 1;

// Upstream's nll_loss_forward_strategy (also nll_loss2d_forward): (self, target, weight?,
// reduction, ignore_index)
// -> (output, total_weight).
std::vector<Candidate> NllLossForwardStrategy(const OpCallInfo& call,
                                              const std::vector<Placements>& current) {
  const TensorMeta& input_meta = MetaOf(call, 0);
  const TensorMeta& target_meta = MetaOf(call, 1);
  const bool has_weight = call.IsTensor(2);
  const int64_t reduction = call.Int(3);
  const int64_t channel_dim = input_meta.ndim() >= 2 ? 1 : 0;
  const size_t mesh_ndim = current.at(0).size();

  const Placements input_expected =
      ReplicateReductionDims(NormalizedPlacements(current.at(0), input_meta.ndim()), {channel_dim});
  const Placements target_expected = SkipDim(input_expected, channel_dim);
  Candidate c;
  c.inputs = current;
  c.inputs[0] = input_expected;
  c.inputs[1] = target_expected;
  if (has_weight) c.inputs[2] = ReplicateDimsStartAt(current.at(2));

  if (reduction == kReductionNone) {
    c.outputs = {target_expected, AllReplicate(mesh_ndim)};
    return {c};
  }
  ReduceOp op = ReduceOp::kSum;
  if (reduction == kReductionMean) {
    op = ReduceOp::kAvg;
    if (!EvenlyShardable(target_meta.shape, target_expected, MeshShapeOf(call))) {
      throw InputError(
          call.name,
          "The intermediate results of nll_loss cannot be evenly sharded, resulting in biased mean "
          "result.");
    }
  }
  const std::vector<int64_t> reduce_dims = AllDims(target_meta.ndim());
  const std::vector<int64_t> dims_map = InferReduceDimsMap(reduce_dims, target_meta.ndim(), false);
  const Placements out =
      MapPlacementsAfterReduction(call.name, target_expected, reduce_dims, dims_map, Reduce(op));
  const Placements total_weight = MapPlacementsAfterReduction(
      call.name, target_expected, reduce_dims, dims_map, Reduce(ReduceOp::kSum));
  c.outputs = {out, total_weight};
  return {c};
}

// Upstream's nll_loss_backward_strategy (also nll_loss2d_backward): (grad_output, self, target,
// weight?, reduction, ignore_index, total_weight) -> grad_input.
std::vector<Candidate> NllLossBackwardStrategy(const OpCallInfo& call,
                                               const std::vector<Placements>& current) {
  const TensorMeta& input_meta = MetaOf(call, 1);
  const bool has_weight = call.IsTensor(3);
  const int64_t reduction = call.Int(4);
  const int64_t channel_dim = input_meta.ndim() >= 2 ? 1 : 0;
  // Tensor input positions: grad_output 0, self 1, target 2, weight 3 (when given), total_weight
  // last.
  const size_t total_weight_index = has_weight ? 4 : 3;

  const Placements input_expected =
      ReplicateReductionDims(NormalizedPlacements(current.at(1), input_meta.ndim()), {channel_dim});
  const Placements target_expected = SkipDim(input_expected, channel_dim);
  Candidate c;
  c.inputs = current;
  c.inputs[0] = reduction == kReductionNone ? target_expected : ReplicateDimsStartAt(current.at(0));
  c.inputs[1] = input_expected;
  c.inputs[2] = target_expected;
  if (has_weight) c.inputs[3] = ReplicateDimsStartAt(current.at(3));
  if (reduction == kReductionMean) {
    c.inputs.at(total_weight_index) = ReplicateDimsStartAt(current.at(total_weight_index));
  }
  c.outputs = {input_expected};
  return {c};
}

// ---------------------------------------------------------------------------------------------------------------------
// Single-dim strategies.
// ---------------------------------------------------------------------------------------------------------------------

using R = RulePlacement;

SingleDimRule Repeat(const RulePlacement& p, size_t n) { return SingleDimRule(n, p); }

// Rules [values, indices, input] sharding every dim but `dim` (upstream's max/min.dim, median.dim,
// mode, kthvalue).
std::vector<SingleDimRule> ShardOtherDimsWithIndices(int64_t ndim, int64_t dim, bool keep_dim) {
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < ndim; ++d) {
    if (d == dim) continue;
    const int64_t out_d = keep_dim || d < dim ? d : d - 1;
    rules.push_back({R::ShardOn(out_d), R::ShardOn(out_d), R::ShardOn(d)});
  }
  return rules;
}

// Upstream's max_min_dim_single_dim_strategy: (self, dim, keepdim=False).
std::vector<SingleDimRule> MaxMinDimRules(const OpCallInfo& call) {
  const int64_t ndim = MetaOf(call, 0).ndim();
  return ShardOtherDimsWithIndices(ndim, NormalizeDimNoCheck(call.Int(1), ndim), call.Bool(2));
}

// Upstream's dim_reduction_with_indices_strategy (median.dim, nanmedian.dim, mode): (self, dim=-1,
// keepdim=False).
std::vector<SingleDimRule> DimWithIndicesRules(const OpCallInfo& call) {
  const int64_t ndim = MetaOf(call, 0).ndim();
  return ShardOtherDimsWithIndices(ndim, NormalizeDimNoCheck(call.Int(1), ndim), call.Bool(2));
}

// Upstream's kthvalue_strategy: (self, k, dim=-1, keepdim=False).
std::vector<SingleDimRule> KthvalueRules(const OpCallInfo& call) {
  const int64_t ndim = MetaOf(call, 0).ndim();
  return ShardOtherDimsWithIndices(ndim, NormalizeDimNoCheck(call.Int(2), ndim), call.Bool(3));
}

// The number of leading (non-normalised) dims of `input_arg` for a norm over
// `normalized_shape_arg`.
int64_t NormAxis(const OpCallInfo& call, size_t input_arg, size_t normalized_shape_arg) {
  return MetaOf(call, input_arg).ndim() -
         static_cast<int64_t>(call.IntList(normalized_shape_arg).size());
}

// Upstream's layer_norm_single_dim_strategy: [out, mean, rstd, input, weight?, bias?].
std::vector<SingleDimRule> LayerNormRules(const OpCallInfo& call) {
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < NormAxis(call, 0, 1); ++d) {
    SingleDimRule rule = Repeat(R::ShardOn(d), 4);
    if (call.IsTensor(2)) rule.push_back(R::R());
    if (call.IsTensor(3)) rule.push_back(R::R());
    rules.push_back(rule);
  }
  return rules;
}

// Upstream's rms_norm_single_dim_strategy: [out, rrms, input, weight?].
std::vector<SingleDimRule> RmsNormRules(const OpCallInfo& call) {
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < NormAxis(call, 0, 1); ++d) {
    SingleDimRule rule = Repeat(R::ShardOn(d), 3);
    if (call.IsTensor(2)) rule.push_back(R::R());
    rules.push_back(rule);
  }
  return rules;
}

// Upstream's layer_norm_bwd_single_dim_strategy: [d_input, d_weight, d_bias, grad_out, input, mean,
// rstd, weight?, bias?]; d_weight / d_bias are P(sum), or None where weight / bias is not given.
std::vector<SingleDimRule> LayerNormBackwardRules(const OpCallInfo& call) {
  const bool has_weight = call.IsTensor(5);
  const bool has_bias = call.IsTensor(6);
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < NormAxis(call, 1, 2); ++d) {
    SingleDimRule rule = {R::ShardOn(d), has_weight ? R::P() : R::None(),
                          has_bias ? R::P() : R::None()};
    for (int i = 0; i < 4; ++i) rule.push_back(R::ShardOn(d));
    if (has_weight) rule.push_back(R::R());
    if (has_bias) rule.push_back(R::R());
    rules.push_back(rule);
  }
  return rules;
}

// Upstream's rms_norm_bwd_single_dim_strategy: [d_input, d_weight, grad_out, input, rstd, weight?].
std::vector<SingleDimRule> RmsNormBackwardRules(const OpCallInfo& call) {
  const bool has_weight = call.IsTensor(4);
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < NormAxis(call, 1, 2); ++d) {
    SingleDimRule rule = {R::ShardOn(d), has_weight ? R::P() : R::None(), R::ShardOn(d),
                          R::ShardOn(d), R::ShardOn(d)};
    if (has_weight) rule.push_back(R::R());
    rules.push_back(rule);
  }
  return rules;
}

// Upstream's sort_strategy as single-dim rules with literal placements: [R, R, R] then [S(d)] * 3
// for every dim but the sort dim ([values, indices, input]).
std::vector<SingleDimRule> SortRules(const OpCallInfo& call, int64_t sort_dim) {
  const int64_t ndim = MetaOf(call, 0).ndim();
  sort_dim = NormalizeDimNoCheck(sort_dim, ndim);
  std::vector<SingleDimRule> rules = {Repeat(R::R(), 3)};
  for (int64_t d = 0; d < ndim; ++d) {
    if (d != sort_dim) rules.push_back(Repeat(R::Of(Placement::Shard(d)), 3));
  }
  return rules;
}

// Upstream's histc_strategy: [R, R], and [P(sum), S(d)] for every dim when both min and max are
// given.
std::vector<SingleDimRule> HistcRules(const OpCallInfo& call) {
  std::vector<SingleDimRule> rules = {{R::R(), R::R()}};
  if (UpstreamArgCount(call) == 4) {
    for (int64_t d = 0; d < MetaOf(call, 0).ndim(); ++d)
      rules.push_back({R::P(), R::Of(Placement::Shard(d))});
  }
  return rules;
}

// Upstream's pooling_strategy: every output and tensor input alike: R, S(0), (avg pools) P(sum),
// P(avg), and S(1) when the input is batched (ndim >= spatial_rank + 2).
SingleDimStrategyFn PoolingRules(int64_t spatial_rank, bool max_pool) {
  return [spatial_rank, max_pool](const OpCallInfo& call) {
    const size_t n = (max_pool ? 2 : 1) + call.inputs.size();
    std::vector<SingleDimRule> rules = {Repeat(R::R(), n), Repeat(R::Of(Placement::Shard(0)), n)};
    if (!max_pool) {
      rules.push_back(Repeat(R::P(ReduceOp::kSum), n));
      rules.push_back(Repeat(R::P(ReduceOp::kAvg), n));
    }
    if (MetaOf(call, 0).ndim() >= spatial_rank + 2)
      rules.push_back(Repeat(R::Of(Placement::Shard(1)), n));
    return rules;
  };
}

// Upstream's _linalg_batch_dim_strategies plus the op-specific extra rules of
// linalg_batch_dim_strategy.
SingleDimStrategyFn LinalgBatchRules(size_t n_placements, std::string extra) {
  return [n_placements, extra](const OpCallInfo& call) {
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d < MetaOf(call, 0).ndim() - 2; ++d)
      rules.push_back(Repeat(R::ShardOn(d), n_placements));
    if (extra == "solve_triangular") {
      rules.push_back({R::P(), R::R(), R::P()});
      rules.push_back({R::P(ReduceOp::kAvg), R::R(), R::P(ReduceOp::kAvg)});
      for (int64_t d = 0; d < MetaOf(call, 1).ndim() - 2; ++d) {
        rules.push_back({R::ShardOn(d), R::R(), R::ShardOn(d)});
      }
    } else if (extra == "cholesky_solve") {
      rules.push_back({R::P(), R::P(), R::R()});
    } else if (extra == "solve_with_pivots") {  // linalg_lu_solve, linalg_ldl_solve, ormqr
      rules.push_back({R::P(), R::R(), R::R(), R::P()});
    } else if (extra == "solve_ex") {
      rules.push_back({R::P(), R::R(), R::R(), R::R(), R::R(), R::P()});
    }
    return rules;
  };
}

// Upstream's linalg_pinv_strategy: [out, self, atol?, rtol?] sharding batch dims, atol / rtol
// replicated.
std::vector<SingleDimRule> LinalgPinvRules(const OpCallInfo& call) {
  const size_t extra = NumBaseTensorInputs(call) - 1;
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < MetaOf(call, 0).ndim() - 2; ++d) {
    SingleDimRule rule = {R::ShardOn(d), R::ShardOn(d)};
    for (size_t i = 0; i < extra; ++i) rule.push_back(R::R());
    rules.push_back(rule);
  }
  return rules;
}

// Upstream's linalg_cross_strategy: (self, other, *, dim=-1); every dim but the cross dim.
std::vector<SingleDimRule> LinalgCrossRules(const OpCallInfo& call) {
  const int64_t ndim = MetaOf(call, 0).ndim();
  int64_t dim = -1;
  if (auto i = ArgIndex(call, "dim"); i.has_value()) dim = call.Int(*i);
  const int64_t cross_dim = ndim == 0 ? 0 : ((dim % ndim) + ndim) % ndim;  // Python modulo
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < ndim; ++d) {
    if (d != cross_dim) rules.push_back(Repeat(R::ShardOn(d), 3));
  }
  return rules;
}

// Upstream's interp_upsample_1out_1in_strategy.
std::vector<SingleDimRule> UpsampleRules(const OpCallInfo&) {
  return {Repeat(R::ShardOn(0), 2),
          Repeat(R::ShardOn(1), 2),
          {R::P(), R::P()},
          {R::P(ReduceOp::kAvg), R::P(ReduceOp::kAvg)}};
}

// Upstream's interp_pool_1out_2in_strategy.
std::vector<SingleDimRule> Pool1Out2InRules(const OpCallInfo&) {
  return {Repeat(R::ShardOn(0), 3), Repeat(R::ShardOn(1), 3)};
}

// Upstream's pool_backward_strategy: [grad_input, grad_output, self, indices].
std::vector<SingleDimRule> MaxPoolBackwardRules(const OpCallInfo& call) {
  std::vector<SingleDimRule> rules = {Repeat(R::ShardOn(0), 4)};
  if (MetaOf(call, 0).ndim() >= 4) rules.push_back(Repeat(R::ShardOn(1), 4));
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
    rules.push_back({R::P(op), R::P(op), R::R(), R::R()});
  return rules;
}

// Upstream's grid_sampler_strategy: [out, input, grid].
std::vector<SingleDimRule> GridSamplerRules(const OpCallInfo&) {
  return {Repeat(R::ShardOn(0), 3),
          {R::P(), R::P(), R::R()},
          {R::P(ReduceOp::kAvg), R::P(ReduceOp::kAvg), R::R()}};
}

// Upstream's grid_sampler_backward_strategy.
std::vector<SingleDimRule> GridSamplerBackwardRules(const OpCallInfo&) {
  return {Repeat(R::ShardOn(0), 5)};
}

// Upstream's batch_norm_strategy: output / input on dim 1, the per-channel tensors on dim 0,
// reserve replicated.
SingleDimStrategyFn BatchNormRules(bool four_outputs) {
  return [four_outputs](const OpCallInfo& call) {
    const size_t num_inputs = NumBaseTensorInputs(call);
    SingleDimRule rule = {R::ShardOn(1), R::ShardOn(0), R::ShardOn(0)};
    if (four_outputs) rule.push_back(R::R());
    rule.push_back(R::ShardOn(1));
    for (size_t i = 1; i < num_inputs; ++i) rule.push_back(R::ShardOn(0));
    return std::vector<SingleDimRule>{rule};
  };
}

// Upstream's batch_norm_backward_strategy.
std::vector<SingleDimRule> BatchNormBackwardRules(const OpCallInfo& call) {
  const size_t num_inputs = NumBaseTensorInputs(call);
  SingleDimRule rule = {R::ShardOn(1), R::ShardOn(0), R::ShardOn(0), R::ShardOn(1), R::ShardOn(1)};
  for (size_t i = 2; i < num_inputs; ++i) rule.push_back(R::ShardOn(0));
  return {rule};
}

// Upstream's autogen out-variant wrapper: each out= tensor follows its output (appended after the
// base rule).
SingleDimStrategyFn WithOutArgs(SingleDimStrategyFn base) {
  return [base](const OpCallInfo& call) {
    std::vector<SingleDimRule> rules = base(call);
    const size_t num_out = NumOutArgs(call);
    for (SingleDimRule& rule : rules) {
      const size_t num_outputs = rule.size() - NumBaseTensorInputs(call);
      for (size_t i = 0; i < num_out && i < num_outputs; ++i) rule.push_back(rule[i]);
    }
    return rules;
  };
}

// Registers `fn` for the base op names and, wrapped by WithOutArgs, for their out= overloads.
void RegisterWithOut(const std::vector<std::string>& base_ops,
                     const std::vector<std::string>& out_ops, const SingleDimStrategyFn& fn) {
  RegisterSingleDimStrategy(base_ops, fn);
  if (!out_ops.empty()) RegisterSingleDimStrategy(out_ops, WithOutArgs(fn));
}

}  // namespace

void RegisterMathOps() {
  // Reductions whose partial results combine (upstream's LINEAR_REDUCTION_OP_MAP).
  RegisterOpStrategy({"aten::all", "aten::all.dim", "aten::prod", "aten::prod.dim_int",
                      "aten::prod.int_out", "prims::prod"},
                     PositionalReduction(ReduceOp::kProduct, true));
  RegisterOpStrategy({"aten::sum", "aten::sum.dim_IntList", "prims::sum", "aten::any",
                      "aten::any.dim", "aten::any.dims", "aten::any.out", "aten::nansum"},
                     PositionalReduction(ReduceOp::kSum, true));
  RegisterOpStrategy({"aten::mean", "aten::mean.dim", "aten::mean.out"},
                     PositionalReduction(ReduceOp::kAvg, true));
  // Upstream also lists aten::max.out / aten::min.out here, but those are the binary (self, other,
  // out) overloads, which decompose to maximum.out / minimum.out before DTensor dispatch: they
  // never reach this strategy.
  RegisterOpStrategy({"aten::max", "aten::amax", "aten::amax.out"},
                     PositionalReduction(ReduceOp::kMax, true));
  RegisterOpStrategy({"aten::min", "aten::amin", "aten::amin.out"},
                     PositionalReduction(ReduceOp::kMin, true));
  // Index-returning reductions: reduced dims must be replicated.
  RegisterOpStrategy({"aten::argmax"}, PositionalReduction(ReduceOp::kMax, false));
  RegisterOpStrategy({"aten::argmin"}, PositionalReduction(ReduceOp::kMin, false));
  RegisterOpStrategy({"aten::cumsum", "aten::cumprod", "aten::logcumsumexp"}, ScanStrategy);
  RegisterOpStrategy({"aten::median", "aten::nanmedian"}, GlobalMedianStrategy);
  RegisterOpStrategy({"aten::std.correction", "aten::std.correction_out", "aten::var.correction",
                      "aten::var.correction_out", "aten::var_mean.correction",
                      "aten::var_mean.correction_out", "prims::var"},
                     StdVarStrategy);
  RegisterOpStrategy({"aten::linalg_vector_norm", "aten::norm.Scalar"}, NormStrategy(false));
  RegisterOpStrategy({"aten::linalg__powsum"}, NormStrategy(true));
  RegisterOpStrategy({"aten::logsumexp"}, LogsumexpStrategy);
  RegisterOpStrategy(
      {"aten::_linalg_svd", "aten::linalg_qr", "aten::diagonal_copy", "aten::diag_embed",
       "aten::diag", "aten::diagonal", "aten::tril", "aten::triu", "aten::_linalg_eigh"},
      ReplicateStrategy);

  // Reductions with indices.
  RegisterWithOut({"aten::max.dim", "aten::min.dim"}, {"aten::max.dim_max", "aten::min.dim_min"},
                  MaxMinDimRules);
  RegisterWithOut({"aten::median.dim", "aten::nanmedian.dim", "aten::mode"},
                  {"aten::median.dim_values", "aten::nanmedian.dim_values", "aten::mode.values"},
                  DimWithIndicesRules);
  RegisterWithOut({"aten::kthvalue"}, {"aten::kthvalue.values"}, KthvalueRules);
  // Upstream's op strategies built with expand_to_full_mesh_op_strategy, as single-dim rules of
  // literal placements (same candidates, same product order; the all-Replicate rule comes first in
  // each).
  RegisterSingleDimStrategy({"aten::cummax", "aten::cummin"},
                            [](const OpCallInfo& call) { return SortRules(call, call.Int(1)); });
  RegisterSingleDimStrategy({"aten::topk"},
                            [](const OpCallInfo& call) { return SortRules(call, call.Int(2)); });
  RegisterSingleDimStrategy({"aten::sort"},
                            [](const OpCallInfo& call) { return SortRules(call, call.Int(1)); });
  RegisterSingleDimStrategy({"aten::sort.stable"}, [](const OpCallInfo& call) {
    const std::optional<size_t> i = ArgIndex(call, "dim");
    return SortRules(call, i.has_value() ? call.Int(*i) : -1);
  });
  RegisterSingleDimStrategy({"aten::histc"}, HistcRules);
  for (const auto& [op, rank] :
       std::vector<std::pair<std::string, int64_t>>{{"aten::avg_pool1d", 1},
                                                    {"aten::avg_pool2d", 2},
                                                    {"aten::avg_pool3d", 3},
                                                    {"aten::adaptive_avg_pool1d", 1},
                                                    {"aten::_adaptive_avg_pool2d", 2},
                                                    {"aten::_adaptive_avg_pool3d", 3}}) {
    RegisterSingleDimStrategy({op}, PoolingRules(rank, false));
  }
  for (const auto& [op, rank] :
       std::vector<std::pair<std::string, int64_t>>{{"aten::adaptive_max_pool1d", 1},
                                                    {"aten::adaptive_max_pool2d", 2},
                                                    {"aten::adaptive_max_pool3d", 3},
                                                    {"aten::fractional_max_pool2d", 2},
                                                    {"aten::fractional_max_pool3d", 3},
                                                    {"aten::max_pool1d_with_indices", 1},
                                                    {"aten::max_pool2d_with_indices", 2},
                                                    {"aten::max_pool3d_with_indices", 3}}) {
    RegisterSingleDimStrategy({op}, PoolingRules(rank, true));
  }

  // Softmax.
  RegisterOpStrategy({"aten::_softmax", "aten::_log_softmax", "aten::_safe_softmax"},
                     SoftmaxStrategy);
  RegisterOpStrategy({"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"},
                     SoftmaxBackwardStrategy);

  // Losses.
  RegisterOpStrategy({"aten::nll_loss_forward", "aten::nll_loss2d_forward"},
                     NllLossForwardStrategy);
  RegisterOpStrategy({"aten::nll_loss_backward", "aten::nll_loss2d_backward"},
                     NllLossBackwardStrategy);

  // Norms.
  RegisterWithOut({"aten::native_layer_norm"}, {"aten::native_layer_norm.out"}, LayerNormRules);
  RegisterWithOut({"aten::native_layer_norm_backward"}, {"aten::native_layer_norm_backward.out"},
                  LayerNormBackwardRules);
  RegisterSingleDimStrategy({"aten::_fused_rms_norm"}, RmsNormRules);
  RegisterSingleDimStrategy({"aten::_fused_rms_norm_backward"}, RmsNormBackwardRules);
  RegisterWithOut(
      {"aten::native_batch_norm", "aten::_native_batch_norm_legit",
       "aten::_native_batch_norm_legit.no_stats", "aten::_native_batch_norm_legit_no_training"},
      {"aten::native_batch_norm.out", "aten::_native_batch_norm_legit.out",
       "aten::_native_batch_norm_legit.no_stats_out",
       "aten::_native_batch_norm_legit_no_training.out"},
      BatchNormRules(false));
  RegisterWithOut({"aten::_batch_norm_with_update"}, {"aten::_batch_norm_with_update.out"},
                  BatchNormRules(true));
  RegisterWithOut({"aten::native_batch_norm_backward"}, {"aten::native_batch_norm_backward.out"},
                  BatchNormBackwardRules);

  // Linear algebra on batch dims (upstream's _LINALG_NUM_PLACEMENTS: outputs + tensor inputs).
  struct LinalgOp {
    const char* name;
    const char* out_name;  // the autogen out= overload
    size_t n_placements;
    const char* extra;
  };
  for (const LinalgOp& op : std::vector<LinalgOp>{
           {"aten::cholesky", "aten::cholesky.out", 2, ""},
           {"aten::cholesky_inverse", "aten::cholesky_inverse.out", 2, ""},
           {"aten::linalg_matrix_exp", "aten::linalg_matrix_exp.out", 2, ""},
           {"aten::cholesky_solve", "aten::cholesky_solve.out", 3, "cholesky_solve"},
           {"aten::linalg_householder_product", "aten::linalg_householder_product.out", 3, ""},
           {"aten::linalg_solve_triangular", "aten::linalg_solve_triangular.out", 3,
            "solve_triangular"},
           {"aten::linalg_ldl_solve", "aten::linalg_ldl_solve.out", 4, "solve_with_pivots"},
           {"aten::linalg_lu_solve", "aten::linalg_lu_solve.out", 4, "solve_with_pivots"},
           {"aten::ormqr", "aten::ormqr.out", 4, "solve_with_pivots"},
           {"aten::geqrf", "aten::geqrf.a", 3, ""},
           {"aten::linalg_cholesky_ex", "aten::linalg_cholesky_ex.L", 3, ""},
           {"aten::linalg_eig", "aten::linalg_eig.out", 3, ""},
           {"aten::linalg_inv_ex", "aten::linalg_inv_ex.inverse", 3, ""},
           {"aten::triangular_solve", "aten::triangular_solve.X", 4, ""},
           {"aten::_linalg_det", "aten::_linalg_det.result", 4, ""},
           {"aten::linalg_ldl_factor_ex", "aten::linalg_ldl_factor_ex.out", 4, ""},
           {"aten::linalg_lu", "aten::linalg_lu.out", 4, ""},
           {"aten::linalg_lu_factor_ex", "aten::linalg_lu_factor_ex.out", 4, ""},
           {"aten::lu_unpack", "aten::lu_unpack.out", 5, ""},
           {"aten::_linalg_slogdet", "aten::_linalg_slogdet.sign", 5, ""},
           {"aten::_linalg_solve_ex", "aten::_linalg_solve_ex.result", 6, "solve_ex"},
           {"aten::_linalg_check_errors", "", 1, ""}}) {
    std::vector<std::string> out_ops;
    if (op.out_name[0] != '\0') out_ops.push_back(op.out_name);
    RegisterWithOut({op.name}, out_ops, LinalgBatchRules(op.n_placements, op.extra));
  }
  RegisterWithOut({"aten::linalg_pinv.atol_rtol_tensor"},
                  {"aten::linalg_pinv.atol_rtol_tensor_out"}, LinalgPinvRules);
  RegisterWithOut({"aten::linalg_cross"}, {"aten::linalg_cross.out"}, LinalgCrossRules);

  // Interpolation, unpooling, grid sampling.
  for (const char* op :
       {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
        "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
        "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "_upsample_lanczos2d_aa",
        "upsample_bicubic2d", "upsample_bilinear2d", "upsample_linear1d", "upsample_trilinear3d"}) {
    const std::string name = std::string("aten::") + op;
    RegisterWithOut({name}, {name + ".out"}, UpsampleRules);
    RegisterWithOut({name + "_backward"}, {name + "_backward.grad_input"}, UpsampleRules);
  }
  RegisterWithOut(
      {"aten::max_unpool2d", "aten::max_unpool3d", "aten::_adaptive_avg_pool2d_backward"},
      {"aten::max_unpool2d.out", "aten::max_unpool3d.out",
       "aten::_adaptive_avg_pool2d_backward.out"},
      Pool1Out2InRules);
  RegisterWithOut({"aten::max_pool2d_with_indices_backward"},
                  {"aten::max_pool2d_with_indices_backward.grad_input"}, MaxPoolBackwardRules);
  RegisterWithOut({"aten::grid_sampler_2d", "aten::grid_sampler_3d"},
                  {"aten::grid_sampler_2d.out", "aten::grid_sampler_3d.out"}, GridSamplerRules);
  RegisterWithOut({"aten::grid_sampler_2d_backward", "aten::grid_sampler_3d_backward"},
                  {"aten::grid_sampler_2d_backward.out", "aten::grid_sampler_3d_backward.out"},
                  GridSamplerBackwardRules);
}

}  // namespace ops
}  // namespace dtsim
