// The timeline: initial → each step → final, with playback controls, the frame strip, the step's
// collective and the bytes each rank sends and receives (model/timeline_layout.h).
#include <GLFW/glfw3.h>  // key codes (ImGui 1.86 indexes keys by the backend's codes)
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>

#include "dtsim/trace/model_trace.h"
#include "panels.h"
#include "viewer/model/find.h"
#include "viewer/model/rank_details.h"
#include "viewer/model/timeline_layout.h"

namespace dtsim::viewer {

void DrawTimelinePanel(App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("timeline", ImVec2(area.width(), area.height()), true);
  const TraceModel& model = app.shown();
  const int64_t n = model.num_frames();
  ViewState& v = app.view;
  // Playback controls.
  if (ImGui::Button("|<")) v.frame = 0;
  ImGui::SameLine();
  if (ImGui::Button("<")) v.frame = PreviousFrame(v.frame, n);
  ImGui::SameLine();
  if (ImGui::Button(v.playing ? "Pause" : "Play ")) v.playing = !v.playing;
  ImGui::SameLine();
  if (ImGui::Button(">")) v.frame = NextFrame(v.frame, n);
  ImGui::SameLine();
  if (ImGui::Button(">|")) v.frame = n - 1;
  int frame = static_cast<int>(v.frame);
  const std::string label = model.frame(v.frame).label;
  const float slider_w = std::max(120.0f, area.width() * 0.3f);
  SameLineIfFits(slider_w);
  ImGui::SetNextItemWidth(slider_w);
  if (ImGui::SliderInt("##frame", &frame, 0, static_cast<int>(n - 1), label.c_str()))
    v.frame = frame;
  float speed = static_cast<float>(v.seconds_per_frame);
  SameLineIfFits(110 + ImGui::CalcTextSize("s/step").x + 8);
  ImGui::SetNextItemWidth(110);
  if (ImGui::SliderFloat("s/step", &speed, 0.1f, 3.0f, "%.1f s")) v.seconds_per_frame = speed;

  // Find steps by collective kind or mesh dim (Ctrl+F); Enter or F3 goes to the next match,
  // Shift+F3 to the previous one.
  const ImGuiIO& io = ImGui::GetIO();
  const float find_w = 150;
  SameLineIfFits(find_w + 150);
  if (io.KeyCtrl && ImGui::IsKeyPressed(GLFW_KEY_F, false)) ImGui::SetKeyboardFocusHere();
  ImGui::SetNextItemWidth(find_w);
  const bool entered =
      ImGui::InputTextWithHint("##find_step", "find step: all_gather, tp", &app.find_text,
                               ImGuiInputTextFlags_EnterReturnsTrue);
  if (entered) ImGui::SetKeyboardFocusHere(-1);  // stay in the box: Enter again, the next match
  const std::vector<int64_t> matches = FindSteps(model, app.find_text);
  if (!app.find_text.empty()) {
    ImGui::SameLine();
    auto next = [&](bool forward) {
      if (matches.empty()) return;
      if (forward) {
        auto it = std::upper_bound(matches.begin(), matches.end(), v.frame);
        v.frame = it == matches.end() ? matches.front() : *it;  // wraps, as find does
      } else {
        auto it = std::lower_bound(matches.begin(), matches.end(), v.frame);
        v.frame = it == matches.begin() ? matches.back() : *(it - 1);
      }
    };
    if (matches.empty()) {
      ImGui::TextColored(ImVec4(0.92f, 0.3f, 0.3f, 1), "no step matches");
    } else {
      const auto at = std::find(matches.begin(), matches.end(), v.frame);
      ImGui::Text(
          "%s%zu match%s",
          at == matches.end() ? "" : (std::to_string(at - matches.begin() + 1) + "/").c_str(),
          matches.size(), matches.size() == 1 ? "" : "es");
      ImGui::SameLine();
      if (ImGui::SmallButton("<##find")) next(false);
      ImGui::SameLine();
      if (ImGui::SmallButton(">##find")) next(true);
    }
    const bool f3 = ImGui::IsKeyPressed(GLFW_KEY_F3, false);
    if (entered || f3) next(!(f3 && io.KeyShift));
  }

  // The frame strip.
  const TextMetrics tm = CurrentTextMetrics();
  const float strip_h = std::round(tm.line_height * 2.2f);
  ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::InvisibleButton("frame_strip", ImVec2(std::max(8.0f, avail.x), strip_h));
  const bool strip_hovered = ImGui::IsItemHovered();
  const bool strip_clicked = ImGui::IsItemClicked(ImGuiMouseButton_Left);
  const TraceDiff* diff = app.shown_diff();
  const DrawList strip =
      LayoutFrameStrip(model, diff ? diff->frame_differs : std::vector<uint8_t>{}, v.frame,
                       Rect{0, 0, std::max(8.0f, avail.x), strip_h}, tm, matches);
  Paint(app, "frames", strip, origin.x, origin.y);
  if (strip_hovered) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    if (auto hit = HitTest(strip, m.x - origin.x, m.y - origin.y, Role::kFrameBox)) {
      const int32_t f = strip.rects[*hit].frame;
      ImGui::SetTooltip("%s", model.frame(f).title.c_str());
      if (strip_clicked) v.frame = f;
    }
  }

  // The step: what runs, its groups, its time.
  const Frame& fr = model.frame(v.frame);
  ImGui::TextUnformatted(fr.title.c_str());
  if (fr.kind == Frame::Kind::kAfterStep) {
    const TraceStep& step = model.trace().steps[fr.step];
    int64_t lo = INT64_MAX, hi = 0, total = 0;
    for (int64_t p = 0; p < model.world_size(); ++p) {
      lo = std::min(lo, fr.bytes_sent[p]);
      hi = std::max(hi, fr.bytes_sent[p]);
      total += fr.bytes_sent[p];
    }
    char buf[256];
    std::snprintf(
        buf, sizeof buf, "%zu group%s of %zu ranks  est %.2f us  sent/rank %s..%s  total %s%s",
        fr.groups.size(), fr.groups.size() == 1 ? "" : "s",
        fr.groups.empty() ? 0 : fr.groups[0].size(), step.plan.est_us, BytesText(lo).c_str(),
        BytesText(hi).c_str(), BytesText(total).c_str(), fr.bytes_observed ? "" : " (planned)");
    ImGui::TextUnformatted(buf);
    if (!fr.time_us.empty()) {
      const double slowest = *std::max_element(fr.time_us.begin(), fr.time_us.end());
      std::snprintf(buf, sizeof buf, "measured: slowest rank %.1f us", slowest);
      ImGui::TextUnformatted(buf);
    }
  } else {
    ImGui::TextUnformatted(fr.kind == Frame::Kind::kInitial ? "the layout before any step"
                                                            : "the layout at the end");
  }

  // Bytes per rank.
  origin = ImGui::GetCursorScreenPos();
  avail = ImGui::GetContentRegionAvail();
  if (avail.x >= 8 && avail.y >= 8) {
    ImGui::InvisibleButton("bytes_chart", avail);
    const bool hovered = ImGui::IsItemHovered();
    const bool clicked = ImGui::IsItemClicked(ImGuiMouseButton_Left);
    const Highlight hl = ComputeHighlight(model, diff, v);
    const BytesChart chart = LayoutBytesChart(model, fr, hl, Rect{0, 0, avail.x, avail.y}, tm);
    Paint(app, "bytes", chart.draw, origin.x, origin.y);
    if (hovered) {
      const ImVec2 m = ImGui::GetIO().MousePos;
      if (auto hit = HitTest(chart.draw, m.x - origin.x, m.y - origin.y, Role::kBar)) {
        const DrawRect& bar = chart.draw.rects[*hit];
        const int64_t p = model.GetPosition(bar.rank);
        if (bar.rank_end < 0) {
          app.pending_hovered_rank = bar.rank;
          app.pending_hover_panel = "bytes";
          ImGui::SetTooltip("rank %lld: sent %s, received %s", static_cast<long long>(bar.rank),
                            BytesText(fr.bytes_sent[p]).c_str(),
                            BytesText(fr.bytes_received[p]).c_str());
          if (clicked) v.selected_rank = v.selected_rank == bar.rank ? -1 : bar.rank;
        } else {
          ImGui::SetTooltip("ranks %lld.. (%lld per bar): the largest bytes of the bucket",
                            static_cast<long long>(bar.rank),
                            static_cast<long long>(chart.ranks_per_bar));
        }
      }
    }
  }
  ImGui::EndChild();
}

}  // namespace dtsim::viewer
