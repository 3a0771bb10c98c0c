// The mesh panel's layout step (see mesh_layout.h).
#include "mesh_layout.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "colors.h"
#include "dtsim/layout/error.h"

namespace dtsim::viewer {
namespace {

constexpr float kMinPitch = 2;   // below this many pixels per cell, cells are aggregated
constexpr float kSliceGap = 10;  // pixels between the slices of a 3-D+ mesh
constexpr float kEdge = 5;       // pixels between the viewport's edges and the grid (at scale 1)

Rect R(float x0, float y0, float x1, float y1) { return Rect{x0, y0, x1, y1}; }

}  // namespace

std::string DimName(const DeviceMesh& mesh, int64_t dim) {
  return mesh.names().empty() ? StrCat("dim ", dim) : mesh.DimLabel(dim);
}

std::string DimIs(const DeviceMesh& mesh, int64_t dim, int64_t value) {
  return mesh.names().empty() ? StrCat("dim ", dim, " = ", value)
                              : StrCat(mesh.DimLabel(dim), "=", value);
}

std::string CellCoordinate(const DeviceMesh& mesh, const std::vector<int64_t>& coordinate) {
  if (mesh.names().empty()) return IntListToString(coordinate);
  std::string text;
  for (size_t d = 0; d < coordinate.size(); ++d) {
    text += StrCat(d ? " " : "", mesh.DimLabel(static_cast<int64_t>(d)), "=", coordinate[d]);
  }
  return text;
}

float CoordinateLevelPitch(const TextMetrics& metrics) { return 3 * metrics.line_height + 6; }
float ShapeLevelPitch(const TextMetrics& metrics) { return 4 * metrics.line_height + 8; }

MeshGrid ResolveMeshGrid(const DeviceMesh& mesh, const ViewState& view) {
  const int nd = static_cast<int>(mesh.ndim());
  MeshGrid g;
  auto check = [&](int d, const char* what) {
    if (d < 0 || d >= nd) {
      throw InputError("mesh-grid", StrCat(what, " dim ", d, " is not a dim of ", mesh.ToString(),
                                           " (0..", nd - 1, ")"));
    }
  };
  if (nd == 1) {
    if (view.mesh_row_dim > 0 || view.mesh_col_dim > 0)
      check(std::max(view.mesh_row_dim, view.mesh_col_dim), "grid");
    g.row_dim = -1;
    g.col_dim = 0;
    return g;
  }
  g.row_dim = view.mesh_row_dim >= 0 ? view.mesh_row_dim : nd - 2;
  g.col_dim = view.mesh_col_dim >= 0 ? view.mesh_col_dim : nd - 1;
  check(g.row_dim, "row");
  check(g.col_dim, "column");
  if (g.row_dim == g.col_dim) {
    throw InputError("mesh-grid", StrCat("rows and columns are both dim ", g.row_dim, " (",
                                         mesh.DimLabel(g.row_dim), "); pick two different dims of ",
                                         mesh.ToString()));
  }
  for (int d = 0; d < nd; ++d) {
    if (d != g.row_dim && d != g.col_dim) g.slice_dims.push_back(d);
  }
  return g;
}

std::optional<int64_t> MeshLayout::RankAt(float x, float y) const {
  if (!viewport.Contains(x, y)) return std::nullopt;
  bool inside = false;
  for (const Rect& b : slice_bounds) inside = inside || b.Contains(x, y);
  if (!inside) return std::nullopt;
  // The nearest drawn cell (its whole pitch: the drawn rect grown by the inset); a point inside one
  // has distance 0. Later records win ties, as they are drawn on top.
  float best = std::numeric_limits<float>::infinity();
  std::optional<int64_t> rank;
  for (const DrawRect& r : draw.rects) {
    if (r.role != Role::kMeshCell) continue;
    const float x0 = r.rect.x0 - cell_inset, x1 = r.rect.x1 + cell_inset;
    const float y0 = r.rect.y0 - cell_inset, y1 = r.rect.y1 + cell_inset;
    const float dx = x < x0 ? x0 - x : (x >= x1 ? x - x1 + 1 : 0);
    const float dy = y < y0 ? y0 - y : (y >= y1 ? y - y1 + 1 : 0);
    const float d = dx * dx + dy * dy;
    if (d <= best) {
      best = d;
      rank = r.rank;
    }
  }
  return rank;
}

MeshLayout LayoutMesh(const TraceModel& model, const Frame& frame, const Highlight& hl,
                      const MeshGrid& grid, const Rect& area, const TextMetrics& tm,
                      const Zoom& zoom_in) {
  MeshLayout out;
  const DeviceMesh& mesh = model.mesh();
  const int64_t n = mesh.size();
  out.cells.assign(n, Rect{});
  const float line = tm.line_height;

  // Grid shape of one slice and the number of slices.
  int64_t rows = 1, cols = 1, slices = 1;
  if (grid.row_dim < 0) {
    // 1-D: wrap to the area's aspect.
    const double aspect =
        std::max(0.1, static_cast<double>(area.width()) / std::max(1.0f, area.height() - line));
    cols = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(std::sqrt(n * aspect))), 1, n);
    rows = (n + cols - 1) / cols;
  } else {
    rows = mesh.size(grid.row_dim);
    cols = mesh.size(grid.col_dim);
    for (int d : grid.slice_dims) slices *= mesh.size(d);
  }

  // Header: which dims are rows, columns, slices.
  std::string header;
  if (grid.row_dim < 0) {
    header = StrCat(DimName(mesh, 0), " (", n, " ranks, wrapped every ", cols, ")");
  } else {
    header = StrCat("rows ", DimIs(mesh, grid.row_dim, rows), "  cols ",
                    DimIs(mesh, grid.col_dim, cols));
    if (!grid.slice_dims.empty()) {
      header += "  slices";
      for (int d : grid.slice_dims) header += StrCat(" ", DimIs(mesh, d, mesh.size(d)));
    }
  }
  out.draw.texts.push_back(
      {area.x0, area.y0, tm.Width(header), line, header, kDimTextColor, Role::kDecoration});

  // Slice arrangement: the number of slice columns that gives the largest cells (at scale 1; zoom
  // multiplies the whole arrangement).
  const float top = area.y0 + line + 4;
  out.viewport = R(area.x0, top, area.x1, std::max(top, area.y1));
  Zoom zoom = zoom_in;
  ClampZoom(zoom, out.viewport.width(), out.viewport.height());
  // A margin of kEdge around the grid inside the viewport, so the pixels just outside the outer
  // cells are still in the panel and find them (hit-testing without dead pixels at the edges).
  const float avail_w = (area.width() - 2 * kEdge) * zoom.scale;
  const float avail_h = (area.y1 - top - 2 * kEdge) * zoom.scale;
  const float origin_x = area.x0 + std::round(kEdge * zoom.scale - zoom.pan_x);
  const float origin_y = top + std::round(kEdge * zoom.scale - zoom.pan_y);
  const bool titled = slices > 1;
  float best = -1;
  int64_t slice_cols = 1;
  for (int64_t sc = 1; sc <= slices; ++sc) {
    const int64_t sr = (slices + sc - 1) / sc;
    const float gap = kSliceGap;
    const float w = (avail_w - gap * (sc - 1)) / static_cast<float>(sc * cols);
    const float h =
        (avail_h - sr * (titled ? line + 2 : 0) - gap * (sr - 1)) / static_cast<float>(sr * rows);
    const float cell = std::min(w, h);
    if (cell > best + 1e-3f) {
      best = cell;
      slice_cols = sc;
    }
    if (sc > 4096) break;  // enough choices
  }
  float pitch_f = std::max(0.0f, best);
  int aggregate = 1;
  if (pitch_f < kMinPitch) {
    // k x k cells per record of floor(k * cell) whole pixels: the smallest k that reaches kMinPitch
    // and loses at most a fifth of the space to rounding.
    const float cell = std::max(pitch_f, 1e-3f);
    aggregate = static_cast<int>(std::ceil(kMinPitch / cell));
    while (std::floor(cell * aggregate) < 0.8f * cell * aggregate && aggregate < 64) ++aggregate;
    pitch_f = std::max(kMinPitch, std::floor(cell * aggregate));
  }
  const int pitch = std::max(1, static_cast<int>(std::floor(pitch_f)));
  out.pitch = pitch;
  out.aggregate = aggregate;
  if (aggregate > 1) {
    out.draw.texts.front().text += StrCat("  (each square: ", aggregate, "x", aggregate, " ranks)");
    out.draw.texts.front().w = tm.Width(out.draw.texts.front().text);
  }
  const int64_t agg_rows = (rows + aggregate - 1) / aggregate;
  const int64_t agg_cols = (cols + aggregate - 1) / aggregate;
  const float gap = kSliceGap;
  const float slice_w = static_cast<float>(agg_cols * pitch);
  const float slice_h = static_cast<float>(agg_rows * pitch) + (titled ? line + 2 : 0);

  // Slice origins.
  auto slice_origin = [&](int64_t s) {
    const int64_t sr = s / slice_cols, sc = s % slice_cols;
    return std::pair<float, float>{std::round(origin_x + sc * (slice_w + gap)),
                                   std::round(origin_y + sr * (slice_h + gap))};
  };
  // Records outside the viewport are left out (a halo of 3 px around a cell may show).
  const Rect visible =
      R(out.viewport.x0 - 4, out.viewport.y0 - 4, out.viewport.x1 + 4, out.viewport.y1 + 4);
  const std::vector<int64_t>& shape = mesh.shape();
  auto slice_of = [&](const std::vector<int64_t>& c) {
    int64_t s = 0;
    for (int d : grid.slice_dims) s = s * shape[d] + c[d];
    return s;
  };
  for (int64_t s = 0; s < slices; ++s) {
    auto [x, y] = slice_origin(s);
    out.slice_bounds.push_back(R(x - gap / 2, y + (titled ? line + 2 : 0) - gap / 2,
                                 x + slice_w + gap / 2, y + slice_h + gap / 2));
    if (titled && y >= out.viewport.y0 && R(x, y, x + slice_w, y + line).Intersects(visible)) {
      std::string title;
      int64_t rest = s;
      std::vector<int64_t> coords(grid.slice_dims.size());
      for (size_t i = grid.slice_dims.size(); i-- > 0;) {
        coords[i] = rest % shape[grid.slice_dims[i]];
        rest /= shape[grid.slice_dims[i]];
      }
      for (size_t i = 0; i < coords.size(); ++i) {
        title += StrCat(i ? " " : "", DimIs(mesh, grid.slice_dims[i], coords[i]));
      }
      if (tm.Width(title) <= slice_w + gap) {
        out.draw.texts.push_back(
            {x, y, tm.Width(title), line, title, kDimTextColor, Role::kDecoration});
      }
    }
  }

  // Cells (or aggregates).
  const bool bordered = pitch >= 6 && aggregate == 1;
  const float inset = bordered ? 1 : 0;
  out.cell_inset = inset;
  std::vector<int64_t> positions_drawn;
  for (int64_t p = 0; p < n; ++p) {
    int64_t row = 0, col = 0, s = 0;
    if (grid.row_dim < 0) {
      row = p / cols;
      col = p % cols;
    } else {
      const std::vector<int64_t> c = model.CoordinateAt(p);
      row = c[grid.row_dim];
      col = c[grid.col_dim];
      s = slice_of(c);
    }
    auto [sx, sy] = slice_origin(s);
    const float x0 = sx + static_cast<float>((col / aggregate) * pitch);
    const float y0 = sy + (titled ? line + 2 : 0) + static_cast<float>((row / aggregate) * pitch);
    const Rect cell = R(x0, y0, x0 + pitch, y0 + pitch);
    out.cells[p] = cell;
    const bool first_of_aggregate =
        aggregate == 1 || (row % aggregate == 0 && col % aggregate == 0);
    if (!first_of_aggregate || !cell.Intersects(visible)) continue;
    const int64_t rank = model.RankAt(p);
    const bool differs = !hl.differs.empty() && hl.differs[p];
    const Rgba fill = differs ? kDiffColor : RankColor(rank);
    DrawRect rect;
    rect.rect = R(x0 + inset, y0 + inset, x0 + pitch - inset, y0 + pitch - inset);
    rect.fill = fill;
    rect.role = Role::kMeshCell;
    rect.rank = rank;
    out.draw.rects.push_back(rect);
    positions_drawn.push_back(p);
    // Label: the rank, where it fits.
    const std::string label = std::to_string(rank);
    const float w = tm.Width(label);
    if (aggregate == 1 && w + 4 <= pitch && line + 2 <= pitch) {
      // Semantic zoom: below the number, the coordinate and the local shape where they fit.
      std::vector<std::string> lines{label};
      if (pitch >= CoordinateLevelPitch(tm)) {
        const std::string coord = CellCoordinate(mesh, model.CoordinateAt(p));
        if (tm.Width(coord) + 4 <= pitch) lines.push_back(coord);
        if (pitch >= ShapeLevelPitch(tm) && p < static_cast<int64_t>(frame.layouts.size())) {
          const std::string shape = "local " + IntListToString(frame.layouts[p].local_shape);
          if (tm.Width(shape) + 4 <= pitch) lines.push_back(shape);
        }
      }
      float ty = std::round(y0 + (pitch - line * static_cast<float>(lines.size())) / 2);
      for (const std::string& t : lines) {
        const float tw = tm.Width(t);
        out.draw.texts.push_back({std::round(x0 + (pitch - tw) / 2), ty, tw, line, t,
                                  TextColorOn(fill), Role::kMeshCell});
        ty += line;
      }
    }
  }

  // Group connectors of the current step: consecutive members of each group, where cells are large
  // enough to read them; the selected rank's group always.
  if (!frame.groups.empty()) {
    const bool all = pitch >= 8 && aggregate == 1;
    const bool labelled =
        aggregate == 1 && pitch >= CoordinateLevelPitch(tm);  // coordinates in the cells
    for (const auto& group : frame.groups) {
      bool emphasised = false;
      std::vector<int64_t> pos;
      for (int64_t r : group) {
        if (auto p = model.FindPosition(r)) {
          pos.push_back(*p);
          emphasised = emphasised || hl.in_group[*p];
        }
      }
      if (!all && !emphasised) continue;
      const Rgba color = emphasised ? kGroupColor : Rgba{255, 255, 255, 90};
      for (size_t i = 1; i < pos.size(); ++i) {
        const Rect& a = out.cells[pos[i - 1]];
        const Rect& b = out.cells[pos[i]];
        const Rect span = R(std::min(a.x0, b.x0), std::min(a.y0, b.y0), std::max(a.x1, b.x1),
                            std::max(a.y1, b.y1));
        if (!span.Intersects(visible)) continue;
        float ax = (a.x0 + a.x1) / 2, ay = (a.y0 + a.y1) / 2;
        float bx = (b.x0 + b.x1) / 2, by = (b.y0 + b.y1) / 2;
        if (labelled) {
          // Cells with labels: only the part of the line between the two cells, so it never runs
          // over their text (the group's members are outlined besides).
          const float dx = bx - ax, dy = by - ay;
          auto leave = [&](const Rect& r) {  // the fraction of the line inside r's drawn rect
            const float tx = dx != 0 ? (r.width() / 2 - inset) / std::abs(dx) : 1e9f;
            const float ty = dy != 0 ? (r.height() / 2 - inset) / std::abs(dy) : 1e9f;
            return std::min(tx, ty);
          };
          const float t0 = leave(a), t1 = 1 - leave(b);
          if (t0 >= t1) continue;
          ax += t0 * dx, ay += t0 * dy;
          bx = (b.x0 + b.x1) / 2 - leave(b) * dx, by = (b.y0 + b.y1) / 2 - leave(b) * dy;
        }
        out.draw.lines.push_back(
            {ax, ay, bx, by, color, emphasised ? 2.0f : 1.0f, Role::kMeshGroup, group.front()});
      }
    }
  }

  // Outlines: anomalies, the group, the linked and the selected ranks (drawn inside the cell, over
  // its fill).
  const float thick = pitch >= 12 ? 3 : (pitch >= 6 ? 2 : 1);
  for (int64_t p : positions_drawn) {
    const Rect& c = out.cells[p];
    Rect ring = R(c.x0 + inset, c.y0 + inset, c.x1 - inset, c.y1 - inset);
    const int64_t rank = model.RankAt(p);
    const float room = std::max(1.0f, std::floor(ring.width() / 3));
    // Nested from the edge inwards, so that none hides another: anomaly, group, emphasis.
    auto outline = [&](Rgba color, float width, Role role) {
      DrawRect r;
      r.rect = ring;
      r.border = color;
      r.border_width = std::min(width, room);
      r.role = role;
      r.rank = rank;
      out.draw.rects.push_back(r);
      if (ring.width() > 2 * r.border_width + 2) {
        const float d = r.border_width;
        ring = R(ring.x0 + d, ring.y0 + d, ring.x1 - d, ring.y1 - d);
      }
    };
    if (!hl.anomalies.empty() && hl.anomalies[p]) outline(kAnomalyColor, thick, Role::kHighlight);
    if (hl.in_group[p] && hl.emphasis[p] != 2) {
      // Yellow with a dark hairline inside it, so the ring reads on any rank colour (on a yellowish
      // cell the hairline separates it from the fill); in cells too small for the hairline, a
      // colour that contrasts with the fill.
      const Rgba fill = (!hl.differs.empty() && hl.differs[p]) ? kDiffColor : RankColor(rank);
      const bool hairline = thick >= 2 && ring.width() >= 2 * thick + 6;
      outline(hairline ? kGroupColor : OutlineOn(fill, kGroupColor), thick, Role::kMeshGroup);
      if (hairline) outline(kCellBorderColor, 1, Role::kMeshGroup);
    }
    if (hl.emphasis[p] == 1) outline(kHighlightColor, std::max(1.0f, thick - 1), Role::kHighlight);
    if (hl.emphasis[p] == 2) {
      outline(kHighlightColor, thick, Role::kHighlight);
      if (pitch < 10) {
        // Small cells: a ring around the cell as well, so the selected rank can be found at a
        // glance.
        DrawRect halo;
        halo.rect = Rect{c.x0 - 3, c.y0 - 3, c.x1 + 3, c.y1 + 3};
        halo.border = kHighlightColor;
        halo.border_width = 2;
        halo.role = Role::kHighlight;
        halo.rank = rank;
        out.draw.rects.push_back(halo);
      }
    }
  }
  out.draw.MarkZoomed(0, 0, 1);  // all but the header
  return out;
}

Zoom ZoomMeshAbout(const TraceModel& model, const Frame& frame, const Highlight& hl,
                   const MeshGrid& grid, const Rect& area, const TextMetrics& tm, const Zoom& zoom,
                   float factor, float x, float y) {
  const MeshLayout before = LayoutMesh(model, frame, hl, grid, area, tm, zoom);
  const Rect& vp = before.viewport;
  Zoom out = zoom;
  ZoomAbout(out, factor, x - vp.x0, y - vp.y0, vp.width(), vp.height());
  const std::optional<int64_t> rank = before.RankAt(x, y);
  if (!rank) return out;
  const int64_t p = model.GetPosition(*rank);
  const Rect& a = before.cells[p];
  const float fx = (x - a.x0) / std::max(1.0f, a.width());
  const float fy = (y - a.y0) / std::max(1.0f, a.height());
  const MeshLayout after = LayoutMesh(model, frame, hl, grid, area, tm, out);
  const Rect& b = after.cells[p];
  out.pan_x += b.x0 + fx * b.width() - x;
  out.pan_y += b.y0 + fy * b.height() - y;
  ClampZoom(out, vp.width(), vp.height());
  return out;
}

}  // namespace dtsim::viewer
