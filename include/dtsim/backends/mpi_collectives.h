// MpiCollectives: the real backend for CPU ranks — one process per rank under `mpirun` (OpenMPI),
// this process's plain tensor as its local data. Library dtsim_backend_mpi, built when CMake finds
// MPI (DTSIM_WITH_MPI).
//
// Example (every rank runs the same program; `mpirun -np 8 ./prog`):
//   std::shared_ptr<Collectives> comm = MakeMpiCollectives();     // rank and world size from
//   MPI_COMM_WORLD DeviceMesh mesh = DeviceMesh::Create({2, 4}, {"dp", "tp"}); DTensor w =
//   DistributeTensor(weight, mesh, ParsePlacements("S(0),S(1)"), 0, comm);
//
// How the collectives map onto MPI, and what makes results bitwise equal to the simulation, is in
// docs/real-backends.md: data moves as bytes (MPI_Allgather, MPI_Alltoall(v), MPI_Bcast,
// MPI_Scatter, MPI_Gather, point-to-point); reductions use MPI's own op where its result cannot
// depend on the reduction order (min, max and the bitwise ops; integer sum and product;
// float32/float64 sum and avg, exact for the integer-valued inputs dtsim's tests use), and
// otherwise gather the group's inputs and reduce them in group-rank order with the simulation's own
// ReduceInOrder (float product, float16, bfloat16, bool, avg on half types).
#pragma once

#include <memory>

#include "dtsim/backends/real_backend.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {

// The MPI backend of this process (MPI_Init on first use; MPI_Finalize at exit). Sets LibTorch's
// intra-op threads so the ranks on one host share its cores.
std::shared_ptr<Collectives> MakeMpiCollectives(const RealBackendOptions& options = {});

}  // namespace dtsim
