// The viewer's panels: the only code that calls ImGui widgets. Each panel lays its part out with
// the model's pure layout step (viewer/model/*_layout.h), draws the records, and turns the mouse
// into view-state changes (hover, selection, frame). One file per panel, as Tracy does.
//
// Example: in a frame, DrawMeshPanel(app, rect) draws the mesh of app.view.frame into `rect` and
// records the rank under the mouse in app.pending_hovered_rank (DrawViewer makes it the next
// frame's app.view.hovered_rank).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viewer/model/app_state.h"
#include "viewer/model/draw.h"

struct ImVec4;

namespace dtsim::viewer {

// A colour as ImGui takes it.
ImVec4 ToVec4(Rgba c);

// The last component of a path ("run.json" of "/tmp/run.json"): what the toolbars show.
std::string FileName(const std::string& path);

// Draws records of the model's layout step (laid out at the origin) at screen position (origin_x,
// origin_y) into the current window, and keeps a copy in screen coordinates under `panel` when
// app.record is set (headless dumps).
// With `viewport` (in the list's coordinates), records marked zoomed are clipped to it.
void Paint(App& app, const char* panel, const DrawList& list, float origin_x, float origin_y,
           const Rect* viewport = nullptr);

// The next item goes on the current line when `width` pixels fit there, else on a new line: the
// toolbars wrap in narrow windows instead of clipping their widgets.
void SameLineIfFits(float width);

// The mouse over a zoomable canvas this frame (canvas coordinates).
struct CanvasInput {
  bool hovered = false;   // over the canvas, not dragging
  bool clicked = false;   // the left button released over it without dragging
  bool dragging = false;  // a drag is panning the content
  float x = 0, y = 0;
  float zoom_factor = 1;  // the wheel turned over the canvas: zoom by this about (x, y)
};
// An invisible button of `width` x `height` at the cursor that pans `zoom` by dragging and reports
// the wheel as a zoom factor (the panel zooms about the cursor: ZoomAbout, or the mesh's exact
// ZoomMeshAbout); `viewport` is the zoomable part, in canvas coordinates.
CanvasInput ZoomableCanvas(const char* id, float width, float height, Zoom& zoom,
                           const Rect& viewport);

// The toolbar's go-to box (Ctrl+G focuses it), `hint` shown while it is empty: Enter hands its text
// to `go`, whose InputError is shown beside the box (app.goto_error) until a go succeeds.
void GoToBox(App& app, const char* hint, const std::function<void(const std::string&)>& go);

// A text on the toolbar's line where it fits, else on the next; in `color` when given.
void ToolbarText(const std::string& text, const Rgba* color = nullptr);

// A "Details" child window `id` filling `area`: each line wrapped, those that differ in the diff
// colour.
void DetailsPanel(const char* id, const Rect& area, const std::vector<DetailLine>& lines);

// ImGui's default font as TextMetrics for the layout step.
TextMetrics CurrentTextMetrics();

// "2.0x [fit (R)]" at the top-right corner (right, top) of a panel's canvas while its content is
// zoomed; the button resets the zoom.
void ZoomStatus(Zoom& zoom, const char* id, float right, float top);

// The panels; each draws into the current window's region `area` (screen pixels) or into its own
// child window.
void DrawToolbar(App& app);
void DrawMeshPanel(App& app, const Rect& area);
void DrawTensorPanel(App& app, const Rect& area);
void DrawTimelinePanel(App& app, const Rect& area);
void DrawRankPanel(App& app, const Rect& area);
void DrawDiffPanel(App& app, const Rect& area);
void DrawErrorPanel(App& app, const Rect& area);
// A model trace (app.model): its toolbar items, and the window below the toolbar — the module
// tree, the rank picker, the details and (two traces) the differences (model_panel.cc).
void DrawModelToolbar(App& app);
void DrawModelWindow(App& app, const Rect& area);
// A recording's run events (app.events): its toolbar items, and the window below the toolbar — the
// rank strip, the selected rank's events, the details and the divergences (events_panel.cc).
void DrawEventsToolbar(App& app);
void DrawEventsWindow(App& app, const Rect& area);

// Opens `paths` (one trace, or two to compare) from inside the window: LoadTraces, and on success
// the paths join app.recent (saved to app.recent_file when set).
void OpenTraces(App& app, const std::vector<std::string>& paths);

// The whole window: toolbar, panels arranged over the display (`width` x `height` pixels).
void DrawViewer(App& app, float width, float height, double now_s);

}  // namespace dtsim::viewer
