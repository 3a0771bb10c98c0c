// Paired measurement for a shared machine, used by the benchmarks: alternates batches of `a` and
// `b` and keeps each one's fastest batch, so background load hits both alike. Reports the counters
// a_us and b_us (per call) and b_over_a.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

namespace dtsim::bench {

template <typename A, typename B>
void Paired(benchmark::State& state, A a, B b, int rounds, int batch) {
  using Clock = std::chrono::steady_clock;
  double best_a = 1e300, best_b = 1e300;
  for (auto _ : state) {
    for (int round = 0; round < rounds; ++round) {
      auto t0 = Clock::now();
      for (int i = 0; i < batch; ++i) a();
      auto t1 = Clock::now();
      for (int i = 0; i < batch; ++i) b();
      auto t2 = Clock::now();
      best_a = std::min(best_a, std::chrono::duration<double, std::micro>(t1 - t0).count() / batch);
      best_b = std::min(best_b, std::chrono::duration<double, std::micro>(t2 - t1).count() / batch);
    }
  }
  state.counters["a_us"] = best_a;
  state.counters["b_us"] = best_b;
  state.counters["b_over_a"] = best_b / best_a;
}

}  // namespace dtsim::bench
