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

// Zoom and pan of a panel's content (the mesh grid, the tensor). The content is laid out at `scale`
// times the panel's size; (pan_x, pan_y) is the content pixel shown at the panel's top-left corner.
// scale 1, pan (0, 0): everything fits, as before any zoom. Pan is kept so that the content always
// covers the panel: 0 <= pan_x <= width * (scale - 1).
//
// Example: Zoom z; ZoomAbout(z, 2, 100, 50, 400, 300) doubles the size and keeps the content pixel
// under (100, 50) there: z.scale == 2, z.pan_x == 100, z.pan_y == 50.
struct Zoom {
  float scale = 1;
  float pan_x = 0, pan_y = 0;
  bool identity() const { return scale == 1 && pan_x == 0 && pan_y == 0; }
};

inline constexpr float kMaxZoom = 1024;  // 4,096 ranks at 1,024x: cells of several hundred pixels

// Multiplies the scale by `factor` (clamped to 1..kMaxZoom) keeping the content under (x, y) — a
// point of the viewport of `width` x `height` pixels — where it is.
void ZoomAbout(Zoom& zoom, float factor, float x, float y, float width, float height);
// Moves the content by (dx, dy) pixels (a drag), clamped.
void PanBy(Zoom& zoom, float dx, float dy, float width, float height);
// Clamps scale and pan to what the viewport allows.
void ClampZoom(Zoom& zoom, float width, float height);
// Pans so that the content point (cx, cy) — content pixels at the current scale, from the content's
// top-left — is at the viewport's centre (as far as the clamp allows).
void CentreOn(Zoom& zoom, float cx, float cy, float width, float height);

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
  Zoom mesh_zoom;    // the mesh panel's grid
  Zoom tensor_zoom;  // the tensor panel's tensor
  // Go to a rank: the panels centre `centre_rank` (zooming in until it is readable) and clear their
  // bit: kCentreMesh, kCentreTensor.
  int64_t centre_rank = -1;
  int centre_pending = 0;
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

inline constexpr int kCentreMesh = 1;
inline constexpr int kCentreTensor = 2;

// Selects `rank` and asks every panel to centre it (ViewState::centre_rank).
void GoToRank(ViewState& view, int64_t rank);

// The frame after / before `current` when stepping (keys, buttons): they stop at the first and the
// last frame.
int64_t NextFrame(int64_t current, int64_t num_frames);
int64_t PreviousFrame(int64_t current, int64_t num_frames);
// The frame after `current` when playing: wraps from the last frame to the first.
int64_t PlaybackFrame(int64_t current, int64_t num_frames);

}  // namespace dtsim::viewer
