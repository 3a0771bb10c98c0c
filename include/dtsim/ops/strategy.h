// The op layer's strategy vocabulary and registry: what an op family file (src/ops/*_ops.cc)
// declares about an ATen operator so that sharding propagation (sharding_prop.h) can choose its
// input and output placements, as upstream's torch/distributed/tensor/_ops/ does.
//
// Two kinds of strategy, as upstream:
//  - A single-dim strategy lists the valid placements of one op over ONE mesh dim as rules
//    [output placements..., tensor input placements...]; a rule entry may be a concrete placement,
//    a shard placeholder ShardOn(d) ("shard tensor dim d", filled with every shard kind the inputs
//    use) or None (a masked-off output). Propagation adds the all-Replicate rule first (unless
//    present), fills placeholders, expands the rules over every mesh dim (itertools.product order:
//    the first mesh dim varies slowest), drops combinations with mixed Partial kinds, unshardable
//    inputs and (in-place ops) a changed self, and picks the cheapest. Example, mm ("mk,kn->mn")
//    over one mesh dim: [S(0), S(0), R], [S(1), R, S(1)], [P(sum), S(1), S(0)], ...
//  - An op strategy computes the candidate specs directly from the inputs' current specs (view ops,
//  t, ...): each
//    candidate names the input placements it needs and the output placements it gives.
//
// Registration is by ATen name with overload ("aten::mm", "aten::add.Tensor"; the default overload
// has none), from each family file's Register<Family>Ops() (src/ops/families.h), all called once by
// EnsureStrategiesRegistered().
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtsim/layout/placement.h"

namespace c10 {
struct FunctionSchema;
}

namespace dtsim {
namespace ops {

// One entry of a single-dim rule.
class RulePlacement {
 public:
  enum class Kind { kPlacement, kShardOn, kNone };
  // A concrete placement (R, P(sum), S(d) meant literally).
  static RulePlacement Of(const Placement& p) { return RulePlacement(Kind::kPlacement, p, 0); }
  // Upstream's _ShardingPlaceholder(dim): becomes S(dim) (or _S(dim, sf) for strided inputs).
  static RulePlacement ShardOn(int64_t dim) {
    return RulePlacement(Kind::kShardOn, Placement::Replicate(), dim);
  }
  static RulePlacement None() { return RulePlacement(Kind::kNone, Placement::Replicate(), 0); }
  static RulePlacement R() { return Of(Placement::Replicate()); }
  static RulePlacement P(ReduceOp op = ReduceOp::kSum) { return Of(Placement::Partial(op)); }

  Kind kind() const { return kind_; }
  const Placement& placement() const { return placement_; }
  int64_t dim() const { return dim_; }
  bool operator==(const RulePlacement& o) const {
    return kind_ == o.kind_ && (kind_ != Kind::kPlacement || placement_ == o.placement_) &&
           (kind_ != Kind::kShardOn || dim_ == o.dim_);
  }
  std::string ToString() const;

 private:
  RulePlacement(Kind kind, Placement p, int64_t dim) : kind_(kind), placement_(p), dim_(dim) {}
  Kind kind_;
  Placement placement_;
  int64_t dim_;
};
using SingleDimRule = std::vector<RulePlacement>;

// Global metadata of a tensor argument or output (upstream's TensorMeta).
struct TensorMeta {
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
};

// What a strategy function sees of one op call: the schema, every argument (tensors as they were
// passed; use `meta` for their global shapes), the global metadata of each tensor argument and of
// each output.
struct OpCallInfo {
  const c10::FunctionSchema* schema = nullptr;
  std::string name;               // "aten::add.Tensor"
  std::vector<c10::IValue> args;  // schema order, defaults filled in
  std::vector<std::optional<TensorMeta>>
      meta;  // per argument: set for a defined Tensor / Tensor? argument
  // For a Tensor[] argument (cat, stack): one meta per element (empty otherwise).
  std::vector<std::vector<TensorMeta>> list_meta;
  std::vector<std::optional<TensorMeta>>
      outputs;  // per tensor return; nullopt for an undefined (masked) one
  // The tensor inputs in schema order (every Tensor / defined Tensor? argument, and Tensor[]
  // elements in order): rule entries after the outputs correspond to these.
  std::vector<TensorMeta> inputs;
  // The current placements of each tensor input (OpCallInfo::inputs order), before any
  // redistribution.
  std::vector<Placements> current;
  // The sizes of the mesh the inputs live on (mean's even-shard check, nll_loss, softmax backward,
  // view ops).
  std::vector<int64_t> mesh_shape;
  // mesh_shape, checked to have `mesh_ndim` dims (one per placement of the inputs).
  const std::vector<int64_t>& MeshSizes(size_t mesh_ndim) const;
  // Argument accessors by position (the value's default where not given): Int(1), IntList(1),
  // Double(2), Bool(3).
  int64_t Int(size_t i) const;
  std::optional<int64_t> OptInt(size_t i) const;
  std::vector<int64_t> IntList(size_t i) const;
  std::optional<std::vector<int64_t>> OptIntList(size_t i) const;
  double Double(size_t i) const;
  bool Bool(size_t i) const;
  bool IsTensor(size_t i) const { return i < meta.size() && meta[i].has_value(); }
  // True when argument i is a Python-style number (Scalar) rather than a tensor.
  bool IsScalar(size_t i) const;
  size_t num_args() const { return args.size(); }
  // True for an in-place op ("aten::add_.Tensor": base name ends with '_').
  bool inplace() const;
  // True for an out= variant (the schema has out arguments).
  bool out_variant() const;
};

using SingleDimStrategyFn = std::function<std::vector<SingleDimRule>(const OpCallInfo&)>;

struct SingleDimOptions {
  // Upstream's allow_uneven_sharding: an input whose current placements equal the rule's may be
  // kept even when a dim is smaller than its number of shards.
  bool allow_uneven_sharding = false;
};

// A candidate of an op strategy: the placements each tensor input needs and each output gets
// (nullopt: no output).
struct Candidate {
  std::vector<std::optional<Placements>> outputs;
  std::vector<Placements> inputs;
};
// Given the call and the current placements of each tensor input (OpCallInfo::inputs order), the
// candidates in upstream's order (ties go to the first). An empty list means "no strategy":
// propagation reports it.
using OpStrategyFn =
    std::function<std::vector<Candidate>(const OpCallInfo&, const std::vector<Placements>&)>;

// Registers `fn` for each op name; a later registration of the same name replaces the earlier one.
void RegisterSingleDimStrategy(const std::vector<std::string>& ops, SingleDimStrategyFn fn,
                               SingleDimOptions options = {});
void RegisterOpStrategy(const std::vector<std::string>& ops, OpStrategyFn fn);

struct StrategyEntry {
  std::optional<SingleDimStrategyFn> single_dim;
  SingleDimOptions options;
  std::optional<OpStrategyFn> op_strategy;
};
// The entry of "aten::mm" / "aten::add.Tensor", or nullptr.
const StrategyEntry* FindStrategy(std::string_view op_name);
// Every registered op name, sorted (docs, `dtsim op --list`).
std::vector<std::string> RegisteredOps();

// Runs every family file's registration once (thread-safe); called by propagation before any
// lookup.
void EnsureStrategiesRegistered();

// Helpers shared by family files.
// Upstream's infer_broadcast_dims_map: for each dim of `common` the dim of `shape` it comes from,
// or -1 when broadcast (missing or of size 1 while common's is not).
std::vector<int64_t> BroadcastDimsMap(const std::vector<int64_t>& common,
                                      const std::vector<int64_t>& shape);
// torch.broadcast_shapes of several shapes (InputError when they do not broadcast).
std::vector<int64_t> BroadcastShapes(const std::vector<std::vector<int64_t>>& shapes);
// A dim index normalised onto `ndim` dims (negative counts from the end); InputError(field) outside
// the range.
int64_t NormalizeDim(int64_t dim, int64_t ndim, const std::string& field = "dim");

}  // namespace ops
}  // namespace dtsim
