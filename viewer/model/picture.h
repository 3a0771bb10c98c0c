// A picture of one frame without a window: a title, the mesh (left) and the global tensor's blocks
// (right), laid out by the same steps as the viewer's panels. `dtsim layout --svg/--png` draws the
// layout of a spec this way.
//
// Example: LayoutPicture(TraceModel::FromSpec(spec), 0, ViewState{}, 960, 440, kRasterTextMetrics)
// → records for a 960x440 picture; ToSvg(...) or Rasterize(...) + EncodePng(...) turn them into a
// file.
#pragma once

#include "draw.h"
#include "trace_model.h"
#include "view_state.h"

namespace dtsim::viewer {

DrawList LayoutPicture(const TraceModel& model, int64_t frame, const ViewState& view, int width,
                       int height, const TextMetrics& metrics);

// The picture's size for a model: wide enough for the mesh and the tensor, at least 720 x 360.
std::pair<int, int> PictureSize(const TraceModel& model);

}  // namespace dtsim::viewer
