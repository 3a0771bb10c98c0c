// The events window's state and pure layout step: the run events of a recording (every rank's
// DTensor ops and collectives, trace/run_events.h) — one recording alone, or two compared event by
// event as `dtsim trace-diff` compares them (DiffRunEvents) — as a strip of ranks, the selected
// rank's events as rows, and the details of the selected event. Plain data, no GUI
// (panels/events_panel.cc draws it; the tests read it).
//
// Where the runs part is red everywhere: a rank with a divergence is a red cell of the rank strip,
// its diverging event a red row, and the details say what differs in red. The window opens at the
// first divergence (the rank and event `dtsim trace-diff` names first). A Flight Recorder import
// (dtsim import-fr) alone shows every rank's collective sequence with the first collective each
// rank issued but never completed (where a job hangs) in red; beside a recording, only collectives
// are aligned (DiffRunEvents' collectives_only).
//
// Example (a real run whose rank 2 all-gathered wrong bytes, beside dtsim run --trace):
//   EventsSession s(ReadRecording("real.json"), ReadRecording("sim.json"));
//   s.view.rank == 2, s.view.event == the index trace-diff names; RanksThatDiverge(s) == {2};
//   EventRows(s)[s.view.event].differs; EventDetails(s) holds the divergence's text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "draw.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/run_events.h"

namespace dtsim::viewer {

// What the window shows; the panels change it.
struct EventsView {
  int64_t rank = 0;                 // the rank whose events the list shows
  int64_t event = -1;               // the selected event's index in that rank's list (-1 none)
  bool scroll_to_selected = false;  // the list scrolls the selected row into view and clears it
};

// A recording with events opened in the viewer, alone or beside a second one.
struct EventsSession {
  // One recording: InputError("recording", "'a.json' recorded no events ...") without events.
  EventsSession(Recording first, std::string first_path);
  // Two recordings compared (both must have events), the view at the first divergence.
  EventsSession(Recording first, std::string first_path, Recording second, std::string second_path);

  std::string first_path, second_path;  // second_path "" when alone
  Recording first;
  std::optional<Recording> second;
  // A Flight Recorder import is one of them: only collectives are listed and aligned.
  bool collectives_only = false;
  // The events the list shows, per rank (collectives only, when collectives_only).
  RunEvents first_events, second_events;
  // Two recordings: DiffRunEvents(first, second). One: the stuck collectives of a Flight Recorder
  // import (its first issued but never completed per rank, cause kPending), else none.
  std::vector<EventDivergence> divergences;  // by index then rank; [0] is where the runs part
  std::optional<EventDiff> diff;             // two recordings only
  // One line: "recordings agree: 96 events ..." / "recordings differ; first at rank 2, event 17:
  // ..." / "4 ranks' collectives; rank 1 stuck at ..." / "4 ranks, 96 events".
  std::string summary;
  EventsView view;

  int64_t world_size() const { return first.world_size; }
};

// The ranks with a divergence, ascending.
std::vector<int64_t> RanksThatDiverge(const EventsSession& session);
// The divergence of `rank`, or nullptr.
const EventDivergence* DivergenceOf(const EventsSession& session, int64_t rank);

// Selects the first divergence (its rank and event); with none, rank 0 and its first event.
void SelectFirstDivergence(EventsSession& session);
// The next (+1) / previous (-1) rank with a divergence after the selected rank, wrapping, at its
// divergence; false when no rank diverges.
bool SelectNextDivergence(EventsSession& session, int direction);
// Sets the rank (InputError("rank", "rank 9 is not in the recording's 4 ranks")), keeping the
// event index where that rank has one, else its divergence, else its first event.
void SelectEventsRank(EventsSession& session, int64_t rank);
// Moves the selection `delta` rows in the selected rank's list (clamped).
void MoveEventSelection(EventsSession& session, int64_t delta);

// One row of the selected rank's list: its event in each run (either may be absent past the end of
// a shorter run).
struct EventRow {
  int64_t index = 0;
  std::string op;          // "aten.mm.default", "all_gather over [0, 1]"
  std::string where;       // "layers.0.wo (backward)"
  std::string placements;  // "[S(0)], [R] -> [S(0)]" (ops), or the Flight Recorder state
  std::string first_hash, second_hash;  // the first output's hash, shortened ("-" none)
  bool in_first = true, in_second = false;
  bool differs = false;  // the rank's divergence is at this event
  bool after = false;    // past the rank's divergence (not aligned after a structural one)
};
std::vector<EventRow> EventRows(const EventsSession& session);

// The details of the selected event: what it is, where it ran, the program's line, its group,
// placements, every input and output digest of each run, and (diverging) what differs.
std::vector<DetailLine> EventDetails(const EventsSession& session);

// The rank strip: one kMeshCell rect per rank (rank set) in rows of as many cells as fit `width`,
// `cell` pixels square, filled kDiffColor where the rank diverges and RankColor otherwise, the
// selected rank outlined in kHighlightColor; each cell's rank number as text where it fits. Laid
// out from (0, 0).
DrawList LayoutRankStrip(const EventsSession& session, float width, float cell,
                         const TextMetrics& metrics);
// The height LayoutRankStrip needs.
float RankStripHeight(const EventsSession& session, float width, float cell);

// The rows as records, at y = index * row_height, only those meeting [visible_y0, visible_y1): per
// row a kTreeRow rect (key "e<index>"; filled kTreeSelectedColor when selected, kDiffColor when it
// differs, stripes otherwise) and its texts in columns (index, op, module and pass, placements,
// hashes); rows past the divergence in the dim colour.
DrawList LayoutEventRows(const std::vector<EventRow>& rows, int64_t selected, bool two_runs,
                         float width, float row_height, float visible_y0, float visible_y1,
                         const TextMetrics& metrics);

}  // namespace dtsim::viewer
