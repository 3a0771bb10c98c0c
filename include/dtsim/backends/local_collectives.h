// LocalCollectives: the simulated backend. One process holds every rank; each collective is
// computed exactly over the shards of a LocalTensor, group by group, reductions in group-rank
// order. It is the reference the real backends (MPI, NCCL) are tested against. Library
// dtsim_backend_local.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtsim/tensor/collectives.h"

namespace dtsim {

// A simulated world. `world_size` 0 (the default) means: whatever ranks the inputs hold.
std::unique_ptr<Collectives> MakeLocalCollectives(int64_t world_size = 0);

// Reduces `xs` in order, xs[0] op xs[1] op ..., into a fresh contiguous tensor (avg: the sum
// divided by the count). The one reduction rule of dtsim: the simulated backend uses it for every
// reduction, the real backends wherever their library lacks the op for the dtype, so results are
// bitwise equal.
at::Tensor ReduceInOrder(const std::vector<at::Tensor>& xs, ReduceOp op);

// avg's last step, in place: `sum` divided by the count `n`, the quotient correctly rounded on
// every device (a GPU turns a division by a host scalar into a multiplication by its reciprocal,
// which can differ in the last bit; there the divisor is a tensor on the device).
void DivideByCount(at::Tensor& sum, int64_t n);

}  // namespace dtsim
