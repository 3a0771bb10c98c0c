// DTensor: a spec (mesh, placements, global shape, dtype) plus local data, with upstream's API
// names.
//
// In simulation the local data is a LocalTensor holding every rank of the mesh's world; on a real
// backend (MPI, NCCL) it is this process's plain tensor. DTensor code touches data only through the
// per-rank methods of its Collectives object (HeldRanks, Shard, MapShards, FromRankFn) and
// communicates only through its collectives, so the same code runs on both. A DTensor holds its
// Collectives (shared); where none is given, a DTensor whose data is a LocalTensor gets a fresh
// simulated world (there is no process-wide default).
//
// Submeshes in simulation: a DTensor on mesh["tp"] of a (dp=2, tp=4) root mesh stands for the whole
// family of tp submeshes, as SPMD code on every rank would see it: the LocalTensor holds all 8
// ranks, a rank's coordinate is its root coordinate on the tp dim, and a collective along tp runs
// in every tp group at once.
//
// Example (8 simulated ranks):
// clang-format off
//   DeviceMesh mesh = DeviceMesh::Create({2, 4}, {"dp", "tp"});
//   DTensor dt = DistributeTensor(at::arange(50.).reshape({5, 10}), mesh,
//                                 ParsePlacements("S(0),R"));
//   DTensor out = dt.Redistribute(mesh, ParsePlacements("R,S(1)"));
//   LocalShard(out.to_local(), 3)   // rows 0..4, columns 9..9 (chunk 3 of 10 columns over 4 ranks)
// clang-format on
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/plan.h"
#include "dtsim/layout/spec.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/tensor/mesh_view.h"

namespace dtsim {

// Called after each step a plan runs with the step, the spec after it and the local data after it
// (traces use it).
using StepObserver = std::function<void(const PlanStep&, const DTensorSpec&, const at::Tensor&)>;

// Options of Redistribute.
struct RedistributeOptions {
  PlannerKind planner = PlannerKind::kGreedy;  // upstream's sequence; kMinCost / kUpstreamGraph
  StepObserver on_step;
};

class DTensor {
 public:
  // Wraps per-rank local data (a LocalTensor, or this rank's tensor on a real backend) without
  // communication. `shape` defaults to the global shape implied by even sharding, which must then
  // agree on every rank. Each rank's local shape must match the layout (InputError "from_local:
  // rank 3 holds [2, 5] but the layout gives [1, 5]"). Mixed Partial kinds other than sum with avg
  // are refused as upstream does. `collectives` defaults to a fresh simulated world when `local` is
  // a LocalTensor (a plain tensor needs its real backend's Collectives). `stride` is the global
  // tensor's stride as upstream records it (default: contiguous for `shape`); it must have one
  // entry per dim, each >= 0.
  static DTensor FromLocal(const at::Tensor& local, const DeviceMesh& mesh,
                           const Placements& placements,
                           std::optional<std::vector<int64_t>> shape = std::nullopt,
                           std::optional<std::vector<int64_t>> stride = std::nullopt,
                           std::shared_ptr<Collectives> collectives = nullptr);

  const DTensorSpec& spec() const { return *spec_; }
  const DeviceMesh& mesh() const { return spec_->mesh(); }
  const Placements& placements() const { return spec_->placements(); }
  const std::vector<int64_t>& shape() const { return spec_->shape(); }
  // The global stride (upstream's DTensor.stride()): contiguous unless given to FromLocal or taken
  // from the tensor DistributeTensor was given.
  const std::vector<int64_t>& stride() const { return *stride_; }
  // The local data: a LocalTensor in simulation.
  const at::Tensor& to_local() const { return local_; }
  Collectives& collectives() const { return *collectives_; }
  const std::shared_ptr<Collectives>& collectives_ptr() const { return collectives_; }

  // Moves the data to `placements` on the same mesh: ExecutePlan (redistribute.h) of
  // PlanFor(spec(), placements, options.planner). Errors as upstream: redistributing to a new
  // Partial, P(a)->P(b), S->P, mixed Partial kinds, another mesh. To see or change the plan first,
  // call PlanFor and ExecutePlan directly.
  DTensor Redistribute(const DeviceMesh& mesh, const Placements& placements,
                       const RedistributeOptions& options = {}) const;

  // The global tensor: redistribute to all-Replicate, then one plain tensor (in simulation every
  // rank's copy must agree, else InternalError).
  at::Tensor FullTensor() const;

 private:
  DTensor(std::shared_ptr<const DTensorSpec> spec, at::Tensor local,
          std::shared_ptr<Collectives> collectives,
          std::shared_ptr<const std::vector<int64_t>> stride)
      : spec_(std::move(spec)),
        local_(std::move(local)),
        collectives_(std::move(collectives)),
        stride_(std::move(stride)) {}
  friend DTensor MakeDTensor(std::shared_ptr<const DTensorSpec> spec, at::Tensor local,
                             std::shared_ptr<Collectives> collectives,
                             std::shared_ptr<const std::vector<int64_t>> stride);

  std::shared_ptr<const DTensorSpec> spec_;  // never null; immutable, so copies share it
  at::Tensor local_;
  std::shared_ptr<Collectives> collectives_;
  std::shared_ptr<const std::vector<int64_t>> stride_;  // never null; immutable, shared as spec_
};

// Builds a DTensor from parts already known to agree (no checks beyond DTSIM_CHECK); `stride`
// defaults to contiguous.
DTensor MakeDTensor(DTensorSpec spec, at::Tensor local, std::shared_ptr<Collectives> collectives,
                    std::optional<std::vector<int64_t>> stride = std::nullopt);
// The same with a spec that other DTensors may share (the op layer's cached output specs): no copy.
DTensor MakeDTensor(std::shared_ptr<const DTensorSpec> spec, at::Tensor local,
                    std::shared_ptr<Collectives> collectives,
                    std::optional<std::vector<int64_t>> stride = std::nullopt);
// The same with a stride that other DTensors may share too (never null, one entry per dim).
DTensor MakeDTensor(std::shared_ptr<const DTensorSpec> spec, at::Tensor local,
                    std::shared_ptr<Collectives> collectives,
                    std::shared_ptr<const std::vector<int64_t>> stride);

// Upstream's distribute_tensor: every rank takes its part of `tensor` as held by the rank at
// coordinate `src_data_rank` on each mesh dim (scatter / broadcast); with src_data_rank = nullopt
// every rank splits its own copy. `tensor` is a plain tensor (the same on every rank) or, in
// simulation, a LocalTensor (each rank's own copy). `collectives` defaults to a fresh simulated
// world over the mesh's ranks.
DTensor DistributeTensor(const at::Tensor& tensor, const DeviceMesh& mesh,
                         const Placements& placements, std::optional<int64_t> src_data_rank = 0,
                         std::shared_ptr<Collectives> collectives = nullptr);

// Beyond upstream (pytorch#116101): shards a DTensor living on a submesh further over another
// submesh of the same root mesh — the TP + FSDP case: a DTensor on mesh["tp"] distributed with S(0)
// on mesh["dp"]. Every rank's new local shard is its input shard split by `placements` over
// `mesh`'s dims. The result lives on the submesh of the root spanning both meshes' dims (in root
// order), with _StridedShard where the sharding order needs it. InputError if the meshes share a
// dim or have different roots, or if the result is no layout placements describe.
DTensor DistributeTensor(const DTensor& tensor, const DeviceMesh& mesh,
                         const Placements& placements);

}  // namespace dtsim
