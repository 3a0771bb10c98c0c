// The leaf layers upstream's parallel styles know, as dtsim modules (module.h): Linear (no bias,
// as in Llama), Embedding and RMSNorm, computing exactly what torch.nn.Linear / Embedding / RMSNorm
// compute (the same ATen calls: linear, embedding, rms_norm), on plain tensors, LocalTensors or
// DTensors alike.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "dtsim/model/module.h"

namespace dtsim {
namespace model {

// y = x Wᵀ; weight [out_features, in_features].
class Linear : public Module {
 public:
  Linear(const at::Tensor& weight);
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 protected:
  at::Tensor Forward(const at::Tensor& input) override;

 private:
  int64_t in_ = 0, out_ = 0;
};

// y = weight[tokens]; weight [num_embeddings, embedding_dim].
class Embedding : public Module {
 public:
  explicit Embedding(const at::Tensor& weight);

 protected:
  at::Tensor Forward(const at::Tensor& input) override;
};

// y = x / sqrt(mean(x², last dim) + eps) * weight; weight [dim].
class RMSNorm : public Module {
 public:
  RMSNorm(const at::Tensor& weight, double eps);

 protected:
  at::Tensor Forward(const at::Tensor& input) override;

 private:
  double eps_;
};

}  // namespace model
}  // namespace dtsim
