// The global-tensor judge: cuts a rank's shard out of a global tensor by its layout, and puts a
// whole world's shards back together into the global tensor (reducing Partial mesh dims),
// independently of any collective. dtsim uses it to give every redistribution a verdict, and the
// tests use it where upstream has no answer.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/spec.h"

namespace dtsim {

// The part of `global` that `layout` owns: the product of its intervals, in order (a copy).
// Global arange(16).reshape(4,4), layout with intervals {1:3} x {0:2, 3:4} → rows 1..2, columns 0,
// 1, 3.
at::Tensor ShardOf(const at::Tensor& global, const RankLayout& layout);

// Reduces values indexed by coordinates on Partial mesh dims, one mesh dim at a time, with each
// dim's reduce op: sum, avg (sum / n), min, max, product, band, bor, bxor. `values` maps the
// coordinate tuple (one entry per element of `partial_dims`) to a tensor.
at::Tensor ReducePartials(const std::map<std::vector<int64_t>, at::Tensor>& values,
                          const DTensorSpec& spec, const std::vector<int64_t>& partial_dims);

// Result of AssembleGlobal: the global tensor, or why there is none.
struct Assembled {
  std::optional<at::Tensor> global;
  std::string problem;  // e.g. "ranks 1 and 5 hold the same block but disagree on its values"
};

// Puts every rank's shard of `local` (a LocalTensor) where `spec` says it belongs; replicas must
// agree, every element must be covered, and Partial mesh dims are reduced with their op.
Assembled AssembleGlobal(const DTensorSpec& spec, const at::Tensor& local);

// The verdict on a world's result `local` (a LocalTensor with `spec`) that should hold the global
// tensor `expected`. Without Partial placements every rank's shard is compared with its layout's
// part of `expected` (SameValues within `rtol`), and the problem names exactly the ranks that are
// wrong: on mesh[2, 2, 2] [R, R, R] where ranks 0..3 reduced wrongly, "ranks 0, 1, 2, 3 hold values
// that differ from the expected global tensor (rank 0: 16 of 16 elements differ)" — not the first
// correct replica met after them. With Partial placements the shards are summands: they are put
// together by AssembleGlobal and the sum compared.
struct Judgement {
  bool ok = false;
  std::string problem;               // "" when ok
  std::vector<int64_t> wrong_ranks;  // without Partial placements: the ranks whose shard is wrong
};
Judgement JudgeAgainstGlobal(const DTensorSpec& spec, const at::Tensor& local,
                             const at::Tensor& expected, double rtol = 0);

// True when `a` and `b` have the same shape and dtype and equal values (bitwise for integers; for
// floating types exactly equal, or within `rtol` relative when it is above 0).
bool SameValues(const at::Tensor& a, const at::Tensor& b, double rtol = 0);

}  // namespace dtsim
