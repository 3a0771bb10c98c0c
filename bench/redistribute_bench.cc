// dtsim_redistribute_bench: DTensor redistribute on the simulated world for the cases in
// bench/redistribute_cases.json (the same cases bench/upstream_redistribute_bench.py times upstream
// on). One benchmark per case, named BM_Redistribute/<case name>; each iteration plans and runs the
// redistribution.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "dtsim/core/arange_case.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/tensor/caching_allocator.h"

namespace {

void RunCase(benchmark::State& state, const nlohmann::json& c) {
  dtsim::DeviceMesh mesh = dtsim::DeviceMesh::Create(c["mesh"].get<std::vector<int64_t>>());
  dtsim::DTensorSpec spec =
      dtsim::DTensorSpec::Create(mesh, dtsim::ParsePlacements(c["from"].get<std::string>()),
                                 c["shape"].get<std::vector<int64_t>>());
  dtsim::DTensor source = dtsim::MakeArangeSource(spec);
  const dtsim::Placements to = dtsim::ParsePlacements(c["to"].get<std::string>());
  for (auto _ : state) {
    dtsim::DTensor out = source.Redistribute(mesh, to);
    benchmark::DoNotOptimize(out.to_local());
  }
}

}  // namespace

int main(int argc, char** argv) {
  // As the dtsim command line runs: freed large blocks are reused
  // (include/dtsim/tensor/caching_allocator.h); with DTSIM_BENCH_CACHE=0 in the environment, c10's
  // default allocator (the "_nocache" lines of scripts/bench.sh).
  const char* cache = std::getenv("DTSIM_BENCH_CACHE");
  if (cache == nullptr || std::string(cache) != "0") dtsim::EnableCachingCpuAllocator();
  std::ifstream in(DTSIM_BENCH_CASES);
  const nlohmann::json cases = nlohmann::json::parse(in);
  for (const auto& c : cases) {
    auto* b =
        benchmark::RegisterBenchmark(("BM_Redistribute/" + c["name"].get<std::string>()).c_str(),
                                     [c](benchmark::State& state) { RunCase(state, c); });
    b->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
