// Finding things in a trace: a rank by its number or coordinate (the toolbar's "go to" box), and
// the steps whose collective or mesh dim matches a query (the timeline's "find step" box).
//
// Example: on mesh[dp=2, tp=4], ParseRankQuery(m, "6"), ParseRankQuery(m, "1,2"),
// ParseRankQuery(m, "(1, 2)") and ParseRankQuery(m, "dp=1 tp=2") are all rank 6; on
// traces/uneven_2x4_S0R_to_RS1.json FindSteps(m, "all_gather") is {2} (the frame after step 2) and
// FindSteps(m, "tp") is {1}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace_model.h"

namespace dtsim::viewer {

// The rank that `text` names: a rank number, or a coordinate — every mesh dim in order ("1,2",
// "(1, 2)", "[1 2]") or by name in any order ("dp=1, tp=2"). InputError("go to") saying what is
// wrong: not in the mesh, a coordinate of the wrong length or outside a dim, an unknown dim name.
int64_t ParseRankQuery(const TraceModel& model, const std::string& text);
// The same on `mesh` (a model trace's, model_view.h).
int64_t ParseRankQuery(const DeviceMesh& mesh, const std::string& text);

// The frames (ascending indices, "after step k" frames only) whose step matches every
// whitespace-separated term of `query`, case-insensitively: the collective kind ("all_gather", or
// a prefix: "all_g"), the mesh dim's name ("tp") or "dim N", or a placement of the transition
// ("S(0)", "P(sum)"). An empty query matches nothing.
std::vector<int64_t> FindSteps(const TraceModel& model, const std::string& query);

}  // namespace dtsim::viewer
