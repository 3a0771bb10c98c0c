// Tests of LocalTensor (dtsim/tensor/local_tensor.h): per-rank dispatch over ≥60 ATen ops on uneven
// shards, per-rank sizes, in-place identity, rejected plain mutation, Reconcile, the printer and
// per-rank RNG.
#include "dtsim/tensor/local_tensor.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <functional>
#include <string>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/tensor/sim_world.h"

namespace dtsim {
namespace {

using ::testing::HasSubstr;
using Tensors = std::vector<at::Tensor>;

const std::vector<int64_t> kRanks = {0, 1, 2, 3};

// Exact comparison: same dtype, same sizes, same values (NaN equal to NaN).
bool SameTensor(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (at::isFloatingType(a.scalar_type())) return at::allclose(a, b, 0.0, 0.0, /*equal_nan=*/true);
  return at::equal(a, b);
}

// Rank r's shard: rows[r] x 4 of integer-valued floats r*100 + (row*4 + col) - 7.
at::Tensor Rows(const std::vector<int64_t>& rows, int64_t salt = 0) {
  return MakeLocalTensor(kRanks, [&](int64_t r) {
    return (at::arange(rows[r] * 4, at::kFloat).reshape({rows[r], 4}) + r * 100 + salt - 7) / 2;
  });
}

struct OpCase {
  std::string name;
  std::function<Tensors(const at::Tensor& a, const at::Tensor& b)> fn;
};

std::vector<OpCase> OpCases() {
  const at::Tensor w =
      at::arange(12, at::kFloat).reshape({4, 3}) - 5;  // plain, broadcast to every rank
  const at::Tensor bias = at::arange(3, at::kFloat);
  const at::Tensor row = at::arange(4, at::kFloat);
  const at::Tensor cols = at::tensor({3, 0, 2}, at::kLong);
  auto one = [](at::Tensor t) { return Tensors{std::move(t)}; };
  std::vector<OpCase> c = {
      {"add", [=](auto a, auto b) { return one(a + b); }},
      {"sub", [=](auto a, auto b) { return one(a - b); }},
      {"mul", [=](auto a, auto b) { return one(a * b); }},
      {"div", [=](auto a, auto b) { return one(a / (b.abs() + 1)); }},
      {"neg", [=](auto a, auto) { return one(-a); }},
      {"abs", [=](auto a, auto) { return one(a.abs()); }},
      {"exp", [=](auto a, auto) { return one((a / 100).exp()); }},
      {"log1p", [=](auto a, auto) { return one(a.abs().log1p()); }},
      {"sqrt", [=](auto a, auto) { return one(a.abs().sqrt()); }},
      {"sin", [=](auto a, auto) { return one(a.sin()); }},
      {"tanh", [=](auto a, auto) { return one(a.tanh()); }},
      {"sigmoid", [=](auto a, auto) { return one(a.sigmoid()); }},
      {"relu", [=](auto a, auto) { return one(at::relu(a)); }},
      {"pow", [=](auto a, auto) { return one(a.pow(2)); }},
      {"clamp", [=](auto a, auto) { return one(a.clamp(-1, 30)); }},
      {"maximum", [=](auto a, auto b) { return one(at::maximum(a, b)); }},
      {"minimum", [=](auto a, auto b) { return one(at::minimum(a, b)); }},
      {"where", [=](auto a, auto b) { return one(at::where(a > 2, a, b)); }},
      {"add_plain_broadcast", [=](auto a, auto) { return one(a + row); }},
      {"mul_scalar", [=](auto a, auto) { return one(a * 3); }},
      {"sum_dim", [=](auto a, auto) { return one(a.sum(1)); }},
      {"sum_all", [=](auto a, auto) { return one(a.sum()); }},
      {"mean_dim", [=](auto a, auto) { return one(a.mean(1)); }},
      {"amax", [=](auto a, auto) { return one(a.amax(1)); }},
      {"sum_keepdim", [=](auto a, auto) { return one(a.sum(0, true)); }},
      {"prod", [=](auto a, auto) { return one(a.prod(1)); }},
      {"cumsum1", [=](auto a, auto) { return one(a.cumsum(1)); }},
      {"cumsum0", [=](auto a, auto) { return one(a.cumsum(0)); }},
      {"argmax", [=](auto a, auto) { return one(a.argmax(1)); }},
      {"max_dim", [=](auto a, auto) { auto [v, i] = a.max(1); return Tensors{v, i}; }},
      {"sort", [=](auto a, auto) { auto [v, i] = a.sort(1, true); return Tensors{v, i}; }},
      {"topk", [=](auto a, auto) { auto [v, i] = a.topk(2, 1); return Tensors{v, i}; }},
      {"softmax", [=](auto a, auto) { return one(a.softmax(1)); }},
      {"log_softmax", [=](auto a, auto) { return one(a.log_softmax(1)); }},
      {"layer_norm", [=](auto a, auto) { return one(at::layer_norm(a, {4})); }},
      {"transpose", [=](auto a, auto) { return one(a.transpose(0, 1)); }},
      {"t_contiguous", [=](auto a, auto) { return one(a.t().contiguous()); }},
      {"reshape", [=](auto a, auto) { return one(a.reshape({-1})); }},
      {"view", [=](auto a, auto) { return one(a.view({-1, 2})); }},
      {"view_symint", [=](auto a, auto) { return one(a.view_symint({a.sym_size(0) * 2, 2})); }},
      {"unsqueeze", [=](auto a, auto) { return one(a.unsqueeze(0)); }},
      {"flatten", [=](auto a, auto) { return one(a.flatten()); }},
      {"narrow", [=](auto a, auto) { return one(a.narrow(1, 1, 2)); }},
      {"slice", [=](auto a, auto) { return one(a.slice(1, 0, 2)); }},
      {"select", [=](auto a, auto) { return one(a.select(1, 0)); }},
      {"index_select", [=](auto a, auto) { return one(a.index_select(1, cols)); }},
      {"gather", [=](auto a, auto) { return one(a.gather(1, a.abs().to(at::kLong).remainder(4))); }},
      {"index_tensor", [=](auto a, auto) {
         c10::List<std::optional<at::Tensor>> idx;
         idx.push_back(std::nullopt);
         idx.push_back(cols);
         return one(at::index(a, idx));
       }},
      {"matmul", [=](auto a, auto) { return one(at::matmul(a, w)); }},
      {"mm", [=](auto a, auto) { return one(at::mm(a, w)); }},
      {"addmm", [=](auto a, auto) { return one(at::addmm(bias, a, w)); }},
      {"linear", [=](auto a, auto) { return one(at::linear(a, w.t(), bias)); }},
      {"bmm", [=](auto a, auto) { return one(at::bmm(a.unsqueeze(0), w.unsqueeze(0))); }},
      {"einsum", [=](auto a, auto) { return one(at::einsum("ij,jk->ik", {a, w})); }},
      {"cat0", [=](auto a, auto b) { return one(at::cat({a, b}, 0)); }},
      {"cat1", [=](auto a, auto b) { return one(at::cat({a, b}, 1)); }},
      {"stack", [=](auto a, auto b) { return one(at::stack({a, b})); }},
      {"split_even_dim", [=](auto a, auto) { return a.split(2, 1); }},
      {"chunk_even_dim", [=](auto a, auto) { return a.chunk(2, 1); }},
      {"unbind1", [=](auto a, auto) { return a.unbind(1); }},
      {"clone", [=](auto a, auto) { return one(a.clone()); }},
      {"add_inplace", [=](auto a, auto b) { return one(a.clone().add_(b)); }},
      {"mul_inplace_scalar", [=](auto a, auto) { return one(a.clone().mul_(2)); }},
      {"out_variant", [=](auto a, auto b) { auto out = a.new_empty({0}); at::add_out(out, a, b); return one(out); }},
      {"masked_fill", [=](auto a, auto) { return one(a.masked_fill(a > 3, 0)); }},
      {"eq", [=](auto a, auto b) { return one(a.eq(b)); }},
      {"lt", [=](auto a, auto b) { return one(a.lt(b)); }},
      {"logical_and", [=](auto a, auto b) { return one(at::logical_and(a > 0, b > 0)); }},
      {"to_double", [=](auto a, auto) { return one(a.to(at::kDouble)); }},
      {"floor_divide", [=](auto a, auto) { return one(at::floor_divide(a, 3)); }},
      {"remainder", [=](auto a, auto) { return one(a.remainder(3)); }},
      {"bitwise_and", [=](auto a, auto b) { return one(a.to(at::kLong).bitwise_and(b.to(at::kLong))); }},
      {"flip", [=](auto a, auto) { return one(a.flip({1})); }},
      {"roll", [=](auto a, auto) { return one(a.roll({1}, {1})); }},
      {"repeat", [=](auto a, auto) { return one(a.repeat({1, 2})); }},
      {"expand_symint", [=](auto a, auto) {
         return one(a.unsqueeze(1).expand_symint({a.sym_size(0), 3, a.sym_size(1)}));
       }},
      {"new_zeros_symint", [=](auto a, auto) { return one(a.new_zeros_symint(a.sym_sizes())); }},
      {"zeros_like", [=](auto a, auto) { return one(at::zeros_like(a)); }},
      {"full_like", [=](auto a, auto) { return one(at::full_like(a, 7)); }},
      {"scatter_add", [=](auto a, auto b) { return one(a.scatter_add(1, a.abs().to(at::kLong).remainder(4), b)); }},
      {"norm", [=](auto a, auto) { return one(a.norm()); }},
      {"var", [=](auto a, auto) { return one(a.var(1)); }},
      {"any", [=](auto a, auto) { return one((a > 5).any(1)); }},
      {"all", [=](auto a, auto) { return one((a > -50).all()); }},
      {"nonzero", [=](auto a, auto) { return one((a > 3).nonzero()); }},
      {"masked_select", [=](auto a, auto) { return one(a.masked_select(a > 3)); }},
      {"triu", [=](auto a, auto) { return one(a.triu()); }},
      {"mv", [=](auto a, auto) { return one(at::mv(a, row)); }},
      {"cross_entropy_none", [=](auto a, auto) {
         at::Tensor target = a.select(1, 0).abs().to(at::kLong).remainder(4);
         return one(at::cross_entropy_loss(a, target, {}, at::Reduction::None));
       }},
      {"detach", [=](auto a, auto) { return one(a.detach()); }},
      {"contiguous_sum_sq", [=](auto a, auto b) { return one(((a - b) * (a - b)).sum(1)); }},
  };
  return c;
}

struct ShardCase {
  std::string name;
  std::vector<int64_t> rows;
};

class LocalTensorOpTest : public ::testing::TestWithParam<ShardCase> {};

// Every op on a LocalTensor with uneven shards equals the op applied to every rank's shards
// directly.
TEST_P(LocalTensorOpTest, OpMatchesPerRankApplication) {
  const std::vector<int64_t>& rows = GetParam().rows;
  at::Tensor a = Rows(rows);
  at::Tensor b = Rows(rows, 3);
  std::vector<OpCase> cases = OpCases();
  ASSERT_GE(cases.size(), 60u);
  for (const OpCase& op : cases) {
    SCOPED_TRACE(op.name);
    Tensors got;
    ASSERT_NO_THROW(got = op.fn(a, b)) << op.name;
    for (int64_t r : kRanks) {
      Tensors want = op.fn(LocalShard(a, r), LocalShard(b, r));
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_TRUE(IsLocalTensor(got[k])) << op.name;
        EXPECT_TRUE(SameTensor(LocalShard(got[k], r), want[k]))
            << op.name << " rank " << r << " output " << k << ": got "
            << ShardToString(LocalShard(got[k], r)) << " want " << ShardToString(want[k]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Uneven, LocalTensorOpTest,
                         ::testing::Values(ShardCase{"rows_3_3_3_0", {3, 3, 3, 0}},
                                           ShardCase{"rows_5_2_0_1", {5, 2, 0, 1}},
                                           ShardCase{"rows_2_2_2_2", {2, 2, 2, 2}}),
                         [](const auto& info) { return info.param.name; });

TEST(LocalTensorTest, SymSizeIsPerRank) {
  at::Tensor a = Rows({3, 3, 3, 0});
  c10::SymInt rows = a.sym_size(0);
  EXPECT_EQ(LocalInt(rows, 0), 3);
  EXPECT_EQ(LocalInt(rows, 3), 0);
  EXPECT_FALSE(rows.maybe_as_int().has_value());
  EXPECT_EQ(a.sym_size(1).maybe_as_int(), std::optional<int64_t>(4));  // even dim: a plain int
  c10::SymInt twice = rows * 2 + 1;
  EXPECT_EQ(LocalInt(twice, 0), 7);
  EXPECT_EQ(LocalInt(twice, 3), 1);
  EXPECT_EQ(LocalInt(a.sym_numel(), 1), 12);
  EXPECT_EQ(LocalInt(a.sym_numel(), 3), 0);
  // The dispatched sym_size op answers per rank too.
  EXPECT_EQ(LocalInt(at::_ops::sym_size_int::call(a, 0), 3), 0);
  EXPECT_EQ(a.dim(), 2);
}

TEST(LocalTensorTest, ComparisonsRefuseWhenRanksDisagree) {
  at::Tensor a = Rows({3, 3, 3, 0});
  try {
    bool small = a.sym_size(0) < 2;
    FAIL() << "comparison of per-rank sizes returned " << small;
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("{0: false, 1: false, 2: false, 3: true}"));
  }
  EXPECT_THROW((void)(a.sym_size(0) == 3), InputError);
  // When every rank agrees the answer is a plain bool.
  EXPECT_TRUE(a.sym_size(0) >= 0);
  EXPECT_TRUE(a.sym_size(0) != 7);
}

TEST(LocalTensorTest, SizesOnUnevenShardsThrowsNamingEveryRank) {
  at::Tensor a = Rows({3, 3, 3, 0});
  try {
    (void)a.sizes();
    FAIL() << "sizes() on uneven shards did not throw";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("sizes() is not defined for uneven shards"));
    EXPECT_THAT(e.what(),
                HasSubstr("rank 0: [3, 4], rank 1: [3, 4], rank 2: [3, 4], rank 3: [0, 4]"));
  }
  EXPECT_THROW((void)a.numel(), InputError);
  EXPECT_THROW((void)a.size(0), InputError);
  // Even shards have plain sizes.
  at::Tensor even = Rows({2, 2, 2, 2});
  EXPECT_EQ(even.sizes(), (c10::IntArrayRef{2, 4}));
  EXPECT_EQ(even.numel(), 8);
}

TEST(LocalTensorTest, ScalarResultsPassOnlyWhenRanksAgree) {
  at::Tensor same = MakeLocalTensor(kRanks, [](int64_t) { return at::tensor({5.0f}); });
  EXPECT_EQ(same.item<float>(), 5.0f);
  at::Tensor differ =
      MakeLocalTensor(kRanks, [](int64_t r) { return at::tensor({static_cast<float>(r)}); });
  try {
    (void)differ.item<float>();
    FAIL() << "item() on differing values did not throw";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("differs per rank"));
    EXPECT_THAT(e.what(), HasSubstr("rank 3: 3"));
  }
  // equal() returns a bool when every rank agrees, and refuses when they do not.
  at::Tensor a = Rows({2, 2, 2, 2});
  EXPECT_TRUE(at::equal(a, a.clone()));
  EXPECT_FALSE(at::equal(a, a + 1));
  at::Tensor shifted =
      MapShards(a, [](int64_t r, const at::Tensor& s) { return s + (r > 1 ? 1 : 0); });
  EXPECT_THROW((void)at::equal(a, shifted), InputError);
}

TEST(LocalTensorTest, ListLengthDifferingPerRankIsAnError) {
  at::Tensor a = Rows({5, 2, 0, 1});
  try {
    (void)a.split(2, 0);
    FAIL() << "split on an uneven dim did not throw";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the length of the returned tensor list differs per rank"));
    EXPECT_THAT(e.what(), HasSubstr("rank 0: 3, rank 1: 1"));
  }
}

TEST(LocalTensorTest, ResultsWithDifferentDimsPerRankAreAnError) {
  at::Tensor a = Rows({1, 2, 1, 0});
  try {
    (void)a.squeeze(0);  // rows 1 squeeze to 1-D, rows 2 and 0 stay 2-D
    FAIL() << "squeeze giving different dims per rank did not throw";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("shards differ in their number of dims: rank 0: [4], rank 1: [2, 4]"));
  }
}

TEST(LocalTensorTest, InPlaceReturnsTheSameWrapper) {
  at::Tensor a = Rows({3, 3, 3, 0});
  at::Tensor shard1 = LocalShard(a, 1);
  at::Tensor r = a.add_(1);
  EXPECT_TRUE(r.is_same(a));
  EXPECT_TRUE(LocalShard(a, 1).is_same(shard1));  // the shard was mutated in place
  EXPECT_TRUE(at::equal(LocalShard(a, 1), LocalShard(Rows({3, 3, 3, 0}), 1) + 1));
  // Per-rank views alias their shards.
  a.narrow(1, 0, 1).fill_(42);
  EXPECT_EQ(LocalShard(a, 2)[1][0].item<float>(), 42.0f);
  // out= returns the out wrapper and refreshes its sizes.
  at::Tensor out = Rows({3, 3, 3, 0}).new_empty({0});
  at::Tensor res = at::mul_out(out, a, a);
  EXPECT_TRUE(res.is_same(out));
  EXPECT_EQ(LocalInt(out.sym_size(0), 0), 3);
  EXPECT_EQ(LocalInt(out.sym_size(0), 3), 0);
}

TEST(LocalTensorTest, PlainTensorAsMutatedArgumentIsRejected) {
  at::Tensor a = Rows({2, 2, 2, 2});
  at::Tensor plain = at::zeros({2, 4});
  try {
    plain.add_(a);
    FAIL() << "plain.add_(local) did not throw";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("would mutate a plain tensor"));
  }
  EXPECT_TRUE(at::equal(plain, at::zeros({2, 4})));
  // A plain tensor as a read-only argument is the same value on every rank.
  at::Tensor sum = a + plain;
  EXPECT_TRUE(IsLocalTensor(sum));
}

TEST(LocalTensorTest, ReconcileReturnsTheCommonValueOrNamesTheDifference) {
  at::Tensor same = MakeLocalTensor(kRanks, [](int64_t) { return at::arange(4, at::kFloat); });
  at::Tensor one = Reconcile(same);
  EXPECT_FALSE(IsLocalTensor(one));
  EXPECT_TRUE(at::equal(one, at::arange(4, at::kFloat)));
  at::Tensor differ =
      MakeLocalTensor(kRanks, [](int64_t r) { return at::arange(4, at::kFloat) + (r == 2); });
  try {
    Reconcile(differ);
    FAIL() << "Reconcile of differing shards did not throw";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 [0, 1, 2, 3] vs rank 2 [1, 2, 3, 4]"));
  }
  EXPECT_THROW(Reconcile(Rows({3, 3, 3, 0})), InputError);
}

TEST(LocalTensorTest, PrinterListsEveryRank) {
  at::Tensor t = MakeLocalTensor({0, 1, 2}, [](int64_t r) {
    return at::arange(2 * r, at::kLong).reshape({r, 2});
  });
  EXPECT_EQ(ToString(t), "LocalTensor(0: [], 1: [[0, 1]], 2: [[0, 1], [2, 3]])");
  at::Tensor f = MakeLocalTensor({0, 1}, [](int64_t r) { return at::tensor({0.5f + r, -2.0f}); });
  EXPECT_EQ(ToString(f), "LocalTensor(0: [0.5, -2], 1: [1.5, -2])");
  EXPECT_EQ(ToString(at::tensor({1, 0}).to(at::kBool)), "[1, 0]");
}

TEST(LocalTensorTest, RandomNumbersArePerRankAndReproducible) {
  at::Tensor a = Rows({2, 2, 2, 2});
  WorldOf(a)->SetSeed(11);
  at::Tensor r1 = at::rand_like(a);
  at::Tensor r1b = at::randn_like(a);
  WorldOf(a)->SetSeed(11);
  at::Tensor r2 = at::rand_like(a);
  for (int64_t r : kRanks) {
    EXPECT_TRUE(at::equal(LocalShard(r1, r), LocalShard(r2, r))) << "rank " << r;
    // Documented: rank r draws from a CPU generator seeded base + r.
    at::Tensor want = at::rand({2, 4}, at::detail::createCPUGenerator(11 + r));
    EXPECT_TRUE(at::equal(LocalShard(r1, r), want)) << "rank " << r;
  }
  EXPECT_FALSE(at::equal(LocalShard(r1, 0), LocalShard(r1, 1)));
  EXPECT_FALSE(at::equal(LocalShard(r1, 0), LocalShard(r1b, 0)));
  // The default generator is untouched by the per-rank streams.
  at::manual_seed(3);
  at::Tensor g1 = at::rand({3});
  at::manual_seed(3);
  (void)at::rand_like(a);
  at::Tensor g2 = at::rand({3});
  EXPECT_TRUE(at::equal(g1, g2));
}

TEST(LocalTensorTest, WorldsKeepTheirOwnRandomStreams) {
  // Two simulations in one process: seeding or drawing in one leaves the other's streams alone.
  at::Tensor a = Rows({2, 2, 2, 2});
  at::Tensor b = Rows({2, 2, 2, 2});
  ASSERT_NE(WorldOf(a), WorldOf(b));
  WorldOf(a)->SetSeed(5);
  WorldOf(b)->SetSeed(5);
  at::Tensor a1 = at::rand_like(a);
  at::Tensor a2 = at::rand_like(a);  // a's world moves on ...
  WorldOf(a)->SetSeed(99);           // ... and is reseeded
  at::Tensor b1 = at::rand_like(b);  // b's world still starts at its own seed
  for (int64_t r : kRanks) {
    EXPECT_TRUE(at::equal(LocalShard(b1, r), LocalShard(a1, r))) << "rank " << r;
    EXPECT_FALSE(at::equal(LocalShard(a2, r), LocalShard(a1, r))) << "rank " << r;
  }
  // Results of ops and MapShards stay in their input's world.
  EXPECT_EQ(WorldOf(a1), WorldOf(a));
  EXPECT_EQ(WorldOf(a * 2 + 1), WorldOf(a));
  EXPECT_EQ(WorldOf(MapShards(b, [](int64_t, const at::Tensor& s) { return s + 1; })), WorldOf(b));
  EXPECT_THROW(WorldOf(at::ones({2})), InputError);
}

// A composite operator defined after LocalTensor's dispatch was registered still arrives whole (per
// rank), so it may read sizes() of each rank's shard; decomposed on the wrapper it would throw on
// uneven shards.
at::Tensor FirstRowsTwice(const at::Tensor& x) {
  return at::cat({x.narrow(0, 0, x.size(0)), x}, 0);
}

TEST(LocalTensorTest, OperatorsDefinedLaterArePerRank) {
  (void)Rows({1, 1, 1, 1});  // the dispatch is registered before the operator is defined
  static torch::Library* lib = [] {
    auto* l = new torch::Library(torch::Library::FRAGMENT, "dtsim_test", std::nullopt, __FILE__,
                                 __LINE__);
    l->def("first_rows_twice(Tensor x) -> Tensor", &FirstRowsTwice);
    return l;
  }();
  (void)lib;
  // Documented: a later operator is registered at the next MakeLocalTensor or LocalTensor
  // operation.
  at::Tensor a = Rows({3, 3, 3, 0});
  auto op = c10::Dispatcher::singleton()
                .findSchemaOrThrow("dtsim_test::first_rows_twice", "")
                .typed<at::Tensor(const at::Tensor&)>();
  at::Tensor y = op.call(a);
  for (int64_t r : kRanks)
    EXPECT_TRUE(at::equal(LocalShard(y, r), FirstRowsTwice(LocalShard(a, r)))) << r;
  EXPECT_EQ(LocalInt(y.sym_size(0), 3), 0);
}

TEST(LocalTensorTest, DropoutAndNormalArePerRankAndReproducible) {
  at::Tensor a = Rows({4, 4, 4, 4}) * 0 + 1;
  WorldOf(a)->SetSeed(7);
  at::Tensor d1 = at::dropout(a, 0.5, /*train=*/true);
  at::Tensor n1 = at::empty_like(a).normal_();
  WorldOf(a)->SetSeed(7);
  at::Tensor d2 = at::dropout(a, 0.5, /*train=*/true);
  at::Tensor n2 = at::empty_like(a).normal_();
  for (int64_t r : kRanks) {
    EXPECT_TRUE(at::equal(LocalShard(d1, r), LocalShard(d2, r)));
    EXPECT_TRUE(at::equal(LocalShard(n1, r), LocalShard(n2, r)));
  }
  EXPECT_FALSE(at::equal(LocalShard(d1, 0), LocalShard(d1, 1)));
  EXPECT_FALSE(at::equal(LocalShard(n1, 2), LocalShard(n1, 3)));
}

TEST(LocalTensorTest, AutogradRunsPerRank) {
  at::Tensor a = Rows({2, 2, 2, 2});
  a.requires_grad_();
  at::Tensor loss = (a * 2).sum();
  loss.backward(MakeLocalTensor(kRanks, [](int64_t) { return at::ones({}); }));
  ASSERT_TRUE(a.grad().defined());
  for (int64_t r : kRanks) EXPECT_TRUE(at::equal(LocalShard(a.grad(), r), at::full({2, 4}, 2.0f)));
}

TEST(LocalTensorTest, MakeLocalTensorValidatesItsInput) {
  EXPECT_THROW(MakeLocalTensor({1, 0}, Tensors{at::zeros({1}), at::zeros({1})}), InputError);
  EXPECT_THROW(MakeLocalTensor({0, 1}, Tensors{at::zeros({1})}), InputError);
  EXPECT_THROW(MakeLocalTensor({0, 1}, Tensors{at::zeros({1}), at::zeros({1}, at::kLong)}),
               InputError);
  EXPECT_THROW(MakeLocalTensor({0, 1}, Tensors{at::zeros({1}), at::zeros({1, 1})}), InputError);
  EXPECT_THROW(MakeLocalTensor(std::vector<int64_t>{}, Tensors{}), InputError);
  at::Tensor a = Rows({1, 1, 1, 1});
  EXPECT_THROW(LocalShard(a, 9), InputError);
  at::Tensor other = MakeLocalTensor({0, 1}, [](int64_t) { return at::zeros({1, 4}); });
  EXPECT_THROW(a + other, InputError);
}

TEST(LocalTensorTest, MapShardsAndPlainTensors) {
  at::Tensor a = Rows({3, 3, 3, 0});
  at::Tensor m = MapShards(a, [](int64_t r, const at::Tensor& s) { return s.sum(0) * r; });
  EXPECT_TRUE(at::equal(LocalShard(m, 2), LocalShard(a, 2).sum(0) * 2));
  at::Tensor n =
      MapShards({a, at::ones({4})}, [](int64_t r, const Tensors& s) { return s[0] + s[1] * r; });
  EXPECT_TRUE(at::equal(LocalShard(n, 1), LocalShard(a, 1) + 1));
  // The helpers are for LocalTensors only: a plain tensor is one rank's data, which only a
  // Collectives object knows.
  at::Tensor plain = at::ones({2});
  EXPECT_THROW(LocalRanks(plain), InputError);
  EXPECT_THROW(LocalShard(plain, 0), InputError);
  EXPECT_THROW(MapShards(plain, [](int64_t r, const at::Tensor& s) { return s * r; }), InputError);
  EXPECT_THROW(MapShards({plain}, [](int64_t, const Tensors& s) { return s[0]; }), InputError);
  c10::SymInt v = MakeLocalInt(kRanks, {1, 2, 3, 4});
  EXPECT_EQ(LocalInt(v + 1, 3), 5);
  EXPECT_EQ(MakeLocalInt(kRanks, {2, 2, 2, 2}).maybe_as_int(), std::optional<int64_t>(2));
}

}  // namespace
}  // namespace dtsim
