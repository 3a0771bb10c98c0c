// The main() of a real backend's GoogleTest binary run under mpirun: the backend (and MPI) start
// before the test parameters are made (they ask for the world size); only rank 0 prints
// GoogleTest's output, other ranks print their failures as "[rank N] file:line: message"; every
// rank exits non-zero when any rank failed.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <functional>
#include <memory>

#include "dtsim/tensor/collectives.h"

namespace dtsim::testing_internal {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

inline int RunRealBackendTests(int argc, char** argv,
                               const std::function<std::shared_ptr<Collectives>()>& make) {
  make();  // starts MPI (and the device)
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any && !failed)
    std::fprintf(stderr, "a test failed on another rank (see [rank N] lines)\n");
  return any ? 1 : 0;
}

}  // namespace dtsim::testing_internal
