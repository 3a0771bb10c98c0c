// The diff panel (two traces): the summary line and the differences at the current frame.
#include <imgui.h>

#include "panels.h"
#include "viewer/model/colors.h"

namespace dtsim::viewer {

void DrawDiffPanel(App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("diff", ImVec2(area.width(), area.height()), true);
  const TraceModel& model = app.shown();
  const TraceDiff* diff = app.shown_diff();
  const ImVec4 red(kDiffColor.r / 255.f, kDiffColor.g / 255.f, kDiffColor.b / 255.f, 1);
  if (diff != nullptr) {
    const std::vector<const TraceDifference*> here = diff->At(app.view.frame, model.num_frames());
    if (diff->differences.empty()) {
      ImGui::TextUnformatted("No difference at any frame.");
    } else {
      if (diff->first_frame && ImGui::SmallButton("go to the first difference"))
        app.view.frame = *diff->first_frame;
      ImGui::SameLine();
      ImGui::Text("%zu at this frame, %zu in all", here.size(), diff->differences.size());
      for (const TraceDifference* d : here) {
        ImGui::PushStyleColor(ImGuiCol_Text, red);
        ImGui::TextWrapped("%s: %s", Where(model, *d).c_str(), d->what.c_str());
        ImGui::PopStyleColor();
      }
    }
  }
  ImGui::EndChild();
}

}  // namespace dtsim::viewer
