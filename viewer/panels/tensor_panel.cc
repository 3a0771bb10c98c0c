// The tensor panel: the global tensor's blocks per owning rank (model/tensor_layout.h), dim pickers
// and slice sliders for tensors of more than two dims, zoom and pan, hover linking blocks to the
// mesh.
#include <imgui.h>

#include <algorithm>

#include "panels.h"
#include "viewer/model/rank_details.h"
#include "viewer/model/tensor_layout.h"

namespace dtsim::viewer {
namespace {

constexpr float kComboWidth = 120;

bool TensorDimCombo(const char* label, const DTensorSpec& spec, int* dim) {
  auto name = [&](int d) {
    return "dim " + std::to_string(d) + " (" + std::to_string(spec.shape()[d]) + ")";
  };
  bool changed = false;
  ImGui::SetNextItemWidth(kComboWidth);
  if (ImGui::BeginCombo(label, name(*dim).c_str())) {
    for (int d = 0; d < spec.ndim(); ++d) {
      if (ImGui::Selectable(name(d).c_str(), d == *dim)) {
        changed = d != *dim;
        *dim = d;
      }
    }
    ImGui::EndCombo();
  }
  return changed;
}

void RankTooltipLines(App& app, const TraceModel& model, int64_t rank) {
  for (const std::string& line :
       RankDetails(model, app.view.frame, model.GetPosition(rank), app.other(), app.shown_diff())) {
    ImGui::TextUnformatted(line.c_str());
  }
}

}  // namespace

void DrawTensorPanel(App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("tensor", ImVec2(area.width(), area.height()), true,
                    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  const TraceModel& model = app.shown();
  const Frame& frame = model.frame(app.view.frame);
  const DTensorSpec& spec = frame.spec;
  ImGui::TextUnformatted("Tensor");
  TensorView tv = ResolveTensorView(spec, app.view);
  // Pickers and sliders first (they stay put while the text after them changes length), wrapping
  // onto new lines in narrow panels.
  if (spec.ndim() >= 2) {
    const float label_w = ImGui::CalcTextSize("rows").x + ImGui::GetStyle().ItemInnerSpacing.x;
    int row = tv.row_dim, col = tv.col_dim;
    SameLineIfFits(kComboWidth + label_w);
    if (TensorDimCombo("rows##tensor", spec, &row) && row == col) col = tv.row_dim;
    SameLineIfFits(kComboWidth + label_w);
    if (TensorDimCombo("cols##tensor", spec, &col) && col == row) row = tv.col_dim;
    app.view.tensor_row_dim = row;
    app.view.tensor_col_dim = col;
    app.view.tensor_slice.resize(spec.ndim(), 0);
    for (int d = 0; d < spec.ndim(); ++d) {
      if (d == row || d == col || spec.shape()[d] <= 1) continue;
      int index =
          static_cast<int>(std::min<int64_t>(app.view.tensor_slice[d], spec.shape()[d] - 1));
      const float slider_w = std::min(200.0f, area.width() / 3);
      const std::string label = "slice dim " + std::to_string(d);
      SameLineIfFits(slider_w + ImGui::CalcTextSize(label.c_str()).x + 8);
      ImGui::SetNextItemWidth(slider_w);
      if (ImGui::SliderInt(label.c_str(), &index, 0, static_cast<int>(spec.shape()[d] - 1))) {
        app.view.tensor_slice[d] = index;
      }
    }
    tv = ResolveTensorView(spec, app.view);
  }
  const std::string title = IntListToString(spec.shape()) + " " + ToString(spec.dtype()) + "  " +
                            ToString(spec.placements());
  SameLineIfFits(ImGui::CalcTextSize(title.c_str()).x);
  ImGui::TextUnformatted(title.c_str());
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (avail.x < 8 || avail.y < 8) {
    ImGui::EndChild();
    return;
  }
  const TextMetrics tm = CurrentTextMetrics();
  const Highlight hl = ComputeHighlight(model, app.shown_diff(), app.view);
  const Rect canvas{0, 0, avail.x, avail.y};
  Zoom& zoom = app.view.tensor_zoom;
  TensorLayout layout = LayoutTensor(model, frame, hl, tv, canvas, tm, zoom);
  if ((app.view.centre_pending & kCentreTensor) != 0) {
    // Go to a rank: centre its first block in the shown slice, zooming in while it is small.
    app.view.centre_pending &= ~kCentreTensor;
    auto find = [&]() -> const TensorBlock* {
      for (const TensorBlock& b : layout.blocks) {
        if (std::binary_search(b.ranks.begin(), b.ranks.end(), app.view.centre_rank)) return &b;
      }
      return nullptr;
    };
    const TensorBlock* b = find();
    if (b == nullptr) {
      // The rank holds nothing of the shown slice: show the slice of its first element.
      if (auto p = model.FindPosition(app.view.centre_rank)) {
        const RankLayout& l = frame.layouts[*p];
        app.view.tensor_slice.resize(spec.ndim(), 0);
        for (int d = 0; d < spec.ndim(); ++d) {
          if (d != tv.row_dim && d != tv.col_dim && !l.intervals[d].empty())
            app.view.tensor_slice[d] = l.intervals[d].front().lo;
        }
        tv = ResolveTensorView(spec, app.view);
        layout = LayoutTensor(model, frame, hl, tv, canvas, tm, zoom);
        b = find();
      }
    }
    if (b != nullptr) {
      const float extent = std::min(b->rect.width(), b->rect.height());
      const float want = 4 * tm.line_height;
      if (extent < want) {
        zoom.scale = std::min(kMaxZoom, zoom.scale * want / std::max(extent, 0.5f));
        layout = LayoutTensor(model, frame, hl, tv, canvas, tm, zoom);
        b = find();
      }
      if (b != nullptr) {
        const Rect& vp = layout.viewport;
        CentreOn(zoom, (b->rect.x0 + b->rect.x1) / 2 - vp.x0 + zoom.pan_x,
                 (b->rect.y0 + b->rect.y1) / 2 - vp.y0 + zoom.pan_y, vp.width(), vp.height());
        layout = LayoutTensor(model, frame, hl, tv, canvas, tm, zoom);
      }
    }
  }
  const CanvasInput in = ZoomableCanvas("tensor_canvas", avail.x, avail.y, zoom, layout.viewport);
  if (in.zoom_factor != 1) {
    const Rect& vp = layout.viewport;
    ZoomAbout(zoom, in.zoom_factor, in.x - vp.x0, in.y - vp.y0, vp.width(), vp.height());
  }
  ImGui::SetItemAllowOverlap();  // the zoom status's button lies over the canvas
  Paint(app, "tensor", layout.draw, origin.x, origin.y, &layout.viewport);
  ZoomStatus(zoom, "tensor_zoom", origin.x + avail.x, origin.y + layout.viewport.y0);
  if (in.hovered) {
    const float x = in.x, y = in.y;
    if (auto hit = layout.BlockAt(x, y)) {
      const TensorBlock& b = layout.blocks[*hit];
      app.pending_hovered_block_ranks = b.ranks;
      const int64_t owner_rank = layout.OwnerAt(*hit, x, y);
      app.pending_hovered_rank = owner_rank;
      app.pending_hover_panel = "tensor";
      ImGui::BeginTooltip();
      std::string where;
      if (tv.row_dim >= 0)
        where += "rows " + std::to_string(b.rows.lo) + ":" + std::to_string(b.rows.hi) + "  ";
      if (tv.col_dim >= 0)
        where += "cols " + std::to_string(b.cols.lo) + ":" + std::to_string(b.cols.hi);
      ImGui::TextUnformatted(where.c_str());
      ImGui::TextUnformatted(("owned by rank" + std::string(b.ranks.size() == 1 ? " " : "s ") +
                              OwnersText(b.ranks, 12))
                                 .c_str());
      const int64_t replicas =
          static_cast<int64_t>(b.ranks.size()) / std::max<int64_t>(1, b.partial_ways);
      if (replicas > 1)
        ImGui::Text("replicated %lld times (identical copies)", static_cast<long long>(replicas));
      if (b.partial_ways > 1) {
        ImGui::Text("Partial: %lld ranks hold addends; the value is their reduction",
                    static_cast<long long>(b.partial_ways));
      }
      // The owner's details when the rank panel shows another (selected) rank.
      if (app.view.selected_rank >= 0 && app.view.selected_rank != owner_rank) {
        ImGui::Separator();
        RankTooltipLines(app, model, owner_rank);
      }
      ImGui::EndTooltip();
      if (in.clicked)
        app.view.selected_rank = app.view.selected_rank == owner_rank ? -1 : owner_rank;
    } else if (auto empty = HitTest(layout.draw, x, y, Role::kEmptyShard)) {
      const int64_t rank = layout.draw.rects[*empty].rank;
      app.pending_hovered_rank = rank;
      app.pending_hover_panel = "tensor";
      ImGui::BeginTooltip();
      ImGui::Text("rank %lld holds an empty shard", static_cast<long long>(rank));
      if (app.view.selected_rank >= 0 && app.view.selected_rank != rank) {
        ImGui::Separator();
        RankTooltipLines(app, model, rank);
      }
      ImGui::EndTooltip();
      if (in.clicked) app.view.selected_rank = app.view.selected_rank == rank ? -1 : rank;
    } else if (in.clicked) {
      app.view.selected_rank = -1;
    }
  }
  ImGui::EndChild();
}

}  // namespace dtsim::viewer
