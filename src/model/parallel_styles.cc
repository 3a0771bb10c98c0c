#include "dtsim/model/parallel_styles.h"

#include <sstream>

#include "dtsim/core/dtensor.h"
#include "dtsim/layout/error.h"
#include "dtsim/model/layers.h"
#include "dtsim/ops/dtensor_autograd.h"
#include "dtsim/ops/dtensor_tensor.h"

namespace dtsim {
namespace model {
namespace {

// Shards parameter `name` of `m` with `p` (upstream's distribute_tensor from rank 0).
void ShardParameter(Module& m, const std::string& name, const Placement& p, const DeviceMesh& mesh,
                    const std::shared_ptr<Collectives>& coll) {
  const at::Tensor& full = m.Param(name);
  if (ops::IsDTensor(full)) {
    throw InputError("plan",
                     m.fqn() + "." + name + " is a DTensor already (a module gets one style)");
  }
  const Placement q = p.Normalized(full.dim(), "plan");
  m.ReplaceParameter(name, ops::AsTensor(DistributeTensor(full.detach(), mesh, {q}, 0, coll)));
}

// The global shape of local data laid out as Shard(d) over the 1-D `mesh`: the local shapes of
// one group summed along d. Upstream's from_local (run_check=False, no shape) assumes even shards
// and gives each rank its own guess when they are not; simulation holds every rank and can add
// them up (nullopt on a real backend: the even guess, as upstream's).
std::optional<std::vector<int64_t>> GlobalShape(const at::Tensor& local, const Placement& p,
                                                const DeviceMesh& mesh, Collectives& coll) {
  if (!coll.simulated() || !p.is_shard()) return std::nullopt;
  const GroupSet groups = GroupSet::AlongMeshDim(mesh.root(), mesh.root_dims().at(0).at(0));
  std::vector<int64_t> shape;
  for (int64_t rank : groups.groups.at(0)) {
    const std::vector<int64_t> s = coll.Shard(local, rank).sizes().vec();
    if (shape.empty()) {
      shape = s;
    } else {
      shape.at(p.dim()) += s.at(p.dim());
    }
  }
  return shape;
}

// A local tensor taken as `layout` (from_local, no communication); a DTensor as it is.
at::Tensor AsDTensor(const at::Tensor& x, const Placement& layout, const DeviceMesh& mesh,
                     const std::shared_ptr<Collectives>& coll, const std::string& reason) {
  if (ops::IsDTensor(x)) return x;
  const Placement p = layout.Normalized(x.dim(), "plan");
  return ops::FromLocal(x, mesh, {p}, coll, GlobalShape(x, p, mesh, *coll), std::nullopt, reason);
}

// Upstream compares placements as written (Shard(-1) != Shard(2)) and then redistributes, which
// for equal normalized placements moves nothing; the same here without the empty step.
at::Tensor RedistributeTo(const at::Tensor& x, const Placement& target, const std::string& reason) {
  const Placement t = target.Normalized(x.dim(), "plan");
  if (ops::GetDTensor(x).placements() == Placements{t}) return x;
  return ops::Redistribute(x, {t}, reason);
}

std::string Layout(const Placement& p) { return p.ToString(); }

bool IsLinear(Module& m) { return dynamic_cast<Linear*>(&m) != nullptr; }
bool IsEmbedding(Module& m) { return dynamic_cast<Embedding*>(&m) != nullptr; }

std::string Args(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += ", ";
    out += p;
  }
  return out;
}

// The shared body of Colwise and Rowwise: partition, then the input and output hooks.
void ApplyLinearStyle(const std::string& style, Module& m, const DeviceMesh& mesh,
                      const std::shared_ptr<Collectives>& coll, const Placement& weight_layout,
                      const Placement& input_layouts, const Placement& desired_input,
                      const Placement& output_layouts, bool use_local_output) {
  ShardParameter(m, "weight", weight_layout, mesh, coll);
  const std::string in_reason = style + " input of " + m.fqn();
  const std::string out_reason = style + " output of " + m.fqn();
  m.RegisterForwardPreHook([=](Module&, const at::Tensor& input) {
    at::Tensor x = AsDTensor(input, input_layouts, mesh, coll, in_reason);
    if (input_layouts != desired_input) x = RedistributeTo(x, desired_input, in_reason);
    return x;
  });
  m.RegisterForwardHook([=](Module&, const at::Tensor&, const at::Tensor& output) {
    at::Tensor y = RedistributeTo(output, output_layouts, out_reason);
    return use_local_output ? ops::ToLocal(y, std::nullopt, out_reason) : y;
  });
}

}  // namespace

Placement NormalizeDim(const Placement& p, int64_t ndim) { return p.Normalized(ndim, "plan"); }

void ColwiseParallel::Apply(Module& m, const DeviceMesh& mesh,
                            const std::shared_ptr<Collectives>& coll) const {
  Placement weight = Placement::Replicate();
  if (IsLinear(m)) {
    weight = Placement::Shard(0);
  } else if (IsEmbedding(m)) {
    weight = Placement::Shard(1);
  } else {
    throw InputError("plan", "ColwiseParallel supports Linear and Embedding only, not " + m.name() +
                                 " (" + m.fqn() + ")");
  }
  ApplyLinearStyle("ColwiseParallel", m, mesh, coll, weight, input_layouts, Placement::Replicate(),
                   output_layouts, use_local_output);
}

std::string ColwiseParallel::ToString() const {
  return "ColwiseParallel(" +
         Args({input_layouts != Placement::Replicate() ? "input_layouts=" + Layout(input_layouts)
                                                       : "",
               output_layouts != Placement::Shard(-1) ? "output_layouts=" + Layout(output_layouts)
                                                      : "",
               use_local_output ? "" : "use_local_output=false"}) +
         ")";
}

void RowwiseParallel::Apply(Module& m, const DeviceMesh& mesh,
                            const std::shared_ptr<Collectives>& coll) const {
  if (IsLinear(m)) {
    ApplyLinearStyle("RowwiseParallel", m, mesh, coll, Placement::Shard(1), input_layouts,
                     Placement::Shard(-1), output_layouts, use_local_output);
  } else if (IsEmbedding(m)) {
    ApplyLinearStyle("RowwiseParallel", m, mesh, coll, Placement::Shard(0), input_layouts,
                     Placement::Replicate(), output_layouts, use_local_output);
  } else {
    throw InputError("plan", "RowwiseParallel supports Linear and Embedding only, not " + m.name() +
                                 " (" + m.fqn() + ")");
  }
}

std::string RowwiseParallel::ToString() const {
  return "RowwiseParallel(" +
         Args(
             {input_layouts != Placement::Shard(-1) ? "input_layouts=" + Layout(input_layouts) : "",
              output_layouts != Placement::Replicate() ? "output_layouts=" + Layout(output_layouts)
                                                       : "",
              use_local_output ? "" : "use_local_output=false"}) +
         ")";
}

void SequenceParallel::Apply(Module& m, const DeviceMesh& mesh,
                             const std::shared_ptr<Collectives>& coll) const {
  // Parameters: every rank keeps its own copy, annotated Replicate (from_local, no communication).
  for (Module* sub : AllModules(m)) {
    for (const auto& [name, p] : sub->OwnParameters()) {
      if (ops::IsDTensor(p)) continue;
      // distribute_tensor with no source rank: each rank keeps its own copy, no communication.
      sub->ReplaceParameter(
          name, ops::AsTensor(DistributeTensor(p.detach(), mesh, {Placement::Replicate()},
                                               std::nullopt, coll)));
    }
  }
  const Placement seq = Placement::Shard(sequence_dim);
  const std::string in_reason = "SequenceParallel input of " + m.fqn();
  const std::string out_reason = "SequenceParallel output of " + m.fqn();
  m.RegisterForwardPreHook([=](Module&, const at::Tensor& input) {
    if (ops::IsDTensor(input)) return RedistributeTo(input, seq, in_reason);
    return AsDTensor(input, seq, mesh, coll, in_reason);
  });
  const bool local = use_local_output;
  m.RegisterForwardHook([=](Module&, const at::Tensor&, const at::Tensor& output) {
    return local ? ops::ToLocal(output, std::nullopt, out_reason) : output;
  });
}

std::string SequenceParallel::ToString() const {
  return "SequenceParallel(" +
         Args({sequence_dim != 1 ? "sequence_dim=" + std::to_string(sequence_dim) : "",
               use_local_output ? "use_local_output=true" : ""}) +
         ")";
}

void PrepareModuleInput::Apply(Module& m, const DeviceMesh& mesh,
                               const std::shared_ptr<Collectives>& coll) const {
  if (!input_layouts.has_value()) return;
  if (!desired_input_layouts.has_value()) {
    throw InputError("plan", "PrepareModuleInput of " + m.fqn() + " needs desired_input_layouts");
  }
  const Placement in = *input_layouts;
  const Placement desired = *desired_input_layouts;
  const bool local = use_local_output;
  const std::string reason = "PrepareModuleInput of " + m.fqn();
  m.RegisterForwardPreHook([=](Module&, const at::Tensor& input) {
    at::Tensor x = AsDTensor(input, in, mesh, coll, reason);
    if (in != desired) x = ops::Redistribute(x, {desired.Normalized(x.dim(), "plan")}, reason);
    return local ? ops::ToLocal(x, std::nullopt, reason) : x;
  });
}

std::string PrepareModuleInput::ToString() const {
  return "PrepareModuleInput(" +
         Args({input_layouts ? "input_layouts=" + Layout(*input_layouts) : "",
               desired_input_layouts ? "desired_input_layouts=" + Layout(*desired_input_layouts)
                                     : "",
               use_local_output ? "use_local_output=true" : ""}) +
         ")";
}

void PrepareModuleOutput::Apply(Module& m, const DeviceMesh& mesh,
                                const std::shared_ptr<Collectives>& coll) const {
  const Placement out = output_layouts;
  const Placement desired = desired_output_layouts;
  const bool local = use_local_output;
  const std::string reason = "PrepareModuleOutput of " + m.fqn();
  m.RegisterForwardHook([=](Module&, const at::Tensor&, const at::Tensor& output) {
    at::Tensor y = AsDTensor(output, out, mesh, coll, reason);
    if (out != desired) y = ops::Redistribute(y, {desired.Normalized(y.dim(), "plan")}, reason);
    return local ? ops::ToLocal(y, std::nullopt, reason) : y;
  });
}

std::string PrepareModuleOutput::ToString() const {
  return "PrepareModuleOutput(output_layouts=" + Layout(output_layouts) +
         ", desired_output_layouts=" + Layout(desired_output_layouts) +
         (use_local_output ? "" : ", use_local_output=false") + ")";
}

void ParallelizeModule(Module& root, const DeviceMesh& mesh, const ParallelizePlan& plan,
                       const std::shared_ptr<Collectives>& collectives) {
  if (mesh.ndim() != 1) {
    throw InputError("mesh",
                     "parallelize_module takes a 1-D mesh (the tp dim), got " + mesh.ToString());
  }
  for (const auto& [fqn, style] : plan) {
    Module* m = FindModule(root, fqn);
    if (m == nullptr) throw InputError("plan", "no module named '" + fqn + "'");
    style->Apply(*m, mesh, collectives);
  }
}

}  // namespace model
}  // namespace dtsim
