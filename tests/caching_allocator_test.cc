// The caching CPU allocator: freed large blocks come back for the same size, small ones are
// untouched, the cache is bounded and can be emptied, and tensors on cached memory behave as any
// tensor.
#include "dtsim/tensor/caching_allocator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace dtsim {
namespace {

TEST(CachingAllocatorTest, ReusesFreedLargeBlocksOfTheSameSize) {
  EnableCachingCpuAllocator(/*max_cached_bytes=*/int64_t{64} << 20);
  EmptyCachingAllocatorCache();
  const CachingAllocatorStats before = GetCachingAllocatorStats();
  void* first = nullptr;
  {
    at::Tensor t = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    first = t.data_ptr();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (2 << 20), 0u);  // huge-page aligned
  }
  EXPECT_EQ(GetCachingAllocatorStats().cached_bytes, 4 << 20);
  {
    at::Tensor again = at::empty({1 << 20}, at::kFloat);
    EXPECT_EQ(again.data_ptr(), first);
    again.fill_(3);
    EXPECT_EQ(again.sum().item<double>(), 3.0 * (1 << 20));
    at::Tensor other = at::empty({3 << 20}, at::kFloat);  // 12 MiB: not in the cache
    EXPECT_NE(other.data_ptr(), first);
  }
  const CachingAllocatorStats after = GetCachingAllocatorStats();
  EXPECT_EQ(after.hits - before.hits, 1);
  EXPECT_EQ(after.misses - before.misses, 2);
  EXPECT_EQ(after.cached_bytes, (4 + 12) << 20);
  // Small blocks go to the default allocator: no change in the counters.
  { at::Tensor small = at::ones({16}); }
  EXPECT_EQ(GetCachingAllocatorStats().misses, after.misses);
  // The bound: a block larger than the limit is freed, not kept.
  { at::Tensor huge = at::empty({int64_t{20} << 20}, at::kFloat); }  // 80 MiB > 64 MiB
  EXPECT_EQ(GetCachingAllocatorStats().cached_bytes, (4 + 12) << 20);
  EmptyCachingAllocatorCache();
  EXPECT_EQ(GetCachingAllocatorStats().cached_bytes, 0);
}

}  // namespace
}  // namespace dtsim

namespace dtsim {
namespace {

// Kernels take scratch memory with raw_allocate / raw_deallocate (gelu on a large tensor did and
// aborted with "d INTERNAL ASSERT FAILED" before the allocator had a raw deleter): small and cached
// blocks both go back.
TEST(CachingAllocatorTest, RawAllocateAndDeallocateSmallAndLargeBlocks) {
  EnableCachingCpuAllocator(/*max_cached_bytes=*/int64_t{64} << 20);
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CPU);
  for (size_t bytes : {size_t{64}, size_t{4} << 20}) {
    void* p = allocator->raw_allocate(bytes);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, bytes);
    allocator->raw_deallocate(p);
  }
  at::Tensor x = at::randn({1024, 1024});
  at::Tensor y = at::gelu(x);
  EXPECT_TRUE(at::allclose(y, 0.5 * x * (1 + at::erf(x / std::sqrt(2.0))), 1e-5, 1e-5));
}

}  // namespace
}  // namespace dtsim
