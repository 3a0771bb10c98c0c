// The viewer's whole state without any GUI type: the traces the user opened, their comparison, the
// view state, a load error, and (headless runs) the records each panel drew. The panels read and
// change it; tests drive it.
//
// Example: App app; LoadTraces(app, {"sim.json", "real.json"}); app.diff->summary is the comparison
// line; with traces of different meshes app.error is "traces: 'sim.json' and 'real.json' are not
// traces of the same redistribution: the meshes differ: ...", and no trace is loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "draw.h"
#include "events_view.h"
#include "model_view.h"
#include "recording_view.h"
#include "trace_model.h"
#include "view_state.h"

namespace dtsim::viewer {

// What identifies a file's contents cheaply: a changed file (rewritten, replaced by a rename) has
// another stamp.
struct FileStamp {
  uint64_t device = 0, inode = 0;
  int64_t size = -1;  // -1: could not be read
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp& o) const {
    return device == o.device && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns;
  }
};
FileStamp StampOf(const std::string& path);

struct App {
  std::vector<std::string> paths;  // what the user asked to open (1 or 2)
  // A recording (dtsim.record) opened: one view per recorded redistribution; `first` is the one at
  // recording_index. Empty for traces.
  std::vector<RecordedView> recording;
  int64_t recording_index = 0;
  std::vector<FileStamp> stamps;    // of `paths` when they were loaded
  std::vector<std::string> recent;  // traces opened recently, most recent first (the open box)
  // A model trace (dtsim model --trace) opened, alone or with a second one to compare: the model
  // trace window (model_view.h) replaces the redistribution panels; `first` stays empty.
  std::optional<ModelSession> model;
  // A recording's run events (every rank's ops and collectives) opened: one recording of events
  // only (a Flight Recorder import), or two recordings compared event by event; the events window
  // (events_view.h) replaces the redistribution panels; `first` stays empty.
  std::optional<EventsSession> events;
  std::optional<TraceModel> first;  // the loaded traces (both absent when loading failed)
  std::optional<TraceModel> second;
  std::optional<TraceDiff> diff;  // first vs second, on the first's frames; or, for a recording
                                  // alone, its replicas that disagree (ShowRecorded)
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
  std::string pending_hover_panel;  // "mesh", "tensor", "bytes" or "" (what --dump-records reports)
  // The text boxes of the window (plain strings, so tests can drive them): go to a rank, find a
  // step, open a trace (and a second one to compare).
  std::string goto_text, goto_error;
  std::string find_text;
  std::string open_path, open_second;
  bool focus_open = false;  // Ctrl+O: the open box takes the keyboard in the next frame
  std::string recent_file;  // where `recent` is saved after a successful open ("": nowhere)
  bool record = false;      // keep what each panel draws (headless --dump-records)
  std::vector<std::pair<std::string, DrawList>>
      recorded;  // panel name → its records in screen pixels
  std::vector<std::pair<std::string, Rect>>
      recorded_viewports;  // panel name → its zoomable area in screen pixels

  // A redistribution trace (or a recording) is loaded.
  bool loaded() const { return first.has_value(); }
  // A model trace is loaded.
  bool model_loaded() const { return model.has_value(); }
  // Run events are loaded.
  bool events_loaded() const { return events.has_value(); }
  // Something is open (else the error screen shows app.error).
  bool opened() const { return loaded() || model_loaded() || events_loaded(); }
  // What the panels draw: the first trace, or the second one in diff mode when view.show_second.
  const TraceModel& shown() const;
  // The comparison laid onto shown()'s frames (nullptr with one trace).
  const TraceDiff* shown_diff() const;
  // The trace not shown (nullptr with one trace).
  const TraceModel* other() const;
};

// Opens 1 or 2 trace files into `app` (TraceModel::Load, then CheckSameRedistribution and
// DiffModels for a pair), or one recording (its first redistribution; ShowRecorded picks another;
// one that recorded events but no redistribution, as a Flight Recorder import, opens its events),
// or two recordings (their events compared, EventsSession), or 1 or 2 model traces
// (ModuleTree::FromText, then CheckSameModelRun and CompareModelTraces for a pair, the first
// difference selected). A model trace goes only with another model trace: InputError("traces",
// "'m.json' is a model trace but 't.json' is not: ..."). On InputError: app.error = its text, no
// trace loaded. Resets the view to frame 0; in diff mode it starts at the first frame where the
// traces part.
void LoadTraces(App& app, const std::vector<std::string>& paths);

// The trace formats (include/dtsim/trace/formats.h) the viewer draws, each opened by its row of one
// table in app_state.cc; a file of any other format is read as a dtsim-trace, whose reader refuses
// it naming its format.
std::vector<std::string> ViewerFormats();

// A recording is open: shows its redistribution `index` (InputError("redistribution") when there is
// none such), the view starting afresh; ranks whose replicas disagree there (ReplicaMismatches) are
// app.diff's differences, red in every panel, the view at the first of them. LoadTraces opens a
// recording at its first redistribution with such ranks.
void ShowRecorded(App& app, int64_t index);

// True when a file of app.paths changed on disk since it was loaded (the window then reloads it).
bool TracesChanged(const App& app);
// Loads app.paths again and keeps the view (frame, selection, grids, zoom) where it still applies
// to the new contents (the same mesh and tensor rank); otherwise the view starts afresh.
void ReloadTraces(App& app);

// Adds `paths` (made absolute) to the front of app.recent, without duplicates, at most kMaxRecent.
inline constexpr size_t kMaxRecent = 12;
void RememberRecent(App& app, const std::vector<std::string>& paths);
// Where the list of recent traces is kept: $XDG_STATE_HOME/dtsim/viewer-recent.txt, else
// ~/.local/state/dtsim/viewer-recent.txt; "" when neither variable is set.
std::string RecentFilesPath();
// One path per line; a missing or unreadable file is an empty list (it is only a convenience), and
// at most 64 KiB is read.
std::vector<std::string> ReadRecentFiles(const std::string& path);
// Writes atomically, creating the folder; failures are ignored (returned as false).
bool WriteRecentFiles(const std::string& path, const std::vector<std::string>& recent);

}  // namespace dtsim::viewer
