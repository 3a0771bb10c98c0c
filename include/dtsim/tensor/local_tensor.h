// LocalTensor: an at::Tensor that holds one shard per rank of a rank set, so one process simulates
// a whole world.
//
// Any ATen operator called with LocalTensor arguments gives each rank the operator's result on that
// rank's shards (run once per rank, or once for all ranks where that gives the same bits:
// SetBatchedRanks below) and returns LocalTensors; plain tensors mixed in act as the same value on
// every rank. Shards may
// differ in shape per rank (uneven sharding, zero-size shards). See docs/local-tensor.md for how
// the dispatch works.
//
// The per-rank helpers below work on LocalTensors only. Code that must also run on real ranks
// (DTensor, the executor, traces) goes through the same-named methods of its Collectives object
// (collectives.h), which on a real backend run once, for that backend's rank.
//
// Example: 4 ranks, 9 rows sharded 3,3,3,0:
//   at::Tensor full = at::arange(18).reshape({9, 2});
//   at::Tensor lt = MakeLocalTensor({0, 1, 2, 3}, [&](int64_t r) {
//     return full.narrow(0, std::min<int64_t>(9, 3 * r), r < 3 ? 3 : 0);
//   });
//   at::Tensor doubled = lt * 2;                 // a LocalTensor; rank 3's shard is 0x2
//   LocalShard(doubled, 1)                       // rows 3..5 of full, times 2
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtsim {

class SimWorld;  // sim_world.h

// Wraps per-rank shards (same dtype and device on every rank; shapes may differ) into one
// LocalTensor. `ranks` are distinct global ranks, sorted ascending, one per shard. Throws
// InputError on a mismatch. The tensor belongs to `world` (its random generators and settings,
// sim_world.h); without one it gets a fresh world of its own. Ops and MapShards give their results
// the world of their LocalTensor inputs.
at::Tensor MakeLocalTensor(std::vector<int64_t> ranks, std::vector<at::Tensor> shards,
                           std::shared_ptr<SimWorld> world = nullptr);
// Builds the shard of each rank with `fn(rank)`.
at::Tensor MakeLocalTensor(const std::vector<int64_t>& ranks,
                           const std::function<at::Tensor(int64_t)>& fn,
                           std::shared_ptr<SimWorld> world = nullptr);

// The world a LocalTensor belongs to (InputError for a plain tensor). Example: seeding the ranks'
// random streams of `lt`'s world: WorldOf(lt)->SetSeed(7).
std::shared_ptr<SimWorld> WorldOf(const at::Tensor& t);

// True if `t` is a LocalTensor.
bool IsLocalTensor(const at::Tensor& t);
// The ranks a LocalTensor holds, ascending. InputError for a plain tensor.
std::vector<int64_t> LocalRanks(const at::Tensor& t);
// The shard of `rank`. InputError if `t` is not a LocalTensor or does not hold `rank`.
at::Tensor LocalShard(const at::Tensor& t, int64_t rank);

// Runs `fn(rank, shard)` for every rank `t` holds and wraps the results (InputError for a plain
// tensor); when fn returns every rank's own shard object unchanged, the result is `t` itself.
at::Tensor MapShards(const at::Tensor& t,
                     const std::function<at::Tensor(int64_t, const at::Tensor&)>& fn);

// While one lives on this thread, MapShards (both forms, and Collectives::MapShards in a
// simulation) may call its function for several ranks at once, on the threads SetParallelRanks
// uses for ops, each call in its rank's RankScope and with this thread's autograd and dispatch
// state. For functions safe to call concurrently for different ranks: they only read what they
// capture and call ATen ops on the shards, drawing no random numbers (fully_shard's copies into
// and out of its flat all-gather and reduce-scatter buffers, a redistribution's pads, unpads and
// local splits). Scopes nest; ParallelShardFnsScope(false) switches it off again inside (around
// callbacks to code that does not promise the same, such as observers).
class ParallelShardFnsScope {
 public:
  explicit ParallelShardFnsScope(bool enabled = true);
  ~ParallelShardFnsScope();
  ParallelShardFnsScope(const ParallelShardFnsScope&) = delete;
  ParallelShardFnsScope& operator=(const ParallelShardFnsScope&) = delete;

 private:
  bool saved_;
};

// The shards of `t` in LocalRanks(t) order (InputError for a plain tensor).
std::vector<at::Tensor> LocalShards(const at::Tensor& t);

// The tensor_map of several tensors: runs `fn(rank, shards)` for every rank, where shards[k] is
// tensors[k]'s shard (a plain tensor stands for every rank), and wraps the results. All
// LocalTensors must hold the same ranks, and at least one must be a LocalTensor (InputError
// otherwise). Example: MapShards({a, b}, [](int64_t r, const auto& s) { return s[0] * r + s[1]; }).
at::Tensor MapShards(const std::vector<at::Tensor>& tensors,
                     const std::function<at::Tensor(int64_t, const std::vector<at::Tensor>&)>& fn);

// The value of a (possibly per-rank) integer for `rank`: sym_size(d) of an uneven LocalTensor is
// one value per rank. Example: rows 3,3,3,0 → LocalInt(lt.sym_size(0), 3) == 0. A plain SymInt
// returns its value for any rank.
int64_t LocalInt(const c10::SymInt& value, int64_t rank);
// A per-rank integer (a plain SymInt when all values agree). InputError when the lengths differ.
c10::SymInt MakeLocalInt(const std::vector<int64_t>& ranks, std::vector<int64_t> values);

// A copy of `shard` for another rank that shares its storage until one of them is written
// (copy-on-write, c10's lazy clone): reads stay shared; the first write to either one — an in-place
// or out= op, a write through a view — gives that one a storage of its own first, so the other
// ranks keep their values, and views of a replica follow their own rank's storage. The simulated
// collectives give the ranks of a group their common result this way (all_gather, all_reduce,
// broadcast), and DistributeTensor its replicas: S(0) -> R over 8 ranks holds the gathered tensor
// once, not 8 times. Meta tensors (metadata-only runs) get a new meta tensor of the same sizes and
// strides. A real copy where storage cannot be shared: sharing switched off in `world`
// (SimWorld::SetReplicaSharing; null: on), a tensor on neither the CPU nor a CUDA device, or an
// allocator whose data pointers carry a context. A MemoryMeter charges the replica in full to
// CurrentRankScope().
at::Tensor ShareReplica(const at::Tensor& shard, const SimWorld* world = nullptr);
// True while `shard`'s storage is copy-on-write: a replica (or the tensor it was made from) that
// has not been written since. (The last holder of a shared buffer stays copy-on-write until it
// writes; its write then copies nothing.)
bool IsSharedReplica(const at::Tensor& shard);

// Checks that every shard is equal (same shape and values) and returns a plain copy of that one
// value; on a plain tensor returns it unchanged. InputError naming the first two differing ranks
// and their values otherwise.
at::Tensor Reconcile(const at::Tensor& t);

// "LocalTensor(0: [[0, 1], [2, 3]], 1: [])" for a LocalTensor; the nested value list for a plain
// tensor. Integral/bool dtypes print as integers, floating ones with up to 8 significant digits; at
// most 1000 values a shard.
std::string ToString(const at::Tensor& t);
// The nested value list of one plain tensor, as used by ToString: "[[0, 1], [2, 3]]".
std::string ShardToString(const at::Tensor& shard);

// Per-rank random numbers: each rank draws from its own generator of the tensor's world
// (SimWorld::SetSeed in sim_world.h).

// Whether an operator on LocalTensors runs its ranks on several threads at once (LibTorch's
// intra-op OpenMP threads, each rank's ATen call on one thread, the ranks split into contiguous
// blocks) instead of one rank after the other with every call using those threads itself. On by
// default; the environment variable DTSIM_PARALLEL_RANKS=0 switches it off at start. Either way the
// per-rank calls, their arguments, the memory each rank is charged and every random value are the
// same: ops that draw random numbers, views, ops on meta tensors, writes to a copy-on-write replica
// or to a storage several ranks share, and ops outside aten:: always run the ranks one after the
// other (local_kernel.cc says why), as do ops with little work per rank and every op while the
// machine has more runnable threads than CPUs (local_tensor_impl.h: MachineBusy). Results equal the
// serial run's bit for bit except where a kernel's own summation order depends on its thread count
// (a reduction over more than 32,768 elements, a large matrix product), as between any two thread
// settings of LibTorch. Process-wide; set it before running ops, not while they run.
void SetParallelRanks(bool enabled);
bool ParallelRanks();

// Whether an operator may run ONCE for all ranks instead of once per rank (docs/local-tensor.md,
// "Batched ranks"): as one ATen call over the ranks' shards stacked along a leading dim, or once
// for ranks that all hold one replica. Only where every rank's result is bit for bit what its own
// call gives: a table of elementwise ops, shards that already lie in one buffer at a constant
// distance, no per-rank sizes. On by default; DTSIM_BATCHED_RANKS=0 switches it off at start.
// Process-wide; set it before running ops, not while they run.
void SetBatchedRanks(bool enabled);
bool BatchedRanks();

// How the last LocalTensor operator on this thread ran: "aten::add.Tensor: batched (one call over
// 8 stacked shards)", "...: computed once (every rank holds the same replica)", or "...: per rank
// (uneven shards)" with the reason it was not batched. Empty before the first.
std::string LastRankExecution();

// How many LocalTensor operators ran each way since the process started (all threads).
struct RankExecutionCounts {
  int64_t batched = 0;        // one call over stacked shards
  int64_t computed_once = 0;  // one call for ranks holding one replica
  int64_t per_rank = 0;       // one call per rank
};
RankExecutionCounts GetRankExecutionCounts();

// A LocalTensor over `ranks` whose rank ranks[i] holds stacked[i]: a view of `stacked`, which
// stays the tensors' one storage (writes to a shard show in `stacked`). `stacked` needs a leading
// dim of ranks.size(); InputError otherwise, or for ranks not distinct and ascending.
at::Tensor MakeStackedLocalTensor(std::vector<int64_t> ranks, const at::Tensor& stacked,
                                  std::shared_ptr<SimWorld> world = nullptr);

}  // namespace dtsim
