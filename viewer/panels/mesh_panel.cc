// The mesh panel: the device mesh as grids of rank cells (model/mesh_layout.h), dim pickers, hover
// and selection.
#include <imgui.h>

#include "panels.h"
#include "viewer/model/colors.h"
#include "viewer/model/mesh_layout.h"
#include "viewer/model/rank_details.h"

namespace dtsim::viewer {
namespace {

// A combo over the mesh dims; returns true when the user picked another one.
bool DimCombo(const char* label, const DeviceMesh& mesh, int* dim) {
  const std::string current = mesh.DimLabel(*dim) + " (" + std::to_string(mesh.size(*dim)) + ")";
  bool changed = false;
  ImGui::SetNextItemWidth(110);
  if (ImGui::BeginCombo(label, current.c_str())) {
    for (int d = 0; d < mesh.ndim(); ++d) {
      const std::string item = mesh.DimLabel(d) + " (" + std::to_string(mesh.size(d)) + ")";
      if (ImGui::Selectable(item.c_str(), d == *dim)) {
        changed = d != *dim;
        *dim = d;
      }
    }
    ImGui::EndCombo();
  }
  return changed;
}

}  // namespace

void DrawMeshPanel(App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("mesh", ImVec2(area.width(), area.height()), true);
  const TraceModel& model = app.shown();
  const DeviceMesh& mesh = model.mesh();
  ImGui::TextUnformatted(("Mesh  " + mesh.ToString()).c_str());
  MeshGrid grid = ResolveMeshGrid(mesh, app.view);
  if (mesh.ndim() >= 2) {
    int row = grid.row_dim, col = grid.col_dim;
    ImGui::SameLine();
    if (DimCombo("rows##mesh", mesh, &row)) {
      if (row == col) col = grid.row_dim;  // picking the other axis's dim swaps them
    }
    ImGui::SameLine();
    if (DimCombo("cols##mesh", mesh, &col)) {
      if (col == row) row = grid.col_dim;
    }
    app.view.mesh_row_dim = row;
    app.view.mesh_col_dim = col;
    grid = ResolveMeshGrid(mesh, app.view);
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (avail.x < 8 || avail.y < 8) {
    ImGui::EndChild();
    return;
  }
  ImGui::InvisibleButton("mesh_canvas", avail);
  const bool hovered = ImGui::IsItemHovered();
  const bool clicked = ImGui::IsItemClicked(ImGuiMouseButton_Left);
  const Frame& frame = model.frame(app.view.frame);
  const Highlight hl = ComputeHighlight(model, app.shown_diff(), app.view);
  const MeshLayout layout =
      LayoutMesh(model, frame, hl, grid, Rect{0, 0, avail.x, avail.y}, CurrentTextMetrics());
  Paint(app, "mesh", layout.draw, origin.x, origin.y);
  if (hovered) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    if (auto hit = HitTest(layout.draw, m.x - origin.x, m.y - origin.y, Role::kMeshCell)) {
      const int64_t rank = layout.draw.rects[*hit].rank;
      app.pending_hovered_rank = rank;
      ImGui::BeginTooltip();
      for (const std::string& line : RankDetails(model, app.view.frame, model.GetPosition(rank),
                                                 app.other(), app.shown_diff())) {
        ImGui::TextUnformatted(line.c_str());
      }
      if (layout.aggregate > 1) {
        ImGui::TextUnformatted(("(cells are aggregated " + std::to_string(layout.aggregate) + "x" +
                                std::to_string(layout.aggregate) + "; showing the first rank)")
                                   .c_str());
      }
      ImGui::EndTooltip();
      if (clicked) app.view.selected_rank = app.view.selected_rank == rank ? -1 : rank;
    } else if (clicked) {
      app.view.selected_rank = -1;
    }
  }
  ImGui::EndChild();
}

}  // namespace dtsim::viewer
