// Copy-on-write replicas: the simulated collectives give the ranks of a group one shared storage
// for their common result; a write on one rank (in-place op, out= op, a write through a view, a
// write to the plain shard) gives that rank its own copy first and leaves every other rank's values
// alone; reads, hashes and to_local stay shared.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/sim_world.h"

namespace dtsim {
namespace {

std::vector<int64_t> Ranks(int64_t n) {
  std::vector<int64_t> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  return r;
}

const void* Data(const at::Tensor& local, int64_t rank) {
  return LocalShard(local, rank).const_data_ptr();
}

// 8 ranks, rank r holds [r, r + 0.5] (2 floats); all_gather over one group of 8: every rank gets
// the same 16 floats.
// An all_gather in a simulated world with replica sharing on or off.
at::Tensor Gathered(bool sharing = true) {
  auto coll = MakeLocalCollectives();
  coll->sim_world()->SetReplicaSharing(sharing);
  at::Tensor in = coll->FromRankFn(Ranks(8), [](int64_t r) {
    return at::tensor({float(r), float(r) + 0.5f});
  });
  return coll->AllGather(in, GroupSet::Of(Ranks(8)), 0);
}

at::Tensor Expected() {
  std::vector<float> v;
  for (int r = 0; r < 8; ++r) v.insert(v.end(), {float(r), float(r) + 0.5f});
  return at::tensor(v);
}

class ReplicaTest : public ::testing::Test {
 protected:
};

TEST_F(ReplicaTest, AllGatherRanksShareOneStorage) {
  at::Tensor out = Gathered();
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_TRUE(at::equal(LocalShard(out, r), Expected())) << r;
    EXPECT_EQ(Data(out, r), Data(out, 0)) << r;
    EXPECT_TRUE(IsSharedReplica(LocalShard(out, r)));
  }
}

TEST_F(ReplicaTest, AllReduceAndBroadcastShareToo) {
  auto coll = MakeLocalCollectives();
  at::Tensor in = MakeLocalTensor(Ranks(4), [](int64_t r) { return at::full({3}, float(r)); });
  // Groups {0, 1} and {2, 3}: sums 1 and 5, one storage per group.
  GroupSet pairs{{{0, 1}, {2, 3}}};
  at::Tensor sum = coll->AllReduce(in, pairs, ReduceOp::kSum);
  EXPECT_EQ(Data(sum, 0), Data(sum, 1));
  EXPECT_EQ(Data(sum, 2), Data(sum, 3));
  EXPECT_NE(Data(sum, 1), Data(sum, 2));
  EXPECT_TRUE(at::equal(LocalShard(sum, 1), at::full({3}, 1.f)));
  EXPECT_TRUE(at::equal(LocalShard(sum, 3), at::full({3}, 5.f)));
  at::Tensor b = coll->Broadcast(in, pairs, 1);
  EXPECT_TRUE(at::equal(LocalShard(b, 0), at::full({3}, 1.f)));
  EXPECT_TRUE(at::equal(LocalShard(b, 2), at::full({3}, 3.f)));
  // The broadcast shares with the source rank's input, which keeps its value when a receiver
  // writes.
  LocalShard(b, 0).fill_(-1);
  EXPECT_TRUE(at::equal(LocalShard(in, 1), at::full({3}, 1.f)));
  EXPECT_TRUE(at::equal(LocalShard(b, 1), at::full({3}, 1.f)));
}

TEST_F(ReplicaTest, InPlaceOpOnOneRankLeavesTheOthers) {
  at::Tensor out = Gathered();
  // Per-rank factor: rank 3 doubles, every other rank multiplies by 1 (a write on every rank, a
  // change on one).
  at::Tensor factor =
      MakeLocalTensor(Ranks(8), [](int64_t r) { return at::scalar_tensor(r == 3 ? 2.f : 1.f); });
  out.mul_(factor);
  EXPECT_TRUE(at::equal(LocalShard(out, 3), Expected() * 2));
  for (int64_t r : {0, 5, 7}) EXPECT_TRUE(at::equal(LocalShard(out, r), Expected())) << r;
  // A write to one plain shard: only that rank changes.
  at::Tensor again = Gathered();
  LocalShard(again, 5).add_(100);
  EXPECT_TRUE(at::equal(LocalShard(again, 5), Expected() + 100));
  EXPECT_TRUE(at::equal(LocalShard(again, 4), Expected()));
  EXPECT_TRUE(at::equal(LocalShard(again, 6), Expected()));
  EXPECT_NE(Data(again, 5), Data(again, 4));
  EXPECT_EQ(Data(again, 4), Data(again, 6));  // the others still share
}

TEST_F(ReplicaTest, ViewsOfASharedShardFollowTheirRank) {
  at::Tensor out = Gathered();
  at::Tensor view = out.narrow(0, 2, 4);  // a LocalTensor view: elements 2..5 of every rank
  EXPECT_EQ(LocalShard(view, 3).const_data_ptr(), static_cast<const float*>(Data(out, 3)) + 2);
  // A write through rank 3's view: rank 3's base sees it, rank 5's base and view do not.
  LocalShard(view, 3).fill_(9);
  at::Tensor want3 = Expected();
  want3.narrow(0, 2, 4).fill_(9);
  EXPECT_TRUE(at::equal(LocalShard(out, 3), want3));
  EXPECT_TRUE(at::equal(LocalShard(out, 5), Expected()));
  EXPECT_TRUE(at::equal(LocalShard(view, 5), Expected().narrow(0, 2, 4)));
  // And through the kernel: an in-place op on the LocalTensor view writes each rank's own base.
  view.fill_(-2);
  for (int64_t r : {0, 3, 5}) {
    at::Tensor want = Expected();
    want.narrow(0, 2, 4).fill_(-2);
    EXPECT_TRUE(at::equal(LocalShard(out, r), want)) << r;
  }
  // A view taken before another rank writes keeps its own rank's values.
  at::Tensor fresh = Gathered();
  at::Tensor v5 = LocalShard(fresh, 5).narrow(0, 0, 2);
  LocalShard(fresh, 6).zero_();
  EXPECT_TRUE(at::equal(v5, Expected().narrow(0, 0, 2)));
}

TEST_F(ReplicaTest, OutOpsWriteOnlyTheirOwnRank) {
  at::Tensor out = Gathered();
  at::Tensor source = Gathered();
  // out= into replicas: each rank's result lands in its own storage; `source` (another set of
  // replicas) is unchanged.
  at::Tensor per_rank =
      MakeLocalTensor(Ranks(8), [](int64_t r) { return at::full({16}, float(r)); });
  at::add_out(out, source, per_rank);
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_TRUE(at::equal(LocalShard(out, r), Expected() + r)) << r;
    EXPECT_TRUE(at::equal(LocalShard(source, r), Expected())) << r;
  }
  // resize_ through an out= op that changes the shape.
  at::Tensor grown = Gathered();
  at::cat_out(grown, {source, source}, 0);
  EXPECT_EQ(LocalShard(grown, 2).size(0), 32);
  EXPECT_TRUE(at::equal(LocalShard(source, 2), Expected()));
}

TEST_F(ReplicaTest, HashesAndToLocalReadWithoutCopying) {
  at::Tensor out = Gathered();
  const std::string want = ShardHash(Expected());
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(ShardHash(LocalShard(out, r)), want);
  EXPECT_EQ(Data(out, 7), Data(out, 0));  // hashing did not copy
  // Reads through the kernel (sum, equality, printing) leave the storage shared.
  at::Tensor total = out.sum();
  EXPECT_EQ(LocalShard(total, 4).item<float>(), Expected().sum().item<float>());
  EXPECT_EQ(ToString(out).substr(0, 22), "LocalTensor(0: [0, 0.5");
  EXPECT_EQ(Data(out, 7), Data(out, 0));
}

TEST_F(ReplicaTest, DistributeTensorReplicasShareAndSurviveWritesToTheInput) {
  at::Tensor global = at::arange(12, at::kFloat).reshape({3, 4});
  const at::Tensor copy = global.clone();
  DTensor dt = DistributeTensor(global, DeviceMesh::Create({2, 2}),
                                {Placement::Replicate(), Placement::Replicate()});
  EXPECT_EQ(Data(dt.to_local(), 0), Data(dt.to_local(), 3));
  global.fill_(0);  // the caller writes its tensor: the DTensor keeps the values it was given
  for (int64_t r = 0; r < 4; ++r) EXPECT_TRUE(at::equal(LocalShard(dt.to_local(), r), copy)) << r;
  EXPECT_TRUE(at::equal(dt.FullTensor(), copy));
}

TEST_F(ReplicaTest, SharingOffMakesRealCopies) {
  at::Tensor out = Gathered(/*sharing=*/false);
  EXPECT_NE(Data(out, 0), Data(out, 1));
  EXPECT_FALSE(IsSharedReplica(LocalShard(out, 1)));
  EXPECT_TRUE(at::equal(LocalShard(out, 1), Expected()));
  // The setting is the world's: another world in the same process still shares.
  at::Tensor shared = Gathered();
  EXPECT_EQ(Data(shared, 0), Data(shared, 1));
  EXPECT_TRUE(IsSharedReplica(LocalShard(shared, 1)));
}

TEST_F(ReplicaTest, RedistributeResultsAreCorrectAndShared) {
  // S(0) -> R over 8 ranks of a 16 x 4 tensor: one gathered tensor for all, then the ranks go their
  // own ways.
  DeviceMesh mesh = DeviceMesh::Create({8});
  const at::Tensor global = at::arange(64, at::kFloat).reshape({16, 4});
  DTensor dt = DistributeTensor(global, mesh, {Placement::Shard(0)});
  DTensor r = dt.Redistribute(mesh, {Placement::Replicate()});
  for (int64_t rank = 0; rank < 8; ++rank) {
    EXPECT_TRUE(at::equal(LocalShard(r.to_local(), rank), global));
    EXPECT_EQ(Data(r.to_local(), rank), Data(r.to_local(), 0));
  }
  at::Tensor local = r.to_local();
  local.narrow(0, 0, 1).add_(1);  // every rank writes row 0 of its own copy
  for (int64_t rank = 0; rank < 8; ++rank) {
    at::Tensor want = global.clone();
    want.narrow(0, 0, 1).add_(1);
    EXPECT_TRUE(at::equal(LocalShard(local, rank), want)) << rank;
  }
}

}  // namespace
}  // namespace dtsim
