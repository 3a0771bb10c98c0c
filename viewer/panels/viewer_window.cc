// The viewer's window: the toolbar, the panels arranged over the display, keyboard control,
// playback, and the error panel that replaces them when a trace cannot be opened.
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
  // Stepping stops at the first and last frame (only Play wraps).
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))) v.frame = NextFrame(v.frame, n);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow)))
    v.frame = PreviousFrame(v.frame, n);
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home))) v.frame = 0;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_End))) v.frame = n - 1;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Space), false)) v.playing = !v.playing;
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false)) v.selected_rank = -1;
  if (app.second && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Tab), false))
    v.show_second = !v.show_second;
  if (!app.recording.empty()) {
    const int64_t last = static_cast<int64_t>(app.recording.size()) - 1;
    if (ImGui::IsKeyPressed(GLFW_KEY_PAGE_DOWN) && app.recording_index < last)
      ShowRecorded(app, app.recording_index + 1);
    if (ImGui::IsKeyPressed(GLFW_KEY_PAGE_UP) && app.recording_index > 0)
      ShowRecorded(app, app.recording_index - 1);
  }
  if (!io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_R, false)) {
    v.mesh_zoom = Zoom{};
    v.tensor_zoom = Zoom{};
  }
}

// The open box: a path (and a second one to compare), the recent traces, an Open button. Used in
// the Open popup and on the error screen.
void DrawOpenBox(App& app) {
  ImGui::TextUnformatted("Open a trace (a second one to compare it with is optional):");
  if (app.focus_open) {
    ImGui::SetKeyboardFocusHere();
    app.focus_open = false;
  }
  ImGui::SetNextItemWidth(std::min(560.0f, ImGui::GetContentRegionAvail().x));
  bool go = ImGui::InputTextWithHint("##open_path", "path/to/trace.json", &app.open_path,
                                     ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SetNextItemWidth(std::min(560.0f, ImGui::GetContentRegionAvail().x));
  go |= ImGui::InputTextWithHint("##open_second", "second trace to compare (optional)",
                                 &app.open_second, ImGuiInputTextFlags_EnterReturnsTrue);
  go |= ImGui::Button("Open");
  if (!app.recent.empty()) {
    ImGui::TextUnformatted("Recent (click to fill in, double-click to open):");
    for (size_t i = 0; i < app.recent.size(); ++i) {
      ImGui::PushID(static_cast<int>(i));
      if (ImGui::Selectable(app.recent[i].c_str(), app.recent[i] == app.open_path,
                            ImGuiSelectableFlags_AllowDoubleClick)) {
        app.open_path = app.recent[i];
        if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) go = true;
      }
      ImGui::PopID();
    }
  }
  if (go && !app.open_path.empty()) {
    std::vector<std::string> paths{app.open_path};
    if (!app.open_second.empty()) paths.push_back(app.open_second);
    OpenTraces(app, paths);
    ImGui::CloseCurrentPopup();
  }
}

}  // namespace

void OpenTraces(App& app, const std::vector<std::string>& paths) {
  LoadTraces(app, paths);
  if (!app.opened()) return;
  RememberRecent(app, paths);
  WriteRecentFiles(app.recent_file, app.recent);
}

void GoToBox(App& app, const char* hint, const std::function<void(const std::string&)>& go) {
  const float box_w = 170;
  SameLineIfFits(box_w + 90);
  if (ImGui::GetIO().KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_G, false))
    ImGui::SetKeyboardFocusHere();
  ImGui::SetNextItemWidth(box_w);
  if (ImGui::InputTextWithHint("##goto", hint, &app.goto_text,
                               ImGuiInputTextFlags_EnterReturnsTrue)) {
    try {
      go(app.goto_text);
      app.goto_error.clear();
    } catch (const InputError& e) {
      app.goto_error = e.what();
    }
  }
  if (!app.goto_error.empty()) ToolbarText(app.goto_error, &kDiffColor);
}

void ToolbarText(const std::string& text, const Rgba* color) {
  SameLineIfFits(ImGui::CalcTextSize(text.c_str()).x);
  if (color != nullptr) {
    ImGui::TextColored(ToVec4(*color), "%s", text.c_str());
  } else {
    ImGui::TextUnformatted(text.c_str());
  }
}

// Go to a rank (Ctrl+G): a number or a coordinate; Enter selects, centres and highlights it.
void DrawGoTo(App& app) {
  GoToBox(app, "go to rank: 1380 or 5,12,4", [&app](const std::string& text) {
    GoToRank(app.view, ParseRankQuery(app.shown(), text));
  });
}

void DrawToolbar(App& app) {
  ImGui::TextUnformatted("dtsim-viewer");
  ImGui::SameLine();
  const bool ctrl_o = ImGui::GetIO().KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_O, false);
  if (ctrl_o) app.focus_open = true;
  if ((ImGui::SmallButton("Open... (Ctrl+O)") || ctrl_o) && app.opened())
    ImGui::OpenPopup("Open a trace");
  if (ImGui::BeginPopup("Open a trace")) {
    DrawOpenBox(app);
    ImGui::EndPopup();
  }
  if (app.model) {
    DrawModelToolbar(app);
    return;
  }
  if (app.events) {
    DrawEventsToolbar(app);
    return;
  }
  if (!app.loaded()) {
    ImGui::SameLine();
    ImGui::TextUnformatted("(no trace)");
    return;
  }
  DrawGoTo(app);
  ImGui::SameLine();
  // File names (the full path on hover) and what each trace is.
  auto name = [](const TraceModel& m) { return FileName(m.source()); };
  auto path_tooltip = [](const TraceModel& m) {
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s\n%s", m.source().c_str(), m.trace().meta.argv.c_str());
  };
  if (!app.recording.empty()) {
    // A recording: which recorded redistribution is drawn.
    const std::string current = app.recording[app.recording_index].title;
    SameLineIfFits(380);
    ImGui::SetNextItemWidth(380);
    if (ImGui::BeginCombo("##redistribution", current.c_str())) {
      for (size_t i = 0; i < app.recording.size(); ++i) {
        const bool selected = static_cast<int64_t>(i) == app.recording_index;
        if (ImGui::Selectable(app.recording[i].title.c_str(), selected) && !selected)
          ShowRecorded(app, static_cast<int64_t>(i));
      }
      ImGui::EndCombo();
    }
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip("%zu redistributions recorded; PageUp / PageDown step through them",
                        app.recording.size());
    }
    const std::string& note = app.recording[app.recording_index].collectives_note;
    if (!note.empty()) {
      SameLineIfFits(ImGui::CalcTextSize(note.c_str()).x);
      ImGui::TextColored(ToVec4(kAnomalyColor), "%s", note.c_str());
    }
    if (app.diff && !app.second) {
      // Ranks whose replicas disagree: the summary in the diff colour (the ranks are red).
      SameLineIfFits(ImGui::CalcTextSize(app.diff->summary.c_str()).x);
      ImGui::TextColored(ToVec4(kDiffColor), "%s", app.diff->summary.c_str());
    }
  }
  if (!app.second) {
    ToolbarText(name(*app.first));
    path_tooltip(*app.first);
    ToolbarText(Describe(*app.first), &kDimTextColor);
    return;
  }
  ImGui::NewLine();
  int which = app.view.show_second ? 1 : 0;
  if (ImGui::RadioButton(("first: " + name(*app.first)).c_str(), &which, 0))
    app.view.show_second = false;
  path_tooltip(*app.first);
  ToolbarText(Describe(*app.first), &kDimTextColor);
  ToolbarText("  (Tab switches)", &kDimTextColor);
  if (ImGui::RadioButton(("second: " + name(*app.second)).c_str(), &which, 1))
    app.view.show_second = true;
  path_tooltip(*app.second);
  ToolbarText(Describe(*app.second), &kDimTextColor);
  const bool agree = app.diff->differences.empty();
  ImGui::PushStyleColor(ImGuiCol_Text, agree ? ImVec4(0.4f, 0.9f, 0.4f, 1) : ToVec4(kDiffColor));
  ImGui::TextWrapped("%s", app.diff->summary.c_str());
  ImGui::PopStyleColor();
}

void DrawErrorPanel(App& app, const Rect& area) {
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
      "or two traces of the same redistribution to compare them: dtsim-viewer sim.json real.json; "
      "or a model trace of `dtsim model --trace model.json` (format dtsim-model-trace), alone or "
      "with a second one of the same run (a real run) to compare; or a recording (format "
      "dtsim-recording: dtsim record, dtsim run --trace, dtsim import-fr), alone or with a second "
      "one of the same job to compare their events.");
  ImGui::Spacing();
  ImGui::Separator();
  DrawOpenBox(app);
  ImGui::EndChild();
}

void DrawViewer(App& app, float width, float height, double now_s) {
  // Hover found in the last frame drives this frame's highlight.
  app.view.hovered_rank = app.pending_hovered_rank;
  app.view.hovered_block_ranks = std::move(app.pending_hovered_block_ranks);
  app.pending_hovered_rank = -1;
  app.pending_hovered_block_ranks.clear();
  app.recorded.clear();
  app.recorded_viewports.clear();

  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(width, height));
  app.pending_hover_panel.clear();
  ImGui::Begin("dtsim-viewer", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoScrollbar |
                   ImGuiWindowFlags_NoScrollWithMouse);
  HandleKeys(app);
  DrawToolbar(app);
  const float pad = 6;
  const float top = ImGui::GetCursorScreenPos().y + 2;
  if (app.model) {
    DrawModelWindow(app, Rect{pad, top, width - pad, height - pad});
    ImGui::End();
    return;
  }
  if (app.events) {
    DrawEventsWindow(app, Rect{pad, top, width - pad, height - pad});
    ImGui::End();
    return;
  }
  if (!app.loaded()) {
    DrawErrorPanel(app, Rect{pad, top, width - pad, height - pad});
    ImGui::End();
    return;
  }
  ViewState& v = app.view;
  const int64_t n = app.shown().num_frames();
  v.frame = std::clamp<int64_t>(v.frame, 0, n - 1);
  if (v.playing && now_s - app.last_advance_s >= v.seconds_per_frame) {
    v.frame = PlaybackFrame(v.frame, n);
    app.last_advance_s = now_s;
  }
  const float rest = height - top - pad;
  const float top_h = std::round(rest * 0.6f);
  const float mesh_w = std::round(width * 0.4f);
  DrawMeshPanel(app, Rect{pad, top, mesh_w, top + top_h});
  DrawTensorPanel(app, Rect{mesh_w + pad, top, width - pad, top + top_h});
  const float bottom = top + top_h + pad;
  if (app.shown_diff() != nullptr) {
    // Diff mode (two traces, or a recording whose replicas disagree): the rank and the diff panels
    // side by side, each of full height (stacked, the rank
    // panel overflowed).
    const float timeline_w = std::round(width * 0.52f);
    const float rank_w = std::round((width - timeline_w) / 2);
    DrawTimelinePanel(app, Rect{pad, bottom, timeline_w, height - pad});
    DrawRankPanel(app, Rect{timeline_w + pad, bottom, timeline_w + rank_w, height - pad});
    DrawDiffPanel(app, Rect{timeline_w + rank_w + pad, bottom, width - pad, height - pad});
  } else {
    const float timeline_w = std::round(width * 0.64f);
    DrawTimelinePanel(app, Rect{pad, bottom, timeline_w, height - pad});
    DrawRankPanel(app, Rect{timeline_w + pad, bottom, width - pad, height - pad});
  }
  ImGui::End();
}

}  // namespace dtsim::viewer
