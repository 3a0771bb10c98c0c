// The collectives conformance suite on the NCCL backend, run under mpirun with one rank per GPU
// (world 1 on a one-GPU machine: every call still goes through NCCL, on a communicator of one).
// Exit code 77 (ctest: skipped) when no GPU is visible.
#include "dtsim/backends/nccl_collectives.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "../collectives_conformance.h"
#include "real_backend_test_main.h"

namespace dtsim {
namespace testing_internal {

std::shared_ptr<Collectives> NcclBackend() { return MakeNcclCollectives(); }
int64_t WorldSize() { return NcclBackend()->world_size(); }

INSTANTIATE_TEST_SUITE_P(Nccl, CollectivesConformance,
                         ::testing::ValuesIn(ConformanceParams("nccl", NcclBackend, WorldSize())),
                         ParamName);

}  // namespace testing_internal
}  // namespace dtsim

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no GPU visible: the NCCL conformance suite is skipped\n");
    return 77;
  }
  return dtsim::testing_internal::RunRealBackendTests(argc, argv,
                                                      [] { return dtsim::MakeNcclCollectives(); });
}
