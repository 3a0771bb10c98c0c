// MemoryMeter: allocations attributed to ranks, replicas charged to each rank that holds one, peaks
// per window — against closed forms worked out by hand, on data and on meta tensors.
#include "dtsim/tensor/memory_meter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/meta.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {
namespace {

TEST(MemoryMeterTest, CountsEachRanksBuffersUntilTheyAreFreed) {
  MemoryMeter meter;
  {
    // rank r holds r + 1 floats.
    at::Tensor lt = MakeLocalTensor({0, 1, 2}, [](int64_t r) { return at::ones({r + 1}); });
    EXPECT_EQ(meter.Live(0), 4);
    EXPECT_EQ(meter.Live(2), 12);
    at::Tensor doubled = lt * 2;  // the kernel runs each rank's op in its scope
    EXPECT_EQ(meter.Live(2), 24);
    at::Tensor view = doubled.narrow(0, 0, 1);  // a view allocates nothing
    EXPECT_EQ(meter.Live(2), 24);
  }
  EXPECT_EQ(meter.Live(0), 0);
  EXPECT_EQ(meter.Live(2), 0);
  EXPECT_GE(meter.Peak(2), 24);  // (a CPU kernel may hold scratch buffers of its own for a moment)
  meter.BeginWindow();
  EXPECT_EQ(meter.Peak(2), 0);
  {
    at::Tensor a = MakeLocalTensor({0, 1, 2}, [](int64_t r) { return at::empty({100}); });
    at::Tensor b = MakeLocalTensor({0, 1, 2}, [](int64_t r) { return at::empty({50}); });
  }
  EXPECT_EQ(meter.Peak(2), 600);
  EXPECT_EQ(meter.Live(2), 0);
  // Allocations outside any rank's work belong to nobody.
  at::Tensor plain = at::ones({1000});
  EXPECT_EQ(meter.Live(0), 0);
}

TEST(MemoryMeterTest, ReplicasAreChargedToEveryRankHoldingOne) {
  MemoryMeter meter;
  auto coll = MakeLocalCollectives();
  at::Tensor in = MakeLocalTensor({0, 1, 2, 3}, [](int64_t r) {
    return at::full({2, 3}, float(r));
  });  // 24 B
  at::Tensor out =
      coll->AllGather(in, GroupSet::Of({0, 1, 2, 3}), 0);  // 96 B, one buffer shared by 4 ranks
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(meter.Live(r), 24 + 96) << r;
  // A rank that writes its replica gets its own buffer: same bytes for it, the others unchanged.
  LocalShard(out, 2).fill_(0);
  EXPECT_EQ(meter.Live(3), 120);
  out = at::Tensor();
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(meter.Live(r), 24) << r;
}

// S(0) -> R on 2 ranks of a 3 x 3 float tensor, worked by hand: rank 0 holds rows 0:2 (24 B), rank
// 1 row 2 (12 B). The executor pads rank 1 to 2 rows (a new 24 B buffer; rank 0 needs none),
// all-gathers 4 rows (48 B on each rank) and keeps the first 3 rows as a view of the gathered
// buffer. Peaks: rank 0 24 + 48 = 72, rank 1 12 + 24 + 48 = 84; afterwards rank 0 holds 24 + 48,
// rank 1 12 + 48 (the source and the result).
void ExpectHandWorkedPeaks(bool meta) {
  MemoryMeter meter;
  const DeviceMesh mesh = DeviceMesh::Create({2});
  const DTensorSpec spec = DTensorSpec::Create(mesh, {Placement::Shard(0)}, {3, 3});
  DTensor dt = meta ? MakeMetaDTensor(spec)
                    : DistributeTensor(at::arange(9, at::kFloat).reshape({3, 3}), mesh,
                                       {Placement::Shard(0)});
  EXPECT_EQ(meter.Live(0), 24);
  EXPECT_EQ(meter.Live(1), 12);
  meter.BeginWindow();
  std::vector<int64_t> peaks;
  RedistributeOptions options;
  options.on_step = [&](const PlanStep&, const DTensorSpec&, const at::Tensor&) {
    peaks = meter.Peaks({0, 1});
  };
  DTensor out = dt.Redistribute(mesh, {Placement::Replicate()}, options);
  EXPECT_EQ(peaks, (std::vector<int64_t>{72, 84}));
  EXPECT_EQ(meter.Live(0), 72);
  EXPECT_EQ(meter.Live(1), 60);
}

TEST(MemoryMeterTest, HandWorkedPeaksOnData) { ExpectHandWorkedPeaks(false); }
TEST(MemoryMeterTest, HandWorkedPeaksOnMeta) { ExpectHandWorkedPeaks(true); }

TEST(MemoryMeterTest, OnlyOneMeterAtATime) {
  MemoryMeter meter;
  EXPECT_EQ(MemoryMeter::Current(), &meter);
  EXPECT_THROW({ MemoryMeter second; }, InternalError);
}

}  // namespace
}  // namespace dtsim
