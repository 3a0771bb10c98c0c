// One frame as a picture (see picture.h).
#include "picture.h"

#include <algorithm>
#include <cmath>

#include "colors.h"
#include "mesh_layout.h"
#include "tensor_layout.h"

namespace dtsim::viewer {

std::pair<int, int> PictureSize(const TraceModel& model) {
  // Room for about 28 px per mesh cell of the largest grid row, capped; a tensor area beside it.
  const int64_t n = model.world_size();
  const int side =
      static_cast<int>(std::clamp<double>(std::sqrt(static_cast<double>(n)) * 34, 220, 900));
  return {std::max(720, side + 560), std::max(360, side + 60)};
}

DrawList LayoutPicture(const TraceModel& model, int64_t frame_index, const ViewState& view,
                       int width, int height, const TextMetrics& tm) {
  DrawList out;
  const Frame& frame = model.frame(frame_index);
  const float pad = 10;
  const float line = tm.line_height;
  const std::string title = frame.spec.ToString();
  out.texts.push_back({pad, pad, tm.Width(title), line, title, kTextColor, Role::kDecoration});
  const Highlight hl = ComputeHighlight(model, nullptr, view);
  const float top = pad + line + 8;
  const float mesh_w = std::round(std::min(0.42f * width, std::max(200.0f, 0.35f * width)));
  const Rect mesh_area{pad, top, pad + mesh_w, static_cast<float>(height) - pad};
  const float right = static_cast<float>(width) - pad, bottom = static_cast<float>(height) - pad;
  const Rect tensor_area{pad + mesh_w + 2 * pad, top, right, bottom};
  MeshLayout mesh =
      LayoutMesh(model, frame, hl, ResolveMeshGrid(model.mesh(), view), mesh_area, tm);
  TensorLayout tensor =
      LayoutTensor(model, frame, hl, ResolveTensorView(frame.spec, view), tensor_area, tm);
  out.Append(mesh.draw);
  out.Append(tensor.draw);
  return out;
}

}  // namespace dtsim::viewer
