// dtsim_scale_bench: how dtsim's cost grows with the world size, and the memory of replicas (issue
// 11).
//
//   BM_MetaRedistribute/<ranks>    metadata-only: a cube mesh (4x4x4 = 64 ... 16x16x16 = 4,096
//   ranks), a 4096x4096
//                                  float32 tensor, [S(0), S(1), R] -> [R, S(0), S(1)]:
//                                  MakeMetaDTensor + Redistribute (the plan and its simulation on
//                                  meta tensors). bench meta_4096 / meta_scaling.
//   BM_DataRedistribute/<ranks>    data: mesh (N), shape [4], S(0) -> R (an all_gather over every
//   rank), the case
//                                  that took an hour at 65,536 ranks when each rank's replica was
//                                  materialised.
//   BM_LayoutJson/<ranks>          the JSON of `dtsim layout --placements R --ranks all`, streamed
//   to nowhere. BM_RedistributeLargeMemory     8 ranks x 16 MiB, S(0) -> R on data: peak RSS growth
//   (from before the source
//                                  shards exist to the end of the redistribution), reported as
//                                  counters; run alone in a process of its own (scripts/bench.sh)
//                                  with DTSIM_BENCH_CACHE=0 (c10's default allocator). The others
//                                  run as the command line does (caching allocator on).
// scripts/bench.sh prints the ratios; docs/performance.md has the numbers.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <ostream>
#include <streambuf>
#include <string>

#include "dtsim/core/arange_case.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/meta.h"
#include "dtsim/layout/layout_report.h"
#include "dtsim/tensor/caching_allocator.h"
#include "dtsim/tensor/local_tensor.h"

namespace {

using dtsim::DeviceMesh;
using dtsim::DTensor;
using dtsim::DTensorSpec;
using dtsim::ParsePlacements;

int64_t ReadStatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string k;
  int64_t v = 0;
  std::string unit;
  while (in >> k) {
    if (k == std::string(key) + ":") {
      in >> v >> unit;
      return v;
    }
    std::getline(in, unit);
  }
  return -1;
}

void BM_MetaRedistribute(benchmark::State& state) {
  const int64_t side = state.range(0);
  const DeviceMesh mesh = DeviceMesh::Create({side, side, side});
  const DTensorSpec spec = DTensorSpec::Create(mesh, ParsePlacements("S(0),S(1),R"), {4096, 4096});
  const dtsim::Placements to = ParsePlacements("R,S(0),S(1)");
  for (auto _ : state) {
    DTensor source = dtsim::MakeMetaDTensor(spec);
    DTensor out = source.Redistribute(mesh, to);
    benchmark::DoNotOptimize(out.to_local());
  }
  state.counters["ranks"] = static_cast<double>(mesh.size());
}
BENCHMARK(BM_MetaRedistribute)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DataRedistribute(benchmark::State& state) {
  const DeviceMesh mesh = DeviceMesh::Create({state.range(0)});
  const DTensorSpec spec = DTensorSpec::Create(mesh, ParsePlacements("S(0)"), {4});
  const DTensor source = dtsim::MakeArangeSource(spec);
  const dtsim::Placements to = ParsePlacements("R");
  for (auto _ : state) {
    DTensor out = source.Redistribute(mesh, to);
    benchmark::DoNotOptimize(out.to_local());
  }
}
BENCHMARK(BM_DataRedistribute)
    ->Arg(1024)
    ->Arg(8192)
    ->Arg(65536)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

void BM_LayoutJson(benchmark::State& state) {
  const DTensorSpec spec =
      DTensorSpec::Create(DeviceMesh::Create({state.range(0)}), ParsePlacements("R"), {4});
  NullBuffer null;
  std::ostream out(&null);
  const dtsim::RankSelection all = dtsim::RankSelection::Parse("all");
  for (auto _ : state) dtsim::WriteLayoutJson(out, spec, all);
}
BENCHMARK(BM_LayoutJson)->Arg(16384)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RedistributeLargeMemory(benchmark::State& state) {
  // 8 ranks x 16 MiB of float32: rows 16384 x 2048 sharded over 8 ranks.
  constexpr int64_t kRanks = 8, kRows = 16384, kCols = 2048;
  const DeviceMesh mesh = DeviceMesh::Create({kRanks});
  std::vector<int64_t> ranks(kRanks);
  for (int64_t r = 0; r < kRanks; ++r) ranks[r] = r;
  const double shard_bytes = 4.0 * kRows / kRanks * kCols;
  for (auto _ : state) {
    const int64_t base_kb = ReadStatusKb("VmRSS");
    { std::ofstream("/proc/self/clear_refs") << "5"; }  // VmHWM := the current RSS
    int64_t peak_kb = 0;
    bool ok = false;
    {
      // Each rank's shard of arange, built directly (no global tensor).
      at::Tensor local = dtsim::MakeLocalTensor(ranks, [&](int64_t r) {
        return at::arange(r * kRows / kRanks * kCols, (r + 1) * kRows / kRanks * kCols, at::kFloat)
            .reshape({kRows / kRanks, kCols});
      });
      DTensor source = DTensor::FromLocal(local, mesh, ParsePlacements("S(0)"));
      DTensor out = source.Redistribute(mesh, ParsePlacements("R"));
      peak_kb = ReadStatusKb("VmHWM");
      // Correctness unchanged: rank 5's replica is the whole arange tensor.
      const at::Tensor five = dtsim::LocalShard(out.to_local(), 5);
      ok = at::equal(five, at::arange(kRows * kCols, at::kFloat).reshape({kRows, kCols}));
    }
    const double growth = (peak_kb - base_kb) * 1024.0;
    state.counters["peak_growth_bytes"] = growth;
    state.counters["source_plus_global_bytes"] = shard_bytes * kRanks * 2;
    state.counters["ok"] = ok ? 1 : 0;
  }
}
BENCHMARK(BM_RedistributeLargeMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // As the dtsim command line runs (caching allocator and heap tuning), unless DTSIM_BENCH_CACHE=0:
  // the peak-memory case runs that way, with c10's default allocator, in a process of its own.
  const char* cache = std::getenv("DTSIM_BENCH_CACHE");
  if (cache == nullptr || std::string(cache) != "0") dtsim::EnableCachingCpuAllocator();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
