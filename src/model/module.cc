#include "dtsim/model/module.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <memory>
#include <type_traits>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace model {
namespace {

thread_local ModuleObservers g_observers;

// An identity node: its backward runs `hook` when the gradient has arrived.
class BackwardHookNode : public torch::autograd::Node {
 public:
  explicit BackwardHookNode(std::function<void(const at::Tensor&)> hook) : hook_(std::move(hook)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    hook_(grads.empty() ? at::Tensor() : grads[0]);
    return std::move(grads);
  }
  std::string name() const override { return "dtsim::BackwardHook"; }

 private:
  std::function<void(const at::Tensor&)> hook_;
};

// A new autograd node, owned the way this LibTorch owns them (Edge::function's type):
// std::shared_ptr in torch 2.11, c10::intrusive_ptr in 2.13.
template <typename T, typename... Args>
auto MakeNode(Args&&... args) {
  using Owner = decltype(torch::autograd::Edge::function);
  if constexpr (std::is_same_v<Owner, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

}  // namespace

at::Tensor WithBackwardHook(const at::Tensor& t, std::function<void()> hook) {
  return WithBackwardHook(t, [hook = std::move(hook)](const at::Tensor&) { hook(); });
}

at::Tensor WithBackwardHook(const at::Tensor& t, std::function<void(const at::Tensor&)> hook) {
  auto node = MakeNode<BackwardHookNode>(std::move(hook));
  node->set_next_edges({torch::autograd::impl::gradient_edge(t)});
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  at::Tensor alias(
      impl->shallow_copy_and_detach(impl->version_counter(), impl->allow_tensor_metadata_change()));
  torch::autograd::set_history(alias, node);
  return alias;
}

ModuleObservers& ThreadModuleObservers() { return g_observers; }

at::Tensor Module::operator()(const at::Tensor& input) {
  g_observers.Notify([&](ModuleObserver& o) { o.OnForwardBegin(*this, input); });
  at::Tensor x = input;
  for (const ForwardPreHook& hook : pre_hooks_) x = hook(*this, x);
  at::Tensor out = Forward(x);
  for (const ForwardHook& hook : hooks_) out = hook(*this, x, out);
  if (g_observers.observed()) {
    g_observers.Notify([&](ModuleObserver& o) { o.OnForwardEnd(*this, out); });
    // Each module gets its own node, so that nested modules returning the same tensor are entered
    // outermost first in backward, as upstream's full backward pre-hooks are.
    if (out.defined() && out.requires_grad()) {
      out = WithBackwardHook(out, [this](const at::Tensor& grad) {
        g_observers.Notify([&](ModuleObserver& o) { o.OnBackwardBegin(*this, grad); });
      });
    }
  }
  return out;
}

const at::Tensor& Module::Param(const std::string& name) const {
  const at::Tensor* p = parameters_.find(name);
  if (p == nullptr) throw InputError("parameter", fqn_ + " has no parameter " + name);
  return *p;
}

void Module::ReplaceParameter(const std::string& name, const at::Tensor& value) {
  at::Tensor* p = parameters_.find(name);
  if (p == nullptr) throw InputError("parameter", fqn_ + " has no parameter " + name);
  at::Tensor leaf = value.detach();
  leaf.set_requires_grad(true);
  *p = leaf;
}

at::Tensor Module::SwapParameter(const std::string& name, const at::Tensor& value) {
  at::Tensor* p = parameters_.find(name);
  if (p == nullptr) throw InputError("parameter", fqn_ + " has no parameter " + name);
  at::Tensor previous = *p;
  *p = value;
  return previous;
}

std::vector<std::pair<std::string, at::Tensor>> Module::OwnParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : parameters_) out.emplace_back(item.key(), item.value());
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::Children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& item : named_children()) {
    if (auto m = std::dynamic_pointer_cast<Module>(item.value())) out.emplace_back(item.key(), m);
  }
  return out;
}

namespace {
void Collect(Module& m, std::vector<Module*>& out) {
  out.push_back(&m);
  for (const auto& child : m.Children()) Collect(*child.second, out);
}
}  // namespace

void AssignNames(Module& root) {
  std::function<void(Module&, const std::string&)> name = [&](Module& m, const std::string& fqn) {
    m.fqn_ = fqn;
    for (const auto& [child_name, child] : m.Children()) {
      name(*child, fqn.empty() ? child_name : fqn + "." + child_name);
    }
  };
  name(root, "");
}

std::vector<Module*> AllModules(Module& root) {
  std::vector<Module*> out;
  Collect(root, out);
  return out;
}

Module* FindModule(Module& root, const std::string& fqn) {
  for (Module* m : AllModules(root)) {
    if (m->fqn() == fqn) return m;
  }
  return nullptr;
}

at::Tensor ModuleDict::Forward(const at::Tensor&) {
  throw InputError("module", "a ModuleDict (" + fqn() + ") is a container and cannot be called");
}

}  // namespace model
}  // namespace dtsim
