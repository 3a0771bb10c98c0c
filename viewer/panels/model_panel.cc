// The model trace window (dtsim model --trace): the module tree, the rank picker, the details of
// the selected row and, with two traces, the differences (model/model_view.h lays them out).
#include <GLFW/glfw3.h>  // key codes (ImGui 1.86 indexes keys by the backend's codes)
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>

#include "dtsim/layout/error.h"
#include "dtsim/trace/perfetto.h"
#include "panels.h"
#include "viewer/model/colors.h"
#include "viewer/model/find.h"

namespace dtsim::viewer {
namespace {

// Keyboard: Up/Down move the selection, Left collapses (or goes to the parent), Right expands,
// Enter toggles, Home/End the first/last row, F3 / Shift+F3 the next / previous difference, minus
// / equal the previous / next rank.
void HandleModelKeys(App& app) {
  if (ImGui::GetIO().WantTextInput) return;
  ModelSession& s = *app.model;
  const bool shift = ImGui::GetIO().KeyShift;
  if (ImGui::IsKeyPressed(GLFW_KEY_DOWN)) MoveSelection(s, 1);
  if (ImGui::IsKeyPressed(GLFW_KEY_UP)) MoveSelection(s, -1);
  if (ImGui::IsKeyPressed(GLFW_KEY_PAGE_DOWN)) MoveSelection(s, 20);
  if (ImGui::IsKeyPressed(GLFW_KEY_PAGE_UP)) MoveSelection(s, -20);
  if (ImGui::IsKeyPressed(GLFW_KEY_HOME, false)) MoveSelection(s, -1000000);
  if (ImGui::IsKeyPressed(GLFW_KEY_END, false)) MoveSelection(s, 1000000);
  if (ImGui::IsKeyPressed(GLFW_KEY_LEFT)) CollapseOrParent(s);
  if (ImGui::IsKeyPressed(GLFW_KEY_RIGHT)) Expand(s);
  if (ImGui::IsKeyPressed(GLFW_KEY_ENTER, false)) ToggleExpanded(s, s.view.selected);
  if (ImGui::IsKeyPressed(GLFW_KEY_F3, false)) SelectNextDifference(s, shift ? -1 : 1);
  if (ImGui::IsKeyPressed(GLFW_KEY_MINUS) && s.view.rank > 0) --s.view.rank;
  if (ImGui::IsKeyPressed(GLFW_KEY_EQUAL) && s.view.rank + 1 < s.first.world_size()) ++s.view.rank;
}

void DrawTreePanel(App& app, const Rect& area) {
  ModelSession& s = *app.model;
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("modules", ImVec2(area.width(), area.height()), true);
  ImGui::TextUnformatted("Modules");
  ImGui::SameLine();
  if (ImGui::SmallButton("expand all")) {
    for (size_t n = 0; n < s.first.nodes().size(); ++n) s.view.expanded.insert(StrCat("m", n));
  }
  ImGui::SameLine();
  if (ImGui::SmallButton("collapse all")) s.view.expanded = {"m0"};
  if (s.diff && !s.diff->differences.empty()) {
    ImGui::SameLine();
    if (ImGui::SmallButton("next difference (F3)")) SelectNextDifference(s, 1);
  }
  SameLineIfFits(ImGui::CalcTextSize("click: select, +/-: expand, arrows: move").x);
  ImGui::TextColored(ToVec4(kDimTextColor), "click: select, +/-: expand, arrows: move");

  const TextMetrics metrics = CurrentTextMetrics();
  const float row_h = std::round(metrics.line_height + 6);
  const float width = ImGui::GetContentRegionAvail().x;
  const bool values = s.first.has_hashes();
  const ImVec2 header_at = ImGui::GetCursorScreenPos();
  Paint(app, "model_header", LayoutModelTreeHeader(width, row_h, metrics, values, s.view.rank),
        header_at.x, header_at.y);
  ImGui::Dummy(ImVec2(width, row_h));

  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("module_rows", ImVec2(avail.x, avail.y), false);
  const std::vector<TreeRow> rows = ModelTreeRows(s);
  const float view_h = ImGui::GetWindowHeight();
  const float total = static_cast<float>(rows.size()) * row_h;
  float scroll = ImGui::GetScrollY();
  if (s.view.scroll_to_selected) {
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].key != s.view.selected) continue;
      const float y = static_cast<float>(i) * row_h;
      if (y < scroll || y + row_h > scroll + view_h) {
        scroll = std::clamp(y - view_h / 3, 0.0f, std::max(0.0f, total - view_h));
        ImGui::SetScrollY(scroll);
      }
    }
    s.view.scroll_to_selected = false;
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos();  // the first row's top-left (scrolled)
  const float row_w = ImGui::GetContentRegionAvail().x;
  ImGui::InvisibleButton("rows", ImVec2(row_w, std::max(total, 1.0f)));
  const ImGuiIO& io = ImGui::GetIO();
  const float mx = io.MousePos.x - origin.x, my = io.MousePos.y - origin.y;
  const int64_t hovered = ImGui::IsItemHovered() ? RowAt(rows, my, row_h) : -1;
  if (hovered >= 0 && ImGui::IsItemClicked(ImGuiMouseButton_Left)) {
    const TreeRow& r = rows[hovered];
    const float expander = 8 + 16 * static_cast<float>(r.depth) + 14;
    if (r.expandable && (mx < expander || ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)))
      ToggleExpanded(s, r.key);
    s.view.selected = r.key;
  }
  if (hovered >= 0) {
    const TreeRow& r = rows[hovered];
    std::string tip = r.label;
    if (!r.forward.empty()) tip += "\nforward: " + r.forward;
    if (!r.backward.empty()) tip += "\nbackward: " + r.backward;
    if (!r.values.empty()) tip += StrCat("\nrank ", s.view.rank, ": ", r.values);
    ImGui::SetTooltip("%s", tip.c_str());
  }
  // The visible band (content coordinates) goes into the dump as the panel's viewport.
  const Rect visible{0, scroll, row_w, scroll + view_h};
  Paint(app, "model_tree",
        LayoutModelTree(rows, s.view.selected, row_w, row_h, scroll, scroll + view_h, metrics,
                        values, s.view.rank),
        origin.x, origin.y, &visible);
  ImGui::EndChild();
  ImGui::EndChild();
}

void DrawRankPicker(App& app, const Rect& area) {
  ModelSession& s = *app.model;
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("model_rank", ImVec2(area.width(), area.height()), true);
  ImGui::TextUnformatted("Rank");
  ImGui::SameLine();
  int64_t rank = s.view.rank;
  const int64_t one = 1, ten = 10;
  ImGui::SetNextItemWidth(140);
  if (ImGui::InputScalar("##model_rank", ImGuiDataType_S64, &rank, &one, &ten)) {
    s.view.rank = std::clamp<int64_t>(rank, 0, s.first.world_size() - 1);
  }
  ImGui::SameLine();
  ImGui::TextUnformatted(s.first.CoordinateOf(s.view.rank).c_str());
  ImGui::TextColored(ToVec4(kDimTextColor), "of %lld (minus / equal step; Ctrl+G goes to one)",
                     static_cast<long long>(s.first.world_size()));
  if (s.diff) {
    const std::vector<int64_t>& ranks = s.diff->ranks;
    if (ranks.empty()) {
      ImGui::TextUnformatted("no rank's values differ");
    } else {
      ImGui::TextColored(ToVec4(kDiffColor), "%zu rank%s differ:", ranks.size(),
                         ranks.size() == 1 ? "" : "s");
      const size_t shown = std::min<size_t>(ranks.size(), 32);
      for (size_t i = 0; i < shown; ++i) {
        const std::string label = std::to_string(ranks[i]);
        SameLineIfFits(ImGui::CalcTextSize(label.c_str()).x + 10);
        if (ImGui::SmallButton(label.c_str())) s.view.rank = ranks[i];
      }
      if (shown < ranks.size()) {
        ImGui::SameLine();
        ImGui::Text("and %zu more", ranks.size() - shown);
      }
    }
  }
  ImGui::EndChild();
}

void DrawDetailsPanel(App& app, const Rect& area) {
  DetailsPanel("model_details", area, RowDetails(*app.model));
}

void DrawDifferencesPanel(App& app, const Rect& area) {
  ModelSession& s = *app.model;
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("model_diff", ImVec2(area.width(), area.height()), true);
  const std::vector<TraceDifference>& diffs = s.diff->differences;
  if (diffs.empty()) {
    ImGui::TextUnformatted("Differences: none");
  } else {
    ImGui::Text("Differences: %zu (click one to select it)", diffs.size());
    ImGui::SameLine();
    if (ImGui::SmallButton("first")) SelectFirstDifference(s);
    const size_t shown = std::min<size_t>(diffs.size(), 500);
    for (size_t i = 0; i < shown; ++i) {
      const TraceDifference& d = diffs[i];
      ImGui::PushID(static_cast<int>(i));
      ImGui::PushStyleColor(ImGuiCol_Text, ToVec4(kDiffColor));
      const std::string text = d.where + ": " + d.what;
      if (ImGui::Selectable(text.c_str(), false)) {
        if (const std::optional<int64_t> event = EventOfDifference(d)) {
          if (!d.ranks.empty()) s.view.rank = d.ranks.front();
          SelectEvent(s, *event);
        }
      }
      ImGui::PopStyleColor();
      ImGui::PopID();
    }
  }
  ImGui::EndChild();
}

}  // namespace

void DrawModelToolbar(App& app) {
  ModelSession& s = *app.model;
  // Go to a rank (Ctrl+G): a number or a coordinate.
  GoToBox(app, "go to rank: 3 or 0,3",
          [&s](const std::string& text) { SelectRank(s, ParseRankQuery(s.first.mesh(), text)); });
  ToolbarText(FileName(s.first.source()));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s\n%s", s.first.source().c_str(), s.first.trace().meta.argv.c_str());
  ToolbarText("model trace: " + s.first.Describe(), &kDimTextColor);
  if (!s.second) return;
  ToolbarText("vs " + FileName(s.second->source()));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s\n%s", s.second->source().c_str(), s.second->trace().meta.argv.c_str());
  ToolbarText(BackendLabel(s.second->trace().meta), &kDimTextColor);
  const bool agree = s.diff->differences.empty();
  ImGui::PushStyleColor(ImGuiCol_Text, agree ? ImVec4(0.4f, 0.9f, 0.4f, 1) : ToVec4(kDiffColor));
  ImGui::TextWrapped("%s", s.diff->summary.c_str());
  ImGui::PopStyleColor();
}

void DrawModelWindow(App& app, const Rect& area) {
  HandleModelKeys(app);
  const float pad = 6;
  const float tree_w = std::round(area.width() * 0.64f);
  DrawTreePanel(app, Rect{area.x0, area.y0, area.x0 + tree_w, area.y1});
  const float x0 = area.x0 + tree_w + pad;
  const float rank_h = app.model->diff ? 118 : 78;
  DrawRankPicker(app, Rect{x0, area.y0, area.x1, area.y0 + rank_h});
  const float y = area.y0 + rank_h + pad;
  if (app.model->diff) {
    const float details_h = std::round((area.y1 - y) * 0.55f);
    DrawDetailsPanel(app, Rect{x0, y, area.x1, y + details_h});
    DrawDifferencesPanel(app, Rect{x0, y + details_h + pad, area.x1, area.y1});
  } else {
    DrawDetailsPanel(app, Rect{x0, y, area.x1, area.y1});
  }
}

}  // namespace dtsim::viewer
