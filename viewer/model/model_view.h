// The model trace window's state and pure layout step: the module tree as rows (modules, their ops
// with the collectives each caused, standalone collectives, parameters, loss, gradients), what each
// row says about the selected rank, the rows drawn as records, and the details of the selected
// row — plain data, no GUI (panels/model_panel.cc draws it; the tests read it).
//
// Rows. Each has a key: "m<node>" a module (ModuleTree node), "f<node>" / "b<node>" the forward /
// backward events that belong to the module, "p" the parameters, "g" the gradients, "e<event>" an
// event (an op, a collective, a parameter, the loss, a gradient), "c<event>.<k>" collective k of an
// op. A module's children are its child modules, then its forward and backward event groups; the
// root ("Global") has the parameters first, the loss and the gradients last.
//
// Example (dtsim model --mesh 2x4 --names dp,tp --plan fsdp+tp --backward --layers 2):
//   ModelSession s(ModuleTree::Load("sim.json"));   every module row is expanded
//   ModelTreeRows(s)[0] is "Global", [1] "parameters (21)", [2] "Transformer (Transformer)";
//   the row of "layers.0" has forward "AG 3, RS 2 | 52.2 KiB" and, for s.view.rank == 3, values
//   "in 83984abf  out 375cff96" (the first 8 hex digits of rank 3's input and output hashes).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "draw.h"
#include "module_tree.h"

namespace dtsim::viewer {

// What the window shows of a model trace; the panels change it.
struct ModelView {
  int64_t rank = 0;                 // the rank whose values the tree and the details show
  std::string selected;             // the selected row's key ("" none)
  std::set<std::string> expanded;   // the keys of the expanded rows
  bool scroll_to_selected = false;  // the tree scrolls the selected row into view and clears it
  // The event SelectEvent selected (a module's row stands for several events): stepping through
  // differences goes on from it while that row stays selected.
  int64_t event = -1;
};

// A model trace opened in the viewer, alone or with a second trace of the same run to compare.
struct ModelSession {
  explicit ModelSession(ModuleTree tree);
  ModelSession(ModuleTree tree, ModuleTree other);  // diff mode (CheckSameModelRun first)

  ModuleTree first;
  std::optional<ModuleTree> second;
  std::optional<ModelComparison> diff;  // first vs second, on the first's events
  ModelView view;
};

struct TreeRow {
  enum class Kind { kModule, kGroup, kEvent, kCollective };
  Kind kind = Kind::kModule;
  std::string key;
  int depth = 0;
  bool expandable = false, expanded = false;
  int32_t node = -1;    // kModule, kGroup: the module
  int64_t event = -1;   // kEvent, kCollective
  int collective = -1;  // kCollective: its index among the op's collectives
  std::string label;    // "layers.0.attention (Attention)", "aten::mm  [R], [S(1)] -> [S(1)]"
  std::string forward, backward;  // modules: the pass's collectives with the children's; events:
                                  // their own in their pass ("AG 3, RS 2 | 40.2 KiB")
  std::string values;    // the selected rank's hashes: "in 83984abf  out 375cff96  grad 1c0e7a55"
  bool differs = false;  // diff mode: differs on the selected rank (or on every rank)
  bool inside_differs = false;  // diff mode: something below the row differs (any rank)
};

// The visible rows: a row's children follow it when it is expanded.
std::vector<TreeRow> ModelTreeRows(const ModelSession& session);

// The key of the row that shows `event` (its module for module events), and the keys to expand so
// that the row is visible.
std::string RowKeyOfEvent(const ModuleTree& tree, int64_t event, std::vector<std::string>* expand);
// Selects the row of `event`, expanding its ancestors and asking the tree to scroll to it.
void SelectEvent(ModelSession& session, int64_t event);
// Selects module `name` ("layers.0.attention"; "Global" the root), expanding its ancestors.
// InputError("module", "no module 'x' in the trace; its modules: Global, Transformer, ...").
void SelectModule(ModelSession& session, const std::string& name);
// Diff mode: selects the first difference's event, and its first rank when it names ranks.
void SelectFirstDifference(ModelSession& session);
// The next (+1) / previous (-1) differing event after the selected row's event in run order,
// wrapping, skipping those the selected row shows (a module's input and output); false when there
// is none. The rank moves to the event's first differing rank when the current one agrees there.
bool SelectNextDifference(ModelSession& session, int direction);
// Sets the rank (InputError("rank") "rank 9 is not in mesh[dp=2, tp=4] (8 ranks)" otherwise).
void SelectRank(ModelSession& session, int64_t rank);

// Keyboard: moves the selection `delta` rows (clamped); Left collapses the selected row (or goes
// to its parent), Right expands it.
void MoveSelection(ModelSession& session, int delta);
void CollapseOrParent(ModelSession& session);
void Expand(ModelSession& session);
void ToggleExpanded(ModelSession& session, const std::string& key);

// Colours of the tree.
inline constexpr Rgba kTreeSelectedColor{55, 85, 140, 255};
inline constexpr Rgba kTreeStripeColor{38, 38, 46, 255};

// The rows as records, laid out at y = index * row_height in a `width`-wide column strip, only
// those that meet [visible_y0, visible_y1): per row a kTreeRow rect (key set; filled
// kTreeSelectedColor when selected, kDiffColor when it differs on the selected rank, stripes
// otherwise), a kDiffColor bar at its left edge when something below it differs, and its texts —
// the expander ("+" collapsed, "-" expanded), the label (indented 16 px per depth, running on over
// the columns the row leaves empty), the forward, backward and values columns (texts clipped to
// their column with "..."). The label keeps at least max(320 px, 30%) of the width.
// LayoutModelTreeHeader: the column titles for a strip `row_height` tall.
struct TreeColumns {
  float label_x = 0, forward_x = 0, backward_x = 0, values_x = 0, width = 0;
};
TreeColumns ModelTreeColumns(float width, bool has_values, const TextMetrics& metrics);
DrawList LayoutModelTree(const std::vector<TreeRow>& rows, const std::string& selected, float width,
                         float row_height, float visible_y0, float visible_y1,
                         const TextMetrics& metrics, bool has_values, int64_t rank);
DrawList LayoutModelTreeHeader(float width, float row_height, const TextMetrics& metrics,
                               bool has_values, int64_t rank);
// The row at content height `y` (rows from 0 at y = 0), or -1.
int64_t RowAt(const std::vector<TreeRow>& rows, float y, float row_height);

// The details of the selected row for the selected rank: what it is, its collectives (groups,
// bytes, estimate, cause, this rank's group), its tensors (placements, shape, this rank's hash)
// and, in diff mode, the other trace's hash and the differences at its events.
std::vector<DetailLine> RowDetails(const ModelSession& session);

}  // namespace dtsim::viewer
