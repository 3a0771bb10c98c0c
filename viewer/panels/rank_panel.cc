// The rank panel: everything about the selected (else the hovered) rank at the current frame.
#include <imgui.h>

#include "panels.h"
#include "viewer/model/rank_details.h"

namespace dtsim::viewer {

void DrawRankPanel(App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("rank", ImVec2(area.width(), area.height()), true);
  const TraceModel& model = app.shown();
  const int64_t rank = app.view.selected_rank >= 0 ? app.view.selected_rank : app.view.hovered_rank;
  auto pos = model.FindPosition(rank);
  if (!pos) {
    ImGui::TextUnformatted("Rank");
    ImGui::TextWrapped(
        "Hover a rank in the mesh, a block of the tensor or a bar to see it here; click to keep it "
        "selected (Esc clears).");
  } else {
    ImGui::Text("Rank %lld%s", static_cast<long long>(rank),
                app.view.selected_rank >= 0 ? " (selected)" : "");
    for (const std::string& line :
         RankDetails(model, app.view.frame, *pos, app.other(), app.shown_diff())) {
      ImGui::TextWrapped("%s", line.c_str());
    }
  }
  ImGui::EndChild();
}

}  // namespace dtsim::viewer
