// The tensor panel: the global tensor's blocks per owning rank (model/tensor_layout.h), dim pickers
// and slice sliders for tensors of more than two dims, hover linking blocks to the mesh.
#include <imgui.h>

#include <algorithm>

#include "panels.h"
#include "viewer/model/rank_details.h"
#include "viewer/model/tensor_layout.h"

namespace dtsim::viewer {
namespace {

bool TensorDimCombo(const char* label, const DTensorSpec& spec, int* dim) {
  auto name = [&](int d) {
    return "dim " + std::to_string(d) + " (" + std::to_string(spec.shape()[d]) + ")";
  };
  bool changed = false;
  ImGui::SetNextItemWidth(110);
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

}  // namespace

void DrawTensorPanel(App& app, const Rect& area) {
  ImGui::SetCursorScreenPos(ImVec2(area.x0, area.y0));
  ImGui::BeginChild("tensor", ImVec2(area.width(), area.height()), true);
  const TraceModel& model = app.shown();
  const Frame& frame = model.frame(app.view.frame);
  const DTensorSpec& spec = frame.spec;
  ImGui::TextUnformatted(("Tensor  " + IntListToString(spec.shape()) + " " +
                          ToString(spec.dtype()) + "  " + ToString(spec.placements()))
                             .c_str());
  TensorView tv = ResolveTensorView(spec, app.view);
  if (spec.ndim() >= 2) {
    int row = tv.row_dim, col = tv.col_dim;
    ImGui::SameLine();
    if (TensorDimCombo("rows##tensor", spec, &row) && row == col) col = tv.row_dim;
    ImGui::SameLine();
    if (TensorDimCombo("cols##tensor", spec, &col) && col == row) row = tv.col_dim;
    app.view.tensor_row_dim = row;
    app.view.tensor_col_dim = col;
    app.view.tensor_slice.resize(spec.ndim(), 0);
    for (int d = 0; d < spec.ndim(); ++d) {
      if (d == row || d == col || spec.shape()[d] <= 1) continue;
      int index = static_cast<int>(app.view.tensor_slice[d]);
      ImGui::SetNextItemWidth(std::min(240.0f, area.width() / 3));
      const std::string label = "slice dim " + std::to_string(d);
      if (ImGui::SliderInt(label.c_str(), &index, 0, static_cast<int>(spec.shape()[d] - 1))) {
        app.view.tensor_slice[d] = index;
      }
      ImGui::SameLine();
    }
    ImGui::NewLine();
    tv = ResolveTensorView(spec, app.view);
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (avail.x < 8 || avail.y < 8) {
    ImGui::EndChild();
    return;
  }
  ImGui::InvisibleButton("tensor_canvas", avail);
  const bool hovered = ImGui::IsItemHovered();
  const bool clicked = ImGui::IsItemClicked(ImGuiMouseButton_Left);
  const Highlight hl = ComputeHighlight(model, app.shown_diff(), app.view);
  const TensorLayout layout =
      LayoutTensor(model, frame, hl, tv, Rect{0, 0, avail.x, avail.y}, CurrentTextMetrics());
  Paint(app, "tensor", layout.draw, origin.x, origin.y);
  if (hovered) {
    const ImVec2 m = ImGui::GetIO().MousePos;
    const float x = m.x - origin.x, y = m.y - origin.y;
    if (auto hit = HitTest(layout.draw, x, y, Role::kTensorBlock)) {
      const TensorBlock& b = layout.blocks[layout.draw.rects[*hit].block];
      app.pending_hovered_block_ranks = b.ranks;
      auto owner = HitTest(layout.draw, x, y, Role::kTensorOwner);
      const int64_t owner_rank = owner ? layout.draw.rects[*owner].rank : -1;
      if (owner_rank >= 0) app.pending_hovered_rank = owner_rank;
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
      if (owner_rank >= 0) {
        ImGui::Separator();
        for (const std::string& line :
             RankDetails(model, app.view.frame, model.GetPosition(owner_rank), app.other(),
                         app.shown_diff())) {
          ImGui::TextUnformatted(line.c_str());
        }
        if (clicked)
          app.view.selected_rank = app.view.selected_rank == owner_rank ? -1 : owner_rank;
      }
      ImGui::EndTooltip();
    } else if (auto empty = HitTest(layout.draw, x, y, Role::kEmptyShard)) {
      const int64_t rank = layout.draw.rects[*empty].rank;
      app.pending_hovered_rank = rank;
      ImGui::BeginTooltip();
      for (const std::string& line : RankDetails(model, app.view.frame, model.GetPosition(rank),
                                                 app.other(), app.shown_diff())) {
        ImGui::TextUnformatted(line.c_str());
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
