// The model layer's benchmarks (issue 16; scripts/bench.sh runs them with --benchmark_min_time=4):
// the Llama model of `dtsim model` forward + backward, fsdp+tp on 8 simulated ranks, against the
// same model run unsharded on one device. Manual times: only the forward + backward pass, not
// building or sharding the model. scripts/bench.sh runs the upstream twin
// (tests/model/llama_twin.py) beside them and prints the ratios. Both sides run with the caching
// CPU allocator, as the dtsim command line does. BM_ModelParallelVsSerialRanks compares dtsim with
// each op's ranks on several threads (the default) and one after the other
// (SetParallelRanks(false)); before timing, the bench checks that both ways give the same run bit
// for bit (loss, every rank's hash at every module boundary, the checks against the unsharded
// model, every rank's peak memory) and fails otherwise.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "dtsim/model/model_run.h"
#include "dtsim/tensor/caching_allocator.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/trace/model_trace.h"

namespace {

using dtsim::model::LlamaArgs;

// DTSIM_MODEL_BENCH_DIM sets another model dim (heads stay 8, FFN 4 x dim) for a size sweep
// (docs/performance.md); scripts/bench.sh uses the default.
LlamaArgs BenchArgs() {
  LlamaArgs a;
  a.dim = 256;
  if (const char* dim = std::getenv("DTSIM_MODEL_BENCH_DIM")) a.dim = std::stoll(dim);
  a.heads = 8;
  a.layers = 2;
  a.vocab = 1000;
  a.seq = 64;
  a.batch = 4;
  return a;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

dtsim::model::ModelRunOptions SimulatedOptions() {
  dtsim::model::ModelRunOptions o;
  o.args = BenchArgs();
  o.mesh = dtsim::DeviceMesh::Create({2, 4}, {"dp", "tp"});
  o.plan = "fsdp+tp";
  o.backward = true;
  o.check = false;
  return o;
}

void BM_ModelSimulated(benchmark::State& state) {
  const dtsim::model::ModelRunOptions o = SimulatedOptions();
  for (auto _ : state) {
    dtsim::model::ModelReport r = dtsim::model::RunModel(o);
    state.SetIterationTime(r.seconds);
  }
}
BENCHMARK(BM_ModelSimulated)->UseManualTime()->Unit(benchmark::kMillisecond);

// The two side by side on a shared machine: each iteration runs the step with the ranks in parallel
// and then one after the other; the counters are the median of each (ms) and their ratio.
void BM_ModelParallelVsSerialRanks(benchmark::State& state) {
  const dtsim::model::ModelRunOptions o = SimulatedOptions();
  const bool was = dtsim::ParallelRanks();
  std::vector<double> parallel, serial;
  for (auto _ : state) {
    dtsim::SetParallelRanks(true);
    parallel.push_back(dtsim::model::RunModel(o).seconds * 1e3);
    dtsim::SetParallelRanks(false);
    serial.push_back(dtsim::model::RunModel(o).seconds * 1e3);
  }
  dtsim::SetParallelRanks(was);
  state.counters["parallel_ms"] = Median(parallel);
  state.counters["serial_ms"] = Median(serial);
  state.counters["serial_over_parallel"] = Median(serial) / Median(parallel);
}
BENCHMARK(BM_ModelParallelVsSerialRanks)->Unit(benchmark::kMillisecond);

// One unsharded forward + backward on plain tensors (seconds): the model built from the same
// weights each time, as RunModel builds its sharded model; only the pass is timed.
class UnshardedStep {
 public:
  UnshardedStep()
      : args_(BenchArgs()),
        weights_(dtsim::model::LlamaWeights(args_, at::kFloat, false)),
        tokens_(dtsim::model::LlamaTokens(args_, false)),
        labels_(dtsim::model::LlamaLabels(args_, false)) {}
  double operator()() const {
    auto model = dtsim::model::BuildLlama(args_, weights_);
    const auto start = std::chrono::steady_clock::now();
    at::Tensor loss = dtsim::model::CrossEntropy((*model)(tokens_), labels_);
    loss.backward();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  LlamaArgs args_;
  std::map<std::string, at::Tensor> weights_;
  at::Tensor tokens_, labels_;
};

void BM_ModelUnsharded(benchmark::State& state) {
  const UnshardedStep step;
  for (auto _ : state) state.SetIterationTime(step());
}
BENCHMARK(BM_ModelUnsharded)->UseManualTime()->Unit(benchmark::kMillisecond);

// model_vs_unsharded side by side (scripts/bench.sh): each iteration runs one simulated step of the
// 8 ranks and one unsharded step, alternately, so the load of a shared machine falls on both alike;
// the counters are the median of each (ms) and unsharded / simulated.
void BM_ModelSimulatedVsUnsharded(benchmark::State& state) {
  const dtsim::model::ModelRunOptions o = SimulatedOptions();
  const UnshardedStep unsharded;
  std::vector<double> sim, flat;
  for (auto _ : state) {
    sim.push_back(dtsim::model::RunModel(o).seconds * 1e3);
    flat.push_back(unsharded() * 1e3);
  }
  state.counters["simulated_ms"] = Median(sim);
  state.counters["unsharded_ms"] = Median(flat);
  state.counters["unsharded_over_simulated"] = Median(flat) / Median(sim);
}
BENCHMARK(BM_ModelSimulatedVsUnsharded)->Unit(benchmark::kMillisecond);

// The bench's run with each op's ranks in parallel and one after the other: the same loss, hashes,
// checks and peaks, bit for bit? Prints what differs; false if anything does.
bool ParallelRanksMatchSerial() {
  dtsim::model::ModelRunOptions o = SimulatedOptions();
  o.check = true;
  o.trace = true;
  const bool was = dtsim::ParallelRanks();
  dtsim::SetParallelRanks(false);
  const dtsim::model::ModelReport serial = dtsim::model::RunModel(o);
  dtsim::SetParallelRanks(true);
  const dtsim::model::ModelReport parallel = dtsim::model::RunModel(o);
  dtsim::SetParallelRanks(was);
  int wrong = 0;
  auto differs = [&](const char* what) {
    std::fprintf(stderr, "model bench: parallel ranks differ from serial ranks in %s\n", what);
    ++wrong;
  };
  if (serial.loss != parallel.loss) differs("the loss");
  if (serial.peak_bytes != parallel.peak_bytes) differs("the peak bytes");
  if (serial.checks.size() != parallel.checks.size()) differs("the number of checks");
  for (size_t i = 0; i < serial.checks.size() && i < parallel.checks.size(); ++i) {
    if (serial.checks[i].max_abs_diff != parallel.checks[i].max_abs_diff)
      differs(("check " + serial.checks[i].name).c_str());
  }
  for (size_t i = 0; i < serial.modules.size() && i < parallel.modules.size(); ++i) {
    if (serial.modules[i].forward_peak_bytes != parallel.modules[i].forward_peak_bytes)
      differs(("the forward peak of " + serial.modules[i].fqn).c_str());
  }
  const auto& se = serial.trace->events;
  const auto& pe = parallel.trace->events;
  size_t hashes = 0;
  if (se.size() != pe.size()) differs("the number of trace events");
  for (size_t i = 0; i < se.size() && i < pe.size(); ++i) {
    if (se[i].tensor.has_value() != pe[i].tensor.has_value() ||
        (se[i].tensor && se[i].tensor->hashes != pe[i].tensor->hashes)) {
      differs(("the shard hashes of trace event " + std::to_string(i) + " (" + se[i].module + ")")
                  .c_str());
    }
    if (se[i].tensor) hashes += se[i].tensor->hashes.size();
  }
  std::fprintf(stderr,
               "model bench: parallel ranks vs serial ranks: %d wrong (loss, %zu checks, %zu shard "
               "hashes, peak bytes)\n",
               wrong, serial.checks.size(), hashes);
  return wrong == 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As the dtsim command line runs, both sides: the caching CPU allocator (caching_allocator.h).
  dtsim::EnableCachingCpuAllocator();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!ParallelRanksMatchSerial()) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
