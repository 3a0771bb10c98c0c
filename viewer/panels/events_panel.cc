// The events window (a recording's run events, alone or two compared): the rank strip, the
// selected rank's events, the details of the selected event and the divergences
// (model/events_view.h lays them out).
#include <GLFW/glfw3.h>  // key codes (ImGui 1.86 indexes keys by the backend's codes)
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>

#include "dtsim/layout/error.h"
#include "panels.h"
#include "viewer/model/colors.h"
#include "viewer/model/find.h"

namespace dtsim::viewer {
namespace {

// Keyboard: Up/Down (PageUp/PageDown, Home/End) move through the rank's events, minus / equal the
// previous / next rank, F3 / Shift+F3 the next / previous diverging rank.
void HandleEventsKeys(App& app) {
  if (ImGui::GetIO().WantTextInput) return;
  EventsSession& s = *app.events;
  if (ImGui::IsKeyPressed(GLFW_KEY_DOWN)) MoveEventSelection(s, 1);
  if (ImGui::IsKeyPressed(GLFW_KEY_UP)) MoveEventSelection(s, -1);
  if (ImGui::IsKeyPressed(GLFW_KEY_PAGE_DOWN)) MoveEventSelection(s, 20);
  if (ImGui::IsKeyPressed(GLFW_KEY_PAGE_UP)) MoveEventSelection(s, -20);
  if (ImGui::IsKeyPressed(GLFW_KEY_HOME, false)) MoveEventSelection(s, -(int64_t{1} << 40));
  if (ImGui::IsKeyPressed(GLFW_KEY_END, false)) MoveEventSelection(s, int64_t{1} << 40);
  if (ImGui::IsKeyPressed(GLFW_KEY_F3, false))
    SelectNextDivergence(s, ImGui::GetIO().KeyShift ? -1 : 1);
  if (ImGui::IsKeyPressed(GLFW_KEY_MINUS) && s.view.rank > 0) SelectEventsRank(s, s.view.rank - 1);
  if (ImGui::IsKeyPressed(GLFW_KEY_EQUAL) && s.view.rank + 1 < s.world_size())
    SelectEventsRank(s, s.view.rank + 1);
}

constexpr float kCell = 34;

void DrawRankStrip(App& app, const Rect& area) {
  EventsSession& s = *app.events;
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("event_ranks", ImVec2(area.width(), area.height()), true);
  const std::vector<int64_t> diverging = RanksThatDiverge(s);
  ImGui::Text("Ranks (%lld)", static_cast<long long>(s.world_size()));
  ImGui::SameLine();
  if (diverging.empty()) {
    ImGui::TextColored(ToVec4(kDimTextColor), s.second ? "none diverges" : "click one to show it");
  } else {
    ImGui::TextColored(ToVec4(kDiffColor), "%zu %s (red); F3 steps through them", diverging.size(),
                       s.second ? "diverge" : "stuck");
  }
  const TextMetrics metrics = CurrentTextMetrics();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("event_rank_cells", avail, false);
  const float width = ImGui::GetContentRegionAvail().x;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const DrawList strip = LayoutRankStrip(s, width, kCell, metrics);
  ImGui::InvisibleButton("cells", ImVec2(width, std::max(1.0f, RankStripHeight(s, width, kCell))));
  const ImGuiIO& io = ImGui::GetIO();
  if (ImGui::IsItemHovered()) {
    if (const std::optional<size_t> hit =
            HitTest(strip, io.MousePos.x - origin.x, io.MousePos.y - origin.y, Role::kMeshCell)) {
      const int64_t rank = strip.rects[*hit].rank;
      const EventDivergence* d = DivergenceOf(s, rank);
      ImGui::SetTooltip("rank %lld%s%s", static_cast<long long>(rank), d ? ": " : "",
                        d ? StrCat("event ", d->index, ": ", d->where, ": ", d->what).c_str() : "");
      if (ImGui::IsItemClicked(ImGuiMouseButton_Left)) SelectEventsRank(s, rank);
    }
  }
  Paint(app, "event_ranks", strip, origin.x, origin.y);
  ImGui::EndChild();
  ImGui::EndChild();
}

void DrawEventList(App& app, const Rect& area) {
  EventsSession& s = *app.events;
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("events", ImVec2(area.width(), area.height()), true);
  const std::vector<EventRow> rows = EventRows(s);
  ImGui::Text("Rank %lld: %zu %s", static_cast<long long>(s.view.rank), rows.size(),
              s.collectives_only ? "collectives" : "events (DTensor ops and collectives)");
  SameLineIfFits(ImGui::CalcTextSize("columns: op, module (pass), placements, output hash").x);
  ImGui::TextColored(ToVec4(kDimTextColor), "%s",
                     s.second ? "columns: op, module (pass), placements, output hash first | second"
                              : "columns: op, module (pass), placements or state, output hash");
  const TextMetrics metrics = CurrentTextMetrics();
  const float row_h = std::round(metrics.line_height + 6);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("event_rows", avail, false);
  const float view_h = ImGui::GetWindowHeight();
  const float total = static_cast<float>(rows.size()) * row_h;
  float scroll = ImGui::GetScrollY();
  if (s.view.scroll_to_selected && s.view.event >= 0) {
    const float y = static_cast<float>(s.view.event) * row_h;
    if (y < scroll || y + row_h > scroll + view_h) {
      scroll = std::clamp(y - view_h / 3, 0.0f, std::max(0.0f, total - view_h));
      ImGui::SetScrollY(scroll);
    }
  }
  s.view.scroll_to_selected = false;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float row_w = ImGui::GetContentRegionAvail().x;
  ImGui::InvisibleButton("rows", ImVec2(row_w, std::max(total, 1.0f)));
  if (ImGui::IsItemHovered()) {
    const float my = ImGui::GetIO().MousePos.y - origin.y;
    const int64_t i = my < 0 ? -1 : static_cast<int64_t>(my / row_h);
    if (i >= 0 && i < static_cast<int64_t>(rows.size())) {
      const EventRow& r = rows[i];
      ImGui::SetTooltip("event %lld: %s\n%s\n%s", static_cast<long long>(r.index), r.op.c_str(),
                        r.where.c_str(), r.placements.c_str());
      if (ImGui::IsItemClicked(ImGuiMouseButton_Left)) s.view.event = r.index;
    }
  }
  const Rect visible{0, scroll, row_w, scroll + view_h};
  Paint(app, "event_rows",
        LayoutEventRows(rows, s.view.event, s.second.has_value(), row_w, row_h, scroll,
                        scroll + view_h, metrics),
        origin.x, origin.y, &visible);
  ImGui::EndChild();
  ImGui::EndChild();
}

void DrawEventDetails(App& app, const Rect& area) {
  DetailsPanel("event_details", area, EventDetails(*app.events));
}

void DrawDivergences(App& app, const Rect& area) {
  EventsSession& s = *app.events;
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("event_divergences", ImVec2(area.width(), area.height()), true);
  if (s.divergences.empty()) {
    ImGui::TextUnformatted(s.second ? "Divergences: none" : "Stuck collectives: none");
  } else {
    ImGui::Text("%s: %zu (click one to show it)", s.second ? "Divergences" : "Stuck collectives",
                s.divergences.size());
    ImGui::SameLine();
    if (ImGui::SmallButton("first")) SelectFirstDivergence(s);
    const size_t shown = std::min<size_t>(s.divergences.size(), 500);
    for (size_t i = 0; i < shown; ++i) {
      const EventDivergence& d = s.divergences[i];
      ImGui::PushID(static_cast<int>(i));
      ImGui::PushStyleColor(ImGuiCol_Text, ToVec4(kDiffColor));
      const std::string text =
          StrCat("rank ", d.rank, ", event ", d.index, ": ", d.where, ": ", d.what);
      if (ImGui::Selectable(text.c_str(), false)) {
        s.view.rank = d.rank;
        s.view.event = d.index;
        s.view.scroll_to_selected = true;
      }
      ImGui::PopStyleColor();
      ImGui::PopID();
    }
  }
  ImGui::EndChild();
}

}  // namespace

void DrawEventsToolbar(App& app) {
  EventsSession& s = *app.events;
  GoToBox(app, "go to rank: 3", [&s](const std::string& text) {
    SelectEventsRank(s, ParseRankQuery(DeviceMesh::Create({s.world_size()}), text));
  });
  ToolbarText(FileName(s.first_path));
  ToolbarText(StrCat("recording (", s.first.backend, ")"), &kDimTextColor);
  if (s.second) {
    ToolbarText("vs " + FileName(s.second_path));
    ToolbarText(StrCat("recording (", s.second->backend, ")"), &kDimTextColor);
  }
  const bool red =
      !s.divergences.empty() ||
      (s.diff && (!s.diff->ranks_only_in_a.empty() || !s.diff->ranks_only_in_b.empty()));
  ImGui::PushStyleColor(ImGuiCol_Text, red ? ToVec4(kDiffColor) : ImVec4(0.4f, 0.9f, 0.4f, 1));
  ImGui::TextWrapped("%s", s.summary.c_str());
  ImGui::PopStyleColor();
}

void DrawEventsWindow(App& app, const Rect& area) {
  HandleEventsKeys(app);
  const float pad = 6;
  const float list_w = std::round(area.width() * 0.64f);
  const float strip_w = list_w - 16;
  const float strip_h =
      std::min(std::round(area.height() * 0.3f), RankStripHeight(*app.events, strip_w, kCell) +
                                                     ImGui::GetFrameHeightWithSpacing() + 16);
  DrawRankStrip(app, Rect{area.x0, area.y0, area.x0 + list_w, area.y0 + strip_h});
  DrawEventList(app, Rect{area.x0, area.y0 + strip_h + pad, area.x0 + list_w, area.y1});
  const float x0 = area.x0 + list_w + pad;
  const float details_h = std::round(area.height() * 0.55f);
  DrawEventDetails(app, Rect{x0, area.y0, area.x1, area.y0 + details_h});
  DrawDivergences(app, Rect{x0, area.y0 + details_h + pad, area.x1, area.y1});
}

}  // namespace dtsim::viewer
