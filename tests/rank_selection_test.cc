// Rank selection (--ranks) and the shape summary of big worlds; layout reports that summarise and
// stream.
#include "dtsim/layout/rank_selection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/layout/layout_report.h"

namespace dtsim {
namespace {

using ::testing::HasSubstr;

TEST(RankSelectionTest, ParsesModesAndLists) {
  EXPECT_EQ(RankSelection::Parse("auto").mode, RankSelection::Mode::kAuto);
  EXPECT_EQ(RankSelection::Parse("all").mode, RankSelection::Mode::kAll);
  EXPECT_EQ(RankSelection::Parse("summary").mode, RankSelection::Mode::kSummary);
  RankSelection s = RankSelection::Parse("9, 0,5,8-11,10");
  EXPECT_EQ(s.mode, RankSelection::Mode::kList);
  EXPECT_EQ(s.ranks, (std::vector<int64_t>{0, 5, 8, 9, 10, 11}));
  EXPECT_EQ(s.ToString(), "0,5,8-11");
  EXPECT_TRUE(s.Includes(10));
  EXPECT_FALSE(s.Includes(7));
}

TEST(RankSelectionTest, AutoListsSmallWorldsAndSummarisesBigOnes) {
  const RankSelection automatic;
  EXPECT_TRUE(automatic.Lists(kFullListingMaxRanks));
  EXPECT_FALSE(automatic.Lists(kFullListingMaxRanks + 1));
  EXPECT_TRUE(RankSelection::Parse("all").Lists(1 << 20));
  EXPECT_FALSE(RankSelection::Parse("summary").Lists(2));
  EXPECT_TRUE(RankSelection::Parse("3").Lists(1 << 20));
}

TEST(RankSelectionTest, BadTextIsAnInputErrorNamingIt) {
  for (const char* bad : {"", "9-3", "-1", "x", "1,,2", "1-2-3", "0-2000000"}) {
    try {
      RankSelection::Parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "ranks") << bad;
    }
  }
  try {
    RankSelection::Parse("9-3");
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("runs backwards"));
  }
  const RankSelection s = RankSelection::Parse("3,8");
  try {
    s.CheckAgainst({0, 1, 2, 3, 4, 5, 6, 7}, "mesh[8]");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 8 is not in mesh[8]"));
  }
}

TEST(ShapeSummaryTest, GroupsRanksByShapeAsRanges) {
  // 9 rows over 4 ranks: 3, 3, 3, 0 (torch.chunk).
  ShapeSummary s;
  s.Add(0, {3});
  s.Add(1, {3});
  s.Add(2, {3});
  s.Add(3, {0});
  s.Add(5, {3});
  ASSERT_EQ(s.groups().size(), 2u);
  EXPECT_EQ(s.groups()[0].count, 4);
  EXPECT_EQ(s.groups()[0].ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {5, 5}}));
  EXPECT_EQ(
      s.ToJson().dump(),
      R"([{"count":4,"local_shape":[3],"ranks":[[0,2],[5,5]]},{"count":1,"local_shape":[0],"ranks":[[3,3]]}])");
  EXPECT_THAT(s.ToText(), HasSubstr("0-2,5"));
}

TEST(LayoutReportTest, BigWorldsSummariseSmallOnesListEveryRank) {
  // 300 ranks over 900 rows: every rank holds 3 rows (closed form), so one distinct shape.
  const DTensorSpec big =
      DTensorSpec::Create(DeviceMesh::Create({300}), {Placement::Shard(0)}, {900, 2});
  const nlohmann::json summary = LayoutToJson(big);
  EXPECT_FALSE(summary.contains("ranks"));
  EXPECT_EQ(summary["num_ranks"], 300);
  EXPECT_EQ(summary["rank_summary"].dump(),
            R"([{"count":300,"local_shape":[3,2],"ranks":[[0,299]]}])");
  EXPECT_FALSE(summary["mesh"].contains("ranks"));  // 0..299 in order: not listed
  // A list picks ranks; "all" lists all 300 and the streamed form is the same JSON.
  const nlohmann::json some = LayoutToJson(big, RankSelection::Parse("7,299"));
  ASSERT_EQ(some["ranks"].size(), 2u);
  EXPECT_EQ(some["ranks"][1]["global_offset"], (std::vector<int64_t>{897, 0}));
  for (const char* sel : {"all", "7,299", "summary"}) {
    std::ostringstream streamed;
    WriteLayoutJson(streamed, big, RankSelection::Parse(sel));
    EXPECT_EQ(nlohmann::json::parse(streamed.str()), LayoutToJson(big, RankSelection::Parse(sel)))
        << sel;
  }
  // A small world lists every rank by default, as before.
  const DTensorSpec small =
      DTensorSpec::Create(DeviceMesh::Create({4}), {Placement::Shard(0)}, {9});
  EXPECT_EQ(LayoutToJson(small)["ranks"].size(), 4u);
  const std::string text = RenderLayout(big);
  EXPECT_THAT(text, HasSubstr("300 ranks hold 1 distinct local shape"));
  EXPECT_THAT(RenderLayout(small), HasSubstr("Ranks holding empty shards: [3]"));
}

TEST(LayoutReportTest, GridOfABigWorldWritesOwnersAsRanges) {
  // [S(0), R] on mesh (2, 512): rows 0:4 held by ranks 0-511, rows 4:8 by 512-1023.
  const DTensorSpec spec = DTensorSpec::Create(
      DeviceMesh::Create({2, 512}), {Placement::Shard(0), Placement::Replicate()}, {8, 3});
  const std::string grid = RenderLayoutGrid(spec);
  EXPECT_THAT(grid, HasSubstr("| 0-511    |"));
  EXPECT_THAT(grid, HasSubstr("| 512-1023 |"));
  // More than 64 blocks along a dim: no grid.
  const DTensorSpec fine =
      DTensorSpec::Create(DeviceMesh::Create({100}), {Placement::Shard(0)}, {100});
  EXPECT_THAT(RenderLayoutGrid(fine), HasSubstr("not drawn"));
}

}  // namespace
}  // namespace dtsim
