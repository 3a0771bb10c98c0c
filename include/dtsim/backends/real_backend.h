// Options shared by the real backends (MPI, NCCL). No LibTorch.
#pragma once

namespace dtsim {

// Options of a real backend; defaults in comments.
struct RealBackendOptions {
  // Seconds a rank waits at a collective for the other ranks of its group before the whole job is
  // ended with a message naming the collective, the group and the missing ranks (exit code 4 on
  // every rank).
  double timeout_s = 60;
};

}  // namespace dtsim
