// dtsim_bench: the cost of LocalTensor dispatch and of the simulated all_gather.
//   BM_LocalAdd / BM_DirectAdd       8-rank 16x16 float add: one LocalTensor op vs 8 direct at::add
//   calls BM_LocalChain / BM_DirectChain   10 small ops in a row, same comparison BM_LocalAllGather
//   / BM_Memcpy    8 ranks x 16 MiB shards all_gather vs memcpy of the same destination bytes
//                                    (BM_MemcpyFreshDst: memcpy into freshly allocated
//                                    destinations)
//   BM_AllGatherPeakMemory           peak resident memory of one all_gather / (inputs + outputs)
// scripts/bench.sh runs it and prints the ratios; docs/performance.md has the numbers.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/tensor/local_tensor.h"
#include "paired.h"

namespace {

constexpr int64_t kRanks = 8;

std::vector<int64_t> World() {
  std::vector<int64_t> r(kRanks);
  for (int64_t i = 0; i < kRanks; ++i) r[i] = i;
  return r;
}

std::vector<at::Tensor> Shards(int64_t salt) {
  std::vector<at::Tensor> s;
  for (int64_t r = 0; r < kRanks; ++r)
    s.push_back(at::arange(256, at::kFloat).reshape({16, 16}) + r + salt);
  return s;
}

at::Tensor Chain(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a + b;
  x = x * 2;
  x = at::relu(x);
  x = x - b;
  x = x.abs();
  x = x.neg();
  x = x.sigmoid();
  x = x.transpose(0, 1);
  x = x.mul(a);
  return x.sum(1);
}

void BM_DirectAdd(benchmark::State& state) {
  std::vector<at::Tensor> a = Shards(0), b = Shards(1);
  for (auto _ : state) {
    for (int64_t r = 0; r < kRanks; ++r) benchmark::DoNotOptimize(at::add(a[r], b[r]));
  }
}
BENCHMARK(BM_DirectAdd);

void BM_LocalAdd(benchmark::State& state) {
  at::Tensor a = dtsim::MakeLocalTensor(World(), Shards(0));
  at::Tensor b = dtsim::MakeLocalTensor(World(), Shards(1));
  for (auto _ : state) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_LocalAdd);

void BM_DirectChain(benchmark::State& state) {
  std::vector<at::Tensor> a = Shards(0), b = Shards(1);
  for (auto _ : state) {
    for (int64_t r = 0; r < kRanks; ++r) benchmark::DoNotOptimize(Chain(a[r], b[r]));
  }
}
BENCHMARK(BM_DirectChain);

void BM_LocalChain(benchmark::State& state) {
  at::Tensor a = dtsim::MakeLocalTensor(World(), Shards(0));
  at::Tensor b = dtsim::MakeLocalTensor(World(), Shards(1));
  for (auto _ : state) benchmark::DoNotOptimize(Chain(a, b));
}
BENCHMARK(BM_LocalChain);

// 16 MiB of float per rank by default; state.range(0) = MiB per shard.
int64_t ShardFloats(const benchmark::State& state) { return state.range(0) * (1 << 20) / 4; }

void BM_LocalAllGather(benchmark::State& state) {
  const int64_t n = ShardFloats(state);
  at::Tensor in = dtsim::MakeLocalTensor(World(), [&](int64_t r) {
    return at::full({n / 1024, 1024}, float(r));
  });
  auto coll = dtsim::MakeLocalCollectives();
  dtsim::GroupSet group = dtsim::GroupSet::Of(World());
  for (auto _ : state) {
    at::Tensor out = coll->AllGather(in, group, 0);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * kRanks * kRanks * n * 4);
}
BENCHMARK(BM_LocalAllGather)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

// The floor: memcpy of the same destination bytes (8 destinations of 8 shards) into preallocated
// buffers.
void BM_Memcpy(benchmark::State& state) {
  const int64_t n = ShardFloats(state);
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(n, 1.0f));
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(kRanks * n, 0.0f));
  for (auto _ : state) {
    for (int64_t dst = 0; dst < kRanks; ++dst) {
      for (int64_t src = 0; src < kRanks; ++src)
        std::memcpy(out[dst].data() + src * n, in[src].data(), n * 4);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kRanks * kRanks * n * 4);
}
BENCHMARK(BM_Memcpy)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

// memcpy of the 8 shards into each of 8 freshly malloc'ed destinations (no zeroing), then free
// them: the all_gather floor with first-touch page faults included.
void MemcpyIntoFreshBuffers(const std::vector<std::vector<float>>& in, int64_t n) {
  std::vector<float*> out(kRanks);
  for (int64_t dst = 0; dst < kRanks; ++dst) {
    out[dst] = static_cast<float*>(std::malloc(kRanks * n * 4));
    for (int64_t src = 0; src < kRanks; ++src)
      std::memcpy(out[dst] + src * n, in[src].data(), n * 4);
  }
  benchmark::ClobberMemory();
  for (float* p : out) std::free(p);
}

// The floor when the destination is fresh memory, as an all_gather's output is: allocate the 8
// destinations (no zeroing), memcpy into them, free them. Page faults of first touch are included,
// as in BM_LocalAllGather.
void BM_MemcpyFreshDst(benchmark::State& state) {
  const int64_t n = ShardFloats(state);
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(n, 1.0f));
  for (auto _ : state) MemcpyIntoFreshBuffers(in, n);
  state.SetBytesProcessed(state.iterations() * kRanks * kRanks * n * 4);
}
BENCHMARK(BM_MemcpyFreshDst)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

using dtsim::bench::Paired;

// a = 8 direct at::add calls, b = one LocalTensor add.
void BM_PairedAdd(benchmark::State& state) {
  std::vector<at::Tensor> a = Shards(0), b = Shards(1);
  at::Tensor la = dtsim::MakeLocalTensor(World(), a), lb = dtsim::MakeLocalTensor(World(), b);
  Paired(
      state,
      [&] {
        for (int64_t r = 0; r < kRanks; ++r) benchmark::DoNotOptimize(at::add(a[r], b[r]));
      },
      [&] { benchmark::DoNotOptimize(la + lb); }, 400, 50);
}
BENCHMARK(BM_PairedAdd)->Iterations(1);

// Shards as a sharded tensor's ranks hold them: n row blocks of one [16 n, 16] tensor (what
// DistributeTensor gives for Shard(0)), so the LocalTensor ops run batched (rank_batch.h).
std::vector<at::Tensor> RowBlocks(int64_t n, int64_t salt) {
  at::Tensor global = at::arange(n * 256, at::kFloat).reshape({n * 16, 16}) + salt;
  return global.chunk(n, 0);
}

std::vector<int64_t> Ranks(int64_t n) {
  std::vector<int64_t> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  return r;
}

// a = `f` on each of n row blocks directly, b = `f` on the LocalTensors over them (batched).
template <typename F>
void PairedOnRowBlocks(benchmark::State& state, int64_t n, F f, int rounds, int batch) {
  std::vector<at::Tensor> a = RowBlocks(n, 0), b = RowBlocks(n, 1);
  at::Tensor la = dtsim::MakeLocalTensor(Ranks(n), a), lb = dtsim::MakeLocalTensor(Ranks(n), b);
  Paired(
      state,
      [&] {
        for (int64_t r = 0; r < n; ++r) benchmark::DoNotOptimize(f(a[r], b[r]));
      },
      [&] { benchmark::DoNotOptimize(f(la, lb)); }, rounds, batch);
}

void BM_PairedAddBatched(benchmark::State& state) {
  PairedOnRowBlocks(
      state, state.range(0), [](const at::Tensor& x, const at::Tensor& y) { return x + y; }, 400,
      50);
}
BENCHMARK(BM_PairedAddBatched)->Arg(8)->Arg(64)->Iterations(1);

void BM_PairedChainBatched(benchmark::State& state) {
  PairedOnRowBlocks(state, kRanks, Chain, 200, 10);
}
BENCHMARK(BM_PairedChainBatched)->Iterations(1);

// a = the chain on 8 shards directly, b = the chain on LocalTensors.
void BM_PairedChain(benchmark::State& state) {
  std::vector<at::Tensor> a = Shards(0), b = Shards(1);
  at::Tensor la = dtsim::MakeLocalTensor(World(), a), lb = dtsim::MakeLocalTensor(World(), b);
  Paired(
      state,
      [&] {
        for (int64_t r = 0; r < kRanks; ++r) benchmark::DoNotOptimize(Chain(a[r], b[r]));
      },
      [&] { benchmark::DoNotOptimize(Chain(la, lb)); }, 200, 10);
}
BENCHMARK(BM_PairedChain)->Iterations(1);

// a = memcpy into the 8 destinations (fresh or reused, as the allocator gives), b = the all_gather.
void BM_PairedAllGather(benchmark::State& state) {
  const int64_t n = ShardFloats(state);
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(n, 1.0f));
  at::Tensor lt = dtsim::MakeLocalTensor(World(), [&](int64_t r) {
    return at::full({n / 1024, 1024}, float(r));
  });
  auto coll = dtsim::MakeLocalCollectives();
  dtsim::GroupSet group = dtsim::GroupSet::Of(World());
  Paired(
      state, [&] { MemcpyIntoFreshBuffers(in, n); },
      [&] { benchmark::DoNotOptimize(coll->AllGather(lt, group, 0)); }, 4, 1);
}
BENCHMARK(BM_PairedAllGather)->Arg(16)->Iterations(1)->Unit(benchmark::kMillisecond);

int64_t ReadStatusKb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}

// Peak resident memory during one all_gather, over (inputs + outputs). 1.0 means no temporaries.
void BM_AllGatherPeakMemory(benchmark::State& state) {
  const int64_t n = ShardFloats(state);
  const double in_bytes = double(kRanks) * n * 4, out_bytes = double(kRanks) * kRanks * n * 4;
  for (auto _ : state) {
    int64_t base_kb = ReadStatusKb("VmRSS");
    at::Tensor in = dtsim::MakeLocalTensor(World(), [&](int64_t r) {
      return at::full({n / 1024, 1024}, float(r));
    });
    { std::ofstream("/proc/self/clear_refs") << "5"; }  // resets VmHWM to the current RSS
    auto coll = dtsim::MakeLocalCollectives();
    at::Tensor out = coll->AllGather(in, dtsim::GroupSet::Of(World()), 0);
    int64_t peak_kb = ReadStatusKb("VmHWM");
    state.counters["peak_over_in_out"] = (peak_kb - base_kb) * 1024.0 / (in_bytes + out_bytes);
  }
}
BENCHMARK(BM_AllGatherPeakMemory)->Arg(16)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
