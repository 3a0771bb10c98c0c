// A caching CPU allocator for large blocks: a simulation writes every rank's copy of large tensors
// into fresh memory again and again (an all_gather of 8 ranks x 16 MiB allocates and frees 1 GiB),
// and with the system allocator each of those blocks is mapped, page-faulted and zeroed by the
// kernel every time. dtsim keeps freed large blocks (>= 1 MiB, rounded up to 2 MiB, backed by
// transparent huge pages) and hands them out again for requests of the same size, as PyTorch's CUDA
// caching allocator does for device memory. Small blocks go to c10's default allocator.
//
// Opt-in and process-wide (it replaces c10's CPU allocator): the dtsim command line and the
// redistribute benchmark enable it; library users call EnableCachingCpuAllocator() themselves. The
// cache is bounded; when an allocation fails the cache is emptied and the allocation retried.
#pragma once

#include <cstdint>

namespace dtsim {

// Installs the caching allocator as c10's CPU allocator (idempotent). `max_cached_bytes` bounds the
// memory kept for reuse; <= 0 means a quarter of the machine's memory. Also tunes glibc's heap for
// a simulation's many small objects (freed heap memory is kept up to 256 MiB rather than returned
// and faulted in again; blocks from 1 MiB use mmap).
void EnableCachingCpuAllocator(int64_t max_cached_bytes = 0);

struct CachingAllocatorStats {
  int64_t hits = 0;          // large allocations served from the cache
  int64_t misses = 0;        // large allocations that needed new memory
  int64_t cached_bytes = 0;  // bytes held for reuse now
};

// Counters of the caching allocator (all zero before it is enabled).
CachingAllocatorStats GetCachingAllocatorStats();

// Frees every cached block (the memory goes back to the system).
void EmptyCachingAllocatorCache();

}  // namespace dtsim
