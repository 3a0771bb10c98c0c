// The LocalTensor kernel (see docs/local-tensor.md): one boxed kernel registered at PrivateUse1 for
// every operator, which runs the op once per rank on that rank's shard — per-rank integer
// arguments unwrapped, each rank's own random generator (its SimWorld's) swapped in for seeded
// ops, copy-on-write replicas given their own storage before a write, allocations charged to the
// rank (RankScope) — and wraps the per-rank results; plus its registration with the dispatcher.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/COW.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "dtsim/layout/error.h"
#include "dtsim/tensor/ivalue_kinds.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"
#include "dtsim/tensor/sim_world.h"
#include "tensor/local_tensor_impl.h"
#include "tensor/rank_batch.h"

namespace dtsim {
namespace internal {

namespace {

// What the kernel needs to know about one operator schema, computed once.
struct OpInfo {
  bool seeded = false;
  bool view = false;  // a return aliases an input without writing it (view, reshape, t, ...)
  bool aten = false;  // an aten:: or prims:: operator (a C++ kernel of LibTorch's own)
  std::vector<int> write_args;        // arguments marked (a!)
  std::vector<int> return_alias_arg;  // per return: the written argument it returns, or -1
  std::vector<bool> return_symint;    // per return: declared SymInt
  BatchInfo batch;                    // for RunBatched
};

const OpInfo& GetOpInfo(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const c10::FunctionSchema*, OpInfo> cache;
  const c10::FunctionSchema* key = &op.schema();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  OpInfo info;
  info.seeded = op.hasTag(at::Tag::nondeterministic_seeded);
  info.batch = BatchInfoOf(*key);
  const std::string& name = key->name();
  info.aten = name.rfind("aten::", 0) == 0 || name.rfind("prims::", 0) == 0;
  for (const auto& ret : key->returns()) {
    if (ret.alias_info() && !ret.alias_info()->isWrite()) info.view = true;
  }
  const auto& args = key->arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].alias_info() && args[i].alias_info()->isWrite())
      info.write_args.push_back(static_cast<int>(i));
  }
  for (const auto& ret : key->returns()) {
    int alias = -1;
    if (ret.alias_info() && ret.alias_info()->isWrite()) {
      for (int a : info.write_args) {
        if (args[a].alias_info()->beforeSets() == ret.alias_info()->beforeSets()) {
          alias = a;
          break;
        }
      }
    }
    info.return_alias_arg.push_back(alias);
    info.return_symint.push_back(ret.real_type()->kind() == c10::TypeKind::SymIntType);
  }
  return cache.emplace(key, std::move(info)).first->second;
}

// Below this many bytes in the first rank's tensor arguments an op's ranks run serially: forking
// and joining LibTorch's threads costs more than the calls themselves. At 16 x 16 float32 (1 KiB)
// the threads gained a few percent at best and, in some processes, made every small op two to
// three times slower than serial (the workers' wake-up; docs/performance.md, "Batched ranks"),
// while the model steps of bench/model_bench.cc run as fast with this threshold as with 1 KiB.
constexpr int64_t kMinParallelBytes = int64_t{16} << 10;

// The bytes of the first rank's LocalTensor arguments (lists included) of the op at
// stack[base, base + n_args).
int64_t FirstRankArgBytes(const torch::jit::Stack& stack, size_t base, size_t n_args,
                          const ArgKind* kinds) {
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (auto* impl = FindLocalImpl(t); impl != nullptr && !impl->shards().empty()) {
      const at::Tensor& shard = impl->shards()[0];
      bytes += shard.numel() * static_cast<int64_t>(shard.element_size());
    }
  };
  for (size_t a = 0; a < n_args; ++a) {
    const c10::IValue& v = stack[base + a];
    if (kinds[a] == ArgKind::kLocal) {
      add(v.toTensor());
    } else if (kinds[a] == ArgKind::kList && IsTensorList(v)) {
      for (const at::Tensor& t : v.toTensorList()) add(t);
    }
  }
  return bytes;
}

c10::IValue UnwrapList(const c10::IValue& v, size_t idx) {
  if (IsTensorList(v)) {
    c10::List<at::Tensor> out;
    auto in = v.toTensorList();
    out.reserve(in.size());
    for (const at::Tensor& t : in) {
      LocalTensorImpl* impl = FindLocalImpl(t);
      out.push_back(impl ? impl->shards()[idx] : t);
    }
    return out;
  }
  auto in = v.toList();
  c10::impl::GenericList out(in.elementType());
  out.reserve(in.size());
  for (const c10::IValue& e : in) {
    if (e.isTensor()) {
      LocalTensorImpl* impl = FindLocalImpl(e.toTensor());
      out.push_back(impl ? c10::IValue(impl->shards()[idx]) : e);
    } else {
      out.push_back(e);
    }
  }
  return out;
}

std::string IValueText(const c10::IValue& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

[[noreturn]] void ThrowDisagree(const c10::OperatorHandle& op, const std::vector<int64_t>& ranks,
                                const std::vector<torch::jit::Stack>& outs, size_t j,
                                const std::string& what) {
  std::ostringstream per_rank;
  for (size_t i = 0; i < ranks.size(); ++i) {
    per_rank << (i ? ", " : "") << "rank " << ranks[i] << ": ";
    const c10::IValue& v = outs[i][j];
    if (IsTensorList(v)) {
      per_rank << v.toTensorList().size();
    } else {
      per_rank << IValueText(v);
    }
  }
  throw InputError(op.schema().name(),
                   StrCat(what, " differs per rank (", per_rank.str(),
                          "); a LocalTensor op can only return it when every rank agrees"));
}

void FlushPending();

// --- The ranks of one op on several threads ---
//
// Serially, each rank's ATen call of an op runs after the other, and each spreads its (small) work
// over LibTorch's intra-op OpenMP threads: 8 ranks of a model's step make tens of thousands of
// fork/join rounds, in which the threads mostly wait (a quarter of a simulated Llama step). The
// kernel instead runs the ranks themselves on those threads: one OpenMP parallel region per op,
// each thread a contiguous block of ranks (threads 2: ranks 0-3 and 4-7), each rank's call the same
// as serially; inside the region LibTorch's own parallel_for and MKL see an active parallel region
// and run on their one thread. So the per-rank calls, their arguments and results are those of the
// serial loop; what can differ is a kernel's summation order where it depends on the kernel's
// thread count (a reduction over more than at::internal::GRAIN_SIZE elements, a large gemm).
//
// What each thread carries: the caller's ThreadLocalState (dispatch key sets below autograd, grad
// and inference mode, ...), and its rank's RankScope and OpBoundaryScope, so the MemoryMeter
// charges each allocation to the rank whose call makes it. The meter and dtsim's caching allocator
// lock their tables. Ranks stay serial where order or sharing matters or nothing is to gain: ops
// drawing random numbers (one default generator swapped per rank), views and ops on meta tensors
// (a few microseconds a rank, less than a parallel region costs), writes to a copy-on-write replica
// (which rank copies and which steals the buffer would depend on timing, and with it the memory
// charged) or to a storage another rank reads or writes too (WritesAreRankPrivate), operators
// outside aten::/prims:: (their kernels may be Python, or dtsim's own), and calls under a Python
// dispatch mode or key (a worker would need the GIL the caller holds).
//
// dtsim is not compiled with -fopenmp, so at::parallel_for in dtsim's code would run inline. The
// region is opened through libgomp's entry point of `#pragma omp parallel`, GOMP_parallel, looked
// up at run time in the libgomp LibTorch loaded; without it (a LibTorch without OpenMP) ranks run
// serially.
//
// MapShards uses the same threads for the functions of a ParallelShardFnsScope (local_tensor.h):
// fully_shard's copies into and out of its flat buffers, a redistribution's pads and local splits.
struct OpenMp {
  void (*parallel)(void (*)(void*), void*, unsigned, unsigned) = nullptr;  // GOMP_parallel
  int (*thread_num)() = nullptr;                                           // omp_get_thread_num
  int (*num_threads)() = nullptr;                                          // omp_get_num_threads
  int (*in_parallel)() = nullptr;                                          // omp_in_parallel
  bool ok() const { return parallel && thread_num && num_threads && in_parallel; }
};

const OpenMp& GetOpenMp() {
  static const OpenMp omp = [] {
    OpenMp o;
    o.parallel = reinterpret_cast<decltype(o.parallel)>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
    o.thread_num = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
    o.num_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
    o.in_parallel = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_in_parallel"));
    return o;
  }();
  return omp;
}

std::atomic<bool>& ParallelRanksFlag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("DTSIM_PARALLEL_RANKS");
    return !(env != nullptr && std::strcmp(env, "0") == 0);
  }()};
  return flag;
}

}  // namespace

namespace {

// LibTorch's intra-op threads as the user configured them (OMP_NUM_THREADS, else LibTorch's
// default), read before AdaptThreadsToLoad first changes them.
int ConfiguredThreads() {
  static const int configured = at::get_num_threads();
  return configured;
}

// CPU time in seconds: the whole machine's busy time (/proc/stat's first line: every state but
// idle and iowait, in USER_HZ ticks) and this process's own (getrusage).
struct CpuTimes {
  double machine = 0, own = 0, wall = 0;
};

std::optional<double> MachineBusySeconds(const char* cpu_line) {
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  if (std::sscanf(cpu_line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system,
                  &idle, &iowait, &irq, &softirq, &steal) < 4)
    return std::nullopt;
  static const double hz = static_cast<double>(std::max(1L, sysconf(_SC_CLK_TCK)));
  return static_cast<double>(user + nice + system + irq + softirq + steal) / hz;
}

double OwnCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

bool MachineBusy() {
  // Read at most every 100 ms (about 30 us a read); the answer in between is the last one.
  // Between readings no lock is taken: the next reading's time and the answer are atomics.
  static std::mutex mutex;
  static std::atomic<int64_t> next_ns{0};  // CLOCK_MONOTONIC_COARSE's count
  static std::atomic<bool> busy{false};
  static const long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  // The coarse clock (a few milliseconds' resolution, a fraction of the precise one's cost per
  // op) is fine enough for a reading every 100 ms.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const int64_t now = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  if (now < next_ns.load(std::memory_order_relaxed)) return busy.load(std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
  if (!lock.owns_lock() || now < next_ns.load(std::memory_order_relaxed))
    return busy.load(std::memory_order_relaxed);
  next_ns.store(now + int64_t{100'000'000}, std::memory_order_relaxed);
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) {
    busy.store(false, std::memory_order_relaxed);
    return false;
  }
  char line[512];
  long running = 0;
  std::optional<double> machine;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (!machine && std::strncmp(line, "cpu ", 4) == 0) machine = MachineBusySeconds(line);
    if (std::sscanf(line, "procs_running %ld", &running) == 1) break;
  }
  std::fclose(f);
  // Other processes' demand for CPUs, against what LibTorch's threads need: OpenMP threads spin at
  // their barriers for each other, so one of them descheduled by another process's thread stalls
  // the rest (a parallel region on 2 CPUs beside one busy process ran 2-16 times slower than on
  // one thread). Busy: other processes use more than the CPUs left over beyond the configured
  // threads, less half a CPU (on 2 CPUs with 2 threads, half a CPU's use by others).
  //   - From the second reading on, their use is measured: the machine's busy CPU time since the
  //     last reading less this process's own, over the wall time between them. Counting this
  //     process's runnable threads instead (its intra-op threads spin or sleep between regions)
  //     undercounts the others: before, busy was "procs_running less LibTorch's thread count at
  //     least the CPUs", and two busy processes on 2 CPUs read as a quiet machine.
  //   - The first reading decides at once (a process started on a busy machine runs serially from
  //     its first op), from procs_running less this thread.
  // After the first, the answer changes only when two readings in a row say so, so that one burst
  // does not switch LibTorch's threads back and forth.
  static bool first = true;  // these under the mutex
  static int streak = 0;
  static CpuTimes last;
  const CpuTimes times{machine.value_or(0), OwnCpuSeconds(), static_cast<double>(now) * 1e-9};
  const double slack = std::max(0.5, static_cast<double>(cpus - ConfiguredThreads()) + 0.5);
  double others = static_cast<double>(running - 1);
  if (!first && machine && last.machine > 0 && times.wall > last.wall) {
    others = ((times.machine - last.machine) - (times.own - last.own)) / (times.wall - last.wall);
  }
  last = times;
  const bool now_busy = others >= slack;
  streak = now_busy == busy.load(std::memory_order_relaxed) ? 0 : streak + 1;
  if (first || streak >= 2) {
    first = false;
    busy.store(now_busy, std::memory_order_relaxed);
    streak = 0;
  }
  return busy.load(std::memory_order_relaxed);
}

void AdaptThreadsToLoad() {
  const OpenMp& omp = GetOpenMp();
  if (omp.ok() && omp.in_parallel()) return;   // a worker thread: the caller's setting holds
  const int configured = ConfiguredThreads();  // as the user set it (OMP_NUM_THREADS)
  if (configured < 2) return;
  static std::atomic<bool> reduced{false};
  const bool busy = MachineBusy();
  if (busy == reduced.load(std::memory_order_acquire)) return;  // nothing to change: no lock
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (busy && !reduced.load(std::memory_order_relaxed)) {
    at::set_num_threads(1);
    reduced.store(true, std::memory_order_release);
  } else if (!busy && reduced.load(std::memory_order_relaxed)) {
    at::set_num_threads(configured);
    reduced.store(false, std::memory_order_release);
  }
}

bool RanksMayRunInParallel(size_t n_ranks) {
  if (n_ranks < 2 || !ParallelRanksFlag().load(std::memory_order_relaxed)) return false;
  const OpenMp& omp = GetOpenMp();
  if (!omp.ok() || omp.in_parallel() || at::get_num_threads() < 2) return false;
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  const c10::DispatchKeySet python({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot});
  if (!(tls.included_ & python).empty()) return false;
  return !c10::impl::TorchDispatchModeTLS::any_modes_set();
}

void RunRanksInParallel(size_t n, const std::function<void(size_t)>& run_rank) {
  struct Job {
    const std::function<void(size_t)>* run_rank;
    size_t n;
    const at::ThreadLocalState* tls;
    std::thread::id caller;
    std::vector<std::exception_ptr> errors;
  };
  const at::ThreadLocalState tls;
  Job job{&run_rank, n, &tls, std::this_thread::get_id(), std::vector<std::exception_ptr>(n)};
  GetOpenMp().parallel(
      [](void* data) {
        Job& j = *static_cast<Job*>(data);
        const OpenMp& omp = GetOpenMp();
        const size_t threads = static_cast<size_t>(omp.num_threads());
        const size_t t = static_cast<size_t>(omp.thread_num());
        const size_t chunk = (j.n + threads - 1) / threads;
        const size_t begin = std::min(j.n, t * chunk);
        const size_t end = std::min(j.n, begin + chunk);
        if (begin == end) return;
        std::optional<at::ThreadLocalStateGuard> guard;
        if (std::this_thread::get_id() != j.caller) guard.emplace(*j.tls);
        for (size_t i = begin; i < end; ++i) {
          try {
            (*j.run_rank)(i);
          } catch (...) {
            j.errors[i] = std::current_exception();
          }
        }
      },
      &job, 0, 0);
  for (const std::exception_ptr& e : job.errors) {
    if (e) std::rethrow_exception(e);
  }
}

namespace {

bool IsCow(const at::Tensor& shard) {
  return shard.defined() && shard.has_storage() &&
         c10::impl::cow::is_cow_data_ptr(shard.storage().data_ptr());
}

// Gives a copy-on-write storage its own data (a copy if still shared; nothing to copy for the last
// holder).
void MakeOwnStorage(const at::Tensor& shard) {
  if (IsCow(shard)) shard.storage().mutable_data();
}

// True if the ranks of an op with written arguments may run at once: every written argument is a
// LocalTensor (not a list), none of its shards is a copy-on-write replica, and no storage a rank
// writes is another rank's (a LocalTensor whose ranks hold views of one tensor, or one tensor
// given to every rank) or read by another rank (any LocalTensor or plain tensor argument). Where
// it is, the serial loop's order is what the program asked for.
bool WritesAreRankPrivate(const OpInfo& info, const ArgKind* kinds, const torch::jit::Stack& stack,
                          size_t base, size_t n_args, size_t n_ranks) {
  std::unordered_map<const c10::StorageImpl*, size_t> written;  // storage -> the rank index
  for (int a : info.write_args) {
    if (kinds[a] != ArgKind::kLocal) return false;
    const auto& shards =
        static_cast<LocalTensorImpl*>(stack[base + a].toTensor().unsafeGetTensorImpl())->shards();
    for (size_t i = 0; i < n_ranks; ++i) {
      if (IsCow(shards[i])) return false;
      if (!shards[i].has_storage()) continue;
      auto [it, added] = written.emplace(shards[i].storage().unsafeGetStorageImpl(), i);
      if (!added && it->second != i) return false;
    }
  }
  auto read_by = [&](const at::Tensor& t, size_t i) {  // false if another rank writes t's storage
    if (!t.defined() || !t.has_storage()) return true;
    auto it = written.find(t.storage().unsafeGetStorageImpl());
    return it == written.end() || it->second == i;
  };
  for (size_t a = 0; a < n_args; ++a) {
    const c10::IValue& v = stack[base + a];
    std::vector<at::Tensor> tensors;
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (IsTensorList(v)) {
      for (const at::Tensor& t : v.toTensorList()) tensors.push_back(t);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toList()) {
        if (e.isTensor()) tensors.push_back(e.toTensor());
      }
    }
    for (const at::Tensor& t : tensors) {
      if (const LocalTensorImpl* impl = FindLocalImpl(t)) {
        for (size_t i = 0; i < n_ranks; ++i) {
          if (!read_by(impl->shards()[i], i)) return false;
        }
      } else if (!read_by(t, n_ranks)) {  // a plain tensor: read by every rank
        return false;
      }
    }
  }
  return true;
}

void LocalKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  FlushPending();
  const c10::FunctionSchema& schema = op.schema();
  const OpInfo& info = GetOpInfo(op);
  const size_t n_args = schema.arguments().size();
  const size_t base = stack->size() - n_args;

  // 1. Classify the arguments and find the rank set.
  const RankList* ranks = nullptr;
  const std::shared_ptr<SimWorld>* world = nullptr;  // the first LocalTensor argument's
  bool meta = false;    // the first LocalTensor argument's shards are meta tensors
  bool on_host = true;  // ... or tensors of the host (not a GPU's)
  auto note_ranks = [&](const LocalTensorImpl* impl) {
    if (ranks == nullptr) {
      ranks = &impl->rank_list();
      world = &impl->world();
      // The impl's device is its shards' (read here without handing a shard out: stacked shards
      // get no views made).
      meta = impl->device().is_meta();
      on_host = impl->device().is_cpu();
    } else if (*ranks != impl->rank_list() && **ranks != impl->ranks()) {
      throw InputError(schema.name(), StrCat("LocalTensor arguments hold different ranks: ",
                                             JoinInts(**ranks), " and ", JoinInts(impl->ranks())));
    }
  };
  ArgKind kinds_small[16];
  std::vector<ArgKind> kinds_big;
  ArgKind* kinds = kinds_small;
  if (n_args > 16) {
    kinds_big.resize(n_args);
    kinds = kinds_big.data();
  }
  for (size_t a = 0; a < n_args; ++a) {
    const c10::IValue& v = (*stack)[base + a];
    kinds[a] = ArgKind::kPass;
    if (v.isTensor()) {
      if (LocalTensorImpl* impl = FindLocalImpl(v.toTensor())) {
        note_ranks(impl);
        kinds[a] = ArgKind::kLocal;
      }
    } else if (IsTensorList(v)) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (LocalTensorImpl* impl = FindLocalImpl(t)) {
          note_ranks(impl);
          kinds[a] = ArgKind::kList;
        }
      }
    } else if (IsSymIntList(v)) {
      for (const c10::SymInt& s : v.toSymIntList()) {
        if (IsLocalSymInt(s)) kinds[a] = ArgKind::kSymIntList;
      }
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toList()) {
        if (e.isTensor()) {
          if (LocalTensorImpl* impl = FindLocalImpl(e.toTensor())) {
            note_ranks(impl);
            kinds[a] = ArgKind::kList;
          }
        }
      }
    } else if (v.isSymInt()) {
      if (IsLocalSymInt(v.toSymInt())) kinds[a] = ArgKind::kSymInt;
    }
  }
  DTSIM_CHECK(ranks != nullptr,
              "LocalTensor kernel reached without a LocalTensor argument: ", schema.name());

  // 2. A plain tensor must not be the mutated argument: every rank would write into the same
  // tensor.
  for (int a : info.write_args) {
    const c10::IValue& v = (*stack)[base + a];
    bool plain = (v.isTensor() && v.toTensor().defined() && kinds[a] != ArgKind::kLocal) ||
                 (IsTensorList(v) && kinds[a] != ArgKind::kList && v.toTensorList().size() > 0);
    if (plain) {
      throw InputError(
          schema.arguments()[a].name(),
          StrCat(schema.name(),
                 " would mutate a plain tensor with LocalTensor inputs (every rank "
                 "would write into the same tensor); make it a LocalTensor first, e.g. "
                 "MakeLocalTensor(ranks, [&](int64_t) { return t.clone(); })"));
    }
  }

  // 3. Run the op once for all ranks where that is exact (rank_batch.h), else once per rank
  // (LibTorch's threads fitted to the machine's load first). The batched reductions, aligned
  // elementwise ops and views run on one thread (rank_batch.h), so their threads are fitted only
  // for the per-rank calls they may fall back to.
  const BatchRule rule = info.batch.rule;
  const bool one_thread_batched = rule == BatchRule::kReduction ||
                                  rule == BatchRule::kElementwiseAligned ||
                                  rule == BatchRule::kView;
  if (!one_thread_batched) AdaptThreadsToLoad();
  if (RunBatched(BatchCall{op, stack, base, n_args, kinds, *ranks, *world, info.batch})) return;
  if (one_thread_batched) AdaptThreadsToLoad();
  const std::vector<int64_t>& rank_ids = **ranks;
  const size_t n_ranks = rank_ids.size();
  // Per-rank stacks come from a thread-local pool (one level per nesting depth) to avoid allocating
  // them per call; they are cleared on exit so no shard outlives the call.
  thread_local std::deque<std::vector<torch::jit::Stack>>
      pool;  // deque: references stay valid when it grows
  thread_local size_t depth = 0;
  if (pool.size() <= depth) pool.emplace_back();
  std::vector<torch::jit::Stack>& outs = pool[depth];
  if (outs.size() < n_ranks) outs.resize(n_ranks);
  struct DepthGuard {
    std::vector<torch::jit::Stack>& outs;
    size_t& depth;
    ~DepthGuard() {
      for (auto& s : outs) s.clear();
      --depth;
    }
  } depth_guard{outs, ++depth};
  // An op with no LocalTensor argument (a factory given per-rank sizes) makes a world of its own.
  const std::shared_ptr<SimWorld> out_world = world != nullptr ? *world : SimWorld::Create();
  SimWorld* rng = info.seeded ? out_world.get() : nullptr;
  std::unique_lock<std::mutex> rng_lock;
  at::Tensor saved_state;
  at::Generator default_gen;
  if (rng) {
    rng_lock = std::unique_lock<std::mutex>(rng->rng_mutex());
    default_gen = at::detail::getDefaultCPUGenerator();
    saved_state = default_gen.get_state();
  }
  // One rank's call: its arguments unwrapped into outs[i], the op run on them, the results left
  // there.
  auto run_rank = [&](size_t i) {
    torch::jit::Stack& s = outs[i];
    s.reserve(std::max(n_args, schema.returns().size()));
    const int64_t rank = rank_ids[i];
    for (size_t a = 0; a < n_args; ++a) {
      const c10::IValue& v = (*stack)[base + a];
      switch (kinds[a]) {
        case ArgKind::kPass:
          s.push_back(v);
          break;
        case ArgKind::kLocal:
          s.push_back(
              static_cast<LocalTensorImpl*>(v.toTensor().unsafeGetTensorImpl())->shards()[i]);
          break;
        case ArgKind::kList:
          s.push_back(UnwrapList(v, i));
          break;
        case ArgKind::kSymInt:
          s.push_back(SymIntForRank(v.toSymInt(), rank));
          break;
        case ArgKind::kSymIntList: {
          std::vector<int64_t> ints;
          for (const c10::SymInt& x : v.toSymIntList()) ints.push_back(SymIntForRank(x, rank));
          s.push_back(c10::IValue(ints));
          break;
        }
      }
    }
    if (rng) {
      at::Generator& g = rng->GeneratorLocked(rank);
      std::lock_guard<std::mutex> lock(default_gen.mutex());
      default_gen.set_state(g.get_state());
    }
    {
      RankScope scope(rank);           // what the op allocates is this rank's (MemoryMeter)
      OpBoundaryScope boundary(rank);  // its peak counted at the op's end (no workspace)
      // Copy-on-write: a written shard that shares its storage with other ranks' replicas gets its
      // own copy first (the other ranks keep theirs). c10 would copy on the first write too, but
      // not on every path (an out= op that resizes a shared storage trips an internal assert), so
      // the kernel does it before the op runs.
      for (int a : info.write_args) {
        if (kinds[a] == ArgKind::kLocal) {
          MakeOwnStorage(s[a].toTensor());
        } else if (kinds[a] == ArgKind::kList && IsTensorList(s[a])) {
          for (const at::Tensor& t : s[a].toTensorList()) MakeOwnStorage(t);
        }
      }
      op.callBoxed(s);
    }
    if (rng) {
      std::lock_guard<std::mutex> lock(default_gen.mutex());
      rng->GeneratorLocked(rank).set_state(default_gen.get_state());
    }
  };
  // Ranks in parallel (see "The ranks of one op on several threads" above) unless the op draws
  // random numbers, is a view, is not LibTorch's, works on meta tensors (shapes only: a few
  // microseconds a rank, less than a parallel region costs) or on a GPU (the host only queues the
  // kernels), or writes to a copy-on-write replica.
  // Nor for work below a parallel region's cost (the first rank's tensor arguments under
  // kMinParallelBytes), nor while the machine has more runnable threads than CPUs (MachineBusy).
  bool parallel = rng == nullptr && !info.view && info.aten && !meta && on_host &&
                  RanksMayRunInParallel(n_ranks) &&
                  FirstRankArgBytes(*stack, base, n_args, kinds) >= kMinParallelBytes &&
                  !MachineBusy();
  if (parallel && !info.write_args.empty()) {
    parallel = WritesAreRankPrivate(info, kinds, *stack, base, n_args, n_ranks);
  }
  if (parallel) {
    RunRanksInParallel(n_ranks, std::function<void(size_t)>(run_rank));
  } else {
    for (size_t i = 0; i < n_ranks; ++i) run_rank(i);
  }
  if (rng) {
    std::lock_guard<std::mutex> lock(default_gen.mutex());
    default_gen.set_state(saved_state);
  }

  // 4. Mutated wrappers: shards may have changed shape (resize_, out=, transpose_): refresh the
  // wrapper.
  for (int a : info.write_args) {
    if (kinds[a] == ArgKind::kLocal) {
      auto* impl =
          static_cast<LocalTensorImpl*>((*stack)[base + a].toTensor().unsafeGetTensorImpl());
      bool changed = false;
      for (const at::Tensor& sh : impl->shards()) {
        if (impl->uneven() || sh.dim() != impl->dim() ||
            (!impl->uneven() && (sh.sizes() != impl->sizes() || sh.strides() != impl->strides()))) {
          changed = true;
          break;
        }
      }
      if (changed) {
        std::vector<at::Tensor> shards = impl->shards();
        RankList r = impl->rank_list();
        impl->shallow_copy_from(
            c10::make_intrusive<LocalTensorImpl>(std::move(r), std::move(shards), impl->world()));
      }
    }
  }

  // 5. Wrap the results.
  const size_t n_rets = schema.returns().size();
  std::vector<c10::IValue> results;
  results.reserve(n_rets);
  for (size_t j = 0; j < n_rets; ++j) {
    int alias = info.return_alias_arg[j];
    if (alias >= 0 && kinds[alias] == ArgKind::kLocal) {
      results.push_back((*stack)[base + alias]);
      continue;
    }
    const c10::IValue& r0 = outs[0][j];
    if (r0.isTensor()) {
      std::vector<at::Tensor> shards;
      shards.reserve(n_ranks);
      bool any_defined = false;
      for (size_t i = 0; i < n_ranks; ++i) {
        DTSIM_CHECK(outs[i][j].isTensor(), schema.name(), " returned a tensor on one rank only");
        shards.push_back(outs[i][j].toTensor());
        any_defined = any_defined || shards.back().defined();
      }
      if (!any_defined) {
        results.emplace_back(at::Tensor());
        continue;
      }
      for (size_t i = 0; i < n_ranks; ++i) {
        if (!shards[i].defined())
          ThrowDisagree(op, rank_ids, outs, j, "whether the result is defined");
      }
      results.emplace_back(
          at::Tensor(c10::make_intrusive<LocalTensorImpl>(*ranks, std::move(shards), out_world)));
    } else if (IsTensorList(r0)) {
      size_t len = r0.toTensorList().size();
      for (size_t i = 1; i < n_ranks; ++i) {
        if (outs[i][j].toTensorList().size() != len) {
          ThrowDisagree(op, rank_ids, outs, j, "the length of the returned tensor list");
        }
      }
      c10::List<at::Tensor> list;
      list.reserve(len);
      for (size_t k = 0; k < len; ++k) {
        std::vector<at::Tensor> shards;
        shards.reserve(n_ranks);
        for (size_t i = 0; i < n_ranks; ++i) shards.push_back(outs[i][j].toTensorList().get(k));
        list.push_back(
            at::Tensor(c10::make_intrusive<LocalTensorImpl>(*ranks, std::move(shards), out_world)));
      }
      results.emplace_back(std::move(list));
    } else if (info.return_symint[j] && (r0.isInt() || r0.isSymInt())) {
      std::vector<int64_t> values;
      for (size_t i = 0; i < n_ranks; ++i) values.push_back(outs[i][j].toSymInt().expect_int());
      results.emplace_back(PerRankSymInt(rank_ids, std::move(values)));
    } else {
      for (size_t i = 1; i < n_ranks; ++i) {
        if (!(outs[i][j] == r0)) ThrowDisagree(op, rank_ids, outs, j, "the returned value");
      }
      results.push_back(r0);
    }
  }
  torch::jit::drop(*stack, n_args);
  for (auto& r : results) stack->push_back(std::move(r));
}

}  // namespace

// Registration of the per-rank kernel. Operators defined after the first registration (a library
// loaded later, a custom op) are seen by a registration listener, which only records their names:
// it runs under the dispatcher's lock, so they are registered at the next
// EnsureLocalTensorDispatch() (every MakeLocalTensor / wrap) or kernel call.
namespace {

struct Registry {
  std::mutex mu;
  std::vector<c10::RegistrationHandleRAII> handles;  // kept for the life of the process
  std::vector<c10::OperatorName> pending;
  std::atomic<bool> has_pending{false};
};
Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

void RegisterOp(Registry& reg, const c10::OperatorName& name) {
  auto& d = c10::Dispatcher::singleton();
  auto handle = d.findOp(name);
  if (!handle || !handle->hasSchema()) return;
  if (handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
    return;  // c10d::* and our own
  // As for a CPU tensor (and upstream's LocalTensor, a Python subclass seen below autograd), an
  // ATen op that decomposes (CompositeImplicitAutograd, no CPU kernel) gets no kernel here: it
  // decomposes at AutogradPrivateUse1, recording autograd for LocalTensors that require grad
  // (activations of a model under use_local_output), and its parts reach the per-rank kernel.
  // Operators of other libraries keep the per-rank kernel whole: their C++ bodies may read sizes,
  // which a LocalTensor with uneven shards cannot give.
  const bool cpu_kernel =
      handle->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
      handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
      handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  const bool aten = name.name.rfind("aten::", 0) == 0 || name.name.rfind("prims::", 0) == 0;
  if (aten && handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
      !cpu_kernel)
    return;
  reg.handles.push_back(d.registerImpl(name, c10::DispatchKey::PrivateUse1,
                                       c10::KernelFunction::makeFromBoxedFunction<&LocalKernel>(),
                                       std::nullopt, nullptr, "dtsim LocalTensor per-rank kernel"));
}

class LateOpListener : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle& op) override {
    Registry& reg = GetRegistry();
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.pending.push_back(op.operator_name());
    reg.has_pending.store(true);
  }
  void onOperatorDeregistered(const c10::OperatorHandle&) override {}
};

void FlushPending() {
  Registry& reg = GetRegistry();
  if (!reg.has_pending.load(std::memory_order_acquire)) return;
  std::vector<c10::OperatorName> names;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    names.swap(reg.pending);
    reg.has_pending.store(false);
  }
  for (const auto& name : names) RegisterOp(reg, name);
}

}  // namespace

void EnsureLocalTensorDispatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& d = c10::Dispatcher::singleton();
    Registry& reg = GetRegistry();
    reg.handles.push_back(d.registerFallback(
        c10::DispatchKey::PrivateUse1, c10::KernelFunction::makeFromBoxedFunction<&LocalKernel>(),
        "dtsim LocalTensor fallback"));
    for (const c10::OperatorName& name : d.getAllOpNames()) RegisterOp(reg, name);
    // The listener is first called for every existing op (already registered above: skipped as
    // having a PrivateUse1 kernel), then for every op defined later.
    reg.handles.push_back(d.addRegistrationListener(std::make_unique<LateOpListener>()));
    EnsureMetaKernels();
  });
  FlushPending();
}

}  // namespace internal

void SetParallelRanks(bool enabled) { internal::ParallelRanksFlag().store(enabled); }
bool ParallelRanks() { return internal::ParallelRanksFlag().load(); }

}  // namespace dtsim
