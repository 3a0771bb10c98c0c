// The viewer's panels: the only code that calls ImGui widgets. Each panel lays its part out with
// the model's pure layout step (viewer/model/*_layout.h), draws the records, and turns the mouse
// into view-state changes (hover, selection, frame). One file per panel, as Tracy does.
//
// Example: in a frame, DrawMeshPanel(app, rect) draws the mesh of app.view.frame into `rect` and
// records the rank under the mouse in app.pending_hovered_rank (DrawViewer makes it the next
// frame's app.view.hovered_rank).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "viewer/model/app_state.h"
#include "viewer/model/draw.h"

namespace dtsim::viewer {

// Draws records of the model's layout step (laid out at the origin) at screen position (origin_x,
// origin_y) into the current window, and keeps a copy in screen coordinates under `panel` when
// app.record is set (headless dumps).
void Paint(App& app, const char* panel, const DrawList& list, float origin_x, float origin_y);

// ImGui's default font as TextMetrics for the layout step.
TextMetrics CurrentTextMetrics();

// The panels; each draws into the current window's region `area` (screen pixels) or into its own
// child window.
void DrawToolbar(App& app);
void DrawMeshPanel(App& app, const Rect& area);
void DrawTensorPanel(App& app, const Rect& area);
void DrawTimelinePanel(App& app, const Rect& area);
void DrawRankPanel(App& app, const Rect& area);
void DrawDiffPanel(App& app, const Rect& area);
void DrawErrorPanel(const App& app, const Rect& area);

// The whole window: toolbar, panels arranged over the display (`width` x `height` pixels).
void DrawViewer(App& app, float width, float height, double now_s);

}  // namespace dtsim::viewer
