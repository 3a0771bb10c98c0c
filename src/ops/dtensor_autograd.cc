// The differentiable conversions of dtensor_autograd.h as torch::autograd::Function's.
#include "dtsim/ops/dtensor_autograd.h"

#include <torch/csrc/autograd/custom_function.h>

#include "dtsim/core/dtensor.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/layout/error.h"
#include "dtsim/ops/dtensor_tensor.h"

namespace dtsim {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What a backward needs beyond tensors, kept in the autograd context as a capsule.
struct Saved : torch::CustomClassHolder {
  DeviceMesh mesh;
  Placements placements;  // the forward input's placements
  std::optional<Placements> grad_placements;
  std::vector<int64_t> shape;  // the forward's global shape
  std::shared_ptr<Collectives> collectives;
  std::string reason;
  Saved(DeviceMesh m, Placements p, std::optional<Placements> g, std::vector<int64_t> s,
        std::shared_ptr<Collectives> c, std::string r)
      : mesh(std::move(m)),
        placements(std::move(p)),
        grad_placements(std::move(g)),
        shape(std::move(s)),
        collectives(std::move(c)),
        reason(std::move(r)) {}
};

void Keep(AutogradContext* ctx, c10::intrusive_ptr<Saved> saved) {
  ctx->saved_data["dtsim"] = c10::IValue::make_capsule(std::move(saved));
}
const Saved& Kept(AutogradContext* ctx) {
  return *static_cast<const Saved*>(ctx->saved_data.at("dtsim").toCapsule().get());
}

// `dt` moved to `target` through the observer, or `dt` itself when it is there already.
DTensor MoveTo(const DTensor& dt, const Placements& target, const std::string& reason) {
  if (dt.placements() == target) return dt;
  return ExecutePlanObserved(reason, 0, dt, PlanFor(dt.spec(), target));
}

struct RedistributeFn : torch::autograd::Function<RedistributeFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            const Placements& placements, const std::string& reason) {
    ctx->set_materialize_grads(false);
    DTensor dt = GetDTensor(input, "redistribute");
    Keep(ctx, c10::make_intrusive<Saved>(dt.mesh(), dt.placements(), std::nullopt, dt.shape(),
                                         dt.collectives_ptr(), reason));
    if (dt.placements().size() != placements.size()) {
      throw InputError("placements", "redistribute needs one placement per mesh dim (" +
                                         std::to_string(dt.placements().size()) + "), got " +
                                         ToString(placements));
    }
    return AsTensor(MoveTo(dt, placements, reason));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& grad = grads.at(0);
    if (!grad.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const Saved& saved = Kept(ctx);
    DTensor g = GetDTensor(grad, "gradient of redistribute");
    Placements target;
    for (size_t i = 0; i < saved.placements.size(); ++i) {
      const Placement& cur = g.placements()[i];
      const Placement& prev = saved.placements[i];
      const bool keep_replicate = (cur.is_shard_like() || cur.is_replicate()) && prev.is_partial();
      target.push_back(keep_replicate ? Placement::Replicate() : prev);
    }
    return {AsTensor(MoveTo(g, target, "backward of " + saved.reason)), at::Tensor(), at::Tensor()};
  }
};

struct FromLocalFn : torch::autograd::Function<FromLocalFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local, const DeviceMesh& mesh,
                            const Placements& placements,
                            const std::shared_ptr<Collectives>& collectives,
                            const std::optional<std::vector<int64_t>>& shape,
                            const std::optional<Placements>& grad_placements,
                            const std::string& reason) {
    ctx->set_materialize_grads(false);
    DTensor dt =
        DTensor::FromLocal(local.detach(), mesh, placements, shape, std::nullopt, collectives);
    Keep(ctx, c10::make_intrusive<Saved>(mesh, placements, grad_placements, dt.shape(),
                                         dt.collectives_ptr(), reason));
    return AsTensor(dt);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(7);
    const at::Tensor& grad = grads.at(0);
    if (!grad.defined()) return out;
    const Saved& saved = Kept(ctx);
    DTensor g = GetDTensor(grad, "gradient of from_local");
    const Placements target = saved.grad_placements.value_or(NormalizeForGrad(saved.placements));
    out[0] = MoveTo(g, target, "backward of " + saved.reason).to_local();
    return out;
  }
};

struct ToLocalFn : torch::autograd::Function<ToLocalFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            const std::optional<Placements>& grad_placements,
                            const std::string& reason) {
    ctx->set_materialize_grads(false);
    DTensor dt = GetDTensor(input, "to_local");
    Keep(ctx, c10::make_intrusive<Saved>(dt.mesh(), dt.placements(), grad_placements, dt.shape(),
                                         dt.collectives_ptr(), reason));
    const at::Tensor& local = dt.to_local();
    return local.view_as(local);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& grad = grads.at(0);
    if (!grad.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const Saved& saved = Kept(ctx);
    const Placements target = saved.grad_placements.value_or(NormalizeForGrad(saved.placements));
    DTensor g =
        DTensor::FromLocal(grad, saved.mesh, target, saved.shape, std::nullopt, saved.collectives);
    return {AsTensor(g), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Placements NormalizeForGrad(const Placements& placements) {
  Placements out;
  for (const Placement& p : placements) out.push_back(p.is_partial() ? Placement::Replicate() : p);
  return out;
}

at::Tensor Redistribute(const at::Tensor& dtensor, const Placements& placements,
                        const std::string& reason) {
  return RedistributeFn::apply(dtensor, placements, reason);
}

at::Tensor FromLocal(const at::Tensor& local, const DeviceMesh& mesh, const Placements& placements,
                     std::shared_ptr<Collectives> collectives,
                     std::optional<std::vector<int64_t>> shape,
                     std::optional<Placements> grad_placements, const std::string& reason) {
  return FromLocalFn::apply(local, mesh, placements, collectives, shape, grad_placements, reason);
}

at::Tensor ToLocal(const at::Tensor& dtensor, std::optional<Placements> grad_placements,
                   const std::string& reason) {
  return ToLocalFn::apply(dtensor, grad_placements, reason);
}

}  // namespace ops
}  // namespace dtsim
