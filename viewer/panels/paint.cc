// Painting the layout step's records with ImGui, and the text metrics of ImGui's font (see
// panels.h).
#include <imgui.h>

#include <algorithm>

#include "panels.h"

namespace dtsim::viewer {
namespace {

ImU32 Col(Rgba c) { return IM_COL32(c.r, c.g, c.b, c.a); }

}  // namespace

TextMetrics CurrentTextMetrics() {
  return TextMetrics{ImGui::CalcTextSize("0").x, ImGui::GetTextLineHeight()};
}

void Paint(App& app, const char* panel, const DrawList& list, float ox, float oy) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (const DrawRect& r : list.rects) {
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
    dl->AddLine(ImVec2(ox + l.x0, oy + l.y0), ImVec2(ox + l.x1, oy + l.y1), Col(l.color), l.width);
  }
  for (const DrawText& t : list.texts)
    dl->AddText(ImVec2(ox + t.x, oy + t.y), Col(t.color), t.text.c_str());
  if (app.record) {
    DrawList copy = list;
    copy.Translate(ox, oy);
    app.recorded.emplace_back(panel, std::move(copy));
  }
}

}  // namespace dtsim::viewer
