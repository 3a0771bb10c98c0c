// Trace diff: where two traces of the same redistribution part — a simulated run against a real
// one, or two builds. No LibTorch (library dtsim_trace).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"

namespace dtsim {

// One difference between two traces, in run order.
struct TraceDifference {
  enum class Phase { kInitial, kStep, kFinal };
  Phase phase = Phase::kInitial;
  int64_t step =
      -1;  // the step index (0-based) for kStep; `where` numbers steps from 1, as dtsim plan does
  int64_t collective = -1;  // the collective's index within the step, when the difference is in one
  std::string where;  // "initial", "step 2 (mesh dim 0: S(0) -> R, all_gather)", "step 2 (...),
                      // collective 0 (all_gather)", "final"
  std::string what;   // "hash differs on ranks 5, 7 (rank 5: xxh3:… vs xxh3:…)"
  std::vector<int64_t>
      ranks;  // the ranks concerned (empty for a difference of the whole run, e.g. a step count)
  int64_t event = -1;  // model traces: the event's index (0-based) in the first trace's events
};

// Compares two traces: the specs, the sequence of steps (mesh dim, from, to, collective, placements
// after), each step's collectives (op, groups, per-rank shapes and bytes) and every rank's state
// (coordinate, shape, offset, hash) before, after each step and at the end, and the verdict. Meta
// (tool, backend, argv) and measured times are not compared; hashes are compared where both traces
// have them (a metadata-only trace has none). Per place and field, the ranks that differ are listed
// together. Returns at most `limit` differences, in run order: the first one is where the runs
// part.
std::vector<TraceDifference> DiffTraces(const Trace& a, const Trace& b, size_t limit = 20);

// Compares two recordings (dtsim.record, or `dtsim run --trace`) redistribution by redistribution:
// the call (redistribute, full_tensor, implicit with its op and argument, backward), the source
// and target specs, every rank's local shape and hash before and after, and each collective (op,
// groups, ranks, shapes, bytes). Meta, times and data files are not compared; hashes only where
// both recordings have them (a rank the recorder could not hash, or a metadata-only run, has none)
// and not where both have events (DiffRunEvents compares their values within float rounding).
// `where` names the redistribution ("redistribution 3 (implicit aten::mm arg 1: [S(0)] -> [R]),
// after"); the first difference is where the runs part.
std::vector<TraceDifference> DiffRecordings(const Recording& a, const Recording& b,
                                            size_t limit = 20);

// The ranks named by any difference, ascending (the viewer highlights them).
std::vector<int64_t> RanksThatDiffer(const std::vector<TraceDifference>& diffs);

}  // namespace dtsim
