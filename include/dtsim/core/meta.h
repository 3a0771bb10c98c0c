// Metadata-only simulation: DTensors whose shards are ATen meta tensors (device at::kMeta: sizes,
// strides and dtype, no data).
//
// Nothing else changes: the planner, the executor (redistribute.h), DistributeTensor and the
// simulated collectives run the very code they run on data, and every pad, narrow, all_gather,
// all_to_all and split computes its result's shape exactly as it would on data, allocating nothing.
// So a metadata-only run gives the plan, every rank's local shape (and offset, from its layout)
// after every step, the collectives with their groups and exact bytes (the observer's records), the
// cost-model time, and, with a MemoryMeter, every rank's peak memory — for worlds far larger than
// their data would fit. The simulated collectives compute a group's common result once (replicas),
// so a run is linear in the number of ranks: 16x16x16 ranks, [S(0), S(1), R] -> [R, S(0), S(1)],
// plan and simulate in a fraction of a second (bench meta_4096); meshes up to kMaxMeshRanks (2^20)
// are accepted.
//
// Example:
//   DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create({16, 16, 16}),
//   ParsePlacements("S(0),S(1),R"),
//                                          {4096, 4096});
//   DTensor dt = MakeMetaDTensor(spec);
//   DTensor out = dt.Redistribute(dt.mesh(), ParsePlacements("R,S(0),S(1)"));
//   LocalShard(out.to_local(), 4095).sizes()    // [256, 256], a meta tensor
// DistributeTensor(at::empty(shape, at::kMeta), mesh, placements) and DTensor::FromLocal of meta
// shards work too. What has no meaning without data refuses: FullTensor (InputError), values in
// reports.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>

#include "dtsim/core/dtensor.h"

namespace dtsim {

// A DTensor of `spec` (Partial placements allowed) whose every rank holds a meta tensor of its
// layout's local shape. `collectives` defaults to a fresh simulated world.
DTensor MakeMetaDTensor(const DTensorSpec& spec,
                        std::shared_ptr<Collectives> collectives = nullptr);

// True if `local` (a LocalTensor, or a plain tensor) holds meta tensors: a metadata-only DTensor's
// data.
bool IsMetaData(const at::Tensor& local);

// The verdict of a metadata-only run: nullopt when every rank `local` holds has exactly the local
// shape `spec`'s layout gives it (and the spec's dtype), else what differs ("rank 3 holds [2, 5]
// but the layout gives [1, 5]").
std::optional<std::string> FindShapeMismatch(const DTensorSpec& spec, const at::Tensor& local,
                                             const Collectives& collectives);

}  // namespace dtsim
