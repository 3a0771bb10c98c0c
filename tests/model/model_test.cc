// The model layer judged by what does not depend on dtsim: the unsharded model (values), the
// closed form of parameter bytes per rank, and the data run (for the metadata-only run).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "dtsim/layout/error.h"
#include "dtsim/model/model_run.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim::model {
namespace {

ModelRunOptions Small(int64_t tp, const std::string& plan) {
  ModelRunOptions o;
  o.args.dim = 16;
  o.args.heads = 4;
  o.args.layers = 2;
  o.args.vocab = 37;
  o.args.seq = 8;
  o.args.batch = 2;
  o.mesh = DeviceMesh::Create({tp}, {"tp"});
  o.plan = plan;
  o.backward = true;
  return o;
}

TEST(ModelTest, ShardedLossLogitsAndGradientsEqualTheUnshardedModel) {
  for (const std::string plan : {"tp", "tp+sp", "tp+sp+lp"}) {
    for (int64_t tp : {1, 2, 4}) {
      // "+lp": loss parallelism (vocab-sharded logits, upstream's parallel cross entropy).
      ModelRunOptions o = Small(tp, plan == "tp+sp+lp" ? "tp+sp" : plan);
      o.loss_parallel = plan == "tp+sp+lp";
      ModelReport r = RunModel(o);
      ASSERT_TRUE(r.loss.has_value());
      // loss, logits, and the gradients of 3 + 9 · layers parameters
      EXPECT_EQ(r.checks.size(), 2u + 3u + 9u * 2u) << plan << " tp " << tp;
      for (const TensorCheck& c : r.checks) {
        EXPECT_TRUE(c.ok) << plan << " tp " << tp << ": " << c.name << " differs by "
                          << c.max_abs_diff << " (tolerance " << c.tolerance << ")";
      }
    }
  }
}

TEST(ModelTest, TheCheckCatchesACorruptShard) {
  // The judge itself: rank 1's shard of one weight scaled by 1.5 must fail the check, naming the
  // loss and that weight's gradient among the mismatches.
  ModelRunOptions o = Small(2, "tp+sp");
  o.tamper = [](Transformer& model) {
    Module* wk = FindModule(model, "layers.1.attention.wk");
    ASSERT_NE(wk, nullptr);
    at::Tensor shard = LocalShard(ops::GetDTensor(wk->Param("weight")).to_local(), 1);
    at::NoGradGuard no_grad;
    shard.mul_(1.5);
  };
  ModelReport r = RunModel(o);
  EXPECT_FALSE(r.ok());
  std::set<std::string> bad;
  for (const TensorCheck& c : r.checks) {
    if (!c.ok) bad.insert(c.name);
  }
  EXPECT_TRUE(bad.count("loss")) << "loss not flagged";
  EXPECT_TRUE(bad.count("grad layers.1.attention.wk.weight"));
}

// Counts per kind over a node and its descendants.
std::map<std::string, int64_t> Counts(const ModelReport& r, const std::string& fqn, int phase) {
  std::map<std::string, const ModuleNode*> by;
  for (const ModuleNode& n : r.modules) by[n.fqn] = &n;
  std::map<std::string, int64_t> out;
  std::function<void(const ModuleNode&)> visit = [&](const ModuleNode& n) {
    for (const CollectiveEvent& e : n.collectives[phase]) ++out[std::string(ToString(e.kind))];
    for (const std::string& c : n.children) visit(*by.at(c));
  };
  visit(*by.at(fqn));
  return out;
}

TEST(ModelTest, SequenceParallelBlockCollectivesAreTorchtitansClosedForm) {
  // Per block in forward: attention and feed_forward each all-gather their S(1) input and
  // reduce-scatter wo / w2's partial output: 2 + 2. Backward mirrors it.
  ModelReport r = RunModel(Small(4, "tp+sp"));
  for (int phase : {0, 1}) {
    auto c = Counts(r, "layers.1", phase);
    EXPECT_EQ(c["all_gather"], 2) << phase;
    EXPECT_EQ(c["reduce_scatter"], 2) << phase;
    EXPECT_EQ(c.size(), 2u) << phase;
  }
  // Without sequence parallelism: in forward one all-reduce per block half (wo and w2 outputs,
  // Partial → Replicate); in backward one per ColwiseParallel linear (wq, wk, wv, w1, w3): each
  // takes its replicated input with from_local, whose backward turns the Partial input gradient
  // into Replicate.
  ModelReport t = RunModel(Small(4, "tp"));
  const int64_t expected[2] = {2, 5};
  for (int phase : {0, 1}) {
    auto c = Counts(t, "layers.0", phase);
    EXPECT_EQ(c["all_reduce"], expected[phase]) << phase;
    EXPECT_EQ(c.size(), 1u) << phase;
  }
}

// Bytes of a dim of `n` elements chunked over `parts` as torch.chunk does, for chunk `i`.
int64_t ChunkLen(int64_t n, int64_t parts, int64_t i) {
  const int64_t full = (n + parts - 1) / parts;
  return std::max<int64_t>(0, std::min(n, (i + 1) * full) - i * full);
}

TEST(ModelTest, ParameterBytesPerRankAreTheClosedForm) {
  for (int64_t tp : {1, 3, 4}) {
    ModelRunOptions o = Small(tp, "tp+sp");
    o.args.vocab = 37;  // uneven over 3 and 4
    o.args.seq = 12;    // sequence parallelism needs seq divisible by tp
    if (tp == 3) {      // whole heads on every rank
      o.args.dim = 24;
      o.args.heads = 6;
    }
    o.meta = true;
    o.check = false;
    ModelReport r = RunModel(o);
    const int64_t d = o.args.dim, hd = o.args.heads * o.args.head_dim(), f = o.args.ffn_hidden();
    for (int64_t rank = 0; rank < tp; ++rank) {
      int64_t elems = ChunkLen(o.args.vocab, tp, rank) * d;  // tok_embeddings rows
      elems += d;                                            // norm (replicated)
      elems += ChunkLen(o.args.vocab, tp, rank) * d;         // output rows
      for (int64_t l = 0; l < o.args.layers; ++l) {
        elems += 2 * d;                           // the two norms
        elems += 3 * ChunkLen(hd, tp, rank) * d;  // wq wk wv rows
        elems += d * ChunkLen(hd, tp, rank);      // wo columns
        elems += 2 * ChunkLen(f, tp, rank) * d;   // w1 w3 rows
        elems += d * ChunkLen(f, tp, rank);       // w2 columns
      }
      EXPECT_EQ(r.param_bytes.at(rank), elems * 4) << "tp " << tp << " rank " << rank;
    }
  }
}

TEST(ModelTest, MetadataRunsGiveTheDataRunsFigures) {
  std::mt19937 rng(1234);
  auto pick = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  int runs = 0;
  while (runs < 200) {
    ModelRunOptions o;
    const int64_t tp = pick({1, 2, 3, 4, 6, 8});
    o.args.heads = pick({1, 2, 4, 8});
    o.args.dim = o.args.heads * pick({2, 4});
    o.args.layers = pick({1, 2});
    o.args.vocab = pick({5, 16, 23, 64});
    o.args.ffn = pick({0, 12, 24});
    o.args.batch = pick({1, 2, 3});
    const int64_t plan = pick({0, 1, 2, 3});
    o.plan = std::vector<std::string>{"tp", "tp+sp", "fsdp", "fsdp+tp"}[plan];
    const bool sp = o.plan == "tp+sp" || o.plan == "fsdp+tp";
    const int64_t dp = plan >= 2 ? pick({1, 2, 3}) : 1;
    if (o.plan == "fsdp" && tp > 1) continue;  // fsdp alone has no tp dim
    o.args.batch *= dp;
    o.loss_parallel = o.plan != "fsdp" && pick({0, 1}) == 1;
    o.args.seq = (sp ? tp : 1) * pick({1, 2, 3});
    // Every rank must hold whole heads (as upstream needs): heads · head_dim rows chunk in whole
    // heads when tp divides heads, or when each chunk is a multiple of head_dim.
    bool whole_heads = true;
    for (int64_t i = 0; i < tp; ++i) {
      const int64_t rows = ChunkLen(o.args.dim, tp, i);
      if (rows == 0 || rows % o.args.head_dim() != 0) whole_heads = false;
    }
    if (!whole_heads) continue;
    // Loss parallelism needs a vocabulary column on every tp rank (refused otherwise).
    if (o.loss_parallel && (tp - 1) * ((o.args.vocab + tp - 1) / tp) >= o.args.vocab) continue;
    if (o.plan == "fsdp") {
      o.mesh = DeviceMesh::Create({dp}, {"dp"});
    } else if (o.plan == "fsdp+tp") {
      o.mesh = DeviceMesh::Create({dp, tp}, {"dp", "tp"});
    } else {
      o.mesh = DeviceMesh::Create({tp}, {"tp"});
    }
    o.backward = pick({0, 1}) == 1;
    o.check = false;
    ModelReport data = RunModel(o);
    o.meta = true;
    ModelReport meta = RunModel(o);
    const std::string what =
        o.mesh.ToString() + " " + o.plan + (o.loss_parallel ? " loss-parallel" : "") + " dim " +
        std::to_string(o.args.dim) + " heads " + std::to_string(o.args.heads) + " vocab " +
        std::to_string(o.args.vocab) + " seq " + std::to_string(o.args.seq);
    ASSERT_EQ(data.modules.size(), meta.modules.size()) << what;
    for (size_t m = 0; m < data.modules.size(); ++m) {
      const ModuleNode& a = data.modules[m];
      const ModuleNode& b = meta.modules[m];
      ASSERT_EQ(a.fqn, b.fqn) << what;
      for (int ph = 0; ph < 2; ++ph) {
        ASSERT_EQ(a.collectives[ph].size(), b.collectives[ph].size()) << what << " " << a.fqn;
        for (size_t i = 0; i < a.collectives[ph].size(); ++i) {
          EXPECT_EQ(a.collectives[ph][i].kind, b.collectives[ph][i].kind) << what;
          EXPECT_EQ(a.collectives[ph][i].max_bytes_sent, b.collectives[ph][i].max_bytes_sent)
              << what;
          EXPECT_EQ(a.collectives[ph][i].max_bytes_received,
                    b.collectives[ph][i].max_bytes_received)
              << what;
        }
      }
      EXPECT_EQ(a.forward_peak_bytes, b.forward_peak_bytes) << what << " " << a.fqn;
    }
    EXPECT_EQ(data.peak_bytes, meta.peak_bytes) << what;
    EXPECT_EQ(data.param_bytes, meta.param_bytes) << what;
    EXPECT_EQ(data.grad_placements, meta.grad_placements) << what;
    ++runs;
  }
}

// FSDP2 frees a block's unsharded parameters after its forward and again after its backward: one
// more block adds its sharded parameters and gradients and its saved activations to the peak, not
// its unsharded parameters (the closed form of a block's parameter bytes; activations made tiny).
TEST(ModelTest, FullyShardFreesUnshardedParametersBetweenPasses) {
  auto peak = [](int64_t layers) {
    ModelRunOptions o;
    o.args.dim = 256;
    o.args.heads = 4;
    o.args.ffn = 1024;
    o.args.vocab = 8;
    o.args.seq = 1;
    o.args.batch = 4;
    o.args.layers = layers;
    o.mesh = DeviceMesh::Create({4}, {"dp"});
    o.plan = "fsdp";
    o.backward = true;
    o.meta = true;
    const ModelReport r = RunModel(o);
    return *std::max_element(r.peak_bytes.begin(), r.peak_bytes.end());
  };
  const int64_t d = 256, ffn = 1024, dp = 4;
  const int64_t unsharded = 4 * (4 * d * d + 3 * d * ffn + 2 * d);  // one block, float32
  const int64_t activations = 24 * (4 / dp) * 1 * ffn * 4;  // a generous bound for one token
  const int64_t grew = peak(4) - peak(3);
  EXPECT_GE(grew, unsharded / dp) << "a block's sharded parameters are always held";
  EXPECT_LE(grew, 2 * unsharded / dp + activations)
      << "one block more kept " << grew << " bytes; its unsharded parameters are " << unsharded;
}

TEST(ModelTest, BadOptionsAreRefusedNamingTheField) {
  ModelRunOptions o = Small(2, "tp+sp");
  o.plan = "pp";
  EXPECT_THROW(
      {
        try {
          RunModel(o);
        } catch (const InputError& e) {
          EXPECT_EQ(e.field(), "plan");
          throw;
        }
      },
      InputError);
  o = Small(2, "tp");
  o.args.heads = 3;  // does not divide dim 16
  try {
    RunModel(o);
    ADD_FAILURE() << "heads 3 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "heads");
  }
  o = Small(2, "tp");
  o.mesh = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  try {
    RunModel(o);
    ADD_FAILURE() << "a dp dim without fully_shard accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "mesh");
  }
}

}  // namespace
}  // namespace dtsim::model
