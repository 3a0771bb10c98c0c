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

#include <vector>

#include "dtsim/ops/custom_handlers.h"

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

// True while a LossParallel scope lives on this thread: the DTensor kernel then runs the
// kLossParallel custom handlers (custom_handlers.h).
bool LossParallelEnabled();

// Loss parallelism's custom handlers (set kLossParallel): _log_softmax, _log_softmax_backward_data,
// nll_loss_forward and nll_loss_backward.
std::vector<CustomHandlerEntry> LossParallelHandlers();

}  // namespace ops
}  // namespace dtsim
