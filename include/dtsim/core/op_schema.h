// What ATen's operator schemas say about the ops an op trace names (op_trace.h): which tensor
// arguments an op has, so a trace that redistributes an argument the op lacks is refused as
// invalid rather than compared. The trace layer has no LibTorch; this check is its OpArgumentCheck.
#pragma once

#include <cstdint>
#include <string>

namespace dtsim {

// What is wrong with a redistribution of tensor argument `arg` (counted from 0 over the op's
// tensors, a list's one by one, as the op kernel counts them for OpObserver::OnRedistributeBegin)
// of `op`, as an op trace names them, or "" when it can be one: an ATen or prims op ("aten::mm",
// "aten::add.Tensor") must be one of this LibTorch's with a tensor argument `arg`; any other name
// is a conversion outside an op
// ("fully_shard gradient of w", "loss_parallel target"), whose only argument is 0.
std::string TensorArgumentProblem(const std::string& op, int64_t arg);

}  // namespace dtsim
