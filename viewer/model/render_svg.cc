// Draw records as SVG (see render_svg.h).
#include "render_svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace dtsim::viewer {
namespace {

std::string Num(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", static_cast<double>(v));
  return buf;
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Opacity(Rgba c) {
  return c.a == 255 ? "" : " fill-opacity=\"" + Num(c.a / 255.0f) + "\"";
}

}  // namespace

std::string ToSvg(const DrawList& list, int width, int height, Rgba background) {
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << width
    << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height << "\">\n"
    << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height << "\" fill=\""
    << ToHex(background) << "\"/>\n";
  for (const DrawRect& r : list.rects) {
    if (r.rect.width() <= 0 || r.rect.height() <= 0) continue;
    std::string attrs = " data-role=\"" + ToString(r.role) + "\"";
    if (r.rank >= 0) attrs += " data-rank=\"" + std::to_string(r.rank) + "\"";
    if (r.block >= 0) attrs += " data-block=\"" + std::to_string(r.block) + "\"";
    if (r.fill.visible()) {
      s << "<rect x=\"" << Num(r.rect.x0) << "\" y=\"" << Num(r.rect.y0) << "\" width=\""
        << Num(r.rect.width()) << "\" height=\"" << Num(r.rect.height()) << "\" fill=\""
        << ToHex(r.fill) << "\"" << Opacity(r.fill) << attrs << "/>\n";
    }
    if (r.border.visible() && r.border_width > 0) {
      // Inside the rect: the stroke runs along the rect inset by half its width.
      const float h = r.border_width / 2;
      s << "<rect x=\"" << Num(r.rect.x0 + h) << "\" y=\"" << Num(r.rect.y0 + h) << "\" width=\""
        << Num(std::max(0.0f, r.rect.width() - r.border_width)) << "\" height=\""
        << Num(std::max(0.0f, r.rect.height() - r.border_width)) << "\" fill=\"none\" stroke=\""
        << ToHex(r.border) << "\" stroke-width=\"" << Num(r.border_width) << "\""
        << (r.fill.visible() ? "" : attrs) << "/>\n";
    }
  }
  for (const DrawLine& l : list.lines) {
    s << "<line x1=\"" << Num(l.x0) << "\" y1=\"" << Num(l.y0) << "\" x2=\"" << Num(l.x1)
      << "\" y2=\"" << Num(l.y1) << "\" stroke=\"" << ToHex(l.color) << "\" stroke-width=\""
      << Num(l.width) << "\""
      << (l.color.a == 255 ? "" : " stroke-opacity=\"" + Num(l.color.a / 255.0f) + "\"") << "/>\n";
  }
  for (const DrawText& t : list.texts) {
    // Baseline near the bottom of the reserved box; a monospace font close to the layout's metrics.
    s << "<text x=\"" << Num(t.x) << "\" y=\"" << Num(t.y + t.h * 0.8f)
      << "\" font-family=\"monospace\" font-size=\"" << Num(t.h * 0.85f) << "\" fill=\""
      << ToHex(t.color) << "\">" << Escape(t.text) << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace dtsim::viewer
