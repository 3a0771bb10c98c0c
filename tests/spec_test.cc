// DTensorSpec: upstream's test vectors for local shapes and offsets, and the owned intervals
// checked against the global tensor (every element held exactly once by the ranks of each shard
// group).
#include "dtsim/layout/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

DTensorSpec Make(const std::string& mesh, const std::string& placements,
                 std::vector<int64_t> shape) {
  return DTensorSpec::Create(DeviceMesh::Parse(mesh), ParsePlacements(placements),
                             std::move(shape));
}

TEST(ChunkRangeTest, FollowsTorchChunk) {
  std::vector<int64_t> sizes;
  for (int r = 0; r < 4; ++r) sizes.push_back(ChunkRange(9, 4, r).size());
  EXPECT_THAT(sizes, ElementsAre(3, 3, 3, 0));
  sizes.clear();
  for (int r = 0; r < 8; ++r) sizes.push_back(ChunkRange(2, 8, r).size());
  EXPECT_THAT(sizes, ElementsAre(1, 1, 0, 0, 0, 0, 0, 0));
  // torch.chunk(10 elements, 4) gives 3,3,3,1; (5, 4) gives 2,2,1,0.
  EXPECT_EQ(ChunkRange(10, 4, 3).size(), 1);
  EXPECT_EQ(ChunkRange(5, 4, 3).size(), 0);
  EXPECT_EQ(ChunkRange(0, 3, 1).size(), 0);
}

TEST(DTensorSpecTest, OracleReadmeExample) {
  DTensorSpec spec = Make("2x4", "S(0),S(1)", {5, 10});
  std::vector<std::vector<int64_t>> shapes;
  for (const RankLayout& l : spec.AllLayouts()) shapes.push_back(l.local_shape);
  EXPECT_THAT(shapes, ElementsAre(ElementsAre(3, 3), ElementsAre(3, 3), ElementsAre(3, 3),
                                  ElementsAre(3, 1), ElementsAre(2, 3), ElementsAre(2, 3),
                                  ElementsAre(2, 3), ElementsAre(2, 1)));
  RankLayout r7 = spec.LayoutOfRank(7);
  EXPECT_THAT(r7.global_offset, ElementsAre(3, 9));
}

TEST(DTensorSpecTest, NestedShardEmptyOffsetIsDimSize) {
  // Upstream vector: global (13, 2) on mesh (4, 2) with [S(0), S(0)]; coordinate (3, 1) holds 0
  // rows at offset 13.
  DTensorSpec spec = Make("4x2", "S(0),S(0)", {13, 2});
  RankLayout l = spec.LayoutAt({3, 1});
  EXPECT_THAT(l.local_shape, ElementsAre(0, 2));
  EXPECT_THAT(l.global_offset, ElementsAre(13, 0));
  EXPECT_TRUE(l.intervals[0].empty());
  RankLayout l30 = spec.LayoutAt({3, 0});
  EXPECT_THAT(l30.local_shape, ElementsAre(1, 2));
  EXPECT_THAT(l30.global_offset, ElementsAre(12, 0));
}

TEST(DTensorSpecTest, StridedShardRowBlocks) {
  // Upstream vector: [8, 8] on mesh [[0,1],[2,3]] with [_S(0,2), S(0)]: ranks 0..3 hold row blocks
  // 0, 2, 1, 3.
  DTensorSpec spec = Make("2x2", "_S(0,2),S(0)", {8, 8});
  std::vector<int64_t> blocks;
  for (const RankLayout& l : spec.AllLayouts()) {
    ASSERT_EQ(l.intervals[0].size(), 1u);
    EXPECT_EQ(l.intervals[0][0].size(), 2);
    blocks.push_back(l.intervals[0][0].lo / 2);
  }
  EXPECT_THAT(blocks, ElementsAre(0, 2, 1, 3));
  // A strided shard alone owns several intervals: _S(0,2) over 2 ranks of 8 rows → rank 0 holds
  // rows 0:2 and 4:6.
  RankLayout alone = Make("2", "_S(0,2)", {8}).LayoutOfRank(0);
  EXPECT_THAT(alone.intervals[0], ElementsAre(Interval{0, 2}, Interval{4, 6}));
  EXPECT_THAT(alone.global_offset, ElementsAre(0));
}

TEST(DTensorSpecTest, ValidationNamesFieldAndValue) {
  try {
    Make("2x4", "S(0)", {4, 4});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "placements");
    EXPECT_THAT(e.what(), HasSubstr("1 placement [S(0)] for mesh[2, 4] of 2 dims"));
  }
  try {
    Make("2", "S(2)", {4, 4});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'S(2)' shards dim 2 but the tensor has 2 dims"));
  }
  try {
    Make("2", "R", {4, -3});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "shape");
    EXPECT_THAT(e.what(), HasSubstr("dim 1 has size -3"));
  }
}

// Random specs: for every choice of coordinates on the non-shard mesh dims, the ranks that differ
// only in the shard mesh dims own disjoint regions covering every element exactly once; local
// shapes and offsets agree with the intervals.
TEST(DTensorSpecTest, IntervalsPartitionTheGlobalTensor) {
  std::mt19937 rng(1234);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int iter = 0; iter < 400; ++iter) {
    std::vector<int64_t> mesh_shape(pick(1, 3));
    for (auto& s : mesh_shape) s = pick(1, 4);
    std::vector<int64_t> shape(pick(1, 3));
    for (auto& s : shape) s = pick(0, 9);
    Placements ps;
    for (size_t m = 0; m < mesh_shape.size(); ++m) {
      int kind = pick(0, 3);
      int dim = pick(0, static_cast<int>(shape.size()) - 1);
      if (kind == 0) ps.push_back(Placement::Shard(dim));
      if (kind == 1) ps.push_back(Placement::StridedShard(dim, pick(1, 4)));
      if (kind == 2) ps.push_back(Placement::Replicate());
      if (kind == 3) ps.push_back(Placement::Partial());
    }
    DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create(mesh_shape), ps, shape);
    SCOPED_TRACE(spec.ToString());
    std::map<std::vector<int64_t>, std::vector<int>>
        coverage;  // key: coordinates on non-shard dims
    for (const RankLayout& l : spec.AllLayouts()) {
      std::vector<int64_t> key;
      for (size_t m = 0; m < ps.size(); ++m)
        key.push_back(ps[m].is_shard_like() ? -1 : l.coordinate[m]);
      auto& count = coverage[key];
      count.resize(spec.numel(), 0);
      for (size_t d = 0; d < shape.size(); ++d) {
        int64_t total = 0;
        for (const Interval& v : l.intervals[d]) {
          ASSERT_LT(v.lo, v.hi);
          total += v.size();
        }
        ASSERT_EQ(total, l.local_shape[d]);
        if (l.local_shape[d] > 0) {
          bool sharded = false;
          for (const Placement& p : ps)
            sharded |= p.is_shard_like() && p.dim() == static_cast<int64_t>(d);
          EXPECT_EQ(l.global_offset[d], sharded ? l.intervals[d][0].lo : 0);
        }
      }
      // Mark every owned element.
      for (int64_t flat = 0; flat < spec.numel(); ++flat) {
        int64_t rest = flat;
        bool owned = true;
        for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
          int64_t index = rest % shape[d];
          rest /= shape[d];
          bool in = false;
          for (const Interval& v : l.intervals[d]) in |= index >= v.lo && index < v.hi;
          owned &= in;
        }
        if (owned) ++count[flat];
      }
    }
    for (const auto& [key, count] : coverage) {
      for (int c : count) ASSERT_EQ(c, 1);
    }
  }
}

// The strided split by definition: every piece of the chunk split into k, chunk-split again over n
// ranks.
std::vector<Interval> StridedByDefinition(int64_t length, int64_t k, int64_t n, int64_t r) {
  std::vector<Interval> out;
  for (int64_t j = 0; j < k; ++j) {
    const Interval piece = ChunkRange(length, k, j);
    const Interval sub = ChunkRange(piece.size(), n, r);
    if (sub.size() == 0) continue;
    const Interval global{piece.lo + sub.lo, piece.lo + sub.hi};
    if (!out.empty() && out.back().hi == global.lo) {
      out.back().hi = global.hi;
    } else {
      out.push_back(global);
    }
  }
  return out;
}

TEST(ShardIndicesTest, ClosedFormEqualsTheDefinition) {
  for (int64_t length = 0; length <= 40; ++length) {
    for (int64_t k = 1; k <= 45; ++k) {
      for (int64_t n = 1; n <= 5; ++n) {
        for (int64_t r = 0; r < n; ++r) {
          const Placement p = Placement::StridedShard(0, k);
          const auto got = ShardIndices(p, length, n, r);
          ASSERT_EQ(got, StridedByDefinition(length, k, n, r))
              << length << " " << k << " " << n << " " << r;
          int64_t size = 0;
          for (const Interval& v : got) size += v.size();
          EXPECT_EQ(ShardLength(p, length, n, r), size);
        }
      }
    }
  }
}

TEST(ShardIndicesTest, HugeSplitFactorsAndLengthsCostNothingAndDoNotOverflow) {
  // _S(0, 2^62) on a dim of 2^62: chunk 1, every piece one element; rank 0 of 1 owns it all in one
  // range.
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(ShardIndices(Placement::StridedShard(0, big), big, 1, 0),
            (std::vector<Interval>{{0, big}}));
  EXPECT_EQ(ShardLength(Placement::StridedShard(0, INT64_MAX), 4, 2, 1), 0);
  EXPECT_EQ(ShardLength(Placement::StridedShard(0, INT64_MAX), 4, 2, 0), 4);
  // chunk * r would overflow here: ChunkRange clamps instead.
  EXPECT_EQ(ChunkRange(big, INT64_MAX, INT64_MAX - 1), (Interval{big, big}));
  EXPECT_EQ(ChunkRange(big, big / 2 + 1, big / 2), (Interval{big, big}));
  // Too many separate ranges per rank is a clear error, not a loop over 5 * 10^11 pieces.
  try {
    ShardIndices(Placement::StridedShard(0, 500000000000), 1000000000000, 2, 0);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("500000000000 separate index ranges"));
  }
}

TEST(DTensorSpecTest, LimitsAreClearErrors) {
  auto refused = [](auto make, const std::string& field, const std::string& message) {
    try {
      make();
      ADD_FAILURE() << "accepted: " << message;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(message));
    }
  };
  const DeviceMesh mesh = DeviceMesh::Create({2});
  refused([&] { DTensorSpec::Create(mesh, {Placement::Replicate()}, std::vector<int64_t>(65, 1)); },
          "shape", "65 dims; a tensor has at most 64");
  refused(
      [&] {
        DTensorSpec::Create(mesh, {Placement::Partial(ReduceOp::kBor)}, {4}, DType::kBFloat16);
      },
      "placements",
      "'P(bor)' reduces with a bitwise op, which needs an integer or bool dtype, not bfloat16");
  refused(
      [&] { DTensorSpec::Create(mesh, {Placement::Partial(ReduceOp::kAvg)}, {4}, DType::kInt32); },
      "placements", "'P(avg)' divides, which needs a floating dtype, not int32");
  EXPECT_NO_THROW(
      DTensorSpec::Create(mesh, {Placement::Partial(ReduceOp::kBxor)}, {4}, DType::kBool));
  refused([&] { DeviceMesh::Create(std::vector<int64_t>(65, 1)); }, "mesh",
          "65 dims; a mesh has at most 64");
  refused([&] { DeviceMesh::Create({2}, {"a\xff"}); }, "names", "is not valid UTF-8");
  refused([&] { DeviceMesh::Create({2}, {"a\tb"}); }, "names", "control character");
  refused([&] { DeviceMesh::Create({2}, {std::string(300, 'n')}); }, "names",
          "names have at most 256");
  refused([&] { ParseIntList("9223372036854775808", "shape"); }, "shape", "is too large");
  refused([&] { ParseIntList("99999999999999999999a", "shape"); }, "shape", "is not an integer");
  EXPECT_EQ(ParseIntList("-9223372036854775807", "shape"),
            std::vector<int64_t>{-9223372036854775807});
}

}  // namespace
}  // namespace dtsim
