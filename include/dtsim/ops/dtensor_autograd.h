// Differentiable conversions between DTensors and local tensors, at the at::Tensor level (the op
// layer's wrappers, dtensor_tensor.h): upstream's DTensor.redistribute, DTensor.from_local and
// DTensor.to_local as autograd functions, with upstream's gradient placements
// (torch/distributed/tensor/_redistribute.py Redistribute, _api.py _FromTorchTensor and
// _ToTorchTensor):
//
//   Redistribute(x, p)       forward: x's placements → p (PlanFor + ExecutePlan). backward: the
//                            gradient goes back to x's placements, except that a Partial there
//                            becomes Replicate when the gradient is Shard or Replicate on that dim.
//   FromLocal(local, mesh, p)  forward: no communication. backward: the gradient is redistributed
//                            to `grad_placements` (default: p with Partial → Replicate) and its
//                            local data returned.
//   ToLocal(x)               forward: x's local data (a view). backward: the local gradient is
//                            wrapped as a DTensor with `grad_placements` (default: x's placements
//                            with Partial → Replicate), no communication.
//
// Every redistribution these run — forward and backward — is told to the thread's OpObserver
// (dtensor_tensor.h) with `reason` ("redistribute", or what the caller names, e.g.
// "ColwiseParallel input of layers.0.attention.wq") as the op name; backward ones get the prefix
// "backward of ".
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {
namespace ops {

at::Tensor Redistribute(const at::Tensor& dtensor, const Placements& placements,
                        const std::string& reason = "redistribute");

// `local`: a LocalTensor in simulation (every rank's data), this rank's tensor on a real backend.
// `shape` as DTensor::FromLocal (default: even sharding). `collectives`: the world the DTensor
// belongs to (default: a fresh simulated one, as DTensor::FromLocal).
at::Tensor FromLocal(const at::Tensor& local, const DeviceMesh& mesh, const Placements& placements,
                     std::shared_ptr<Collectives> collectives,
                     std::optional<std::vector<int64_t>> shape = std::nullopt,
                     std::optional<Placements> grad_placements = std::nullopt,
                     const std::string& reason = "from_local");

at::Tensor ToLocal(const at::Tensor& dtensor,
                   std::optional<Placements> grad_placements = std::nullopt,
                   const std::string& reason = "to_local");

// Placements with every Partial replaced by Replicate (upstream's _normalize_placements_for_grad).
Placements NormalizeForGrad(const Placements& placements);

}  // namespace ops
}  // namespace dtsim
