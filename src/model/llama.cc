#include "dtsim/model/llama.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace model {
namespace {

const at::Tensor& Weight(const std::map<std::string, at::Tensor>& weights, const std::string& fqn) {
  auto it = weights.find(fqn);
  if (it == weights.end()) throw InputError("weights", "no weight for " + fqn);
  return it->second;
}

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

void LlamaArgs::Validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v < 1) throw InputError(field, "must be at least 1, got " + std::to_string(v));
  };
  positive("dim", dim);
  positive("heads", heads);
  positive("layers", layers);
  positive("vocab", vocab);
  positive("seq", seq);
  positive("batch", batch);
  if (ffn < 0)
    throw InputError("ffn", "must be at least 1 (or 0 for 4 x dim), got " + std::to_string(ffn));
  if (dim % heads != 0) {
    throw InputError("heads",
                     std::to_string(heads) + " heads do not divide dim " + std::to_string(dim));
  }
}

Attention::Attention(const LlamaArgs& args, const std::map<std::string, at::Tensor>& w,
                     const std::string& prefix)
    : Module("Attention"), head_dim_(args.head_dim()) {
  wq_ = register_module("wq", std::make_shared<Linear>(Weight(w, Join(prefix, "wq.weight"))));
  wk_ = register_module("wk", std::make_shared<Linear>(Weight(w, Join(prefix, "wk.weight"))));
  wv_ = register_module("wv", std::make_shared<Linear>(Weight(w, Join(prefix, "wv.weight"))));
  wo_ = register_module("wo", std::make_shared<Linear>(Weight(w, Join(prefix, "wo.weight"))));
}

at::Tensor Attention::Forward(const at::Tensor& x) {
  const int64_t bs = x.size(0), seqlen = x.size(1);
  auto heads = [&](const at::Tensor& t) {
    return t.view({bs, seqlen, -1, head_dim_}).transpose(1, 2);
  };
  // Python's order: wq, wk, wv, then the views (q, k, v).
  at::Tensor q = (*wq_)(x);
  at::Tensor k = (*wk_)(x);
  at::Tensor v = (*wv_)(x);
  at::Tensor xq = heads(q);
  at::Tensor xk = heads(k);
  at::Tensor xv = heads(v);
  // The kernel at::scaled_dot_product_attention picks on CPU for these inputs, called directly so
  // that metadata-only runs (Meta shards, where the dispatcher would pick the math path) take the
  // same path and allocate the same buffers.
  at::Tensor o = std::get<0>(at::_scaled_dot_product_flash_attention_for_cpu(xq, xk, xv, 0.0,
                                                                             /*is_causal=*/true));
  o = o.transpose(1, 2).contiguous().view({bs, seqlen, -1});
  return (*wo_)(o);
}

FeedForward::FeedForward(const std::map<std::string, at::Tensor>& w, const std::string& prefix)
    : Module("FeedForward") {
  w1_ = register_module("w1", std::make_shared<Linear>(Weight(w, Join(prefix, "w1.weight"))));
  w2_ = register_module("w2", std::make_shared<Linear>(Weight(w, Join(prefix, "w2.weight"))));
  w3_ = register_module("w3", std::make_shared<Linear>(Weight(w, Join(prefix, "w3.weight"))));
}

at::Tensor FeedForward::Forward(const at::Tensor& x) {
  // Sequenced as Python evaluates w2(silu(w1(x)) * w3(x)): w1 before w3.
  at::Tensor a = at::silu((*w1_)(x));
  at::Tensor b = (*w3_)(x);
  return (*w2_)(a * b);
}

TransformerBlock::TransformerBlock(const LlamaArgs& args,
                                   const std::map<std::string, at::Tensor>& w,
                                   const std::string& prefix)
    : Module("TransformerBlock") {
  attention_norm_ = register_module(
      "attention_norm",
      std::make_shared<RMSNorm>(Weight(w, Join(prefix, "attention_norm.weight")), args.eps));
  attention_ =
      register_module("attention", std::make_shared<Attention>(args, w, Join(prefix, "attention")));
  ffn_norm_ = register_module(
      "ffn_norm", std::make_shared<RMSNorm>(Weight(w, Join(prefix, "ffn_norm.weight")), args.eps));
  feed_forward_ = register_module("feed_forward",
                                  std::make_shared<FeedForward>(w, Join(prefix, "feed_forward")));
}

at::Tensor TransformerBlock::Forward(const at::Tensor& x) {
  at::Tensor h = x + (*attention_)((*attention_norm_)(x));
  return h + (*feed_forward_)((*ffn_norm_)(h));
}

Transformer::Transformer(const LlamaArgs& args, const std::map<std::string, at::Tensor>& w)
    : Module("Transformer") {
  tok_embeddings_ = register_module(
      "tok_embeddings", std::make_shared<Embedding>(Weight(w, "tok_embeddings.weight")));
  auto layers = register_module("layers", std::make_shared<ModuleDict>());
  for (int64_t i = 0; i < args.layers; ++i) {
    const std::string name = std::to_string(i);
    blocks_.push_back(
        layers->Add(name, std::make_shared<TransformerBlock>(args, w, "layers." + name)));
  }
  norm_ = register_module("norm", std::make_shared<RMSNorm>(Weight(w, "norm.weight"), args.eps));
  output_ = register_module("output", std::make_shared<Linear>(Weight(w, "output.weight")));
}

at::Tensor Transformer::Forward(const at::Tensor& tokens) {
  at::Tensor h = (*tok_embeddings_)(tokens);
  for (const auto& block : blocks_) h = (*block)(h);
  return (*output_)((*norm_)(h));
}

std::map<std::string, at::Tensor> LlamaWeights(const LlamaArgs& args, at::ScalarType dtype,
                                               bool meta, uint64_t seed) {
  args.Validate();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::map<std::string, at::Tensor> w;
  auto make = [&](const std::string& fqn, std::vector<int64_t> shape, double std, double mean) {
    if (meta) {
      w[fqn] = at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta));
    } else {
      w[fqn] = (at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)) * std + mean)
                   .to(dtype)
                   .contiguous();
    }
  };
  const int64_t d = args.dim, hd = args.heads * args.head_dim(), f = args.ffn_hidden();
  make("tok_embeddings.weight", {args.vocab, d}, 1.0, 0.0);
  for (int64_t i = 0; i < args.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    make(p + "attention_norm.weight", {d}, 0.1, 1.0);
    make(p + "attention.wq.weight", {hd, d}, 1.0 / std::sqrt(double(d)), 0.0);
    make(p + "attention.wk.weight", {hd, d}, 1.0 / std::sqrt(double(d)), 0.0);
    make(p + "attention.wv.weight", {hd, d}, 1.0 / std::sqrt(double(d)), 0.0);
    make(p + "attention.wo.weight", {d, hd}, 1.0 / std::sqrt(double(hd)), 0.0);
    make(p + "ffn_norm.weight", {d}, 0.1, 1.0);
    make(p + "feed_forward.w1.weight", {f, d}, 1.0 / std::sqrt(double(d)), 0.0);
    make(p + "feed_forward.w2.weight", {d, f}, 1.0 / std::sqrt(double(f)), 0.0);
    make(p + "feed_forward.w3.weight", {f, d}, 1.0 / std::sqrt(double(d)), 0.0);
  }
  make("norm.weight", {d}, 0.1, 1.0);
  make("output.weight", {args.vocab, d}, 1.0 / std::sqrt(double(d)), 0.0);
  return w;
}

std::shared_ptr<Transformer> BuildLlama(const LlamaArgs& args,
                                        const std::map<std::string, at::Tensor>& weights) {
  args.Validate();
  auto model = std::make_shared<Transformer>(args, weights);
  AssignNames(*model);
  return model;
}

at::Tensor LlamaTokens(const LlamaArgs& args, bool meta) {
  if (meta)
    return at::empty({args.batch, args.seq},
                     at::TensorOptions().dtype(at::kLong).device(at::kMeta));
  at::Tensor b = at::arange(args.batch, at::kLong).unsqueeze(1);
  at::Tensor s = at::arange(args.seq, at::kLong).unsqueeze(0);
  return (b * (7 * args.seq) + s * 13 + 1).remainder(args.vocab).contiguous();
}

at::Tensor LlamaLabels(const LlamaArgs& args, bool meta) {
  if (meta) return LlamaTokens(args, true);
  return at::roll(LlamaTokens(args, false), {-1}, {1}).contiguous();
}

at::Tensor CrossEntropy(const at::Tensor& logits, const at::Tensor& labels) {
  return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten(0, 1));
}

ParallelizePlan LlamaTensorParallelPlan(const LlamaArgs& args, bool sp, bool loss_parallel) {
  ParallelizePlan plan;
  auto add = [&](const std::string& fqn, std::shared_ptr<ParallelStyle> style) {
    plan.emplace_back(fqn, std::move(style));
  };
  auto emb = std::make_shared<RowwiseParallel>();
  emb->input_layouts = Placement::Replicate();
  emb->output_layouts = sp ? Placement::Shard(1) : Placement::Replicate();
  add("tok_embeddings", emb);
  if (sp) add("norm", std::make_shared<SequenceParallel>());
  auto out = std::make_shared<ColwiseParallel>();
  out->input_layouts = sp ? Placement::Shard(1) : Placement::Replicate();
  out->output_layouts = loss_parallel ? Placement::Shard(-1) : Placement::Replicate();
  out->use_local_output = !loss_parallel;
  add("output", out);
  for (int64_t i = 0; i < args.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    auto prepare = [&] {
      auto s = std::make_shared<PrepareModuleInput>();
      s->input_layouts = Placement::Shard(1);
      s->desired_input_layouts = Placement::Replicate();
      return s;
    };
    auto rowwise = [&] {
      auto s = std::make_shared<RowwiseParallel>();
      if (sp) s->output_layouts = Placement::Shard(1);
      return s;
    };
    if (sp) add(p + "attention_norm", std::make_shared<SequenceParallel>());
    if (sp) add(p + "attention", prepare());
    add(p + "attention.wq", std::make_shared<ColwiseParallel>());
    add(p + "attention.wk", std::make_shared<ColwiseParallel>());
    add(p + "attention.wv", std::make_shared<ColwiseParallel>());
    add(p + "attention.wo", rowwise());
    if (sp) add(p + "ffn_norm", std::make_shared<SequenceParallel>());
    if (sp) add(p + "feed_forward", prepare());
    add(p + "feed_forward.w1", std::make_shared<ColwiseParallel>());
    add(p + "feed_forward.w2", rowwise());
    add(p + "feed_forward.w3", std::make_shared<ColwiseParallel>());
  }
  return plan;
}

}  // namespace model
}  // namespace dtsim
