// The caching CPU allocator (see include/dtsim/tensor/caching_allocator.h).
#include "dtsim/tensor/caching_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

namespace dtsim {
namespace {

constexpr size_t kMinCached = size_t{1} << 20;  // blocks below 1 MiB go to the default allocator
constexpr size_t kGranule = size_t{2} << 20;    // one transparent huge page

class CachingCpuAllocator final : public c10::Allocator {
 public:
  CachingCpuAllocator(c10::Allocator* fallback, int64_t limit)
      : fallback_(fallback), limit_(limit) {}

  c10::DataPtr allocate(size_t n) override {
    if (n < kMinCached) return fallback_->allocate(n);
    const size_t size = (n + kGranule - 1) / kGranule * kGranule;
    void* p = TakeCached(size);
    if (p == nullptr) p = Fresh(size);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.emplace(p, size);
    }
    // A "simple" data pointer (context == data): c10's copy-on-write storages (at::_lazy_clone,
    // which LocalTensor replicas use) only accept those. The block size is looked up on release.
    return c10::DataPtr(p, p, &Release, c10::Device(c10::DeviceType::CPU));
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // Kernels that take scratch memory with raw_allocate (gelu's vectorised path, for one) free it
  // through this: a cached block goes back to the cache, a small one to the default allocator it
  // came from.
  c10::DeleterFnPtr raw_deleter() const override { return &RawRelease; }

  CachingAllocatorStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {hits_, misses_, cached_};
  }

  void EmptyCache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, p] : free_) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  static void Release(void* p);
  static void RawRelease(void* p);

  // True if `p` is a block this allocator handed out (not a small one of the fallback).
  bool IsLive(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.count(p) != 0;
  }

  void GiveLive(void* p) {
    size_t size = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(p);
      TORCH_CHECK(it != live_.end(), "dtsim caching allocator: release of an unknown block");
      size = it->second;
      live_.erase(it);
    }
    Give(p, size);
  }

  void* TakeCached(size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it == free_.end()) {
      ++misses_;
      return nullptr;
    }
    void* p = it->second;
    free_.erase(it);
    cached_ -= static_cast<int64_t>(size);
    ++hits_;
    return p;
  }

  void* Fresh(size_t size) {
    void* p = nullptr;
    if (posix_memalign(&p, kGranule, size) != 0) {
      EmptyCache();  // give the cached blocks back and try once more
      if (posix_memalign(&p, kGranule, size) != 0) {
        TORCH_CHECK_WITH(OutOfMemoryError, false, "dtsim caching allocator: cannot allocate ", size,
                         " bytes");
      }
    }
    madvise(p, size, MADV_HUGEPAGE);
    return p;
  }

  // Keeps a freed block for reuse, evicting older blocks (largest first) to stay within the limit.
  void Give(void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(size) > limit_) {
      std::free(p);
      return;
    }
    while (cached_ + static_cast<int64_t>(size) > limit_ && !free_.empty()) {
      auto last = std::prev(free_.end());
      std::free(last->second);
      cached_ -= static_cast<int64_t>(last->first);
      free_.erase(last);
    }
    free_.emplace(size, p);
    cached_ += static_cast<int64_t>(size);
  }

  c10::Allocator* fallback_;
  const int64_t limit_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> live_;  // blocks handed out: their rounded size
  int64_t cached_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

CachingCpuAllocator* g_allocator =
    nullptr;  // never destroyed: tensors may outlive static destruction
std::once_flag g_once;

void CachingCpuAllocator::Release(void* p) { g_allocator->GiveLive(p); }

void CachingCpuAllocator::RawRelease(void* p) {
  if (g_allocator->IsLive(p)) {
    g_allocator->GiveLive(p);
  } else {
    g_allocator->fallback_->raw_deleter()(p);
  }
}

}  // namespace

void EnableCachingCpuAllocator(int64_t max_cached_bytes) {
  std::call_once(g_once, [max_cached_bytes] {
    // The small objects of a simulation (tensor headers, per-rank vectors: megabytes per step in a
    // world of 4,096 ranks) are freed and allocated again step after step: keep freed heap memory
    // instead of giving the top of the heap back to the system and page-faulting it in again (10%
    // of a metadata-only run of 4,096 ranks). Blocks of 1 MiB and more still come from mmap (and
    // large tensors from the cache below), so little is kept this way.
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 16 << 20);
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    int64_t limit = max_cached_bytes;
    if (limit <= 0)
      limit = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / 4;
    g_allocator = new CachingCpuAllocator(c10::GetDefaultCPUAllocator(), limit);
    c10::SetCPUAllocator(g_allocator, /*priority=*/2);
  });
}

CachingAllocatorStats GetCachingAllocatorStats() {
  return g_allocator ? g_allocator->Stats() : CachingAllocatorStats{};
}

void EmptyCachingAllocatorCache() {
  if (g_allocator) g_allocator->EmptyCache();
}

}  // namespace dtsim
