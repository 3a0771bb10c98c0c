// Batched ranks (src/tensor/rank_batch.h): every op of the batch table, on every kind of input
// layout, gives each rank the bits its own per-rank call gives (the same op with SetBatchedRanks
// off) and the bits of the unsharded op on the global tensor; the inputs that must fall back to
// per-rank calls do, and say why; and the stacked results behave as per-rank shards do (writes to
// one rank, views, a memory meter's figures).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"
#include "dtsim/tensor/sim_world.h"

namespace dtsim {
namespace {

std::vector<int64_t> Ranks(int64_t n) {
  std::vector<int64_t> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  return r;
}

// Turns batched ranks on for each test and restores the suite's setting (DTSIM_BATCHED_RANKS)
// after.
class RankBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = BatchedRanks();
    SetBatchedRanks(true);  // these tests are about the batched path, whatever the suite's setting
  }
  void TearDown() override { SetBatchedRanks(saved_); }

 private:
  bool saved_ = true;
};

// Bit-for-bit equality of two plain tensors, with their sizes, strides and dtype (NaN payloads
// included: the bytes are compared).
void ExpectSameBits(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_EQ(a.strides(), b.strides()) << what;
  at::Tensor x = a.contiguous().view({-1}).view(at::kByte);
  at::Tensor y = b.contiguous().view({-1}).view(at::kByte);
  EXPECT_TRUE(at::equal(x, y)) << what << "\n" << a << "\n" << b;
}

// A global tensor of `rows` x `cols` per rank, stacked over n ranks along dim 0, with values that
// exercise signs, zeros and rounding (floating) or small integers.
at::Tensor Global(int64_t n, int64_t rows, int64_t cols, at::ScalarType dtype, int64_t seed) {
  at::manual_seed(seed);
  at::Tensor g = at::randn({n * rows, cols}, at::kDouble) * 3;
  g.index_put_({g.abs() < 0.3}, 0.0);
  if (at::isFloatingType(dtype)) return g.to(dtype);
  if (dtype == at::kBool) return g > 0;
  return g.round().to(dtype);
}

// The layouts of a LocalTensor argument the batched path meets.
enum class Layout {
  kRows,         // row blocks of one tensor (what DistributeTensor gives for Shard(0))
  kReplica,      // one copy-on-write replica on every rank
  kStackedView,  // an earlier batched result (stacked storage)
  kSeparate,     // each rank's shard its own allocation, held by the LocalTensor alone
  kTransposed,   // stacked storage whose shards are dense but column-major (a transposing view's)
};

at::Tensor Local(const at::Tensor& global, int64_t n, Layout layout,
                 const std::shared_ptr<SimWorld>& world) {
  switch (layout) {
    case Layout::kRows:
      return MakeLocalTensor(Ranks(n), global.chunk(n, 0), world);
    case Layout::kReplica: {
      at::Tensor one = global.chunk(n, 0)[0].clone();
      std::vector<at::Tensor> shards;
      for (int64_t r = 0; r < n; ++r) shards.push_back(ShareReplica(one, world.get()));
      return MakeLocalTensor(Ranks(n), shards, world);
    }
    case Layout::kStackedView:
      return MakeStackedLocalTensor(Ranks(n), global.reshape({n, -1, global.size(1)}).clone(),
                                    world);
    case Layout::kTransposed: {
      const int64_t rows = global.size(0) / n, cols = global.size(1);
      at::Tensor col_major =
          global.reshape({n, rows, cols}).transpose(1, 2).contiguous().transpose(1, 2);
      return MakeStackedLocalTensor(Ranks(n), col_major, world);
    }
    case Layout::kSeparate: {
      std::vector<at::Tensor> shards;
      for (const at::Tensor& s : global.chunk(n, 0)) shards.push_back(s.clone());
      return MakeLocalTensor(Ranks(n), shards, world);
    }
  }
  return at::Tensor();
}

// The per-rank global of a layout: the replica layout holds the first block on every rank.
at::Tensor GlobalOf(const at::Tensor& global, int64_t n, Layout layout) {
  if (layout != Layout::kReplica) return global;
  at::Tensor one = global.chunk(n, 0)[0];
  return one.repeat({n, 1});
}

struct OpCase {
  std::string name;
  int arity;  // LocalTensor arguments
  std::function<at::Tensor(const std::vector<at::Tensor>&)> fn;
  bool floating_only = false;
  bool aligned = false;  // kElementwiseAligned: batched only on lane-aligned shards
};

std::vector<OpCase> Cases() {
  using V = std::vector<at::Tensor>;
  return {
      {"add", 2, [](const V& x) { return x[0] + x[1]; }},
      {"add_scalar", 1, [](const V& x) { return x[0] + 3; }},
      {"sub", 2, [](const V& x) { return x[0] - x[1]; }},
      {"mul", 2, [](const V& x) { return x[0] * x[1]; }},
      {"mul_scalar", 1, [](const V& x) { return x[0] * 2.5; }, true},
      {"div", 2, [](const V& x) { return x[0] / (x[1].abs() + 1); }},
      {"neg", 1, [](const V& x) { return -x[0]; }},
      {"abs", 1, [](const V& x) { return x[0].abs(); }},
      {"relu", 1, [](const V& x) { return at::relu(x[0]); }},
      {"maximum", 2, [](const V& x) { return at::maximum(x[0], x[1]); }},
      {"clamp", 1, [](const V& x) { return at::clamp(x[0], -1, 2); }},
      {"lt", 2, [](const V& x) { return x[0] < x[1]; }},
      {"ge_scalar", 1, [](const V& x) { return x[0] >= 0; }},
      {"where", 2, [](const V& x) { return at::where(x[0] > x[1], x[0], x[1]); }},
      {"reciprocal", 1, [](const V& x) { return at::reciprocal(x[0]); }, true},
      {"floor", 1, [](const V& x) { return at::floor(x[0] * 1.5); }, true},
      {"sigmoid", 1, [](const V& x) { return at::sigmoid(x[0]); }, true, true},
      {"exp", 1, [](const V& x) { return at::exp(x[0]); }, true, true},
      {"tanh", 1, [](const V& x) { return at::tanh(x[0]); }, true, true},
      {"silu", 1, [](const V& x) { return at::silu(x[0]); }, true, true},
      {"gelu", 1, [](const V& x) { return at::gelu(x[0]); }, true, true},
      {"log1p", 1, [](const V& x) { return at::log1p(x[0].abs()); }, true, true},
      {"pow2", 1, [](const V& x) { return at::pow(x[0], 2); }, true, true},
  };
}

// Runs `c` on LocalTensors of `layouts` with batched ranks on and off and checks both against each
// other and against the op on the unsharded tensors. Returns the batched run's LastRankExecution.
std::string CheckCase(const OpCase& c, int64_t n, int64_t rows, int64_t cols, at::ScalarType dtype,
                      const std::vector<Layout>& layouts) {
  auto world = SimWorld::Create();
  std::vector<at::Tensor> globals, locals;
  for (int a = 0; a < c.arity; ++a) {
    globals.push_back(Global(n, rows, cols, dtype, 17 * a + rows * 7 + cols));
    locals.push_back(Local(globals.back(), n, layouts[a], world));
  }
  const std::string what = c.name + " " + std::to_string(n) + "x[" + std::to_string(rows) + "," +
                           std::to_string(cols) + "] " + std::string(c10::toString(dtype));
  SetBatchedRanks(true);
  at::Tensor batched = c.fn(locals);
  const std::string how = LastRankExecution();
  SetBatchedRanks(false);
  at::Tensor per_rank = c.fn(locals);
  SetBatchedRanks(true);
  std::vector<at::Tensor> unsharded_in;
  for (int a = 0; a < c.arity; ++a) unsharded_in.push_back(GlobalOf(globals[a], n, layouts[a]));
  at::Tensor unsharded = c.fn(unsharded_in);
  for (int64_t r = 0; r < n; ++r) {
    ExpectSameBits(LocalShard(batched, r), LocalShard(per_rank, r),
                   what + " rank " + std::to_string(r) + " (" + how + ")");
    at::Tensor expected = unsharded.chunk(n, 0)[r];
    if (!c.aligned) {
      // Elementwise ops of one rounding: the unsharded op gives the same bits.
      EXPECT_TRUE(at::equal(LocalShard(batched, r).contiguous().view(at::kByte),
                            expected.contiguous().view(at::kByte)))
          << what << " rank " << r << " against the unsharded op";
    } else {
      EXPECT_TRUE(at::allclose(LocalShard(batched, r), expected, 1e-6, 1e-6))
          << what << " rank " << r << " against the unsharded op";
    }
  }
  return how;
}

TEST_F(RankBatchTest, EveryTableOpGivesEachRankItsOwnBitsOnEveryLayout) {
  const std::vector<std::vector<Layout>> layouts = {
      {Layout::kRows, Layout::kRows},
      {Layout::kStackedView, Layout::kRows},
      {Layout::kRows, Layout::kReplica},
      {Layout::kReplica, Layout::kReplica},
      {Layout::kTransposed, Layout::kTransposed},
      {Layout::kTransposed, Layout::kRows},
  };
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{3, 5}, {4, 16}, {16, 16}, {1, 7}};
  const RankExecutionCounts before = GetRankExecutionCounts();
  int checked = 0;
  for (const OpCase& c : Cases()) {
    for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kLong, at::kBool}) {
      if (c.floating_only && !at::isFloatingType(dtype)) continue;
      if (dtype == at::kBool && c.name != "lt" && c.name != "where" && c.name != "maximum")
        continue;
      for (int64_t n : {2, 8}) {
        for (auto [rows, cols] : shapes) {
          for (const auto& l : layouts) {
            const std::string how = CheckCase(c, n, rows, cols, dtype, l);
            const bool all_replicas = std::all_of(l.begin(), l.begin() + c.arity,
                                                  [](Layout x) { return x == Layout::kReplica; });
            const bool aligned_ok = rows * cols % 64 == 0;
            if (c.aligned && !aligned_ok) {
              EXPECT_THAT(how, ::testing::HasSubstr("not lane-aligned")) << c.name;
            } else if (all_replicas) {
              EXPECT_THAT(how, ::testing::HasSubstr("computed once")) << c.name;
            } else {
              EXPECT_THAT(how, ::testing::HasSubstr("batched (one call over"))
                  << c.name << " " << rows;
            }
            ++checked;
          }
        }
      }
    }
  }
  const RankExecutionCounts after = GetRankExecutionCounts();
  EXPECT_GT(after.batched - before.batched, checked / 2);
  EXPECT_GT(after.computed_once - before.computed_once, 0);
}

TEST_F(RankBatchTest, ShardsOutsideOneBufferRunPerRankAndSaySo) {
  // Shards in buffers of their own that the caller still holds: moving them would break the
  // caller's aliases, so the op runs per rank, and a write through the caller's tensor still shows.
  std::vector<at::Tensor> held;
  for (int r = 0; r < 4; ++r) held.push_back(at::full({4, 16}, float(r)));
  at::Tensor own = MakeLocalTensor(Ranks(4), held);
  at::Tensor sum = own + own;
  EXPECT_THAT(LastRankExecution(),
              ::testing::HasSubstr("per rank (shards not stacked in one buffer)"));
  held[2].fill_(7);
  EXPECT_TRUE(at::equal(LocalShard(own, 2), at::full({4, 16}, 7.0f)));
  EXPECT_TRUE(at::equal(LocalShard(sum, 2), at::full({4, 16}, 4.0f)));
  // Uneven shards (rows 3, 3, 3, 0).
  at::Tensor g = at::randn({9, 4});
  at::Tensor uneven = MakeLocalTensor(
      Ranks(4), [&](int64_t r) { return g.narrow(0, std::min<int64_t>(9, 3 * r), r < 3 ? 3 : 0); });
  at::Tensor y = uneven + uneven;
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank (uneven shards)"));
  EXPECT_TRUE(at::equal(LocalShard(y, 1), g.narrow(0, 3, 3) * 2));
  // Zero-size shards.
  at::Tensor empty = MakeLocalTensor(Ranks(4), at::empty({4, 0, 3}).chunk(4, 0));
  (void)(empty * 2);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank (zero-size shards)"));
  // Non-contiguous shards (columns of one tensor).
  at::Tensor cols = MakeLocalTensor(Ranks(4), at::randn({8, 16}).chunk(4, 1));
  (void)(cols * 2);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank (non-contiguous shards)"));
  // Ops outside the table.
  at::Tensor rows = MakeLocalTensor(Ranks(4), at::randn({8, 16}).chunk(4, 0));
  (void)at::mm(rows, at::randn({16, 4}));
  EXPECT_THAT(LastRankExecution(),
              ::testing::HasSubstr("aten::mm: per rank (no batch rule for this op)"));
  // alpha != 1 on floats: ATen's vector kernel fuses the multiply-add.
  (void)at::add(rows, rows, 3);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank (alpha other than 1"));
  // Off.
  SetBatchedRanks(false);
  (void)(rows + rows);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank (batched ranks are off)"));
}

TEST_F(RankBatchTest, ShardsNobodyElseSeesMoveIntoOneStackedBuffer) {
  // Each rank's shard its own allocation, held by the LocalTensor alone (as a redistribution leaves
  // them): the first batched op copies them into one stacked buffer, and later ops read it.
  const OpCase add = Cases()[0];
  EXPECT_THAT(CheckCase(add, 4, 4, 16, at::kFloat, {Layout::kSeparate, Layout::kRows}),
              ::testing::HasSubstr("batched"));
  at::Tensor lt = MakeLocalTensor(Ranks(4), [](int64_t r) { return at::full({2, 8}, float(r)); });
  const void* before = LocalShard(lt, 1).const_data_ptr();
  at::Tensor y = lt * 3;
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("batched"));
  EXPECT_NE(LocalShard(lt, 1).const_data_ptr(), before);
  EXPECT_EQ(static_cast<const float*>(LocalShard(lt, 1).const_data_ptr()),
            static_cast<const float*>(LocalShard(lt, 0).const_data_ptr()) + 16);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(at::equal(LocalShard(lt, r), at::full({2, 8}, float(r)))) << r;
    EXPECT_TRUE(at::equal(LocalShard(y, r), at::full({2, 8}, float(3 * r)))) << r;
  }
  // A view of a shard is an alias: those shards stay where they are.
  at::Tensor lt2 = MakeLocalTensor(Ranks(4), [](int64_t r) { return at::full({2, 8}, float(r)); });
  at::Tensor view = LocalShard(lt2, 3).view({16});
  (void)(lt2 * 3);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank"));
  view.fill_(-1);
  EXPECT_TRUE(at::equal(LocalShard(lt2, 3), at::full({2, 8}, -1.0f)));
  // Under a MemoryMeter every rank's buffer stays its own.
  at::Tensor lt3 = MakeLocalTensor(Ranks(4), [](int64_t r) { return at::full({2, 8}, float(r)); });
  {
    MemoryMeter meter;
    (void)(lt3 * 3);
    EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank"));
  }
}

TEST_F(RankBatchTest, ReductionsGiveEachRankItsOwnBits) {
  using Fn = std::function<at::Tensor(const at::Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> reductions = {
      {"sum_dim0", [](const at::Tensor& x) { return x.sum(0); }},
      {"sum_dim1", [](const at::Tensor& x) { return x.sum(1); }},
      {"sum_last_keepdim", [](const at::Tensor& x) { return x.sum(-1, true); }},
      {"sum_all_dims",
       [](const at::Tensor& x) {
         return x.sum(at::IntArrayRef{0, 1});
       }},
      {"mean_dim1", [](const at::Tensor& x) { return x.mean(1); }},
      {"mean_dims",
       [](const at::Tensor& x) {
         return x.mean(at::IntArrayRef{-2, -1}, true);
       }},
      {"amax", [](const at::Tensor& x) { return at::amax(x, 1); }},
      {"amin_all", [](const at::Tensor& x) { return at::amin(x, at::IntArrayRef{}); }},
      {"softmax", [](const at::Tensor& x) { return at::_softmax(x, -1, false); }},
      {"log_softmax0", [](const at::Tensor& x) { return at::_log_softmax(x, 0, false); }},
  };
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{3, 5},   {1, 7},  {4, 16},
                                                           {16, 16}, {7, 33}, {2, 300}};
  int batched = 0;
  for (const auto& [name, fn] : reductions) {
    for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
      for (int64_t n : {2, 8}) {
        for (auto [rows, cols] : shapes) {
          for (Layout layout : {Layout::kRows, Layout::kStackedView, Layout::kTransposed}) {
            at::Tensor g = Global(n, rows, cols, dtype, rows * 31 + cols);
            at::Tensor lt = Local(g, n, layout, SimWorld::Create());
            SetBatchedRanks(true);
            at::Tensor a = fn(lt);
            const std::string how = LastRankExecution();
            SetBatchedRanks(false);
            at::Tensor b = fn(lt);
            SetBatchedRanks(true);
            const std::string what = name + " " + std::to_string(n) + "x[" + std::to_string(rows) +
                                     "," + std::to_string(cols) + "] " + c10::toString(dtype) +
                                     " (" + how + ")";
            if (how.find("batched") != std::string::npos) ++batched;
            if (n * rows * cols > 32768) {
              EXPECT_THAT(how, ::testing::HasSubstr("too large for one thread")) << what;
            } else if (layout != Layout::kTransposed) {
              EXPECT_THAT(how, ::testing::HasSubstr("batched")) << what;
            }
            for (int64_t r = 0; r < n; ++r) {
              ExpectSameBits(LocalShard(a, r), LocalShard(b, r), what);
              EXPECT_TRUE(at::allclose(LocalShard(a, r), fn(g.chunk(n, 0)[r]), 1e-5, 1e-6)) << what;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(batched, 100);
}

TEST_F(RankBatchTest, ViewsOfStackedShardsAreLaidOverEveryRank) {
  // Views run once on rank 0's shard; every rank's view is where its own call puts it, and a chain
  // through a transpose stays batched.
  at::Tensor g = at::randn({4 * 6, 8});
  auto views = std::vector<std::pair<std::string, std::function<at::Tensor(const at::Tensor&)>>>{
      {"transpose", [](const at::Tensor& x) { return x.transpose(0, 1); }},
      {"narrow", [](const at::Tensor& x) { return x.narrow(1, 2, 3); }},
      {"select", [](const at::Tensor& x) { return x.select(0, 4); }},
      {"view",
       [](const at::Tensor& x) {
         return x.view({3, 2, 8});
       }},
      {"unsqueeze", [](const at::Tensor& x) { return x.unsqueeze(-1); }},
      {"expand",
       [](const at::Tensor& x) {
         return x.unsqueeze(0).expand({5, 6, 8});
       }},
      {"slice_step", [](const at::Tensor& x) { return x.slice(1, 1, 7, 2); }},
      {"permute",
       [](const at::Tensor& x) {
         return x.view({2, 3, 8}).permute({2, 0, 1});
       }},
  };
  for (Layout layout : {Layout::kRows, Layout::kStackedView}) {
    for (const auto& [name, fn] : views) {
      at::Tensor lt = Local(g, 4, layout, SimWorld::Create());
      SetBatchedRanks(true);
      at::Tensor batched = fn(lt);
      const std::string how = LastRankExecution();
      EXPECT_THAT(how, ::testing::HasSubstr("batched")) << name;
      SetBatchedRanks(false);
      at::Tensor per_rank = fn(lt);
      SetBatchedRanks(true);
      for (int64_t r = 0; r < 4; ++r) {
        const at::Tensor a = LocalShard(batched, r), b = LocalShard(per_rank, r);
        EXPECT_EQ(a.sizes(), b.sizes()) << name;
        EXPECT_EQ(a.strides(), b.strides()) << name;
        EXPECT_EQ(a.storage_offset(), b.storage_offset()) << name;
        EXPECT_EQ(a.const_data_ptr(), b.const_data_ptr()) << name;
        EXPECT_TRUE(at::equal(a, fn(g.chunk(4, 0)[r]))) << name;
      }
    }
  }
  // A write through a view of one rank changes that rank's shard only.
  at::Tensor lt = Local(g, 4, Layout::kStackedView, SimWorld::Create());
  at::Tensor t = lt.transpose(0, 1);
  LocalShard(t, 1).select(0, 0).fill_(9);
  EXPECT_TRUE(at::equal(LocalShard(lt, 1).select(1, 0), at::full({6}, 9.0f)));
  EXPECT_TRUE(at::equal(LocalShard(lt, 2), g.chunk(4, 0)[2]));
  // The chain of the bench: a transposed operand still batches, with the per-rank layout.
  at::Tensor y = (lt + 1).transpose(0, 1) * lt.transpose(0, 1);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("batched"));
  SetBatchedRanks(false);
  at::Tensor z = (lt + 1).transpose(0, 1) * lt.transpose(0, 1);
  SetBatchedRanks(true);
  for (int64_t r = 0; r < 4; ++r)
    ExpectSameBits(LocalShard(y, r), LocalShard(z, r), "chain rank " + std::to_string(r));
  // Views of replicas stay per rank: each rank's replica is its own copy-on-write storage.
  at::Tensor one = at::randn({3, 4});
  at::Tensor reps = MakeLocalTensor(Ranks(4), [&](int64_t) { return ShareReplica(one); });
  (void)reps.transpose(0, 1);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank"));
  // as_strided places its view at an absolute storage offset: per rank.
  (void)lt.as_strided({2, 2}, {1, 1}, 0);
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("per rank"));
}

TEST_F(RankBatchTest, AShardGivenOtherStorageDropsTheStackedForm) {
  at::Tensor g = at::arange(16, at::kFloat).reshape({4, 4});
  at::Tensor lt = MakeStackedLocalTensor(Ranks(4), g.clone());
  at::Tensor other = at::full({4}, 100.0f);
  LocalShard(lt, 2).set_(other);  // rank 2's shard is no longer a slice of the stacked storage
  at::Tensor y = lt + 1;
  EXPECT_TRUE(at::equal(LocalShard(y, 2), at::full({4}, 101.0f)));
  EXPECT_TRUE(at::equal(LocalShard(y, 1), g[1] + 1));
}

TEST_F(RankBatchTest, ZeroDimShardsWithMixedDtypesKeepPerRankTypePromotion) {
  // Per rank, a 0-dim float64 shard times a float32 plain tensor is float32 (a 0-dim tensor does
  // not promote a dimensioned one); stacked, it would be float64.
  at::Tensor g = at::arange(4, at::kDouble);
  std::vector<at::Tensor> shards;
  for (int64_t r = 0; r < 4; ++r) shards.push_back(g[r]);
  at::Tensor scalars = MakeLocalTensor(Ranks(4), shards);
  at::Tensor plain = at::ones({3}, at::kFloat);
  at::Tensor y = scalars * plain;
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("0-dim shard among tensors of mixed"));
  EXPECT_EQ(LocalShard(y, 2).scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(LocalShard(y, 2), at::full({3}, 2.0f)));
  // Same dtype: batched, still 0-dim per rank.
  at::Tensor z = scalars * scalars;
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("batched"));
  EXPECT_EQ(LocalShard(z, 3).dim(), 0);
  EXPECT_EQ(LocalShard(z, 3).item<double>(), 9.0);
}

TEST_F(RankBatchTest, PlainTensorsBroadcastPerRankNotAcrossRanks) {
  // Shards [4] and a plain [4, 4]: per rank the result is [4, 4]; stacked, the plain tensor must
  // not broadcast against the rank dim (4 ranks would match it silently).
  at::Tensor g = at::arange(16, at::kFloat);
  at::Tensor lt = MakeLocalTensor(Ranks(4), g.chunk(4, 0));
  at::Tensor plain = at::arange(16, at::kFloat).reshape({4, 4}) * 100;
  at::Tensor y = lt + plain;
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("batched"));
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(at::equal(LocalShard(y, r), g.chunk(4, 0)[r] + plain)) << r;
  }
}

TEST_F(RankBatchTest, StackedResultsBehaveAsPerRankShards) {
  at::Tensor g = at::arange(32, at::kFloat).reshape({8, 4});
  at::Tensor lt = MakeLocalTensor(Ranks(4), g.chunk(4, 0));
  at::Tensor y = lt * 2;  // batched: stacked storage
  ASSERT_THAT(LastRankExecution(), ::testing::HasSubstr("batched"));
  // A write to one rank's shard changes that rank only.
  LocalShard(y, 2).fill_(-1);
  EXPECT_TRUE(at::equal(LocalShard(y, 2), at::full({2, 4}, -1.0f)));
  EXPECT_TRUE(at::equal(LocalShard(y, 1), g.chunk(4, 0)[1] * 2));
  EXPECT_TRUE(at::equal(LocalShard(y, 3), g.chunk(4, 0)[3] * 2));
  // The next op reads the written value (the shards are views of the stacked storage).
  at::Tensor z = y + 1;
  EXPECT_THAT(LastRankExecution(), ::testing::HasSubstr("batched"));
  EXPECT_TRUE(at::equal(LocalShard(z, 2), at::zeros({2, 4})));
  // In-place ops and views per rank alias the stacked storage.
  y.add_(10);
  EXPECT_TRUE(at::equal(LocalShard(y, 0), g.chunk(4, 0)[0] * 2 + 10));
  at::Tensor row = y.narrow(0, 1, 1);
  row.fill_(5);
  EXPECT_TRUE(at::equal(LocalShard(y, 3)[1], at::full({4}, 5.0f)));
  EXPECT_TRUE(at::equal(LocalShard(y, 3)[0], g.chunk(4, 0)[3][0] * 2 + 10));
  // A resize of the shards leaves the stacked form (they are no longer its slices).
  y.resize_({3, 4});
  EXPECT_EQ(LocalShard(y, 1).size(0), 3);
  at::Tensor w = y * 1;
  EXPECT_EQ(LocalShard(w, 1).size(0), 3);
  EXPECT_TRUE(at::equal(LocalShard(w, 1)[0], g.chunk(4, 0)[1][0] * 2 + 10));
  // Autograd through batched ops.
  at::Tensor a = MakeLocalTensor(Ranks(4), g.chunk(4, 0));
  a.requires_grad_();
  at::Tensor loss = (a * a).sum();
  loss.backward();
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(at::equal(LocalShard(a.grad(), r), g.chunk(4, 0)[r] * 2)) << r;
  }
}

TEST_F(RankBatchTest, MemoryMeterFiguresMatchThePerRankCalls) {
  at::Tensor g = at::randn({8, 16});
  at::Tensor rows = MakeLocalTensor(Ranks(4), g.chunk(4, 0));
  at::Tensor one = at::randn({2, 16});
  std::vector<at::Tensor> reps;
  for (int r = 0; r < 4; ++r) reps.push_back(ShareReplica(one));
  at::Tensor replicas = MakeLocalTensor(Ranks(4), reps);
  auto measure = [&](bool batched, std::string* how_rows, std::string* how_replicas) {
    SetBatchedRanks(batched);
    MemoryMeter meter;
    meter.BeginWindow();
    at::Tensor a = rows * 2;
    *how_rows = LastRankExecution();
    at::Tensor b = replicas * 2;
    *how_replicas = LastRankExecution();
    std::vector<int64_t> live;
    for (int64_t r = 0; r < 4; ++r) live.push_back(meter.Live(r));
    std::vector<int64_t> peaks = meter.Peaks(Ranks(4));
    live.insert(live.end(), peaks.begin(), peaks.end());
    return live;
  };
  std::string how_rows, how_replicas, unused;
  const std::vector<int64_t> batched = measure(true, &how_rows, &how_replicas);
  const std::vector<int64_t> per_rank = measure(false, &unused, &unused);
  EXPECT_EQ(batched, per_rank);
  // Each rank holds 2 x 16 floats of each result: 256 bytes.
  EXPECT_EQ(per_rank[0], 256);
  EXPECT_THAT(how_rows, ::testing::HasSubstr("per rank (a memory meter is on"));
  EXPECT_THAT(how_replicas, ::testing::HasSubstr("computed once"));
}

TEST_F(RankBatchTest, MakeStackedLocalTensorChecksItsInput) {
  EXPECT_THROW(MakeStackedLocalTensor(Ranks(4), at::zeros({3, 2})), std::exception);
  EXPECT_THROW(MakeStackedLocalTensor({1, 0}, at::zeros({2, 2})), std::exception);
  EXPECT_THROW(MakeStackedLocalTensor(Ranks(2), at::zeros({})), std::exception);
  at::Tensor s = at::arange(6).reshape({3, 2});
  at::Tensor lt = MakeStackedLocalTensor({0, 4, 7}, s);
  EXPECT_TRUE(at::equal(LocalShard(lt, 4), at::arange(2, 4)));
  LocalShard(lt, 7).fill_(0);  // a view of the stacked tensor
  EXPECT_EQ(s[2][1].item<int64_t>(), 0);
}

}  // namespace
}  // namespace dtsim
