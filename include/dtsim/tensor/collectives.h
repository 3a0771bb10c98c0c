// Collectives: the narrow interface through which DTensor communicates, and the one place that
// knows how a process holds its ranks' data.
//
// A Collectives object speaks for the ranks this process holds: every rank of the world in
// simulation (the local data is a LocalTensor with one shard per rank), or exactly one rank on a
// real backend (the local data is this process's plain tensor). It owns that identity —
// `world_size()`, `simulated()`, `rank()` — so nothing in dtsim reads a process-global rank, and
// ranks could as well run as threads of one process, each with its own object.
//
// Every collective call is SPMD: it runs on every group of a GroupSet at once (as every group along
// one mesh dim does), and `input` holds what each held rank contributes. The public calls are a
// non-virtual front that does, once for every backend: argument validation (clear InputErrors),
// byte accounting, the event for the observers (a CollectiveEvent with one row per held rank, the
// measured time on real backends) and, on real backends, the agreement check before the call.
// Backends implement only the Do* hooks, after validation:
// clang-format off
//   src/backends/local/  LocalCollectives (backends/local_collectives.h): results computed over
//                        the shards, the reference every other backend is tested against
//   src/backends/mpi/    MpiCollectives (backends/mpi_collectives.h): OpenMPI, one process per rank
//   src/backends/nccl/   NcclCollectives (backends/nccl_collectives.h): NCCL on one GPU per rank
// clang-format on
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/layout/fault.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"
#include "dtsim/trace/collective_event.h"

namespace dtsim {

class SimWorld;  // sim_world.h

// Disjoint groups of global ranks that run one collective together. Group-relative rank i is
// groups[g][i].
struct GroupSet {
  std::vector<std::vector<int64_t>> groups;

  // Every group along mesh dim `dim`: mesh (2,4), dim 1 → {0,1,2,3}, {4,5,6,7}.
  static GroupSet AlongMeshDim(const DeviceMesh& mesh, int64_t dim);
  // One group of the given ranks.
  static GroupSet Of(std::vector<int64_t> ranks);
  // "[[0, 1, 2, 3], [4, 5, 6, 7]]"
  std::string ToString() const;
  bool operator==(const GroupSet& o) const { return groups == o.groups; }
  bool operator<(const GroupSet& o) const { return groups < o.groups; }
};

// What the front worked out for one call, handed to the backend hooks.
struct CallInfo {
  CollectiveKind kind = CollectiveKind::kNone;
  const GroupSet* groups = nullptr;
  std::vector<int64_t> held;      // ranks this process holds for this call, ascending
  std::vector<int64_t> group;     // per held rank: index of its group in *groups, or -1
  std::vector<int64_t> position;  // per held rank: its index within that group
  int64_t sequence = 0;  // calls made on this object so far (the agreement check compares it)
  bool wrong_op =
      false;  // a wrong-op fault strikes this rank in this call (backends reduce in order then)
};

class Collectives {
 public:
  using ShardFn = std::function<at::Tensor(int64_t rank, const at::Tensor& shard)>;
  using ShardsFn = std::function<at::Tensor(int64_t rank, const std::vector<at::Tensor>& shards)>;
  // Split sizes along dim 0 per global rank for AllToAllSingle; an empty map means "split evenly".
  using SplitSizes = std::map<int64_t, std::vector<int64_t>>;

  virtual ~Collectives() = default;

  // ---- who this process is ----
  // "local", "mpi", "nccl".
  const std::string& backend() const { return backend_; }
  // Ranks of the world (simulated: 0 when the world is whatever ranks the inputs hold).
  int64_t world_size() const { return world_size_; }
  // True when this process holds every rank (simulation).
  bool simulated() const { return !rank_.has_value(); }
  // This process's rank on a real backend (InternalError when simulated).
  int64_t rank() const;
  // The simulated world's state (random generators, replica sharing; sim_world.h) that FromRankFn
  // gives the LocalTensors it makes; nullptr on a real backend.
  virtual std::shared_ptr<SimWorld> sim_world() const { return nullptr; }

  // ---- per-rank data: the only code that knows whether local data is a LocalTensor or a plain
  // tensor ---- The ranks `local` holds: a LocalTensor's ranks in simulation, {rank()} on a real
  // backend.
  std::vector<int64_t> HeldRanks(const at::Tensor& local) const;
  // The shard of `rank` (InputError if `local` does not hold it).
  at::Tensor Shard(const at::Tensor& local, int64_t rank) const;
  // Runs fn(rank, shard) for every held rank and wraps the results the same way.
  at::Tensor MapShards(const at::Tensor& local, const ShardFn& fn) const;
  // The tensor_map of several local tensors (plain tensors among them stand for every rank in
  // simulation).
  at::Tensor MapShards(const std::vector<at::Tensor>& locals, const ShardsFn& fn) const;
  // Local data built by fn(rank) for each of `ranks` this process holds: a LocalTensor over `ranks`
  // in simulation, fn(rank()) on a real backend (which must be one of `ranks`).
  at::Tensor FromRankFn(const std::vector<int64_t>& ranks,
                        const std::function<at::Tensor(int64_t)>& fn) const;

  // ---- the collectives (validated, accounted and recorded here; computed by the backend) ----
  // Concatenates the inputs of each group along `dim` → every rank of the group gets the
  // concatenation, in group order. Every rank of a group must have the same shape and dtype
  // (InputError otherwise); uneven shards are padded by the caller (DTensor) first. Example: group
  // {0,1}, inputs 2x3 each, dim 0 → both ranks get 4x3.
  at::Tensor AllGather(const at::Tensor& input, const GroupSet& groups, int64_t dim);
  // Reduces the inputs of each group with `op`, then rank i of the group keeps chunk i along `dim`
  // (the size along `dim` must divide evenly by the group size).
  at::Tensor ReduceScatter(const at::Tensor& input, const GroupSet& groups, ReduceOp op,
                           int64_t dim);
  // Every rank of a group gets the reduction of the group's inputs (in group-rank order: x0 op x1
  // op ...).
  at::Tensor AllReduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op);
  // Shard-dim all-to-all: each rank splits its input evenly along `split_dim` into group-size
  // pieces, sends piece j to group rank j, and concatenates what it receives along `concat_dim` in
  // group order.
  at::Tensor AllToAll(const at::Tensor& input, const GroupSet& groups, int64_t split_dim,
                      int64_t concat_dim);
  // Every rank of a group gets the input of group rank `src`.
  at::Tensor Broadcast(const at::Tensor& input, const GroupSet& groups, int64_t src);
  // Group rank `dst` gets the reduction of the group's inputs; the other ranks keep their input
  // unchanged.
  at::Tensor Reduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op, int64_t dst);
  // All-to-all along dim 0 with per-rank split sizes (torch's all_to_all_single): rank g's input is
  // cut into group-size pieces of input_split_sizes[g] rows (summing to its dim 0), piece j goes to
  // group rank j, and each rank concatenates what it receives in group order. `output_split_sizes`,
  // when given, must equal what the senders send (output_split_sizes[g][j] ==
  // input_split_sizes[group[j]][index of g]); InputError otherwise. Example: group {0,1}, rank 0
  // splits 5 rows as {2,3}, rank 1 splits 1 row as {1,0} → rank 0 gets 2+1 rows, rank 1 gets 3+0
  // rows. A real rank needs only its own entries (and, without output sizes, learns the rest).
  at::Tensor AllToAllSingle(const at::Tensor& input, const GroupSet& groups,
                            const SplitSizes& input_split_sizes,
                            const SplitSizes& output_split_sizes);
  // Group rank `src`'s input is split evenly along `dim` into group-size chunks; group rank i gets
  // chunk i (the other ranks' inputs are ignored). The size along `dim` must divide by the group
  // size.
  at::Tensor Scatter(const at::Tensor& input, const GroupSet& groups, int64_t src, int64_t dim);
  // Group rank `dst` gets the concatenation of the group's inputs along `dim` in group order; the
  // other ranks keep their input. Shapes must agree within a group.
  at::Tensor Gather(const at::Tensor& input, const GroupSet& groups, int64_t dst, int64_t dim);
  // Matched point-to-point sends: for each (src, dst) pair of global ranks, dst receives src's
  // input (a copy); ranks that receive nothing keep their input. A rank may send several times but
  // receive at most once.
  at::Tensor SendRecv(const at::Tensor& input,
                      const std::vector<std::pair<int64_t, int64_t>>& pairs);
  // Synchronises each group; moves no data. `ranks` are the ranks taking part (every rank of a
  // group must be one).
  void Barrier(const GroupSet& groups, const std::vector<int64_t>& ranks);

  // Observers hear every call, each as one CollectiveEvent with a row per rank this process holds
  // (every rank in simulation, its own on a real rank: rank 0 merges a real run's rows), in the
  // order they were added (CollectiveObservers::Scoped registers one for a scope,
  // CollectiveObservers::Paused silences them while a real run gathers its own results).
  CollectiveObservers& observers() { return observers_; }
  bool observed() const { return observers_.observed(); }

  // Real backends: ends every process of the job at once, after printing "dtsim: error: real run:
  // rank R: <message>" on this rank's stderr (exit code `code` everywhere) — for failures that only
  // this rank saw, which would leave the other ranks waiting. The simulated backend throws
  // InternalError(message). `print` false: end without printing (the reporting rank printed the
  // same message).
  [[noreturn]] virtual void EndJob(const std::string& message, int code = 4, bool print = true);

  // Real backends: arms a fault (fault.h) from the next call on; it strikes on this process only if
  // it is the fault's rank. InputError on the simulated backend (it computes every rank at once:
  // nothing can misbehave).
  void SetFault(const FaultSpec& fault);
  const FaultSpec& fault() const { return fault_; }
  // True once the armed fault struck this rank.
  bool fault_struck() const { return fault_struck_; }

  // Real backends: the collective-order check's cost on this rank so far — the wall time this rank
  // was held up by the check (building its description and the check's round; on the MPI backend,
  // where the round overlaps the data movement, only the part it waited beyond the data), and how
  // many calls it checked (one per collective this rank made, drop-rank faults aside). Example: the
  // 30 calls of bench/mpi_overhead_bench.cc (16 MiB all_gathers and all_reduces, 8 MPI ranks on 2
  // cores) → agreement_rounds() 30, agreement_seconds() 0.004 to 0.04 (docs/performance.md). Both
  // stay 0 in simulation (nothing to agree on).
  double agreement_seconds() const { return agreement_seconds_; }
  int64_t agreement_rounds() const { return agreement_rounds_; }

 protected:
  // `rank` is nullopt for a simulated backend (the process holds every rank).
  Collectives(std::string backend, int64_t world_size, std::optional<int64_t> rank);

  // Backend hooks, called after validation; `input` and the result hold the held ranks (a
  // LocalTensor in simulation, a plain tensor on a real rank). Ranks in no group return a copy of
  // their input.
  virtual at::Tensor DoAllGather(const at::Tensor& input, const CallInfo& call, int64_t dim) = 0;
  virtual at::Tensor DoReduceScatter(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                                     int64_t dim) = 0;
  virtual at::Tensor DoAllReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op) = 0;
  virtual at::Tensor DoAllToAll(const at::Tensor& input, const CallInfo& call, int64_t split_dim,
                                int64_t concat_dim) = 0;
  virtual at::Tensor DoBroadcast(const at::Tensor& input, const CallInfo& call, int64_t src) = 0;
  virtual at::Tensor DoReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                              int64_t dst) = 0;
  // `splits[g][j]`: rows group rank j of g's group... see AllToAllSingle; the front fills the held
  // ranks' input splits (even splits when none were given) and passes the output splits as given.
  virtual at::Tensor DoAllToAllSingle(const at::Tensor& input, const CallInfo& call,
                                      const SplitSizes& input_splits,
                                      const SplitSizes& output_splits) = 0;
  virtual at::Tensor DoScatter(const at::Tensor& input, const CallInfo& call, int64_t src,
                               int64_t dim) = 0;
  virtual at::Tensor DoGather(const at::Tensor& input, const CallInfo& call, int64_t dst,
                              int64_t dim) = 0;
  virtual at::Tensor DoSendRecv(const at::Tensor& input, const CallInfo& call,
                                const std::vector<std::pair<int64_t, int64_t>>& pairs) = 0;
  virtual void DoBarrier(const CallInfo& call) = 0;

  // Real backends: checks that every rank of each group of this call makes the same call (kind,
  // groups, shapes, dtype, op, root, sequence number), within the backend's timeout — the
  // collective-order check. `fingerprint` is this rank's description of the call. A backend may
  // complete the check here, before data moves (NCCL), or only start it here and complete it while
  // the call's data moves, before the Do* hook returns (MPI). The front times this call
  // (agreement_seconds()). Default: nothing (simulation computes all ranks at once and checks
  // shapes directly).
  virtual void CheckAgreement(const CallInfo& call, const std::string& fingerprint) {}
  // Real backends, drop-rank fault: this rank skips `call` and goes on as a rank whose program took
  // another branch (the MPI backend waits at a collective nobody else makes until the stuck-job
  // report ends the job).
  virtual void SkipCall(const CallInfo& call, const std::string& fingerprint) {}
  // A backend whose CheckAgreement only starts the check (the MPI backend completes it while the
  // data moves) adds here the time a call then waited for the check alone (agreement_seconds()).
  void AddAgreementSeconds(double seconds) { agreement_seconds_ += seconds; }

 private:
  // Validates the groups against the held ranks (simulated) or the world (real) and fills the
  // CallInfo.
  CallInfo Begin(CollectiveKind kind, const at::Tensor& input, const GroupSet& groups);
  // Builds the record (shapes, bytes from `bytes`), notifies the observer.
  using BytesFn = std::function<std::pair<int64_t, int64_t>(size_t held_index, const at::Tensor& in,
                                                            const at::Tensor& out)>;
  void Finish(const CallInfo& call, const at::Tensor& input, const at::Tensor& output,
              double micros, const BytesFn& bytes);
  // Per held rank with a group: the shards of `input` in the held order.
  std::vector<at::Tensor> ShardsOf(const at::Tensor& local, const CallInfo& call) const;
  int64_t GroupSize(const CallInfo& call, size_t held_index) const;
  std::string Fingerprint(const CallInfo& call, const at::Tensor& input,
                          const std::string& args) const;
  // Runs `body` (the backend hook) on the (possibly faulty) input, timing it; the agreement check
  // first on real backends. A drop-rank fault returns a copy of the input without running anything.
  at::Tensor Run(const CallInfo& call, const at::Tensor& input, const std::string& args,
                 const std::function<at::Tensor(const at::Tensor&)>& body, double* micros,
                 int64_t root = -1);
  // True once, when the armed fault of `kind` strikes this rank at this call (`eligible`: the call
  // is one the fault can affect here).
  bool Strikes(FaultSpec::Kind kind, bool eligible);
  // Whether this rank sends data in `call` (the wrong-offset fault strikes only such calls).
  bool SendsData(const CallInfo& call, const at::Tensor& input, int64_t root) const;
  // The reduce op this rank uses: `op`, or another when a wrong-op fault strikes (and marks
  // call.wrong_op).
  ReduceOp OpFor(CallInfo& call, ReduceOp op);

  std::string backend_;
  int64_t world_size_;
  std::optional<int64_t> rank_;
  int64_t sequence_ = 0;
  CollectiveObservers observers_;
  FaultSpec fault_;
  int64_t fault_seen_ = 0;  // eligible calls seen since the fault was armed
  bool fault_struck_ = false;
  double agreement_seconds_ = 0;  // see agreement_seconds()
  int64_t agreement_rounds_ = 0;
};

}  // namespace dtsim
