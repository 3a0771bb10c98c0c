// The viewer's trace model: a trace read through dtsim_trace (validated there), indexed for drawing
// and querying — the run as FRAMES (the initial state, the state after each step, the final state),
// each with the layout rule's answer for every rank (owned intervals, which the trace does not
// store), the trace's own row for the rank, the step's bytes, measured times and groups per rank;
// and, for two traces, where they differ, frame by frame and rank by rank. No GUI code (Tracy's
// split): the panels, `dtsim layout --svg/--png` and `dtsim export` read it.
//
// Example: TraceModel m = TraceModel::Load("traces/uneven_2x4_S0R_to_RS1.json");
//   m.num_frames() == 4 (initial, step 1, step 2, final); m.frame(2).bytes_sent[m.GetPosition(4)]
//   == 36 (rank 4 sends its 2x3 shard padded to 3x3 float32 in the all_gather of step 2);
//   m.frame(3).layouts[3].intervals[1] == {9:10}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/spec.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"

namespace dtsim::viewer {

// One point of the run the timeline can show. Per-position vectors are indexed by the rank's
// position in the mesh (row-major, as DeviceMesh::ranks()).
struct Frame {
  enum class Kind { kInitial, kAfterStep, kFinal };
  Kind kind = Kind::kInitial;
  int64_t step = -1;  // kAfterStep: 0-based index into Trace::steps
  std::string
      label;  // "initial", "step 1", "final" (steps numbered from 1, as `dtsim plan` prints them)
  std::string title;  // "step 1: tp(1) S(1) -> R  all_gather", "initial: [S(0), R]"
  DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create({1}), {Placement::Replicate()}, {});
  // What the layout rule (spec.h) gives every position: local shape, offset, owned intervals.
  std::vector<RankLayout> layouts;
  // Index of the rank's row among the trace's rank states at this point, -1 when the trace has none
  // for it.
  std::vector<int32_t> rows;
  // The rank's row differs from the layout rule (local shape or global offset): a broken or
  // surprising trace.
  std::vector<uint8_t> anomalies;
  int64_t num_anomalies = 0;
  // kAfterStep: bytes the rank sent / received in the step's collectives (0 when in none); from the
  // collective rows when the trace has them (`bytes_observed`), else from the plan step.
  std::vector<int64_t> bytes_sent;
  std::vector<int64_t> bytes_received;
  bool bytes_observed = false;
  // kAfterStep: the measured time of the rank's collectives in microseconds (summed); empty unless
  // every collective row of the step was timed (real backends).
  std::vector<double> time_us;
  // kAfterStep: the step's process groups (of the first collective, or the plan's) and each
  // position's group index
  // (-1: in none).
  std::vector<std::vector<int64_t>> groups;
  std::vector<int32_t> group_of;
  double est_us = 0;  // the plan step's estimate (cost model), 0 outside steps
};

class TraceModel {
 public:
  // Reads and indexes a trace file: every InputError("trace", ...) of ReadTrace, and "final.spec:
  // mesh ... differs from the initial mesh ...". `source` (the path) names the trace in messages.
  static TraceModel Load(const std::string& path);
  static TraceModel FromTrace(Trace trace, std::string source = "trace");
  // One layout, no run: a single frame "layout" (what `dtsim layout --svg/--png` draws).
  static TraceModel FromSpec(const DTensorSpec& spec);

  const std::string& source() const { return source_; }
  const Trace& trace() const { return trace_; }
  const DeviceMesh& mesh() const { return trace_.initial.spec.mesh(); }
  int64_t world_size() const { return mesh().size(); }
  int64_t num_frames() const { return static_cast<int64_t>(frames_.size()); }
  const std::vector<Frame>& frames() const { return frames_; }
  // Frame `index` (0 <= index < num_frames()).
  const Frame& frame(int64_t index) const;

  // The mesh position of `rank`, or nullopt when the rank is not in the mesh.
  std::optional<int64_t> FindPosition(int64_t rank) const;
  // Like FindPosition; InputError(field) "rank 9 is not in mesh[dp=2, tp=4] (ranks 0..7)"
  // otherwise.
  int64_t GetPosition(int64_t rank, const std::string& field = "rank") const;
  int64_t RankAt(int64_t position) const { return mesh().ranks()[position]; }
  // The mesh coordinate of `position`.
  std::vector<int64_t> CoordinateAt(int64_t position) const;
  // The trace's row for `position` at frame `frame`, or nullptr.
  const RankState* RowAt(int64_t frame, int64_t position) const;

  // True when every rank row carries a shard hash (meta.data).
  bool has_hashes() const { return trace_.meta.data; }
  // True when some collective row carries measured times (a real run).
  bool measured() const { return measured_; }

  // Parses the frame names of `--step`: "initial" or 0, a step number 1..N (the state after that
  // step), "final" or N+1. InputError(field) "step 7 does not exist: the trace has 2 steps (0 =
  // initial, 1..2, 3 = final)".
  int64_t ParseFrame(const std::string& text, const std::string& field = "step") const;

 private:
  TraceModel() = default;
  void Index();

  std::string source_;
  Trace trace_;
  std::vector<Frame> frames_;
  std::vector<int64_t> rank_to_position_;  // dense when the ranks are small, see FindPosition
  bool measured_ = false;
};

// Where two traces of one redistribution differ, laid onto the first trace's frames and positions.
struct TraceDiff {
  std::vector<TraceDifference> differences;  // all of them, in run order (dtsim_trace's DiffTraces)
  // [frame][position]: the rank differs at this frame (its state, or its row in the step's
  // collectives).
  std::vector<std::vector<uint8_t>> differs;
  std::vector<uint8_t>
      frame_differs;  // [frame]: some difference at this frame (also whole-run ones)
  std::vector<uint8_t> differs_anywhere;  // [position]
  int64_t num_ranks_differing = 0;
  std::optional<int64_t> first_frame;  // the first frame where the runs part
  bool hashes_compared = true;         // both traces carry hashes
  // One line: "agree: same plan, collectives and shard hashes on all 8 ranks at every step
  // (initial, 2 steps, final)" or "differ: first at step 2 (...): hash differs on ranks 5, 7 (...);
  // 2 of 8 ranks differ; 3 differences".
  std::string summary;

  // The differences at `frame` (those naming ranks and those of the whole run), in run order.
  std::vector<const TraceDifference*> At(int64_t frame, int64_t num_frames) const;
};

// Refuses two traces that are not of the same redistribution — different mesh (shape, names, rank
// order), global shape, dtype, or initial/final placements: InputError("traces", "'a.json' and
// 'b.json' are not traces of the same redistribution: mesh[dp=2, tp=4] vs mesh[4, 2] ...").
void CheckSameRedistribution(const TraceModel& a, const TraceModel& b);

// Compares two traces of the same redistribution (CheckSameRedistribution first).
TraceDiff DiffModels(const TraceModel& a, const TraceModel& b);

// `differences` found in one trace (a recording's replicas that disagree) laid onto its frames as
// DiffModels lays a comparison's; `summary` as DiffModels writes it.
TraceDiff DiffOfOne(const TraceModel& model, std::vector<TraceDifference> differences);

// The frame of `model` that a difference belongs to (initial → 0, step s → s + 1, final → last;
// clamped).
int64_t FrameOf(const TraceDifference& difference, int64_t num_frames);

// Where a difference is, in the viewer's words (steps numbered from 1, as the timeline and `dtsim
// plan` show them): "initial", "step 2 (dp(0) S(0) -> R  all_gather)", "step 2 (...), collective 0
// (all_gather)", "final".
std::string Where(const TraceModel& model, const TraceDifference& difference);

}  // namespace dtsim::viewer
