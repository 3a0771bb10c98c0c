// View state and highlights (see view_state.h).
#include "view_state.h"

#include <algorithm>

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
  return num_frames <= 0 ? 0 : (current + 1) % num_frames;
}

int64_t PreviousFrame(int64_t current, int64_t num_frames) {
  return num_frames <= 0 ? 0 : (current + num_frames - 1) % num_frames;
}

}  // namespace dtsim::viewer
