// View state and highlights (see view_state.h).
#include "view_state.h"

#include <algorithm>
#include <cmath>

namespace dtsim::viewer {

Highlight ComputeHighlight(const TraceModel& model, const TraceDiff* diff, const ViewState& view) {
  const int64_t n = model.world_size();
  const int64_t f = std::clamp<int64_t>(view.frame, 0, model.num_frames() - 1);
  const Frame& frame = model.frame(f);
  Highlight h;
  h.emphasis.assign(n, 0);
  h.in_group.assign(n, 0);
  h.anomalies = frame.anomalies;
  auto emphasise = [&](int64_t rank, uint8_t level) {
    if (auto p = model.FindPosition(rank)) {
      h.emphasis[*p] = std::max(h.emphasis[*p], level);
      h.any_emphasis = true;
    }
  };
  for (int64_t r : view.hovered_block_ranks) emphasise(r, 1);
  emphasise(view.hovered_rank, 2);
  emphasise(view.selected_rank, 2);
  // The group of the selected rank (else the hovered one) in this step.
  const int64_t focus = view.selected_rank >= 0 ? view.selected_rank : view.hovered_rank;
  if (auto p = model.FindPosition(focus); p && !frame.group_of.empty() && frame.group_of[*p] >= 0) {
    for (int64_t r : frame.groups[frame.group_of[*p]]) {
      if (auto q = model.FindPosition(r)) h.in_group[*q] = 1;
    }
  }
  if (diff != nullptr && f < static_cast<int64_t>(diff->differs.size()))
    h.differs = diff->differs[f];
  return h;
}

int64_t NextFrame(int64_t current, int64_t num_frames) {
  return num_frames <= 0 ? 0 : std::clamp<int64_t>(current + 1, 0, num_frames - 1);
}

int64_t PreviousFrame(int64_t current, int64_t num_frames) {
  return num_frames <= 0 ? 0 : std::clamp<int64_t>(current - 1, 0, num_frames - 1);
}

int64_t PlaybackFrame(int64_t current, int64_t num_frames) {
  return num_frames <= 0 ? 0 : (std::max<int64_t>(current, -1) + 1) % num_frames;
}

void ClampZoom(Zoom& z, float width, float height) {
  if (!(z.scale >= 1)) z.scale = 1;  // also NaN
  z.scale = std::min(z.scale, kMaxZoom);
  const float max_x = std::max(0.0f, width * (z.scale - 1));
  const float max_y = std::max(0.0f, height * (z.scale - 1));
  z.pan_x = std::isfinite(z.pan_x) ? std::clamp(z.pan_x, 0.0f, max_x) : 0;
  z.pan_y = std::isfinite(z.pan_y) ? std::clamp(z.pan_y, 0.0f, max_y) : 0;
  if (z.scale == 1) z.pan_x = z.pan_y = 0;
}

void ZoomAbout(Zoom& z, float factor, float x, float y, float width, float height) {
  const float old_scale = z.scale;
  z.scale = std::clamp(z.scale * factor, 1.0f, kMaxZoom);
  const float f = z.scale / old_scale;
  z.pan_x = (x + z.pan_x) * f - x;
  z.pan_y = (y + z.pan_y) * f - y;
  ClampZoom(z, width, height);
}

void PanBy(Zoom& z, float dx, float dy, float width, float height) {
  z.pan_x -= dx;
  z.pan_y -= dy;
  ClampZoom(z, width, height);
}

void CentreOn(Zoom& z, float cx, float cy, float width, float height) {
  z.pan_x = cx - width / 2;
  z.pan_y = cy - height / 2;
  ClampZoom(z, width, height);
}

void GoToRank(ViewState& view, int64_t rank) {
  view.selected_rank = rank;
  view.centre_rank = rank;
  view.centre_pending = kCentreMesh | kCentreTensor;
}

}  // namespace dtsim::viewer
