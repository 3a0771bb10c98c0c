// What the viewer says about one rank at one frame — the mesh panel's tooltip and the rank panel —
// as plain lines of text, so the words are tested without a window.
//
// Example (traces/uneven_2x4_S0R_to_RS1.json, frame "step 2", rank 3):
//   "rank 3  coordinate [dp=0, tp=3]"
//   "local shape [5, 1]  global offset [0, 9]"
//   "owns dim 0: 0:5  dim 1: 9:10"
//   "hash xxh3:86b2d9b80ba54293"
//   "step 2 all_gather: sent 12 B, received 24 B  group [3, 7]"
#pragma once

#include <string>
#include <vector>

#include "trace_model.h"

namespace dtsim::viewer {

// `other`/`diff`: the second trace and the comparison on `model`'s frames (both null with one
// trace).
std::vector<std::string> RankDetails(const TraceModel& model, int64_t frame, int64_t position,
                                     const TraceModel* other = nullptr,
                                     const TraceDiff* diff = nullptr);

// "0:5" / "0:2, 4:6" / "-" (nothing owned).
std::string IntervalsText(const std::vector<Interval>& intervals);

}  // namespace dtsim::viewer
