// The tensor panel's layout step (see tensor_layout.h).
#include "tensor_layout.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "colors.h"
#include "dtsim/layout/error.h"

namespace dtsim::viewer {
namespace {

constexpr float kMaxElementAspect = 4;  // elements may be stretched at most 4:1 to fill the panel
constexpr float kMinStripe = 3;  // owner chips narrower than this are folded into a grey "+k" chip
const Rgba kRestColor{110, 110, 120, 255};

bool Holds(const std::vector<Interval>& intervals, int64_t index) {
  for (const Interval& i : intervals) {
    if (index >= i.lo && index < i.hi) return true;
  }
  return false;
}

std::string PartialText(const Placements& placements) {
  std::set<std::string> ops;
  for (const Placement& p : placements) {
    if (p.is_partial()) ops.insert(p.ToString());
  }
  std::string out;
  for (const std::string& s : ops) out += (out.empty() ? "" : "/") + s;
  return out;
}

}  // namespace

std::string OwnersText(const std::vector<int64_t>& ranks, size_t max_shown) {
  std::string out;
  const size_t shown = ranks.size() <= max_shown ? ranks.size() : max_shown - 1;
  for (size_t i = 0; i < shown; ++i) out += StrCat(i ? ", " : "", ranks[i]);
  if (shown < ranks.size()) out += StrCat(" ... (+", ranks.size() - shown, ")");
  return out;
}

TensorView ResolveTensorView(const DTensorSpec& spec, const ViewState& view) {
  const int nd = static_cast<int>(spec.ndim());
  TensorView v;
  auto check = [&](int d, const char* what) {
    if (d < 0 || d >= nd) {
      throw InputError("tensor-grid",
                       StrCat(what, " dim ", d, " is not a dim of the tensor of shape ",
                              IntListToString(spec.shape()), " (", nd, " dims)"));
    }
  };
  if (nd == 1) {
    v.col_dim = 0;
    if (view.tensor_row_dim > 0) check(view.tensor_row_dim, "row");
    if (view.tensor_col_dim > 0) check(view.tensor_col_dim, "column");
  } else if (nd >= 2) {
    v.row_dim = view.tensor_row_dim >= 0 ? view.tensor_row_dim : 0;
    v.col_dim = view.tensor_col_dim >= 0 ? view.tensor_col_dim : (v.row_dim == 1 ? 0 : 1);
    check(v.row_dim, "row");
    check(v.col_dim, "column");
    if (v.row_dim == v.col_dim) {
      throw InputError("tensor-grid", StrCat("rows and columns are both dim ", v.row_dim,
                                             "; pick two different dims"));
    }
  }
  v.slice.assign(nd, 0);
  for (int d = 0; d < nd; ++d) {
    if (d == v.row_dim || d == v.col_dim) continue;
    const int64_t i = d < static_cast<int>(view.tensor_slice.size()) ? view.tensor_slice[d] : 0;
    if (i < 0 || (spec.shape()[d] > 0 && i >= spec.shape()[d])) {
      throw InputError("slice",
                       StrCat("index ", i, " is outside dim ", d, " of size ", spec.shape()[d]));
    }
    v.slice[d] = i;
  }
  return v;
}

std::optional<size_t> TensorLayout::BlockAt(float x, float y) const {
  constexpr float kMargin = 3;
  const Rect on{tensor.x0 - kMargin, tensor.y0 - kMargin, tensor.x1 + kMargin, tensor.y1 + kMargin};
  if (!viewport.Contains(x, y) || !on.Contains(x, y)) return std::nullopt;
  float best = std::numeric_limits<float>::infinity();
  std::optional<size_t> found;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Rect& r = blocks[i].rect;
    const float dx = x < r.x0 ? r.x0 - x : (x >= r.x1 ? x - r.x1 + 1 : 0);
    const float dy = y < r.y0 ? r.y0 - y : (y >= r.y1 ? y - r.y1 + 1 : 0);
    const float d = dx * dx + dy * dy;
    if (d < best || (d == best && d == 0)) {  // inside several (rounding): the last drawn
      best = d;
      found = i;
    }
  }
  return found;
}

int64_t TensorLayout::OwnerAt(size_t block, float x, float y) const {
  const Rect& r = blocks.at(block).rect;
  // A point beside the block (a gap, an edge) reads as the nearest point of it.
  const float cx = std::clamp(x, r.x0, std::max(r.x0, r.x1 - 1));
  const float cy = std::clamp(y, r.y0, std::max(r.y0, r.y1 - 1));
  for (size_t i = draw.rects.size(); i-- > 0;) {
    const DrawRect& d = draw.rects[i];
    if (d.role == Role::kTensorOwner && d.block == static_cast<int32_t>(block) &&
        d.rect.Contains(cx, cy)) {
      return d.rank;
    }
  }
  return blocks[block].ranks.front();
}

TensorLayout LayoutTensor(const TraceModel& model, const Frame& frame, const Highlight& hl,
                          const TensorView& view, const Rect& area, const TextMetrics& tm,
                          const Zoom& zoom_in) {
  TensorLayout out;
  const DTensorSpec& spec = frame.spec;
  const int nd = static_cast<int>(spec.ndim());
  const float line = tm.line_height;
  const int64_t ly = view.row_dim >= 0 ? spec.shape()[view.row_dim] : 1;
  const int64_t lx = view.col_dim >= 0 ? spec.shape()[view.col_dim] : 1;

  // Header: dims shown, the slice, the placements.
  std::string header;
  if (view.row_dim >= 0) header += StrCat("rows dim ", view.row_dim, " [", ly, "]  ");
  if (view.col_dim >= 0) header += StrCat("cols dim ", view.col_dim, " [", lx, "]  ");
  if (nd == 0) header += "0-d tensor  ";
  std::string slice_text;
  for (int d = 0; d < nd; ++d) {
    if (d == view.row_dim || d == view.col_dim) continue;
    slice_text +=
        StrCat(slice_text.empty() ? "" : ", ", "dim ", d, "=", view.slice[d], "/", spec.shape()[d]);
  }
  if (!slice_text.empty()) header += "slice " + slice_text + "  ";
  header += ToString(spec.placements());
  out.draw.texts.push_back(
      {area.x0, area.y0, tm.Width(header), line, header, kDimTextColor, Role::kDecoration});

  // Partial mesh dims: how many owners of a block hold addends.
  int64_t partial_ways = 1;
  for (int64_t m = 0; m < model.mesh().ndim(); ++m) {
    if (spec.placements()[m].is_partial()) partial_ways *= model.mesh().size(m);
  }
  const std::string partial_text = PartialText(spec.placements());

  // Blocks: group every owned rectangle of the slice by its index ranges.
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, size_t> index;
  const Interval whole{0, 1};
  for (int64_t p = 0; p < model.world_size(); ++p) {
    const RankLayout& l = frame.layouts[p];
    const int64_t rank = model.RankAt(p);
    if (spec.numel() > 0 && l.numel() == 0) {
      out.empty_ranks.push_back(rank);
      continue;
    }
    bool in_slice = true;
    for (int d = 0; d < nd && in_slice; ++d) {
      if (d != view.row_dim && d != view.col_dim) in_slice = Holds(l.intervals[d], view.slice[d]);
    }
    if (!in_slice) {
      ++out.ranks_outside_slice;
      continue;
    }
    const std::vector<Interval> rows =
        view.row_dim >= 0 ? l.intervals[view.row_dim] : std::vector<Interval>{whole};
    const std::vector<Interval> cols =
        view.col_dim >= 0 ? l.intervals[view.col_dim] : std::vector<Interval>{whole};
    for (const Interval& r : rows) {
      for (const Interval& c : cols) {
        auto key = std::make_tuple(r.lo, r.hi, c.lo, c.hi);
        auto [it, fresh] = index.emplace(key, out.blocks.size());
        if (fresh) out.blocks.push_back(TensorBlock{r, c, {}, partial_ways, Rect{}});
        out.blocks[it->second].ranks.push_back(rank);
      }
    }
  }
  std::sort(out.empty_ranks.begin(), out.empty_ranks.end());
  for (TensorBlock& b : out.blocks) std::sort(b.ranks.begin(), b.ranks.end());

  // Geometry: margins for tick labels, the empty-shard strip; elements as square as
  // kMaxElementAspect allows.
  const float left = tm.Width(std::to_string(std::max<int64_t>(ly, 1))) + 8;
  const float top = area.y0 + 2 * line + 6;
  const float bottom_strip =
      out.empty_ranks.empty() && out.ranks_outside_slice == 0 ? 0 : line + 10;
  const float avail_w = std::max(1.0f, area.x1 - (area.x0 + left) - 2);
  const float avail_h = std::max(1.0f, area.y1 - top - bottom_strip - 2);
  float sx = avail_w / static_cast<float>(std::max<int64_t>(lx, 1));
  float sy = avail_h / static_cast<float>(std::max<int64_t>(ly, 1));
  const float s = std::min(sx, sy);
  sx = std::min(sx, s * kMaxElementAspect);
  sy = std::min(sy, s * kMaxElementAspect);
  // The fitted tensor's bottom (the empty-shard strip goes under it), then the zoom.
  const float fixed_x = std::round(area.x0 + left), fixed_y = std::round(top);
  const float fit_w =
      std::round(fixed_x + static_cast<float>(std::max<int64_t>(lx, 1)) * sx) - fixed_x;
  const float fit_y1 =
      view.row_dim < 0 ? std::round(fixed_y + std::min(avail_h, std::max(3 * line, fit_w / 8)))
                       : std::round(fixed_y + static_cast<float>(std::max<int64_t>(ly, 1)) * sy);
  out.viewport =
      Rect{fixed_x, fixed_y, std::max(fixed_x, area.x1), std::max(fixed_y, area.y1 - bottom_strip)};
  Zoom zoom = zoom_in;
  ClampZoom(zoom, out.viewport.width(), out.viewport.height());
  sx *= zoom.scale;
  sy *= zoom.scale;
  const float ox = fixed_x - std::round(zoom.pan_x);
  const float oy = fixed_y - std::round(zoom.pan_y);
  auto X = [&](int64_t i) { return std::round(ox + static_cast<float>(i) * sx); };
  auto Y = [&](int64_t i) { return std::round(oy + static_cast<float>(i) * sy); };
  out.tensor = Rect{ox, oy, X(std::max<int64_t>(lx, 1)), Y(std::max<int64_t>(ly, 1))};
  if (view.row_dim < 0) out.tensor.y1 = std::round(oy + (fit_y1 - fixed_y) * zoom.scale);
  const Rect visible = out.viewport;

  // The tensor's frame (visible also where nothing is owned, e.g. a dim of size 0).
  const size_t zoomed_rects = out.draw.rects.size(), zoomed_lines = out.draw.lines.size(),
               zoomed_texts = out.draw.texts.size();
  out.draw.rects.push_back({out.tensor, Rgba{}, kGridColor, 1, Role::kBackground});
  if (lx == 0 || ly == 0) {
    const std::string t = "empty tensor (a dim of size 0)";
    out.draw.texts.push_back(
        {ox + 4, oy + 4, tm.Width(t), line, t, kDimTextColor, Role::kDecoration});
  }

  // Blocks: fill, owner chips, outlines and marks, labels.
  for (size_t bi = 0; bi < out.blocks.size(); ++bi) {
    TensorBlock& b = out.blocks[bi];
    const float x0 = X(b.cols.lo), x1 = std::max(X(b.cols.hi), x0 + 1);
    float y0 = Y(b.rows.lo), y1 = std::max(Y(b.rows.hi), y0 + 1);
    if (view.row_dim < 0) {
      y0 = out.tensor.y0;
      y1 = out.tensor.y1;
    }
    b.rect = Rect{x0, y0, x1, y1};
    if (!b.rect.Intersects(visible)) continue;  // zoomed in: not in view
    const size_t owners = b.ranks.size();
    // The block in its first owner's colour.
    DrawRect main;
    main.rect = b.rect;
    main.fill = RankColor(b.ranks.front());
    main.role = Role::kTensorOwner;
    main.rank = b.ranks.front();
    main.block = static_cast<int32_t>(bi);
    out.draw.rects.push_back(main);
    // Several owners (replicas, Partial addends): a band of chips along the bottom, one per owner
    // in its colour, the last one grey "+k" when they do not all fit. The band reads as a legend,
    // not as a split of the data.
    struct Chip {
      Rect rect;
      int64_t rank;
    };
    std::vector<Chip> chips;
    const float chip = std::clamp(std::floor(std::min(x1 - x0, y1 - y0) / 4), 4.0f, line + 2);
    if (owners > 1 && y1 - y0 >= 2 * chip + 4 && x1 - x0 >= 2 * chip) {
      const float by0 = y1 - chip - 2, by1 = y1 - 1;
      out.draw.rects.push_back(
          {Rect{x0, by0 - 1, x1, y1}, kCellBorderColor, Rgba{}, 0, Role::kDecoration});
      const float band_w = x1 - x0 - 2;
      const float label_w = tm.Width(std::to_string(b.ranks.back())) + 6;
      const float want = chip >= line ? std::max(2 * chip, label_w) : 2 * chip;
      const float chip_w = std::min(want, band_w / static_cast<float>(owners));
      const size_t fit = chip_w >= kMinStripe
                             ? owners
                             : std::max<size_t>(1, static_cast<size_t>(band_w / (2 * kMinStripe)));
      const float w = chip_w >= kMinStripe ? chip_w : band_w / static_cast<float>(fit);
      for (size_t i = 0; i < fit; ++i) {
        const bool rest = fit < owners && i + 1 == fit;
        const Rect r{std::round(x0 + 1 + i * w), by0 + 1,
                     std::round(x0 + 1 + (i + 1) * w) - (w >= 5 ? 1 : 0), by1};
        DrawRect c;
        c.rect = r;
        c.fill = rest ? kRestColor : RankColor(b.ranks[i]);
        c.role = rest ? Role::kTensorBlock : Role::kTensorOwner;
        c.rank = rest ? -1 : b.ranks[i];
        c.block = static_cast<int32_t>(bi);
        out.draw.rects.push_back(c);
        if (!rest) chips.push_back({r, b.ranks[i]});
        const std::string t = rest ? StrCat("+", owners - i) : std::to_string(b.ranks[i]);
        if (tm.Width(t) + 2 <= r.width() && line <= r.height() + 1) {
          const float tx = std::round(r.x0 + (r.width() - tm.Width(t)) / 2);
          const float ty = std::round(r.y0 + (r.height() - line) / 2);
          out.draw.texts.push_back(
              {tx, ty, tm.Width(t), line, t, TextColorOn(c.fill), Role::kTensorOwner});
        }
      }
    }
    // The block as a whole: the hover target; its outline separates blocks (blue for Partial
    // values).
    const float extent = std::min(x1 - x0, y1 - y0);
    DrawRect whole_rect;
    whole_rect.rect = b.rect;
    whole_rect.border = partial_ways > 1 ? kPartialColor : kCellBorderColor;
    whole_rect.border_width = partial_ways > 1
                                  ? std::max(1.0f, std::min(2.0f, std::floor(extent / 4)))
                                  : (extent >= 4 ? 1 : 0);
    whole_rect.role = Role::kTensorBlock;
    whole_rect.block = static_cast<int32_t>(bi);
    out.draw.rects.push_back(whole_rect);
    // Marks for diff, anomalies and emphasis: around the whole block, and around the owner's chip.
    const float room = std::max(1.0f, std::floor(extent / 4));
    auto mark = [&](const Rect& r, Rgba color, float width, int64_t rank) {
      DrawRect m;
      m.rect = r;
      m.border = color;
      m.border_width = std::min(width, room);
      m.role = Role::kHighlight;
      m.rank = rank;
      m.block = static_cast<int32_t>(bi);
      out.draw.rects.push_back(m);
    };
    uint8_t emphasis = 0;
    bool differs = false, anomaly = false;
    int64_t differing_rank = -1;
    for (int64_t r : b.ranks) {
      auto pos = model.FindPosition(r);
      if (!pos) continue;
      emphasis = std::max(emphasis, hl.emphasis[*pos]);
      if (!hl.differs.empty() && hl.differs[*pos] && !differs) {
        differs = true;
        differing_rank = r;
      }
      anomaly = anomaly || (!hl.anomalies.empty() && hl.anomalies[*pos]);
    }
    // Nested from the edge inwards, so that none hides another: diff, anomaly, emphasis.
    Rect ring = b.rect;
    auto inset = [&](float w) {
      const float d = std::min(w, room);
      ring = Rect{ring.x0 + d, ring.y0 + d, std::max(ring.x0 + d, ring.x1 - d),
                  std::max(ring.y0 + d, ring.y1 - d)};
    };
    if (differs) {
      mark(ring, kDiffColor, 3, differing_rank);
      inset(3);
    }
    if (anomaly) {
      mark(ring, kAnomalyColor, 2, -1);
      inset(2);
    }
    if (emphasis) mark(ring, kHighlightColor, emphasis == 2 ? 3 : 2, -1);
    for (const Chip& c : chips) {
      auto pos = model.FindPosition(c.rank);
      if (!pos) continue;
      if (!hl.differs.empty() && hl.differs[*pos]) mark(c.rect, kDiffColor, 2, c.rank);
      if (hl.emphasis[*pos]) mark(c.rect, kHighlightColor, 2, c.rank);
    }
    // Labels, top-left, while they fit: owners; replica / partial badge; the extent.
    std::vector<std::string> labels;
    labels.push_back(OwnersText(b.ranks));
    const int64_t replicas = static_cast<int64_t>(owners) / std::max<int64_t>(1, partial_ways);
    std::string badge;
    if (replicas > 1) badge += StrCat("R x", replicas);
    if (partial_ways > 1)
      badge += StrCat(badge.empty() ? "" : " ", partial_text, " x", partial_ways);
    if (!badge.empty()) labels.push_back(badge);
    labels.push_back(StrCat(b.rows.size(), "x", b.cols.size()));
    float ty = y0 + 3;
    const float text_bottom = chips.empty() ? y1 : y1 - chip - 3;
    const Rgba text_color = TextColorOn(RankColor(b.ranks.front()));
    for (const std::string& t : labels) {
      const float w = tm.Width(t);
      if (w + 6 > x1 - x0 || ty + line + 1 > text_bottom) break;
      out.draw.texts.push_back({x0 + 3, ty, w, line, t, text_color, Role::kTensorBlock});
      ty += line;
    }
  }

  out.draw.MarkZoomed(zoomed_rects, zoomed_lines, zoomed_texts);

  // Ticks: block boundaries along each shown dim, labelled where they do not collide.
  auto ticks = [&](bool columns) {
    std::set<int64_t> bounds;
    for (const TensorBlock& b : out.blocks) {
      const Interval& i = columns ? b.cols : b.rows;
      bounds.insert(i.lo);
      bounds.insert(i.hi);
    }
    bounds.insert(0);
    bounds.insert(columns ? lx : ly);
    float last_end = -1e9f;
    for (int64_t v : bounds) {
      const std::string t = std::to_string(v);
      const float w = tm.Width(t);
      // Ticks stay along the viewport's top and left edges while the tensor moves under them.
      if (columns) {
        const float x = X(v);
        if (x < visible.x0 || x > visible.x1) continue;
        out.draw.lines.push_back({x, fixed_y - 4, x, fixed_y, kDimTextColor, 1, Role::kDecoration});
        const float tx = std::round(std::clamp(x - w / 2, area.x0, area.x1 - w));
        if (tx >= last_end + 4) {
          out.draw.texts.push_back(
              {tx, fixed_y - 4 - line, w, line, t, kDimTextColor, Role::kDecoration});
          last_end = tx + w;
        }
      } else {
        const float y = Y(v);
        if (y < visible.y0 || y > visible.y1) continue;
        out.draw.lines.push_back({fixed_x - 4, y, fixed_x, y, kDimTextColor, 1, Role::kDecoration});
        const float ty = std::round(std::clamp(y - line / 2, top - line / 2, area.y1 - line));
        if (ty >= last_end + 1) {
          out.draw.texts.push_back(
              {fixed_x - 6 - w, ty, w, line, t, kDimTextColor, Role::kDecoration});
          last_end = ty + line;
        }
      }
    }
  };
  if (lx > 0 && ly > 0) {
    if (view.col_dim >= 0) ticks(true);
    if (view.row_dim >= 0) ticks(false);
  }

  // Empty shards and ranks outside the slice, under the tensor.
  if (bottom_strip > 0) {
    float x = area.x0;
    const float y = std::round(std::max(std::min(out.tensor.y1, fit_y1) + 8, area.y1 - line - 4));
    if (!out.empty_ranks.empty()) {
      const std::string t = "empty shards:";
      out.draw.texts.push_back({x, y, tm.Width(t), line, t, kTextColor, Role::kDecoration});
      x += tm.Width(t) + 6;
      const float box = std::max(line, tm.Width(std::to_string(out.empty_ranks.back())) + 6);
      size_t shown = 0;
      for (int64_t r : out.empty_ranks) {
        const float room_needed =
            box + 4 + (shown + 1 < out.empty_ranks.size() ? tm.Width("+00000 more") : 0);
        if (x + room_needed > area.x1) break;
        DrawRect e;
        e.rect = Rect{std::round(x), y, std::round(x + box), y + line};
        e.fill = Rgba{45, 45, 52, 255};
        e.border = RankColor(r);
        e.border_width = 2;
        e.role = Role::kEmptyShard;
        e.rank = r;
        out.draw.rects.push_back(e);
        if (auto p = model.FindPosition(r); p && !hl.differs.empty() && hl.differs[*p]) {
          out.draw.rects.push_back({e.rect, Rgba{}, kDiffColor, 2, Role::kHighlight, r});
        } else if (p && hl.emphasis[*p]) {
          out.draw.rects.push_back({e.rect, Rgba{}, kHighlightColor, 2, Role::kHighlight, r});
        }
        const std::string label = std::to_string(r);
        out.draw.texts.push_back({std::round(x + (box - tm.Width(label)) / 2), y, tm.Width(label),
                                  line, label, RankColor(r), Role::kEmptyShard});
        x += box + 4;
        ++shown;
      }
      if (shown < out.empty_ranks.size()) {
        const std::string more = StrCat("+", out.empty_ranks.size() - shown, " more");
        out.draw.texts.push_back({x, y, tm.Width(more), line, more, kTextColor, Role::kDecoration});
        x += tm.Width(more) + 12;
      }
      x += 12;
    }
    if (out.ranks_outside_slice > 0) {
      const std::string t =
          StrCat(out.ranks_outside_slice, " rank", out.ranks_outside_slice == 1 ? "" : "s",
                 " hold nothing of this slice");
      if (x + tm.Width(t) <= area.x1) {
        out.draw.texts.push_back({x, y, tm.Width(t), line, t, kDimTextColor, Role::kDecoration});
      }
    }
  }
  return out;
}

}  // namespace dtsim::viewer
