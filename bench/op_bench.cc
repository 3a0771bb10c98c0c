// The op layer's cost per family (issue 15): one DTensor op on 8 simulated ranks with small shards,
// paired with the same op run on the local data alone (the LocalTensor op every rank's shard needs
// anyway), so the ratio local / dtsim says what sharding propagation, the wrappers and the cache
// add. No redistribution happens in these cases (the inputs already have the placements the op
// wants), as in upstream's steady state. scripts/bench.sh prints `bench
// op_<family>_dispatch_overhead ratio <local / dtsim>` and, with bench/upstream_op_bench.py, `bench
// op_<family>_vs_upstream ratio <upstream / dtsim>`.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <chrono>
#include <functional>

#include "dtsim/core/dtensor.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "paired.h"

namespace {

using dtsim::DeviceMesh;
using dtsim::ParsePlacements;
using dtsim::bench::Paired;

constexpr int kRounds = 200, kBatch = 20;  // a_us: the local op alone, b_us: the DTensor op

const DeviceMesh& Mesh() {
  static DeviceMesh mesh = DeviceMesh::Create({8});
  return mesh;
}

struct Inputs {
  at::Tensor da, db;  // DTensor wrappers
  at::Tensor la, lb;  // their local data (LocalTensors)
};
// 8 ranks, global [128, 16] with `pa` and [16, 16] / [128, 16] with `pb` (shards 16 x 16).
Inputs Make(const char* pa, const std::vector<int64_t>& shape_b, const char* pb) {
  dtsim::DTensor a = dtsim::DistributeTensor(at::randn({128, 16}), Mesh(), ParsePlacements(pa));
  dtsim::DTensor b = dtsim::DistributeTensor(at::randn(shape_b), Mesh(), ParsePlacements(pb));
  return {dtsim::ops::AsTensor(a), dtsim::ops::AsTensor(b), a.to_local(), b.to_local()};
}

void BM_OpMatrix(benchmark::State& state) {  // mm: [S(0)] x [R] -> [S(0)]
  Inputs in = Make("S(0)", {16, 16}, "R");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::mm(in.la, in.lb)); },
      [&] { benchmark::DoNotOptimize(at::mm(in.da, in.db)); }, kRounds, kBatch);
}
BENCHMARK(BM_OpMatrix)->Iterations(1);

void BM_OpPointwise(benchmark::State& state) {  // add: [S(0)] + [S(0)] -> [S(0)]
  Inputs in = Make("S(0)", {128, 16}, "S(0)");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::add(in.la, in.lb)); },
      [&] { benchmark::DoNotOptimize(at::add(in.da, in.db)); }, kRounds, kBatch);
}
BENCHMARK(BM_OpPointwise)->Iterations(1);

void BM_OpMath(benchmark::State& state) {  // sum over dim 1 of [S(0)] -> [S(0)]
  Inputs in = Make("S(0)", {128, 16}, "S(0)");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::sum(in.la, {1})); },
      [&] { benchmark::DoNotOptimize(at::sum(in.da, {1})); }, kRounds, kBatch);
}
BENCHMARK(BM_OpMath)->Iterations(1);

void BM_OpView(benchmark::State& state) {  // transpose(0, 1) of [S(0)] -> [S(1)]
  Inputs in = Make("S(0)", {128, 16}, "S(0)");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::transpose(in.la, 0, 1)); },
      [&] { benchmark::DoNotOptimize(at::transpose(in.da, 0, 1)); }, kRounds, kBatch);
}
BENCHMARK(BM_OpView)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
