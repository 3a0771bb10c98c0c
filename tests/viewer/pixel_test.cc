// Pixel tests of dtsim-viewer's headless mode: render a frame offscreen (under xvfb-run), read the
// PNG back and check colours where it matters. Where to look comes from the draw records the viewer
// dumps (the layout step's own output, in screen pixels); what to expect from the palette
// (colors.h) and from closed forms of the layout rule. Skipped only when no window / OpenGL context
// can be opened at all (exit code 4 of the probe).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "model_trace_support.h"
#include "test_support.h"
#include "viewer/model/colors.h"
#include "viewer/model/model_view.h"
#include "viewer/model/render_png.h"

namespace dtsim::viewer {
namespace {

using testing::EditedTrace;
using testing::Golden;
using ::testing::HasSubstr;
using testing::OtherHash;
using ::testing::StartsWith;
using testing::TempPath;

const char* kUneven = "uneven_2x4_S0R_to_RS1.json";

struct RunResult {
  int code = -1;
  std::string err;
};

RunResult RunCommand(const std::string& command) {
  static int counter = 0;
  const std::string err = TempPath("stderr_" + std::to_string(counter++) + ".txt");
  const int status = std::system((command + " >/dev/null 2>" + err).c_str());
  RunResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  r.err = s.str();
  return r;
}

RunResult RunViewer(const std::string& args) {
  return RunCommand(std::string(DTSIM_VIEWER_BIN) + " " + args);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

struct Shot {
  Image image;
  nlohmann::json records;
  const nlohmann::json& panel(const std::string& name) const { return records["panels"][name]; }
};

Rgba ColorOf(const nlohmann::json& c) { return Rgba{c[0], c[1], c[2], c[3]}; }

// The rects of `panel` with `role` (and `rank`, unless -2), in painting order.
std::vector<std::pair<size_t, nlohmann::json>> Find(const nlohmann::json& panel,
                                                    const std::string& role, int64_t rank = -2) {
  std::vector<std::pair<size_t, nlohmann::json>> out;
  const auto& rects = panel["rects"];
  for (size_t i = 0; i < rects.size(); ++i) {
    if (rects[i]["role"] == role && (rank == -2 || rects[i]["rank"] == rank))
      out.push_back({i, rects[i]});
  }
  return out;
}

// A pixel inside rect `index` of `panel` that nothing painted later covers (fills, borders, lines,
// texts), so its colour must be the rect's fill; nullopt if there is none.
std::optional<std::pair<int, int>> FreePixel(const nlohmann::json& panel, size_t index) {
  const auto& rects = panel["rects"];
  const auto& r = rects[index];
  const float inset = r["border_width"].get<float>();
  const float x0 = r["x0"].get<float>() + inset, x1 = r["x1"].get<float>() - inset;
  const float y0 = r["y0"].get<float>() + inset, y1 = r["y1"].get<float>() - inset;
  for (float y = y0 + 0.5f; y < y1; y += 1) {
    for (float x = x0 + 0.5f; x < x1; x += 1) {
      bool covered = false;
      for (size_t j = index + 1; j < rects.size() && !covered; ++j) {
        const auto& o = rects[j];
        const float ox0 = o["x0"], oy0 = o["y0"], ox1 = o["x1"], oy1 = o["y1"];
        if (x < ox0 - 1 || x >= ox1 + 1 || y < oy0 - 1 || y >= oy1 + 1) continue;
        if (ColorOf(o["fill"]).visible()) covered = true;
        const float w = o["border_width"].get<float>() + 1;
        if (ColorOf(o["border"]).visible() &&
            (x < ox0 + w || x >= ox1 - w || y < oy0 + w || y >= oy1 - w)) {
          covered = true;
        }
      }
      for (const auto& t : panel["texts"]) {
        const float tx = t["x"], ty = t["y"], tw = t["w"], th = t["h"];
        if (x >= tx - 2 && x < tx + tw + 2 && y >= ty - 2 && y < ty + th + 2) covered = true;
      }
      for (const auto& l : panel["lines"]) {
        const float lx0 = l["x0"], ly0 = l["y0"], lx1 = l["x1"], ly1 = l["y1"];
        const float dx = lx1 - lx0, dy = ly1 - ly0, len2 = dx * dx + dy * dy;
        const float t =
            len2 > 0 ? std::clamp(((x - lx0) * dx + (y - ly0) * dy) / len2, 0.0f, 1.0f) : 0;
        const float ex = x - lx0 - t * dx, ey = y - ly0 - t * dy;
        if (ex * ex + ey * ey < 4) covered = true;
      }
      if (!covered) return std::pair<int, int>{static_cast<int>(x), static_cast<int>(y)};
    }
  }
  return std::nullopt;
}

class ViewerPixelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string probe = TempPath("probe.png");
    const RunResult r = RunViewer(Golden(kUneven) + " --size 400x300 --screenshot " + probe);
    display_ok_ = r.code == 0;
    why_ = r.err;
    if (r.code != 0 && r.code != 4)
      probe_failure_ = "probe exited " + std::to_string(r.code) + ": " + r.err;
  }

  void SetUp() override {
    ASSERT_TRUE(probe_failure_.empty()) << probe_failure_;
    if (!display_ok_) GTEST_SKIP() << "no X display / OpenGL context: " << why_;
  }

  static Shot Screenshot(const std::string& name, const std::string& args) {
    const std::string png = TempPath(name + ".png"), json = TempPath(name + ".json");
    const RunResult r = RunViewer(args + " --screenshot " + png + " --dump-records " + json);
    EXPECT_EQ(r.code, 0) << r.err;
    Shot s;
    std::ifstream in(png, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    s.image = DecodePng(bytes.str());
    s.records = testing::ReadJson(json);
    return s;
  }

  // The colour of a free pixel of the rect (asserts that one exists).
  static Rgba FreeColor(const Shot& s, const std::string& panel, size_t index) {
    const auto p = FreePixel(s.panel(panel), index);
    EXPECT_TRUE(p.has_value()) << "no free pixel in rect " << index << " of " << panel;
    return p ? s.image.At(p->first, p->second) : Rgba{};
  }

  static bool display_ok_;
  static std::string why_;
  static std::string probe_failure_;
};

bool ViewerPixelTest::display_ok_ = false;
std::string ViewerPixelTest::why_;
std::string ViewerPixelTest::probe_failure_;

TEST_F(ViewerPixelTest, ABlockOwnedByRank3IsRank3sColour) {
  // Final [R, S(1)] of a 5 x 10 tensor on tp=4: rank 3 holds columns 9:10 (chunks of 3), replicated
  // with rank 7.
  const Shot s = Screenshot("final", Golden(kUneven) + " --step final --size 1200x800");
  ASSERT_EQ(s.image.width, 1200);
  ASSERT_EQ(s.image.height, 800);
  EXPECT_EQ(s.records["frame"], 3);
  const auto frame = Find(s.panel("tensor"), "background");
  ASSERT_EQ(frame.size(), 1u);
  const float tx0 = frame[0].second["x0"], tx1 = frame[0].second["x1"];
  const auto owned = Find(s.panel("tensor"), "tensor_owner", 3);
  ASSERT_FALSE(owned.empty());
  const auto& block = owned[0].second;  // the block's fill (the chip comes after it)
  EXPECT_NEAR(block["x0"].get<float>() - tx0, (tx1 - tx0) * 0.9f, 1.0f);
  EXPECT_NEAR(block["x1"].get<float>() - tx0, (tx1 - tx0) * 1.0f, 1.0f);
  EXPECT_EQ(FreeColor(s, "tensor", owned[0].first), RankColor(3));
  // Rank 7 (the replica) has its chip in its own colour.
  const auto chip = Find(s.panel("tensor"), "tensor_owner", 7);
  ASSERT_EQ(chip.size(), 1u);
  const auto& c = chip[0].second;
  EXPECT_EQ(s.image.At(static_cast<int>(c["x1"].get<float>()) - 2,
                       static_cast<int>(c["y1"].get<float>()) - 2),
            RankColor(7));
  // The mesh cell of every rank is its colour.
  for (int64_t r = 0; r < 8; ++r) {
    const auto cell = Find(s.panel("mesh"), "mesh_cell", r);
    ASSERT_EQ(cell.size(), 1u);
    EXPECT_EQ(FreeColor(s, "mesh", cell[0].first), RankColor(r)) << "rank " << r;
  }
}

TEST_F(ViewerPixelTest, StepChangesWhatIsDrawn) {
  const Shot first = Screenshot("initial", Golden(kUneven) + " --step 0 --size 1200x800");
  const Shot last = Screenshot("last", Golden(kUneven) + " --step 3 --size 1200x800");
  // Element (row 3, column 9) of the 5 x 10 tensor: rank 4's at first ([S(0), R]: dp=1 holds rows
  // 3:5), rank 3's at the end ([R, S(1)]: tp=3 holds column 9).
  auto pixel_of = [](const Shot& s, double row, double col) {
    const nlohmann::json f = Find(s.panel("tensor"), "background").at(0).second;
    const float x0 = f["x0"], x1 = f["x1"], y0 = f["y0"], y1 = f["y1"];
    return s.image.At(static_cast<int>(x0 + (x1 - x0) * col / 10),
                      static_cast<int>(y0 + (y1 - y0) * row / 5));
  };
  EXPECT_EQ(pixel_of(first, 3.5, 9.6), RankColor(4));
  EXPECT_EQ(pixel_of(last, 3.5, 9.6), RankColor(3));
  // No bytes move before the first step; the frame strip outlines the current frame.
  for (const auto& [i, bar] : Find(first.panel("bytes"), "bar"))
    EXPECT_FALSE(ColorOf(bar["fill"]).visible());
  const auto boxes = Find(last.panel("frames"), "frame_box");
  ASSERT_EQ(boxes.size(), 4u);
  const auto& box = boxes[3].second;
  EXPECT_EQ(last.image.At(static_cast<int>(box["x0"].get<float>()) + 1,
                          static_cast<int>(box["y1"].get<float>()) - 1),
            kHighlightColor);
}

TEST_F(ViewerPixelTest, ADifferingRankIsDrawnInTheDiffColour) {
  const std::string other = EditedTrace(kUneven, "pixel_rank5.json", [](nlohmann::json& j) {
    for (nlohmann::json* rows : {&j["steps"][1]["ranks_after"], &j["final"]["ranks"]}) {
      (*rows)[5]["hash"] = OtherHash((*rows)[5]["hash"]);
    }
  });
  // Without --step, a pair opens at the first frame where the traces part: after step 2.
  const Shot s = Screenshot("diff", Golden(kUneven) + " " + other + " --size 1200x800");
  EXPECT_EQ(s.records["frame"], 2);
  const auto cell5 = Find(s.panel("mesh"), "mesh_cell", 5);
  const auto cell4 = Find(s.panel("mesh"), "mesh_cell", 4);
  ASSERT_EQ(cell5.size(), 1u);
  EXPECT_EQ(FreeColor(s, "mesh", cell5[0].first), kDiffColor);
  EXPECT_EQ(FreeColor(s, "mesh", cell4[0].first), RankColor(4));
  // In the tensor, the block of rank 5 (columns 3:6 with rank 1) is framed in the diff colour.
  bool framed = false;
  for (const auto& [i, r] : Find(s.panel("tensor"), "highlight")) {
    if (ColorOf(r["border"]) != kDiffColor || r["rank"] != 5) continue;
    framed = true;
    EXPECT_EQ(s.image.At(static_cast<int>(r["x0"].get<float>()) + 1,
                         static_cast<int>((r["y0"].get<float>() + r["y1"].get<float>()) / 2)),
              kDiffColor);
  }
  EXPECT_TRUE(framed);
  // The frame strip marks the frames with differences (after step 2 and final), not the others.
  int marked = 0;
  for (const auto& [i, r] : Find(s.panel("frames"), "highlight")) {
    ++marked;
    EXPECT_TRUE(r["frame"] == 2 || r["frame"] == 3);
    EXPECT_EQ(s.image.At(static_cast<int>(r["x0"].get<float>()) + 3,
                         static_cast<int>(r["y0"].get<float>()) + 2),
              kDiffColor);
  }
  EXPECT_EQ(marked, 2);
  // At the initial frame nothing differs: rank 5 is its own colour.
  const Shot before =
      Screenshot("diff_initial", Golden(kUneven) + " " + other + " --step initial --size 1200x800");
  EXPECT_EQ(FreeColor(before, "mesh", Find(before.panel("mesh"), "mesh_cell", 5)[0].first),
            RankColor(5));
}

TEST_F(ViewerPixelTest, SelectedRankAndItsGroupAreOutlined) {
  const Shot s =
      Screenshot("select", Golden(kUneven) + " --step 2 --select-rank 6 --size 1200x800");
  const auto mark = Find(s.panel("mesh"), "highlight", 6);
  ASSERT_EQ(mark.size(), 1u);
  const auto& m = mark[0].second;
  EXPECT_EQ(ColorOf(m["border"]), kHighlightColor);
  EXPECT_EQ(s.image.At(static_cast<int>(m["x0"].get<float>()) + 1,
                       static_cast<int>((m["y0"].get<float>() + m["y1"].get<float>()) / 2)),
            kHighlightColor);
  // Step 2 all-gathers over dp: rank 6's group is {2, 6}; rank 2 is outlined in the group colour.
  const auto group = Find(s.panel("mesh"), "mesh_group", 2);
  ASSERT_EQ(group.size(), 2u);  // the yellow ring, and the dark hairline inside it
  const auto& g = group[0].second;
  EXPECT_EQ(ColorOf(g["border"]), kGroupColor);
  EXPECT_EQ(s.image.At(static_cast<int>(g["x0"].get<float>()) + 1,
                       static_cast<int>((g["y0"].get<float>() + g["y1"].get<float>()) / 2)),
            kGroupColor);
}

TEST_F(ViewerPixelTest, HoverLinksTheMeshAndTheTensor) {
  const std::string args = Golden(kUneven) + " --step final --size 1200x800";
  const Shot base = Screenshot("hover_base", args);
  // The mouse over rank 3's block (columns 9:10, held by ranks 3 and 7): both light up on the mesh.
  const auto block = Find(base.panel("tensor"), "tensor_owner", 3).at(0).second;
  const int bx = static_cast<int>((block["x0"].get<float>() + block["x1"].get<float>()) / 2);
  const int by = static_cast<int>((block["y0"].get<float>() + block["y1"].get<float>()) / 2);
  const Shot over_block =
      Screenshot("hover_block", args + " --mouse " + std::to_string(bx) + "," + std::to_string(by));
  for (int64_t rank : {3, 7}) {
    const auto mark = Find(over_block.panel("mesh"), "highlight", rank);
    ASSERT_EQ(mark.size(), 1u) << "rank " << rank;
    const auto& m = mark[0].second;
    EXPECT_EQ(ColorOf(m["border"]), kHighlightColor);
    EXPECT_EQ(
        over_block.image.At(static_cast<int>(m["x0"].get<float>()),
                            static_cast<int>((m["y0"].get<float>() + m["y1"].get<float>()) / 2)),
        kHighlightColor);
  }
  EXPECT_EQ(Find(over_block.panel("mesh"), "highlight").size(), 2u);
  // The mouse over rank 6's mesh cell: its block (columns 6:9, with rank 2) is outlined in the
  // tensor panel.
  const auto cell = Find(base.panel("mesh"), "mesh_cell", 6).at(0).second;
  const int mx = static_cast<int>(cell["x0"].get<float>()) + 6,
            my = static_cast<int>(cell["y0"].get<float>()) + 6;
  const Shot over_cell =
      Screenshot("hover_cell", args + " --mouse " + std::to_string(mx) + "," + std::to_string(my));
  bool outlined = false;
  const auto owner =
      Find(over_cell.panel("tensor"), "tensor_owner", 2).at(0).second;  // the block's fill
  for (const auto& [i, r] : Find(over_cell.panel("tensor"), "highlight")) {
    if (ColorOf(r["border"]) != kHighlightColor || r["block"] != owner["block"] || r["rank"] != -1)
      continue;
    outlined = true;
    EXPECT_EQ(
        over_cell.image.At(static_cast<int>(r["x0"].get<float>()) + 1,
                           static_cast<int>((r["y0"].get<float>() + r["y1"].get<float>()) / 2)),
        kHighlightColor);
  }
  EXPECT_TRUE(outlined);
}

TEST_F(ViewerPixelTest, A4096RankTraceOpens) {
  const std::string big = TempPath("trace_4096.json");
  const RunResult made =
      RunCommand(std::string(DTSIM_META_TRACE_BIN) +
                 " --mesh 16x16x16 --names pp,dp,tp --shape 64,64,64 --from 'S(0),S(1),S(2)' --to "
                 "'R,S(0),S(1)' " +
                 big);
  ASSERT_EQ(made.code, 0) << made.err;
  const Shot s = Screenshot("big", big + " --step 1 --select-rank 4095");
  EXPECT_EQ(Find(s.panel("mesh"), "mesh_cell").size(), 4096u);
  for (int64_t rank :
       {0, 2000, 4000}) {  // not in the selected rank's group (4080..4095), which is outlined
    const auto cell = Find(s.panel("mesh"), "mesh_cell", rank);
    ASSERT_EQ(cell.size(), 1u);
    EXPECT_EQ(FreeColor(s, "mesh", cell[0].first), RankColor(rank)) << "rank " << rank;
  }
  // The bytes chart aggregates ranks into bars.
  EXPECT_LT(Find(s.panel("bytes"), "bar").size(), 4096u);
  // Another grid: rows tp, columns pp, slices over dp.
  const Shot t = Screenshot("big_grid", big + " --mesh-grid tp,pp --size 1000x700");
  bool header = false;
  for (const auto& text : t.panel("mesh")["texts"]) {
    header = header || text["text"] == "rows tp=16  cols pp=16  slices dp=16";
  }
  EXPECT_TRUE(header);
}

// ---- the explorer (issue 20): hover, zoom, pan, go to a rank, find, open ----

// A bad input: exit 2 with `prefix` on stderr, no picture written.
void ExpectInputError(const std::string& args, const std::string& prefix) {
  const std::string png = TempPath("never.png");
  const RunResult r = RunViewer(args + " --screenshot " + png);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, StartsWith(prefix));
  EXPECT_FALSE(Exists(png));
}

const std::string& BigTrace() {
  static const std::string path = [] {
    const std::string big = TempPath("explorer_4096.json");
    const RunResult made = RunCommand(
        std::string(DTSIM_META_TRACE_BIN) +
        " --mesh 16x16x16 --names pp,dp,tp --shape 64,64,64 --from 'S(0),S(1),S(2)' --to "
        "'R,S(0),S(1)' " +
        big);
    EXPECT_EQ(made.code, 0) << made.err;
    return big;
  }();
  return path;
}

struct Box {
  float x0, y0, x1, y1;
};
Box BoxOf(const nlohmann::json& r) { return {r["x0"], r["y0"], r["x1"], r["y1"]}; }

// The ranks of the drawn cells nearest to pixel (x, y) (several on a tie), by the distance from the
// pixel's centre to each drawn rect grown by half the gap between neighbouring cells.
std::set<int64_t> NearestCells(const nlohmann::json& mesh, float x, float y) {
  std::set<int64_t> best;
  double best_d = 1e30;
  for (const auto& [i, r] : Find(mesh, "mesh_cell")) {
    const Box b = BoxOf(r);
    const double dx = std::max({0.0, b.x0 - (x + 0.5), (x + 0.5) - b.x1});
    const double dy = std::max({0.0, b.y0 - (y + 0.5), (y + 0.5) - b.y1});
    const double d = dx * dx + dy * dy;
    if (d < best_d - 1e-9) {
      best_d = d;
      best.clear();
    }
    if (d < best_d + 1e-9) best.insert(r["rank"].get<int64_t>());
  }
  return best;
}

TEST_F(ViewerPixelTest, HoverAtCellGapsAndEdgesFindsTheNearestRank) {
  int shot = 0;
  for (const auto& [trace, size] :
       std::vector<std::pair<std::string, std::string>>{{Golden(kUneven), "1600x1000"},
                                                        {Golden(kUneven), "1000x650"},
                                                        {BigTrace(), "1600x1000"},
                                                        {BigTrace(), "1000x700"}}) {
    const Shot s = Screenshot("gaps" + std::to_string(shot++), trace + " --size " + size);
    const auto& mesh = s.panel("mesh");
    const auto cells = Find(mesh, "mesh_cell");
    ASSERT_GE(cells.size(), 8u);
    const Box first = BoxOf(cells.front().second), last = BoxOf(cells.back().second);
    std::vector<std::pair<float, float>> points = {
        {first.x1, (first.y0 + first.y1) / 2},  // just right of the first cell: a gap
        {first.x0 - 2, first.y0 + 1},           // outside the grid's left edge
        {last.x1 + 1, last.y1 + 1},             // beyond the last cell's corner
        {(first.x0 + first.x1) / 2, first.y1},  // just below the first cell
    };
    // Between two slices (the 4,096-rank mesh): halfway from rank 15's cell to rank 256's.
    if (cells.size() == 4096) {
      const Box a = BoxOf(Find(mesh, "mesh_cell", 15)[0].second);
      const Box b = BoxOf(Find(mesh, "mesh_cell", 256)[0].second);
      ASSERT_GT(b.x0 - a.x1, 4);
      points.push_back({std::floor((a.x1 + b.x0) / 2) - 1, (a.y0 + a.y1) / 2});
      points.push_back({std::floor((a.x1 + b.x0) / 2) + 1, (b.y0 + b.y1) / 2});
    }
    for (const auto& [x, y] : points) {
      const std::set<int64_t> want = NearestCells(mesh, std::floor(x), std::floor(y));
      const Shot h =
          Screenshot("gap_hover" + std::to_string(shot++),
                     trace + " --size " + size + " --mouse " + std::to_string(static_cast<int>(x)) +
                         "," + std::to_string(static_cast<int>(y)));
      ASSERT_FALSE(h.records["hover"].is_null()) << trace << " " << size << " at " << x << "," << y;
      EXPECT_EQ(h.records["hover"]["panel"], "mesh");
      EXPECT_TRUE(want.count(h.records["hover"]["rank"].get<int64_t>()))
          << trace << " " << size << " at " << x << "," << y << ": hover " << h.records["hover"]
          << ", nearest " << *want.begin();
    }
    // The header line is not the mesh: nothing is hovered there.
    const auto& header = mesh["texts"][0];
    const Shot h =
        Screenshot("gap_header" + std::to_string(shot++),
                   trace + " --size " + size + " --mouse " +
                       std::to_string(static_cast<int>(header["x"].get<float>()) + 3) + "," +
                       std::to_string(static_cast<int>(header["y"].get<float>()) + 3));
    EXPECT_TRUE(h.records["hover"].is_null()) << h.records["hover"];
  }
}

TEST_F(ViewerPixelTest, AClickInAGapSelectsTheRankHoverShows) {
  const Shot s = Screenshot("click_plain", Golden(kUneven));
  const Box c = BoxOf(Find(s.panel("mesh"), "mesh_cell", 5)[0].second);
  const std::string at =
      std::to_string(static_cast<int>(c.x1)) + "," + std::to_string(static_cast<int>(c.y1));
  const Shot h = Screenshot("click_gap", Golden(kUneven) + " --input 'click " + at + "'");
  ASSERT_FALSE(h.records["hover"].is_null());
  EXPECT_EQ(h.records["selected_rank"], h.records["hover"]["rank"]);
  // A second click there clears it again; a click on the header clears nothing but selects
  // nothing either.
  const Shot twice =
      Screenshot("click_twice", Golden(kUneven) + " --input 'click " + at + "; click " + at + "'");
  EXPECT_EQ(twice.records["selected_rank"], -1);
}

TEST_F(ViewerPixelTest, TheWheelZoomsAboutTheCursorADragPansAndRResets) {
  const Shot plain = Screenshot("zoom_plain", Golden(kUneven));
  const Box c = BoxOf(Find(plain.panel("mesh"), "mesh_cell", 5)[0].second);
  const int cx = static_cast<int>((c.x0 + c.x1) / 2), cy = static_cast<int>((c.y0 + c.y1) / 2);
  const std::string at = std::to_string(cx) + "," + std::to_string(cy);
  const Shot zoomed = Screenshot("zoom_in", Golden(kUneven) + " --input 'wheel " + at + " 3'");
  EXPECT_NEAR(zoomed.records["zoom"]["mesh"]["scale"].get<double>(), std::pow(1.25, 3), 1e-4);
  const auto cell = Find(zoomed.panel("mesh"), "mesh_cell", 5);
  ASSERT_EQ(cell.size(), 1u);
  const Box z = BoxOf(cell[0].second);
  // Rank 5 is still under the cursor, about twice as large, and drawn in its colour.
  EXPECT_TRUE(z.x0 <= cx && cx < z.x1 && z.y0 <= cy && cy < z.y1);
  EXPECT_NEAR((z.x1 - z.x0) / (c.x1 - c.x0), std::pow(1.25, 3), 0.1);
  EXPECT_EQ(FreeColor(zoomed, "mesh", cell[0].first), RankColor(5));
  EXPECT_EQ(zoomed.records["hover"]["rank"], 5);
  // The header stays where it was.
  EXPECT_EQ(zoomed.panel("mesh")["texts"][0]["y"], plain.panel("mesh")["texts"][0]["y"]);
  // A drag moves the content with the mouse.
  const std::string to = std::to_string(cx - 40) + "," + std::to_string(cy - 30);
  const Shot dragged = Screenshot(
      "zoom_drag", Golden(kUneven) + " --input 'wheel " + at + " 3; drag " + at + " " + to + "'");
  const Box d = BoxOf(Find(dragged.panel("mesh"), "mesh_cell", 5)[0].second);
  EXPECT_NEAR(d.x0 - z.x0, -40, 4);
  EXPECT_NEAR(d.y0 - z.y0, -30, 4);
  EXPECT_EQ(dragged.records["selected_rank"], -1);  // a drag is not a click
  // R resets.
  const Shot reset = Screenshot("zoom_reset", Golden(kUneven) + " --input 'wheel " + at +
                                                  " 3; drag " + at + " " + to + "; key r'");
  EXPECT_EQ(reset.records["zoom"]["mesh"]["scale"], 1.0);
  const Box r = BoxOf(Find(reset.panel("mesh"), "mesh_cell", 5)[0].second);
  EXPECT_EQ(r.x0, c.x0);
  EXPECT_EQ(r.y0, c.y0);
}

TEST_F(ViewerPixelTest, TheTensorZoomsAndItsTicksStay) {
  const Shot plain = Screenshot("tzoom_plain", Golden(kUneven) + " --step 2");
  const auto& blocks = Find(plain.panel("tensor"), "tensor_block");
  ASSERT_FALSE(blocks.empty());
  const Box b = BoxOf(blocks[0].second);
  const std::string at =
      std::to_string(static_cast<int>(b.x0) + 3) + "," + std::to_string(static_cast<int>(b.y0) + 3);
  const Shot z = Screenshot("tzoom_in", Golden(kUneven) + " --step 2 --input 'wheel " + at + " 4'");
  EXPECT_GT(z.records["zoom"]["tensor"]["scale"].get<double>(), 2.4);
  const Box zb = BoxOf(Find(z.panel("tensor"), "tensor_block")[0].second);
  EXPECT_GT(zb.x1 - zb.x0, 2 * (b.x1 - b.x0));
  EXPECT_EQ(z.records["hover"]["panel"], "tensor");
}

TEST_F(ViewerPixelTest, FindRank1380OfA4096RankTraceZoomAndReadIt) {
  for (const std::string& how :
       {std::string("--input 'key ctrl+g; type 1380; key Enter'"),
        std::string("--goto 'pp=5, dp=6, tp=4'"), std::string("--goto 5,6,4")}) {
    const Shot s = Screenshot("goto", BigTrace() + " --step 2 " + how);
    EXPECT_EQ(s.records["selected_rank"], 1380) << how;
    EXPECT_EQ(s.records["goto_error"], "");
    const auto& mesh = s.panel("mesh");
    const auto cell = Find(mesh, "mesh_cell", 1380);
    ASSERT_EQ(cell.size(), 1u) << how;
    const Box c = BoxOf(cell[0].second);
    // Centred in the mesh panel's zoomable area and large enough to read.
    EXPECT_LT(Find(mesh, "mesh_cell").size(), 200u);  // zoomed in: a few cells are drawn
    EXPECT_GE(c.x1 - c.x0, 56);
    const float mx = (c.x0 + c.x1) / 2, my = (c.y0 + c.y1) / 2;
    const auto& vp = mesh["viewport"];
    EXPECT_NEAR(mx, (vp[0].get<float>() + vp[2].get<float>()) / 2, 2) << how;
    EXPECT_NEAR(my, (vp[1].get<float>() + vp[3].get<float>()) / 2, 2) << how;
    // Its number and coordinate are written in it; it is outlined in white.
    std::set<std::string> labels;
    for (const auto& t : mesh["texts"]) {
      const float tx = t["x"], ty = t["y"];
      if (tx >= c.x0 && tx < c.x1 && ty >= c.y0 && ty < c.y1) labels.insert(t["text"]);
    }
    EXPECT_TRUE(labels.count("1380")) << how;
    EXPECT_TRUE(labels.count("pp=5 dp=6 tp=4")) << how;
    const auto mark = Find(mesh, "highlight", 1380);
    ASSERT_FALSE(mark.empty());
    EXPECT_EQ(
        s.image.At(static_cast<int>(mark[0].second["x0"].get<float>()) + 1, static_cast<int>(my)),
        kHighlightColor);
    // The tensor panel shows a block of rank 1380, outlined.
    bool owner = false;
    for (const auto& [i, r] : Find(s.panel("tensor"), "tensor_owner", 1380)) owner = true;
    EXPECT_TRUE(owner) << how;
  }
  // A rank that is not there: the error under the box, nothing selected.
  const Shot bad =
      Screenshot("goto_bad", BigTrace() + " --input 'key ctrl+g; type 99999; key Enter'");
  EXPECT_EQ(bad.records["selected_rank"], -1);
  EXPECT_THAT(bad.records["goto_error"].get<std::string>(), HasSubstr("rank 99999 is not in"));
}

TEST_F(ViewerPixelTest, StepKeysStopAtTheEnds) {
  EXPECT_EQ(Screenshot("keys0", Golden(kUneven) + " --input 'key Left'").records["frame"], 0);
  EXPECT_EQ(
      Screenshot("keys1", Golden(kUneven) + " --step final --input 'key Right'").records["frame"],
      3);
  EXPECT_EQ(
      Screenshot("keys2", Golden(kUneven) + " --input 'key Right; key Right'").records["frame"], 2);
  EXPECT_EQ(Screenshot("keys3", Golden(kUneven) + " --input 'key End; key Home; key Left'")
                .records["frame"],
            0);
}

TEST_F(ViewerPixelTest, FindStepsByCollectiveAndMeshDim) {
  // The big trace's steps: 1 all_gather tp, 2 all_gather dp, 3 all_gather pp, 4 local_split dp,
  // 5 local_split tp.
  auto marked = [](const Shot& s) {
    std::vector<int64_t> out;
    for (const auto& [i, r] : Find(s.panel("frames"), "highlight")) out.push_back(r["frame"]);
    return out;
  };
  const Shot a =
      Screenshot("find1", BigTrace() + " --input 'key ctrl+f; type all_gather; key Enter'");
  EXPECT_EQ(a.records["frame"], 1);
  EXPECT_THAT(marked(a), ::testing::ElementsAre(1, 2, 3));
  const Shot b = Screenshot(
      "find2", BigTrace() + " --input 'key ctrl+f; type all_gather; key Enter; key Enter'");
  EXPECT_EQ(b.records["frame"], 2);
  const Shot c =
      Screenshot("find3", BigTrace() + " --step 3 --input 'key ctrl+f; type dp; key F3'");
  EXPECT_EQ(c.records["frame"], 4);
  EXPECT_THAT(marked(c), ::testing::ElementsAre(2, 4));
  const Shot d =
      Screenshot("find4", BigTrace() + " --input 'key ctrl+f; type reduce_scatter; key Enter'");
  EXPECT_EQ(d.records["frame"], 0);
  EXPECT_TRUE(marked(d).empty());
}

TEST_F(ViewerPixelTest, OpenAnotherTraceFromTheWindowAndFromTheErrorScreen) {
  const std::string nested = Golden("nested_4x2_S0S0_to_S1S1.json");
  const Shot a = Screenshot(
      "open1", Golden(kUneven) + " --input 'key ctrl+o; type " + nested + "; key Enter'");
  EXPECT_EQ(a.records["shown"], nested);
  EXPECT_EQ(a.records["error"], "");
  EXPECT_EQ(Find(a.panel("mesh"), "mesh_cell").size(), 8u);
  // A broken file: the error screen; from there, open a good one again.
  const std::string broken = testing::WriteText("broken_open.json", "{\"format\": ");
  const Shot b = Screenshot(
      "open2", Golden(kUneven) + " --input 'key ctrl+o; type " + broken + "; key Enter'");
  EXPECT_THAT(b.records["error"].get<std::string>(), HasSubstr("trace: "));
  EXPECT_EQ(b.records["shown"], "");
  const Shot c =
      Screenshot("open3", Golden(kUneven) + " --input 'key ctrl+o; type " + broken +
                              "; key Enter; key ctrl+o; type " + nested + "; key Enter'");
  EXPECT_EQ(c.records["error"], "");
  EXPECT_EQ(c.records["shown"], nested);
}

TEST_F(ViewerPixelTest, ARecordingOpensOneRedistributionAtATime) {
  const std::string rec =
      std::string(DTSIM_SOURCE_DIR) + "/tests/fuzz/corpus/recording/seed-local-mlp";
  const Shot a = Screenshot("rec0", rec);
  EXPECT_EQ(a.records["redistribution"], 0);
  EXPECT_EQ(Find(a.panel("mesh"), "mesh_cell").size(), 4u);
  // PageDown goes to the next one; --redistribution picks one; the all_reduce of #1 is drawn.
  const Shot b = Screenshot("rec1", rec + " --input 'key PageDown'");
  EXPECT_EQ(b.records["redistribution"], 1);
  const Shot c = Screenshot("rec2", rec + " --redistribution 1 --step 1");
  bool all_reduce = false;
  for (const auto& t : c.panel("frames")["texts"])
    all_reduce = all_reduce || t["text"] == "1 all_reduce dim 0";
  EXPECT_TRUE(all_reduce);
  ExpectInputError(
      rec + " --redistribution 3",
      "dtsim-viewer: error: redistribution: 3 is not a redistribution of the recording (0..2)");
  ExpectInputError(Golden(kUneven) + " --redistribution 0",
                   "dtsim-viewer: error: redistribution: needs a recording");
}

// Two recordings whose events part where the test planted it (rank 2's output of its event 3): the
// window opens there; the screen's pixels of rank 2's strip cell and of that row are the diff
// colour, rank 0's cell is its own colour; keys step events, ranks and divergences.
TEST_F(ViewerPixelTest, RecordingEventsOpenAtTheFirstDivergenceInRed) {
  const std::string rec =
      std::string(DTSIM_SOURCE_DIR) + "/tests/fuzz/corpus/recording/seed-events";
  nlohmann::json doc = testing::ReadJson(rec);
  nlohmann::json& out = doc["events"]["2"][3]["outputs"][0];
  out["hash"] = testing::OtherHash(out["hash"].get<std::string>());
  const double sketch = out["sketch"].get<double>(), scale = out["scale"].get<double>();
  out["sketch"] = sketch > 0 ? sketch - scale / 2 : sketch + scale / 2;
  const std::string changed = testing::WriteText("events_changed.json", doc.dump());
  const Shot a = Screenshot("events0", rec + " " + changed);
  EXPECT_EQ(a.records["events"]["rank"], 2);
  EXPECT_EQ(a.records["events"]["event"], 3);
  const auto cell2 = Find(a.panel("event_ranks"), "mesh_cell", 2);
  const auto cell0 = Find(a.panel("event_ranks"), "mesh_cell", 0);
  ASSERT_EQ(cell2.size(), 1u);
  ASSERT_EQ(cell0.size(), 1u);
  EXPECT_EQ(FreeColor(a, "event_ranks", cell2[0].first), kDiffColor);
  EXPECT_EQ(FreeColor(a, "event_ranks", cell0[0].first), RankColor(0));
  size_t red_rows = 0;
  for (const auto& [i, r] : Find(a.panel("event_rows"), "tree_row")) {
    if (r["key"] != "e3") continue;
    EXPECT_EQ(FreeColor(a, "event_rows", i), kDiffColor);
    ++red_rows;
  }
  EXPECT_EQ(red_rows, 1u);
  // Up moves to event 2; minus to rank 1 (event 2 kept); F3 back to rank 2's divergence.
  const Shot b = Screenshot("events1", rec + " " + changed + " --input 'key Up; key minus'");
  EXPECT_EQ(b.records["events"]["rank"], 1);
  EXPECT_EQ(b.records["events"]["event"], 2);
  const Shot c = Screenshot("events2", rec + " " + changed + " --select-rank 0 --input 'key F3'");
  EXPECT_EQ(c.records["events"]["rank"], 2);
  EXPECT_EQ(c.records["events"]["event"], 3);
  ExpectInputError(rec + " " + changed + " --select-rank 4",
                   "dtsim-viewer: error: select-rank: rank 4 is not in the recording's 4 ranks");
  ExpectInputError(rec + " " + changed + " --step 1", "dtsim-viewer: error: step: applies to");
  ExpectInputError(rec + " " + Golden(kUneven),
                   "dtsim-viewer: error: traces: '" + rec + "' is a recording but");
}

TEST_F(ViewerPixelTest, AnInteractiveWindowRunsAndCloses) {
  // The event loop (no --screenshot): waits for events, checks the file, closes when asked.
  const RunResult r = RunViewer(Golden(kUneven) + " --close-after 2");
  EXPECT_EQ(r.code, 0) << r.err;
}

// ---- model traces (dtsim model --trace): the module tree, the rank picker, two traces ----

std::string ModelData(const std::string& name) {
  return std::string(DTSIM_SOURCE_DIR) + "/tests/viewer/data/" + name;
}
const char* kModelSim = "model_fsdp_tp_2x4_sim.json";
const char* kModelReal = "model_fsdp_tp_2x4_real_fault.json";

// The dumped row (model.rows) and its drawn rect (model_tree panel) of the row labelled `label`.
struct ModelRow {
  nlohmann::json row;
  size_t rect = 0;
  bool drawn = false;
};
ModelRow FindModelRow(const Shot& s, const std::string& label) {
  ModelRow out;
  for (const auto& r : s.records["model"]["rows"]) {
    if (r["label"] == label) out.row = r;
  }
  if (out.row.is_null()) return out;
  for (const auto& [i, rect] : Find(s.panel("model_tree"), "tree_row")) {
    if (rect["key"] == out.row["key"]) {
      out.rect = i;
      out.drawn = true;
    }
  }
  return out;
}

// The rows drawn wholly inside the tree's visible band.
std::vector<std::pair<size_t, nlohmann::json>> VisibleRows(const Shot& s) {
  std::vector<std::pair<size_t, nlohmann::json>> out;
  const auto& vp = s.panel("model_tree")["viewport"];
  for (const auto& [i, r] : Find(s.panel("model_tree"), "tree_row")) {
    if (r["y0"].get<float>() >= vp[1].get<float>() && r["y1"].get<float>() <= vp[3].get<float>())
      out.push_back({i, r});
  }
  return out;
}

TEST_F(ViewerPixelTest, AModelTraceOpensAsAModuleTreeWithTheRanksValues) {
  const Shot s = Screenshot("model", ModelData(kModelSim) +
                                         " --select-rank 3 --module layers.0.attention "
                                         "--size 1400x900");
  const nlohmann::json& m = s.records["model"];
  EXPECT_EQ(m["rank"], 3);
  EXPECT_EQ(s.records["shown"], ModelData(kModelSim));
  EXPECT_EQ(m["rows"][0]["label"], "Global");
  EXPECT_GT(m["rows"].size(), 20u);
  const ModelRow attn = FindModelRow(s, "layers.0.attention (Attention)");
  ASSERT_TRUE(attn.drawn);
  EXPECT_EQ(m["selected"], attn.row["key"]);
  EXPECT_EQ(FreeColor(s, "model_tree", attn.rect), kTreeSelectedColor);
  // Its values are rank 3's hashes of its input and output in the trace.
  const nlohmann::json trace = testing::ReadJson(ModelData(kModelSim));
  std::string in, out;
  for (const auto& e : trace["events"]) {
    if (e.value("module", "") != "layers.0.attention") continue;
    if (e["event"] == "module_begin") in = e["tensor"]["hashes"][3].get<std::string>().substr(5, 8);
    if (e["event"] == "module_end") out = e["tensor"]["hashes"][3].get<std::string>().substr(5, 8);
  }
  EXPECT_EQ(attn.row["values"], "in " + in + "  out " + out);
  bool drawn = false;
  for (const auto& t : s.panel("model_tree")["texts"])
    drawn = drawn || t["text"] == attn.row["values"];
  EXPECT_TRUE(drawn);
  // The details name the module and rank 3's full input hash.
  EXPECT_THAT(m["details"], ::testing::Contains("layers.0.attention (Attention)"));
  // The header says whose values.
  bool header = false;
  for (const auto& t : s.panel("model_header")["texts"])
    header = header || t["text"] == "rank 3 values";
  EXPECT_TRUE(header);
  // Other rows are not in the selection or diff colour.
  for (const auto& [i, r] : VisibleRows(s)) {
    if (r["key"] == attn.row["key"]) continue;
    const Rgba c = FreeColor(s, "model_tree", i);
    EXPECT_NE(c, kDiffColor) << r["key"];
    EXPECT_NE(c, kTreeSelectedColor) << r["key"];
  }
}

TEST_F(ViewerPixelTest, TwoModelTracesOpenAtTheFirstDifferenceInTheDiffColour) {
  const std::string pair = ModelData(kModelSim) + " " + ModelData(kModelReal) + " --size 1400x900";
  const Shot s = Screenshot("model_pair", pair);
  const nlohmann::json& m = s.records["model"];
  EXPECT_THAT(
      m["summary"].get<std::string>(),
      StartsWith("differ: first at event " + std::to_string(m["first_event"].get<int64_t>() + 1) +
                 ": forward input of layers.0.attention.wq: values differ on ranks 0, 1, "
                 "2, 3"));
  EXPECT_EQ(m["rank"], 0);
  const ModelRow wq = FindModelRow(s, "layers.0.attention.wq (Linear)");
  ASSERT_TRUE(wq.drawn);
  EXPECT_EQ(m["selected"], wq.row["key"]);
  EXPECT_TRUE(wq.row["differs"].get<bool>());
  // Every drawn row: the diff colour exactly where its values differ on rank 0.
  int red = 0, plain = 0;
  for (const auto& [i, r] : VisibleRows(s)) {
    nlohmann::json row;
    for (const auto& x : m["rows"]) {
      if (x["key"] == r["key"]) row = x;
    }
    const Rgba c = FreeColor(s, "model_tree", i);
    if (row["differs"].get<bool>()) {
      EXPECT_EQ(c, kDiffColor) << row["label"];
      ++red;
    } else {
      EXPECT_NE(c, kDiffColor) << row["label"];
      ++plain;
    }
  }
  EXPECT_GT(red, 0);
  EXPECT_GT(plain, 0);
  // F3 selects the next difference; Down moves one row.
  const Shot f3 = Screenshot("model_f3", pair + " --input 'key f3'");
  EXPECT_NE(f3.records["model"]["selected"], m["selected"]);
  const Shot down = Screenshot("model_down", pair + " --input 'key Down'");
  std::string next;
  for (size_t i = 0; i + 1 < m["rows"].size(); ++i) {
    if (m["rows"][i]["key"] == m["selected"]) next = m["rows"][i + 1]["key"];
  }
  EXPECT_EQ(down.records["model"]["selected"], next);
}

TEST_F(ViewerPixelTest, AClickOnARowsExpanderExpandsItAndSelectsIt) {
  const std::string args = ModelData(kModelSim) + " --size 1400x900";
  const Shot s = Screenshot("model_click0", args);
  const ModelRow params = FindModelRow(s, "parameters (12)");
  ASSERT_TRUE(params.drawn);
  EXPECT_FALSE(params.row["expanded"].get<bool>());
  const auto& r = s.panel("model_tree")["rects"][params.rect];
  const int x =
      static_cast<int>(r["x0"].get<float>()) + 8 + 16 * params.row["depth"].get<int>() + 3;
  const int y = static_cast<int>((r["y0"].get<float>() + r["y1"].get<float>()) / 2);
  const Shot c = Screenshot("model_click1", args + " --input 'click " + std::to_string(x) + "," +
                                                std::to_string(y) + "'");
  EXPECT_EQ(c.records["model"]["selected"], "p");
  const ModelRow after = FindModelRow(c, "parameters (12)");
  EXPECT_TRUE(after.row["expanded"].get<bool>());
  EXPECT_TRUE(FindModelRow(c, "tok_embeddings.weight  [_S(0,4), S(0)] [40, 32]").drawn);
}

TEST_F(ViewerPixelTest, A4096RankModelTraceOpens) {
  const ModelTrace big = testing::MakeModelTrace({512, 8}, {"dp", "tp"}, 2, /*data=*/false);
  const std::string path = testing::WriteText("model_4096_trace.json", ToJson(big).dump());
  const Shot s = Screenshot("model_4096", path + " --select-rank 4095");
  EXPECT_EQ(s.records["model"]["rank"], 4095);
  const ModelRow mlp = FindModelRow(s, "layers.1.mlp (MLP)");
  ASSERT_TRUE(mlp.drawn);
  EXPECT_EQ(mlp.row["forward"], "AR 1, RS 1 | 2.00 KiB");
  EXPECT_EQ(mlp.row["values"], "");  // no hashes
}

TEST_F(ViewerPixelTest, AnInteractiveWindowShowsAModelTraceAndCloses) {
  const RunResult r =
      RunViewer(ModelData(kModelSim) + " " + ModelData(kModelReal) + " --close-after 1");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(ViewerPixelTest, ABadModelTraceOpensToTheErrorScreen) {
  nlohmann::json bad = testing::ReadJson(ModelData(kModelSim));
  bad["events"][3]["t_us"] = -1;
  const std::string path = testing::WriteText("bad_model_open.json", bad.dump());
  const Shot s = Screenshot(
      "model_bad", ModelData(kModelSim) + " --input 'key ctrl+o; type " + path + "; key Enter'");
  EXPECT_THAT(s.records["error"].get<std::string>(),
              StartsWith("trace: '" + path + "': events[3].t_us: -1 is not a time"));
  EXPECT_EQ(s.records["shown"], "");
  EXPECT_FALSE(s.records.contains("model"));
}

// ---- bad input: a clear error on stderr, exit 2, no picture written (no display needed) ----

TEST(ViewerBadInputTest, BrokenTruncatedUnknownVersionAndMismatched) {
  ExpectInputError(
      testing::WriteText("broken.json", "{\"format\": \"dtsim-trace\", \"version\": 1,"),
      "dtsim-viewer: error: trace: ");
  const std::string text = testing::ReadJson(Golden(kUneven)).dump(1);
  ExpectInputError(testing::WriteText("truncated.json", text.substr(0, text.size() * 2 / 3)),
                   "dtsim-viewer: error: trace: ");
  const std::string v7 =
      EditedTrace(kUneven, "v7.json", [](nlohmann::json& j) { j["version"] = 7; });
  ExpectInputError(v7, "dtsim-viewer: error: trace: '" + v7 + "': version 7 is not supported");
  const std::string bad_hash = EditedTrace(
      kUneven, "bad_hash.json", [](nlohmann::json& j) { j["final"]["ranks"][2]["hash"] = 5; });
  ExpectInputError(bad_hash,
                   "dtsim-viewer: error: trace: '" + bad_hash +
                       "': final.ranks[2].hash: expected \"xxh3:\" and 16 hex digits, got 5");
  ExpectInputError(Golden(kUneven) + " " + Golden("nested_4x2_S0S0_to_S1S1.json"),
                   "dtsim-viewer: error: traces: '" + Golden(kUneven) + "' and '" +
                       Golden("nested_4x2_S0S0_to_S1S1.json") +
                       "' are not traces of the same redistribution: the meshes differ");
  ExpectInputError("/nonexistent/trace.json",
                   "dtsim-viewer: error: trace: cannot open '/nonexistent/trace.json'");
  ExpectInputError(Golden("traces") + "/..", "dtsim-viewer: error: trace: ");
}

TEST(ViewerBadInputTest, BadOptions) {
  ExpectInputError(Golden(kUneven) + " --step 9",
                   "dtsim-viewer: error: step: step 9 does not exist");
  ExpectInputError(Golden(kUneven) + " --select-rank 8",
                   "dtsim-viewer: error: select-rank: rank 8 is not in");
  ExpectInputError(Golden(kUneven) + " --size 10x10",
                   "dtsim-viewer: error: size: '10x10' must be WIDTHxHEIGHT");
  ExpectInputError(Golden(kUneven) + " --mesh-grid dp,dp",
                   "dtsim-viewer: error: mesh-grid: rows and columns are both");
  ExpectInputError(Golden(kUneven) + " --mesh-grid dp,pp", "dtsim-viewer: error: mesh-grid:");
  ExpectInputError(Golden(kUneven) + " --tensor-grid 0,2",
                   "dtsim-viewer: error: tensor-grid: column dim 2 is not");
  ExpectInputError(Golden(kUneven) + " --show-second",
                   "dtsim-viewer: error: show-second: needs two traces");
  ExpectInputError(Golden(kUneven) + " --mouse 5000,1",
                   "dtsim-viewer: error: mouse: '5000,1' must be X,Y inside");
  ExpectInputError(Golden(kUneven) + " --frobnicate", "dtsim-viewer: error: options: ");
  ExpectInputError("", "dtsim-viewer: error: traces: give one trace");
  ExpectInputError(Golden(kUneven) + " --bench-frames -1",
                   "dtsim-viewer: error: bench-frames: -1 must be 1..1000000");
  ExpectInputError(Golden(kUneven) + " --bench-frames 99999999999",
                   "dtsim-viewer: error: bench-frames: 99999999999 must be 1..1000000");
  ExpectInputError(Golden(kUneven) + " --close-after -5",
                   "dtsim-viewer: error: close-after: -5 must be 0..86400");
  ExpectInputError(Golden(kUneven) + " --input 'whel 1,2'",
                   "dtsim-viewer: error: input: event 1 'whel 1,2': unknown event 'whel'");
  ExpectInputError(Golden(kUneven) + " --input 'move 1,1; click 99999,1'",
                   "dtsim-viewer: error: input: event 2 'click 99999,1': the point 99999,1 is "
                   "outside the 1600x1000 picture");
  ExpectInputError(Golden(kUneven) + " --input 'key hyper+x'",
                   "dtsim-viewer: error: input: event 1 'key hyper+x': unknown modifier 'hyper'");
  ExpectInputError(Golden(kUneven) + " --input 'wheel 1,1 0'",
                   "dtsim-viewer: error: input: event 1 'wheel 1,1 0': '0' must be a number");
  ExpectInputError(Golden(kUneven) + " --goto 8", "dtsim-viewer: error: goto: rank 8 is not in");
  ExpectInputError(Golden(kUneven) + " --goto dp=1", "dtsim-viewer: error: goto: 'dp=1' gives no");
  ExpectInputError(Golden(kUneven) + " --redistribution -1",
                   "dtsim-viewer: error: redistribution: -1 must be 0 or more");
}

TEST(ViewerBadInputTest, BadModelTracesAndOptions) {
  nlohmann::json bad = testing::ReadJson(ModelData(kModelSim));
  bad["events"][3]["t_us"] = -1;
  const std::string path = testing::WriteText("bad_model.json", bad.dump());
  ExpectInputError(path,
                   "dtsim-viewer: error: trace: '" + path + "': events[3].t_us: -1 is not a time");
  nlohmann::json unnested = testing::ReadJson(ModelData(kModelSim));
  for (auto& e : unnested["events"]) {
    if (e["event"] == "module_end" && e["module"] == "layers.0") e["module"] = "norm";
  }
  const std::string unnested_path = testing::WriteText("unnested_model.json", unnested.dump());
  ExpectInputError(unnested_path, "dtsim-viewer: error: trace: '" + unnested_path + "': events[");
  ExpectInputError(ModelData(kModelSim) + " " + Golden(kUneven),
                   "dtsim-viewer: error: traces: '" + ModelData(kModelSim) +
                       "' is a model trace but '" + Golden(kUneven) + "' is not");
  const std::string other_mesh =
      testing::WriteText("model_8.json", ToJson(testing::MakeModelTrace({8}, {"tp"}, 1)).dump());
  ExpectInputError(ModelData(kModelSim) + " " + other_mesh,
                   "dtsim-viewer: error: traces: '" + ModelData(kModelSim) + "' and '" +
                       other_mesh +
                       "' are not traces of the same model run: the meshes differ: mesh[dp=2, "
                       "tp=4] vs mesh[tp=8]");
  ExpectInputError(ModelData(kModelSim) + " --step 1",
                   "dtsim-viewer: error: step: applies to redistribution traces");
  ExpectInputError(ModelData(kModelSim) + " --mesh-grid dp,tp",
                   "dtsim-viewer: error: mesh-grid: applies to redistribution traces");
  ExpectInputError(ModelData(kModelSim) + " --select-rank 8",
                   "dtsim-viewer: error: select-rank: rank 8 is not in mesh[dp=2, tp=4] (8 ranks)");
  ExpectInputError(ModelData(kModelSim) + " --goto dp=2",
                   "dtsim-viewer: error: goto: 'dp=2' gives no index for mesh dim tp");
  ExpectInputError(ModelData(kModelSim) + " --module layers.9",
                   "dtsim-viewer: error: module: no module 'layers.9' in the trace; its modules: "
                   "Global, Transformer, tok_embeddings");
  ExpectInputError(Golden(kUneven) + " --module layers.0",
                   "dtsim-viewer: error: module: needs a model trace");
}

TEST(ViewerBadInputTest, NoDisplayIsExitCode4WithAHint) {
  const std::string png = TempPath("nodisplay.png");
  const RunResult r =
      RunCommand("env -u DISPLAY -u WAYLAND_DISPLAY " + std::string(DTSIM_VIEWER_BIN) + " " +
                 Golden(kUneven) + " --screenshot " + png);
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_THAT(r.err, StartsWith("dtsim-viewer: error: display: cannot open a window"));
  EXPECT_THAT(r.err, HasSubstr("xvfb-run"));
  EXPECT_FALSE(Exists(png));
}

}  // namespace
}  // namespace dtsim::viewer
