// Choosing a backend by name: what the command line's --backend and the examples use, so one
// program runs on the simulated world or on real ranks unchanged. Library dtsim_backends.
//
// Example: auto comm = MakeCollectives({BackendFromEnvironment()});  // "mpi" under mpirun, else
// "local"
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtsim/backends/real_backend.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {

struct BackendOptions {
  std::string name = "local";  // "local" (simulated), "mpi", "nccl"
  RealBackendOptions real;     // for mpi and nccl
};

// The backends this build has: "local", and "mpi" / "nccl" where CMake found them (DTSIM_WITH_MPI,
// DTSIM_WITH_NCCL).
std::vector<std::string> BuiltBackends();

// The backend `options.name`. InputError("backend") naming the value and the built backends for an
// unknown one or one this build lacks; the real backends' own errors (no GPU, ...) as
// InputError("backend") too.
std::shared_ptr<Collectives> MakeCollectives(const BackendOptions& options);

// "mpi" when this process was started by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is
// set) and the MPI backend is built, else "local".
std::string BackendFromEnvironment();

}  // namespace dtsim
