// NcclCollectives: the real backend for GPU ranks — one process per rank under mpirun, each on one
// GPU; NCCL moves the data between GPUs, MPI bootstraps the NCCL communicators (the unique id is
// broadcast over MPI) and carries the agreement check. Library dtsim_backend_nccl, built where the
// CUDA toolkit and NCCL (the nvidia-nccl-cu13 wheel) are found (DTSIM_WITH_NCCL).
//
// dtsim links the CPU build of LibTorch, so a rank's local data stays a CPU tensor: each collective
// stages it to a device buffer (cudaMemcpy), runs the NCCL call on the rank's stream, and copies
// the result back. That keeps one build for every machine and the same DTensor code path; the
// copies cost PCIe time that a CUDA LibTorch build would not pay (docs/real-backends.md).
// Reductions follow the MPI backend's rule: NCCL's own op where its result cannot depend on the
// order (min, max; integer sum and product; float32/float64 sum and avg on exact inputs), else the
// group's inputs are gathered and reduced in group-rank order with the simulation's ReduceInOrder.
#pragma once

#include <memory>

#include "dtsim/backends/real_backend.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {

// The NCCL backend of this process: MPI_Init on first use, device local_rank % device count.
// InputError("backend") when no CUDA device is visible or NCCL cannot start, naming the CUDA/NCCL
// error.
std::shared_ptr<Collectives> MakeNcclCollectives(const RealBackendOptions& options = {});

}  // namespace dtsim
