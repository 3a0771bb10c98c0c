// dtsim_gpu_bench: the simulated world on a GPU (scripts/gpu_check.sh runs it; issue 34).
//
//   dtsim_gpu_bench all_gather [--ranks 8] [--mib 256] [--rounds 5]
//     The simulated all_gather of `ranks` CUDA shards of `mib` MiB each (one group, dim 0) against
//     one device-to-device copy of the same output bytes (what any all_gather must at least write,
//     reading as many): both timed in alternating rounds after a warm-up, the best round of each.
//     Prints "bench gpu_simulated_all_gather ratio <copy time / dtsim time>" (1 = the copy's rate)
//     and the bandwidths; checks the result against at::cat of the shards first (exit 1 if not
//     equal).
//   dtsim_gpu_bench redistribute [--ranks 8] [--mib 64] [--rounds 5]
//     DTensor.redistribute of an arange tensor on `ranks` simulated ranks whose shards lie on the
//     GPU, S(0) -> R and S(0) -> S(1), `mib` MiB per source shard; prints one JSON object
//     {case: best microseconds per call}, the cases bench/upstream_redistribute_bench.py --device
//     cuda times upstream's LocalTensorMode on.
// Exit 77 where LibTorch has no CUDA or no GPU is visible.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/arange_case.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/tensor/collectives.h"

namespace {

struct Options {
  std::string mode;
  int64_t ranks = 8;
  int64_t mib = 0;  // 0: the mode's default
  int rounds = 5;
};

Options Parse(int argc, char** argv) {
  Options o;
  if (argc < 2) throw std::invalid_argument("usage: dtsim_gpu_bench all_gather|redistribute ...");
  o.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long v = std::stoll(argv[i + 1]);
    if (v <= 0) throw std::invalid_argument(flag + " must be positive");
    if (flag == "--ranks") {
      o.ranks = v;
    } else if (flag == "--mib") {
      o.mib = v;
    } else if (flag == "--rounds") {
      o.rounds = static_cast<int>(v);
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  if (o.mib == 0) o.mib = o.mode == "all_gather" ? 256 : 64;
  return o;
}

void Sync() { torch::cuda::synchronize(); }

// Seconds of one call of `f`, the GPU's work included.
double Seconds(const std::function<void()>& f) {
  Sync();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  Sync();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int AllGather(const Options& o) {
  const int64_t rows = o.mib * (1 << 20) / (4 * 1024);  // float32 rows of 1024 columns
  std::vector<int64_t> world(o.ranks);
  for (int64_t r = 0; r < o.ranks; ++r) world[r] = r;
  std::shared_ptr<dtsim::Collectives> sim = dtsim::MakeLocalCollectives();
  const at::Tensor in = sim->FromRankFn(world, [&](int64_t r) {
    return at::arange(rows * 1024, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA))
        .reshape({rows, 1024})
        .add_(static_cast<double>(r) * 1e6);
  });
  const dtsim::GroupSet groups = dtsim::GroupSet::Of(world);
  // Correctness first: every rank holds the shards in rank order.
  {
    std::vector<at::Tensor> parts;
    for (int64_t r : world) parts.push_back(sim->Shard(in, r));
    const at::Tensor want = at::cat(parts, 0);
    const at::Tensor got = sim->AllGather(in, groups, 0);
    for (int64_t r : world) {
      if (!at::equal(sim->Shard(got, r), want)) {
        std::fprintf(stderr, "gpu all_gather: rank %lld's result differs from the shards' cat\n",
                     static_cast<long long>(r));
        return 1;
      }
    }
  }
  const int64_t out_bytes = o.ranks * rows * 1024 * 4;
  const at::Tensor src = at::empty({o.ranks * rows, 1024}, in.options().device(at::kCUDA));
  src.fill_(1);
  double best_copy = 1e300, best_sim = 1e300;
  for (int round = 0; round < o.rounds + 1; ++round) {  // round 0 warms up
    const double c = Seconds([&] {
      at::Tensor dst = at::empty_like(src);
      dst.copy_(src);
    });
    const double s = Seconds([&] { sim->AllGather(in, groups, 0); });
    if (round == 0) continue;
    best_copy = std::min(best_copy, c);
    best_sim = std::min(best_sim, s);
  }
  const double gib = static_cast<double>(out_bytes) / (1 << 30);
  std::printf("gpu all_gather: %lld ranks x %lld MiB -> %.2f GiB per group result\n",
              static_cast<long long>(o.ranks), static_cast<long long>(o.mib), gib);
  std::printf("  device-to-device copy of the result's bytes: %.3f ms (%.0f GB/s read + write)\n",
              best_copy * 1e3, 2 * out_bytes / best_copy / 1e9);
  std::printf("  dtsim's simulated all_gather:                %.3f ms (%.0f GB/s read + write)\n",
              best_sim * 1e3, 2 * out_bytes / best_sim / 1e9);
  std::printf("bench gpu_simulated_all_gather ratio %.3f\n", best_copy / best_sim);
  return 0;
}

int Redistribute(const Options& o) {
  const int64_t cols = 4096;
  const int64_t rows_per_rank = o.mib * (1 << 20) / (4 * cols);
  const dtsim::DeviceMesh mesh = dtsim::DeviceMesh::Create({o.ranks});
  const dtsim::DTensorSpec spec = dtsim::DTensorSpec::Create(mesh, dtsim::ParsePlacements("S(0)"),
                                                             {o.ranks * rows_per_rank, cols});
  dtsim::DTensor source =
      dtsim::MakeSourceFromGlobal(spec, dtsim::ArangeGlobal(spec).to(at::kCUDA), nullptr);
  std::printf("{");
  const char* sep = "";
  for (const char* to : {"R", "S(1)"}) {
    const dtsim::Placements target = dtsim::ParsePlacements(to);
    double best = 1e300;
    for (int round = 0; round < o.rounds + 1; ++round) {
      const double s = Seconds([&] { source.Redistribute(mesh, target).to_local(); });
      if (round > 0) best = std::min(best, s);
    }
    std::printf("%s\"gpu_%lldx%lldMiB_S0_to_%s\": %.1f", sep, static_cast<long long>(o.ranks),
                static_cast<long long>(o.mib), std::string(to) == "R" ? "R" : "S1", best * 1e6);
    sep = ", ";
  }
  std::printf("}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = Parse(argc, argv);
    if (!at::hasCUDA()) {
      std::fprintf(stderr, "dtsim_gpu_bench: LibTorch has no CUDA or no GPU is visible\n");
      return 77;
    }
    if (o.mode == "all_gather") return AllGather(o);
    if (o.mode == "redistribute") return Redistribute(o);
    throw std::invalid_argument("unknown mode " + o.mode + " (all_gather or redistribute)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtsim_gpu_bench: %s\n", e.what());
    return 2;
  }
}
