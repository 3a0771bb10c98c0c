// The viewer's trace model: frames, the index per rank, parsing --step, loading errors, comparing
// two traces.
#include "viewer/model/trace_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtsim/layout/error.h"
#include "test_support.h"
#include "viewer/model/app_state.h"
#include "viewer/model/rank_details.h"
#include "viewer/model/view_state.h"
#include "viewer/tools/meta_trace.h"

namespace dtsim::viewer {
namespace {

using testing::EditedTrace;
using ::testing::ElementsAre;
using testing::Golden;
using ::testing::HasSubstr;
using testing::OtherHash;
using ::testing::StartsWith;
using testing::WriteText;

// traces/uneven_2x4_S0R_to_RS1.json: mesh[dp=2, tp=4], shape [5, 10], [S(0), R] -> [R, S(1)] with
// the greedy plan: step 1 tp R -> S(1) (local_split), step 2 dp S(0) -> R (all_gather).
const char* kUneven = "uneven_2x4_S0R_to_RS1.json";

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TraceModelTest, FramesAreInitialEachStepAndFinal) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  ASSERT_EQ(m.num_frames(), 4);
  EXPECT_EQ(m.frame(0).kind, Frame::Kind::kInitial);
  EXPECT_EQ(m.frame(1).kind, Frame::Kind::kAfterStep);
  EXPECT_EQ(m.frame(2).step, 1);
  EXPECT_EQ(m.frame(3).kind, Frame::Kind::kFinal);
  EXPECT_EQ(m.frame(0).label, "initial");
  EXPECT_EQ(m.frame(2).label, "step 2");
  EXPECT_EQ(m.frame(2).title, "step 2: dp(0) S(0) -> R  all_gather");
  EXPECT_EQ(ToString(m.frame(1).spec.placements()), "[S(0), S(1)]");
  EXPECT_EQ(m.world_size(), 8);
  EXPECT_TRUE(m.has_hashes());
  EXPECT_FALSE(m.measured());
}

TEST(TraceModelTest, LayoutsFollowTheChunkRule) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  // Final [R, S(1)]: 10 columns over tp=4 in chunks of 3 -> 0:3, 3:6, 6:9, 9:10; rows whole.
  const RankLayout& r3 = m.frame(3).layouts[m.GetPosition(3)];
  ASSERT_EQ(r3.intervals.size(), 2u);
  EXPECT_THAT(r3.intervals[0], ElementsAre(Interval{0, 5}));
  EXPECT_THAT(r3.intervals[1], ElementsAre(Interval{9, 10}));
  // Initial [S(0), R]: 5 rows over dp=2 in chunks of 3 -> rank 4 (dp=1) holds rows 3:5.
  const RankLayout& r4 = m.frame(0).layouts[m.GetPosition(4)];
  EXPECT_THAT(r4.intervals[0], ElementsAre(Interval{3, 5}));
  EXPECT_THAT(m.CoordinateAt(m.GetPosition(6)), ElementsAre(1, 2));
  EXPECT_EQ(m.frame(3).num_anomalies, 0);
}

TEST(TraceModelTest, StepBytesAndGroupsPerRank) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  const Frame& f = m.frame(2);  // all_gather over dp of the [S(0), S(1)] shards
  EXPECT_TRUE(f.bytes_observed);
  // Every rank sends its chunk padded to 3 rows: 3x3 float32 = 36 bytes; tp=3 holds one column: 3x1
  // = 12 bytes.
  for (int64_t r = 0; r < 8; ++r)
    EXPECT_EQ(f.bytes_sent[m.GetPosition(r)], r % 4 == 3 ? 12 : 36) << "rank " << r;
  // The frame reflects the trace's collective rows (read here without the model).
  const nlohmann::json rows = testing::ReadJson(Golden(kUneven))["steps"][1]["collectives"][0];
  for (size_t i = 0; i < rows["ranks"].size(); ++i) {
    const int64_t rank = rows["ranks"][i];
    EXPECT_EQ(f.bytes_received[m.GetPosition(rank)], rows["bytes_received"][i].get<int64_t>());
  }
  ASSERT_GE(f.group_of[m.GetPosition(3)], 0);
  EXPECT_THAT(f.groups[f.group_of[m.GetPosition(3)]], ElementsAre(3, 7));
  // The local split moves nothing; its frame has no groups.
  EXPECT_EQ(m.frame(1).bytes_sent[0], 0);
  EXPECT_TRUE(m.frame(1).groups.empty());
}

TEST(TraceModelTest, ParseFrame) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  EXPECT_EQ(m.ParseFrame("0"), 0);
  EXPECT_EQ(m.ParseFrame("initial"), 0);
  EXPECT_EQ(m.ParseFrame("2"), 2);
  EXPECT_EQ(m.ParseFrame("3"), 3);
  EXPECT_EQ(m.ParseFrame("final"), 3);
  EXPECT_EQ(ErrorOf([&] { m.ParseFrame("4"); }),
            "step: step 4 does not exist: the trace has 2 steps (0 = initial, 1..2 = after that "
            "step, 3 = final)");
  EXPECT_THAT(ErrorOf([&] { m.ParseFrame("two"); }),
              StartsWith("step: 'two' is not a step number"));
  EXPECT_THAT(ErrorOf([&] { m.ParseFrame("-1"); }), HasSubstr("step -1 does not exist"));
  EXPECT_EQ(ErrorOf([&] { m.GetPosition(8, "select-rank"); }),
            "select-rank: rank 8 is not in mesh[dp=2, tp=4] (8 ranks)");
}

TEST(TraceModelTest, RowsThatDisagreeWithTheLayoutRuleAreAnomalies) {
  // A real run's trace may disagree with the layout (a simulated one is refused by the reader).
  const std::string path = EditedTrace(kUneven, "anomaly.json", [](nlohmann::json& j) {
    j["meta"]["backend"] = "mpi";
    j["final"]["ranks"][3]["local_shape"] = {5, 2};
  });
  const TraceModel m = TraceModel::Load(path);
  EXPECT_EQ(m.frame(3).num_anomalies, 1);
  EXPECT_EQ(m.frame(3).anomalies[m.GetPosition(3)], 1);
  const std::vector<std::string> details = RankDetails(m, 3, m.GetPosition(3));
  EXPECT_THAT(details, ::testing::Contains(HasSubstr(
                           "the trace disagrees with the layout rule: it says local shape "
                           "[5, 2] offset [0, 9], the rule gives [5, 1] offset [0, 9]")));
}

TEST(TraceModelTest, MetadataOnlyAndMeasuredTraces) {
  const DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create({2, 2, 4}, {"pp", "dp", "tp"}),
                                               ParsePlacements("S(0),S(1),S(2)"), {8, 8, 8});
  MetaTraceOptions options;
  options.measured = true;
  const TraceModel m = TraceModel::FromTrace(
      TraceFromJson(ToJson(MakeMetaTrace(spec, ParsePlacements("R,S(0),S(1)"), options))));
  EXPECT_FALSE(m.has_hashes());
  EXPECT_TRUE(m.measured());
  EXPECT_EQ(m.num_frames(), static_cast<int64_t>(m.trace().steps.size()) + 2);
  for (const Frame& f : m.frames()) EXPECT_EQ(f.num_anomalies, 0) << f.label;
  const Frame& f = m.frame(1);
  ASSERT_EQ(f.kind, Frame::Kind::kAfterStep);
  ASSERT_EQ(f.time_us.size(), 16u);
  for (int64_t r = 0; r < 16; ++r) {
    EXPECT_DOUBLE_EQ(f.time_us[m.GetPosition(r)], f.est_us * (1.0 + (r % 7) / 20.0))
        << "rank " << r;
  }
  EXPECT_THAT(RankDetails(m, 1, 5),
              ::testing::Contains(HasSubstr("hash: none (metadata-only trace)")));
  EXPECT_THAT(RankDetails(m, 1, 5), ::testing::Contains(HasSubstr("us measured (estimate")));
}

TEST(TraceModelTest, RanksWithoutRowsAreStillDrawn) {
  // A trace of one real rank (not merged) holds only its own rows.
  const std::string path = EditedTrace(kUneven, "one_rank.json", [](nlohmann::json& j) {
    for (nlohmann::json* rows : {&j["initial"]["ranks"], &j["steps"][0]["ranks_after"],
                                 &j["steps"][1]["ranks_after"], &j["final"]["ranks"]}) {
      *rows = nlohmann::json::array({(*rows)[2]});
    }
  });
  const TraceModel m = TraceModel::Load(path);
  EXPECT_EQ(m.RowAt(3, 2)->rank, 2);
  EXPECT_EQ(m.RowAt(3, 5), nullptr);
  EXPECT_EQ(m.frame(3).layouts.size(), 8u);
  EXPECT_THAT(RankDetails(m, 3, 5),
              ::testing::Contains(StartsWith("no row for this rank in the trace; the layout "
                                             "rule gives local shape [5, 3]")));
}

TEST(TraceModelTest, FromSpecIsOneFrame) {
  const DTensorSpec spec =
      DTensorSpec::Create(DeviceMesh::Parse("2x4", "dp,tp"), ParsePlacements("S(0),S(1)"), {5, 10});
  const TraceModel m = TraceModel::FromSpec(spec);
  ASSERT_EQ(m.num_frames(), 1);
  EXPECT_EQ(m.frame(0).label, "layout");
  EXPECT_THAT(m.frame(0).layouts[3].intervals[1], ElementsAre(Interval{9, 10}));
}

TEST(TraceModelTest, BadFilesAreInputErrors) {
  EXPECT_THAT(ErrorOf([] { TraceModel::Load("/nonexistent/trace.json"); }),
              StartsWith("trace: cannot open '/nonexistent/trace.json': No such file"));
  const std::string broken = WriteText("broken.json", "{\"format\": \"dtsim-trace\", ");
  EXPECT_THAT(ErrorOf([&] { TraceModel::Load(broken); }), HasSubstr("is not valid JSON"));
  std::string text = testing::ReadJson(Golden(kUneven)).dump(1);
  const std::string truncated = WriteText("truncated.json", text.substr(0, text.size() / 2));
  EXPECT_THAT(ErrorOf([&] { TraceModel::Load(truncated); }), HasSubstr("is not valid JSON"));
  const std::string v2 =
      EditedTrace(kUneven, "v2.json", [](nlohmann::json& j) { j["version"] = 2; });
  EXPECT_EQ(ErrorOf([&] { TraceModel::Load(v2); }),
            "trace: '" + v2 + "': version 2 is not supported (this dtsim reads version 1)");
  const std::string moved = EditedTrace(kUneven, "final_mesh.json", [](nlohmann::json& j) {
    j["final"]["spec"]["mesh"]["names"] = {"a", "b"};
  });
  EXPECT_EQ(ErrorOf([&] { TraceModel::Load(moved); }),
            "trace: final.spec: mesh mesh[a=2, b=4] differs from the initial mesh mesh[dp=2, tp=4] "
            "(a redistribution "
            "keeps its mesh)");
}

TEST(ModelDiffTest, IdenticalTracesAgree) {
  const TraceModel a = TraceModel::Load(Golden(kUneven));
  const TraceModel b = TraceModel::Load(Golden(kUneven));
  const TraceDiff d = DiffModels(a, b);
  EXPECT_TRUE(d.differences.empty());
  EXPECT_FALSE(d.first_frame.has_value());
  EXPECT_EQ(d.num_ranks_differing, 0);
  EXPECT_EQ(d.summary,
            "agree: same plan, collectives and shard hashes on all 8 ranks at every step (initial, "
            "2 steps, final)");
}

TEST(ModelDiffTest, ADifferingRankIsMarkedAtItsFrames) {
  // Rank 5's shard differs after step 2 and at the end (as a real run with a bad all_gather would).
  const std::string other = EditedTrace(kUneven, "rank5.json", [](nlohmann::json& j) {
    for (nlohmann::json* rows : {&j["steps"][1]["ranks_after"], &j["final"]["ranks"]}) {
      (*rows)[5]["hash"] = OtherHash((*rows)[5]["hash"]);
    }
  });
  const TraceModel a = TraceModel::Load(Golden(kUneven));
  const TraceModel b = TraceModel::Load(other);
  const TraceDiff d = DiffModels(a, b);
  ASSERT_EQ(d.first_frame, std::optional<int64_t>(2));
  EXPECT_EQ(d.num_ranks_differing, 1);
  for (int64_t f = 0; f < 4; ++f) {
    for (int64_t p = 0; p < 8; ++p) {
      EXPECT_EQ(d.differs[f][p], (p == a.GetPosition(5) && f >= 2) ? 1 : 0)
          << "frame " << f << " position " << p;
    }
  }
  EXPECT_THAT(d.frame_differs, ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(
      d.summary,
      StartsWith("differ: first at step 2 (dp(0) S(0) -> R  all_gather): hash differs on rank 5"));
  EXPECT_THAT(d.summary, HasSubstr("1 of 8 ranks differ; 2 differences in all"));
  EXPECT_EQ(d.At(2, 4).size(), 1u);
  // The highlight of frame 2 marks rank 5 only.
  ViewState v;
  v.frame = 2;
  const Highlight h = ComputeHighlight(a, &d, v);
  EXPECT_EQ(std::count(h.differs.begin(), h.differs.end(), 1), 1);
  EXPECT_EQ(h.differs[a.GetPosition(5)], 1);
  // The rank's details name the other trace's row and the difference.
  EXPECT_THAT(RankDetails(a, 2, a.GetPosition(5), &b, &d),
              ::testing::Contains(StartsWith(
                  "differs: step 2 (dp(0) S(0) -> R  all_gather): hash differs on rank 5")));
}

TEST(ModelDiffTest, ADifferentStepCountIsADifferenceNotAMismatch) {
  const std::string other = EditedTrace(kUneven, "one_step.json", [](nlohmann::json& j) {
    j["steps"].erase(0);
    j["steps"][0]["index"] = 0;
  });
  const TraceModel a = TraceModel::Load(Golden(kUneven));
  const TraceModel b = TraceModel::Load(other);
  const TraceDiff d = DiffModels(a, b);
  ASSERT_FALSE(d.differences.empty());
  EXPECT_THAT(d.summary, HasSubstr("2 steps vs 1"));
  EXPECT_EQ(d.frame_differs.size(), 4u);
}

TEST(ModelDiffTest, TracesOfDifferentRedistributionsAreRefused) {
  const TraceModel a = TraceModel::Load(Golden(kUneven));
  const TraceModel nested = TraceModel::Load(Golden("nested_4x2_S0S0_to_S1S1.json"));
  EXPECT_THAT(
      ErrorOf([&] { CheckSameRedistribution(a, nested); }),
      HasSubstr("are not traces of the same redistribution: the meshes differ: mesh[dp=2, tp=4] vs "
                "mesh[dp=4, tp=2]"));
  const TraceModel shape =
      TraceModel::Load(EditedTrace(kUneven, "shape.json", [](nlohmann::json& j) {
        j["initial"]["spec"]["shape"] = {5, 12};
        j["final"]["spec"]["shape"] = {5, 12};
        j["steps"] = nlohmann::json::array();
        j["initial"]["ranks"] = nlohmann::json::array();
        j["final"]["ranks"] = nlohmann::json::array();
      }));
  EXPECT_THAT(ErrorOf([&] { CheckSameRedistribution(a, shape); }),
              HasSubstr("the tensors differ: shape [5, 10] float32 vs [5, 12] float32"));
  const TraceModel target =
      TraceModel::Load(EditedTrace(kUneven, "target.json", [](nlohmann::json& j) {
        j["meta"]["backend"] = "mpi";  // ranks that keep the old layout: only a real run may say so
        j["final"]["spec"]["placements"] = "[R, R]";
      }));
  EXPECT_THAT(ErrorOf([&] { CheckSameRedistribution(a, target); }),
              HasSubstr("they end in different placements: [R, S(1)] vs [R, R]"));
}

TEST(AppStateTest, LoadErrorsLeaveNoTraceAndAClearMessage) {
  App app;
  LoadTraces(app, {Golden(kUneven), Golden("nested_4x2_S0S0_to_S1S1.json")});
  EXPECT_FALSE(app.loaded());
  EXPECT_EQ(app.error_field, "traces");
  EXPECT_THAT(app.error, HasSubstr("not traces of the same redistribution"));
  LoadTraces(app, {"/nonexistent.json"});
  EXPECT_FALSE(app.loaded());
  EXPECT_EQ(app.error_field, "trace");
  LoadTraces(app, {Golden(kUneven)});
  EXPECT_TRUE(app.loaded());
  EXPECT_TRUE(app.error.empty());
  EXPECT_EQ(app.shown_diff(), nullptr);
}

TEST(AppStateTest, DiffModeOpensAtTheFirstDifference) {
  const std::string other = EditedTrace(kUneven, "rank5_app.json", [](nlohmann::json& j) {
    j["final"]["ranks"][5]["hash"] = OtherHash(j["final"]["ranks"][5]["hash"]);
  });
  App app;
  LoadTraces(app, {Golden(kUneven), other});
  ASSERT_TRUE(app.loaded());
  EXPECT_EQ(app.view.frame, 3);
  EXPECT_EQ(&app.shown(), &*app.first);
  app.view.show_second = true;
  EXPECT_EQ(&app.shown(), &*app.second);
  EXPECT_EQ(app.other(), &*app.first);
  EXPECT_EQ(app.shown_diff()->differs[3][5], 1);
}

TEST(ViewStateTest, SelectionAndGroupHighlight) {
  const TraceModel m = TraceModel::Load(Golden(kUneven));
  ViewState v;
  v.frame = 2;
  v.selected_rank = 3;
  v.hovered_block_ranks = {0, 4};
  const Highlight h = ComputeHighlight(m, nullptr, v);
  EXPECT_THAT(h.emphasis, ElementsAre(1, 0, 0, 2, 1, 0, 0, 0));
  EXPECT_THAT(h.in_group, ElementsAre(0, 0, 0, 1, 0, 0, 0, 1));
  EXPECT_TRUE(h.differs.empty());
  // Stepping stops at the ends; only playback wraps.
  EXPECT_EQ(NextFrame(3, 4), 3);
  EXPECT_EQ(NextFrame(1, 4), 2);
  EXPECT_EQ(PreviousFrame(0, 4), 0);
  EXPECT_EQ(PreviousFrame(2, 4), 1);
  EXPECT_EQ(PlaybackFrame(3, 4), 0);
  EXPECT_EQ(PlaybackFrame(1, 4), 2);
}

}  // namespace
}  // namespace dtsim::viewer
