// Custom op handlers: kernels that run one op on DTensors in place of the DTensor kernel's stages
// (dtensor_tensor.h), as upstream's OpDispatcher keeps _custom_op_handlers beside the sharding
// strategies. The table lives beside the strategy registry (strategy.h): an op has a strategy, a
// handler, or both (argmax has both: its handler asks the strategy for the output placements).
//
// Handlers come in sets. kAlways applies to every call; kLossParallel only while a LossParallel
// scope lives on the thread (loss_parallel.h), as upstream's loss_parallel() context installs its
// handlers for the ops of cross entropy. Within the enabled sets, kLossParallel's handler wins.
//
// Example: the entry {HandlerSet::kAlways, "aten::argmax", &ArgMinMaxHandler} makes every argmax
// on DTensors run ArgMinMaxHandler(op, stack), which leaves the results on the stack.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

namespace dtsim {
namespace ops {

// Takes the op's boxed arguments from the top of `stack` and pushes its results, as a boxed
// kernel does.
using CustomHandler = void (*)(const c10::OperatorHandle& op, torch::jit::Stack* stack);

enum class HandlerSet { kAlways, kLossParallel };

struct CustomHandlerEntry {
  HandlerSet set;
  const char* op;  // the operator with its overload, as "aten::add.Tensor" ("aten::argmax")
  CustomHandler handler;
};

// Every handler: the op layer's (argmax, argmin), then loss parallelism's (LossParallelHandlers).
const std::vector<CustomHandlerEntry>& CustomHandlers();

// The handler of `op` (named as in CustomHandlerEntry::op) in `set`, or nullptr.
CustomHandler FindCustomHandler(HandlerSet set, const std::string& op);

}  // namespace ops
}  // namespace dtsim
