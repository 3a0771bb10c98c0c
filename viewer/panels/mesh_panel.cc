// The mesh panel: the device mesh as grids of rank cells (model/mesh_layout.h), dim pickers, zoom
// and pan, hover and selection.
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "panels.h"
#include "viewer/model/colors.h"
#include "viewer/model/mesh_layout.h"
#include "viewer/model/rank_details.h"

namespace dtsim::viewer {
namespace {

constexpr float kComboWidth = 120;

std::string DimItem(const DeviceMesh& mesh, int d) {
  return DimName(mesh, d) + " (" + std::to_string(mesh.size(d)) + ")";
}

// A combo over the mesh dims; returns true when the user picked another one.
bool DimCombo(const char* label, const DeviceMesh& mesh, int* dim) {
  bool changed = false;
  ImGui::SetNextItemWidth(kComboWidth);
  if (ImGui::BeginCombo(label, DimItem(mesh, *dim).c_str())) {
    for (int d = 0; d < mesh.ndim(); ++d) {
      if (ImGui::Selectable(DimItem(mesh, d).c_str(), d == *dim)) {
        changed = d != *dim;
        *dim = d;
      }
    }
    ImGui::EndCombo();
  }
  return changed;
}

// Readable cells: every cell shows its rank number and its coordinate (the layout's semantic zoom),
// with a few pixels to spare for the rounding of the zoomed pitch, and no less than 56 px.
float ReadablePitch(const TraceModel& model, const TextMetrics& tm) {
  const DeviceMesh& mesh = model.mesh();
  std::vector<int64_t> last;  // the coordinate with the most digits
  for (int64_t d = 0; d < mesh.ndim(); ++d) last.push_back(mesh.size(d) - 1);
  return std::max({56.0f, CoordinateLevelPitch(tm) + 2, tm.Width(CellCoordinate(mesh, last)) + 8});
}

}  // namespace

void ZoomStatus(Zoom& zoom, const char* id, float right, float top) {
  if (zoom.identity()) return;
  // Over the canvas's top-right corner, so that nothing moves when the zoom starts.
  char text[32];
  std::snprintf(text, sizeof text, "%.1fx", static_cast<double>(zoom.scale));
  const ImGuiStyle& style = ImGui::GetStyle();
  const float w = ImGui::CalcTextSize(text).x + ImGui::CalcTextSize("fit (R)").x +
                  2 * style.FramePadding.x + style.ItemSpacing.x;
  ImGui::SetCursorScreenPos(ImVec2(right - w - 4, top + 2));
  ImGui::TextUnformatted(text);
  ImGui::SameLine();
  ImGui::PushID(id);
  if (ImGui::SmallButton("fit (R)")) zoom = Zoom{};
  ImGui::PopID();
}

void DrawMeshPanel(App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("mesh", ImVec2(area.width(), area.height()), true,
                    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  const TraceModel& model = app.shown();
  const DeviceMesh& mesh = model.mesh();
  ImGui::TextUnformatted("Mesh");
  MeshGrid grid = ResolveMeshGrid(mesh, app.view);
  // The pickers come first, so they stay where they are whatever the text after them says; they
  // wrap onto new lines in narrow panels.
  if (mesh.ndim() >= 2) {
    const float label_w = ImGui::CalcTextSize("rows").x + ImGui::GetStyle().ItemInnerSpacing.x;
    int row = grid.row_dim, col = grid.col_dim;
    SameLineIfFits(kComboWidth + label_w);
    if (DimCombo("rows##mesh", mesh, &row)) {
      if (row == col) col = grid.row_dim;  // picking the other axis's dim swaps them
    }
    SameLineIfFits(kComboWidth + label_w);
    if (DimCombo("cols##mesh", mesh, &col)) {
      if (col == row) row = grid.col_dim;
    }
    app.view.mesh_row_dim = row;
    app.view.mesh_col_dim = col;
    grid = ResolveMeshGrid(mesh, app.view);
  }
  const std::string title = mesh.ToString();
  SameLineIfFits(ImGui::CalcTextSize(title.c_str()).x);
  ImGui::TextUnformatted(title.c_str());
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (avail.x < 8 || avail.y < 8) {
    ImGui::EndChild();
    return;
  }
  const TextMetrics tm = CurrentTextMetrics();
  const Frame& frame = model.frame(app.view.frame);
  const Highlight hl = ComputeHighlight(model, app.shown_diff(), app.view);
  const Rect canvas{0, 0, avail.x, avail.y};
  Zoom& zoom = app.view.mesh_zoom;
  MeshLayout layout = LayoutMesh(model, frame, hl, grid, canvas, tm, zoom);
  if ((app.view.centre_pending & kCentreMesh) != 0) {
    // Go to a rank: zoom in until its cell is readable, then centre it.
    app.view.centre_pending &= ~kCentreMesh;
    if (auto p = model.FindPosition(app.view.centre_rank)) {
      const float cell = static_cast<float>(layout.pitch) / static_cast<float>(layout.aggregate);
      const float want = ReadablePitch(model, tm);
      if (cell < want) {
        zoom.scale = std::min(kMaxZoom, zoom.scale * want / std::max(cell, 0.01f));
        layout = LayoutMesh(model, frame, hl, grid, canvas, tm, zoom);
      }
      const Rect& c = layout.cells[*p];
      const Rect& vp = layout.viewport;
      CentreOn(zoom, (c.x0 + c.x1) / 2 - vp.x0 + zoom.pan_x, (c.y0 + c.y1) / 2 - vp.y0 + zoom.pan_y,
               vp.width(), vp.height());
      layout = LayoutMesh(model, frame, hl, grid, canvas, tm, zoom);
    }
  }
  const CanvasInput in = ZoomableCanvas("mesh_canvas", avail.x, avail.y, zoom, layout.viewport);
  if (in.zoom_factor != 1) {
    zoom = ZoomMeshAbout(model, frame, hl, grid, canvas, tm, zoom, in.zoom_factor, in.x, in.y);
  }
  ImGui::SetItemAllowOverlap();  // the zoom status's button lies over the canvas
  Paint(app, "mesh", layout.draw, origin.x, origin.y, &layout.viewport);
  ZoomStatus(zoom, "mesh_zoom", origin.x + avail.x, origin.y + layout.viewport.y0);
  if (in.hovered) {
    if (auto rank = layout.RankAt(in.x, in.y)) {
      app.pending_hovered_rank = *rank;
      app.pending_hover_panel = "mesh";
      // The rank panel shows the hovered rank in full unless another one is selected: then the
      // tooltip says everything; else one line, not a copy of the panel.
      const std::vector<std::string> details = RankDetails(
          model, app.view.frame, model.GetPosition(*rank), app.other(), app.shown_diff());
      ImGui::BeginTooltip();
      const bool full = app.view.selected_rank >= 0 && app.view.selected_rank != *rank;
      for (size_t i = 0; i < (full ? details.size() : std::min<size_t>(2, details.size())); ++i)
        ImGui::TextUnformatted(details[i].c_str());
      if (layout.aggregate > 1) {
        ImGui::TextUnformatted(("(cells are aggregated " + std::to_string(layout.aggregate) + "x" +
                                std::to_string(layout.aggregate) +
                                "; showing the first rank: zoom in to see each)")
                                   .c_str());
      }
      ImGui::EndTooltip();
      if (in.clicked) app.view.selected_rank = app.view.selected_rank == *rank ? -1 : *rank;
    } else if (in.clicked) {
      app.view.selected_rank = -1;
    }
  }
  ImGui::EndChild();
}

}  // namespace dtsim::viewer
