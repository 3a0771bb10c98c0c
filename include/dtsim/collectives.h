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
#include <memory>
#include <string>
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

  // Concatenates the inputs of each group along `dim` (same shape on every rank of a group except along `dim`? no:
  // shapes must be equal) → every rank of the group gets the concatenation, in group order.
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

  // Observers see every call (not owned; nullptr clears).
  void SetObserver(CollectiveObserver* observer) { observer_ = observer; }

 protected:
  CollectiveObserver* observer_ = nullptr;
};

// The simulated backend: exact results computed over the shards of LocalTensors.
std::unique_ptr<Collectives> MakeLocalCollectives();

}  // namespace dtsim
