// Metadata-only runs against data runs of the same case: 1,200 random redistributions (meshes up to
// 3 dims and 16 ranks, uneven and empty shards, _StridedShard, Partial sources, the three planners)
// must give the same plan, the same collectives (groups, shapes, bytes), every rank's shape and
// offset after every step, and the same per-rank peak memory step by step — the data run's measured
// on CPU allocations, the meta run's on meta allocations, and (for a subset) the data run without
// replica sharing, measured on each rank's physical copies.
#include "dtsim/core/meta.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/arange_case.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/global_view.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/planner.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"
#include "dtsim/tensor/sim_world.h"

namespace dtsim {
namespace {

using ::testing::HasSubstr;

struct CaseRun {
  nlohmann::json trace;  // the trace without hashes (meta.data false on both sides)
  std::vector<std::vector<int64_t>>
      peaks;        // per step, per rank (mesh order); [0] = live bytes at the start
  bool ok = false;  // data: the global tensor; meta: every shape matches its layout
};

CaseRun RunCase(const DTensorSpec& src, const Placements& to, const std::string& planner, bool meta,
                bool share_replicas = true) {
  MemoryMeter meter;
  auto collectives = std::shared_ptr<Collectives>(MakeLocalCollectives());
  collectives->sim_world()->SetReplicaSharing(share_replicas);
  DTensor source = meta ? MakeMetaDTensor(src, collectives) : MakeArangeSource(src, collectives);
  const std::vector<int64_t> world = MeshView(src.mesh()).ranks();
  CaseRun run;
  std::vector<int64_t> start;
  for (int64_t r : world) start.push_back(meter.Live(r));
  run.peaks.push_back(start);
  meter.BeginWindow();
  TraceMeta trace_meta;
  trace_meta.command = "meta_test";
  TraceRecorder recorder(trace_meta, /*hashes=*/false);
  recorder.SetInitial(source.spec(), source.to_local(), *collectives);
  collectives->observers().Add(&recorder);
  RedistributeOptions options;
  options.planner = ParsePlannerKind(planner);
  options.on_step = [&](const PlanStep& step, const DTensorSpec& spec, const at::Tensor& local) {
    run.peaks.push_back(meter.Peaks(world));
    meter.BeginWindow();
    recorder.EndStep(step, spec, local, *collectives);
  };
  DTensor out = source.Redistribute(src.mesh(), to, options);
  collectives->observers().Remove(&recorder);
  if (meta) {
    run.ok = !FindShapeMismatch(out.spec(), out.to_local(), *collectives);
    EXPECT_TRUE(IsMetaData(out.to_local()));
  } else {
    Assembled a = AssembleGlobal(out.spec(), out.to_local());
    run.ok = a.global && SameValues(*a.global, ExpectedArangeGlobal(src), ArangeTolerance(src));
  }
  recorder.SetFinal(out.spec(), out.to_local(), *collectives, std::nullopt);
  run.trace = ToJson(recorder.trace());
  return run;
}

Placement RandomPlacement(std::mt19937& rng, int64_t ndim, bool partial) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int kind = pick(0, partial ? 5 : 4);
  const int dim = pick(0, static_cast<int>(ndim) - 1);
  if (kind <= 1) return Placement::Shard(dim);
  if (kind <= 3) return Placement::Replicate();
  if (kind == 4) return Placement::StridedShard(dim, pick(2, 3));
  static const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg};
  return Placement::Partial(kOps[pick(0, 2)]);
}

TEST(MetaTest, MetaRunsEqualDataRunsOnRandomCases) {
  std::mt19937 rng(2024);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* planners[] = {"greedy", "min-cost", "graph"};
  int valid = 0, attempts = 0, uneven = 0, with_partial = 0, unshared_checked = 0;
  while (valid < 1200) {
    ++attempts;
    ASSERT_LT(attempts, 5000) << "too many invalid random cases";
    std::vector<int64_t> mesh(pick(1, 3)), shape(pick(1, 3));
    for (auto& s : mesh) s = pick(1, mesh.size() == 3 ? 2 : 4);
    for (auto& s : shape) s = pick(0, 9);
    Placements from, to;
    for (size_t m = 0; m < mesh.size(); ++m) {
      from.push_back(RandomPlacement(rng, static_cast<int64_t>(shape.size()), valid % 2 == 0));
      // A Partial source stays Partial or is reduced (R / S); elsewhere any non-Partial target.
      to.push_back(from.back().is_partial() && pick(0, 2) == 0
                       ? from.back()
                       : RandomPlacement(rng, shape.size(), false));
    }
    const DType dtype = valid % 5 == 0 ? DType::kInt64 : DType::kFloat32;
    const std::string planner = planners[valid % 3];
    std::optional<DTensorSpec> src;
    try {
      src = DTensorSpec::Create(DeviceMesh::Create(mesh), from, shape, dtype);
      CheckNoMixedPartials(src->placements(), "from");
      ValidateRedistribute(*src, to);
      if (dtype == DType::kInt64 && src->has_partial()) {
        for (const Placement& p : from) {
          if (p.is_partial() && p.reduce_op() == ReduceOp::kAvg)
            throw InputError("from", "avg needs floats");
        }
      }
    } catch (const InputError&) {
      continue;  // a case upstream refuses: not counted
    }
    SCOPED_TRACE(
        StrCat("case ", valid, ": ", src->ToString(), " -> ", ToString(to), " planner ", planner));
    const CaseRun data = RunCase(*src, to, planner, /*meta=*/false);
    const CaseRun meta = RunCase(*src, to, planner, /*meta=*/true);
    ASSERT_TRUE(data.ok);
    ASSERT_TRUE(meta.ok);
    // Plan, collectives (groups, shapes, bytes), every rank's shape and offset after every step:
    // the whole trace.
    ASSERT_EQ(data.trace, meta.trace);
    ASSERT_EQ(data.peaks, meta.peaks);
    if (valid % 8 == 0) {
      // The same figures with every replica a physical copy (the meter then sees only real
      // allocations).
      const CaseRun unshared = RunCase(*src, to, planner, /*meta=*/false, /*share_replicas=*/false);
      ASSERT_EQ(unshared.peaks, data.peaks);
      ++unshared_checked;
    }
    const auto& final_ranks = data.trace["final"]["ranks"];
    for (const auto& r : final_ranks) uneven += r["local_shape"] != final_ranks[0]["local_shape"];
    with_partial += src->has_partial();
    ++valid;
  }
  // The sample covers what it claims to.
  EXPECT_GT(uneven, 100);
  EXPECT_GT(with_partial, 120);
  EXPECT_EQ(unshared_checked, 150);
}

TEST(MetaTest, BigWorldsRunOnShapesOnly) {
  // 16 x 16 x 16 = 4,096 ranks, 4096 x 4096 float32 (64 MiB of data, 4 GiB as replicas): shapes
  // only.
  const DeviceMesh mesh = DeviceMesh::Create({16, 16, 16});
  const DTensorSpec spec = DTensorSpec::Create(mesh, ParsePlacements("S(0),S(1),R"), {4096, 4096});
  DTensor dt = MakeMetaDTensor(spec);
  const Plan plan = PlanFor(dt.spec(), ParsePlacements("R,S(0),S(1)"));
  DTensor out = ExecutePlan(dt, plan);
  EXPECT_EQ(plan.num_collectives(), 2);
  auto collectives = MakeLocalCollectives();
  EXPECT_FALSE(FindShapeMismatch(out.spec(), out.to_local(), *collectives));
  // Closed form: rank 4095 at coordinate (15, 15, 15) holds rows 15*256.. of S(0) over 16, columns
  // of S(1) over 16.
  EXPECT_EQ(LocalShard(out.to_local(), 4095).sizes().vec(), (std::vector<int64_t>{256, 256}));
  EXPECT_TRUE(LocalShard(out.to_local(), 4095).is_meta());
  EXPECT_THROW(out.FullTensor(), InputError);
}

TEST(MetaTest, DistributeTensorOfAMetaTensorIsMeta) {
  const DeviceMesh mesh = DeviceMesh::Create({2, 3});
  DTensor dt = DistributeTensor(at::empty({7, 5}, at::TensorOptions().device(at::kMeta)), mesh,
                                ParsePlacements("S(0),_S(1,2)"));
  EXPECT_TRUE(IsMetaData(dt.to_local()));
  auto collectives = MakeLocalCollectives();
  EXPECT_FALSE(FindShapeMismatch(dt.spec(), dt.to_local(), *collectives));
  // Rank 5 at (1, 2): rows 4:7 (chunk 1 of 7 over 2), columns: _S(1,2) over 3 of 5 → pieces 0:3,
  // 3:5 → sub-piece 2 of each → {2:3} (3 over 3 ranks: 1,1,1) and {} (2 over 3: 1,1,0) → 1 column.
  EXPECT_EQ(LocalShard(dt.to_local(), 5).sizes().vec(), (std::vector<int64_t>{3, 1}));
}

TEST(MetaTest, ShapeMismatchNamesTheRank) {
  const DeviceMesh mesh = DeviceMesh::Create({4});
  const DTensorSpec spec = DTensorSpec::Create(mesh, {Placement::Shard(0)}, {9});
  auto collectives = MakeLocalCollectives();
  at::Tensor wrong = MakeLocalTensor({0, 1, 2, 3}, [](int64_t r) {
    return at::empty({r == 3 ? 1 : 3}, at::TensorOptions().device(at::kMeta));
  });
  auto mismatch = FindShapeMismatch(spec, wrong, *collectives);
  ASSERT_TRUE(mismatch);
  EXPECT_THAT(*mismatch, HasSubstr("rank 3 holds [1] but the layout gives [0]"));
}

}  // namespace
}  // namespace dtsim
