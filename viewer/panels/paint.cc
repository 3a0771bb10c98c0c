// Painting the layout step's records with ImGui, and the text metrics of ImGui's font (see
// panels.h).
#include <imgui.h>

#include <algorithm>
#include <cmath>

#include "panels.h"
#include "viewer/model/colors.h"

namespace dtsim::viewer {

ImVec4 ToVec4(Rgba c) { return ImVec4(c.r / 255.f, c.g / 255.f, c.b / 255.f, c.a / 255.f); }

std::string FileName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
namespace {

ImU32 Col(Rgba c) { return IM_COL32(c.r, c.g, c.b, c.a); }

}  // namespace

// Paints the records of `list`: all of them (zoomed < 0), the fixed ones (0) or the zoomed ones
// (1).
void PaintPass(ImDrawList* dl, const DrawList& list, float ox, float oy, int zoomed);

void DetailsPanel(const char* id, const Rect& area, const std::vector<DetailLine>& lines) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild(id, ImVec2(area.width(), area.height()), true);
  ImGui::TextUnformatted("Details");
  for (const DetailLine& line : lines) {
    if (line.differs) ImGui::PushStyleColor(ImGuiCol_Text, ToVec4(kDiffColor));
    ImGui::TextWrapped("%s", line.text.c_str());
    if (line.differs) ImGui::PopStyleColor();
  }
  ImGui::EndChild();
}

TextMetrics CurrentTextMetrics() {
  return TextMetrics{ImGui::CalcTextSize("0").x, ImGui::GetTextLineHeight()};
}

void Paint(App& app, const char* panel, const DrawList& list, float ox, float oy,
           const Rect* viewport) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // Two passes: the fixed records, then the zoomed content clipped to the viewport.
  for (const bool zoomed : {false, true}) {
    if (zoomed) {
      if (viewport == nullptr) break;
      dl->PushClipRect(ImVec2(ox + viewport->x0, oy + viewport->y0),
                       ImVec2(ox + viewport->x1, oy + viewport->y1), true);
    }
    PaintPass(dl, list, ox, oy, viewport == nullptr ? -1 : (zoomed ? 1 : 0));
    if (zoomed) dl->PopClipRect();
  }
  if (app.record) {
    DrawList copy = list;
    copy.Translate(ox, oy);
    app.recorded.emplace_back(panel, std::move(copy));
    if (viewport != nullptr) {
      app.recorded_viewports.emplace_back(
          panel, Rect{ox + viewport->x0, oy + viewport->y0, ox + viewport->x1, oy + viewport->y1});
    }
  }
}

void PaintPass(ImDrawList* dl, const DrawList& list, float ox, float oy, int zoomed) {
  auto skip = [&](bool z) { return zoomed >= 0 && z != (zoomed == 1); };
  for (const DrawRect& r : list.rects) {
    if (skip(r.zoomed)) continue;
    const ImVec2 a(ox + r.rect.x0, oy + r.rect.y0), b(ox + r.rect.x1, oy + r.rect.y1);
    if (r.fill.visible()) dl->AddRectFilled(a, b, Col(r.fill));
    if (r.border.visible() && r.border_width > 0) {
      // Inside the rect, as four filled strips: exactly the pixels the layout expects.
      const float w = std::min({r.border_width, (b.x - a.x) / 2, (b.y - a.y) / 2});
      if (w <= 0) continue;
      const ImU32 c = Col(r.border);
      dl->AddRectFilled(a, ImVec2(b.x, a.y + w), c);
      dl->AddRectFilled(ImVec2(a.x, b.y - w), b, c);
      dl->AddRectFilled(ImVec2(a.x, a.y + w), ImVec2(a.x + w, b.y - w), c);
      dl->AddRectFilled(ImVec2(b.x - w, a.y + w), ImVec2(b.x, b.y - w), c);
    }
  }
  for (const DrawLine& l : list.lines) {
    if (skip(l.zoomed)) continue;
    dl->AddLine(ImVec2(ox + l.x0, oy + l.y0), ImVec2(ox + l.x1, oy + l.y1), Col(l.color), l.width);
  }
  for (const DrawText& t : list.texts) {
    if (skip(t.zoomed)) continue;
    dl->AddText(ImVec2(ox + t.x, oy + t.y), Col(t.color), t.text.c_str());
  }
}

void SameLineIfFits(float width) {
  const float right = ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x + width;
  if (right <= ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x) ImGui::SameLine();
}

CanvasInput ZoomableCanvas(const char* id, float width, float height, Zoom& zoom,
                           const Rect& viewport) {
  const ImGuiID dragged_key = ImGui::GetID(id);  // where "this press became a drag" is kept
  ImGui::InvisibleButton(id, ImVec2(width, height));
  const ImGuiIO& io = ImGui::GetIO();
  ImGuiStorage* storage = ImGui::GetStateStorage();
  const ImVec2 origin = ImGui::GetItemRectMin();
  CanvasInput in;
  in.x = io.MousePos.x - origin.x;
  in.y = io.MousePos.y - origin.y;
  if (ImGui::IsItemActivated()) storage->SetBool(dragged_key, false);
  const float vw = viewport.width(), vh = viewport.height();
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 3.0f)) {
    storage->SetBool(dragged_key, true);
    PanBy(zoom, io.MouseDelta.x, io.MouseDelta.y, vw, vh);
  }
  const bool dragged = storage->GetBool(dragged_key, false);
  in.dragging = ImGui::IsItemActive() && dragged;
  in.hovered = ImGui::IsItemHovered() && !in.dragging;
  in.clicked = ImGui::IsItemDeactivated() && !dragged && ImGui::IsItemHovered();
  if (ImGui::IsItemHovered() && io.MouseWheel != 0) {
    // The wheel zooms about the cursor (about the centre when the cursor is off the viewport).
    in.zoom_factor = std::pow(1.25f, io.MouseWheel);
    if (!viewport.Contains(in.x, in.y)) {
      in.x = (viewport.x0 + viewport.x1) / 2;
      in.y = (viewport.y0 + viewport.y1) / 2;
    }
  }
  return in;
}

}  // namespace dtsim::viewer
