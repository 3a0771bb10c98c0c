// The viewer's whole state without any GUI type: the traces the user opened, their comparison, the
// view state, a load error, and (headless runs) the records each panel drew. The panels read and
// change it; tests drive it.
//
// Example: App app; LoadTraces(app, {"sim.json", "real.json"}); app.diff->summary is the comparison
// line; with traces of different meshes app.error is "traces: 'sim.json' and 'real.json' are not
// traces of the same redistribution: the meshes differ: ...", and no trace is loaded.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "draw.h"
#include "trace_model.h"
#include "view_state.h"

namespace dtsim::viewer {

struct App {
  std::vector<std::string> paths;   // what the user asked to open (1 or 2)
  std::optional<TraceModel> first;  // the loaded traces (both absent when loading failed)
  std::optional<TraceModel> second;
  std::optional<TraceDiff> diff;  // first vs second, on the first's frames
  std::optional<TraceDiff>
      diff_reversed;  // second vs first, on the second's frames (used when showing the second)
  std::string error;  // "field: message" of a failed load ("" when all is well)
  std::string error_field;  // its field and message apart
  std::string error_message;
  ViewState view;
  double last_advance_s = 0;  // playback clock
  // Hover found while drawing this frame; DrawViewer moves it into `view` for the next frame's
  // highlight.
  int64_t pending_hovered_rank = -1;
  std::vector<int64_t> pending_hovered_block_ranks;
  bool record = false;  // keep what each panel draws (headless --dump-records)
  std::vector<std::pair<std::string, DrawList>>
      recorded;  // panel name → its records in screen pixels

  bool loaded() const { return first.has_value(); }
  // What the panels draw: the first trace, or the second one in diff mode when view.show_second.
  const TraceModel& shown() const;
  // The comparison laid onto shown()'s frames (nullptr with one trace).
  const TraceDiff* shown_diff() const;
  // The trace not shown (nullptr with one trace).
  const TraceModel* other() const;
};

// Opens 1 or 2 trace files into `app` (TraceModel::Load, then CheckSameRedistribution and
// DiffModels for a pair). On InputError: app.error = its text, no trace loaded. Resets the view to
// frame 0; in diff mode it starts at the first frame where the traces part.
void LoadTraces(App& app, const std::vector<std::string>& paths);

}  // namespace dtsim::viewer
