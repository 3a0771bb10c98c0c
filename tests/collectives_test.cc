// Tests of the simulated collectives: the conformance suite instantiated for the local backend,
// plus the local backend's argument validation (clear InputErrors) and records.
#include "dtsim/tensor/collectives.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collectives_conformance.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {
namespace testing_internal {

INSTANTIATE_TEST_SUITE_P(
    Local, CollectivesConformance,
    ::testing::ValuesIn(ConformanceParams("local", [] { return MakeLocalCollectives(); })),
    ParamName);

namespace {

using ::testing::HasSubstr;

at::Tensor Ranks4(const std::function<at::Tensor(int64_t)>& fn) {
  return MakeLocalTensor({0, 1, 2, 3}, fn);
}

// Runs `f`, expects an InputError whose field is `field` and whose message contains `text`.
template <typename F>
void ExpectInputError(F f, const std::string& field, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected " << field << ": ..." << text;
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(text));
  }
}

TEST(LocalCollectivesTest, RejectsBadArgumentsClearly) {
  auto c = MakeLocalCollectives();
  at::Tensor x = Ranks4([](int64_t r) { return at::ones({4, 2}) * r; });
  ExpectInputError(
      [&] {
        c->AllReduce(x, GroupSet::Of({0, 5}), ReduceOp::kSum);
      },
      "groups", "rank 5 is not held by the input LocalTensor (it holds ranks [0, 1, 2, 3])");
  ExpectInputError(
      [&] {
        c->AllReduce(x, GroupSet{{{0, 1}, {1, 2}}}, ReduceOp::kSum);
      },
      "groups", "rank 1 appears twice");
  at::Tensor uneven = Ranks4([](int64_t r) { return at::ones({r, 2}); });
  ExpectInputError(
      [&] {
        c->AllGather(uneven, GroupSet::Of({0, 1}), 0);
      },
      "input",
      "shapes/dtypes differ within group [0, 1]: rank 0 has [0, 2] Float, rank 1 has [1, 2] Float");
  ExpectInputError(
      [&] {
        c->ReduceScatter(x, GroupSet::Of({0, 1, 2}), ReduceOp::kSum, 0);
      },
      "input", "size 4 along dim 0 does not divide evenly by the group size 3");
  ExpectInputError(
      [&] {
        c->AllReduce(x, GroupSet::Of({0, 1}), ReduceOp::kBand);
      },
      "op", "reduce op 'band' needs an integer or bool dtype, got Float");
  ExpectInputError(
      [&] {
        c->AllReduce(x.to(at::kLong), GroupSet::Of({0, 1}), ReduceOp::kAvg);
      },
      "op", "'avg' needs a floating dtype");
  ExpectInputError(
      [&] {
        c->Broadcast(x, GroupSet::Of({0, 1}), 2);
      },
      "src", "group-relative rank 2 is outside group [0, 1] of size 2");
  ExpectInputError(
      [&] {
        c->AllGather(x, GroupSet::Of({0, 1}), 2);
      },
      "dim", "dim 2 is out of range");
  ExpectInputError(
      [&] {
        c->AllToAllSingle(x, GroupSet::Of({0, 1}), {{0, {1, 2}}, {1, {2, 2}}, {2, {4}}, {3, {4}}},
                          {});
      },
      "input_split_sizes", "rank 0 split sizes [1, 2] add up to 3 but its input has 4 rows");
  ExpectInputError(
      [&] {
        c->AllToAllSingle(x, GroupSet::Of({0, 1}), {{0, {1, 3}}, {1, {2, 2}}},
                          {{0, {1, 1}}, {1, {3, 2}}});
      },
      "output_split_sizes", "rank 0 expects [1, 1] but the group sends it [1, 2]");
  ExpectInputError(
      [&] {
        c->SendRecv(x, {{0, 1}, {2, 1}});
      },
      "pairs", "rank 1 receives more than once");
  ExpectInputError([&] { c->SendRecv(x, {{0, 7}}); }, "pairs", "rank 7 is not held");
}

TEST(LocalCollectivesTest, RanksOutsideEveryGroupKeepTheirInput) {
  auto c = MakeLocalCollectives();
  at::Tensor x = Ranks4([](int64_t r) { return at::full({2}, static_cast<float>(r + 1)); });
  at::Tensor y = c->AllReduce(x, GroupSet::Of({1, 2}), ReduceOp::kSum);
  EXPECT_TRUE(at::equal(LocalShard(y, 0), at::full({2}, 1.0f)));
  EXPECT_TRUE(at::equal(LocalShard(y, 1), at::full({2}, 5.0f)));
  EXPECT_TRUE(at::equal(LocalShard(y, 2), at::full({2}, 5.0f)));
  EXPECT_TRUE(at::equal(LocalShard(y, 3), at::full({2}, 4.0f)));
  // Outputs never alias each other or the input: an in-place op afterwards changes one rank only.
  y.add_(1);
  EXPECT_TRUE(at::equal(LocalShard(y, 1), at::full({2}, 6.0f)));
  EXPECT_TRUE(at::equal(LocalShard(x, 0), at::full({2}, 1.0f)));
}

TEST(LocalCollectivesTest, IsSimulatedAndNeedsLocalTensors) {
  auto c = MakeLocalCollectives();
  EXPECT_TRUE(c->simulated());
  EXPECT_EQ(c->backend(), "local");
  EXPECT_THROW(c->rank(), InternalError);
  ExpectInputError([&] { c->AllGather(at::arange(3, at::kFloat), GroupSet::Of({0}), 0); }, "input",
                   "the simulated backend holds every rank's data in a LocalTensor");
  at::Tensor x =
      c->FromRankFn({0, 1}, [](int64_t r) { return at::full({1}, static_cast<float>(r)); });
  EXPECT_EQ(c->HeldRanks(x), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(at::equal(c->Shard(x, 1), at::ones({1})));
}

TEST(LocalCollectivesTest, RecordsBytesPerRank) {
  auto c = MakeLocalCollectives();
  CountingObserver obs;
  c->observers().Add(&obs);
  at::Tensor x = Ranks4([](int64_t r) { return at::ones({4, 2}) * r; });  // 32 bytes a rank
  c->AllReduce(x, GroupSet{{{0, 1}, {2, 3}}}, ReduceOp::kSum);
  c->Reduce(x, GroupSet::Of({0, 1, 2, 3}), ReduceOp::kSum, 2);
  c->AllToAllSingle(x, GroupSet::Of({0, 1}), {{0, {1, 3}}, {1, {4, 0}}}, {});
  ASSERT_EQ(obs.records.size(), 3u);
  EXPECT_EQ(obs.records[0].bytes_sent,
            (std::vector<int64_t>{32, 32, 32, 32}));  // 2 (n-1)/n * 32, n = 2
  EXPECT_EQ(obs.records[1].bytes_sent, (std::vector<int64_t>{32, 32, 0, 32}));
  EXPECT_EQ(obs.records[1].bytes_received, (std::vector<int64_t>{0, 0, 96, 0}));
  // rank 0 keeps 1 row (8 bytes) and sends 3 rows; rank 1 sends 4 rows to rank 0 and keeps none.
  EXPECT_EQ(obs.records[2].bytes_sent, (std::vector<int64_t>{24, 32, 0, 0}));
  EXPECT_EQ(obs.records[2].bytes_received, (std::vector<int64_t>{32, 24, 0, 0}));
  EXPECT_EQ(obs.records[2].output_shapes[0], (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(obs.records[2].output_shapes[1], (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(obs.records[2].output_shapes[2],
            (std::vector<int64_t>{4, 2}));  // outside the group: keeps its input
}

// Any number of observers each hear every call, in the order they were added; a Scoped observer
// stops hearing when it goes, even when the call throws; Paused silences all of them; one observer
// is registered once.
TEST(LocalCollectivesTest, ObserversEachHearEveryCallWhileRegistered) {
  auto c = MakeLocalCollectives();
  at::Tensor x = Ranks4([](int64_t r) { return at::ones({2}) * r; });
  const GroupSet world = GroupSet::Of({0, 1, 2, 3});
  std::vector<std::string> heard;
  struct Named : CollectiveObserver {
    Named(std::string n, std::vector<std::string>& h) : name(std::move(n)), heard(h) {}
    void OnCollective(const CollectiveEvent& e) override {
      heard.push_back(name + " " + std::string(ToString(e.kind)));
    }
    std::string name;
    std::vector<std::string>& heard;
  };
  Named a("a", heard), b("b", heard);
  c->observers().Add(&a);
  EXPECT_THROW(c->observers().Add(&a), InternalError);
  EXPECT_THROW(c->observers().Add(nullptr), InternalError);
  {
    CollectiveObservers::Scoped scoped(c->observers(), &b);
    c->AllReduce(x, world, ReduceOp::kSum);
    {
      CollectiveObservers::Paused quiet(c->observers());
      EXPECT_FALSE(c->observed());
      c->AllGather(x, world, 0);
    }
    EXPECT_TRUE(c->observed());
    EXPECT_THROW(c->AllGather(x, GroupSet::Of({0, 9}), 0), InputError);
  }
  c->Broadcast(x, world, 0);
  c->observers().Remove(&a);
  c->observers().Remove(&a);  // absent: nothing
  c->Barrier(world, {0, 1, 2, 3});
  EXPECT_FALSE(c->observed());
  EXPECT_EQ(heard, (std::vector<std::string>{"a all_reduce", "b all_reduce", "a broadcast"}));
}

TEST(GroupSetTest, AlongMeshDimAndText) {
  DeviceMesh mesh = DeviceMesh::Create({2, 4});
  EXPECT_EQ(GroupSet::AlongMeshDim(mesh, 1).ToString(), "[[0, 1, 2, 3], [4, 5, 6, 7]]");
  EXPECT_EQ(GroupSet::AlongMeshDim(mesh, 0).ToString(), "[[0, 4], [1, 5], [2, 6], [3, 7]]");
  EXPECT_EQ(GroupSet::Of({3, 1}).ToString(), "[[3, 1]]");
  EXPECT_THROW(GroupSet::AlongMeshDim(mesh, 2), InputError);
}

}  // namespace
}  // namespace testing_internal
}  // namespace dtsim

namespace dtsim {
namespace {

// The example of docs/local-tensor.md, pinned.
TEST(DocsExampleTest, LocalTensorAndAllReduce) {
  at::Tensor full = at::arange(18, at::kFloat).reshape({9, 2});
  at::Tensor lt = MakeLocalTensor({0, 1, 2, 3}, [&](int64_t r) {
    return full.narrow(0, std::min<int64_t>(9, 3 * r), r < 3 ? 3 : 0);
  });
  at::Tensor y = (lt * 2).softmax(1);
  EXPECT_EQ(LocalInt(y.sym_size(0), 3), 0);
  EXPECT_EQ(ToString(lt.sum(1)),
            "LocalTensor(0: [1, 5, 9], 1: [13, 17, 21], 2: [25, 29, 33], 3: [])");
  EXPECT_EQ(LocalInt(lt.sym_size(0), 3), 0);
  auto coll = MakeLocalCollectives();
  at::Tensor s = coll->AllReduce(lt.sum(), GroupSet::Of({0, 1, 2, 3}), ReduceOp::kSum);
  EXPECT_TRUE(at::equal(Reconcile(s), at::scalar_tensor(153.0f)));
}

}  // namespace
}  // namespace dtsim
