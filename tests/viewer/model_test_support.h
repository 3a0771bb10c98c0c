// Helpers shared by the viewer's model tests (layout_test.cc, explorer_test.cc): metadata-only
// traces from the planner, and a view's highlight with nothing hovered or selected.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "viewer/model/trace_model.h"
#include "viewer/model/view_state.h"
#include "viewer/tools/meta_trace.h"

namespace dtsim::viewer::testing {

// The trace of redistributing a tensor of `shape` on mesh `mesh` (names `names`) from `from` to
// `to`, as the planner plans it (no data).
inline TraceModel Meta(const std::string& mesh, const std::string& names,
                       std::vector<int64_t> shape, const std::string& from, const std::string& to) {
  const DTensorSpec spec =
      DTensorSpec::Create(DeviceMesh::Parse(mesh, names), ParsePlacements(from), std::move(shape));
  return TraceModel::FromTrace(MakeMetaTrace(spec, ParsePlacements(to)));
}

// The highlight of frame `frame` with no rank selected or hovered.
inline Highlight NoHighlight(const TraceModel& m, int64_t frame = 0) {
  ViewState v;
  v.frame = frame;
  return ComputeHighlight(m, nullptr, v);
}

}  // namespace dtsim::viewer::testing
