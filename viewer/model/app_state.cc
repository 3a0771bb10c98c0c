// The viewer's state (see app_state.h).
#include "app_state.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <utility>

#include "dtsim/layout/error.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/recording.h"

namespace dtsim::viewer {

const TraceModel& App::shown() const {
  DTSIM_CHECK(first.has_value(), "no trace loaded");
  return view.show_second && second ? *second : *first;
}

const TraceDiff* App::shown_diff() const {
  // One recording: its replicas that disagree, if any (ShowRecorded).
  if (!second) return diff ? &*diff : nullptr;
  return view.show_second ? &*diff_reversed : &*diff;
}

const TraceModel* App::other() const {
  if (!second) return nullptr;
  return view.show_second ? &*first : &*second;
}

FileStamp StampOf(const std::string& path) {
  FileStamp st;
  struct stat s {};
  if (::stat(path.c_str(), &s) != 0) return st;
  st.device = static_cast<uint64_t>(s.st_dev);
  st.inode = static_cast<uint64_t>(s.st_ino);
  st.size = static_cast<int64_t>(s.st_size);
  st.mtime_ns = static_cast<int64_t>(s.st_mtim.tv_sec) * 1000000000 + s.st_mtim.tv_nsec;
  return st;
}

bool TracesChanged(const App& app) {
  if (app.stamps.size() != app.paths.size()) return false;
  for (size_t i = 0; i < app.paths.size(); ++i) {
    if (!(StampOf(app.paths[i]) == app.stamps[i])) return true;
  }
  return false;
}

void ShowRecorded(App& app, int64_t index) {
  if (app.recording.empty()) throw InputError("redistribution", "no recording is open");
  if (index < 0 || index >= static_cast<int64_t>(app.recording.size())) {
    throw InputError("redistribution",
                     StrCat(index, " is not a redistribution of the recording (0..",
                            app.recording.size() - 1, ")"));
  }
  app.first = TraceModel::FromTrace(app.recording[index].trace, app.paths.at(0));
  app.recording_index = index;
  app.view = ViewState{};
  // Ranks whose replicas disagree are differences of this one trace: red in every panel, and the
  // view opens where the first one is (as dtsim replay names them).
  app.diff.reset();
  const std::vector<ReplicaMismatch>& mismatches = app.recording[index].replica_mismatches;
  if (!mismatches.empty()) {
    std::vector<TraceDifference> differences;
    for (const ReplicaMismatch& m : mismatches) {
      TraceDifference d;
      d.phase = m.before ? TraceDifference::Phase::kInitial : TraceDifference::Phase::kFinal;
      d.where = m.before ? "initial" : "final";
      d.what = StrCat("replicas: rank ", m.rank, m.before ? " held " : " holds ", m.hash,
                      ", where its replicas (ranks ", IntListToString(m.replicas), ") hold ",
                      m.replica_hash);
      d.ranks = {m.rank};
      differences.push_back(std::move(d));
    }
    app.diff = DiffOfOne(*app.first, std::move(differences));
    if (app.diff->first_frame) app.view.frame = *app.diff->first_frame;
  }
}

void ReloadTraces(App& app) {
  if (app.model) {
    // A model trace: keep the rank, the expanded rows and (one trace) the selection when the new
    // contents are of the same mesh.
    const ModelView before = app.model->view;
    const std::vector<int64_t> mesh = app.model->first.trace().mesh_shape;
    const bool pair = app.model->second.has_value();
    const std::vector<std::string> paths = app.paths;
    LoadTraces(app, paths);
    if (!app.model || app.model->first.trace().mesh_shape != mesh) return;
    ModelView& v = app.model->view;
    v.rank = pair && app.model->second ? v.rank : before.rank;
    v.expanded.insert(before.expanded.begin(), before.expanded.end());
    if (!app.model->second) v.selected = before.selected;
    return;
  }
  if (app.events) {
    // Run events: keep the rank and the selected event where the new contents have them.
    const EventsView before = app.events->view;
    const std::vector<std::string> paths = app.paths;
    LoadTraces(app, paths);
    if (!app.events || before.rank >= app.events->world_size()) return;
    EventsView& v = app.events->view;
    if (!app.events->second) {
      v.rank = before.rank;
      v.event = before.event;
      MoveEventSelection(*app.events, 0);  // clamped to the rank's events
    }
    return;
  }
  const ViewState before = app.view;
  const int64_t recording_index = app.recording_index;
  const std::optional<DeviceMesh> mesh =
      app.loaded() ? std::optional<DeviceMesh>(app.first->mesh()) : std::nullopt;
  const int64_t tensor_ndim = app.loaded() ? app.first->frame(0).spec.ndim() : -1;
  const std::vector<std::string> paths = app.paths;
  LoadTraces(app, paths);
  if (app.loaded() && recording_index > 0 &&
      recording_index < static_cast<int64_t>(app.recording.size())) {
    ShowRecorded(app, recording_index);
  }
  if (!app.loaded() || !mesh || !(app.first->mesh().shape() == mesh->shape()) ||
      app.first->frame(0).spec.ndim() != tensor_ndim || (before.show_second && !app.second)) {
    return;
  }
  ViewState& v = app.view;
  const int64_t frame = v.frame;  // diff mode: the first difference of the new pair
  v = before;
  v.frame = app.second ? frame : std::min(before.frame, app.first->num_frames() - 1);
  v.hovered_rank = -1;
  v.hovered_block_ranks.clear();
  if (!app.shown().FindPosition(v.selected_rank)) v.selected_rank = -1;
  v.tensor_slice.clear();  // another frame may have other sizes; dims stay
  v.centre_pending = 0;
}

void RememberRecent(App& app, const std::vector<std::string>& paths) {
  for (auto it = paths.rbegin(); it != paths.rend(); ++it) {
    std::error_code ec;
    std::string abs = std::filesystem::absolute(*it, ec).lexically_normal().string();
    if (ec) abs = *it;
    app.recent.erase(std::remove(app.recent.begin(), app.recent.end(), abs), app.recent.end());
    app.recent.insert(app.recent.begin(), abs);
  }
  if (app.recent.size() > kMaxRecent) app.recent.resize(kMaxRecent);
}

std::string RecentFilesPath() {
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && *state == '/') return std::string(state) + "/dtsim/viewer-recent.txt";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home == '/')
    return std::string(home) + "/.local/state/dtsim/viewer-recent.txt";
  return "";
}

std::vector<std::string> ReadRecentFiles(const std::string& path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  std::string text;
  try {
    text = ReadInputFile(path, "recent", 64 * 1024);
  } catch (const InputError&) {
    return out;
  }
  size_t start = 0;
  while (start < text.size() && out.size() < kMaxRecent) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (!line.empty() && line.find('\0') == std::string::npos) out.push_back(line);
    start = end + 1;
  }
  return out;
}

bool WriteRecentFiles(const std::string& path, const std::vector<std::string>& recent) {
  if (path.empty()) return false;
  try {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    std::string text;
    for (const std::string& p : recent) {
      if (p.find('\n') == std::string::npos) text += p + "\n";
    }
    WriteOutputFile(path, text, "recent");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {

// ---- how the viewer opens each trace format (the formats of include/dtsim/trace/formats.h) ----

// A model trace, alone or beside another model trace of the same run.
void OpenModelTrace(App& app, TraceText first, const std::vector<std::string>& paths) {
  ModuleTree a = ModuleTree::FromText(first);
  first = TraceText{};
  if (paths.size() == 1) {
    app.model.emplace(std::move(a));
    return;
  }
  const TraceText other = ReadTraceText(paths[1]);
  if (other.format != kModelTraceFormat) {
    throw InputError(
        "traces", StrCat("'", paths[0], "' is a model trace but '", paths[1], "' is not (format ",
                         other.format.empty() ? "missing" : "\"" + other.format + "\"",
                         "): compare two model traces of the same run"));
  }
  app.model.emplace(std::move(a), ModuleTree::FromText(other));
}

// A recording: alone, one redistribution at a time, at the first whose replicas disagree, or its
// events when it recorded no redistribution (a Flight Recorder import, a run without DTensor
// redistributions); beside a second recording, the two runs' events compared.
void OpenRecording(App& app, TraceText first, const std::vector<std::string>& paths) {
  Recording a = RecordingFromText(std::exchange(first, TraceText{}));
  if (paths.size() == 2) {
    const TraceText other = ReadTraceText(paths[1]);
    if (other.format != kRecordingFormat) {
      throw InputError(
          "traces", StrCat("'", paths[0], "' is a recording but '", paths[1], "' is not (format ",
                           other.format.empty() ? "missing" : "\"" + other.format + "\"",
                           "): compare two recordings of the same job (dtsim record, dtsim run "
                           "--trace, dtsim import-fr)"));
    }
    app.events.emplace(std::move(a), paths[0], RecordingFromText(other), paths[1]);
    return;
  }
  if (a.redistributions.empty() && a.events) {
    app.events.emplace(std::move(a), paths[0]);
    return;
  }
  app.recording = ViewsOfRecording(a);
  if (app.recording.empty()) {
    throw InputError("recording", StrCat("'", paths[0], "' recorded no redistribution"));
  }
  app.first = TraceModel::FromTrace(app.recording.front().trace, paths[0]);
  // A recording opens at its first redistribution whose replicas disagree (else its first).
  int64_t index = 0;
  for (size_t i = 0; i < app.recording.size(); ++i) {
    if (!app.recording[i].replica_mismatches.empty()) {
      index = static_cast<int64_t>(i);
      break;
    }
  }
  ShowRecorded(app, index);
}

// A redistribution trace, alone or beside another one (diff mode, at the first frame they part).
// A file of no known format is read as one: its reader names the problem.
void OpenTrace(App& app, TraceText first, const std::vector<std::string>& paths) {
  TraceModel a = TraceModel::FromTrace(TraceFromText(std::exchange(first, TraceText{})), paths[0]);
  if (paths.size() == 2) {
    TraceModel b = TraceModel::Load(paths[1]);
    TraceDiff d = DiffModels(a, b);
    app.diff_reversed = DiffModels(b, a);
    app.view.frame = d.first_frame.value_or(0);
    app.diff = std::move(d);
    app.second = std::move(b);
  }
  app.first = std::move(a);
}

struct FormatOpener {
  const char* format;
  void (*open)(App& app, TraceText first, const std::vector<std::string>& paths);
};

// One row per format the viewer draws; the last opens a file of any other format.
// clang-format off
const FormatOpener kOpeners[] = {
    {kModelTraceFormat, OpenModelTrace},
    {kRecordingFormat,  OpenRecording},
    {kTraceFormat,      OpenTrace},
};
// clang-format on

}  // namespace

std::vector<std::string> ViewerFormats() {
  std::vector<std::string> out;
  for (const FormatOpener& o : kOpeners) out.push_back(o.format);
  return out;
}

void LoadTraces(App& app, const std::vector<std::string>& paths) {
  app.paths = paths;
  app.stamps.clear();
  for (const std::string& p : paths) app.stamps.push_back(StampOf(p));
  app.model.reset();
  app.events.reset();
  app.first.reset();
  app.second.reset();
  app.diff.reset();
  app.diff_reversed.reset();
  app.recording.clear();
  app.recording_index = 0;
  app.error.clear();
  app.error_field.clear();
  app.error_message.clear();
  app.view = ViewState{};
  try {
    if (paths.empty() || paths.size() > 2) {
      throw InputError("traces",
                       StrCat("give one trace, or two to compare (got ", paths.size(), ")"));
    }
    TraceText text = ReadTraceText(paths[0]);
    const FormatOpener* opener = &kOpeners[std::size(kOpeners) - 1];
    for (const FormatOpener& o : kOpeners)
      if (text.format == o.format) opener = &o;
    opener->open(app, std::move(text), paths);
  } catch (const InputError& e) {
    app.recording.clear();
    app.model.reset();
    app.events.reset();
    app.first.reset();
    app.second.reset();
    app.diff.reset();
    app.diff_reversed.reset();
    app.error = e.what();
    app.error_field = e.field();
    const std::string what = e.what();
    app.error_message = what.substr(std::min(what.size(), e.field().size() + 2));
  }
}

}  // namespace dtsim::viewer
