// Traces as Chrome / Perfetto trace-event JSON (`dtsim export --format perfetto`): open the result
// in ui.perfetto.dev or chrome://tracing to see every rank's steps and collectives on a time axis.
//
// clang-format off
// Mapping (JSON Object Format of the Trace Event Format):
//   * one process per rank: pid = rank + 1 (Perfetto reserves pid 0 for the idle process), named
//     "rank 3 [dp=0, tp=3]" ("<label>: rank 3 ..." when several traces are exported together),
//     sorted by rank; two threads: "steps" (tid 1) and "collectives" (tid 2);
//   * on "steps", one complete slice ("ph": "X") per step, "step 2: dp(0) S(0) -> R" (args: step,
//     mesh_dim, transition, collective, placements_after, est_us); on "collectives", one slice per
//     collective the rank took part in, named by the op ("all_gather"), with args: step, mesh_dim,
//     transition, group (PerfettoGroups: its ranks, or an id into otherData.groups), bytes_sent,
//     bytes_received, input_shape, output_shape, time_us, time_source;
//   * times in microseconds, kept on a whole-nanosecond grid (written with at most 3 decimals, so
//     readers convert them exactly); consecutive slices of one track are 1 ns apart. Simulated
//     runs: the plan step's est_us (the cost model; split evenly between a step's collectives).
//     Real runs: each rank's measured time_us. A trace records durations, not start times, so
//     every step starts when the slowest rank has finished the previous one;
//   * flow arrows ("ph": "s" / "t" / "f" with "bp": "e", one id per group) chain the ranks of each
//     group of a collective, each point in the middle of that rank's collective slice;
//   * "M" metadata names processes and threads; "otherData" names the source traces. No
//     "displayTimeUnit" (some Perfetto versions read it as the unit of "ts").
// clang-format on
//
// Example: ToPerfetto({{&trace, ""}}) for traces/uneven_2x4_S0R_to_RS1.json has 8 processes; step
// 2's all_gather slices last est_us = 7.2 us each, and 4 flows ([0, 4], [1, 5], [2, 6], [3, 7])
// link them.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"

namespace dtsim {

struct PerfettoSource {
  const Trace* trace = nullptr;
  std::string
      label;  // "" for a single trace; otherwise prefixes process names ("simulated", "nccl")
};

// The trace-event JSON object {"traceEvents": [...], "otherData": {...}}. The traces'
// processes are numbered one after another: trace i's rank r gets pid i * kPerfettoPidStride + r
// + 1.
nlohmann::json ToPerfetto(const std::vector<PerfettoSource>& sources);

inline constexpr int64_t kPerfettoPidStride = 10'000'000;

// A recording of an upstream PyTorch run (dtsim.record, recording.h): one process per rank, one
// slice per redistribution at the rank's measured start and duration, named "#4 redistribute
// [S(0)] -> [S(1)]" (implicit ones by their op), with args: index, call, op, arg, mesh, shape,
// dtype, from, to, and the collectives this rank took part in (op, group, input and output bytes).
// Recordings without start times lay the redistributions end to end.
// Returned as the JSON text (one line and a newline), written event by event.
std::string RecordingToPerfetto(const Recording& recording);

// Groups in exported events. A group of at most kInlineGroupRanks ranks is written in place (its
// ranks); a larger one once, in otherData.groups under an id, and referred to as "g3 (4096
// ranks)". Without the table a group of every rank, written in each rank's slice, made an export
// quadratic in ranks.
class PerfettoGroups {
 public:
  // What a slice's "group" arg holds for `group` (call once per group and collective, not per rank:
  // looking a group up costs its length).
  nlohmann::json Ref(const std::vector<int64_t>& group);
  // The group in a flow's name: "[0, 4]", or its id.
  std::string Name(const std::vector<int64_t>& group);
  // {"g0": [ranks...], ...}: every group written by id.
  const nlohmann::json& Table() const { return table_; }

 private:
  std::string Id(const std::vector<int64_t>& group);
  std::map<std::vector<int64_t>, std::string> ids_;
  nlohmann::json table_ = nlohmann::json::object();
};
inline constexpr size_t kInlineGroupRanks = 16;

// "simulated (local)" / "real (nccl)": how a trace's backend reads in a label.
std::string BackendLabel(const Trace& trace);
std::string BackendLabel(const TraceMeta& meta);

}  // namespace dtsim
