// MemoryMeter (see include/dtsim/tensor/memory_meter.h): rank scopes, the allocator wrappers that
// attribute allocations to ranks, and the per-rank counters.
//
// While a meter exists, c10's CPU and Meta allocators are wrapped (installed at priority 2, the
// priority of dtsim's caching allocator, and put back when the meter goes). A wrapped CPU
// allocation keeps a "simple" data pointer (context == data, which copy-on-write storages need) and
// remembers its rank and size in a table keyed by the pointer; a meta allocation (no data) carries
// its record as the context. Records outlive the meter that made them: a buffer freed after its
// meter is gone is simply freed. Replicas (copy-on-write) are charged through a weak pointer to
// their storage, checked whenever the rank's count is about to grow, so every peak is exact.
#include "dtsim/tensor/memory_meter.h"

#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace {

thread_local int64_t g_rank_scope = -1;
thread_local int g_boundary_depth = 0;  // OpBoundaryScope nesting on this thread

constexpr uint8_t kAllocatorPriority = 2;  // as EnableCachingCpuAllocator

}  // namespace

RankScope::RankScope(int64_t rank) : saved_(g_rank_scope) { g_rank_scope = rank; }
RankScope::~RankScope() { g_rank_scope = saved_; }

int64_t CurrentRankScope() { return g_rank_scope; }

struct MemoryMeter::State {
  struct Replica {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
    int64_t bytes;
  };
  struct Counter {
    int64_t live = 0;
    int64_t peak = 0;
    std::vector<Replica> replicas;
  };

  mutable std::mutex mu;
  mutable std::vector<Counter> counters;          // by rank
  std::vector<std::vector<int64_t>> saved_peaks;  // PushWindow's stack: the enclosing peaks
  uint64_t generation = 0;

  Counter& At(int64_t rank) const {
    if (static_cast<size_t>(rank) >= counters.size()) counters.resize(rank + 1);
    return counters[rank];
  }
  // Drops the replicas whose storage is gone.
  static void Purge(Counter& c) {
    auto dead = std::remove_if(c.replicas.begin(), c.replicas.end(), [&](const Replica& r) {
      if (!r.storage.expired()) return false;
      c.live -= r.bytes;
      return true;
    });
    c.replicas.erase(dead, c.replicas.end());
  }
  void Add(int64_t rank, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    Counter& c = At(rank);
    Purge(c);
    c.live += bytes;
    if (g_boundary_depth == 0) c.peak = std::max(c.peak, c.live);
  }
  // The end of an operator: its outputs count toward the peak, its freed workspace does not.
  void Settle(int64_t rank) {
    std::lock_guard<std::mutex> lock(mu);
    Counter& c = At(rank);
    Purge(c);
    c.peak = std::max(c.peak, c.live);
  }
  void Sub(int64_t rank, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    At(rank).live -= bytes;
  }
};

namespace {

std::mutex g_meter_mu;  // guards g_meter changes
std::atomic<MemoryMeter::State*> g_state{nullptr};
std::atomic<MemoryMeter*> g_meter{nullptr};
std::atomic<uint64_t> g_generation{0};

// Counts an allocation of `bytes` made now; returns the generation to remember (0: not counted).
uint64_t CountAllocation(int64_t rank, size_t bytes) {
  MemoryMeter::State* s = g_state.load(std::memory_order_acquire);
  if (s == nullptr || rank < 0 || bytes == 0) return 0;
  s->Add(rank, static_cast<int64_t>(bytes));
  return s->generation;
}

void CountFree(uint64_t generation, int64_t rank, size_t bytes) {
  if (generation == 0) return;
  std::lock_guard<std::mutex> lock(g_meter_mu);  // the meter may be going away
  MemoryMeter::State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr && s->generation == generation) s->Sub(rank, static_cast<int64_t>(bytes));
}

// The CPU allocator wrapper.
class MeteredCpuAllocator final : public c10::Allocator {
 public:
  void set_inner(c10::Allocator* inner) { inner_ = inner; }
  c10::Allocator* inner() const { return inner_; }

  // Takes the allocation at `p` off its rank (returns the rank and bytes it had, or {-1, 0}).
  std::pair<int64_t, size_t> Detach(const void* p, uint64_t generation) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(const_cast<void*>(p));
    if (it == records_.end() || it->second.generation != generation || it->second.rank < 0)
      return {-1, 0};
    const std::pair<int64_t, size_t> was{it->second.rank, it->second.bytes};
    it->second.rank = -1;
    it->second.generation = 0;
    return was;
  }

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* p = inner.get();
    if (p == nullptr || n == 0) return inner;
    const int64_t rank = CurrentRankScope();
    const uint64_t generation = CountAllocation(rank, n);
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(mu_);
      records_.emplace(p, Record{rank, n, generation, std::move(inner)});
    }
    return c10::DataPtr(p, p, &Free, device);
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

 private:
  struct Record {
    int64_t rank;
    size_t bytes;
    uint64_t generation;
    c10::DataPtr inner;  // frees the memory when destroyed
  };

  static void Free(void* p);

  c10::Allocator* inner_ = nullptr;
  std::mutex mu_;
  std::unordered_map<void*, Record> records_;
};

// The Meta allocator wrapper: no data, the record is the context.
class MeteredMetaAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const int64_t rank = CurrentRankScope();
    const uint64_t generation = CountAllocation(rank, n);
    if (generation == 0) return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::Meta));
    return c10::DataPtr(nullptr, new Record{rank, n, generation}, &Free,
                        c10::Device(c10::DeviceType::Meta));
  }
  void copy_data(void*, const void*, std::size_t) const override {}

 private:
  struct Record {
    int64_t rank;
    size_t bytes;
    uint64_t generation;
  };
  static void Free(void* ctx) {
    auto* r = static_cast<Record*>(ctx);
    CountFree(r->generation, r->rank, r->bytes);
    delete r;
  }
};

// Never destroyed: buffers they handed out may be freed at any time, even during static
// destruction.
MeteredCpuAllocator* g_cpu = new MeteredCpuAllocator();
MeteredMetaAllocator* g_meta = new MeteredMetaAllocator();
c10::Allocator* g_meta_inner = nullptr;

void MeteredCpuAllocator::Free(void* p) {
  Record record{-1, 0, 0, c10::DataPtr()};
  {
    std::lock_guard<std::mutex> lock(g_cpu->mu_);
    auto it = g_cpu->records_.find(p);
    DTSIM_CHECK(it != g_cpu->records_.end(), "memory meter: free of an unknown block");
    record = std::move(it->second);
    g_cpu->records_.erase(it);
  }
  CountFree(record.generation, record.rank, record.bytes);
  // record.inner frees the memory here.
}

}  // namespace

MemoryMeter::MemoryMeter() : state_(std::make_unique<State>()) {
  std::lock_guard<std::mutex> lock(g_meter_mu);
  DTSIM_CHECK(g_state.load() == nullptr, "only one MemoryMeter may exist at a time");
  state_->generation = ++g_generation;
  g_cpu->set_inner(c10::GetAllocator(c10::DeviceType::CPU));
  c10::SetAllocator(c10::DeviceType::CPU, g_cpu, kAllocatorPriority);
  g_meta_inner = c10::GetAllocator(c10::DeviceType::Meta);
  c10::SetAllocator(c10::DeviceType::Meta, g_meta, kAllocatorPriority);
  g_state.store(state_.get(), std::memory_order_release);
  g_meter.store(this, std::memory_order_release);
}

MemoryMeter::~MemoryMeter() {
  std::lock_guard<std::mutex> lock(g_meter_mu);
  g_meter.store(nullptr, std::memory_order_release);
  g_state.store(nullptr, std::memory_order_release);
  if (c10::GetAllocator(c10::DeviceType::CPU) == g_cpu) {
    c10::SetAllocator(c10::DeviceType::CPU, g_cpu->inner(), kAllocatorPriority);
  }
  if (c10::GetAllocator(c10::DeviceType::Meta) == g_meta) {
    c10::SetAllocator(c10::DeviceType::Meta, g_meta_inner, kAllocatorPriority);
  }
}

MemoryMeter* MemoryMeter::Current() { return g_meter.load(std::memory_order_acquire); }

void MemoryMeter::BeginWindow() {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (State::Counter& c : state_->counters) {
    State::Purge(c);
    c.peak = c.live;
  }
}

void MemoryMeter::PushWindow() {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<int64_t> saved;
  saved.reserve(state_->counters.size());
  for (State::Counter& c : state_->counters) {
    State::Purge(c);
    saved.push_back(c.peak);
    c.peak = c.live;
  }
  state_->saved_peaks.push_back(std::move(saved));
}

std::vector<int64_t> MemoryMeter::PopWindow() {
  std::lock_guard<std::mutex> lock(state_->mu);
  DTSIM_CHECK(!state_->saved_peaks.empty(), "MemoryMeter::PopWindow without PushWindow");
  std::vector<int64_t> saved = std::move(state_->saved_peaks.back());
  state_->saved_peaks.pop_back();
  std::vector<int64_t> inner;
  inner.reserve(state_->counters.size());
  for (size_t r = 0; r < state_->counters.size(); ++r) {
    State::Counter& c = state_->counters[r];
    inner.push_back(c.peak);
    if (r < saved.size()) c.peak = std::max(c.peak, saved[r]);
  }
  return inner;
}

int64_t MemoryMeter::Live(int64_t rank) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (rank < 0 || static_cast<size_t>(rank) >= state_->counters.size()) return 0;
  State::Counter& c = state_->counters[rank];
  State::Purge(c);
  return c.live;
}

int64_t MemoryMeter::Peak(int64_t rank) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (rank < 0 || static_cast<size_t>(rank) >= state_->counters.size()) return 0;
  return state_->counters[rank].peak;
}

std::vector<int64_t> MemoryMeter::Peaks(const std::vector<int64_t>& ranks) const {
  std::vector<int64_t> out;
  out.reserve(ranks.size());
  for (int64_t r : ranks) out.push_back(Peak(r));
  return out;
}

void MemoryMeter::ChargeAsShared(const at::Tensor& source) {
  if (!source.has_storage() || source.is_meta()) return;
  const auto [rank, bytes] = g_cpu->Detach(source.storage().data(), state_->generation);
  if (rank < 0) return;
  state_->Sub(rank, static_cast<int64_t>(bytes));
  ChargeReplica(rank, source);
}

void MemoryMeter::ChargeReplica(int64_t rank, const at::Tensor& replica) {
  if (rank < 0 || !replica.has_storage()) return;
  const c10::Storage& storage = replica.storage();
  const int64_t bytes = static_cast<int64_t>(storage.nbytes());
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Counter& c = state_->At(rank);
  State::Purge(c);
  c.replicas.push_back({storage.getWeakStorageImpl(), bytes});
  c.live += bytes;
  c.peak = std::max(c.peak, c.live);
}

OpBoundaryScope::OpBoundaryScope(int64_t rank) : rank_(rank) { ++g_boundary_depth; }
OpBoundaryScope::~OpBoundaryScope() {
  if (--g_boundary_depth != 0 || rank_ < 0) return;
  std::lock_guard<std::mutex> lock(g_meter_mu);
  if (MemoryMeter::State* s = g_state.load(std::memory_order_acquire)) s->Settle(rank_);
}

}  // namespace dtsim
