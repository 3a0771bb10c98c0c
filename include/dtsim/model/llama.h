// A Llama-style transformer with torchtitan's Llama 3 module names, and its parallelize plans.
//
//   tok_embeddings                         Embedding(vocab, dim)
//   layers.<i>.attention_norm              RMSNorm(dim)
//   layers.<i>.attention.{wq,wk,wv,wo}     Linear (heads · head_dim ↔ dim), causal softmax
//   attention layers.<i>.ffn_norm                    RMSNorm(dim)
//   layers.<i>.feed_forward.{w1,w2,w3}     SwiGLU: w2(silu(w1 x) · w3 x), hidden size `ffn`
//   norm, output                           RMSNorm(dim), Linear(dim → vocab)
// h = emb(tokens); per block h += attention(attention_norm(h)); h += feed_forward(ffn_norm(h));
// logits = output(norm(h)); loss = cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1)).
// Unlike torchtitan: no rotary embedding and no grouped-query attention (n_kv_heads = heads); the
// plans are unaffected (rotary embedding is local to each head).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "dtsim/model/layers.h"
#include "dtsim/model/module.h"
#include "dtsim/model/parallel_styles.h"

namespace dtsim {
namespace model {

struct LlamaArgs {
  int64_t dim = 256;
  int64_t heads = 8;
  int64_t layers = 2;
  int64_t vocab = 1000;
  int64_t ffn = 0;  // 0: 4 · dim
  int64_t seq = 64;
  int64_t batch = 4;
  double eps = 1e-5;
  int64_t ffn_hidden() const { return ffn > 0 ? ffn : 4 * dim; }
  int64_t head_dim() const { return dim / heads; }
  // InputError naming the field for sizes < 1 or dim not divisible by heads.
  void Validate() const;
};

class Attention : public Module {
 public:
  Attention(const LlamaArgs& args, const std::map<std::string, at::Tensor>& weights,
            const std::string& prefix);

 protected:
  at::Tensor Forward(const at::Tensor& x) override;

 private:
  int64_t head_dim_;
  std::shared_ptr<Linear> wq_, wk_, wv_, wo_;
};

class FeedForward : public Module {
 public:
  FeedForward(const std::map<std::string, at::Tensor>& weights, const std::string& prefix);

 protected:
  at::Tensor Forward(const at::Tensor& x) override;

 private:
  std::shared_ptr<Linear> w1_, w2_, w3_;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(const LlamaArgs& args, const std::map<std::string, at::Tensor>& weights,
                   const std::string& prefix);

 protected:
  at::Tensor Forward(const at::Tensor& x) override;

 private:
  std::shared_ptr<RMSNorm> attention_norm_, ffn_norm_;
  std::shared_ptr<Attention> attention_;
  std::shared_ptr<FeedForward> feed_forward_;
};

class Transformer : public Module {
 public:
  Transformer(const LlamaArgs& args, const std::map<std::string, at::Tensor>& weights);

 protected:
  at::Tensor Forward(const at::Tensor& tokens) override;  // → logits [batch, seq, vocab]

 private:
  std::shared_ptr<Embedding> tok_embeddings_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  std::shared_ptr<RMSNorm> norm_;
  std::shared_ptr<Linear> output_;
};

// Every parameter's full (unsharded) value by fqn ("layers.0.attention.wq.weight"), deterministic
// in `seed`: embeddings N(0, 1), linear weights N(0, 1/fan_in), norm weights 1 + N(0, 0.1) (not
// all ones, so that a wrong gradient of a norm weight shows). With `meta`, meta tensors of the
// same shapes (no data).
std::map<std::string, at::Tensor> LlamaWeights(const LlamaArgs& args, at::ScalarType dtype,
                                               bool meta, uint64_t seed = 0);

// The model over `weights` (from LlamaWeights), names assigned.
std::shared_ptr<Transformer> BuildLlama(const LlamaArgs& args,
                                        const std::map<std::string, at::Tensor>& weights);

// The input tokens [batch, seq] (int64: (7·b·seq + 13·s + 1) mod vocab) and labels (the tokens
// shifted left by one along seq, wrapping).
at::Tensor LlamaTokens(const LlamaArgs& args, bool meta);
at::Tensor LlamaLabels(const LlamaArgs& args, bool meta);

// Cross entropy (mean) of logits [batch, seq, vocab] against labels [batch, seq], in float32.
at::Tensor CrossEntropy(const at::Tensor& logits, const at::Tensor& labels);

// torchtitan's Llama tensor-parallel plan on the tp dim: with `sequence_parallel` exactly
// torchtitan's (tok_embeddings RowwiseParallel(input R, output S(1)); norms SequenceParallel;
// attention / feed_forward PrepareModuleInput(S(1) → R); wq/wk/wv, w1/w3 ColwiseParallel; wo, w2
// RowwiseParallel(output S(1)); output ColwiseParallel(input S(1), output R, or S(-1) kept a
// DTensor with `loss_parallel`)); without it the same with replicated activations (embedding, wo,
// w2 outputs R; no SequenceParallel, no PrepareModuleInput).
ParallelizePlan LlamaTensorParallelPlan(const LlamaArgs& args, bool sequence_parallel,
                                        bool loss_parallel);

}  // namespace model
}  // namespace dtsim
