// What dtsim's MPI backend costs over the raw MPI call moving the same bytes: run under `mpirun -np
// 8`, it times all_gather and all_reduce of 16 MiB per rank through Collectives (validation, the
// agreement check, byte accounting, the record for an observer, the output tensor from the caching
// allocator, as the dtsim command line runs) and the bare MPI_Allgather / MPI_Allreduce into a
// preallocated buffer, interleaved, best of each. Rank 0 prints one JSON object: {"<case>":
// {"raw_us": ..., "dtsim_us": ...}, ..., "agreement_us_per_call": ...} (the last: the mean time of
// the collective-order check per dtsim call, Collectives::agreement_seconds() / agreement_rounds(),
// on the slowest rank).
#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>

#include "dtsim/backends/mpi_collectives.h"
#include "dtsim/tensor/caching_allocator.h"

namespace {

class NullObserver : public dtsim::CollectiveObserver {
 public:
  void OnCollective(const dtsim::CollectiveEvent&) override {}
};

double Seconds(const std::chrono::steady_clock::time_point& a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 7;
  const int64_t bytes = argc > 2 ? std::atoll(argv[2]) : (int64_t{16} << 20);
  dtsim::EnableCachingCpuAllocator();
  auto comm = dtsim::MakeMpiCollectives();
  NullObserver observer;
  comm->observers().Add(&observer);
  const int64_t n = comm->world_size();
  std::vector<int64_t> world(n);
  std::iota(world.begin(), world.end(), 0);
  const dtsim::GroupSet all = dtsim::GroupSet::Of(world);
  const int64_t count = bytes / 4;
  at::Tensor input = at::arange(count, at::kFloat).remainder(1000) + comm->rank();
  at::Tensor raw_out = at::empty({n * count}, at::kFloat);
  raw_out.fill_(
      0);  // touch the raw side's output once: it is reused, as a caller's buffer would be
  double best_raw_ag = 1e9, best_dtsim_ag = 1e9, best_raw_ar = 1e9, best_dtsim_ar = 1e9;
  auto time = [&](auto&& body) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t = std::chrono::steady_clock::now();
    body();
    return Seconds(t);
  };
  auto raw_ag = [&] {
    MPI_Allgather(input.data_ptr(), static_cast<int>(bytes), MPI_BYTE, raw_out.data_ptr(),
                  static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
  };
  auto dtsim_ag = [&] { at::Tensor out = comm->AllGather(input, all, 0); };
  auto raw_ar = [&] {
    MPI_Allreduce(input.data_ptr(), raw_out.data_ptr(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  };
  auto dtsim_ar = [&] { at::Tensor out = comm->AllReduce(input, all, dtsim::ReduceOp::kSum); };
  for (int i = 0; i < repeats; ++i) {
    // Alternate which side goes first, so neither gains from the order.
    if (i % 2 == 0) {
      best_raw_ag = std::min(best_raw_ag, time(raw_ag));
      best_dtsim_ag = std::min(best_dtsim_ag, time(dtsim_ag));
      best_raw_ar = std::min(best_raw_ar, time(raw_ar));
      best_dtsim_ar = std::min(best_dtsim_ar, time(dtsim_ar));
    } else {
      best_dtsim_ag = std::min(best_dtsim_ag, time(dtsim_ag));
      best_raw_ag = std::min(best_raw_ag, time(raw_ag));
      best_dtsim_ar = std::min(best_dtsim_ar, time(dtsim_ar));
      best_raw_ar = std::min(best_raw_ar, time(raw_ar));
    }
  }
  // The slowest rank decides a collective's time; the agreement's mean per call is the slowest
  // rank's too.
  const double agreement_per_call =
      comm->agreement_rounds() > 0 ? comm->agreement_seconds() / comm->agreement_rounds() : 0;
  double local[5] = {best_raw_ag, best_dtsim_ag, best_raw_ar, best_dtsim_ar, agreement_per_call};
  double slowest[5];
  MPI_Reduce(local, slowest, 5, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (comm->rank() == 0) {
    std::printf(
        "{\"all_gather\": {\"raw_us\": %.1f, \"dtsim_us\": %.1f}, "
        "\"all_reduce\": {\"raw_us\": %.1f, \"dtsim_us\": %.1f}, \"ranks\": %lld, "
        "\"bytes_per_rank\": %lld, \"agreement_us_per_call\": %.1f, "
        "\"agreement_rounds\": %lld}\n",
        slowest[0] * 1e6, slowest[1] * 1e6, slowest[2] * 1e6, slowest[3] * 1e6,
        static_cast<long long>(n), static_cast<long long>(bytes), slowest[4] * 1e6,
        static_cast<long long>(comm->agreement_rounds()));
  }
  return 0;
}
