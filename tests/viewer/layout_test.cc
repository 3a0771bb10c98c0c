// The pure layout step: mesh cells, tensor blocks, the timeline — positions from closed forms of
// the layout rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "dtsim/layout/error.h"
#include "dtsim/trace/model_trace.h"
#include "model_test_support.h"
#include "test_support.h"
#include "viewer/model/colors.h"
#include "viewer/model/mesh_layout.h"
#include "viewer/model/rank_details.h"
#include "viewer/model/tensor_layout.h"
#include "viewer/model/timeline_layout.h"
#include "viewer/tools/meta_trace.h"

namespace dtsim::viewer {
namespace {

using ::testing::ElementsAre;
using testing::Golden;
using ::testing::HasSubstr;
using testing::Meta;
using testing::NoHighlight;

const TextMetrics kMetrics{7, 13};

std::vector<const DrawRect*> Rects(const DrawList& l, Role role, int64_t rank = -2) {
  std::vector<const DrawRect*> out;
  for (const DrawRect& r : l.rects) {
    if (r.role == role && (rank == -2 || r.rank == rank)) out.push_back(&r);
  }
  return out;
}

// ---- mesh ----

TEST(MeshLayoutTest, TwoDimMeshIsAGridInRankOrder) {
  const TraceModel m = TraceModel::Load(Golden("uneven_2x4_S0R_to_RS1.json"));
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 400, 240}, kMetrics);
  ASSERT_EQ(Rects(l.draw, Role::kMeshCell).size(), 8u);
  EXPECT_EQ(l.aggregate, 1);
  // Rank r sits at row r / 4 (dp), column r % 4 (tp), one pitch apart.
  for (int64_t r = 0; r < 8; ++r) {
    const Rect& c = l.cells[m.GetPosition(r)];
    EXPECT_FLOAT_EQ(c.x0 - l.cells[0].x0, (r % 4) * l.pitch) << "rank " << r;
    EXPECT_FLOAT_EQ(c.y0 - l.cells[0].y0, (r / 4) * l.pitch) << "rank " << r;
    const auto cell = Rects(l.draw, Role::kMeshCell, r);
    ASSERT_EQ(cell.size(), 1u);
    EXPECT_EQ(cell[0]->fill, RankColor(r));
  }
  // The largest square cells that fit: 4 columns in 400 px, 2 rows in 240 px less the header line,
  // both less a margin of 5 px on each side (so the pixels beside the outer cells hit them).
  EXPECT_EQ(l.pitch, static_cast<int>(
                         std::min((400.0f - 10) / 4, (240 - kMetrics.line_height - 4 - 10) / 2)));
  // Each rank's number is written in its cell; cells this large (semantic zoom) also show the
  // rank's coordinate under it, inside the cell.
  for (int64_t r = 0; r < 8; ++r) {
    const Rect& c = l.cells[m.GetPosition(r)];
    auto in_cell = [&](const std::string& text) {
      return std::any_of(l.draw.texts.begin(), l.draw.texts.end(), [&](const DrawText& t) {
        return t.role == Role::kMeshCell && t.text == text && c.Contains(t.x, t.y) &&
               t.x + t.w <= c.x1 && t.y + t.h <= c.y1;
      });
    };
    EXPECT_TRUE(in_cell(std::to_string(r))) << "rank " << r;
    EXPECT_TRUE(in_cell("dp=" + std::to_string(r / 4) + " tp=" + std::to_string(r % 4)))
        << "rank " << r;
  }
}

TEST(MeshLayoutTest, ThreeDimMeshIsAGridOfSlices) {
  const TraceModel m = Meta("2x2x4", "pp,dp,tp", {8, 8}, "S(0),R,S(1)", "R,R,R");
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 600, 300}, kMetrics);
  std::set<std::string> titles;
  for (const DrawText& t : l.draw.texts) titles.insert(t.text);
  EXPECT_TRUE(titles.count("pp=0") && titles.count("pp=1"));
  // Rank 14 = (pp=1, dp=1, tp=2) sits in slice pp=1 where rank 6 = (0, 1, 2) sits in slice pp=0.
  const Rect& r6 = l.cells[6];
  const Rect& r14 = l.cells[14];
  const Rect& r0 = l.cells[0];
  const Rect& r8 = l.cells[8];
  EXPECT_FLOAT_EQ(r14.x0 - r8.x0, r6.x0 - r0.x0);
  EXPECT_FLOAT_EQ(r14.y0 - r8.y0, r6.y0 - r0.y0);
  EXPECT_FALSE(r8.Intersects(r0));
  // Rows tp, columns pp: the slices are the dp coordinates.
  ViewState v;
  v.mesh_row_dim = 2;
  v.mesh_col_dim = 0;
  const MeshGrid g = ResolveMeshGrid(m.mesh(), v);
  EXPECT_THAT(g.slice_dims, ElementsAre(1));
  const MeshLayout t = LayoutMesh(m, m.frame(0), NoHighlight(m), g, Rect{0, 0, 600, 300}, kMetrics);
  // Rank 6 (pp=0, dp=1, tp=2) in slice dp=1 at row 2, column 0; rank 14 beside it in column 1.
  EXPECT_FLOAT_EQ(t.cells[14].x0 - t.cells[6].x0, t.pitch);
  EXPECT_FLOAT_EQ(t.cells[14].y0, t.cells[6].y0);
}

TEST(MeshLayoutTest, GridDimsAreChecked) {
  const DeviceMesh mesh = DeviceMesh::Parse("2x2x4", "pp,dp,tp");
  ViewState v;
  v.mesh_row_dim = 1;
  v.mesh_col_dim = 1;
  EXPECT_THROW(ResolveMeshGrid(mesh, v), InputError);
  v.mesh_col_dim = 3;
  EXPECT_THROW(ResolveMeshGrid(mesh, v), InputError);
}

TEST(MeshLayoutTest, OneDimMeshWrapsInRankOrder) {
  const TraceModel m = Meta("12", "", {12}, "S(0)", "R");
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 300, 200}, kMetrics);
  ASSERT_EQ(Rects(l.draw, Role::kMeshCell).size(), 12u);
  for (int64_t r = 1; r < 12; ++r) {
    const Rect& a = l.cells[r - 1];
    const Rect& b = l.cells[r];
    EXPECT_TRUE(b.y0 > a.y0 || (b.y0 == a.y0 && b.x0 > a.x0))
        << "rank " << r << " follows rank " << r - 1;
  }
}

TEST(MeshLayoutTest, HighlightsDiffAndSelection) {
  const TraceModel m = TraceModel::Load(Golden("uneven_2x4_S0R_to_RS1.json"));
  ViewState v;
  v.frame = 2;
  v.selected_rank = 6;
  Highlight h = ComputeHighlight(m, nullptr, v);
  h.differs.assign(8, 0);
  h.differs[5] = 1;
  const MeshLayout l =
      LayoutMesh(m, m.frame(2), h, ResolveMeshGrid(m.mesh(), {}), Rect{0, 0, 400, 240}, kMetrics);
  EXPECT_EQ(Rects(l.draw, Role::kMeshCell, 5)[0]->fill, kDiffColor);
  EXPECT_EQ(Rects(l.draw, Role::kMeshCell, 4)[0]->fill, RankColor(4));
  const auto marks = Rects(l.draw, Role::kHighlight, 6);
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(marks[0]->border, kHighlightColor);
  // Rank 6's all_gather group in step 2 is {2, 6}: rank 2 is outlined in the group colour (rank 6
  // in white, as the selected rank), and a line in the group colour joins them.
  // The ring is yellow with a dark hairline inside it, so it reads on any rank colour.
  ASSERT_EQ(Rects(l.draw, Role::kMeshGroup, 2).size(), 2u);
  EXPECT_EQ(Rects(l.draw, Role::kMeshGroup, 2)[0]->border, kGroupColor);
  EXPECT_EQ(Rects(l.draw, Role::kMeshGroup, 2)[1]->border, kCellBorderColor);
  EXPECT_EQ(Rects(l.draw, Role::kMeshGroup).size(), 2u);
  const bool connected =
      std::any_of(l.draw.lines.begin(), l.draw.lines.end(), [](const DrawLine& line) {
        return line.role == Role::kMeshGroup && line.rank == 2 && line.color == kGroupColor;
      });
  EXPECT_TRUE(connected);
}

TEST(MeshLayoutTest, LargeMeshesAggregateCells) {
  // 65,536 ranks in 300 x 300 pixels: cells below 2 px are drawn k x k per record.
  const DTensorSpec spec =
      DTensorSpec::Create(DeviceMesh::Create({256, 256}), ParsePlacements("R,R"), {4});
  const TraceModel m = TraceModel::FromSpec(spec);
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 300, 300}, kMetrics);
  EXPECT_GT(l.aggregate, 1);
  const size_t records = Rects(l.draw, Role::kMeshCell).size();
  const size_t per_side = (256 + l.aggregate - 1) / l.aggregate;
  EXPECT_EQ(records, per_side * per_side);
  EXPECT_TRUE(l.draw.texts.size() <= 2u);  // no per-cell labels
}

// ---- tensor ----

TEST(TensorLayoutTest, UnevenColumnsReplicatedOverDp) {
  const TraceModel m = TraceModel::Load(Golden("uneven_2x4_S0R_to_RS1.json"));
  const TensorLayout l =
      LayoutTensor(m, m.frame(3), NoHighlight(m, 3), ResolveTensorView(m.frame(3).spec, {}),
                   Rect{0, 0, 800, 400}, kMetrics);
  ASSERT_EQ(l.blocks.size(), 4u);
  const Interval cols[] = {{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  const float w = l.tensor.width();
  for (int c = 0; c < 4; ++c) {
    const TensorBlock& b = l.blocks[c];
    EXPECT_EQ(b.rows, (Interval{0, 5}));
    EXPECT_EQ(b.cols, cols[c]);
    EXPECT_THAT(b.ranks, ElementsAre(c, c + 4));
    // Proportional: the block spans its columns' share of the tensor, to the pixel.
    EXPECT_NEAR(b.rect.x0 - l.tensor.x0, w * cols[c].lo / 10, 1.0) << "block " << c;
    EXPECT_NEAR(b.rect.x1 - l.tensor.x0, w * cols[c].hi / 10, 1.0) << "block " << c;
    // Filled in the first owner's colour, with a chip for each owner.
    const auto owned = Rects(l.draw, Role::kTensorOwner, c);
    ASSERT_GE(owned.size(), 1u);
    EXPECT_EQ(owned[0]->fill, RankColor(c));
    EXPECT_EQ(owned[0]->rect.x0, b.rect.x0);
    const auto chip = Rects(l.draw, Role::kTensorOwner, c + 4);
    ASSERT_EQ(chip.size(), 1u) << "block " << c;
    EXPECT_EQ(chip[0]->fill, RankColor(c + 4));
    EXPECT_TRUE(b.rect.Intersects(chip[0]->rect));
  }
  bool badge = false;
  for (const DrawText& t : l.draw.texts) badge = badge || t.text == "R x2";
  EXPECT_TRUE(badge);
  EXPECT_TRUE(l.empty_ranks.empty());
}

TEST(TensorLayoutTest, StridedShardsOwnSeveralIntervals) {
  // [_S(0,2), S(1)] on 8 x 4 over mesh 2 x 2: dp splits each half of the rows, so dp=0 owns rows
  // 0:2 and 4:6.
  const TraceModel m = TraceModel::Load(Golden("strided_2x2_fsdp_tp.json"));
  ASSERT_EQ(ToString(m.frame(1).spec.placements()), "[_S(0,2), S(1)]");
  const TensorLayout l =
      LayoutTensor(m, m.frame(1), NoHighlight(m, 1), ResolveTensorView(m.frame(1).spec, {}),
                   Rect{0, 0, 600, 400}, kMetrics);
  ASSERT_EQ(l.blocks.size(), 8u);
  std::vector<std::pair<Interval, Interval>> rank0;
  for (const TensorBlock& b : l.blocks) {
    if (b.ranks == std::vector<int64_t>{0}) rank0.push_back({b.rows, b.cols});
  }
  ASSERT_EQ(rank0.size(), 2u);
  EXPECT_EQ(rank0[0].first, (Interval{0, 2}));
  EXPECT_EQ(rank0[1].first, (Interval{4, 6}));
  EXPECT_EQ(rank0[0].second, (Interval{0, 2}));
  EXPECT_EQ(Rects(l.draw, Role::kTensorOwner, 0).size(), 2u);
}

TEST(TensorLayoutTest, EmptyShardsAreListedUnderTheTensor) {
  // 13 rows, [S(0), S(0)] on 4 x 2: dp chunks 4, 4, 4, 1; the last row splits over tp as 1, 0: rank
  // 7 holds nothing.
  const TraceModel m = TraceModel::Load(Golden("nested_4x2_S0S0_to_S1S1.json"));
  const TensorLayout l =
      LayoutTensor(m, m.frame(0), NoHighlight(m), ResolveTensorView(m.frame(0).spec, {}),
                   Rect{0, 0, 600, 400}, kMetrics);
  EXPECT_THAT(l.empty_ranks, ElementsAre(7));
  ASSERT_EQ(Rects(l.draw, Role::kEmptyShard, 7).size(), 1u);
  EXPECT_EQ(Rects(l.draw, Role::kEmptyShard, 7)[0]->border, RankColor(7));
  std::vector<Interval> rows;
  for (const TensorBlock& b : l.blocks) rows.push_back(b.rows);
  EXPECT_THAT(rows, ElementsAre(Interval{0, 2}, Interval{2, 4}, Interval{4, 6}, Interval{6, 8},
                                Interval{8, 10}, Interval{10, 12}, Interval{12, 13}));
  // Uneven blocks are unequal: the 1-row block of rank 6 is half as tall as the 2-row ones.
  EXPECT_NEAR(l.blocks[6].rect.height() * 2, l.blocks[0].rect.height(), 2.0);
}

TEST(TensorLayoutTest, PartialBlocksAreMarked) {
  const TraceModel m = TraceModel::Load(Golden("partial_2x2_Psum_to_S0.json"));
  ASSERT_EQ(ToString(m.frame(0).spec.placements()), "[P(sum), S(1)]");
  // Frame 1 ([P(sum), R]): one block held by all four ranks, two of them addends (dp), each
  // replicated twice (tp).
  const TensorLayout l =
      LayoutTensor(m, m.frame(1), NoHighlight(m, 1), ResolveTensorView(m.frame(1).spec, {}),
                   Rect{0, 0, 600, 400}, kMetrics);
  ASSERT_EQ(l.blocks.size(), 1u);
  EXPECT_THAT(l.blocks[0].ranks, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(l.blocks[0].partial_ways, 2);
  const auto whole = Rects(l.draw, Role::kTensorBlock);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0]->border, kPartialColor);
  bool badge = false;
  for (const DrawText& t : l.draw.texts) badge = badge || t.text == "R x2 P(sum) x2";
  EXPECT_TRUE(badge);
}

TEST(TensorLayoutTest, HigherRanksAreSliced) {
  // 4 x 6 x 8 on 2 x 2 x 2 with [S(0), S(1), S(2)]: index 0 of dim 2 lies in tp=0's half (0:4),
  // index 5 in tp=1's.
  const TraceModel m = Meta("2x2x2", "pp,dp,tp", {4, 6, 8}, "S(0),S(1),S(2)", "R,R,R");
  ViewState v;
  TensorLayout l =
      LayoutTensor(m, m.frame(0), NoHighlight(m), ResolveTensorView(m.frame(0).spec, v),
                   Rect{0, 0, 600, 400}, kMetrics);
  EXPECT_EQ(l.blocks.size(), 4u);
  EXPECT_EQ(l.ranks_outside_slice, 4);
  for (const TensorBlock& b : l.blocks) EXPECT_EQ(b.ranks[0] % 2, 0);
  v.tensor_slice = {0, 0, 5};
  l = LayoutTensor(m, m.frame(0), NoHighlight(m), ResolveTensorView(m.frame(0).spec, v),
                   Rect{0, 0, 600, 400}, kMetrics);
  for (const TensorBlock& b : l.blocks) EXPECT_EQ(b.ranks[0] % 2, 1);
  // Rows dim 2, columns dim 0, slicing dim 1.
  v.tensor_row_dim = 2;
  v.tensor_col_dim = 0;
  v.tensor_slice = {0, 4, 0};
  const TensorView tv = ResolveTensorView(m.frame(0).spec, v);
  l = LayoutTensor(m, m.frame(0), NoHighlight(m), tv, Rect{0, 0, 600, 400}, kMetrics);
  ASSERT_EQ(l.blocks.size(), 4u);
  for (const TensorBlock& b : l.blocks)
    EXPECT_EQ((b.ranks[0] / 2) % 2, 1);  // dim 1 index 4 is dp=1's (3:6)
  v.tensor_slice = {0, 6, 0};
  EXPECT_THROW(ResolveTensorView(m.frame(0).spec, v), InputError);
  v.tensor_row_dim = 3;
  EXPECT_THROW(ResolveTensorView(m.frame(0).spec, v), InputError);
}

TEST(TensorLayoutTest, OneAndZeroDimTensors) {
  const TraceModel one = TraceModel::FromSpec(
      DTensorSpec::Create(DeviceMesh::Create({4}), ParsePlacements("S(0)"), {10}));
  TensorLayout l =
      LayoutTensor(one, one.frame(0), NoHighlight(one), ResolveTensorView(one.frame(0).spec, {}),
                   Rect{0, 0, 600, 200}, kMetrics);
  ASSERT_EQ(l.blocks.size(), 4u);
  EXPECT_EQ(l.blocks[3].cols, (Interval{9, 10}));
  const TraceModel zero =
      TraceModel::FromSpec(DTensorSpec::Create(DeviceMesh::Create({2}), ParsePlacements("R"), {}));
  l = LayoutTensor(zero, zero.frame(0), NoHighlight(zero),
                   ResolveTensorView(zero.frame(0).spec, {}), Rect{0, 0, 600, 200}, kMetrics);
  ASSERT_EQ(l.blocks.size(), 1u);
  EXPECT_THAT(l.blocks[0].ranks, ElementsAre(0, 1));
}

TEST(TensorLayoutTest, DiffAndEmphasisMarkTheBlocksOfARank) {
  const TraceModel m = TraceModel::Load(Golden("uneven_2x4_S0R_to_RS1.json"));
  ViewState v;
  v.frame = 3;
  v.hovered_rank = 1;
  Highlight h = ComputeHighlight(m, nullptr, v);
  h.differs.assign(8, 0);
  h.differs[6] = 1;
  const TensorLayout l = LayoutTensor(m, m.frame(3), h, ResolveTensorView(m.frame(3).spec, {}),
                                      Rect{0, 0, 800, 400}, kMetrics);
  int diff_marks = 0, white_marks = 0;
  for (const DrawRect& r : l.draw.rects) {
    if (r.role != Role::kHighlight) continue;
    if (r.border == kDiffColor) {
      ++diff_marks;
      EXPECT_TRUE(r.block == 2);  // columns 6:9 are held by ranks 2 and 6
    }
    if (r.border == kHighlightColor) {
      ++white_marks;
      EXPECT_TRUE(r.block == 1);  // columns 3:6 by ranks 1 and 5
    }
  }
  EXPECT_EQ(diff_marks, 2);   // the block and rank 6's chip
  EXPECT_EQ(white_marks, 2);  // the block and rank 1's chip
}

// ---- timeline ----

TEST(TimelineLayoutTest, FrameStripAndBytes) {
  const TraceModel m = TraceModel::Load(Golden("uneven_2x4_S0R_to_RS1.json"));
  const DrawList strip = LayoutFrameStrip(m, {0, 0, 1, 1}, 2, Rect{0, 0, 800, 30}, kMetrics);
  const auto boxes = Rects(strip, Role::kFrameBox);
  ASSERT_EQ(boxes.size(), 4u);
  EXPECT_EQ(boxes[2]->border, kHighlightColor);
  EXPECT_NE(boxes[1]->border, kHighlightColor);
  int marks = 0;
  for (const DrawRect& r : strip.rects) marks += r.role == Role::kHighlight && r.fill == kDiffColor;
  EXPECT_EQ(marks, 2);
  EXPECT_EQ(FrameBoxLabel(m, 2), "2 all_gather dp");
  EXPECT_EQ(FrameBoxLabel(m, 0), "initial");

  const BytesChart chart =
      LayoutBytesChart(m, m.frame(2), NoHighlight(m, 2), Rect{0, 0, 600, 200}, kMetrics);
  EXPECT_EQ(chart.ranks_per_bar, 1);
  EXPECT_EQ(chart.max_bytes, 36);
  // Sent bars (above the axis) are in proportion 12 : 36 for rank 3 : rank 0.
  auto sent_height = [&](int64_t rank) {
    float h = 0;
    for (const DrawRect* r : Rects(chart.draw, Role::kBar, rank)) {
      if (r->fill.visible() && r->rect.y1 <= 100) h = r->rect.height();
    }
    return h;
  };
  EXPECT_GT(sent_height(0), 50);
  EXPECT_NEAR(sent_height(3) / sent_height(0), 12.0 / 36.0, 0.02);
  EXPECT_EQ(BytesText(80), "80 B");
  EXPECT_EQ(BytesText(1536), "1.50 KiB");
}

TEST(TimelineLayoutTest, ManyRanksShareBars) {
  const TraceModel m = Meta("16x16x16", "pp,dp,tp", {64, 64, 64}, "S(0),S(1),S(2)", "R,S(0),S(1)");
  const BytesChart chart =
      LayoutBytesChart(m, m.frame(1), NoHighlight(m, 1), Rect{0, 0, 600, 200}, kMetrics);
  EXPECT_GT(chart.ranks_per_bar, 1);
  EXPECT_LE(Rects(chart.draw, Role::kBar).size(), 3 * (4096 / chart.ranks_per_bar + 1));
}

TEST(RankDetailsTest, SaysWhatTheRankHoldsAndMoves) {
  const TraceModel m = TraceModel::Load(Golden("uneven_2x4_S0R_to_RS1.json"));
  const std::vector<std::string> d = RankDetails(m, 2, m.GetPosition(3));
  EXPECT_THAT(d, ::testing::Contains("rank 3  coordinate [dp=0, tp=3]"));
  EXPECT_THAT(d, ::testing::Contains("local shape [5, 1]  global offset [0, 9]"));
  EXPECT_THAT(d, ::testing::Contains("owns dim 0: 0:5  dim 1: 9:10"));
  EXPECT_THAT(d, ::testing::Contains(HasSubstr("step 2 all_gather: sent 12 B")));
  EXPECT_THAT(d, ::testing::Contains(HasSubstr("group [3, 7]")));
  const TraceModel nested = TraceModel::Load(Golden("nested_4x2_S0S0_to_S1S1.json"));
  EXPECT_THAT(RankDetails(nested, 0, 7), ::testing::Contains("owns nothing (an empty shard)"));
  EXPECT_EQ(IntervalsText({{0, 2}, {4, 6}}), "0:2, 4:6");
  EXPECT_EQ(OwnersText({0, 1, 2, 3, 4, 5}), "0, 1, 2 ... (+3)");
}

}  // namespace
}  // namespace dtsim::viewer

namespace dtsim::viewer {
namespace {

// Every frame of many odd cases laid out at sizes down to a few pixels: no exception, every cell
// and block inside its area, every rank drawn on the mesh once.
TEST(LayoutSweepTest, OddCasesNeverBreakTheLayout) {
  struct Case {
    const char* mesh;
    const char* names;
    std::vector<int64_t> shape;
    const char* from;
    const char* to;
  };
  const std::vector<Case> cases = {
      {"8", "", {0, 5}, "S(0)", "R"},                                // a dim of size 0
      {"4", "", {}, "R", "R"},                                       // 0-d tensor
      {"3", "", {7}, "S(0)", "R"},                                   // 1-D, uneven
      {"2x3", "a,b", {int64_t{1} << 40, 3}, "S(0),S(1)", "S(1),R"},  // huge dim
      {"2x2", "dp,tp", {8, 4}, "_S(0,2),S(0)", "R,S(1)"},            // strided
      {"2x2", "dp,tp", {6, 4}, "P(sum),S(1)", "S(0),S(1)"},          // partial
      {"2x2x2x2",
       "a,b,c,d",
       {4, 4, 4, 4},
       "S(0),S(1),S(2),S(3)",
       "R,R,S(0),S(1)"},                              // 4-D mesh and tensor
      {"1x1", "", {3, 3}, "S(0),R", "R,S(1)"},        // size-1 mesh dims
      {"5x3", "", {2, 1}, "S(0),S(1)", "S(1),S(0)"},  // more ranks than elements
  };
  const std::vector<Rect> areas = {Rect{0, 0, 800, 500}, Rect{10, 20, 210, 120},
                                   Rect{0, 0, 40, 30}};
  for (const Case& c : cases) {
    const DTensorSpec spec =
        DTensorSpec::Create(DeviceMesh::Parse(c.mesh, c.names), ParsePlacements(c.from), c.shape);
    const TraceModel m =
        TraceModel::FromTrace(TraceFromJson(ToJson(MakeMetaTrace(spec, ParsePlacements(c.to)))));
    for (int64_t f = 0; f < m.num_frames(); ++f) {
      ViewState v;
      v.frame = f;
      v.selected_rank = m.RankAt(m.world_size() - 1);
      const Highlight h = ComputeHighlight(m, nullptr, v);
      for (const Rect& area : areas) {
        SCOPED_TRACE(StrCat(c.mesh, " ", IntListToString(c.shape), " ", c.from, " frame ", f,
                            " area ", area.width(), "x", area.height()));
        const MeshLayout mesh =
            LayoutMesh(m, m.frame(f), h, ResolveMeshGrid(m.mesh(), v), area, kMetrics);
        std::set<int64_t> ranks;
        for (const DrawRect* r : Rects(mesh.draw, Role::kMeshCell)) ranks.insert(r->rank);
        if (mesh.aggregate == 1) EXPECT_EQ(static_cast<int64_t>(ranks.size()), m.world_size());
        const TensorLayout tensor =
            LayoutTensor(m, m.frame(f), h, ResolveTensorView(m.frame(f).spec, v), area, kMetrics);
        for (const TensorBlock& b : tensor.blocks) {
          EXPECT_FALSE(b.ranks.empty());
          EXPECT_GE(b.rect.x0, area.x0);
          EXPECT_GE(b.rect.width(), 1);
        }
        if (area.width() >= 200) {
          for (const TensorBlock& b : tensor.blocks) EXPECT_LE(b.rect.x1, area.x1 + 1);
          for (const DrawRect* r : Rects(mesh.draw, Role::kMeshCell))
            EXPECT_LE(r->rect.x1, area.x1 + 1);
        }
        LayoutBytesChart(m, m.frame(f), h, area, kMetrics);
        LayoutFrameStrip(m, {}, f, area, kMetrics);
        for (int64_t p = 0; p < m.world_size(); ++p) RankDetails(m, f, p);
      }
    }
  }
}

TEST(LayoutSweepTest, MeshesWithAnotherRankOrder) {
  // Ranks laid out column-major over a 2 x 2 mesh: rank 1 sits at coordinate (1, 0).
  const DTensorSpec spec = DTensorSpec::Create(
      DeviceMesh::Create({2, 2}, {"dp", "tp"}, {0, 2, 1, 3}), ParsePlacements("S(0),S(1)"), {4, 4});
  const TraceModel m = TraceModel::FromSpec(spec);
  EXPECT_EQ(m.GetPosition(1), 2);
  EXPECT_THAT(m.CoordinateAt(m.GetPosition(1)), ElementsAre(1, 0));
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 200, 200}, kMetrics);
  const DrawRect* r1 = Rects(l.draw, Role::kMeshCell, 1).at(0);
  const DrawRect* r2 = Rects(l.draw, Role::kMeshCell, 2).at(0);
  EXPECT_GT(r1->rect.y0, r2->rect.y0);  // rank 1 on the second row
  EXPECT_LT(r1->rect.x0, r2->rect.x0);  // rank 2 in the second column
  const TensorLayout t = LayoutTensor(m, m.frame(0), NoHighlight(m), ResolveTensorView(spec, {}),
                                      Rect{0, 0, 200, 200}, kMetrics);
  for (const TensorBlock& b : t.blocks) {
    if (b.ranks == std::vector<int64_t>{1}) EXPECT_EQ(b.rows, (Interval{2, 4}));  // dp=1
  }
}

}  // namespace
}  // namespace dtsim::viewer
