// Sharding strategies of the view op family (upstream: torch/distributed/tensor/_ops/_view_ops.py).
//
// Each view-like op is described by a dim map: for every output dim, how it is formed from the
// input dims (InputDim, Flatten, Split, Broadcast, Singleton, NewDim, Repeat).
// ViewShardingPropagator walks the map for the input's current placements and gives the input
// placements the op needs (a shard the map cannot keep becomes Replicate; strict views such as
// view/_unsafe_view/squeeze refuse instead) and the output placements, as upstream's
// propagate_shape_and_sharding does. The op strategy offers that single candidate.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
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

// ---------------------------------------------------------------------------------------------------------------
// Dim maps.
// ---------------------------------------------------------------------------------------------------------------

struct DimSpec;
using DimSpecPtr = std::shared_ptr<const DimSpec>;

// One output dim of a dim map (upstream's DimSpec subclasses in one tagged struct).
struct DimSpec {
  enum class Kind { kSingleton, kInputDim, kBroadcast, kNewDim, kRepeat, kFlatten, kSplit };
  Kind kind = Kind::kSingleton;
  int64_t input_dim = 0;  // kInputDim: the input dim
  int64_t size = 0;       // kBroadcast: dim_size; kNewDim: size; kRepeat: times
  std::vector<DimSpecPtr>
      inputs;  // kBroadcast/kRepeat/kSplit: {inner}; kFlatten: the flattened dims
  std::vector<int64_t> group_shape;  // kSplit
  int64_t split_id = 0;              // kSplit

  bool Is(Kind k) const { return kind == k; }
};
using DimMap = std::vector<DimSpecPtr>;

DimSpecPtr Singleton() { return std::make_shared<DimSpec>(); }

DimSpecPtr InputDim(int64_t dim) {
  auto spec = std::make_shared<DimSpec>();
  spec->kind = DimSpec::Kind::kInputDim;
  spec->input_dim = dim;
  return spec;
}

// Upstream's Broadcast.new: always a Broadcast.
DimSpecPtr BroadcastNew(DimSpecPtr dim, int64_t dim_size) {
  auto spec = std::make_shared<DimSpec>();
  spec->kind = DimSpec::Kind::kBroadcast;
  spec->inputs = {std::move(dim)};
  spec->size = dim_size;
  return spec;
}

// Upstream's Repeat.new: times 1 is the dim itself, a repeated singleton is a broadcast.
DimSpecPtr RepeatNew(DimSpecPtr dim, int64_t times) {
  if (times == 1) return dim;
  if (dim->Is(DimSpec::Kind::kSingleton)) return BroadcastNew(std::move(dim), times);
  auto spec = std::make_shared<DimSpec>();
  spec->kind = DimSpec::Kind::kRepeat;
  spec->inputs = {std::move(dim)};
  spec->size = times;
  return spec;
}

// Upstream's Flatten.new: no dims is a singleton, one dim is itself.
DimSpecPtr FlattenNew(std::vector<DimSpecPtr> dims) {
  if (dims.empty()) return Singleton();
  if (dims.size() == 1) return dims[0];
  auto spec = std::make_shared<DimSpec>();
  spec->kind = DimSpec::Kind::kFlatten;
  spec->inputs = std::move(dims);
  return spec;
}

// Upstream's Split.new: a one-entry group is the dim itself, a size-1 member is a singleton, and
// size-1 members are dropped from the group of the others.
DimSpecPtr SplitNew(const DimSpecPtr& dim, const std::vector<int64_t>& group_shape, int64_t idx) {
  DTSIM_CHECK(!group_shape.empty(), "Split of an empty group");
  if (group_shape.size() == 1) {
    DTSIM_CHECK(idx == 0, "Split idx ", idx, " of a one-entry group");
    return dim;
  }
  if (group_shape[idx] == 1) return Singleton();
  auto spec = std::make_shared<DimSpec>();
  spec->kind = DimSpec::Kind::kSplit;
  spec->inputs = {dim};
  for (size_t i = 0; i < group_shape.size(); ++i) {
    if (group_shape[i] == 1) continue;
    if (static_cast<int64_t>(i) == idx)
      spec->split_id = static_cast<int64_t>(spec->group_shape.size());
    spec->group_shape.push_back(group_shape[i]);
  }
  return spec;
}

// A Split built directly (upstream's view_as_real does not go through Split.new).
DimSpecPtr SplitRaw(DimSpecPtr dim, std::vector<int64_t> group_shape, int64_t split_id) {
  auto spec = std::make_shared<DimSpec>();
  spec->kind = DimSpec::Kind::kSplit;
  spec->inputs = {std::move(dim)};
  spec->group_shape = std::move(group_shape);
  spec->split_id = split_id;
  return spec;
}

int64_t Prod(const std::vector<int64_t>& xs, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < xs.size(); ++i) p *= xs[i];
  return p;
}
int64_t Prod(const std::vector<int64_t>& xs) { return Prod(xs, 0, xs.size()); }

// Upstream's normalize_dim: only adds ndim to a negative dim (no range check).
int64_t NormDim(int64_t dim, int64_t ndim) { return dim >= 0 ? dim : dim + ndim; }

// Throws the InputError upstream's strategy raises (field "op", message prefixed with the op name).
[[noreturn]] void Refuse(const std::string& op, const std::string& message) {
  throw InputError("op", op + ": " + message);
}

// Upstream's dim_pad_left.
DimMap DimPadLeft(int64_t ndim, int64_t min_dims) {
  DimMap map;
  for (int64_t i = 0; i < min_dims - ndim; ++i) map.push_back(Singleton());
  for (int64_t i = 0; i < ndim; ++i) map.push_back(InputDim(i));
  return map;
}

// Upstream's expand (broadcast to `shape`; -1 keeps a dim).
DimMap Expand(const std::string& op, const std::vector<int64_t>& input_shape,
              const std::vector<int64_t>& shape) {
  if (shape.size() < input_shape.size()) {
    Refuse(op, StrCat("Expected len(shape) >= len(input_shape), got ", shape.size(), " < ",
                      input_shape.size()));
  }
  const DimMap padded =
      DimPadLeft(static_cast<int64_t>(input_shape.size()), static_cast<int64_t>(shape.size()));
  DimMap map;
  for (size_t i = 0; i < padded.size(); ++i) {
    const DimSpecPtr& p = padded[i];
    const int64_t desired = shape[i];
    int64_t actual = 1;
    if (p->Is(DimSpec::Kind::kSingleton)) {
      if (desired < 0) Refuse(op, StrCat("Expected desired_s >= 0, got ", desired));
    } else {
      actual = input_shape[p->input_dim];
      if (!(actual == 1 || desired == -1 || desired == actual)) {
        Refuse(
            op,
            StrCat(
                "Expected actual_s == 1 or desired_s == -1 or desired_s == actual_s, got actual_s=",
                actual, ", desired_s=", desired));
      }
    }
    map.push_back((desired == 1 || desired == -1 || desired == actual) ? p
                                                                       : BroadcastNew(p, desired));
  }
  return map;
}

// Upstream's dim_repeat.
DimMap DimRepeat(const std::string& op, int64_t ndim, const std::vector<int64_t>& sizes) {
  if (static_cast<int64_t>(sizes.size()) < ndim) {
    Refuse(op, StrCat("Number of dimensions of repeat dims can not be smaller than number of "
                      "dimensions of tensor ",
                      ndim, "."));
  }
  const size_t pad = sizes.size() - static_cast<size_t>(ndim);
  DimMap map;
  for (size_t i = 0; i < pad; ++i) map.push_back(RepeatNew(Singleton(), sizes[i]));
  for (size_t i = pad; i < sizes.size(); ++i) {
    map.push_back(RepeatNew(InputDim(static_cast<int64_t>(i - pad)), sizes[i]));
  }
  return map;
}

// Upstream's infer_size: resolves one -1 entry of `sizes` against `total_size` elements.
std::vector<int64_t> InferSize(const std::string& op, int64_t total_size,
                               std::vector<int64_t> sizes) {
  int64_t infers = 0;
  for (int64_t s : sizes) infers += (s == -1);
  if (infers > 1) Refuse(op, "can only infer one size");
  int64_t size = Prod(sizes);
  if (infers == 1) {
    size = -size;
    if (size == 0) Refuse(op, "integer division or modulo by zero while inferring the size for -1");
    const int64_t missing = total_size / size;
    if (total_size % size != 0) {
      Refuse(op, StrCat("size inferred for -1 is not integral; the view should have ", total_size,
                        " elements."));
    }
    for (int64_t& s : sizes) {
      if (s == -1) s = missing;
    }
    return sizes;
  }
  if (size != total_size) Refuse(op, StrCat("sizes do not match ", total_size, " vs ", size));
  return sizes;
}

// Python's `a % b == 0` for the loop conditions of view_groups (b == 0 raises there).
bool Divides(const std::string& op, int64_t a, int64_t b) {
  if (b == 0) Refuse(op, "integer division or modulo by zero");
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r == 0;
}

// Upstream's view_groups: decomposes a reshape into forwarded, flattened and split dims.
DimMap ViewGroups(const std::string& op, const std::vector<int64_t>& from_size,
                  const std::vector<int64_t>& raw_to) {
  const int64_t from_nelem = Prod(from_size);
  const std::vector<int64_t> to_size = InferSize(op, from_nelem, raw_to);
  if (from_nelem != Prod(to_size)) Refuse(op, "Total view shape does not add up");

  size_t from_idx = 0;
  size_t to_idx = 0;
  const size_t from_len = from_size.size();
  const size_t to_len = to_size.size();
  DimMap result;
  while (from_idx < from_len || to_idx < to_len) {
    std::vector<size_t> from_group_dim;
    std::vector<int64_t> to_group_shape;
    int64_t f = 1;
    int64_t t = 1;
    if (from_idx < from_len) {
      f = from_size[from_idx];
      from_group_dim.push_back(from_idx);
      ++from_idx;
    }
    if (to_idx < to_len) {
      t = to_size[to_idx];
      to_group_shape.push_back(t);
      ++to_idx;
    }
    if (f == 1 && t != 1) {
      --to_idx;
      to_group_shape.clear();
    } else if (f != 1 && t == 1) {
      --from_idx;
      from_group_dim.clear();
    } else {
      while (f != t) {
        if (from_idx < from_len && (to_idx >= to_len || Divides(op, t, f) || t > f)) {
          const int64_t nf = from_size[from_idx];
          from_group_dim.push_back(from_idx);
          ++from_idx;
          f *= nf;
        } else if (to_idx < to_len && (from_idx >= from_len || Divides(op, f, t) || f > t)) {
          const int64_t nt = to_size[to_idx];
          to_group_shape.push_back(nt);
          ++to_idx;
          t *= nt;
        } else {
          break;
        }
      }
    }
    if (!to_group_shape.empty()) {
      std::vector<DimSpecPtr> flat;
      for (size_t fi : from_group_dim) {
        if (from_size[fi] >= 1) flat.push_back(InputDim(static_cast<int64_t>(fi)));
      }
      const DimSpecPtr flattened = FlattenNew(std::move(flat));
      for (size_t i = 0; i < to_group_shape.size(); ++i) {
        result.push_back(SplitNew(flattened, to_group_shape, static_cast<int64_t>(i)));
      }
    }
  }
  return result;
}

// Upstream's dim_transpose.
DimMap DimTranspose(const std::string& op, int64_t ndim, int64_t dim1, int64_t dim2) {
  dim1 = NormDim(dim1, ndim);
  dim2 = NormDim(dim2, ndim);
  if (dim1 < 0 || dim1 >= ndim || dim2 < 0 || dim2 >= ndim) {
    Refuse(op, StrCat("transpose dims (", dim1, ", ", dim2, ") out of range for a tensor of ", ndim,
                      " dims"));
  }
  DimMap map;
  for (int64_t i = 0; i < ndim; ++i) map.push_back(InputDim(i));
  std::swap(map[dim1], map[dim2]);
  return map;
}

// Upstream's dim_squeeze: drops the size-1 dims among `dims` (all dims when nullopt), on the global
// shape.
DimMap DimSqueeze(const std::vector<int64_t>& shape,
                  const std::optional<std::vector<int64_t>>& dims) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  std::set<int64_t> targets;
  if (!dims) {
    for (int64_t i = 0; i < ndim; ++i) targets.insert(i);
  } else {
    for (int64_t d : *dims) targets.insert(NormDim(d, ndim));
  }
  DimMap map;
  for (int64_t i = 0; i < ndim; ++i) {
    if (shape[i] > 1 || targets.count(i) == 0) map.push_back(InputDim(i));
  }
  return map;
}

// Upstream's dim_unsqueeze.
DimMap DimUnsqueeze(int64_t ndim, int64_t dim) {
  if (dim < 0) dim += ndim + 1;
  DimMap map;
  for (int64_t i = 0; i < ndim; ++i) {
    if (i == dim) map.push_back(Singleton());
    map.push_back(InputDim(i));
  }
  if (dim >= ndim) map.push_back(Singleton());
  return map;
}

// Upstream's dim_view_as_real: the last (complex) dim splits into itself and a new dim of size 2.
DimMap DimViewAsReal(const std::string& op, const std::vector<int64_t>& shape) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  if (ndim == 0) Refuse(op, "view_as_real of a 0-d tensor: no last dim to split");
  DimMap map;
  for (int64_t i = 0; i + 1 < ndim; ++i) map.push_back(InputDim(i));
  map.push_back(SplitRaw(InputDim(ndim - 1), {shape.back(), 2}, 0));
  map.push_back(SplitRaw(InputDim(ndim - 1), {shape.back(), 2}, 1));
  return map;
}

// ---------------------------------------------------------------------------------------------------------------
// propagate_shape_and_sharding.
// ---------------------------------------------------------------------------------------------------------------

// Upstream's _ViewShardingPropagator: phase 1 (Analyze) decides which input shards the map keeps,
// phase 2 (RewriteOutputPlacements) maps the kept shards onto output dims.
class ViewShardingPropagator {
 public:
  ViewShardingPropagator(std::string op, const Placements& input_src_placements,
                         const std::vector<int64_t>& global_input_shape, const DimMap& rule,
                         const std::vector<int64_t>& mesh_sizes, bool strict_view)
      : op_(std::move(op)),
        src_(input_src_placements),
        shape_(global_input_shape),
        rule_(rule),
        mesh_(mesh_sizes),
        strict_view_(strict_view),
        mesh_ndim_(mesh_sizes.size()) {}

  // Returns {input target placements, output placements}.
  std::pair<Placements, Placements> Run() {
    Placements tgt = Analyze();
    Placements out = RewriteOutputPlacements(tgt);
    return {std::move(tgt), std::move(out)};
  }

 private:
  using ClaimedDim = std::pair<int64_t, int64_t>;  // (input dim, output dim)

  static bool IsPlainShard(const Placement& p) { return p.is_shard(); }
  static bool IsShardLike(const Placement& p) { return p.is_shard_like(); }

  std::vector<bool>& Allowed(int64_t dim) {
    if (dim < 0 || dim >= static_cast<int64_t>(shard_allowed_.size())) {
      Refuse(op_, StrCat("shard dim ", dim, " is outside the input's ", shape_.size(), " dims"));
    }
    return shard_allowed_[dim];
  }

  static void CollectInputDims(const DimSpecPtr& cmd, std::set<int64_t>& seen) {
    if (cmd->Is(DimSpec::Kind::kInputDim)) seen.insert(cmd->input_dim);
    for (const DimSpecPtr& in : cmd->inputs) CollectInputDims(in, seen);
  }

  // Phase 1: fills shard_allowed_ and input_to_output_ and returns the input target placements.
  Placements Analyze() {
    std::set<int64_t> in_rule;
    for (const DimSpecPtr& cmd : rule_) CollectInputDims(cmd, in_rule);
    shard_allowed_.assign(shape_.size(), std::vector<bool>());
    for (size_t d = 0; d < shape_.size(); ++d) {
      shard_allowed_[d] = std::vector<bool>(mesh_ndim_, in_rule.count(static_cast<int64_t>(d)) > 0);
    }

    for (size_t output_dim = 0; output_dim < rule_.size(); ++output_dim) {
      const DimSpecPtr& cmd = rule_[output_dim];
      const std::vector<int64_t> in_dims = AnalyzeDim(cmd);
      const int64_t out = static_cast<int64_t>(output_dim);
      if (cmd->Is(DimSpec::Kind::kFlatten)) {
        for (int64_t in_dim : in_dims) {
          if (input_to_output_.count(in_dim) > 0) {
            Refuse(op_, StrCat("Input dim ", in_dim, " already mapped to an output dim"));
          }
          input_to_output_[in_dim] = {out};
        }
      } else if (!in_dims.empty()) {
        input_to_output_[in_dims[0]].push_back(out);
      } else if (cmd->Is(DimSpec::Kind::kSplit)) {
        // A later member of a split group: chase the root input dim (first dim of a flatten).
        DimSpecPtr root = cmd->inputs[0];
        while (root->Is(DimSpec::Kind::kFlatten) || root->Is(DimSpec::Kind::kSplit))
          root = root->inputs[0];
        if (root->Is(DimSpec::Kind::kInputDim)) {
          auto it = input_to_output_.find(root->input_dim);
          if (it != input_to_output_.end()) it->second.push_back(out);
        }
      }
    }

    Placements tgt;
    for (size_t mesh_dim = 0; mesh_dim < src_.size(); ++mesh_dim) {
      const Placement& p = src_[mesh_dim];
      if (IsShardLike(p) && !Allowed(p.dim())[mesh_dim]) {
        if (strict_view_ &&
            strict_replicate_fallback_.count({p.dim(), static_cast<int64_t>(mesh_dim)}) == 0) {
          Refuse(op_,
                 StrCat("This operation would remove or reshape sharded dimension ", p.dim(),
                        ", which requires redistribution. Please redistribute the input first."));
        }
        tgt.push_back(Placement::Replicate());
      } else {
        tgt.push_back(p);
      }
    }
    return tgt;
  }

  // The first mesh dim with a plain Shard on `dim` (nullopt when none).
  std::optional<size_t> FindPlainShard(int64_t dim) const {
    for (size_t m = 0; m < src_.size(); ++m) {
      if (IsPlainShard(src_[m]) && src_[m].dim() == dim) return m;
    }
    return std::nullopt;
  }

  // The residual split factor of `cmd` after earlier mesh dims sharding the same input dim; nullopt
  // when an earlier mesh size does not divide it.
  std::optional<int64_t> ExpectedSplitFactor(const DimSpec& cmd, int64_t sharded_dim,
                                             size_t mesh_dim, const Placements& placements) const {
    int64_t sf = Prod(cmd.group_shape, 0, static_cast<size_t>(cmd.split_id));
    for (size_t m = 0; m < mesh_dim; ++m) {
      const Placement& other = placements[m];
      if (IsShardLike(other) && other.dim() == sharded_dim) {
        if (sf % mesh_[m] != 0) return std::nullopt;
        sf /= mesh_[m];
      }
    }
    return sf;
  }

  // The mesh dim (and its placement) sharding `current_dim` for a Split: a plain Shard, or a
  // StridedShard whose split factor matches this split member.
  std::optional<size_t> FindShardForSplit(int64_t current_dim, const DimSpec& cmd,
                                          const Placements& placements) const {
    for (size_t m = 0; m < placements.size(); ++m) {
      const Placement& p = placements[m];
      if (!IsShardLike(p) || p.dim() != current_dim || matched_strided_mesh_dims_.count(m) > 0)
        continue;
      if (p.is_strided_shard()) {
        const std::optional<int64_t> expected =
            ExpectedSplitFactor(cmd, current_dim, m, placements);
        if (expected && *expected == p.split_factor()) return m;
      } else {
        return m;
      }
    }
    return std::nullopt;
  }

  std::vector<int64_t> AnalyzeFlatten(const DimSpec& cmd) {
    std::vector<int64_t> sharded_dims;
    const size_t n = cmd.inputs.size();
    for (size_t i = 0; i < n; ++i) {
      const DimSpecPtr& dim = cmd.inputs[i];
      if (!dim->Is(DimSpec::Kind::kInputDim)) Refuse(op_, "Expected InputDim inside Flatten");
      const std::optional<size_t> shard_mesh_dim = FindPlainShard(dim->input_dim);
      if (!shard_mesh_dim) continue;
      const int64_t tensor_dim_size = shape_[src_[*shard_mesh_dim].dim()];
      const int64_t mesh_dim_size = mesh_[*shard_mesh_dim];
      bool can_shard_dim = true;
      if (strict_view_) {
        const bool is_last_input_dim = i == n - 1;
        if (!is_last_input_dim && tensor_dim_size % mesh_dim_size != 0) {
          Refuse(op_,
                 StrCat("Cannot flatten unevenly sharded tensor: dimension ", dim->input_dim,
                        " (size ", tensor_dim_size, ") is not evenly divisible by mesh dimension ",
                        *shard_mesh_dim, " (size ", mesh_dim_size,
                        "). Please redistribute the tensor before this operation."));
        }
        sharded_dims.push_back(dim->input_dim);
      } else if (i == 0) {
        sharded_dims.push_back(dim->input_dim);
        if (tensor_dim_size % mesh_dim_size != 0) can_shard_dim = false;
      } else {
        can_shard_dim = false;
      }
      Allowed(dim->input_dim) = std::vector<bool>(mesh_ndim_, can_shard_dim);
    }
    if (!sharded_dims.empty()) return sharded_dims;
    if (!cmd.inputs[0]->Is(DimSpec::Kind::kInputDim))
      Refuse(op_, "Expected InputDim inside Flatten");
    return {cmd.inputs[0]->input_dim};
  }

  std::vector<int64_t> AnalyzeSplit(const DimSpec& cmd) {
    const std::vector<int64_t> in_dims = AnalyzeDim(cmd.inputs[0]);
    if (in_dims.empty()) return {};
    const int64_t in_dim = in_dims[0];
    if (cmd.inputs[0]->Is(DimSpec::Kind::kFlatten)) {
      // A plain Shard on a non-first flattened dim would need an intermediate _StridedShard:
      // replicate it.
      const std::vector<DimSpecPtr>& flat = cmd.inputs[0]->inputs;
      for (size_t k = 1; k < flat.size(); ++k) {
        if (!flat[k]->Is(DimSpec::Kind::kInputDim)) Refuse(op_, "Expected InputDim inside Flatten");
        for (size_t m = 0; m < src_.size(); ++m) {
          if (IsPlainShard(src_[m]) && src_[m].dim() == flat[k]->input_dim) {
            Allowed(flat[k]->input_dim)[m] = false;
            strict_replicate_fallback_.insert({flat[k]->input_dim, static_cast<int64_t>(m)});
          }
        }
      }
    }
    const int64_t out_size = cmd.group_shape[cmd.split_id];
    const std::optional<size_t> shard_mesh_dim = FindShardForSplit(in_dim, cmd, src_);
    if (cmd.split_id == 0) {
      std::vector<bool> allowed;
      for (int64_t m : mesh_) allowed.push_back(out_size % m == 0);
      Allowed(in_dim) = allowed;
      const std::optional<size_t> plain_mesh_dim = FindPlainShard(in_dim);
      if (strict_view_ && plain_mesh_dim && !Allowed(in_dim)[*plain_mesh_dim]) {
        Refuse(op_,
               StrCat("Cannot unflatten unevenly sharded tensor: output dimension ", cmd.split_id,
                      " (size ", out_size, ") is not evenly divisible by mesh dimension ",
                      *plain_mesh_dim, " (size ", mesh_[*plain_mesh_dim],
                      "). Please redistribute the tensor before this operation."));
      }
    }
    if (shard_mesh_dim && src_[*shard_mesh_dim].is_strided_shard()) {
      const bool is_last_split_dim =
          cmd.split_id == static_cast<int64_t>(cmd.group_shape.size()) - 1;
      const int64_t m_size = mesh_[*shard_mesh_dim];
      if (strict_view_ && !is_last_split_dim && out_size % m_size != 0) {
        Refuse(op_,
               StrCat("Cannot unflatten unevenly sharded tensor: output dimension ", cmd.split_id,
                      " (size ", out_size, ") is not evenly divisible by mesh dimension ",
                      *shard_mesh_dim, " (size ", m_size,
                      "). Please redistribute the tensor before this operation."));
      }
      matched_strided_mesh_dims_.insert(*shard_mesh_dim);
      Allowed(in_dim)[*shard_mesh_dim] = (out_size % m_size == 0) || is_last_split_dim;
    }
    if (cmd.split_id == 0) return {in_dim};
    return {};
  }

  // Updates shard_allowed_ for one dim spec and returns the input dim(s) an output dim may be
  // sharded from.
  std::vector<int64_t> AnalyzeDim(const DimSpecPtr& cmd) {
    switch (cmd->kind) {
      case DimSpec::Kind::kInputDim:
        return {cmd->input_dim};
      case DimSpec::Kind::kFlatten:
        return AnalyzeFlatten(*cmd);
      case DimSpec::Kind::kSplit:
        return AnalyzeSplit(*cmd);
      case DimSpec::Kind::kRepeat: {
        for (int64_t d : AnalyzeDim(cmd->inputs[0]))
          Allowed(d) = std::vector<bool>(mesh_ndim_, false);
        return {};
      }
      default:
        return {};
    }
  }

  // True when no later mesh dim shards a dim in [flatten_start, flatten_end) at or after this mesh
  // dim's shard dim.
  static bool IsLastShardInFlattenRange(size_t mesh_dim, const Placements& placements,
                                        int64_t flatten_start, int64_t flatten_end) {
    const int64_t tensor_dim = placements[mesh_dim].dim();
    for (size_t m = mesh_dim + 1; m < placements.size(); ++m) {
      const Placement& other = placements[m];
      if (IsShardLike(other) && flatten_start <= other.dim() && other.dim() < flatten_end &&
          other.dim() >= tensor_dim) {
        return false;
      }
    }
    return true;
  }

  // The output dims input dim `dim` maps to that no earlier mesh dim's strided rewrite claimed.
  std::vector<int64_t> UnclaimedTargets(int64_t dim, const std::set<ClaimedDim>& claimed) const {
    auto it = input_to_output_.find(dim);
    if (it == input_to_output_.end()) {
      Refuse(op_, StrCat("sharded input dim ", dim, " does not map to any output dim"));
    }
    std::vector<int64_t> targets;
    for (int64_t d : it->second) {
      if (claimed.count({dim, d}) == 0) targets.push_back(d);
    }
    return targets;
  }

  Placement RewritePlainShard(const Placement& p, size_t mesh_dim, const Placements& placements,
                              std::set<ClaimedDim>& claimed, std::vector<int64_t>& local) {
    const std::vector<int64_t> targets = UnclaimedTargets(p.dim(), claimed);
    if (targets.empty()) {
      Refuse(op_, StrCat("No output dim available for Shard(dim=", p.dim(), ") on mesh dim ",
                         mesh_dim, ". All output dims already claimed by earlier mesh dims."));
    }
    int64_t tgt = targets[0];
    if (targets.size() > 1) {
      // Unflatten: a plain Shard targets the split_id 0 member.
      std::optional<int64_t> found;
      for (int64_t d : targets) {
        if (rule_[d]->Is(DimSpec::Kind::kSplit) && rule_[d]->split_id == 0) {
          found = d;
          break;
        }
      }
      if (!found) {
        Refuse(op_, StrCat("No Split(split_id=0) found among unclaimed output dims for Shard(dim=",
                           p.dim(), ") on mesh dim ", mesh_dim, "."));
      }
      tgt = *found;
    }
    const DimSpec& cmd = *rule_[tgt];
    if (cmd.Is(DimSpec::Kind::kSplit) && cmd.inputs[0]->Is(DimSpec::Kind::kFlatten)) {
      const DimSpecPtr& first = cmd.inputs[0]->inputs[0];
      if (first->Is(DimSpec::Kind::kInputDim) && p.dim() != first->input_dim) {
        Refuse(op_, StrCat("Shard(dim=", p.dim(),
                           ") should have been demoted before the Split(Flatten(...)) rewrite."));
      }
    }
    const int64_t m_size = mesh_[mesh_dim];
    if (cmd.Is(DimSpec::Kind::kSplit) || cmd.Is(DimSpec::Kind::kInputDim)) {
      local[p.dim()] /= m_size;
      return Placement::Shard(tgt);
    }
    if (!cmd.Is(DimSpec::Kind::kFlatten)) Refuse(op_, "Expected Flatten for a sharded output dim");
    const DimSpecPtr& first = cmd.inputs.front();
    const DimSpecPtr& last = cmd.inputs.back();
    if (!first->Is(DimSpec::Kind::kInputDim) || !last->Is(DimSpec::Kind::kInputDim)) {
      Refuse(op_, "Expected InputDim inside Flatten");
    }
    const int64_t start = first->input_dim;
    std::optional<Placement> out;
    if (p.dim() == start) {
      out = Placement::Shard(tgt);
    } else {
      const int64_t split_factor =
          Prod(local, static_cast<size_t>(start), static_cast<size_t>(p.dim()));
      if (split_factor < 1) {
        Refuse(op_, StrCat("flattening gives a _StridedShard split factor of ", split_factor));
      }
      out = Placement::StridedShard(tgt, split_factor);
    }
    if (local[p.dim()] % m_size != 0 &&
        !IsLastShardInFlattenRange(mesh_dim, placements, start, last->input_dim + 1)) {
      Refuse(op_,
             StrCat("Cannot shard unevenly distributed tensor: dimension ", p.dim(), " (size ",
                    local[p.dim()], ") is not evenly divisible by mesh dimension ", mesh_dim,
                    " (size ", m_size, "). Please redistribute the tensor before this operation."));
    }
    local[p.dim()] /= m_size;
    return *out;
  }

  // The first output dim whose Split can keep the _StridedShard (mesh size × split factor), or
  // nullopt.
  std::optional<int64_t> FindKeepStridedDim(const std::vector<int64_t>& targets, const Placement& p,
                                            size_t mesh_dim) const {
    const int64_t total_shard = mesh_[mesh_dim] * p.split_factor();
    const int64_t input_dim_size = shape_[p.dim()];
    if (total_shard == 0 || input_dim_size % total_shard != 0) return std::nullopt;
    const int64_t shard_size = input_dim_size / total_shard;
    for (int64_t candidate : targets) {
      const DimSpec& cmd = *rule_[candidate];
      if (!cmd.Is(DimSpec::Kind::kSplit)) continue;
      const int64_t inner =
          Prod(cmd.group_shape, static_cast<size_t>(cmd.split_id + 1), cmd.group_shape.size());
      int64_t trailing = 1;
      if (cmd.inputs[0]->Is(DimSpec::Kind::kFlatten)) {
        bool found = false;
        for (const DimSpecPtr& flat : cmd.inputs[0]->inputs) {
          if (!flat->Is(DimSpec::Kind::kInputDim)) Refuse(op_, "Expected InputDim inside Flatten");
          if (flat->input_dim == p.dim()) {
            found = true;
          } else if (found) {
            trailing *= shape_[flat->input_dim];
          }
        }
      }
      const int64_t flattened_shard_size = shard_size * trailing;
      if (inner != 0 && flattened_shard_size >= inner && flattened_shard_size % inner == 0)
        return candidate;
    }
    return std::nullopt;
  }

  Placement RewriteStridedShard(const Placement& p, size_t mesh_dim, const Placements& placements,
                                std::set<ClaimedDim>& claimed, std::vector<int64_t>& local) {
    const std::vector<int64_t> targets = UnclaimedTargets(p.dim(), claimed);
    const int64_t m_size = mesh_[mesh_dim];
    // Phase 1: a Split whose leading group matches the split factor turns the strided shard into a
    // plain one.
    for (int64_t candidate : targets) {
      const DimSpec& cmd = *rule_[candidate];
      if (!cmd.Is(DimSpec::Kind::kSplit)) continue;
      const std::optional<int64_t> expected =
          ExpectedSplitFactor(cmd, p.dim(), mesh_dim, placements);
      if (!expected || *expected != p.split_factor()) continue;
      claimed.insert({p.dim(), candidate});
      local[p.dim()] /= m_size;
      return Placement::Shard(candidate);
    }
    // Phase 2: keep the strided shard.
    std::optional<int64_t> tgt = FindKeepStridedDim(targets, p, mesh_dim);
    if (!tgt) {
      bool any_split = false;
      for (int64_t d : targets) any_split = any_split || rule_[d]->Is(DimSpec::Kind::kSplit);
      if (strict_view_ && any_split) {
        Refuse(
            op_,
            StrCat(
                "Cannot unflatten tensor with _StridedShard placement: split_factor=",
                p.split_factor(),
                " does not match any output dimension. Please redistribute the tensor before this "
                "operation."));
      }
      if (targets.empty()) {
        Refuse(op_, StrCat("No unclaimed output dims for _StridedShard(dim=", p.dim(),
                           ") on mesh dim ", mesh_dim, "."));
      }
      tgt = targets[0];
    }
    local[p.dim()] /= m_size;
    return Placement::StridedShard(*tgt, p.split_factor());
  }

  // Phase 2: maps each kept shard of the input target placements onto its output dim.
  Placements RewriteOutputPlacements(const Placements& tgt) {
    std::set<ClaimedDim> claimed;
    std::vector<int64_t> local = shape_;
    Placements out;
    for (size_t mesh_dim = 0; mesh_dim < tgt.size(); ++mesh_dim) {
      const Placement& p = tgt[mesh_dim];
      if (p.is_shard()) {
        out.push_back(RewritePlainShard(p, mesh_dim, tgt, claimed, local));
      } else if (p.is_strided_shard()) {
        out.push_back(RewriteStridedShard(p, mesh_dim, tgt, claimed, local));
      } else {
        out.push_back(p);
      }
    }
    return out;
  }

  const std::string op_;
  const Placements src_;
  const std::vector<int64_t> shape_;
  const DimMap& rule_;
  const std::vector<int64_t> mesh_;
  const bool strict_view_;
  const size_t mesh_ndim_;
  std::vector<std::vector<bool>> shard_allowed_;  // [input dim][mesh dim]
  std::map<int64_t, std::vector<int64_t>> input_to_output_;
  std::set<size_t> matched_strided_mesh_dims_;
  std::set<std::pair<int64_t, int64_t>> strict_replicate_fallback_;  // (input dim, mesh dim)
};

// ---------------------------------------------------------------------------------------------------------------
// Registration.
// ---------------------------------------------------------------------------------------------------------------

using DimMapFn = std::function<DimMap(const OpCallInfo&)>;

const TensorMeta& SelfMeta(const OpCallInfo& info) {
  DTSIM_CHECK(!info.inputs.empty(), info.name, ": view op without a tensor input");
  return info.inputs[0];
}

// Upstream's register_op_strategy_map: one candidate per input placement (the current one), from
// the dim map.
void RegisterViewStrategy(const std::vector<std::string>& ops, DimMapFn dim_map, bool strict_view) {
  RegisterOpStrategy(ops, [dim_map = std::move(dim_map), strict_view](
                              const OpCallInfo& info, const std::vector<Placements>& current) {
    DTSIM_CHECK(!current.empty(), info.name, ": view op without input placements");
    const DimMap rules = dim_map(info);
    const Placements& src = current[0];
    const std::vector<int64_t> mesh_sizes = info.MeshSizes(src.size());
    ViewShardingPropagator propagator(info.name, src, SelfMeta(info).shape, rules, mesh_sizes,
                                      strict_view);
    auto [input_tgt, output] = propagator.Run();
    Candidate candidate;
    candidate.outputs.push_back(std::move(output));
    candidate.inputs.push_back(std::move(input_tgt));
    return std::vector<Candidate>{std::move(candidate)};
  });
}

// Base name of "aten::squeeze.dims" ("squeeze") and its overload ("dims"; "" for the default).
std::string OverloadOf(const std::string& name) {
  const size_t dot = name.find('.', name.find("::") == std::string::npos ? 0 : name.find("::") + 2);
  return dot == std::string::npos ? std::string() : name.substr(dot + 1);
}

}  // namespace

void RegisterViewOps() {
  // squeeze (default: all size-1 dims; .dim: one; .dims: several), in-place forms too. Strict.
  RegisterViewStrategy(
      {"aten::squeeze", "aten::squeeze_", "aten::squeeze.dim", "aten::squeeze_.dim",
       "aten::squeeze.dims", "aten::squeeze_.dims"},
      [](const OpCallInfo& info) {
        const std::string overload = OverloadOf(info.name);
        std::optional<std::vector<int64_t>> dims;
        if (overload == "dim") dims = std::vector<int64_t>{info.Int(1)};
        if (overload == "dims") dims = info.IntList(1);
        return DimSqueeze(SelfMeta(info).shape, dims);
      },
      /*strict_view=*/true);

  // view / _unsafe_view (strict), view_copy and reshape (may redistribute): sizes are global.
  const DimMapFn view_map = [](const OpCallInfo& info) {
    return ViewGroups(info.name, SelfMeta(info).shape, info.IntList(1));
  };
  RegisterViewStrategy({"aten::view", "aten::_unsafe_view"}, view_map, /*strict_view=*/true);
  RegisterViewStrategy({"aten::view_copy"}, view_map, /*strict_view=*/false);
  // reshape's dim map takes the shape list itself, so upstream fails (IndexError) on an empty (0-d)
  // shape.
  RegisterViewStrategy(
      {"aten::reshape"},
      [](const OpCallInfo& info) {
        const std::vector<int64_t> shape = info.IntList(1);
        if (shape.empty()) Refuse(info.name, "list index out of range (reshape to a 0-d shape)");
        return ViewGroups(info.name, SelfMeta(info).shape, shape);
      },
      /*strict_view=*/false);

  RegisterViewStrategy(
      {"aten::unsqueeze"},
      [](const OpCallInfo& info) { return DimUnsqueeze(SelfMeta(info).ndim(), info.Int(1)); },
      /*strict_view=*/false);

  RegisterViewStrategy(
      {"aten::expand", "aten::expand_copy"},
      [](const OpCallInfo& info) {
        return Expand(info.name, SelfMeta(info).shape, info.IntList(1));
      },
      /*strict_view=*/false);

  RegisterViewStrategy(
      {"aten::permute"},
      [](const OpCallInfo& info) {
        const int64_t ndim = SelfMeta(info).ndim();
        DimMap map;
        for (int64_t d : info.IntList(1)) {
          const int64_t nd = NormDim(d, ndim);
          if (nd < 0 || nd >= ndim)
            Refuse(info.name, StrCat("permute dim ", d, " out of range for ", ndim, " dims"));
          map.push_back(InputDim(nd));
        }
        return map;
      },
      /*strict_view=*/false);

  RegisterViewStrategy(
      {"aten::repeat"},
      [](const OpCallInfo& info) {
        return DimRepeat(info.name, SelfMeta(info).ndim(), info.IntList(1));
      },
      /*strict_view=*/false);

  RegisterViewStrategy(
      {"aten::transpose.int"},
      [](const OpCallInfo& info) {
        return DimTranspose(info.name, SelfMeta(info).ndim(), info.Int(1), info.Int(2));
      },
      /*strict_view=*/false);

  RegisterViewStrategy(
      {"aten::view_as_real"},
      [](const OpCallInfo& info) { return DimViewAsReal(info.name, SelfMeta(info).shape); },
      /*strict_view=*/false);

  // view_as_complex: float [..., 2] -> complex [...]; rules [output, self]. P(max)/P(min) do not
  // apply to complex.
  RegisterSingleDimStrategy({"aten::view_as_complex"}, [](const OpCallInfo& info) {
    const int64_t ndim = SelfMeta(info).ndim();
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d + 1 < ndim; ++d)
      rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d)});
    rules.push_back({RulePlacement::P(ReduceOp::kSum), RulePlacement::P(ReduceOp::kSum)});
    rules.push_back({RulePlacement::P(ReduceOp::kAvg), RulePlacement::P(ReduceOp::kAvg)});
    return rules;
  });
}

}  // namespace ops
}  // namespace dtsim
