// Trace recording and shard hashing (see include/dtsim/core/trace_recorder.h).
#include "dtsim/core/trace_recorder.h"

#include <ATen/ATen.h>
#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>

#include "dtsim/core/dtensor.h"
#include "dtsim/core/real_run.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {

std::string ShardHash(const at::Tensor& shard) {
  at::Tensor c = shard.is_cpu() ? shard.contiguous() : shard.to(at::kCPU).contiguous();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const std::string header =
      StrCat(c10::toString(c.scalar_type()), IntListToString(c.sizes().vec()));
  XXH3_64bits_update(state, header.data(), header.size());
  if (c.numel() > 0) XXH3_64bits_update(state, c.const_data_ptr(), c.numel() * c.element_size());
  const XXH64_hash_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "xxh3:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

// The sketch's weights w(i) and |w(i)| for i < n, computed once per process and grown by powers of
// two (shared by every thread; read under the lock's protection of the pointer swap).
struct SketchWeights {
  std::vector<double> w;
  std::vector<float> w32;  // the same, rounded to float
};

template <typename Acc>
const std::vector<Acc>& Weights(const SketchWeights& s);
template <>
const std::vector<double>& Weights<double>(const SketchWeights& s) {
  return s.w;
}
template <>
const std::vector<float>& Weights<float>(const SketchWeights& s) {
  return s.w32;
}

std::shared_ptr<const SketchWeights> WeightsFor(size_t n) {
  static std::mutex mutex;
  static std::shared_ptr<const SketchWeights> cached;
  std::lock_guard<std::mutex> lock(mutex);
  if (cached && cached->w.size() >= n) return cached;
  size_t size = 1024;
  while (size < n) size *= 2;
  auto weights = std::make_shared<SketchWeights>();
  weights->w.resize(size);
  weights->w32.resize(size);
  for (size_t i = 0; i < size; ++i) {
    const double x = static_cast<double>(i) * 0.6180339887498949 + 0.25;
    weights->w[i] = (x - std::floor(x)) * 2.0 - 1.0;
    weights->w32[i] = static_cast<float>(weights->w[i]);
  }
  cached = weights;
  return cached;
}

// Eight interleaved partial sums of x[i] * w(i) and |x[i] * w(i)| in Acc (float for the 16- and
// 32-bit types: their rounding is far below the diff's tolerance of 1e-4; double for double), held
// in 16-byte vectors (GCC/Clang vector extensions: SIMD on every x86-64, nothing reassociated),
// lane k summing the elements i with i % 8 == k, the lanes added in a fixed order at the end.
template <typename Acc>
struct Simd;
template <>
struct Simd<float> {
  typedef float Vec __attribute__((vector_size(16)));
  typedef int32_t Bits __attribute__((vector_size(16)));
  static constexpr int32_t kMagnitude = 0x7fffffff;
};
template <>
struct Simd<double> {
  typedef double Vec __attribute__((vector_size(16)));
  typedef int64_t Bits __attribute__((vector_size(16)));
  static constexpr int64_t kMagnitude = 0x7fffffffffffffff;
};

template <typename Acc>
typename Simd<Acc>::Vec Magnitude(typename Simd<Acc>::Vec v) {
  typename Simd<Acc>::Bits bits;
  std::memcpy(&bits, &v, sizeof(v));
  bits &= Simd<Acc>::kMagnitude;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

template <typename T, typename Acc>
void Sketch(const T* x, size_t n, double* sketch, double* scale) {
  using Vec = typename Simd<Acc>::Vec;
  constexpr size_t kLanes = sizeof(Vec) / sizeof(Acc);
  constexpr size_t kVecs = 8 / kLanes;
  const std::shared_ptr<const SketchWeights> weights = WeightsFor(n);
  const Acc* w = Weights<Acc>(*weights).data();
  Vec s[kVecs] = {}, a[kVecs] = {};
  Acc converted[8];
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Acc* v = nullptr;
    if constexpr (std::is_same_v<T, Acc>) {
      v = x + i;
    } else {
      for (size_t k = 0; k < 8; ++k) converted[k] = static_cast<Acc>(x[i + k]);
      v = converted;
    }
    for (size_t j = 0; j < kVecs; ++j) {
      Vec xv, wv;
      std::memcpy(&xv, v + j * kLanes, sizeof(Vec));
      std::memcpy(&wv, w + i + j * kLanes, sizeof(Vec));
      const Vec p = xv * wv;
      s[j] += p;
      a[j] += Magnitude<Acc>(p);
    }
  }
  Acc ls[8], la[8];
  for (size_t k = 0; k < 8; ++k) {
    ls[k] = s[k / kLanes][k % kLanes];
    la[k] = a[k / kLanes][k % kLanes];
  }
  for (size_t k = 0; i < n; ++i, ++k) {
    const Acc p = static_cast<Acc>(x[i]) * w[i];
    ls[k] += p;
    la[k] += std::fabs(p);
  }
  double ds[8], da[8];
  for (size_t k = 0; k < 8; ++k) {
    ds[k] = static_cast<double>(ls[k]);
    da[k] = static_cast<double>(la[k]);
  }
  *sketch = ((ds[0] + ds[1]) + (ds[2] + ds[3])) + ((ds[4] + ds[5]) + (ds[6] + ds[7]));
  *scale = ((da[0] + da[1]) + (da[2] + da[3])) + ((da[4] + da[5]) + (da[6] + da[7]));
}

}  // namespace

ShardDigestValues ShardDigest(const at::Tensor& shard) {
  at::Tensor c = shard.is_cpu() ? shard.contiguous() : shard.to(at::kCPU).contiguous();
  ShardDigestValues out;
  out.hash = ShardHash(c);
  const size_t n = static_cast<size_t>(c.numel());
  if (n == 0) return out;
  double sketch = 0, scale = 0;
  switch (c.scalar_type()) {
    case at::kDouble:
      Sketch<double, double>(c.const_data_ptr<double>(), n, &sketch, &scale);
      break;
    case at::kFloat:
      Sketch<float, float>(c.const_data_ptr<float>(), n, &sketch, &scale);
      break;
    case at::kHalf:
      Sketch<at::Half, float>(c.const_data_ptr<at::Half>(), n, &sketch, &scale);
      break;
    case at::kBFloat16:
      Sketch<at::BFloat16, float>(c.const_data_ptr<at::BFloat16>(), n, &sketch, &scale);
      break;
    default:
      return out;
  }
  out.sketch = sketch;
  out.scale = scale;
  return out;
}

std::vector<RankState> RankStates(const DTensorSpec& spec, const at::Tensor& local,
                                  const Collectives& collectives, bool hashes) {
  std::vector<RankState> out;
  MeshView view(spec.mesh());
  for (int64_t rank : collectives.HeldRanks(local)) {
    RankLayout l = ComputeRankLayout(spec.shape(), spec.mesh().shape(), view.Coordinate(rank),
                                     spec.placements(), rank);
    at::Tensor shard = collectives.Shard(local, rank);
    RankState s;
    s.rank = rank;
    s.coordinate = l.coordinate;
    s.local_shape = shard.sizes().vec();
    s.global_offset = l.global_offset;
    if (hashes) s.hash = ShardHash(shard);
    out.push_back(std::move(s));
  }
  return out;
}

TraceRecorder::TraceRecorder(TraceMeta meta, bool hashes) : hashes_(hashes) {
  meta.data = hashes;
  trace_.meta = std::move(meta);
}

void TraceRecorder::OnCollective(const CollectiveEvent& event) { pending_.push_back(event); }

void TraceRecorder::SetInitial(const DTensorSpec& spec, const at::Tensor& local,
                               const Collectives& collectives) {
  trace_.initial.spec = spec;
  trace_.initial.ranks = RankStates(spec, local, collectives, hashes_);
  pending_.clear();
}

void TraceRecorder::EndStep(const PlanStep& step, const DTensorSpec& spec_after,
                            const at::Tensor& local_after, const Collectives& collectives) {
  TraceStep s;
  s.plan = step;
  s.mesh_dim_name = spec_after.mesh().DimLabel(step.mesh_dim);
  s.collectives = std::move(pending_);
  pending_.clear();
  s.placements_after = spec_after.placements();
  s.ranks_after = RankStates(spec_after, local_after, collectives, hashes_);
  trace_.steps.push_back(std::move(s));
}

void TraceRecorder::SetFinal(const DTensorSpec& spec, const at::Tensor& local,
                             const Collectives& collectives, std::optional<bool> ok) {
  trace_.final_state.spec = spec;
  trace_.final_state.ranks = RankStates(spec, local, collectives, hashes_);
  trace_.ok = ok;
}

TracedRedistribution RedistributeWithTrace(const DTensor& source, const Placements& placements,
                                           TraceMeta meta, RedistributeOptions options) {
  Collectives& comm = source.collectives();
  meta.backend = comm.backend();
  meta.world_size = MeshView(source.mesh()).ranks().size();
  meta.planner = ToString(options.planner);
  TraceRecorder recorder(std::move(meta));
  recorder.SetInitial(source.spec(), source.to_local(), comm);
  auto user_step = options.on_step;
  options.on_step = [&](const PlanStep& step, const DTensorSpec& spec, const at::Tensor& local) {
    recorder.EndStep(step, spec, local, comm);
    if (user_step) user_step(step, spec, local);
  };
  DTensor result = [&] {
    Collectives::ScopedObserver observe(comm, &recorder);
    return source.Redistribute(source.mesh(), placements, options);
  }();
  recorder.SetFinal(result.spec(), result.to_local(), comm, std::nullopt);
  return {result, GatherTrace(comm, recorder.trace())};
}

}  // namespace dtsim
