// The viewer's window: the toolbar, the panels arranged over the display, keyboard control,
// playback, and the error panel that replaces them when a trace cannot be opened.
#include <imgui.h>

#include <algorithm>

#include "panels.h"
#include "viewer/model/colors.h"

namespace dtsim::viewer {
namespace {

ImVec4 ToVec4(Rgba c) { return ImVec4(c.r / 255.f, c.g / 255.f, c.b / 255.f, c.a / 255.f); }

std::string Describe(const TraceModel& m) {
  const TraceMeta& meta = m.trace().meta;
  return meta.backend + (meta.backend == "local" ? " (simulated)" : " (real)") + ", " +
         std::to_string(m.world_size()) + " ranks, " + std::to_string(m.trace().steps.size()) +
         " steps" + (meta.planner.empty() ? "" : ", planner " + meta.planner) +
         (m.has_hashes() ? "" : ", no hashes");
}

void HandleKeys(App& app) {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput || !app.loaded()) return;
  const int64_t n = app.shown().num_frames();
  ViewState& v = app.view;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))) v.frame = NextFrame(v.frame, n);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow)))
    v.frame = PreviousFrame(v.frame, n);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home))) v.frame = 0;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_End))) v.frame = n - 1;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Space), false)) v.playing = !v.playing;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false)) v.selected_rank = -1;
  if (app.second && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Tab), false))
    v.show_second = !v.show_second;
}

}  // namespace

void DrawToolbar(App& app) {
  ImGui::TextUnformatted("dtsim-viewer");
  ImGui::SameLine();
  if (!app.loaded()) {
    ImGui::TextUnformatted("(no trace)");
    return;
  }
  const ImVec4 dim = ToVec4(kDimTextColor);
  // File names (the full path on hover) and what each trace is.
  auto name = [](const TraceModel& m) {
    const std::string& p = m.source();
    const size_t slash = p.find_last_of('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
  };
  auto path_tooltip = [](const TraceModel& m) {
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s\n%s", m.source().c_str(), m.trace().meta.argv.c_str());
  };
  if (!app.second) {
    ImGui::TextUnformatted(name(*app.first).c_str());
    path_tooltip(*app.first);
    ImGui::SameLine();
    ImGui::TextColored(dim, "%s", Describe(*app.first).c_str());
    return;
  }
  int which = app.view.show_second ? 1 : 0;
  if (ImGui::RadioButton(("first: " + name(*app.first)).c_str(), &which, 0))
    app.view.show_second = false;
  path_tooltip(*app.first);
  ImGui::SameLine();
  ImGui::TextColored(dim, "%s", Describe(*app.first).c_str());
  ImGui::SameLine();
  ImGui::TextColored(dim, "  (Tab switches)");
  if (ImGui::RadioButton(("second: " + name(*app.second)).c_str(), &which, 1))
    app.view.show_second = true;
  path_tooltip(*app.second);
  ImGui::SameLine();
  ImGui::TextColored(dim, "%s", Describe(*app.second).c_str());
  const bool agree = app.diff->differences.empty();
  ImGui::PushStyleColor(ImGuiCol_Text, agree ? ImVec4(0.4f, 0.9f, 0.4f, 1) : ToVec4(kDiffColor));
  ImGui::TextWrapped("%s", app.diff->summary.c_str());
  ImGui::PopStyleColor();
}

void DrawErrorPanel(const App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("error", ImVec2(area.width(), area.height()), true);
  ImGui::PushStyleColor(ImGuiCol_Text, ToVec4(kDiffColor));
  ImGui::TextUnformatted("Cannot open the trace:");
  ImGui::TextWrapped("%s", app.error.c_str());
  ImGui::PopStyleColor();
  ImGui::Spacing();
  for (const std::string& p : app.paths) ImGui::BulletText("%s", p.c_str());
  ImGui::Spacing();
  ImGui::TextWrapped(
      "Open a trace written by `dtsim redistribute --trace out.json` (format dtsim-trace, version "
      "1), "
      "or two traces of the same redistribution to compare them: dtsim-viewer sim.json real.json");
  ImGui::EndChild();
}

void DrawViewer(App& app, float width, float height, double now_s) {
  // Hover found in the last frame drives this frame's highlight.
  app.view.hovered_rank = app.pending_hovered_rank;
  app.view.hovered_block_ranks = std::move(app.pending_hovered_block_ranks);
  app.pending_hovered_rank = -1;
  app.pending_hovered_block_ranks.clear();
  app.recorded.clear();

  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(width, height));
  ImGui::Begin("dtsim-viewer", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoScrollbar);
  HandleKeys(app);
  DrawToolbar(app);
  const float pad = 6;
  const float top = ImGui::GetCursorScreenPos().y + 2;
  if (!app.loaded()) {
    DrawErrorPanel(app, Rect{pad, top, width - pad, height - pad});
    ImGui::End();
    return;
  }
  ViewState& v = app.view;
  const int64_t n = app.shown().num_frames();
  v.frame = std::clamp<int64_t>(v.frame, 0, n - 1);
  if (v.playing && now_s - app.last_advance_s >= v.seconds_per_frame) {
    v.frame = NextFrame(v.frame, n);
    app.last_advance_s = now_s;
  }
  const float rest = height - top - pad;
  const float top_h = std::round(rest * 0.6f);
  const float mesh_w = std::round(width * 0.4f);
  DrawMeshPanel(app, Rect{pad, top, mesh_w, top + top_h});
  DrawTensorPanel(app, Rect{mesh_w + pad, top, width - pad, top + top_h});
  const float bottom = top + top_h + pad;
  const float timeline_w = std::round(width * 0.64f);
  DrawTimelinePanel(app, Rect{pad, bottom, timeline_w, height - pad});
  if (app.second) {
    const float mid = std::round((bottom + height - pad) / 2);
    DrawRankPanel(app, Rect{timeline_w + pad, bottom, width - pad, mid});
    DrawDiffPanel(app, Rect{timeline_w + pad, mid + pad, width - pad, height - pad});
  } else {
    DrawRankPanel(app, Rect{timeline_w + pad, bottom, width - pad, height - pad});
  }
  ImGui::End();
}

}  // namespace dtsim::viewer
