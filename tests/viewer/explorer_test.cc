// The viewer as an explorer (issue 20), in the model layer: zoom and pan arithmetic, hit-testing
// with no dead pixel (every pixel of the mesh and tensor areas, at several sizes and zoom levels,
// 8 and 4,096 ranks), semantic zoom, go-to-rank and step search against closed forms, recent
// files and reloading a changed trace.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "dtsim/layout/error.h"
#include "dtsim/trace/formats.h"
#include "model_test_support.h"
#include "test_support.h"
#include "viewer/model/app_state.h"
#include "viewer/model/colors.h"
#include "viewer/model/find.h"
#include "viewer/model/mesh_layout.h"
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
const char* kUneven = "uneven_2x4_S0R_to_RS1.json";

const TraceModel& Big() {
  static const TraceModel m =
      Meta("16x16x16", "pp,dp,tp", {64, 64, 64}, "S(0),S(1),S(2)", "R,S(0),S(1)");
  return m;
}

// ---- zoom arithmetic ----

TEST(ZoomTest, ZoomAboutKeepsThePointUnderTheCursor) {
  Zoom z;
  ZoomAbout(z, 2, 100, 50, 400, 300);
  EXPECT_FLOAT_EQ(z.scale, 2);
  EXPECT_FLOAT_EQ(z.pan_x, 100);
  EXPECT_FLOAT_EQ(z.pan_y, 50);
  // The content point under (300, 200) before and after another zoom there: (x + pan) / scale.
  const float ux = (300 + z.pan_x) / z.scale, uy = (200 + z.pan_y) / z.scale;
  ZoomAbout(z, 1.5f, 300, 200, 400, 300);
  EXPECT_NEAR((300 + z.pan_x) / z.scale, ux, 1e-3);
  EXPECT_NEAR((200 + z.pan_y) / z.scale, uy, 1e-3);
}

TEST(ZoomTest, ClampedToTheContentAndTheScaleRange) {
  Zoom z;
  ZoomAbout(z, 0.5f, 10, 10, 400, 300);  // below 1: stays 1, no pan
  EXPECT_TRUE(z.identity());
  ZoomAbout(z, 1e9f, 0, 0, 400, 300);
  EXPECT_FLOAT_EQ(z.scale, kMaxZoom);
  z = Zoom{2, 0, 0};
  PanBy(z, 1000, -1000, 400, 300);  // content dragged right / up: pan stays within [0, w(s-1)]
  EXPECT_FLOAT_EQ(z.pan_x, 0);
  EXPECT_FLOAT_EQ(z.pan_y, 300);
  CentreOn(z, 400, 300, 400, 300);  // the content's centre at scale 2
  EXPECT_FLOAT_EQ(z.pan_x, 200);
  EXPECT_FLOAT_EQ(z.pan_y, 150);
  z = Zoom{std::nanf(""), std::nanf(""), 5};
  ClampZoom(z, 400, 300);
  EXPECT_TRUE(z.identity());
}

// ---- hit-testing: every pixel ----

// Every pixel of the viewport: inside a slice's bounds it maps to a rank, and inside a drawn cell
// to that cell's rank (what is drawn is what is hit); outside them to nothing.
void ExpectNoDeadMeshPixel(const TraceModel& m, const Rect& area, const Zoom& zoom,
                           const std::string& what) {
  ViewState v;
  const MeshLayout l =
      LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), v), area, kMetrics, zoom);
  int64_t mapped = 0, checked_cells = 0;
  for (float y = l.viewport.y0 + 0.5f; y < l.viewport.y1; y += 1) {
    for (float x = l.viewport.x0 + 0.5f; x < l.viewport.x1; x += 1) {
      bool in_bounds = false;
      for (const Rect& b : l.slice_bounds) in_bounds = in_bounds || b.Contains(x, y);
      const std::optional<int64_t> hit = l.RankAt(x, y);
      ASSERT_EQ(hit.has_value(), in_bounds) << what << " at " << x << "," << y;
      if (!hit) continue;
      ++mapped;
      if (auto drawn = HitTest(l.draw, x, y, Role::kMeshCell)) {
        ASSERT_EQ(*hit, l.draw.rects[*drawn].rank) << what << " at " << x << "," << y;
        ++checked_cells;
      }
    }
  }
  EXPECT_GT(mapped, 0) << what;
  EXPECT_GT(checked_cells, 0) << what;
}

TEST(HitTestTest, EveryMeshPixelMapsToTheNearestCell8Ranks) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  for (const Rect& area : {Rect{0, 0, 400, 240}, Rect{0, 0, 637, 560}, Rect{0, 0, 250, 180}}) {
    ExpectNoDeadMeshPixel(m, area, Zoom{}, "8 ranks");
    Zoom z;
    ZoomAbout(z, 3.3f, area.width() / 3, area.height() / 2, area.width(),
              area.height() - kMetrics.line_height - 4);
    ExpectNoDeadMeshPixel(m, area, z, "8 ranks zoomed");
  }
}

TEST(HitTestTest, EveryMeshPixelMapsToTheNearestCell4096Ranks) {
  // The default 1600x1000 window's mesh panel, and a small window's.
  for (const Rect& area : {Rect{0, 0, 628, 560}, Rect{0, 0, 384, 330}}) {
    ExpectNoDeadMeshPixel(Big(), area, Zoom{}, "4096 ranks");
    Zoom z;
    ZoomAbout(z, 12, 200, 150, area.width(), area.height() - kMetrics.line_height - 4);
    ExpectNoDeadMeshPixel(Big(), area, z, "4096 ranks zoomed");
  }
}

TEST(HitTestTest, APixelBetweenTwoCellsBelongsToOneOfThem) {
  // 4,096 ranks at the default size: the slice gap between the cell of rank 15 (pp=0, tp=15) and
  // the first cell of the next slice.
  const TraceModel& m = Big();
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 628, 560}, kMetrics);
  const Rect& a = l.cells[m.GetPosition(15)];
  const float y = (a.y0 + a.y1) / 2;
  EXPECT_EQ(l.RankAt(a.x1 + 0.5f, y), 15);      // one pixel beside it, in the gap
  const Rect& b = l.cells[m.GetPosition(256)];  // pp=1: the next slice, to the right
  ASSERT_GT(b.x0, a.x1);
  EXPECT_EQ(l.RankAt(b.x0 - 0.5f, (b.y0 + b.y1) / 2), 256);
}

void ExpectNoDeadTensorPixel(const TraceModel& m, int64_t frame, const Rect& area, const Zoom& zoom,
                             const std::string& what) {
  ViewState v;
  v.frame = frame;
  const TensorLayout l =
      LayoutTensor(m, m.frame(frame), NoHighlight(m, frame),
                   ResolveTensorView(m.frame(frame).spec, v), area, kMetrics, zoom);
  int64_t mapped = 0;
  for (float y = l.viewport.y0 + 0.5f; y < l.viewport.y1; y += 1) {
    for (float x = l.viewport.x0 + 0.5f; x < l.viewport.x1; x += 1) {
      const std::optional<size_t> hit = l.BlockAt(x, y);
      if (l.tensor.Contains(x, y)) {
        ASSERT_TRUE(hit.has_value()) << what << " at " << x << "," << y;
      }
      if (!hit) continue;
      ++mapped;
      // Inside a drawn block: that block; and the owner is the one drawn under the point.
      if (auto drawn = HitTest(l.draw, x, y, Role::kTensorBlock)) {
        ASSERT_EQ(*hit, static_cast<size_t>(l.draw.rects[*drawn].block)) << what;
      }
      if (auto owner = HitTest(l.draw, x, y, Role::kTensorOwner)) {
        ASSERT_EQ(l.OwnerAt(*hit, x, y), l.draw.rects[*owner].rank) << what;
      }
    }
  }
  EXPECT_GT(mapped, 0) << what;
}

TEST(HitTestTest, EveryTensorPixelMapsToTheNearestBlock) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  for (int64_t f = 0; f < m.num_frames(); ++f) {
    for (const Rect& area : {Rect{0, 0, 600, 400}, Rect{0, 0, 300, 200}}) {
      ExpectNoDeadTensorPixel(m, f, area, Zoom{}, "uneven frame " + std::to_string(f));
      ExpectNoDeadTensorPixel(m, f, area, Zoom{4, 300, 100},
                              "uneven zoomed frame " + std::to_string(f));
    }
  }
  ExpectNoDeadTensorPixel(Big(), 0, Rect{0, 0, 900, 560}, Zoom{}, "4096 ranks");
  ExpectNoDeadTensorPixel(Big(), 0, Rect{0, 0, 900, 560}, Zoom{6, 1000, 800}, "4096 zoomed");
}

// ---- zoom in the layouts ----

TEST(MeshZoomTest, TheRankUnderTheCursorStaysUnderIt) {
  const TraceModel& m = Big();
  const Rect area{0, 0, 628, 560};
  const MeshGrid grid = ResolveMeshGrid(m.mesh(), {});
  Zoom z;
  const MeshLayout before = LayoutMesh(m, m.frame(0), NoHighlight(m), grid, area, kMetrics, z);
  // Points at different places in three cells across the mesh.
  std::vector<std::pair<float, float>> points;
  for (const auto& [r, fx, fy] :
       {std::tuple<int64_t, float, float>{0, 0.1f, 0.9f}, {1380, 0.5f, 0.5f}, {4095, 0.9f, 0.2f}}) {
    const Rect& c = before.cells[m.GetPosition(r)];
    points.push_back(
        {std::floor(c.x0 + fx * c.width()) + 0.5f, std::floor(c.y0 + fy * c.height()) + 0.5f});
  }
  for (const auto& [x, y] : points) {
    const std::optional<int64_t> rank = before.RankAt(x, y);
    ASSERT_TRUE(rank.has_value());
    const Zoom zz = ZoomMeshAbout(m, m.frame(0), NoHighlight(m), grid, area, kMetrics, z, 8, x, y);
    const MeshLayout after = LayoutMesh(m, m.frame(0), NoHighlight(m), grid, area, kMetrics, zz);
    // The same cell is under the cursor, at the same relative place (to a pixel).
    EXPECT_EQ(after.RankAt(x, y), rank) << x << "," << y;
    const Rect& a = before.cells[m.GetPosition(*rank)];
    const Rect& c = after.cells[m.GetPosition(*rank)];
    EXPECT_NEAR((x - c.x0) / c.width(), (x - a.x0) / a.width(), 1.0 / c.width() + 1e-4);
    EXPECT_NEAR((y - c.y0) / c.height(), (y - a.y0) / a.height(), 1.0 / c.height() + 1e-4);
    EXPECT_GE(after.pitch, 7 * before.pitch);
  }
}

TEST(MeshZoomTest, SemanticZoomShowsNumbersThenCoordinatesThenShapes) {
  const TraceModel& m = Big();
  const Rect area{0, 0, 628, 560};
  const MeshGrid grid = ResolveMeshGrid(m.mesh(), {});
  auto labels = [&](float scale) {
    Zoom z{scale, 0, 0};
    const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), grid, area, kMetrics, z);
    std::vector<std::string> out;
    for (const DrawText& t : l.draw.texts) {
      if (t.role == Role::kMeshCell) out.push_back(t.text);
    }
    // Only visible cells are drawn.
    int64_t cells = 0;
    for (const DrawRect& r : l.draw.rects) cells += r.role == Role::kMeshCell;
    EXPECT_LE(cells, scale == 1 ? 4096 : 4096 / 4);
    return out;
  };
  EXPECT_TRUE(labels(1).empty());  // 4 px cells: no room
  const std::vector<std::string> numbers = labels(6);
  ASSERT_FALSE(numbers.empty());
  EXPECT_EQ(numbers.front(), "0");
  const std::vector<std::string> detailed = labels(40);
  // Rank 0 at the top-left corner: its number, coordinate and local shape ([4, 4, 4] for S(0),
  // S(1), S(2) of 64^3 over 16^3).
  EXPECT_THAT(detailed, ::testing::IsSupersetOf({"0", "pp=0 dp=0 tp=0", "local [4, 4, 4]"}));
}

TEST(MeshZoomTest, ZoomedRecordsLieInTheViewportAndAreMarked) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 400, 240}, kMetrics, Zoom{3, 250, 100});
  ASSERT_FALSE(l.draw.texts.empty());
  EXPECT_FALSE(l.draw.texts[0].zoomed);  // the header stays
  for (const DrawRect& r : l.draw.rects) {
    EXPECT_TRUE(r.zoomed);
    EXPECT_TRUE(r.rect.Intersects(
        Rect{l.viewport.x0 - 4, l.viewport.y0 - 4, l.viewport.x1 + 4, l.viewport.y1 + 4}));
  }
}

TEST(TensorZoomTest, TicksStayAtTheEdgesWhileBlocksMove) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  ViewState v;
  const TensorView tv = ResolveTensorView(m.frame(0).spec, v);
  const TensorLayout fit =
      LayoutTensor(m, m.frame(0), NoHighlight(m), tv, Rect{0, 0, 600, 400}, kMetrics);
  const TensorLayout zoomed = LayoutTensor(m, m.frame(0), NoHighlight(m), tv, Rect{0, 0, 600, 400},
                                           kMetrics, Zoom{2, 100, 50});
  EXPECT_EQ(zoomed.viewport.x0, fit.viewport.x0);
  EXPECT_FLOAT_EQ(zoomed.tensor.width(), 2 * fit.tensor.width());
  EXPECT_FLOAT_EQ(zoomed.tensor.x0, fit.tensor.x0 - 100);
  for (const DrawLine& l : zoomed.draw.lines) {
    if (l.role != Role::kDecoration) continue;
    // Column ticks end at the viewport's top, row ticks at its left edge.
    EXPECT_TRUE(l.y1 == zoomed.viewport.y0 || l.x1 == zoomed.viewport.x0);
  }
}

// ---- find ----

TEST(FindTest, ARankByNumberOrCoordinate) {
  const TraceModel& m = Big();
  // Closed form: mesh[pp=16, dp=16, tp=16] in rank order: rank = pp * 256 + dp * 16 + tp.
  EXPECT_EQ(ParseRankQuery(m, "1380"), 1380);
  EXPECT_EQ(ParseRankQuery(m, "5,6,4"), 5 * 256 + 6 * 16 + 4);
  EXPECT_EQ(ParseRankQuery(m, " (5, 6, 4) "), 1380);
  EXPECT_EQ(ParseRankQuery(m, "[5 6 4]"), 1380);
  EXPECT_EQ(ParseRankQuery(m, "tp=4 dp=6 pp=5"), 1380);
  EXPECT_EQ(ParseRankQuery(m, "pp = 5, dp = 6, tp = 4"), 1380);
  auto error = [&](const std::string& q) {
    try {
      ParseRankQuery(m, q);
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "go to");
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error("4096"), HasSubstr("rank 4096 is not in mesh[pp=16, dp=16, tp=16]"));
  EXPECT_THAT(error("5,6"), HasSubstr("has 2 coordinates; mesh[pp=16, dp=16, tp=16] has 3 dims"));
  EXPECT_THAT(error("5,6,16"), HasSubstr("index 16 is outside mesh dim tp of size 16"));
  EXPECT_THAT(error("pp=1 dp=2"), HasSubstr("gives no index for mesh dim tp"));
  EXPECT_THAT(error("xx=1 dp=2 tp=3"), HasSubstr("no mesh dim 'xx'"));
  EXPECT_THAT(error("-3"), HasSubstr("is not a rank number"));
  EXPECT_THAT(error(""), HasSubstr("type a rank number"));
}

TEST(FindTest, ARankOfAMeshInAnotherRankOrder) {
  // The trace's mesh lists its ranks in another order: the coordinate names the rank there.
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  for (int64_t p = 0; p < m.world_size(); ++p) {
    const std::vector<int64_t> c = m.CoordinateAt(p);
    EXPECT_EQ(ParseRankQuery(m, std::to_string(c[0]) + "," + std::to_string(c[1])), m.RankAt(p));
  }
}

TEST(FindTest, StepsByCollectiveMeshDimOrPlacement) {
  const TraceModel& m = Big();  // steps: 1 all_gather tp, 2 all_gather dp, 3 all_gather pp,
                                // 4 local_split dp, 5 local_split tp (frames 1..5)
  std::vector<std::string> labels;
  for (int64_t f = 1; f <= 5; ++f) labels.push_back(FrameBoxLabel(m, f));
  ASSERT_THAT(labels, ElementsAre("1 all_gather tp", "2 all_gather dp", "3 all_gather pp",
                                  "4 local_split dp", "5 local_split tp"));
  EXPECT_THAT(FindSteps(m, "all_gather"), ElementsAre(1, 2, 3));
  EXPECT_THAT(FindSteps(m, "ALL_G"), ElementsAre(1, 2, 3));
  EXPECT_THAT(FindSteps(m, "tp"), ElementsAre(1, 5));
  EXPECT_THAT(FindSteps(m, "all_gather dp"), ElementsAre(2));
  EXPECT_THAT(FindSteps(m, "dim 2"), ElementsAre(1, 5));
  EXPECT_THAT(FindSteps(m, "s(2)"), ElementsAre(1));
  EXPECT_TRUE(FindSteps(m, "reduce_scatter").empty());
  EXPECT_TRUE(FindSteps(m, "  ").empty());
}

// ---- names of unnamed mesh dims ----

TEST(DimNameTest, UnnamedDimsAreSpelledOut) {
  const TraceModel m = Meta("5x16", "", {10, 32}, "S(0),S(1)", "R,R");
  const MeshLayout l = LayoutMesh(m, m.frame(0), NoHighlight(m), ResolveMeshGrid(m.mesh(), {}),
                                  Rect{0, 0, 600, 300}, kMetrics);
  EXPECT_EQ(l.draw.texts[0].text, "rows dim 0 = 5  cols dim 1 = 16");
  EXPECT_EQ(DimName(m.mesh(), 1), "dim 1");
  EXPECT_EQ(FrameBoxLabel(m, 1).substr(FrameBoxLabel(m, 1).size() - 5), "dim 1");
  const TraceModel named = Meta("2x4", "dp,tp", {4, 4}, "S(0),R", "R,R");
  EXPECT_EQ(DimIs(named.mesh(), 0, 2), "dp=2");
}

// ---- recent files, reload ----

TEST(RecentFilesTest, MostRecentFirstWithoutDuplicatesAndBounded) {
  App app;
  for (int i = 0; i < 20; ++i) RememberRecent(app, {"/t/" + std::to_string(i) + ".json"});
  RememberRecent(app, {"/t/3.json"});
  ASSERT_EQ(app.recent.size(), kMaxRecent);
  EXPECT_EQ(app.recent[0], "/t/3.json");
  EXPECT_EQ(app.recent[1], "/t/19.json");
  EXPECT_EQ(std::count(app.recent.begin(), app.recent.end(), "/t/3.json"), 1);
  RememberRecent(app, {"rel/x.json"});  // stored absolute
  EXPECT_EQ(app.recent[0], (std::filesystem::current_path() / "rel/x.json").string());
  const std::string path = testing::TempPath("state/dtsim/viewer-recent.txt");
  ASSERT_TRUE(WriteRecentFiles(path, app.recent));
  EXPECT_EQ(ReadRecentFiles(path), app.recent);
  // Unreadable, special or missing files are an empty list, never a hang or a huge read.
  EXPECT_TRUE(ReadRecentFiles("/dev/zero").empty());
  EXPECT_TRUE(ReadRecentFiles(testing::TempPath("missing.txt")).empty());
  EXPECT_TRUE(ReadRecentFiles("").empty());
}

TEST(RecentFilesTest, PathFromXdgStateHome) {
  const char* old = std::getenv("XDG_STATE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_STATE_HOME", "/some/state", 1);
  EXPECT_EQ(RecentFilesPath(), "/some/state/dtsim/viewer-recent.txt");
  setenv("XDG_STATE_HOME", "relative", 1);  // not absolute: ignored (the spec says so)
  EXPECT_NE(RecentFilesPath(), "relative/dtsim/viewer-recent.txt");
  if (old) {
    setenv("XDG_STATE_HOME", saved.c_str(), 1);
  } else {
    unsetenv("XDG_STATE_HOME");
  }
}

TEST(ReloadTest, AChangedTraceIsReloadedKeepingTheView) {
  const std::string path = testing::TempPath("reload.json");
  std::filesystem::copy_file(Golden(kUneven), path,
                             std::filesystem::copy_options::overwrite_existing);
  App app;
  LoadTraces(app, {path});
  ASSERT_TRUE(app.loaded());
  app.view.frame = 2;
  app.view.selected_rank = 5;
  app.view.mesh_zoom = Zoom{2, 10, 10};
  EXPECT_FALSE(TracesChanged(app));
  // Rewritten by a new run (another file renamed over it).
  const std::string fresh = testing::TempPath("reload.new");
  std::filesystem::copy_file(Golden(kUneven), fresh,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(fresh, path);
  EXPECT_TRUE(TracesChanged(app));
  ReloadTraces(app);
  ASSERT_TRUE(app.loaded());
  EXPECT_FALSE(TracesChanged(app));
  EXPECT_EQ(app.view.frame, 2);
  EXPECT_EQ(app.view.selected_rank, 5);
  EXPECT_FLOAT_EQ(app.view.mesh_zoom.scale, 2);
  // Replaced by a trace of another mesh: the view starts afresh.
  std::filesystem::copy_file(Golden("nested_4x2_S0S0_to_S1S1.json"), fresh,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(fresh, path);
  ReloadTraces(app);
  ASSERT_TRUE(app.loaded());
  EXPECT_EQ(app.view.frame, 0);
  EXPECT_EQ(app.view.selected_rank, -1);
  EXPECT_TRUE(app.view.mesh_zoom.identity());
  // Broken: the error screen, no crash.
  std::ofstream(path) << "{";
  ReloadTraces(app);
  EXPECT_FALSE(app.loaded());
  EXPECT_THAT(app.error, HasSubstr("trace: "));
}

// ---- recordings (dtsim.record) ----

TEST(RecordingViewTest, EachRecordedRedistributionIsATraceWithTheRecordedRows) {
  const std::string path =
      std::string(DTSIM_SOURCE_DIR) + "/tests/fuzz/corpus/recording/seed-local-mlp";
  const nlohmann::json doc = testing::ReadJson(path);
  App app;
  LoadTraces(app, {path});
  ASSERT_TRUE(app.loaded()) << app.error;
  ASSERT_EQ(app.recording.size(), doc["redistributions"].size());
  for (size_t i = 0; i < app.recording.size(); ++i) {
    ShowRecorded(app, static_cast<int64_t>(i));
    const nlohmann::json& r = doc["redistributions"][i];
    const TraceModel& m = app.shown();
    EXPECT_EQ(m.trace().meta.backend, doc["meta"]["backend"]);
    EXPECT_EQ(ToString(m.frame(0).spec.placements()), r["src"]["placements"]);
    EXPECT_EQ(ToString(m.frame(m.num_frames() - 1).spec.placements()), r["dst"]["placements"]);
    // Every rank's recorded local shape and hash, before and after.
    for (const auto& [state, key] : {std::pair{&m.trace().initial, "ranks_before"},
                                     std::pair{&m.trace().final_state, "ranks_after"}}) {
      ASSERT_EQ(state->ranks.size(), r[key].size());
      for (size_t k = 0; k < state->ranks.size(); ++k) {
        EXPECT_EQ(state->ranks[k].rank, r[key][k]["rank"]);
        EXPECT_EQ(state->ranks[k].local_shape,
                  r[key][k]["local_shape"].get<std::vector<int64_t>>());
        EXPECT_EQ(*state->ranks[k].hash, r[key][k]["hash"]);
      }
    }
    // The recorded collectives on the steps that communicate: groups and bytes as recorded.
    size_t k = 0;
    for (const TraceStep& step : m.trace().steps) {
      if (!step.plan.communicates()) continue;
      ASSERT_LT(k, r["collectives"].size());
      ASSERT_EQ(step.collectives.size(), 1u);
      const nlohmann::json& c = r["collectives"][k++];
      EXPECT_EQ(step.collectives[0].groups, c["groups"].get<std::vector<std::vector<int64_t>>>());
      EXPECT_EQ(step.collectives[0].bytes_sent, c["input_bytes"].get<std::vector<int64_t>>());
      EXPECT_EQ(step.collectives[0].bytes_received, c["output_bytes"].get<std::vector<int64_t>>());
    }
    EXPECT_EQ(k, r["collectives"].size());
    EXPECT_EQ(app.recording[i].collectives_note, "");
    EXPECT_THAT(app.recording[i].title, HasSubstr(r["call"].get<std::string>()));
  }
  EXPECT_THROW(ShowRecorded(app, 3), InputError);
  // A recording goes only with another recording, and a pair compares events, which this one
  // did not record.
  LoadTraces(app, {path, Golden(kUneven)});
  EXPECT_FALSE(app.opened());
  EXPECT_THAT(app.error, HasSubstr("is a recording but"));
  EXPECT_THAT(app.error, HasSubstr("is not (format \"dtsim-trace\")"));
  LoadTraces(app, {path, path});
  EXPECT_FALSE(app.opened());
  EXPECT_THAT(app.error, HasSubstr("recorded no events (ops and collectives)"));
  // A truncated recording is an error screen, not a crash.
  LoadTraces(app, {std::string(DTSIM_SOURCE_DIR) +
                   "/tests/fuzz/corpus/recording/seed-local-mlp-truncated"});
  EXPECT_FALSE(app.loaded());
  EXPECT_THAT(app.error, HasSubstr("recording"));
}

// ---- run events (dtsim record, dtsim run --trace, dtsim import-fr) ----

// The rank strip's fill of each rank.
std::map<int64_t, Rgba> StripFills(const EventsSession& s) {
  std::map<int64_t, Rgba> fills;
  for (const DrawRect& r : LayoutRankStrip(s, 400, 30, TextMetrics{}).rects)
    if (r.role == Role::kMeshCell) fills[r.rank] = r.fill;
  return fills;
}

// Two recordings whose events part where the test planted it (rank 2's output of its event 3,
// hash and sketch changed): the window opens there, rank 2 red in the strip, its event 3 the red
// row, and the details say the op computed another result from equal inputs; every other rank
// and row is not red.
TEST(EventsViewTest, TwoRecordingsOpenAtThePlantedDivergenceRedInEveryPanel) {
  const std::string path =
      std::string(DTSIM_SOURCE_DIR) + "/tests/fuzz/corpus/recording/seed-events";
  nlohmann::json doc = testing::ReadJson(path);
  const int64_t rank = 2, event = 3;
  nlohmann::json& out = doc["events"][std::to_string(rank)][event]["outputs"][0];
  out["hash"] = testing::OtherHash(out["hash"].get<std::string>());
  // Half the scale away (within it, as the reader requires): far past float32's tolerance.
  const double sketch = out["sketch"].get<double>(), scale = out["scale"].get<double>();
  out["sketch"] = sketch > 0 ? sketch - scale / 2 : sketch + scale / 2;
  const std::string changed = testing::WriteText("events-changed.json", doc.dump());

  App app;
  LoadTraces(app, {path, changed});
  ASSERT_TRUE(app.events_loaded()) << app.error;
  EXPECT_FALSE(app.loaded());
  const EventsSession& s = *app.events;
  EXPECT_EQ(s.view.rank, rank);
  EXPECT_EQ(s.view.event, event);
  EXPECT_THAT(RanksThatDiverge(s), ElementsAre(rank));
  EXPECT_THAT(s.summary, HasSubstr("recordings differ; first at rank 2, event 3"));
  const std::map<int64_t, Rgba> fills = StripFills(s);
  ASSERT_EQ(fills.size(), 4u);
  for (const auto& [r, fill] : fills) EXPECT_EQ(fill == kDiffColor, r == rank) << r;
  const std::vector<EventRow> rows = EventRows(s);
  ASSERT_EQ(rows.size(), doc["events"]["2"].size());
  for (const EventRow& row : rows) {
    EXPECT_EQ(row.differs, row.index == event) << row.index;
    const std::string op = doc["events"]["2"][row.index]["op"].get<std::string>();
    EXPECT_EQ(row.op.substr(0, op.size()), op);  // a collective's group follows its kind
  }
  const DrawList list = LayoutEventRows(rows, s.view.event, true, 900, 20, 0, 1000, TextMetrics{});
  for (const DrawRect& r : list.rects)
    EXPECT_EQ(r.fill == kDiffColor, r.key == StrCat("e", event)) << r.key;
  bool said = false;
  for (const DetailLine& line : EventDetails(s))
    if (line.differs)
      said |= line.text.find("computed another result from equal inputs") != std::string::npos;
  EXPECT_TRUE(said);
  // Another rank's list has no red row; stepping to the next divergence comes back to rank 2.
  SelectEventsRank(*app.events, 0);
  for (const EventRow& row : EventRows(*app.events)) EXPECT_FALSE(row.differs || row.after);
  EXPECT_TRUE(SelectNextDivergence(*app.events, 1));
  EXPECT_EQ(app.events->view.rank, rank);
  EXPECT_EQ(app.events->view.event, event);
  EXPECT_THROW(SelectEventsRank(*app.events, 4), InputError);

  // The same file twice: no divergence, no red.
  LoadTraces(app, {path, path});
  ASSERT_TRUE(app.events_loaded()) << app.error;
  EXPECT_TRUE(app.events->divergences.empty());
  EXPECT_THAT(app.events->summary, HasSubstr("recordings agree: 16 events"));
  for (const auto& [r, fill] : StripFills(*app.events)) EXPECT_NE(fill, kDiffColor) << r;

  // Recordings of different world sizes are refused, naming both.
  doc["meta"]["world_size"] = 8;
  const std::string wider = testing::WriteText("events-wider.json", doc.dump());
  LoadTraces(app, {path, wider});
  EXPECT_FALSE(app.opened());
  EXPECT_THAT(app.error, HasSubstr("are not recordings of the same job: 4 ranks vs 8"));
}

// A Flight Recorder import alone: every rank's collective sequence, each rank's first collective
// that the dump shows issued but never completed red (read from the file's states here).
TEST(EventsViewTest, FlightRecorderImportShowsEachRanksStuckCollective) {
  const std::string path =
      std::string(DTSIM_SOURCE_DIR) + "/tests/fuzz/corpus/recording/seed-flight-recorder";
  const nlohmann::json doc = testing::ReadJson(path);
  std::map<int64_t, int64_t> stuck;  // rank -> its first event not completed
  for (const auto& [key, events] : doc["events"].items()) {
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].value("state", "completed") != "completed") {
        stuck[std::stoll(key)] = static_cast<int64_t>(i);
        break;
      }
    }
  }
  ASSERT_FALSE(stuck.empty());
  App app;
  LoadTraces(app, {path});
  ASSERT_TRUE(app.events_loaded()) << app.error;
  const EventsSession& s = *app.events;
  EXPECT_TRUE(s.collectives_only);
  std::vector<int64_t> ranks;
  for (const auto& [r, i] : stuck) ranks.push_back(r);
  EXPECT_EQ(RanksThatDiverge(s), ranks);
  EXPECT_EQ(s.view.rank, stuck.begin()->first);
  EXPECT_EQ(s.view.event, stuck.begin()->second);
  for (const auto& [r, fill] : StripFills(s)) EXPECT_EQ(fill == kDiffColor, stuck.count(r) == 1);
  for (const auto& [r, i] : stuck) {
    SelectEventsRank(*app.events, r);
    const std::vector<EventRow> rows = EventRows(*app.events);
    for (const EventRow& row : rows) EXPECT_EQ(row.differs, row.index == i) << r;
    EXPECT_EQ(rows[i].placements, doc["events"][std::to_string(r)][i]["state"]);
  }
  EXPECT_THAT(s.summary, HasSubstr("stuck: first at rank"));
}

// Every trace format dtsim writes (the drivers' table) is one the viewer draws, except the op
// trace, which it refuses naming the format and what to open instead.
TEST(ExplorerTest, OpensEveryTraceFormatOrRefusesItByName) {
  const std::vector<std::string> drawn = ViewerFormats();
  for (const TraceFormatDriver& d : TraceFormatDrivers()) {
    const bool is_drawn = std::find(drawn.begin(), drawn.end(), d.format) != drawn.end();
    EXPECT_EQ(is_drawn, std::string(d.format) != kOpTraceFormat) << d.format;
  }
  App app;
  LoadTraces(app, {std::string(DTSIM_SOURCE_DIR) + "/tests/fuzz/corpus/trace/seed-op-add-2x2"});
  EXPECT_FALSE(app.loaded());
  EXPECT_THAT(app.error, HasSubstr("format is \"dtsim-op-trace\""));
  EXPECT_THAT(app.error, HasSubstr("each of its redistributions[k].trace is a dtsim trace"));
}

}  // namespace
}  // namespace dtsim::viewer
