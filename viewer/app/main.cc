// dtsim-viewer: the layout inspector. Opens one trace, or two to compare, in a window; or, with
// --screenshot, renders one frame offscreen and writes a PNG (for docs, tests and CI, under
// xvfb-run).
//
//   dtsim-viewer trace.json [other.json] [--step K] [--select-rank R] [--mesh-grid dp,tp]
//   dtsim-viewer model.json [other_model.json] [--select-rank R] [--module layers.0.attention]
//   [--tensor-grid 0,1]
//                [--slice 2=3] [--show-second] [--size 1600x1000]
//                [--screenshot out.png [--dump-records out.json]] [--bench-frames N]
//
// Exit codes: 0 done; 2 bad input (a trace that cannot be read, a mismatched pair, a bad option),
// printed as "dtsim-viewer: error: <field>: <message>"; 3 internal error; 4 no window or OpenGL
// context could be opened.
#include <imgui.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "dtsim/layout/error.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/trace.h"
#include "input_script.h"
#include "platform.h"
#include "viewer/model/app_state.h"
#include "viewer/model/find.h"
#include "viewer/model/mesh_layout.h"
#include "viewer/model/render_png.h"
#include "viewer/model/tensor_layout.h"
#include "viewer/panels/panels.h"

namespace po = boost::program_options;

namespace dtsim::viewer {
namespace {

// Options of dtsim-viewer; defaults in comments.
struct ViewerOptions {
  std::vector<std::string> traces;  // one trace, or two to compare
  std::string
      screenshot;  // "": interactive; else render one frame offscreen into this PNG and exit
  std::string dump_records;  // with --screenshot: also write every panel's draw records (JSON) here
  std::string step;  // the frame to show: initial / 0, a step number, final ("": initial, or the
                     // first difference of two traces)
  int64_t select_rank = -1;  // the rank to select (highlighted everywhere, shown in the rank panel)
  std::string
      mesh_grid;  // "dp,tp": the mesh dims of each grid's rows and columns (names or indices)
  std::string tensor_grid;         // "0,1": the tensor dims shown as rows and columns
  std::vector<std::string> slice;  // "2=3": show index 3 of tensor dim 2
  bool show_second = false;        // two traces: draw the second one
  std::string size = "1600x1000";  // window / screenshot size in pixels
  std::string mouse;  // headless: "X,Y" puts the mouse there (hover, tooltips); "": no mouse
  std::string input;  // headless: a script of mouse and keyboard events (app/input_script.h)
  std::string go_to;  // a rank or coordinate to go to: selected, centred and zoomed to
  int64_t redistribution = -1;  // a recording: the recorded redistribution to show (default 0)
  std::string module;  // a model trace: the module to select ("layers.0.attention"; "": the root)
  int64_t bench_frames =
      0;  // > 0: render this many frames offscreen while scrubbing, print frames/second
  double idle_seconds = 0;  // interactive, for the idle benchmark: close after this many seconds
};

constexpr int64_t kMaxBenchFrames = 1000000;

std::pair<int, int> ParseSize(const std::string& text) {
  const std::vector<int64_t> v = ParseIntList(text, "size");
  if (v.size() != 2 || v[0] < 200 || v[1] < 150 || v[0] > 8192 || v[1] > 8192) {
    throw InputError(
        "size",
        "'" + text + "' must be WIDTHxHEIGHT with 200..8192 x 150..8192 pixels, e.g. 1600x1000");
  }
  return {static_cast<int>(v[0]), static_cast<int>(v[1])};
}

// "X,Y" inside the picture, or (-1, -1) for "" (no mouse).
std::pair<float, float> ParseMouse(const std::string& text, int width, int height) {
  if (text.empty()) return {-1.0f, -1.0f};
  const std::vector<int64_t> xy = ParseIntList(text, "mouse");
  if (xy.size() != 2 || xy[0] < 0 || xy[1] < 0 || xy[0] >= width || xy[1] >= height) {
    throw InputError("mouse", "'" + text + "' must be X,Y inside the " + std::to_string(width) +
                                  "x" + std::to_string(height) + " picture");
  }
  return {static_cast<float>(xy[0]), static_cast<float>(xy[1])};
}

// Applies the view options to a loaded model trace: --select-rank, --goto (a rank), --module;
// the options of redistribution traces are refused.
void ApplyModelView(App& app, const ViewerOptions& o) {
  ModelSession& s = *app.model;
  auto refuse = [](const std::string& option, bool given) {
    if (given) {
      throw InputError(option,
                       "applies to redistribution traces; a model trace has modules, not "
                       "frames or layouts (use --module and --select-rank)");
    }
  };
  refuse("step", !o.step.empty());
  refuse("mesh-grid", !o.mesh_grid.empty());
  refuse("tensor-grid", !o.tensor_grid.empty());
  refuse("slice", !o.slice.empty());
  refuse("show-second", o.show_second);
  if (o.redistribution >= 0)
    throw InputError("redistribution", "needs a recording (dtsim.record), not a model trace");
  if (o.select_rank >= 0) {
    try {
      SelectRank(s, o.select_rank);
    } catch (const InputError& e) {
      const std::string what = e.what();
      throw InputError("select-rank", what.substr(std::min(what.size(), e.field().size() + 2)));
    }
  }
  if (!o.go_to.empty()) {
    try {
      SelectRank(s, ParseRankQuery(s.first.mesh(), o.go_to));
    } catch (const InputError& e) {
      const std::string what = e.what();
      throw InputError("goto", what.substr(std::min(what.size(), e.field().size() + 2)));
    }
  }
  if (!o.module.empty()) SelectModule(s, o.module);
}

// Applies the view options to loaded run events: --select-rank and --goto (a rank); the options
// of redistribution and model traces are refused.
void ApplyEventsView(App& app, const ViewerOptions& o) {
  EventsSession& s = *app.events;
  auto refuse = [](const std::string& option, bool given) {
    if (given) {
      throw InputError(option,
                       "applies to redistribution traces; run events have ranks and events, not "
                       "frames or layouts (use --select-rank)");
    }
  };
  refuse("step", !o.step.empty());
  refuse("mesh-grid", !o.mesh_grid.empty());
  refuse("tensor-grid", !o.tensor_grid.empty());
  refuse("slice", !o.slice.empty());
  refuse("show-second", o.show_second);
  if (o.redistribution >= 0) {
    throw InputError("redistribution",
                     "the recording's events are open (it recorded no redistribution, or two "
                     "recordings are compared); open one recording with redistributions");
  }
  if (!o.module.empty())
    throw InputError("module", "needs a model trace (dtsim model --trace), not a recording");
  auto select = [&s](const std::string& option, int64_t rank) {
    try {
      SelectEventsRank(s, rank);
    } catch (const InputError& e) {
      const std::string what = e.what();
      throw InputError(option, what.substr(std::min(what.size(), e.field().size() + 2)));
    }
  };
  if (o.select_rank >= 0) select("select-rank", o.select_rank);
  if (!o.go_to.empty()) {
    int64_t rank = -1;
    try {
      rank = ParseRankQuery(DeviceMesh::Create({s.world_size()}), o.go_to);
    } catch (const InputError& e) {
      const std::string what = e.what();
      throw InputError("goto", what.substr(std::min(what.size(), e.field().size() + 2)));
    }
    select("goto", rank);
  }
}

// Applies the view options to a loaded app (InputError naming the option).
void ApplyView(App& app, const ViewerOptions& o) {
  if (app.model) {
    ApplyModelView(app, o);
    return;
  }
  if (app.events) {
    ApplyEventsView(app, o);
    return;
  }
  if (!o.module.empty())
    throw InputError("module", "needs a model trace (dtsim model --trace), not a redistribution");
  if (o.redistribution >= 0) {
    if (app.recording.empty())
      throw InputError("redistribution", "needs a recording (dtsim.record), not a trace");
    ShowRecorded(app, o.redistribution);
  }
  ViewState& v = app.view;
  if (o.show_second) {
    if (!app.second) throw InputError("show-second", "needs two traces");
    v.show_second = true;
  }
  const TraceModel& m = app.shown();
  if (!o.step.empty()) v.frame = m.ParseFrame(o.step, "step");
  if (o.select_rank >= 0) {
    m.GetPosition(o.select_rank, "select-rank");
    v.selected_rank = o.select_rank;
  }
  if (!o.go_to.empty()) {
    try {
      GoToRank(v, ParseRankQuery(m, o.go_to));
    } catch (const InputError& e) {
      const std::string what = e.what();  // "go to: <message>"
      throw InputError("goto", what.substr(std::min(what.size(), e.field().size() + 2)));
    }
  }
  if (!o.mesh_grid.empty()) {
    const std::vector<std::string> names = ParseNameList(o.mesh_grid);
    if (names.size() != 2)
      throw InputError("mesh-grid", "'" + o.mesh_grid + "' must name two mesh dims, e.g. dp,tp");
    v.mesh_row_dim = static_cast<int>(m.mesh().GetDim(names[0], "mesh-grid"));
    v.mesh_col_dim = static_cast<int>(m.mesh().GetDim(names[1], "mesh-grid"));
    ResolveMeshGrid(m.mesh(), v);
  }
  const DTensorSpec& spec = m.frame(v.frame).spec;
  if (!o.tensor_grid.empty()) {
    const std::vector<int64_t> dims = ParseIntList(o.tensor_grid, "tensor-grid");
    if (dims.size() != 2) {
      throw InputError("tensor-grid",
                       "'" + o.tensor_grid + "' must name two tensor dims, e.g. 0,2");
    }
    v.tensor_row_dim = static_cast<int>(dims[0]);
    v.tensor_col_dim = static_cast<int>(dims[1]);
  }
  for (const std::string& s : o.slice) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos)
      throw InputError("slice", "'" + s + "' must be DIM=INDEX, e.g. 2=3");
    const std::vector<int64_t> d = ParseIntList(s.substr(0, eq), "slice");
    const std::vector<int64_t> i = ParseIntList(s.substr(eq + 1), "slice");
    if (d.size() != 1 || i.size() != 1 || d[0] < 0 || d[0] >= spec.ndim()) {
      throw InputError("slice", "'" + s + "' must be DIM=INDEX with DIM a dim of the tensor " +
                                    IntListToString(spec.shape()));
    }
    v.tensor_slice.resize(spec.ndim(), 0);
    v.tensor_slice[d[0]] = i[0];
  }
  ResolveTensorView(spec, v);
}

int RenderOffscreen(App& app, const ViewerOptions& o, int width, int height) {
  // Checked before the window opens: a bad script is an input error, not a half-made picture.
  std::vector<InputFrame> script;
  if (!o.mouse.empty()) {
    const auto [mx, my] = ParseMouse(o.mouse, width, height);
    InputFrame f;
    f.mouse_x = mx;
    f.mouse_y = my;
    script.push_back(f);
  }
  for (InputFrame& f : ParseInputScript(o.input, width, height)) script.push_back(std::move(f));
  auto window = Window::Open({width, height, /*headless=*/true});
  if (o.bench_frames > 0 && app.model) {
    // A model trace: step the rank every frame (every row's values change).
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.bench_frames; ++i) {
      app.model->view.rank = i % app.model->first.world_size();
      window->BeginFrame();
      DrawViewer(app, window->width(), window->height(), window->Now());
      window->EndFrame();
      window->Finish();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("viewer_fps %.2f frames %lld seconds %.3f size %dx%d ranks %lld\n",
                static_cast<double>(o.bench_frames) / seconds,
                static_cast<long long>(o.bench_frames), seconds, width, height,
                static_cast<long long>(app.model->first.world_size()));
  } else if (o.bench_frames > 0 && app.events) {
    // Run events: step the rank every frame (the whole list changes).
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.bench_frames; ++i) {
      SelectEventsRank(*app.events, i % app.events->world_size());
      window->BeginFrame();
      DrawViewer(app, window->width(), window->height(), window->Now());
      window->EndFrame();
      window->Finish();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("viewer_fps %.2f frames %lld seconds %.3f size %dx%d ranks %lld\n",
                static_cast<double>(o.bench_frames) / seconds,
                static_cast<long long>(o.bench_frames), seconds, width, height,
                static_cast<long long>(app.events->world_size()));
  } else if (o.bench_frames > 0) {
    const int64_t frames = app.shown().num_frames();
    // Warm up (fonts, first layout), then scrub through every frame with the mouse sweeping the
    // mesh panel.
    for (int i = 0; i < 3; ++i) {
      window->BeginFrame();
      DrawViewer(app, window->width(), window->height(), window->Now());
      window->EndFrame();
    }
    window->Finish();
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.bench_frames; ++i) {
      app.view.frame = i % frames;
      const float t = static_cast<float>(i % 97) / 97.0f;
      InputFrame f;
      f.mouse_x = 20 + t * (width * 0.38f);
      f.mouse_y = 80 + t * (height * 0.5f);
      window->BeginFrame(f);
      DrawViewer(app, window->width(), window->height(), window->Now());
      window->EndFrame();
      window->Finish();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("viewer_fps %.2f frames %lld seconds %.3f size %dx%d ranks %lld\n",
                static_cast<double>(o.bench_frames) / seconds,
                static_cast<long long>(o.bench_frames), seconds, width, height,
                static_cast<long long>(app.shown().world_size()));
  }
  if (!o.screenshot.empty()) {
    // The script's frames, then a few more with the mouse where the script left it, so that
    // ImGui's windows settle (and a hover found in one frame is highlighted in the next); the last
    // one is the picture.
    InputFrame rest;
    if (!script.empty()) {
      rest.mouse_x = script.back().mouse_x;
      rest.mouse_y = script.back().mouse_y;
    }
    // The first frame lays the window out (ImGui places items only from the second).
    window->BeginFrame(InputFrame{});
    DrawViewer(app, window->width(), window->height(), window->Now());
    window->EndFrame();
    for (const InputFrame& f : script) {
      window->BeginFrame(f);
      DrawViewer(app, window->width(), window->height(), window->Now());
      window->EndFrame();
    }
    app.record = !o.dump_records.empty();
    for (int i = 0; i < 3; ++i) {
      window->BeginFrame(rest);
      DrawViewer(app, window->width(), window->height(), window->Now());
      window->EndFrame();
    }
    const Image shot = window->ReadPixels();
    WriteFileAtomically(o.screenshot, EncodePng(shot), "screenshot");
    if (!o.dump_records.empty()) {
      nlohmann::json panels = nlohmann::json::object();
      for (const auto& [name, list] : app.recorded) panels[name] = ToJson(list);
      for (const auto& [name, r] : app.recorded_viewports)
        panels[name]["viewport"] = {r.x0, r.y0, r.x1, r.y1};
      // What the mouse is over in the last frame (null: nothing), the view the input left.
      nlohmann::json hover = nullptr;
      if (!app.pending_hover_panel.empty()) {
        hover = {{"panel", app.pending_hover_panel}, {"rank", app.pending_hovered_rank}};
      }
      const ViewState& v = app.view;
      auto zoom = [](const Zoom& z) {
        return nlohmann::json{{"scale", z.scale}, {"pan", {z.pan_x, z.pan_y}}};
      };
      nlohmann::json dump = {
          {"size", {width, height}},
          {"frame", v.frame},
          {"selected_rank", v.selected_rank},
          {"hover", std::move(hover)},
          {"zoom", {{"mesh", zoom(v.mesh_zoom)}, {"tensor", zoom(v.tensor_zoom)}}},
          {"shown", app.model    ? app.model->first.source()
                    : app.events ? app.events->first_path
                                 : (app.loaded() ? app.shown().source() : std::string())},
          {"redistribution",
           app.recording.empty() ? nlohmann::json(nullptr) : nlohmann::json(app.recording_index)},
          {"error", app.error},
          {"goto_error", app.goto_error},
          {"panels", std::move(panels)}};
      if (app.model) {
        // A model trace: the rank, the selected row, the rows and the comparison.
        const ModelSession& m = *app.model;
        nlohmann::json rows = nlohmann::json::array();
        for (const TreeRow& r : ModelTreeRows(m)) {
          rows.push_back({{"key", r.key},
                          {"depth", r.depth},
                          {"label", r.label},
                          {"forward", r.forward},
                          {"backward", r.backward},
                          {"values", r.values},
                          {"expanded", r.expanded},
                          {"differs", r.differs},
                          {"inside_differs", r.inside_differs}});
        }
        nlohmann::json details = nlohmann::json::array();
        for (const DetailLine& l : RowDetails(m)) details.push_back(l.text);
        dump["model"] = {
            {"rank", m.view.rank},
            {"selected", m.view.selected},
            {"rows", std::move(rows)},
            {"details", std::move(details)},
            {"summary", m.diff ? m.diff->summary : std::string()},
            {"first_event", m.diff && m.diff->first_event ? nlohmann::json(*m.diff->first_event)
                                                          : nlohmann::json(nullptr)},
            {"ranks_differing", m.diff ? nlohmann::json(m.diff->ranks) : nlohmann::json::array()}};
      }
      if (app.events) {
        // Run events: the rank, the selected event, the rows, the details and the divergences.
        const EventsSession& e = *app.events;
        nlohmann::json rows = nlohmann::json::array();
        for (const EventRow& r : EventRows(e)) {
          rows.push_back({{"index", r.index},
                          {"op", r.op},
                          {"where", r.where},
                          {"placements", r.placements},
                          {"first_hash", r.first_hash},
                          {"second_hash", r.second_hash},
                          {"differs", r.differs},
                          {"after", r.after}});
        }
        nlohmann::json details = nlohmann::json::array();
        for (const DetailLine& l : EventDetails(e)) details.push_back(l.text);
        nlohmann::json divergences = nlohmann::json::array();
        for (const EventDivergence& d : e.divergences) {
          divergences.push_back(
              {{"rank", d.rank}, {"index", d.index}, {"where", d.where}, {"what", d.what}});
        }
        dump["events"] = {{"rank", e.view.rank},
                          {"event", e.view.event},
                          {"rows", std::move(rows)},
                          {"details", std::move(details)},
                          {"summary", e.summary},
                          {"divergences", std::move(divergences)},
                          {"ranks_diverging", RanksThatDiverge(e)}};
      }
      WriteJsonFileAtomically(o.dump_records, dump, "dump-records");
    }
  }
  return 0;
}

// The window redraws only when something can have changed: an input event, playback, a trace file
// changed on disk (checked every second), or the few frames ImGui needs to settle after each.
// Otherwise it sleeps in WaitForEvents, so an idle window costs nothing.
int RunInteractive(App& app, int width, int height, double close_after_s) {
  auto window = Window::Open({width, height, /*headless=*/false});
  constexpr int kSettleFrames = 3;
  constexpr double kFileCheckSeconds = 1.0;
  int settle = kSettleFrames;
  double last_check = window->Now();
  while (!window->ShouldClose()) {
    const double now = window->Now();
    if (close_after_s > 0 && now >= close_after_s) break;
    if (settle <= 0) {
      double timeout = kFileCheckSeconds - (now - last_check);
      if (app.view.playing)
        timeout = std::min(timeout, app.last_advance_s + app.view.seconds_per_frame - now);
      if (close_after_s > 0) timeout = std::min(timeout, close_after_s - now);
      if (window->WaitForEvents(std::max(0.0, timeout))) settle = kSettleFrames;
      if (app.view.playing && window->Now() - app.last_advance_s >= app.view.seconds_per_frame) {
        settle = std::max(settle, 1);
      }
    }
    if (window->Now() - last_check >= kFileCheckSeconds) {
      last_check = window->Now();
      if (TracesChanged(app)) {
        ReloadTraces(app);
        settle = kSettleFrames;
      }
    }
    if (settle <= 0) continue;
    --settle;
    window->BeginFrame();
    DrawViewer(app, window->width(), window->height(), window->Now());
    window->EndFrame();
    // Text boxes blink their cursor and held keys repeat: keep drawing while ImGui wants input.
    if (ImGui::GetIO().WantTextInput || ImGui::IsAnyMouseDown()) settle = std::max(settle, 1);
  }
  return 0;
}

int Run(int argc, char** argv) {
  ViewerOptions o;
  po::options_description desc("dtsim-viewer options");
  desc.add_options()("help,h", "this help")(
      "screenshot", po::value(&o.screenshot),
      "render one frame offscreen, write it to this PNG and exit")(
      "dump-records", po::value(&o.dump_records),
      "with --screenshot: write the panels' draw records (JSON) here")(
      "step", po::value(&o.step),
      "frame to show: initial (0), a step number (the state after it), final")(
      "select-rank", po::value(&o.select_rank), "select this rank (highlighted in every panel)")(
      "mesh-grid", po::value(&o.mesh_grid), "mesh dims of the grid rows and columns, e.g. dp,tp")(
      "tensor-grid", po::value(&o.tensor_grid), "tensor dims shown as rows and columns, e.g. 0,2")(
      "slice", po::value(&o.slice)->composing(),
      "index of a tensor dim that is not shown, e.g. 2=3 (repeatable)")(
      "show-second", po::bool_switch(&o.show_second), "two traces: draw the second one")(
      "size", po::value(&o.size), "window / screenshot size WIDTHxHEIGHT (default 1600x1000)")(
      "mouse", po::value(&o.mouse),
      "with --screenshot: put the mouse at X,Y (hover highlights and tooltips)")(
      "input", po::value(&o.input),
      "with --screenshot: play mouse and keyboard events first, e.g. \"wheel 300,400 3; key r\" "
      "(docs/viewer.md)")("goto", po::value(&o.go_to),
                          "go to a rank or coordinate: select, centre and zoom to it")(
      "redistribution", po::value(&o.redistribution),
      "a recording: which recorded redistribution to show (0 = the first)")(
      "module", po::value(&o.module),
      "a model trace: select this module (e.g. layers.0.attention) in the module tree")(
      "bench-frames", po::value(&o.bench_frames),
      "render N frames offscreen while scrubbing; print frames/second")(
      "close-after", po::value(&o.idle_seconds),
      "interactive: close the window after this many seconds (the idle benchmark)");
  po::options_description hidden;
  hidden.add_options()("trace", po::value(&o.traces)->composing());
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("trace", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: dtsim-viewer trace.json [other.json] [--screenshot out.png] [--step K] "
                 "[--select-rank R] "
                 "[--size WxH]\n"
              << desc;
    return 0;
  }
  if (o.traces.empty() || o.traces.size() > 2) {
    throw InputError("traces",
                     "give one trace, or two traces of the same redistribution (or model run) to "
                     "compare (got " +
                         std::to_string(o.traces.size()) + ")");
  }
  if (vm.count("redistribution") && o.redistribution < 0) {
    throw InputError("redistribution",
                     StrCat(o.redistribution, " must be 0 or more (0 = the first recorded one)"));
  }
  if (!o.dump_records.empty() && o.screenshot.empty())
    throw InputError("dump-records", "needs --screenshot");
  if (!o.mouse.empty() && o.screenshot.empty()) throw InputError("mouse", "needs --screenshot");
  if (!o.input.empty() && o.screenshot.empty()) throw InputError("input", "needs --screenshot");
  if (o.bench_frames < 0 || o.bench_frames > kMaxBenchFrames) {
    throw InputError("bench-frames", StrCat(o.bench_frames, " must be 1..", kMaxBenchFrames,
                                            " (0 or absent: no benchmark)"));
  }
  if (!(o.idle_seconds >= 0 && o.idle_seconds <= 86400)) {
    throw InputError("close-after",
                     StrCat(o.idle_seconds, " must be 0..86400 seconds (0: stay open)"));
  }
  const auto [width, height] = ParseSize(o.size);
  ParseMouse(o.mouse, width, height);
  {
    // The outputs may be no input (and not each other), however spelled; checked before any work.
    RunFiles files;
    for (const std::string& t : o.traces) files.Input(t, "traces");
    if (!o.screenshot.empty()) files.Output(o.screenshot, "screenshot");
    if (!o.dump_records.empty()) files.Output(o.dump_records, "dump-records");
  }
  const bool headless = !o.screenshot.empty() || o.bench_frames > 0;
  // Recent traces for the open box: read in every mode (tests check the list), saved only by an
  // interactive window.
  App app;
  app.recent = ReadRecentFiles(RecentFilesPath());
  if (!headless) app.recent_file = RecentFilesPath();
  LoadTraces(app, o.traces);
  if (!app.opened()) {
    // Headless: the error on stderr, exit 2. Interactive: the window shows it, with the open box.
    if (headless) throw InputError(app.error_field, app.error_message);
    std::cerr << "dtsim-viewer: error: " << app.error << "\n";
    RunInteractive(app, width, height, o.idle_seconds);
    return app.opened() ? 0 : 2;
  }
  if (!headless) {
    RememberRecent(app, o.traces);
    WriteRecentFiles(app.recent_file, app.recent);
  }
  ApplyView(app, o);
  if (headless) return RenderOffscreen(app, o, width, height);
  return RunInteractive(app, width, height, o.idle_seconds);
}

}  // namespace
}  // namespace dtsim::viewer

int main(int argc, char** argv) {
  try {
    return dtsim::viewer::Run(argc, argv);
  } catch (const dtsim::InputError& e) {
    std::cerr << "dtsim-viewer: error: " << e.what() << "\n";
    return 2;
  } catch (const boost::program_options::error& e) {
    std::cerr << "dtsim-viewer: error: options: " << e.what() << "\n";
    return 2;
  } catch (const dtsim::viewer::DisplayError& e) {
    std::cerr << "dtsim-viewer: error: display: " << e.what() << "\n";
    return 4;
  } catch (const dtsim::InternalError& e) {
    std::cerr << "dtsim-viewer: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "dtsim-viewer: internal error: " << e.what() << "\n";
    return 3;
  }
}
