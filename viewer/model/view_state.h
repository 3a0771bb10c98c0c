// The viewer's state as plain data — what the panels change and the layout step reads: the current
// frame, the selected and hovered ranks, the dims each grid shows, playback — and the highlight it
// implies for one frame.
//
// Example: ViewState v; v.frame = 2; v.selected_rank = 3;  ComputeHighlight(model, nullptr,
// v).emphasis[pos(3)] == 2, and the ranks of rank 3's group in step 2 have in_group set: the mesh
// panel outlines them in kGroupColor.
#pragma once

#include <cstdint>
#include <vector>

#include "trace_model.h"

namespace dtsim::viewer {

struct ViewState {
  int64_t frame = 0;           // index into TraceModel::frames()
  int64_t selected_rank = -1;  // clicked in a panel, or --select-rank; -1: none
  int64_t hovered_rank =
      -1;  // under the mouse in the mesh panel or the bar chart (this frame); -1: none
  std::vector<int64_t> hovered_block_ranks;  // owners of the tensor block under the mouse
  // Mesh panel: the mesh dims that form each 2-D grid (rows, columns); the other dims make the grid
  // of slices. -1: the defaults (the last two dims; a 1-D mesh is one wrapped row).
  int mesh_row_dim = -1;
  int mesh_col_dim = -1;
  // Tensor panel: the tensor dims shown as rows and columns (-1: dims 0 and 1), and the index along
  // every other dim (tensor_slice[d]; missing entries are 0).
  int tensor_row_dim = -1;
  int tensor_col_dim = -1;
  std::vector<int64_t> tensor_slice;
  bool show_second = false;        // diff mode: draw the second trace (the first by default)
  bool playing = false;            // the timeline advances by itself
  double seconds_per_frame = 1.0;  // playback speed
};

// What to emphasise in one frame, per mesh position.
struct Highlight {
  // 2: the selected or hovered rank; 1: linked to what the mouse is over in another panel (the
  // owners of the hovered tensor block, or the hovered rank itself); 0: nothing.
  std::vector<uint8_t> emphasis;
  // 1: in the current step's group of the selected (or hovered) rank.
  std::vector<uint8_t> in_group;
  // 1: differs between the two traces at this frame (empty without a second trace).
  std::vector<uint8_t> differs;
  // 1: the trace's row disagrees with the layout rule.
  std::vector<uint8_t> anomalies;
  bool any_emphasis = false;
};

// The highlight of `view.frame` of `model` (`diff` may be null: one trace).
Highlight ComputeHighlight(const TraceModel& model, const TraceDiff* diff, const ViewState& view);

// The frame the timeline shows after `current` when playing or stepping (wraps around).
int64_t NextFrame(int64_t current, int64_t num_frames);
int64_t PreviousFrame(int64_t current, int64_t num_frames);

}  // namespace dtsim::viewer
