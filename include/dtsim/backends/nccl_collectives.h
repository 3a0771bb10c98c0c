// NcclCollectives: the real backend for GPU ranks — one process per rank under mpirun, each on one
// GPU; NCCL moves the data between GPUs, MPI bootstraps the NCCL communicators (the unique id is
// broadcast over MPI) and carries the agreement check. Library dtsim_backend_nccl, built where the
// CUDA toolkit and NCCL (the nvidia-nccl-cu13 wheel) are found (DTSIM_WITH_NCCL).
//
// A rank's data is handed to NCCL where it lies when it is a CUDA tensor on the rank's GPU (a
// LibTorch built with CUDA, `--device cuda`: device-resident); a CPU tensor (the project venv's
// CPU LibTorch) is staged to a device buffer (cudaMemcpy) on the rank's stream and the result is
// copied back. Either way the same DTensor code path runs (docs/real-backends.md).
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
