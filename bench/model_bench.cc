// The model layer's benchmarks (issue 16): the Llama model of `dtsim model` forward + backward,
// fsdp+tp on 8 simulated ranks, against the same model run unsharded on one device. Manual times:
// only the forward + backward pass, not building or sharding the model. scripts/bench.sh runs the
// upstream twin (tests/model/llama_twin.py) beside them and prints the ratios. Both sides run with
// the caching CPU allocator, as the dtsim command line does.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <chrono>

#include "dtsim/model/model_run.h"
#include "dtsim/tensor/caching_allocator.h"

namespace {

using dtsim::model::LlamaArgs;

LlamaArgs BenchArgs() {
  LlamaArgs a;
  a.dim = 256;
  a.heads = 8;
  a.layers = 2;
  a.vocab = 1000;
  a.seq = 64;
  a.batch = 4;
  return a;
}

void BM_ModelSimulated(benchmark::State& state) {
  dtsim::model::ModelRunOptions o;
  o.args = BenchArgs();
  o.mesh = dtsim::DeviceMesh::Create({2, 4}, {"dp", "tp"});
  o.plan = "fsdp+tp";
  o.backward = true;
  o.check = false;
  for (auto _ : state) {
    dtsim::model::ModelReport r = dtsim::model::RunModel(o);
    state.SetIterationTime(r.seconds);
  }
}
BENCHMARK(BM_ModelSimulated)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_ModelUnsharded(benchmark::State& state) {
  const LlamaArgs a = BenchArgs();
  const auto weights = dtsim::model::LlamaWeights(a, at::kFloat, false);
  const at::Tensor tokens = dtsim::model::LlamaTokens(a, false);
  const at::Tensor labels = dtsim::model::LlamaLabels(a, false);
  for (auto _ : state) {
    auto model = dtsim::model::BuildLlama(a, weights);
    const auto start = std::chrono::steady_clock::now();
    at::Tensor loss = dtsim::model::CrossEntropy((*model)(tokens), labels);
    loss.backward();
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}
BENCHMARK(BM_ModelUnsharded)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  // As the dtsim command line runs, both sides: the caching CPU allocator (caching_allocator.h).
  dtsim::EnableCachingCpuAllocator();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
