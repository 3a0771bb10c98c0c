// Upstream's FSDP2 fully_shard (torch/distributed/fsdp/_fully_shard) over dtsim modules, as
// torchtitan applies it: on each transformer block, then on the root model.
//
// fully_shard(module, dp_mesh) takes every parameter of `module` not already managed by a
// fully_shard unit below it (one parameter group) and stores it sharded on dim 0 over the dp mesh
// dim: a plain parameter becomes a DTensor [S(0)] on dp; a tensor-parallel DTensor on the tp mesh
// becomes a DTensor on (dp, tp) whose every rank holds its dim-0 chunk of its tp shard (upstream's
// layout for FSDP + TP). Then, as FSDP2:
//   forward   the unit's pre-forward all-gathers the whole group in ONE all_gather over dp (each
//             rank's chunks padded to the dim-0 chunk size and flattened into one buffer), and the
//             module computes with the unsharded parameters (plain per-rank tensors, or DTensors on
//             the tp mesh for TP parameters);
//   after     every unit but the root reshards after forward (reshard_after_forward);
//   backward  when its output gradient arrives, a resharded unit all-gathers its group again and
//             prefetches the unit that ran before it in forward (upstream's default backward
//             prefetch); when the group's gradients are complete, ONE reduce_scatter over dp with
//             ReduceOp avg leaves each rank its chunk of the averaged gradient, in the sharded
//             parameter's placements.
// Each collective is told to the thread's OpObserver (OnCollective) with its cause.
//
// Differences from upstream, by design: autograd keeps the unsharded parameters it saved in
// forward, so a resharded unit's backward all-gather is issued and counted (collective, bytes,
// time) but its result is not needed, and memory figures keep forward's unsharded parameters alive
// until backward (an upper bound on FSDP2's, which frees them and re-gathers). No mixed precision,
// no CPU offload, no HSDP.
#pragma once

#include <memory>

#include "dtsim/layout/mesh.h"
#include "dtsim/model/module.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {
namespace model {

struct FullyShardOptions {
  // nullopt: upstream's default (true, except for the root unit, which keeps its parameters
  // unsharded from forward to backward).
  std::optional<bool> reshard_after_forward;
};

// Shards `module`'s unmanaged parameters over `dp_mesh` (1-D, a submesh of the model's root mesh).
// InputError("plan") when the module has no parameter left to manage or is already a unit.
void FullyShard(Module& module, const DeviceMesh& dp_mesh,
                const std::shared_ptr<Collectives>& collectives, FullyShardOptions options = {});

}  // namespace model
}  // namespace dtsim
