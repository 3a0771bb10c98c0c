// The timeline's layout steps (see timeline_layout.h).
#include "timeline_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "colors.h"
#include "dtsim/layout/error.h"
#include "dtsim/trace/model_trace.h"

namespace dtsim::viewer {

std::string FrameBoxLabel(const TraceModel& model, int64_t frame) {
  const Frame& f = model.frame(frame);
  if (f.kind != Frame::Kind::kAfterStep) return f.label;
  const TraceStep& step = model.trace().steps[f.step];
  const std::string dim =
      model.mesh().names().empty()
          ? StrCat("dim ", step.plan.mesh_dim)
          : (step.mesh_dim_name.empty() ? model.mesh().DimLabel(step.plan.mesh_dim)
                                        : step.mesh_dim_name);
  return StrCat(f.step + 1, " ", ToString(step.plan.collective), " ", dim);
}

DrawList LayoutFrameStrip(const TraceModel& model, const std::vector<uint8_t>& frame_differs,
                          int64_t current, const Rect& area, const TextMetrics& tm,
                          const std::vector<int64_t>& matches) {
  DrawList out;
  const int64_t n = model.num_frames();
  const float gap = 4;
  const float w =
      std::max(4.0f, (area.width() - gap * static_cast<float>(n - 1)) / static_cast<float>(n));
  for (int64_t f = 0; f < n; ++f) {
    const float x0 = std::round(area.x0 + static_cast<float>(f) * (w + gap));
    const float x1 = std::round(area.x0 + static_cast<float>(f) * (w + gap) + w);
    DrawRect box;
    box.rect = Rect{x0, area.y0, x1, area.y1};
    const Frame& fr = model.frame(f);
    const bool moves = fr.kind == Frame::Kind::kAfterStep &&
                       MovesData(model.trace().steps[fr.step].plan.collective);
    box.fill = f == current ? Rgba{70, 90, 130, 255}
                            : (moves ? Rgba{55, 60, 75, 255} : Rgba{45, 45, 52, 255});
    box.border = f == current ? kHighlightColor : kGridColor;
    box.border_width = f == current ? 2 : 1;
    box.role = Role::kFrameBox;
    box.frame = static_cast<int32_t>(f);
    out.rects.push_back(box);
    if (f < static_cast<int64_t>(frame_differs.size()) && frame_differs[f]) {
      DrawRect mark;
      mark.rect = Rect{x0, area.y0, x1, std::min(area.y1, area.y0 + 5)};
      mark.fill = kDiffColor;
      mark.role = Role::kHighlight;
      mark.frame = static_cast<int32_t>(f);
      out.rects.push_back(mark);
    }
    if (std::binary_search(matches.begin(), matches.end(), f)) {
      // A step the search found: a yellow bar along the bottom.
      DrawRect mark;
      mark.rect = Rect{x0, std::max(area.y0, area.y1 - 4), x1, area.y1};
      mark.fill = kGroupColor;
      mark.role = Role::kHighlight;
      mark.frame = static_cast<int32_t>(f);
      out.rects.push_back(mark);
    }
    std::string label = FrameBoxLabel(model, f);
    while (!label.empty() && tm.Width(label) + 8 > x1 - x0) label.pop_back();
    if (!label.empty()) {
      const float y = std::round(area.y0 + (area.height() - tm.line_height) / 2);
      out.texts.push_back(
          {x0 + 4, y, tm.Width(label), tm.line_height, label, kTextColor, Role::kFrameBox});
    }
  }
  return out;
}

BytesChart LayoutBytesChart(const TraceModel& model, const Frame& frame, const Highlight& hl,
                            const Rect& area, const TextMetrics& tm) {
  BytesChart out;
  const int64_t n = model.world_size();
  const float line = tm.line_height;
  int64_t max_bytes = 0;
  for (int64_t p = 0; p < n; ++p) {
    max_bytes = std::max({max_bytes, frame.bytes_sent[p], frame.bytes_received[p]});
  }
  out.max_bytes = max_bytes;
  const float label_w = tm.Width("recv <= 000.0 MiB") + 6;
  const Rect plot{area.x0 + label_w, area.y0, area.x1, area.y1};
  const float mid = std::round((plot.y0 + plot.y1) / 2);
  const float half = std::max(1.0f, mid - plot.y0 - 1);
  out.draw.rects.push_back({plot, Rgba{}, kGridColor, 1, Role::kBackground});
  out.draw.lines.push_back({plot.x0, mid, plot.x1, mid, kGridColor, 1, Role::kDecoration});
  int64_t max_sent = 0, max_received = 0;
  for (int64_t p = 0; p < n; ++p) {
    max_sent = std::max(max_sent, frame.bytes_sent[p]);
    max_received = std::max(max_received, frame.bytes_received[p]);
  }
  const std::string sent = StrCat("sent <= ", BytesText(max_sent));
  const std::string received = StrCat("recv <= ", BytesText(max_received));
  out.draw.texts.push_back(
      {area.x0, plot.y0, tm.Width(sent), line, sent, kDimTextColor, Role::kDecoration});
  out.draw.texts.push_back({area.x0, plot.y1 - line, tm.Width(received), line, received,
                            kDimTextColor, Role::kDecoration});
  if (frame.kind != Frame::Kind::kAfterStep || max_bytes == 0) {
    const std::string t = frame.kind != Frame::Kind::kAfterStep ? "no step: nothing moves"
                                                                : "no bytes move in this step";
    out.draw.texts.push_back(
        {plot.x0 + 6, mid - line - 2, tm.Width(t), line, t, kDimTextColor, Role::kDecoration});
    return out;
  }
  // Bars: at least 2 px per bar; k ranks per bar when the world is wider than that.
  const float width = plot.width() - 2;
  const int64_t k =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(2.0 * n / std::max(1.0f, width))));
  out.ranks_per_bar = k;
  const int64_t bars = (n + k - 1) / k;
  const float bw = width / static_cast<float>(bars);
  for (int64_t b = 0; b < bars; ++b) {
    const int64_t p0 = b * k, p1 = std::min(n, p0 + k);
    int64_t s = 0, r = 0;
    bool differs = false, emphasised = false;
    for (int64_t p = p0; p < p1; ++p) {
      s = std::max(s, frame.bytes_sent[p]);
      r = std::max(r, frame.bytes_received[p]);
      differs = differs || (!hl.differs.empty() && hl.differs[p]);
      emphasised = emphasised || hl.emphasis[p];
    }
    const float x0 = std::round(plot.x0 + 1 + b * bw);
    const float x1 = std::max(x0 + 1, std::round(plot.x0 + 1 + (b + 1) * bw) - (bw >= 4 ? 1 : 0));
    // The whole column is the hover target, whatever the bars' heights.
    DrawRect column;
    column.rect = Rect{x0, plot.y0 + 1, x1, plot.y1 - 1};
    column.role = Role::kBar;
    column.rank = model.RankAt(p0);
    column.rank_end = k == 1 ? -1 : p1;
    out.draw.rects.push_back(column);
    const Rgba color =
        differs ? kDiffColor : (k == 1 ? RankColor(model.RankAt(p0)) : Rgba{120, 160, 220, 255});
    auto bar = [&](float y0, float y1) {
      DrawRect rect;
      rect.rect = Rect{x0, y0, x1, y1};
      rect.fill = color;
      rect.role = Role::kBar;
      rect.rank = model.RankAt(p0);
      rect.rank_end = k == 1 ? -1 : p1;
      if (emphasised) {
        rect.border = kHighlightColor;
        rect.border_width = std::min(2.0f, (x1 - x0) / 3);
      }
      out.draw.rects.push_back(rect);
    };
    const float hs =
        max_sent ? std::round(half * static_cast<float>(s) / static_cast<float>(max_sent)) : 0;
    const float hr =
        max_received ? std::round(half * static_cast<float>(r) / static_cast<float>(max_received))
                     : 0;
    bar(mid - std::max(hs, s > 0 ? 1.0f : 0.0f), mid);
    bar(mid + 1, mid + 1 + std::max(hr, r > 0 ? 1.0f : 0.0f));
  }
  return out;
}

}  // namespace dtsim::viewer
