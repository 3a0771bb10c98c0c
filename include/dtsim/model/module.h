// Modules with upstream's hook points, over torch::nn::Module.
//
// LibTorch's C++ torch::nn::Module has no forward hooks and no way to swap a parameter for a
// DTensor, both of which upstream's parallel styles (torch/distributed/tensor/parallel/style.py)
// and module tracking (CommDebugMode's ModTracker) are built on. dtsim::model::Module is a
// torch::nn::Module (named_parameters, named_modules, children as usual) whose call operator runs,
// as Python's nn.Module.__call__ does:
//   observer's OnForwardBegin → forward pre-hooks (may replace the input) → Forward → forward hooks
//   (may replace the output) → observer's OnForwardEnd,
// and, while a ModuleObserver is registered, registers a hook on the output so that the observer
// hears OnBackwardBegin(module) when the output's gradient arrives — the moment upstream's full
// backward pre-hook fires. ReplaceParameter swaps a parameter (a DTensor wrapper from
// dtsim/ops/dtensor_tensor.h, say) in place, as upstream's register_parameter over an existing
// name does.
//
// Modules here take one tensor and return one tensor (all the Llama model needs).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/trace/observers.h"

namespace dtsim {
namespace model {

class Module;

// Hears module calls made by this thread while registered (ThreadModuleObservers).
class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  // `input`: what the module was called with (before its forward pre-hooks).
  virtual void OnForwardBegin(Module& module, const at::Tensor& input) {}
  // `output`: what the call returns (after the forward hooks).
  virtual void OnForwardEnd(Module& module, const at::Tensor& output) {}
  // The gradient of `module`'s output has arrived (`grad_output`, undefined when none flows): its
  // backward begins.
  virtual void OnBackwardBegin(Module& module, const at::Tensor& grad_output) {}
};

// The calling thread's module observers: each hears every module call this thread makes while
// registered (ModuleObservers::Scoped), in the order added.
using ModuleObservers = Observers<ModuleObserver>;
ModuleObservers& ThreadModuleObservers();

class Module : public torch::nn::Module {
 public:
  using ForwardPreHook = std::function<at::Tensor(Module& module, const at::Tensor& input)>;
  using ForwardHook =
      std::function<at::Tensor(Module& module, const at::Tensor& input, const at::Tensor& output)>;

  explicit Module(std::string type_name) : torch::nn::Module(type_name) {}

  at::Tensor operator()(const at::Tensor& input);

  // `prepend`: run before the hooks registered so far (upstream's prepend=True; fully_shard's).
  void RegisterForwardPreHook(ForwardPreHook hook, bool prepend = false) {
    pre_hooks_.insert(prepend ? pre_hooks_.begin() : pre_hooks_.end(), std::move(hook));
  }
  void RegisterForwardHook(ForwardHook hook) { hooks_.push_back(std::move(hook)); }

  // The fully qualified name ("layers.0.attention.wq"; "" for the root), set by AssignNames.
  const std::string& fqn() const { return fqn_; }
  // The parameter registered as `name` (InputError when there is none).
  const at::Tensor& Param(const std::string& name) const;
  // Replaces the parameter `name` by `value` (made a leaf that requires grad).
  void ReplaceParameter(const std::string& name, const at::Tensor& value);
  // Sets parameter `name` to `value` as it is (a non-leaf computed from a sharded parameter, as
  // fully_shard's unsharded parameters are) and returns the previous value.
  at::Tensor SwapParameter(const std::string& name, const at::Tensor& value);
  // State that a parallelization attaches to this module (fully_shard's unit), by key.
  std::shared_ptr<void>& Attachment(const std::string& key) { return attachments_[key]; }
  // This module's own parameters (not its children's), in registration order.
  std::vector<std::pair<std::string, at::Tensor>> OwnParameters() const;
  // This module's direct children that are dtsim modules, in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> Children() const;

 protected:
  virtual at::Tensor Forward(const at::Tensor& input) = 0;

 private:
  friend void AssignNames(Module& root);
  std::string fqn_;
  std::vector<ForwardPreHook> pre_hooks_;
  std::vector<ForwardHook> hooks_;
  std::map<std::string, std::shared_ptr<void>> attachments_;
};

// A tensor aliasing `t` (no data copied, nothing dispatched) whose gradient passes through a node
// that calls `hook` when it arrives, before the gradient flows on: upstream's BackwardHookFunction
// and FSDP's pre-backward hook. `t` must require grad. The second form hands the hook the gradient
// (undefined when none arrived).
at::Tensor WithBackwardHook(const at::Tensor& t, std::function<void()> hook);
at::Tensor WithBackwardHook(const at::Tensor& t, std::function<void(const at::Tensor&)> hook);

// Sets every module's fqn below `root` (dot-joined child names; the root's is "").
void AssignNames(Module& root);

// Every module below and including `root`, depth first in registration order (root first).
std::vector<Module*> AllModules(Module& root);

// The module called `fqn` below `root`, or nullptr.
Module* FindModule(Module& root, const std::string& fqn);

// A container of named children (upstream's nn.ModuleDict); calling it is an error.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  template <typename M>
  std::shared_ptr<M> Add(const std::string& name, std::shared_ptr<M> module) {
    return register_module(name, std::move(module));
  }

 protected:
  at::Tensor Forward(const at::Tensor& input) override;
};

}  // namespace model
}  // namespace dtsim
