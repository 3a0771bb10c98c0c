// Trace recording and shard hashing (see include/dtsim/core/trace_recorder.h).
#include "dtsim/core/trace_recorder.h"

#include <ATen/ATen.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// XXH3 compiled here, inline (libxxhash's header), with its AVX2 kernel built for the function
// that targets it (HashBytesAvx2) beside the baseline one; the hash is the same on every kernel.
// Compiled here rather than called in libxxhash so that it prefetches far enough ahead
// (XXH_PREFETCH_DIST below): with the library's few hundred bytes, a tensor read from memory
// waits on each cache line, at about half the speed of one already in the caches.
#include <immintrin.h>
#define DTSIM_XXH3_X86 1
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((target("avx2")))
// The accumulators and secrets aligned for the AVX2 kernel's aligned loads and stores (and
// AVX-512's, as libxxhash's own dispatcher aligns them).
#define XXH_ACC_ALIGN 64
#else
#define DTSIM_XXH3_X86 0
#endif
// Bytes ahead of the one being hashed that XXH3 asks the memory for (a quarter of a float32 piece
// of HashAndSketch below; longer distances were no faster on cold tensors and slower on hot ones).
#define XXH_PREFETCH_DIST 4096
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
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

namespace {

#if DTSIM_XXH3_X86
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
// Not inlined: inside a caller as large as the digest kernels, GCC keeps XXH3's accumulators in
// memory instead of registers, at half the speed.
__attribute__((target("avx2"), noinline)) void HashBytesAvx2(XXH3_state_t* state, const void* data,
                                                             size_t n) {
  XXH3_update(state, static_cast<const xxh_u8*>(data), n, XXH3_accumulate_512_avx2,
              XXH3_scrambleAcc_avx2);
}
#else
bool HasAvx2() { return false; }
#endif

// Adds n bytes at `data` to the hash, with the widest XXH3 kernel this CPU runs.
void HashBytes(XXH3_state_t* state, const void* data, size_t n) {
#if DTSIM_XXH3_X86
  if (HasAvx2()) {
    HashBytesAvx2(state, data, n);
    return;
  }
#endif
  XXH3_64bits_update(state, data, n);
}

// XXH3 over a contiguous CPU tensor's dtype and shape (as text), then its bytes: the state after
// the header (the caller adds the bytes).
XXH3_state_t* HashHeader(const at::Tensor& c) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const std::string header =
      StrCat(c10::toString(c.scalar_type()), IntListToString(c.sizes().vec()));
  XXH3_64bits_update(state, header.data(), header.size());
  return state;
}

std::string HashText(XXH3_state_t* state) {
  const XXH64_hash_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "xxh3:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

std::string ShardHash(const at::Tensor& shard) {
  at::Tensor c = shard.is_cpu() ? shard.contiguous() : shard.to(at::kCPU).contiguous();
  XXH3_state_t* state = HashHeader(c);
  if (c.numel() > 0) HashBytes(state, c.const_data_ptr(), c.numel() * c.element_size());
  return HashText(state);
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

// The sketch accumulates x[i] * w(i) and |x[i] * w(i)| in Acc (float for the 16- and 32-bit types:
// their rounding is far below the diff's tolerance of 1e-4; double for double) in kSketchLanes
// interleaved partial sums, held in vectors of kBytes bytes (GCC/Clang vector extensions: SIMD on
// every x86-64, nothing reassociated), the lanes added in a fixed order at the end.
template <typename Acc, size_t kBytes>
struct Simd;
template <size_t kBytes>
struct Simd<float, kBytes> {
  typedef float Vec __attribute__((vector_size(kBytes)));
  typedef int32_t Bits __attribute__((vector_size(kBytes)));
  static constexpr int32_t kMagnitude = 0x7fffffff;
};
template <size_t kBytes>
struct Simd<double, kBytes> {
  typedef double Vec __attribute__((vector_size(kBytes)));
  typedef int64_t Bits __attribute__((vector_size(kBytes)));
  static constexpr int64_t kMagnitude = 0x7fffffffffffffff;
};

// The kernels below are always inlined, down to DigestData's callers: DigestDataAvx2 compiles them
// with 32-byte vectors in AVX2 registers, Digest's portable path with 16-byte SSE vectors.
#define DTSIM_DIGEST_INLINE __attribute__((always_inline)) inline

// v's lanes made their absolute values (in place: a 32-byte vector passed by value would change the
// calling convention of a function compiled without AVX).
template <typename Acc, size_t kBytes>
DTSIM_DIGEST_INLINE void ClearSigns(typename Simd<Acc, kBytes>::Vec* v) {
  typename Simd<Acc, kBytes>::Bits bits;
  std::memcpy(&bits, v, sizeof(*v));
  bits &= Simd<Acc, kBytes>::kMagnitude;
  std::memcpy(v, &bits, sizeof(*v));
}

// The sketch's partial sums: lane k sums the elements i with i % kSketchLanes == k. Sixteen keep
// two AVX2 vectors (four SSE ones) of independent additions in flight for each sum.
constexpr size_t kSketchLanes = 16;

// The sketch of x[0..n), fed in consecutive pieces (Add), each a multiple of kSketchLanes elements
// but the last: the same sums, in the same order, as one pass over the whole. The lanes are the
// same whatever the vector width kBytes (four 16-byte vectors of floats or two 32-byte ones):
// every width gives the same bits.
template <typename T, typename Acc, size_t kBytes>
class Sketcher {
 public:
  using Vec = typename Simd<Acc, kBytes>::Vec;
  static constexpr size_t kLanes = sizeof(Vec) / sizeof(Acc);
  static constexpr size_t kVecs = kSketchLanes / kLanes;

  explicit Sketcher(size_t n) : weights_(WeightsFor(n)), w_(Weights<Acc>(*weights_).data()) {}

  // Elements x[0..count) are elements begin..begin+count of the tensor.
  DTSIM_DIGEST_INLINE void Add(const T* x, size_t begin, size_t count) {
    const Acc* w = w_ + begin;
    Acc converted[kSketchLanes];
    size_t i = 0;
    for (; i + kSketchLanes <= count; i += kSketchLanes) {
      const Acc* v = nullptr;
      if constexpr (std::is_same_v<T, Acc>) {
        v = x + i;
      } else {
        for (size_t k = 0; k < kSketchLanes; ++k) converted[k] = static_cast<Acc>(x[i + k]);
        v = converted;
      }
      for (size_t j = 0; j < kVecs; ++j) {
        Vec xv, wv;
        std::memcpy(&xv, v + j * kLanes, sizeof(Vec));
        std::memcpy(&wv, w + i + j * kLanes, sizeof(Vec));
        const Vec p = xv * wv;
        s_[j] += p;
        Vec m = p;
        ClearSigns<Acc, kBytes>(&m);
        a_[j] += m;
      }
    }
    // The last few elements (fewer than kSketchLanes, at the end of the tensor): one per lane.
    for (size_t k = 0; i < count; ++i, ++k) {
      tail_[k] = static_cast<Acc>(x[i]) * w[i];
      has_tail_[k] = true;
    }
  }

  void Finish(double* sketch, double* scale) const {
    double ds[kSketchLanes], da[kSketchLanes];
    for (size_t k = 0; k < kSketchLanes; ++k) {
      Acc ls = s_[k / kLanes][k % kLanes];
      Acc la = a_[k / kLanes][k % kLanes];
      if (has_tail_[k]) {
        ls += tail_[k];
        la += std::fabs(tail_[k]);
      }
      ds[k] = static_cast<double>(ls);
      da[k] = static_cast<double>(la);
    }
    // Pairwise, in a fixed order: lanes 0+1, 2+3, ..., then those sums pairwise, and so on.
    for (size_t width = kSketchLanes; width > 1; width /= 2) {
      for (size_t k = 0; k < width / 2; ++k) {
        ds[k] = ds[2 * k] + ds[2 * k + 1];
        da[k] = da[2 * k] + da[2 * k + 1];
      }
    }
    *sketch = ds[0];
    *scale = da[0];
  }

 private:
  std::shared_ptr<const SketchWeights> weights_;
  const Acc* w_;
  Vec s_[kVecs] = {}, a_[kVecs] = {};
  Acc tail_[kSketchLanes] = {};
  bool has_tail_[kSketchLanes] = {};
};

// Hash and sketch in one pass: each piece is hashed, then sketched while it is still in the L1
// cache, so a tensor larger than the caches is read from memory once.
template <typename T, typename Acc, size_t kBytes>
DTSIM_DIGEST_INLINE void HashAndSketch(const T* x, size_t n, XXH3_state_t* state, double* sketch,
                                       double* scale) {
  constexpr size_t kPiece = 4096;  // elements: a multiple of kSketchLanes
  Sketcher<T, Acc, kBytes> sketcher(n);
  for (size_t begin = 0; begin < n; begin += kPiece) {
    const size_t count = std::min(kPiece, n - begin);
    HashBytes(state, x + begin, count * sizeof(T));
    sketcher.Add(x + begin, begin, count);
  }
  sketcher.Finish(sketch, scale);
}

// Logical rows i0..i0+n of a transposed matrix (element (i, j) at base[j * rows + i]) into
// `buffer`, row k at buffer + k * stride: for floats on x86-64, four rows and four columns at a
// time (one 4x4 transpose in registers); else element by element.
template <typename T>
DTSIM_DIGEST_INLINE void GatherRows(const T* base, size_t rows, size_t cols, size_t i0, size_t n,
                                    T* buffer, size_t stride) {
  size_t j = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {
    if (n % 4 == 0) {
      for (; j + 4 <= cols; j += 4) {
        const float* c = base + j * rows + i0;
        for (size_t k = 0; k < n; k += 4) {
          __m128 r0 = _mm_loadu_ps(c + k);
          __m128 r1 = _mm_loadu_ps(c + rows + k);
          __m128 r2 = _mm_loadu_ps(c + 2 * rows + k);
          __m128 r3 = _mm_loadu_ps(c + 3 * rows + k);
          _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
          _mm_storeu_ps(buffer + k * stride + j, r0);
          _mm_storeu_ps(buffer + (k + 1) * stride + j, r1);
          _mm_storeu_ps(buffer + (k + 2) * stride + j, r2);
          _mm_storeu_ps(buffer + (k + 3) * stride + j, r3);
        }
      }
    }
  }
#endif
  for (; j < cols; ++j) {
    const T* column = base + j * rows + i0;
    for (size_t k = 0; k < n; ++k) buffer[k * stride + j] = column[k];
  }
}

// The same over a transposed matrix (logical shape rows x cols, element (i, j) at base[j * rows +
// i]: a contiguous matrix's .t(), as every linear layer's weight is used), without materialising
// it: sixteen logical rows at a time (a cache line of each source column) gathered into a buffer,
// then hashed and sketched in logical order. Where a row is a multiple of the sketch's lanes long
// the buffer's rows are padded apart (rows a multiple of 4 KiB apart would share one cache set) and
// fed one at a time; otherwise the sixteen rows are one piece.
template <typename T, typename Acc, size_t kBytes>
DTSIM_DIGEST_INLINE void HashAndSketchTransposed(const T* base, size_t rows, size_t cols,
                                                 XXH3_state_t* state, double* sketch,
                                                 double* scale) {
  constexpr size_t kRows = 16;
  static_assert(kRows % kSketchLanes == 0, "sixteen rows of any width: a whole number of lanes");
  const bool padded = cols % kSketchLanes == 0;
  const size_t stride = padded ? cols + 64 / sizeof(T) : cols;
  Sketcher<T, Acc, kBytes> sketcher(rows * cols);
  std::vector<T> buffer(kRows * stride);
  for (size_t i0 = 0; i0 < rows; i0 += kRows) {
    const size_t n = std::min(kRows, rows - i0);
    GatherRows(base, rows, cols, i0, n, buffer.data(), stride);
    if (padded) {
      for (size_t k = 0; k < n; ++k) {
        const T* row = buffer.data() + k * stride;
        HashBytes(state, row, cols * sizeof(T));
        sketcher.Add(row, (i0 + k) * cols, cols);
      }
    } else {
      HashBytes(state, buffer.data(), n * cols * sizeof(T));
      sketcher.Add(buffer.data(), i0 * cols, n * cols);
    }
  }
  sketcher.Finish(sketch, scale);
}

// True when `t` is a contiguous matrix's transpose (2-D, strides (1, rows)).
bool IsTransposedMatrix(const at::Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 &&
         t.stride(1) == t.size(0);
}

// Hash and sketch of a CPU tensor that is contiguous or a transposed matrix, its data at `data`.
template <typename T, typename Acc, size_t kBytes>
DTSIM_DIGEST_INLINE void DigestData(const T* data, bool transposed, size_t rows, size_t cols,
                                    size_t n, XXH3_state_t* state, double* sketch, double* scale) {
  if (transposed) {
    HashAndSketchTransposed<T, Acc, kBytes>(data, rows, cols, state, sketch, scale);
  } else {
    HashAndSketch<T, Acc, kBytes>(data, n, state, sketch, scale);
  }
}

// The same, compiled for the widest vectors this build knows and the CPU has: AVX2 (32-byte
// vectors), chosen at run time, else 16-byte vectors. Both give the same bits (Sketcher).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <typename T, typename Acc>
__attribute__((target("avx2"))) void DigestDataAvx2(const T* data, bool transposed, size_t rows,
                                                    size_t cols, size_t n, XXH3_state_t* state,
                                                    double* sketch, double* scale) {
  DigestData<T, Acc, 32>(data, transposed, rows, cols, n, state, sketch, scale);
}
#endif

// `t`: a CPU tensor that is contiguous, or a transposed matrix when `transposed`.
template <typename T, typename Acc>
void Digest(const at::Tensor& t, bool transposed, bool widest, XXH3_state_t* state, double* sketch,
            double* scale) {
  const T* data = t.const_data_ptr<T>();
  const size_t rows = transposed ? static_cast<size_t>(t.size(0)) : 0;
  const size_t cols = transposed ? static_cast<size_t>(t.size(1)) : 0;
  const size_t n = static_cast<size_t>(t.numel());
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (widest && HasAvx2()) {
    DigestDataAvx2<T, Acc>(data, transposed, rows, cols, n, state, sketch, scale);
    return;
  }
#endif
  (void)widest;
  DigestData<T, Acc, 16>(data, transposed, rows, cols, n, state, sketch, scale);
}

}  // namespace

ShardDigestValues ShardDigest(const at::Tensor& shard, DigestVectors vectors) {
  // A CPU tensor as it lies (a transposed matrix is read in place); any other, copied contiguous.
  const bool transposed = shard.is_cpu() && IsTransposedMatrix(shard);
  const at::Tensor t = !shard.is_cpu() ? shard.to(at::kCPU).contiguous()
                       : transposed    ? shard
                                       : shard.contiguous();
  ShardDigestValues out;
  const bool widest = vectors == DigestVectors::kWidest;
  const size_t n = static_cast<size_t>(t.numel());
  XXH3_state_t* state = HashHeader(t);
  double sketch = 0, scale = 0;
  bool sketched = n > 0;
  switch (n == 0 ? at::kByte : t.scalar_type()) {
    case at::kDouble:
      Digest<double, double>(t, transposed, widest, state, &sketch, &scale);
      break;
    case at::kFloat:
      Digest<float, float>(t, transposed, widest, state, &sketch, &scale);
      break;
    case at::kHalf:
      Digest<at::Half, float>(t, transposed, widest, state, &sketch, &scale);
      break;
    case at::kBFloat16:
      Digest<at::BFloat16, float>(t, transposed, widest, state, &sketch, &scale);
      break;
    default: {
      sketched = false;
      const at::Tensor c = t.contiguous();
      if (n > 0) HashBytes(state, c.const_data_ptr(), n * c.element_size());
    }
  }
  out.hash = HashText(state);
  if (sketched) {
    out.sketch = sketch;
    out.scale = scale;
  }
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
    CollectiveObservers::Scoped observe(comm.observers(), &recorder);
    return source.Redistribute(source.mesh(), placements, options);
  }();
  recorder.SetFinal(result.spec(), result.to_local(), comm, std::nullopt);
  return {result, GatherTrace(comm, recorder.trace())};
}

}  // namespace dtsim
