// MemoryMeter: measures how many bytes of tensor buffers every simulated rank holds, and each
// rank's peak, by attributing allocations to the rank whose work makes them.
//
// One process simulates every rank, so an allocation belongs to whichever rank's work is running:
// LocalTensor runs each rank's share of an operator, MapShards / MakeLocalTensor call their
// function, and the simulated collectives build each rank's output inside a RankScope(rank). While
// a MemoryMeter exists it wraps c10's CPU allocator (data runs) and Meta allocator (metadata-only
// runs: meta tensors allocate nothing, but their storages have a size), and counts every allocation
// made inside a RankScope against that rank until the buffer is freed. A replica that shares
// another rank's storage copy-on-write (ShareReplica in local_tensor.h) is charged in full to the
// rank receiving it, as a real rank would hold its own copy; the buffer it shares is charged to
// nobody. So the figures are what each rank of a real world would hold, whether the simulation
// shares storage or not, and whether it holds data or shapes.
//
// Example (8 ranks, S(0) -> R of a 16 x 4 float32 tensor: each rank holds 2 x 4 = 32 bytes, gathers
// 256):
//   MemoryMeter meter;
//   meter.BeginWindow();
//   DTensor out = dt.Redistribute(mesh, {Placement::Replicate()});
//   meter.Peak(3)   // 32 (its input shard) + 256 (the gathered tensor) = 288
//
// At most one meter at a time (InternalError otherwise). Not meant for multi-threaded rank work
// (the scope is per thread). The figures count tensor buffers only (no allocator rounding, no
// Python or C++ objects).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace dtsim {

// Allocations made on this thread while the scope lives are attributed to `rank` (-1: to no rank).
// Scopes nest.
class RankScope {
 public:
  explicit RankScope(int64_t rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int64_t saved_;
};

// One operator's run on one rank: while the scope lives, allocations count toward `rank`'s live
// bytes but its peak is taken when the scope ends, so workspace an operator allocates and frees
// before returning (a CPU kernel's per-thread buffers, say) is not counted as a peak — a metadata
// run, whose kernels have none, gives the same figures, and a device's workspace is its own matter.
// LocalTensor's per-rank kernel runs every op in one.
class OpBoundaryScope {
 public:
  explicit OpBoundaryScope(int64_t rank);
  ~OpBoundaryScope();
  OpBoundaryScope(const OpBoundaryScope&) = delete;
  OpBoundaryScope& operator=(const OpBoundaryScope&) = delete;

 private:
  int64_t rank_;
};

// The rank allocations are attributed to now (-1 outside any RankScope).
int64_t CurrentRankScope();

class MemoryMeter {
 public:
  MemoryMeter();
  ~MemoryMeter();
  MemoryMeter(const MemoryMeter&) = delete;
  MemoryMeter& operator=(const MemoryMeter&) = delete;

  // Starts a measurement window: every rank's peak restarts at its live bytes now.
  void BeginWindow();
  // Nested windows (a module inside a module): PushWindow starts one — every rank's peak restarts
  // at its live bytes, the enclosing window's peaks are kept aside; PopWindow ends the innermost
  // and returns each rank's peak within it (ranks 0..n-1 as seen so far), folding it into the
  // enclosing window's peaks, so Peak() afterwards is what it would have been without the nesting.
  void PushWindow();
  std::vector<int64_t> PopWindow();
  // Bytes `rank` holds now, and the most it held since the window began (0 for a rank never seen).
  int64_t Live(int64_t rank) const;
  int64_t Peak(int64_t rank) const;
  std::vector<int64_t> Peaks(const std::vector<int64_t>& ranks) const;

  // The installed meter, or nullptr.
  static MemoryMeter* Current();

  // Charges `rank` with the bytes of `replica`'s storage until that storage is freed (ShareReplica
  // calls it for every copy-on-write replica it makes).
  void ChargeReplica(int64_t rank, const at::Tensor& replica);
  // Called by ShareReplica before `source`'s storage becomes shared: the buffer a rank allocated is
  // from now on charged to it through `source`'s storage (until that is freed), not through the
  // buffer, which other ranks' replicas may keep alive longer.
  void ChargeAsShared(const at::Tensor& source);

  struct State;  // internal

 private:
  std::unique_ptr<State> state_;
};

}  // namespace dtsim
