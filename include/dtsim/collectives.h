// Collectives: the narrow interface through which DTensor communicates — the handful of collectives DTensor needs.
//
// Every call is SPMD: it runs on every group of a GroupSet at once (as every group along one mesh dim does), and
// `input` holds what each participating rank contributes — a LocalTensor holding every rank in simulation, this
// process's plain tensor on a real backend (MPI, NCCL). The result has the same form. Implementations:
//   src/backends/local/   LocalCollectives: computes the result mathematically over the shards (the reference)
//   src/backends/mpi/, src/backends/nccl/   real ranks (later)
// Every implementation reports each call to its CollectiveObserver (trace, statistics).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/mesh.h"
#include "dtsim/placement.h"

namespace dtsim {

// Disjoint groups of global ranks that run one collective together. Group-relative rank i is groups[g][i].
struct GroupSet {
  std::vector<std::vector<int64_t>> groups;

  // Every group along mesh dim `dim`: mesh (2,4), dim 1 → {0,1,2,3}, {4,5,6,7}.
  static GroupSet AlongMeshDim(const DeviceMesh& mesh, int64_t dim);
  // One group of the given ranks.
  static GroupSet Of(std::vector<int64_t> ranks);
  // "[[0, 1, 2, 3], [4, 5, 6, 7]]"
  std::string ToString() const;
};

// What one collective call did, as reported to an observer.
struct CollectiveRecord {
  std::string op;                                   // "all_gather", "reduce_scatter", "all_reduce", "all_to_all", ...
  GroupSet groups;
  std::vector<int64_t> ranks;                       // the ranks below are listed in this order
  std::vector<std::vector<int64_t>> input_shapes;   // per rank
  std::vector<std::vector<int64_t>> output_shapes;  // per rank
  std::vector<int64_t> bytes_sent;                  // per rank
  std::vector<int64_t> bytes_received;              // per rank
};

class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;
  virtual void OnCollective(const CollectiveRecord& record) = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  // Concatenates the inputs of each group along `dim` → every rank of the group gets the concatenation, in group
  // order. Every rank of a group must have the same shape and dtype (InputError otherwise); uneven shards are padded
  // by the caller (DTensor) first. Example: group {0,1}, inputs 2x3 each, dim 0 → both ranks get 4x3.
  virtual at::Tensor AllGather(const at::Tensor& input, const GroupSet& groups, int64_t dim) = 0;
  // Reduces the inputs of each group with `op`, then rank i of the group keeps chunk i along `dim` (the size along
  // `dim` must divide evenly by the group size).
  virtual at::Tensor ReduceScatter(const at::Tensor& input, const GroupSet& groups, ReduceOp op, int64_t dim) = 0;
  // Every rank of a group gets the reduction of the group's inputs.
  virtual at::Tensor AllReduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op) = 0;
  // Shard-dim all-to-all: each rank splits its input evenly along `split_dim` into group-size pieces, sends piece j to
  // group rank j, and concatenates what it receives along `concat_dim` in group order.
  virtual at::Tensor AllToAll(const at::Tensor& input, const GroupSet& groups, int64_t split_dim,
                              int64_t concat_dim) = 0;
  // Every rank of a group gets the input of group rank `src`.
  virtual at::Tensor Broadcast(const at::Tensor& input, const GroupSet& groups, int64_t src) = 0;

  // Group rank `dst` gets the reduction of the group's inputs; the other ranks keep their input unchanged.
  virtual at::Tensor Reduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op, int64_t dst) = 0;
  // Split sizes along dim 0 per global rank for AllToAllSingle; an empty map means "split evenly".
  using SplitSizes = std::map<int64_t, std::vector<int64_t>>;
  // All-to-all along dim 0 with per-rank split sizes (torch's all_to_all_single): rank g's input is cut into
  // group-size pieces of input_split_sizes[g] rows (summing to its dim 0), piece j goes to group rank j, and each rank
  // concatenates what it receives in group order. `output_split_sizes`, when given, must equal what the senders
  // send (output_split_sizes[g][j] == input_split_sizes[group[j]][index of g]); InputError otherwise.
  // Example: group {0,1}, rank 0 splits 5 rows as {2,3}, rank 1 splits 1 row as {1,0} → rank 0 gets 2+1 rows,
  // rank 1 gets 3+0 rows.
  virtual at::Tensor AllToAllSingle(const at::Tensor& input, const GroupSet& groups,
                                    const SplitSizes& input_split_sizes, const SplitSizes& output_split_sizes) = 0;
  // Group rank `src`'s input is split evenly along `dim` into group-size chunks; group rank i gets chunk i (the other
  // ranks' inputs are ignored). The size along `dim` must divide by the group size.
  virtual at::Tensor Scatter(const at::Tensor& input, const GroupSet& groups, int64_t src, int64_t dim) = 0;
  // Group rank `dst` gets the concatenation of the group's inputs along `dim` in group order; the other ranks keep
  // their input. Shapes must agree within a group.
  virtual at::Tensor Gather(const at::Tensor& input, const GroupSet& groups, int64_t dst, int64_t dim) = 0;
  // Matched point-to-point sends: for each (src, dst) pair of global ranks, dst receives src's input (a copy);
  // ranks that receive nothing keep their input. A rank may send several times but receive at most once.
  virtual at::Tensor SendRecv(const at::Tensor& input, const std::vector<std::pair<int64_t, int64_t>>& pairs) = 0;
  // Synchronises each group; moves no data. `ranks` are the ranks taking part (every rank of a group must be one).
  virtual void Barrier(const GroupSet& groups, const std::vector<int64_t>& ranks) = 0;

  // Observers see every call (not owned; nullptr clears).
  void SetObserver(CollectiveObserver* observer) { observer_ = observer; }

 protected:
  // The one place every implementation reports a finished call.
  void Notify(const CollectiveRecord& record) {
    if (observer_ != nullptr) observer_->OnCollective(record);
  }

  CollectiveObserver* observer_ = nullptr;
};

// The simulated backend: exact results computed over the shards of LocalTensors.
std::unique_ptr<Collectives> MakeLocalCollectives();

}  // namespace dtsim
