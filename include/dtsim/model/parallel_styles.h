// Upstream's tensor-parallel styles (torch/distributed/tensor/parallel/style.py) over dtsim modules
// (module.h, layers.h), with upstream's semantics step for step:
//
//   ColwiseParallel     Linear weight → Shard(0), Embedding weight → Shard(1). Input: a local
//                       tensor is taken as `input_layouts` (default Replicate) with from_local,
//                       then redistributed to Replicate when input_layouts is not Replicate.
//                       Output: redistributed to `output_layouts` (default Shard(-1)), then
//                       to_local when use_local_output (default true).
//   RowwiseParallel     Linear weight → Shard(1), Embedding weight → Shard(0). Input: as above with
//                       default input_layouts Shard(-1) and desired Shard(-1) (Linear) or Replicate
//                       (Embedding). Output: to `output_layouts` (default Replicate), to_local.
//   SequenceParallel    parameters → Replicate (from_local); input: a DTensor is redistributed to
//                       Shard(sequence_dim) unless it is that already, a local tensor is taken as
//                       Shard(sequence_dim); output: kept a DTensor unless use_local_output.
//   PrepareModuleInput  input taken as `input_layout` (from_local when local), redistributed to
//                       `desired_input_layout` when the two differ; to_local when use_local_output
//                       (default false).
//   PrepareModuleOutput the same for the output.
//
// Every redistribution a style runs (and its backward) is told to the thread's OpObserver with the
// reason "<Style> input|output of <fqn>" (dtensor_autograd.h). Styles are given the world
// (Collectives) the model's DTensors belong to.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"
#include "dtsim/model/module.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {
namespace model {

class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  // Shards `module`'s parameters over `mesh` (one dim) and installs its input and output hooks.
  virtual void Apply(Module& module, const DeviceMesh& mesh,
                     const std::shared_ptr<Collectives>& collectives) const = 0;
  // "ColwiseParallel(input_layouts=S(1), output_layouts=R)" (only what differs from the defaults).
  virtual std::string ToString() const = 0;
};

struct ColwiseParallel : ParallelStyle {
  Placement input_layouts = Placement::Replicate();
  Placement output_layouts = Placement::Shard(-1);
  bool use_local_output = true;
  void Apply(Module& module, const DeviceMesh& mesh,
             const std::shared_ptr<Collectives>& collectives) const override;
  std::string ToString() const override;
};

struct RowwiseParallel : ParallelStyle {
  Placement input_layouts = Placement::Shard(-1);
  Placement output_layouts = Placement::Replicate();
  bool use_local_output = true;
  void Apply(Module& module, const DeviceMesh& mesh,
             const std::shared_ptr<Collectives>& collectives) const override;
  std::string ToString() const override;
};

struct SequenceParallel : ParallelStyle {
  int64_t sequence_dim = 1;
  bool use_local_output = false;
  void Apply(Module& module, const DeviceMesh& mesh,
             const std::shared_ptr<Collectives>& collectives) const override;
  std::string ToString() const override;
};

struct PrepareModuleInput : ParallelStyle {
  std::optional<Placement> input_layouts;  // nullopt: the input is left alone
  std::optional<Placement> desired_input_layouts;
  bool use_local_output = false;
  void Apply(Module& module, const DeviceMesh& mesh,
             const std::shared_ptr<Collectives>& collectives) const override;
  std::string ToString() const override;
};

struct PrepareModuleOutput : ParallelStyle {
  Placement output_layouts = Placement::Replicate();
  Placement desired_output_layouts = Placement::Replicate();
  bool use_local_output = true;
  void Apply(Module& module, const DeviceMesh& mesh,
             const std::shared_ptr<Collectives>& collectives) const override;
  std::string ToString() const override;
};

// A plan: module fqn → style, applied in order.
using ParallelizePlan = std::vector<std::pair<std::string, std::shared_ptr<ParallelStyle>>>;

// Upstream's parallelize_module: applies each style of `plan` to the module of that fqn below
// `root` (names from AssignNames). `mesh` must be 1-D (the tp dim, e.g. mesh.Submesh({"tp"}, 0)).
// InputError("plan") naming the fqn when no module has it, or the style when the module is not one
// it supports.
void ParallelizeModule(Module& root, const DeviceMesh& mesh, const ParallelizePlan& plan,
                       const std::shared_ptr<Collectives>& collectives);

// `p` with a negative Shard dim made non-negative for a tensor of `ndim` dims (Shard(-1) of a 3-d
// tensor is Shard(2)).
Placement NormalizeDim(const Placement& p, int64_t ndim);

}  // namespace model
}  // namespace dtsim
