// Sharding strategies of the tensor op family (upstream:
// torch/distributed/tensor/_ops/_tensor_ops.py).
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
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

// Throws the InputError upstream's strategy raises (field "op", message prefixed with the op name).
[[noreturn]] void Refuse(const std::string& op, const std::string& message) {
  throw InputError("op", op + ": " + message);
}

// Upstream's normalize_dim: only adds ndim to a negative dim (no range check).
int64_t NormDim(int64_t dim, int64_t ndim) { return dim >= 0 ? dim : dim + ndim; }

// A dim index used to read a shape: normalised and range-checked (Python would raise IndexError).
int64_t CheckedDim(const std::string& op, int64_t dim, int64_t ndim) {
  const int64_t d = NormDim(dim, ndim);
  if (d < 0 || d >= ndim)
    Refuse(op, StrCat("dim ", dim, " is out of range for a tensor of ", ndim, " dims"));
  return d;
}

Placements AllReplicate(size_t mesh_ndim) { return Placements(mesh_ndim, Placement::Replicate()); }

// Upstream's is_tensor_dim_sharded: some Shard / _StridedShard on tensor dim `dim`.
bool IsDimSharded(const Placements& placements, int64_t dim) {
  for (const Placement& p : placements) {
    if (p.is_shard_like() && p.dim() == dim) return true;
  }
  return false;
}

bool IsSharded(const Placements& placements) {
  for (const Placement& p : placements) {
    if (p.is_shard_like()) return true;
  }
  return false;
}

bool IsPartial(const Placements& placements) {
  for (const Placement& p : placements) {
    if (p.is_partial()) return true;
  }
  return false;
}

// Upstream's unshard_tensor_dim: shards of tensor dim `dim` become Replicate.
Placements UnshardDim(const Placements& placements, int64_t dim) {
  Placements out;
  for (const Placement& p : placements)
    out.push_back(p.is_shard_like() && p.dim() == dim ? Placement::Replicate() : p);
  return out;
}

// Upstream's replicate_tensor_dim: Partials and shards of tensor dim `dim` become Replicate.
Placements ReplicateDim(const Placements& placements, int64_t dim) {
  Placements out;
  for (const Placement& p : placements) {
    out.push_back(p.is_partial() || (p.is_shard_like() && p.dim() == dim) ? Placement::Replicate()
                                                                          : p);
  }
  return out;
}

// Partials become Replicate.
Placements PartialToReplicate(const Placements& placements) {
  Placements out;
  for (const Placement& p : placements) out.push_back(p.is_partial() ? Placement::Replicate() : p);
  return out;
}

// Upstream's shift_shard_dims_after_insert / _after_remove.
Placement WithDim(const Placement& p, int64_t dim) {
  return p.is_strided_shard() ? Placement::StridedShard(dim, p.split_factor())
                              : Placement::Shard(dim);
}
Placements ShiftAfterInsert(const Placements& placements, int64_t insert_dim) {
  Placements out;
  for (const Placement& p : placements) {
    out.push_back(p.is_shard_like() && p.dim() >= insert_dim ? WithDim(p, p.dim() + 1) : p);
  }
  return out;
}
Placements ShiftAfterRemove(const Placements& placements, int64_t remove_dim) {
  Placements out;
  for (const Placement& p : placements) {
    out.push_back(p.is_shard_like() && p.dim() > remove_dim ? WithDim(p, p.dim() - 1) : p);
  }
  return out;
}

// Upstream's DTensorSpec.num_shards: the product of the mesh sizes of the sharded mesh dims.
int64_t NumShards(const Placements& placements, const std::vector<int64_t>& mesh_sizes) {
  int64_t n = 1;
  for (size_t m = 0; m < placements.size(); ++m) {
    if (placements[m].is_shard_like()) n *= mesh_sizes[m];
  }
  return n;
}

const TensorMeta& InputMeta(const OpCallInfo& info, size_t i) {
  DTSIM_CHECK(i < info.inputs.size(), info.name, ": missing tensor input ", i);
  return info.inputs[i];
}

Candidate Make(std::vector<std::optional<Placements>> outputs, std::vector<Placements> inputs) {
  Candidate c;
  c.outputs = std::move(outputs);
  c.inputs = std::move(inputs);
  return c;
}

// Upstream's propagate_single_input_strategy: the output follows the input as it is.
std::vector<Candidate> FollowInput(const OpCallInfo& info, const std::vector<Placements>& current) {
  DTSIM_CHECK(current.size() == 1, info.name, ": expected one tensor input, got ", current.size());
  return {Make({current[0]}, {current[0]})};
}

// Upstream's create_like_strategy: the output follows the input with Partial made Replicate.
std::vector<Candidate> CreateLike(const OpCallInfo& info, const std::vector<Placements>& current) {
  DTSIM_CHECK(!current.empty(), info.name, ": no tensor input");
  std::vector<Placements> inputs = current;
  return {Make({PartialToReplicate(current[0])}, inputs)};
}

// Upstream's _partial_needs_reduce_for_dtype_cast: true when the reduce op does not commute with
// the cast.
bool PartialNeedsReduceForCast(ReduceOp op, c10::ScalarType src,
                               std::optional<c10::ScalarType> target) {
  if (!target || src == *target) return false;
  if (*target == c10::ScalarType::Bool) return true;
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) return false;
  return c10::isFloatingType(src) && !c10::isFloatingType(*target);
}

constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin,
                                      ReduceOp::kMax, ReduceOp::kProduct};

// Upstream's _shard_inactive_dims + _pass_through_partials for a one-input op ([output, self]).
std::vector<SingleDimRule> ShardInactiveDimsAndPartials(int64_t ndim,
                                                        const std::set<int64_t>& active) {
  std::vector<SingleDimRule> rules;
  for (int64_t d = 0; d < ndim; ++d) {
    if (active.count(d) == 0)
      rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d)});
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    rules.push_back({RulePlacement::P(op), RulePlacement::P(op)});
  }
  return rules;
}

std::set<int64_t> NormalizedDims(const std::vector<int64_t>& dims, int64_t ndim) {
  std::set<int64_t> out;
  for (int64_t d : dims) out.insert(NormDim(d, ndim));
  return out;
}

// Upstream's merge_placement of _derive_follow_placements_from_tuple_strategy (stack): Partial ->
// Shard -> Replicate.
Placement MergePlacement(const Placement& cur, const Placement& next) {
  if (cur == next) return cur;
  if (cur.is_partial()) {
    if (next.is_shard_like()) return next;
    if (next.is_partial()) return Placement::Replicate();
    return cur;
  }
  if (cur.is_shard_like()) return next.is_shard_like() ? Placement::Replicate() : cur;
  return next;
}

}  // namespace

void RegisterTensorOps() {
  // Ops whose output follows their single input.
  RegisterOpStrategy(
      {"aten::contiguous", "aten::detach", "aten::detach_", "aten::alias", "aten::fill_.Scalar",
       "aten::view.dtype", "aten::zero_", "prims::view_of", "aten::empty_like"},
      FollowInput);

  // clone: upstream lists it with the ops above, but its effective strategy is the single-dim
  // pointwise one that autogen registers (single-dim wins): shard on any dim, no Partial rule,
  // uneven sharding allowed.
  RegisterSingleDimStrategy(
      {"aten::clone"},
      [](const OpCallInfo& info) {
        std::vector<SingleDimRule> rules;
        for (int64_t d = 0; d < InputMeta(info, 0).ndim(); ++d) {
          rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d)});
        }
        return rules;
      },
      SingleDimOptions{/*allow_uneven_sharding=*/true});

  // _to_copy(self, *, dtype=None, ...): rules [output, self]; Partials that commute with the cast
  // pass through.
  RegisterSingleDimStrategy(
      {"aten::_to_copy"},
      [](const OpCallInfo& info) {
        const TensorMeta& self = InputMeta(info, 0);
        std::optional<c10::ScalarType> target;
        if (const std::optional<int64_t> dtype = info.OptInt(1))
          target = static_cast<c10::ScalarType>(*dtype);
        std::vector<SingleDimRule> rules;
        for (int64_t d = 0; d < self.ndim(); ++d) {
          rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d)});
        }
        for (ReduceOp op : kAllReduceOps) {
          if (!PartialNeedsReduceForCast(op, self.dtype, target)) {
            rules.push_back({RulePlacement::P(op), RulePlacement::P(op)});
          }
        }
        return rules;
      },
      SingleDimOptions{/*allow_uneven_sharding=*/true});

  // equal / is_same_size (no tensor output): both inputs follow the one with more shards (self on
  // ties), Partial made Replicate; all Replicate when either is 0-d.
  RegisterOpStrategy({"aten::equal", "aten::is_same_size"}, [](const OpCallInfo& info,
                                                               const std::vector<Placements>&
                                                                   current) {
    DTSIM_CHECK(current.size() == 2, info.name, ": expected two tensor inputs");
    const size_t mesh_ndim = current[0].size();
    if (InputMeta(info, 0).ndim() == 0 || InputMeta(info, 1).ndim() == 0) {
      return std::vector<Candidate>{Make({}, {AllReplicate(mesh_ndim), AllReplicate(mesh_ndim)})};
    }
    const std::vector<int64_t> mesh = info.MeshSizes(mesh_ndim);
    const Placements& pick =
        NumShards(current[0], mesh) >= NumShards(current[1], mesh) ? current[0] : current[1];
    const Placements follow = PartialToReplicate(pick);
    return std::vector<Candidate>{Make({}, {follow, follow})};
  });

  RegisterOpStrategy({"aten::ones_like", "aten::rand_like", "aten::randn_like", "aten::zeros_like",
                      "aten::full_like", "aten::randint_like", "aten::randint_like.low_dtype",
                      "aten::randint_like.low_dtype_out"},
                     CreateLike);

  // new_empty/new_full/new_ones/new_zeros/new_empty_strided(self, size, ...): the output is
  // Replicate, or follows the input when the shapes match and the input is sharded (or, for the
  // uninitialised new_empty*, whatever it is). Upstream gives the follow candidate cost -0.1 so
  // that it always wins; this offers it alone in that case.
  RegisterOpStrategy(
      {"aten::new_empty", "aten::new_full", "aten::new_ones", "aten::new_zeros",
       "aten::new_empty_strided"},
      [](const OpCallInfo& info, const std::vector<Placements>& current) {
        DTSIM_CHECK(!current.empty(), info.name, ": no tensor input");
        const Placements& in = current[0];
        const bool uninitialized =
            info.name == "aten::new_empty" || info.name == "aten::new_empty_strided";
        if (InputMeta(info, 0).shape == info.IntList(1) && (IsSharded(in) || uninitialized)) {
          return std::vector<Candidate>{Make({in}, {in})};
        }
        return std::vector<Candidate>{Make({AllReplicate(in.size())}, {in})};
      });

  // bucketize.Tensor(self, boundaries): rules [output, self, boundaries].
  RegisterSingleDimStrategy({"aten::bucketize.Tensor"}, [](const OpCallInfo& info) {
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d < InputMeta(info, 0).ndim(); ++d) {
      rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d), RulePlacement::R()});
    }
    rules.push_back(
        {RulePlacement::P(ReduceOp::kSum), RulePlacement::R(), RulePlacement::ShardOn(0)});
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      rules.push_back({RulePlacement::P(op), RulePlacement::P(op), RulePlacement::R()});
    }
    return rules;
  });

  // select.int(self, dim, index): the selected dim is unsharded; shards after it move down one dim.
  RegisterOpStrategy({"aten::select.int"},
                     [](const OpCallInfo& info, const std::vector<Placements>& current) {
                       const int64_t dim = NormDim(info.Int(1), InputMeta(info, 0).ndim());
                       Placements in = current.at(0);
                       if (IsDimSharded(in, dim)) in = UnshardDim(in, dim);
                       const Placements out = IsSharded(in) ? ShiftAfterRemove(in, dim) : in;
                       return std::vector<Candidate>{Make({out}, {in})};
                     });

  // select_backward(grad, input_sizes, dim, index): the grad as is; shards at or after dim move up
  // one dim. Upstream shifts with the raw dim; here a negative dim is normalised onto the output
  // rank (see report).
  RegisterOpStrategy({"aten::select_backward"}, [](const OpCallInfo& info,
                                                   const std::vector<Placements>& current) {
    const int64_t dim = NormDim(info.Int(2), static_cast<int64_t>(info.IntList(1).size()));
    const Placements& in = current.at(0);
    return std::vector<Candidate>{Make({ShiftAfterInsert(in, dim)}, {in})};
  });

  // slice.Tensor(self, dim=0, start=None, end=None, step=1): keeps the input unless it is sharded
  // on the sliced dim and the slice is not the whole dim; then that dim is unsharded.
  RegisterOpStrategy({"aten::slice.Tensor"},
                     [](const OpCallInfo& info, const std::vector<Placements>& current) {
                       const TensorMeta& self = InputMeta(info, 0);
                       const int64_t slice_dim = CheckedDim(info.name, info.Int(1), self.ndim());
                       const int64_t size = self.shape[slice_dim];
                       int64_t start = info.OptInt(2).value_or(0);
                       const std::optional<int64_t> raw_end = info.OptInt(3);
                       int64_t end = (!raw_end || *raw_end > size) ? size : *raw_end;
                       const int64_t step = info.Int(4);
                       start = NormDim(start, size);
                       end = NormDim(end, size);
                       const bool redundant = start == 0 && end == size && step == 1;
                       const Placements& in = current.at(0);
                       if (!IsDimSharded(in, slice_dim) || redundant)
                         return std::vector<Candidate>{Make({in}, {in})};
                       const Placements unsharded = UnshardDim(in, slice_dim);
                       return std::vector<Candidate>{Make({unsharded}, {unsharded})};
                     });

  // slice_backward(grad, input_sizes, dim, start, end, step): the sliced dim is unsharded in grad
  // and result. Upstream compares the raw dim; here a negative dim is normalised (see report).
  RegisterOpStrategy(
      {"aten::slice_backward"}, [](const OpCallInfo& info, const std::vector<Placements>& current) {
        const int64_t dim = NormDim(info.Int(2), static_cast<int64_t>(info.IntList(1).size()));
        const Placements unsharded = UnshardDim(current.at(0), dim);
        return std::vector<Candidate>{Make({unsharded}, {unsharded})};
      });

  // slice_scatter(self, src, dim=0, ...): src follows self; a shard on dim or a Partial becomes
  // Replicate.
  RegisterOpStrategy({"aten::slice_scatter"},
                     [](const OpCallInfo& info, const std::vector<Placements>& current) {
                       const int64_t dim = NormDim(info.Int(2), InputMeta(info, 0).ndim());
                       const Placements& in = current.at(0);
                       if (!(IsDimSharded(in, dim) || IsPartial(in)))
                         return std::vector<Candidate>{Make({in}, {in, in})};
                       const Placements replicated = ReplicateDim(in, dim);
                       return std::vector<Candidate>{Make({replicated}, {replicated, replicated})};
                     });

  // select_scatter(self, src, dim, index): rules [output, self, src]; src lacks the selected dim.
  RegisterSingleDimStrategy({"aten::select_scatter"}, [](const OpCallInfo& info) {
    const int64_t ndim = InputMeta(info, 0).ndim();
    const int64_t dim = NormDim(info.Int(2), ndim);
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d < ndim; ++d) {
      if (d == dim) continue;
      rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d),
                       RulePlacement::ShardOn(d < dim ? d : d - 1)});
    }
    return rules;
  });

  // diagonal_scatter(self, src, offset=0, dim1=0, dim2=1): rules [output, self, src]; src lacks
  // dim1/dim2 and has the diagonal appended.
  RegisterSingleDimStrategy({"aten::diagonal_scatter"}, [](const OpCallInfo& info) {
    const int64_t ndim = InputMeta(info, 0).ndim();
    const int64_t dim1 = NormDim(info.Int(3), ndim);
    const int64_t dim2 = NormDim(info.Int(4), ndim);
    const int64_t min_d = std::min(dim1, dim2);
    const int64_t max_d = std::max(dim1, dim2);
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d < ndim; ++d) {
      if (d == dim1 || d == dim2) continue;
      const int64_t removed = (d > min_d ? 1 : 0) + (d > max_d ? 1 : 0);
      rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d),
                       RulePlacement::ShardOn(d - removed)});
    }
    return rules;
  });

  // _local_scalar_dense (item()): upstream skips propagation for it entirely and reads each rank's
  // local value, so the input is kept as it is (its registered replicate-only strategy is never
  // consulted). No tensor output.
  RegisterOpStrategy({"aten::_local_scalar_dense"},
                     [](const OpCallInfo& info, const std::vector<Placements>& current) {
                       return std::vector<Candidate>{Make({}, {current.at(0)})};
                     });

  // stack(tensors, dim=0): every input follows the merged placements; shards at or after dim move
  // up one dim.
  RegisterOpStrategy(
      {"aten::stack"}, [](const OpCallInfo& info, const std::vector<Placements>& current) {
        if (current.empty()) Refuse(info.name, "stack expects a non-empty TensorList");
        const int64_t dim = NormDim(info.Int(1), InputMeta(info, 0).ndim() + 1);
        Placements follow = current[0];
        for (size_t i = 1; i < current.size(); ++i) {
          for (size_t m = 0; m < follow.size(); ++m)
            follow[m] = MergePlacement(follow[m], current[i][m]);
        }
        return std::vector<Candidate>{
            Make({ShiftAfterInsert(follow, dim)}, std::vector<Placements>(current.size(), follow))};
      });

  // cat(tensors, dim=0): one candidate per distinct input placement (unsharded on dim), in input
  // order; every input and the output take it.
  RegisterOpStrategy(
      {"aten::cat"}, [](const OpCallInfo& info, const std::vector<Placements>& current) {
        if (current.empty()) Refuse(info.name, "cat expects a non-empty TensorList");
        const int64_t dim = NormDim(info.Int(1), InputMeta(info, 0).ndim());
        std::vector<Candidate> candidates;
        std::vector<Placements> seen;
        for (const Placements& placements : current) {
          const Placements exemplar =
              IsDimSharded(placements, dim) ? UnshardDim(placements, dim) : placements;
          bool duplicate = false;
          for (const Placements& s : seen) duplicate = duplicate || s == exemplar;
          if (duplicate) continue;
          seen.push_back(exemplar);
          candidates.push_back(Make({exemplar}, std::vector<Placements>(current.size(), exemplar)));
        }
        return candidates;
      });

  // index_select(self, dim, index): rules [output, self, index].
  RegisterSingleDimStrategy({"aten::index_select"}, [](const OpCallInfo& info) {
    const int64_t ndim = InputMeta(info, 0).ndim();
    const int64_t dim = NormDim(info.Int(1), ndim);
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d < ndim; ++d) {
      if (d != dim)
        rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d), RulePlacement::R()});
    }
    rules.push_back({RulePlacement::ShardOn(dim), RulePlacement::R(), RulePlacement::ShardOn(0)});
    for (ReduceOp op : kAllReduceOps)
      rules.push_back({RulePlacement::P(op), RulePlacement::P(op), RulePlacement::R()});
    return rules;
  });

  // index_fill.int_Scalar(self, dim, index, value): rules [output, self, index]; idempotent
  // Partials pass through.
  const SingleDimStrategyFn index_fill_scalar = [](const OpCallInfo& info) {
    const int64_t ndim = InputMeta(info, 0).ndim();
    const int64_t dim = NormDim(info.Int(1), ndim);
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d < ndim; ++d) {
      if (d != dim)
        rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d), RulePlacement::R()});
    }
    for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      rules.push_back({RulePlacement::P(op), RulePlacement::P(op), RulePlacement::R()});
    }
    return rules;
  };
  RegisterSingleDimStrategy({"aten::index_fill.int_Scalar", "aten::index_fill_.int_Scalar"},
                            index_fill_scalar);

  // index_fill.int_Tensor(self, dim, index, value): rules [output, self, index, value].
  const SingleDimStrategyFn index_fill_tensor = [](const OpCallInfo& info) {
    const int64_t ndim = InputMeta(info, 0).ndim();
    const int64_t dim = NormDim(info.Int(1), ndim);
    std::vector<SingleDimRule> rules;
    for (int64_t d = 0; d < ndim; ++d) {
      if (d != dim) {
        rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d), RulePlacement::R(),
                         RulePlacement::R()});
      }
    }
    for (ReduceOp op : kAllReduceOps) {
      rules.push_back(
          {RulePlacement::P(op), RulePlacement::P(op), RulePlacement::R(), RulePlacement::P(op)});
    }
    return rules;
  };
  RegisterSingleDimStrategy({"aten::index_fill.int_Tensor", "aten::index_fill_.int_Tensor"},
                            index_fill_tensor);

  // index_reduce(self, dim, index, source, reduce, include_self=True): rules [output, self, index,
  // source].
  RegisterSingleDimStrategy(
      {"aten::index_reduce", "aten::index_reduce_"}, [](const OpCallInfo& info) {
        const int64_t ndim = InputMeta(info, 0).ndim();
        const int64_t dim = NormDim(info.Int(1), ndim);
        std::vector<SingleDimRule> rules;
        for (int64_t d = 0; d < ndim; ++d) {
          if (d != dim) {
            rules.push_back({RulePlacement::ShardOn(d), RulePlacement::ShardOn(d),
                             RulePlacement::R(), RulePlacement::ShardOn(d)});
          }
        }
        return rules;
      });

  // split.Tensor(self, split_size, dim=0), split_with_sizes(self, split_sizes, dim=0) and its
  // _copy: the split dim is unsharded; every output takes the input's placements.
  RegisterOpStrategy(
      {"aten::split.Tensor", "aten::split_with_sizes", "aten::split_with_sizes_copy"},
      [](const OpCallInfo& info, const std::vector<Placements>& current) {
        const TensorMeta& self = InputMeta(info, 0);
        const int64_t dim = NormDim(info.Int(2), self.ndim());
        size_t num_outputs = 0;
        if (info.name == "aten::split.Tensor") {
          const int64_t split_size = info.Int(1);
          if (split_size <= 0) {
            Refuse(info.name, StrCat("Split size must be positive, got ", split_size));
          }
          const int64_t n = self.shape.at(CheckedDim(info.name, dim, self.ndim()));
          num_outputs = static_cast<size_t>(n / split_size + (n % split_size != 0 ? 1 : 0));
        } else {
          num_outputs = info.IntList(1).size();
        }
        // The op's own output count where known (splitting an empty dim gives one empty piece).
        if (!info.outputs.empty()) num_outputs = info.outputs.size();
        const Placements in =
            IsDimSharded(current.at(0), dim) ? UnshardDim(current[0], dim) : current[0];
        return std::vector<Candidate>{
            Make(std::vector<std::optional<Placements>>(num_outputs, in), {in})};
      });

  // unbind.int(self, dim=0): refuses a sharded dim; every output drops it.
  RegisterOpStrategy({"aten::unbind.int"}, [](const OpCallInfo& info,
                                              const std::vector<Placements>& current) {
    const TensorMeta& self = InputMeta(info, 0);
    const int64_t dim = CheckedDim(info.name, info.Int(1), self.ndim());
    const Placements& in = current.at(0);
    if (IsDimSharded(in, dim)) {
      Refuse(
          info.name,
          StrCat(
              "Attempted to unbind along the sharded dimension ", dim,
              ". It cannot be performed without redistribution, which is disallowed by the current "
              "operator."));
    }
    const Placements out = ShiftAfterRemove(in, dim);
    return std::vector<Candidate>{Make(
        std::vector<std::optional<Placements>>(static_cast<size_t>(self.shape[dim]), out), {in})};
  });

  // roll(self, shifts, dims=[]): rules [output, self]; rolled dims (all when dims is empty) stay
  // unsharded.
  RegisterSingleDimStrategy({"aten::roll"}, [](const OpCallInfo& info) {
    const int64_t ndim = InputMeta(info, 0).ndim();
    std::vector<int64_t> dims = info.IntList(2);
    if (dims.empty()) {
      for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
    }
    return ShardInactiveDimsAndPartials(ndim, NormalizedDims(dims, ndim));
  });

  // flip(self, dims) and the fft primitives (self, dim, ...): rules [output, self].
  RegisterSingleDimStrategy({"aten::flip", "aten::_fft_c2c", "aten::_fft_r2c", "aten::_fft_c2r"},
                            [](const OpCallInfo& info) {
                              const int64_t ndim = InputMeta(info, 0).ndim();
                              return ShardInactiveDimsAndPartials(
                                  ndim, NormalizedDims(info.IntList(1), ndim));
                            });
}

}  // namespace ops
}  // namespace dtsim
