// Model traces in the viewer's model layer (module_tree.h, model_view.h, app_state.h): the module
// tree and its counts against the events, the comparison of two traces laid onto modules and
// ranks, the rows, values, selection, navigation, layout records and details, loading and errors,
// and a 4,096-rank metadata trace opening fast. Inputs: synthetic traces (model_trace_support.h)
// and a real pair (tests/viewer/data: a simulated run and an 8-rank MPI run with a fault).
#include "viewer/model/model_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "dtsim/layout/error.h"
#include "model_trace_support.h"
#include "test_support.h"
#include "viewer/model/app_state.h"
#include "viewer/model/colors.h"
#include "viewer/model/module_tree.h"

namespace dtsim::viewer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeModelTrace;
using ::testing::StartsWith;

std::string Data(const std::string& name) {
  return std::string(DTSIM_SOURCE_DIR) + "/tests/viewer/data/" + name;
}
const char* kSim = "model_fsdp_tp_2x4_sim.json";
const char* kRealFault = "model_fsdp_tp_2x4_real_fault.json";

// A valid model trace, as a reader gets it.
ModuleTree TreeOf(const ModelTrace& t) {
  return ModuleTree::FromTrace(ModelTraceFromJson(ToJson(t)), "synthetic.json");
}

int64_t EventWhere(const ModelTrace& t, RunEvent::Kind kind, const std::string& module) {
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (t.events[i].kind == kind && t.events[i].module == module) return static_cast<int64_t>(i);
  }
  return -1;
}

const TreeRow* RowByKey(const std::vector<TreeRow>& rows, const std::string& key) {
  for (const TreeRow& r : rows) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

TEST(ModuleTreeTest, TheTreeFollowsTheForwardNesting) {
  const ModuleTree t = TreeOf(MakeModelTrace({2, 4}, {"dp", "tp"}, 2));
  const ModuleNode& root = t.node(0);
  EXPECT_EQ(root.name, "Global");
  ASSERT_EQ(root.children.size(), 1u);
  const ModuleNode& model = t.node(root.children[0]);
  EXPECT_EQ(model.name, "Model");
  EXPECT_EQ(model.type, "Model");
  std::vector<std::string> blocks;
  for (int32_t c : model.children) blocks.push_back(t.node(c).name);
  EXPECT_THAT(blocks, ElementsAre("layers.0", "layers.1"));
  const int32_t attn = *t.FindNode("layers.1.attn");
  EXPECT_EQ(t.node(attn).type, "Attention");
  EXPECT_EQ(t.node(attn).parent, *t.FindNode("layers.1"));
  EXPECT_EQ(t.node(attn).depth, 3);
  ASSERT_EQ(t.node(attn).calls.size(), 1u);
  EXPECT_EQ(t.node(attn).calls[0].begin,
            EventWhere(t.trace(), RunEvent::Kind::kModuleBegin, "layers.1.attn"));
  EXPECT_EQ(t.node(attn).calls[0].end,
            EventWhere(t.trace(), RunEvent::Kind::kModuleEnd, "layers.1.attn"));
  EXPECT_THAT(t.node(attn).backward,
              ElementsAre(EventWhere(t.trace(), RunEvent::Kind::kBackwardBegin, "layers.1.attn")));
  EXPECT_TRUE(t.IsAncestorOrSelf(root.children[0], attn));
  EXPECT_FALSE(t.IsAncestorOrSelf(*t.FindNode("layers.0"), attn));
  EXPECT_EQ(t.parameters().size(), 4u);
  EXPECT_EQ(t.gradients().size(), 4u);
  EXPECT_EQ(t.losses().size(), 1u);
  EXPECT_FALSE(t.FindNode("nope").has_value());
  EXPECT_EQ(t.CoordinateOf(6), "[dp=1, tp=2]");
  EXPECT_THAT(t.Describe(),
              StartsWith("simulated (local), 8 ranks mesh[dp=2, tp=4], plan fsdp+tp"));
}

TEST(ModuleTreeTest, CountsAddUpTheEventsOfEachSubtree) {
  // On the real trace: every module's total is its own plus its children's, each op or collective
  // event counted in the node its `module` names, and the root counts every collective.
  const ModuleTree t = ModuleTree::Load(Data(kSim));
  std::array<int64_t, 2> all{};
  for (const RunEvent& e : t.trace().events) {
    if (e.kind == RunEvent::Kind::kOp || e.kind == RunEvent::Kind::kCollective)
      all[e.pass == "backward" ? kBackward : kForward] +=
          static_cast<int64_t>(e.collectives.size());
  }
  EXPECT_EQ(t.node(0).total[kForward].count, all[kForward]);
  EXPECT_EQ(t.node(0).total[kBackward].count, all[kBackward]);
  EXPECT_GT(all[kForward], 0);
  for (size_t n = 0; n < t.nodes().size(); ++n) {
    const ModuleNode& node = t.node(static_cast<int32_t>(n));
    for (int pass : {kForward, kBackward}) {
      CommCounts sum = node.own[pass];
      for (int32_t c : node.children) sum.Add(t.node(c).total[pass]);
      EXPECT_EQ(sum.count, node.total[pass].count) << node.name;
      EXPECT_EQ(sum.bytes, node.total[pass].bytes) << node.name;
      int64_t own = 0;
      for (int64_t e : node.events[pass]) {
        EXPECT_EQ(t.trace().events[e].module, node.name);
        own += static_cast<int64_t>(t.trace().events[e].collectives.size());
      }
      EXPECT_EQ(own, node.own[pass].count) << node.name;
    }
  }
  // torchtitan's names: the block and its attention.
  const int32_t block = *t.FindNode("layers.0");
  EXPECT_EQ(t.node(block).type, "TransformerBlock");
  EXPECT_GT(t.node(block).total[kForward].count, 0);
  EXPECT_THAT(t.node(block).total[kForward].Text(), HasSubstr("all_gather"));
  EXPECT_THAT(t.node(block).total[kForward].Text(true), StartsWith("AG "));
}

TEST(ModelComparisonTest, AValueDifferenceOnOneRankIsLaidOntoItsModuleAndRank) {
  const ModelTrace a = MakeModelTrace({2, 4}, {"dp", "tp"}, 2);
  ModelTrace b = a;
  const int64_t out = EventWhere(a, RunEvent::Kind::kModuleEnd, "layers.1.attn");
  b.events[out].tensor->hashes[5] = testing::FakeHash(out, 5, 1);
  b.events[out].tensor->sketches[5][0] += 3;  // a wrong value, not rounding
  const ModuleTree ta = TreeOf(a), tb = TreeOf(b);
  const ModelComparison c = CompareModelTraces(ta, tb);
  ASSERT_EQ(c.differences.size(), 1u);
  EXPECT_EQ(c.first_event, out);
  EXPECT_TRUE(c.Differs(out, 5));
  EXPECT_FALSE(c.Differs(out, 4));
  EXPECT_FALSE(c.Differs(out - 1, 5));
  EXPECT_THAT(c.ranks, ElementsAre(5));
  const int32_t attn = *ta.FindNode("layers.1.attn");
  EXPECT_TRUE(c.node_differs[attn]);
  EXPECT_FALSE(c.node_differs[*ta.FindNode("layers.1")]);
  for (const char* up : {"layers.1", "Model", "Global"})
    EXPECT_TRUE(c.subtree_differs[*ta.FindNode(up)]) << up;
  EXPECT_FALSE(c.subtree_differs[*ta.FindNode("layers.0")]);
  EXPECT_THAT(c.summary, StartsWith(StrCat("differ: first at event ", out + 1,
                                           ": forward output of layers.1.attn: values differ on "
                                           "rank 5")));
  EXPECT_THAT(c.summary, HasSubstr("1 of 8 ranks differ (5); 1 difference"));
  EXPECT_EQ(EventOfDifference(c.differences[0]), out);
}

TEST(ModelComparisonTest, RoundingIsNotADifferenceAndStructureConcernsEveryRank) {
  const ModelTrace a = MakeModelTrace({2, 4}, {"dp", "tp"}, 1);
  ModelTrace b = a;
  const int64_t out = EventWhere(a, RunEvent::Kind::kModuleEnd, "layers.0.mlp");
  b.events[out].tensor->hashes[2] = testing::FakeHash(out, 2, 1);  // same sketch: rounding
  const ModelComparison rounded = CompareModelTraces(TreeOf(a), TreeOf(b));
  EXPECT_TRUE(rounded.differences.empty());
  EXPECT_EQ(rounded.rounded, 1);
  EXPECT_THAT(rounded.summary, StartsWith("agree: "));
  EXPECT_THAT(rounded.summary, HasSubstr("1 tensor equal within float rounding"));
  // Another group list in a collective: a difference with no rank, so every rank's row shows it.
  ModelTrace c = a;
  const int64_t mm = EventWhere(a, RunEvent::Kind::kOp, "layers.0.attn");
  c.events[mm].collectives[1].max_bytes_sent = 2048;
  const ModelComparison s = CompareModelTraces(TreeOf(a), TreeOf(c));
  ASSERT_EQ(s.differences.size(), 1u);
  EXPECT_TRUE(s.events[mm].all_ranks);
  for (int64_t r = 0; r < 8; ++r) EXPECT_TRUE(s.Differs(mm, r));
  EXPECT_THAT(s.differences[0].where, HasSubstr(", collective 2"));
  // Traces of other meshes are refused.
  const ModuleTree other = TreeOf(MakeModelTrace({8}, {"tp"}, 1));
  try {
    CompareModelTraces(TreeOf(a), other);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "traces");
    EXPECT_THAT(std::string(e.what()),
                HasSubstr("are not traces of the same model run: the meshes differ: "
                          "mesh[dp=2, tp=4] vs mesh[tp=8]"));
  }
}

TEST(ModelViewTest, RowsExpandIntoOpsAndTheCollectivesTheyCaused) {
  ModelSession s(TreeOf(MakeModelTrace({2, 4}, {"dp", "tp"}, 2)));
  std::vector<TreeRow> rows = ModelTreeRows(s);
  std::vector<std::string> labels;
  for (size_t i = 0; i < 5; ++i) labels.push_back(rows[i].label);
  EXPECT_THAT(labels, ElementsAre("Global", "parameters (4)", "Model (Model)", "layers.0 (Block)",
                                  "layers.0.attn (Attention)"));
  EXPECT_EQ(rows[0].key, "m0");
  EXPECT_EQ(s.view.selected, "m0");
  const int32_t attn = *s.first.FindNode("layers.0.attn");
  const TreeRow* attn_row = RowByKey(rows, StrCat("m", attn));
  ASSERT_NE(attn_row, nullptr);
  EXPECT_EQ(attn_row->depth, 3);
  EXPECT_TRUE(attn_row->expanded);
  EXPECT_EQ(attn_row->forward, "AG 2 | 2.00 KiB");
  EXPECT_EQ(attn_row->backward, "RS 2 | 2.00 KiB");
  const TreeRow* group = RowByKey(rows, StrCat("f", attn));
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->label, "forward: 2 ops");
  EXPECT_FALSE(group->expanded);
  EXPECT_EQ(RowByKey(rows, StrCat("b", attn))->label, "backward: 1 op, 1 collective");
  // The root ends with the loss and the gradients.
  EXPECT_EQ(rows[rows.size() - 2].label, "loss  [S(0)] [4, 8]");
  EXPECT_EQ(rows.back().label, "gradients (4)");
  // Expanding the forward group shows its ops; expanding the op its two implicit all_gathers.
  ToggleExpanded(s, StrCat("f", attn));
  const int64_t mm = EventWhere(s.first.trace(), RunEvent::Kind::kOp, "layers.0.attn");
  rows = ModelTreeRows(s);
  const TreeRow* op = RowByKey(rows, StrCat("e", mm));
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->label, "aten::mm  [S(0)], [S(1)] -> [S(0)]  (2 collectives)");
  EXPECT_EQ(op->forward, "AG 2 | 2.00 KiB");
  EXPECT_TRUE(op->expandable);
  const int op_depth = op->depth;
  EXPECT_EQ(RowByKey(rows, StrCat("c", mm, ".0")), nullptr);
  ToggleExpanded(s, StrCat("e", mm));
  rows = ModelTreeRows(s);
  const TreeRow* c0 = RowByKey(rows, StrCat("c", mm, ".0"));
  const TreeRow* c1 = RowByKey(rows, StrCat("c", mm, ".1"));
  ASSERT_NE(c0, nullptr);
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(c0->label, "all_gather on tp  [S(1)] -> [R]  implicit  aten::mm arg 0");
  EXPECT_EQ(c1->depth, op_depth + 1);
  EXPECT_EQ(c0 - RowByKey(rows, StrCat("e", mm)), 1);  // right under their op
  // Collapsing the root leaves one row.
  ToggleExpanded(s, "m0");
  EXPECT_EQ(ModelTreeRows(s).size(), 1u);
}

TEST(ModelViewTest, TheValuesColumnShowsTheSelectedRanksHashes) {
  const ModelTrace trace = MakeModelTrace({2, 4}, {"dp", "tp"}, 1);
  ModelSession s(TreeOf(trace));
  const int32_t attn = *s.first.FindNode("layers.0.attn");
  const int64_t in = EventWhere(trace, RunEvent::Kind::kModuleBegin, "layers.0.attn");
  const int64_t out = EventWhere(trace, RunEvent::Kind::kModuleEnd, "layers.0.attn");
  const int64_t grad = EventWhere(trace, RunEvent::Kind::kBackwardBegin, "layers.0.attn");
  for (int64_t rank : {0, 3, 7}) {
    SelectRank(s, rank);
    const std::vector<TreeRow> rows = ModelTreeRows(s);
    const TreeRow* row = RowByKey(rows, StrCat("m", attn));
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->values, StrCat("in ", testing::FakeHash(in, rank).substr(5, 8), "  out ",
                                  testing::FakeHash(out, rank).substr(5, 8)));
    // The output gradient is in the details.
    s.view.selected = StrCat("m", attn);
    std::vector<std::string> lines;
    for (const DetailLine& l : RowDetails(s)) lines.push_back(l.text);
    EXPECT_THAT(lines, ::testing::Contains(StrCat("output gradient: [S(0)] [4, 8]  ",
                                                  testing::FakeHash(grad, rank))));
  }
  try {
    SelectRank(s, 8);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "rank: rank 8 is not in mesh[dp=2, tp=4] (8 ranks)");
  }
  // A metadata-only trace has no values.
  ModelSession meta(TreeOf(MakeModelTrace({2, 4}, {"dp", "tp"}, 1, /*data=*/false)));
  EXPECT_EQ(RowByKey(ModelTreeRows(meta), StrCat("m", attn))->values, "");
}

TEST(ModelViewTest, TwoTracesOpenAtTheFirstDifferenceOnItsRank) {
  // The real pair: rank 2's wrong offset in the all_gather before layers.0.attention.wq spreads to
  // its tp group (ranks 0..3).
  ModelSession s(ModuleTree::Load(Data(kSim)), ModuleTree::Load(Data(kRealFault)));
  ASSERT_TRUE(s.diff.has_value());
  ASSERT_TRUE(s.diff->first_event.has_value());
  const RunEvent& first = s.first.trace().events[*s.diff->first_event];
  EXPECT_EQ(first.kind, RunEvent::Kind::kModuleBegin);
  EXPECT_EQ(first.module, "layers.0.attention.wq");
  EXPECT_THAT(s.diff->summary,
              StartsWith(StrCat("differ: first at event ", *s.diff->first_event + 1,
                                ": forward input of layers.0.attention.wq: values differ on "
                                "ranks 0, 1, 2, 3")));
  EXPECT_EQ(s.view.rank, 0);
  const int32_t wq = *s.first.FindNode("layers.0.attention.wq");
  EXPECT_EQ(s.view.selected, StrCat("m", wq));
  EXPECT_TRUE(s.view.scroll_to_selected);
  const std::vector<TreeRow> rows = ModelTreeRows(s);
  const TreeRow* row = RowByKey(rows, StrCat("m", wq));
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->differs);
  // Modules that ran before the fault agree on every rank in forward: the embedding's input.
  const int32_t emb = *s.first.FindNode("tok_embeddings");
  EXPECT_FALSE(s.diff->Differs(s.first.node(emb).calls[0].begin, 0));
  EXPECT_FALSE(s.diff->Differs(s.first.node(emb).calls[0].end, 0));
  // The details say both hashes and the difference.
  const std::vector<DetailLine> details = RowDetails(s);
  bool other = false, difference = false;
  for (const DetailLine& l : details) {
    other = other || (l.differs && l.text.find("other trace: xxh3:") != std::string::npos);
    difference = difference || (l.differs && l.text.find("values differ on ranks 0, 1, 2, 3") !=
                                                 std::string::npos);
  }
  EXPECT_TRUE(other);
  EXPECT_TRUE(difference);
  // On a rank of the other tp group the wq input agrees.
  SelectRank(s, 5);
  EXPECT_FALSE(s.diff->Differs(s.first.node(wq).calls[0].begin, 5));
  // F3 steps through the differing events in run order, skipping those of the selected row (wq's
  // output), and wraps.
  SelectFirstDifference(s);
  std::vector<int64_t> differing;
  for (size_t e = 0; e < s.diff->events.size(); ++e) {
    if (!s.diff->events[e].differences.empty()) differing.push_back(static_cast<int64_t>(e));
  }
  auto key = [&](int64_t e) { return RowKeyOfEvent(s.first, e, nullptr); };
  const std::string wq_key = StrCat("m", wq);
  int64_t next = -1;
  for (int64_t e : differing) {
    if (e > *s.diff->first_event && key(e) != wq_key && next < 0) next = e;
  }
  ASSERT_TRUE(SelectNextDifference(s, 1));
  EXPECT_EQ(s.view.selected, key(next));
  EXPECT_EQ(s.view.event, next);
  ASSERT_TRUE(SelectNextDifference(s, -1));
  EXPECT_EQ(s.view.selected, wq_key);
  ASSERT_TRUE(SelectNextDifference(s, -1));  // before the first: wraps to the last
  EXPECT_EQ(s.view.selected, key(differing.back()));
}

TEST(ModelViewTest, NavigationByKeysAndByName) {
  ModelSession s(TreeOf(MakeModelTrace({4}, {"tp"}, 2)));
  MoveSelection(s, 2);
  EXPECT_EQ(s.view.selected, "m1");  // Global, parameters, Model
  MoveSelection(s, -100);
  EXPECT_EQ(s.view.selected, "m0");
  CollapseOrParent(s);  // the root collapses
  EXPECT_EQ(ModelTreeRows(s).size(), 1u);
  Expand(s);
  EXPECT_GT(ModelTreeRows(s).size(), 1u);
  SelectModule(s, "layers.1.mlp");
  const int32_t mlp = *s.first.FindNode("layers.1.mlp");
  EXPECT_EQ(s.view.selected, StrCat("m", mlp));
  CollapseOrParent(s);  // expanded: collapses
  CollapseOrParent(s);  // collapsed: goes to the parent
  EXPECT_EQ(s.view.selected, StrCat("m", *s.first.FindNode("layers.1")));
  // An event's row becomes visible when selected: its module and group expand.
  s.view.expanded = {"m0"};
  const int64_t rs = EventWhere(s.first.trace(), RunEvent::Kind::kCollective, "layers.0.attn");
  SelectEvent(s, rs);
  EXPECT_EQ(s.view.selected, StrCat("e", rs));
  EXPECT_NE(RowByKey(ModelTreeRows(s), StrCat("e", rs)), nullptr);
  EXPECT_EQ(RowByKey(ModelTreeRows(s), StrCat("e", rs))->label,
            "reduce_scatter on tp  fully_shard reduce-scatter of layers.0");
  try {
    SelectModule(s, "layers.9");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()),
                StartsWith("module: no module 'layers.9' in the trace; its modules: Global, Model, "
                           "layers.0, layers.0.attn"));
  }
}

TEST(ModelViewTest, LayoutRecordsOneRectPerVisibleRow) {
  const ModelTrace a = MakeModelTrace({2, 4}, {"dp", "tp"}, 2);
  ModelTrace b = a;
  const int64_t out = EventWhere(a, RunEvent::Kind::kModuleEnd, "layers.1.attn");
  b.events[out].tensor->hashes[5] = testing::FakeHash(out, 5, 1);
  b.events[out].tensor->sketches[5][0] += 3;
  ModelSession s(TreeOf(a), TreeOf(b));
  EXPECT_EQ(s.view.rank, 5);
  const std::vector<TreeRow> rows = ModelTreeRows(s);
  const TextMetrics m;
  const float row_h = 20;
  const DrawList all = LayoutModelTree(rows, s.view.selected, 900, row_h, 0, 1e6, m, true, 5);
  std::vector<const DrawRect*> row_rects;
  for (const DrawRect& r : all.rects) {
    if (r.role == Role::kTreeRow) row_rects.push_back(&r);
  }
  ASSERT_EQ(row_rects.size(), rows.size());
  const int32_t attn = *s.first.FindNode("layers.1.attn");
  for (size_t i = 0; i < rows.size(); ++i) {
    const DrawRect& r = *row_rects[i];
    EXPECT_EQ(r.key, rows[i].key);
    EXPECT_EQ(r.rect.y0, static_cast<float>(i) * row_h);
    EXPECT_EQ(r.rect.y1 - r.rect.y0, row_h);
    EXPECT_EQ(RowAt(rows, r.rect.y0 + 1, row_h), static_cast<int64_t>(i));
    if (r.key == StrCat("m", attn)) {
      // Selected and differing on rank 5: the diff colour with a white frame.
      EXPECT_EQ(r.fill, kDiffColor);
      EXPECT_EQ(r.border, kHighlightColor);
    } else {
      EXPECT_NE(r.fill, kDiffColor) << r.key;
    }
  }
  // Ancestors carry the diff bar at their left edge; the untouched block does not.
  std::set<std::string> bars;
  for (const DrawRect& r : all.rects) {
    if (r.role == Role::kHighlight) bars.insert(r.key);
  }
  EXPECT_TRUE(bars.count("m0"));
  EXPECT_TRUE(bars.count(StrCat("m", *s.first.FindNode("layers.1"))));
  EXPECT_FALSE(bars.count(StrCat("m", *s.first.FindNode("layers.0"))));
  // Rank 4 agrees: the row is not red there.
  SelectRank(s, 4);
  EXPECT_FALSE(RowByKey(ModelTreeRows(s), StrCat("m", attn))->differs);
  // Only the rows meeting the visible band are laid out; texts fit their columns.
  const DrawList part = LayoutModelTree(rows, s.view.selected, 900, row_h, 50, 110, m, true, 5);
  size_t n = 0;
  for (const DrawRect& r : part.rects) n += r.role == Role::kTreeRow;
  EXPECT_EQ(n, 4u);  // rows 2..5
  const TreeColumns c = ModelTreeColumns(900, true, m);
  for (const DrawText& t : all.texts) {
    if (t.x >= c.values_x) {
      EXPECT_LE(t.x + t.w, 900) << t.text;
    } else if (t.x >= c.forward_x) {
      EXPECT_LE(t.x + t.w, t.x >= c.backward_x ? c.values_x : c.backward_x) << t.text;
    }
  }
  // Labels stop at the first column their row fills.
  for (size_t i = 0; i < rows.size(); ++i) {
    for (const DrawText& t : all.texts) {
      if (t.y < i * row_h || t.y >= (i + 1) * row_h || t.x >= c.forward_x) continue;
      if (!rows[i].forward.empty()) {
        EXPECT_LE(t.x + t.w, c.forward_x) << t.text;
      } else if (!rows[i].backward.empty()) {
        EXPECT_LE(t.x + t.w, c.backward_x) << t.text;
      } else if (!rows[i].values.empty()) {
        EXPECT_LE(t.x + t.w, c.values_x) << t.text;
      }
    }
  }
  EXPECT_GE(c.forward_x, 320);
}

TEST(ModelViewTest, DetailsOfAnOpListItsCollectivesAndTheRanksGroup) {
  ModelSession s(TreeOf(MakeModelTrace({2, 4}, {"dp", "tp"}, 1)));
  const int64_t mm = EventWhere(s.first.trace(), RunEvent::Kind::kOp, "layers.0.attn");
  SelectEvent(s, mm);
  SelectRank(s, 6);
  std::vector<std::string> lines;
  for (const DetailLine& l : RowDetails(s)) lines.push_back(l.text);
  EXPECT_THAT(lines, ::testing::Contains(StartsWith(
                         StrCat("event ", mm + 1, ": aten::mm in layers.0.attn (forward)"))));
  EXPECT_THAT(lines,
              ::testing::Contains("all_gather on tp: 2 groups of up to 4 ranks, [S(1)] -> [R]"));
  EXPECT_THAT(lines, ::testing::Contains("    implicit redistribution: aten::mm arg 1"));
  EXPECT_THAT(lines, ::testing::Contains("    rank 6's group: [4, 5, 6, 7]"));
  // A parameter: its placements, shape and this rank's hash.
  SelectEvent(s, s.first.parameters()[1]);
  lines.clear();
  for (const DetailLine& l : RowDetails(s)) lines.push_back(l.text);
  EXPECT_THAT(lines, ::testing::Contains(StrCat("layers.0.mlp.weight: [S(0)] [4, 8]  ",
                                                testing::FakeHash(s.first.parameters()[1], 6))));
}

TEST(ModelViewTest, AppOpensModelTracesAndRefusesBadOnes) {
  App app;
  LoadTraces(app, {Data(kSim)});
  EXPECT_TRUE(app.model_loaded());
  EXPECT_FALSE(app.loaded());
  EXPECT_TRUE(app.opened());
  EXPECT_EQ(app.error, "");
  LoadTraces(app, {Data(kSim), Data(kRealFault)});
  ASSERT_TRUE(app.model_loaded());
  EXPECT_TRUE(app.model->diff.has_value());
  // A model trace with a redistribution trace.
  const std::string golden = testing::Golden("uneven_2x4_S0R_to_RS1.json");
  LoadTraces(app, {Data(kSim), golden});
  EXPECT_FALSE(app.opened());
  EXPECT_EQ(app.error_field, "traces");
  EXPECT_THAT(app.error,
              HasSubstr("is a model trace but '" + golden + "' is not (format \"dtsim-trace\")"));
  // A model trace that fails validation: the reader's message, naming the file and the field.
  nlohmann::json bad = testing::ReadJson(Data(kSim));
  bad["events"][3]["t_us"] = -1;
  const std::string path = testing::WriteText("bad_model.json", bad.dump());
  LoadTraces(app, {path});
  EXPECT_FALSE(app.opened());
  EXPECT_EQ(app.error_field, "trace");
  EXPECT_THAT(app.error, StartsWith("trace: '" + path + "': events[3].t_us: -1 is not a time"));
  // Reloading keeps the rank and the selection.
  LoadTraces(app, {Data(kSim)});
  SelectRank(*app.model, 6);
  SelectModule(*app.model, "layers.0.attention");
  ReloadTraces(app);
  ASSERT_TRUE(app.model_loaded());
  EXPECT_EQ(app.model->view.rank, 6);
  EXPECT_EQ(app.model->view.selected,
            StrCat("m", *app.model->first.FindNode("layers.0.attention")));
}

TEST(ModelViewTest, A4096RankMetadataTraceOpensFast) {
  // 512 x 8 ranks, no hashes, 4 blocks: written, read, indexed and laid out.
  const ModelTrace big = MakeModelTrace({512, 8}, {"dp", "tp"}, 4, /*data=*/false);
  const std::string path = testing::WriteText("model_4096.json", ToJson(big).dump());
  const auto start = std::chrono::steady_clock::now();
  App app;
  LoadTraces(app, {path});
  ASSERT_TRUE(app.model_loaded()) << app.error;
  const std::vector<TreeRow> rows = ModelTreeRows(*app.model);
  const DrawList list =
      LayoutModelTree(rows, app.model->view.selected, 1000, 20, 0, 1000, TextMetrics{}, false, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(app.model->first.world_size(), 4096);
  EXPECT_FALSE(app.model->first.has_hashes());
  EXPECT_FALSE(list.empty());
  EXPECT_LT(seconds, 2.0);  // about 0.05 s here; generous for a loaded 2-core machine
}

}  // namespace
}  // namespace dtsim::viewer
