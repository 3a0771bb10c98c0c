// Upstream's loss_parallel() (torch/distributed/tensor/parallel/loss.py): while a LossParallel
// scope lives on this thread, cross entropy runs on logits sharded on the class dim without
// gathering them — _log_softmax all-reduces the max and the sum of exponentials over the mesh dim
// that shards the class dim (two all_reduces), nll_loss_forward picks each target's log-probability
// on the rank whose vocabulary shard holds it and all-reduces them (one all_reduce), and the
// backward (nll_loss_backward, _log_softmax_backward_data) is computed locally, with no
// collective. The results and gradients equal the unsharded cross entropy's. Class weights are
// refused (InputError "loss-parallel"); the class dim must be sharded on exactly one mesh dim.
//
// Example:
//   at::Tensor logits = ...;  // a DTensor [N, vocab] sharded S(1) over tp
//   dtsim::ops::LossParallel scope;
//   at::Tensor loss = at::cross_entropy_loss(logits, labels);  // a replicated scalar DTensor
//   loss.backward();                                            // inside the scope, as upstream's
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace dtsim {
namespace ops {

class LossParallel {
 public:
  LossParallel();
  ~LossParallel();
  LossParallel(const LossParallel&) = delete;
  LossParallel& operator=(const LossParallel&) = delete;

 private:
  bool saved_;
};

bool LossParallelEnabled();

// The DTensor kernel's hook: runs `op` as loss parallelism does when the scope is on and `op` is
// one of its ops (pushing the results on `stack`, returning true); false otherwise.
bool RunLossParallelOp(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace ops
}  // namespace dtsim
