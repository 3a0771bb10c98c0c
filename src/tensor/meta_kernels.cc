// Shape-only (Meta) kernels for the ATen ops that metadata-only runs reach and LibTorch's C++
// library lacks kernels for: LibTorch registers these in Python (torch/_meta_registrations.py),
// which a C++ program does not load. Each gives its result the shape, strides and dtype the CPU
// kernel gives, so metadata runs allocate (and meter) what data runs do. Registered only where the
// dispatcher has no Meta kernel.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "dtsim/tensor/local_tensor.h"

namespace dtsim {
namespace internal {
namespace {

// aten::_scaled_dot_product_flash_attention_for_cpu: output laid out as the query (with the
// value's head dim), logsumexp [b, h, s] float32 laid out as [b, s, h].
std::tuple<at::Tensor, at::Tensor> FlashAttentionMeta(const at::Tensor& q, const at::Tensor&,
                                                      const at::Tensor& v, double, bool,
                                                      const std::optional<at::Tensor>&,
                                                      std::optional<double>) {
  at::Tensor out;
  if (v.size(-1) == q.size(-1)) {
    out = at::empty_strided(q.sizes(), q.strides(), q.options());
  } else {
    std::vector<int64_t> shape = q.sizes().vec();
    shape.back() = v.size(-1);
    out = at::empty(shape, q.options());
  }
  at::Tensor lse =
      at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat)).transpose(1, 2);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> FlashAttentionBackwardMeta(
    const at::Tensor&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor&, const at::Tensor&, double, bool, const std::optional<at::Tensor>&,
    std::optional<double>) {
  return {at::empty_strided(q.sizes(), q.strides(), q.options()),
          at::empty_strided(k.sizes(), k.strides(), k.options()),
          at::empty_strided(v.sizes(), v.strides(), v.options())};
}

// aten::embedding_dense_backward: the weight's gradient [num_weights, embedding_dim].
at::Tensor EmbeddingDenseBackwardMeta(const at::Tensor& grad, const at::Tensor&,
                                      c10::SymInt num_weights, c10::SymInt, bool) {
  return at::empty({num_weights.expect_int(), grad.size(-1)}, grad.options());
}

// aten::index_select: the index picks along `dim`.
at::Tensor IndexSelectMeta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  std::vector<int64_t> shape = self.sizes().vec();
  if (!shape.empty()) shape[at::maybe_wrap_dim(dim, self.dim())] = index.numel();
  return at::empty(shape, self.options());
}

// aten::where.self: the broadcast shape of the three, the promoted dtype of self and other, laid
// out contiguously (what the CPU kernel's TensorIterator gives inputs that are).
at::Tensor WhereMeta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  const std::vector<int64_t> shape =
      at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  return at::empty(shape, self.options().dtype(at::result_type(self, other)));
}

}  // namespace

void EnsureMetaKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    static auto* handles = new std::vector<c10::RegistrationHandleRAII>();
    auto& d = c10::Dispatcher::singleton();
    auto add = [&](const char* name, const char* overload, c10::KernelFunction kernel) {
      auto op = d.findOp({name, overload});
      if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::Meta)) return;
      handles->push_back(d.registerImpl({name, overload}, c10::DispatchKey::Meta, std::move(kernel),
                                        std::nullopt, nullptr, "dtsim shape-only kernel"));
    };
    add("aten::_scaled_dot_product_flash_attention_for_cpu", "",
        c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(FlashAttentionMeta)));
    add("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "",
        c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(FlashAttentionBackwardMeta)));
    add("aten::embedding_dense_backward", "",
        c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(EmbeddingDenseBackwardMeta)));
    add("aten::index_select", "",
        c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(IndexSelectMeta)));
    add("aten::where", "self", c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(WhereMeta)));
  });
}

}  // namespace internal
}  // namespace dtsim
