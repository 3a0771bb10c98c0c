// LocalTensor: an at::Tensor that holds one shard per rank of a rank set, so one process simulates a whole world.
//
// Any ATen operator called with LocalTensor arguments runs once per rank on that rank's shards and returns
// LocalTensors; plain tensors mixed in act as the same value on every rank. Shards may differ in shape per rank
// (uneven sharding, zero-size shards). See docs/local-tensor.md for how the dispatch works.
//
// The per-rank helpers below are also what DTensor code uses to compute per-rank quantities: on a real backend (MPI,
// NCCL) the "LocalTensor" is this process's plain tensor and the helpers run the function once, for the current rank.
//
// Example: 4 ranks, 9 rows sharded 3,3,3,0:
//   at::Tensor full = at::arange(18).reshape({9, 2});
//   at::Tensor lt = MakeLocalTensor({0, 1, 2, 3}, [&](int64_t r) { return full.narrow(0, std::min<int64_t>(9, 3 * r),
//                                                                        r < 3 ? 3 : 0); });
//   at::Tensor doubled = lt * 2;                 // a LocalTensor; rank 3's shard is 0x2
//   LocalShard(doubled, 1)                       // rows 3..5 of full, times 2
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace dtsim {

// Wraps per-rank shards (same dtype and device on every rank; shapes may differ) into one LocalTensor.
// `ranks` are distinct global ranks, sorted ascending, one per shard. Throws InputError on a mismatch.
at::Tensor MakeLocalTensor(std::vector<int64_t> ranks, std::vector<at::Tensor> shards);
// Builds the shard of each rank with `fn(rank)`.
at::Tensor MakeLocalTensor(const std::vector<int64_t>& ranks, const std::function<at::Tensor(int64_t)>& fn);

// True if `t` is a LocalTensor.
bool IsLocalTensor(const at::Tensor& t);
// The ranks a LocalTensor holds, ascending. For a plain tensor: {CurrentRank()}.
std::vector<int64_t> LocalRanks(const at::Tensor& t);
// The shard of `rank`. For a plain tensor: the tensor itself if rank == CurrentRank(). InputError if not held.
at::Tensor LocalShard(const at::Tensor& t, int64_t rank);

// Runs `fn(rank, shard)` for every rank `t` holds and wraps the results; on a plain tensor runs it once for
// CurrentRank() and returns the plain result.
at::Tensor MapShards(const at::Tensor& t, const std::function<at::Tensor(int64_t, const at::Tensor&)>& fn);

// The rank of this process on a real backend (MPI/NCCL set it at start-up); 0 when simulating.
int64_t CurrentRank();
void SetCurrentRank(int64_t rank);

}  // namespace dtsim
