#include "dtsim/model/layers.h"

#include <ATen/ATen.h>

namespace dtsim {
namespace model {

Linear::Linear(const at::Tensor& weight) : Module("Linear") {
  out_ = weight.size(0);
  in_ = weight.size(1);
  register_parameter("weight", weight.detach());
}

at::Tensor Linear::Forward(const at::Tensor& input) { return at::linear(input, Param("weight")); }

Embedding::Embedding(const at::Tensor& weight) : Module("Embedding") {
  register_parameter("weight", weight.detach());
}

at::Tensor Embedding::Forward(const at::Tensor& input) {
  return at::embedding(Param("weight"), input);
}

RMSNorm::RMSNorm(const at::Tensor& weight, double eps) : Module("RMSNorm"), eps_(eps) {
  register_parameter("weight", weight.detach());
}

at::Tensor RMSNorm::Forward(const at::Tensor& input) {
  return at::rms_norm(input, {input.size(-1)}, Param("weight"), eps_);
}

}  // namespace model
}  // namespace dtsim
