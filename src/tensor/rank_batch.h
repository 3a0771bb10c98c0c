// Batched ranks (docs/local-tensor.md, "Batched ranks"): the LocalTensor kernel's path that runs an
// op ONCE for all ranks instead of once per rank, where that gives every rank exactly the result
// its own call would have given. Only src/tensor/ includes this header.
//
// Two forms, tried in this order by RunBatched:
// - Computed once: every LocalTensor argument holds one replica on all ranks (the ranks' shards
//   read the same bytes, as copy-on-write replicas of one buffer do). The op runs on the first
//   rank's shards and every other rank gets a copy-on-write replica of the result, in its own
//   RankScope, so a MemoryMeter charges each rank its full copy as the per-rank calls would.
// - Stacked: every LocalTensor argument's shards lie in one buffer at a constant distance (the
//   shards of an earlier batched result, rows or columns of one tensor, replicas). The op runs as
//   one ATen call over a view with a leading rank dim, and the result keeps that stacked storage
//   (LocalTensorImpl's stacked constructor), so a chain of batched ops never unstacks.
//
// - Views: a view op of shards that share one storage runs on rank 0's shard, and the result is
//   laid over every rank at the same distance.
//
// Which ops may run batched is a table (BatchRuleOf): elementwise ops whose vector and scalar
// kernels round alike (kElementwise: IEEE arithmetic, comparisons, integer and bool ops);
// elementwise ops whose vectorized and scalar paths may differ in the last bit
// (kElementwiseAligned: transcendental functions), batched only where every rank's elements fall on
// the same vector lanes and one thread runs the call both ways; reductions over shard dims
// (kReduction), where one thread runs the call both ways; and every aten:: view of its first
// argument (kView) but as_strided. Everything else runs per rank, and LastRankExecution says why.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace dtsim {

class SimWorld;

namespace internal {

// How the kernel unwraps an argument per rank (local_kernel.cc classifies them).
enum class ArgKind : uint8_t { kPass, kLocal, kList, kSymInt, kSymIntList };

enum class BatchRule : uint8_t {
  kNone,                // per rank
  kElementwise,         // one elementwise call over stacked ranks gives each rank's bits
  kElementwiseAligned,  // only with lane-aligned shards and one thread both ways
  kView,                // a view of the first argument: laid over every rank from rank 0's
  kReduction            // over some shard dims, where one thread runs the call both ways
};

// The rule of `schema` in the table (kNone for an op not listed).
BatchRule BatchRuleOf(const c10::FunctionSchema& schema);

// What the batched path needs to know of an operator schema (the kernel computes it once per
// schema, with the rest of what it keeps of the schema).
struct BatchInfo {
  BatchRule rule = BatchRule::kNone;  // BatchRuleOf, or kNone where the schema rules it out
  int alpha_arg = -1;                 // the index of an "alpha" argument, or -1
  int dim_arg = -1;                   // the index of a "dim" argument, or -1
};
BatchInfo BatchInfoOf(const c10::FunctionSchema& schema);

// One kernel call, as local_kernel.cc sees it: the op's arguments at stack[base, base + n_args).
struct BatchCall {
  const c10::OperatorHandle& op;
  torch::jit::Stack* stack;
  size_t base;
  size_t n_args;
  const ArgKind* kinds;
  const std::shared_ptr<const std::vector<int64_t>>& ranks;  // a RankList: the results share it
  const std::shared_ptr<SimWorld>& world;
  const BatchInfo& info;  // BatchInfoOf(op.schema())
};

// Runs the call batched where that is exact, replacing its arguments on the stack by its results,
// and returns true; returns false, with the stack untouched, where the op must run per rank.
// Records the decision for LastRankExecution either way.
bool RunBatched(const BatchCall& call);

}  // namespace internal
}  // namespace dtsim
