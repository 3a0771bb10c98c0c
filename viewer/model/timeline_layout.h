// The timeline panel's pure layout steps: the strip of frames (initial, each step, final) and the
// bar chart of the bytes every rank sends and receives in the current step — draw records only
// (panels/timeline_panel.cc draws them).
//
// Frame boxes name the step's collective and mesh dim; a box whose frame holds a difference between
// two traces has a bar in kDiffColor along its top; the current frame is outlined in white. In the
// bar chart each rank (mesh order) has a bar of bytes sent above the axis and of bytes received
// below it, in its colour (kDiffColor where it differs), each half scaled to its own maximum
// (printed beside it); when there are more ranks than pixel pairs, k consecutive ranks share one
// bar showing their maximum.
//
// Example: traces/uneven_2x4_S0R_to_RS1.json has frames initial, "1 local_split tp", "2 all_gather
// dp", final; the chart of frame 2 has 8 bars, rank 3's sent bar is 12/36 as tall as rank 0's (a
// 3x1 shard vs 3x3).
#pragma once

#include <cstdint>
#include <string>

#include "draw.h"
#include "trace_model.h"
#include "view_state.h"

namespace dtsim::viewer {

// One box per frame of `model`; `frame_differs` ([frame], may be empty) marks frames with
// differences (a red bar along the top), `matches` (ascending frame indices) the frames a step
// search found (a yellow bar along the bottom).
DrawList LayoutFrameStrip(const TraceModel& model, const std::vector<uint8_t>& frame_differs,
                          int64_t current, const Rect& area, const TextMetrics& metrics,
                          const std::vector<int64_t>& matches = {});

// The short label of a frame box: "initial", "1 all_gather dp", "final".
std::string FrameBoxLabel(const TraceModel& model, int64_t frame);

struct BytesChart {
  DrawList draw;
  int64_t ranks_per_bar = 1;  // k: consecutive mesh positions aggregated into one bar
  int64_t max_bytes = 0;      // the largest bytes sent or received by a rank in this step
};

BytesChart LayoutBytesChart(const TraceModel& model, const Frame& frame, const Highlight& highlight,
                            const Rect& area, const TextMetrics& metrics);

}  // namespace dtsim::viewer
