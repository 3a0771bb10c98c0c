// Metadata-only traces made from the planner and the layout rule alone (no LibTorch, no data): test
// and benchmark input for the viewer at sizes the simulator would take long to run, e.g. a
// 4,096-rank 3-D mesh. Not a user feature: `dtsim redistribute --meta` is the command for that.
//
// Every step of the plan becomes a trace step; its collective row (for steps that move data)
// carries the plan's groups and bytes, each rank's local shape before and after the step as input
// and output shapes, and — when `measured` — a made-up time per rank (the estimate times 1 + (rank
// mod 7) / 20, as a real backend would vary). Rank rows carry the layout rule's local shape and
// offset and no hash; meta.data is false.
//
// Example: MakeMetaTrace(spec of mesh[pp=16, dp=16, tp=16], shape [64, 64, 64], [S(0), S(1), S(2)],
// to [R, S(0), S(1)]) gives a trace of 4,096 ranks that TraceFromJson accepts.
#pragma once

#include "dtsim/layout/spec.h"
#include "dtsim/trace/trace.h"

namespace dtsim::viewer {

struct MetaTraceOptions {
  bool measured =
      false;  // add time_us per rank and write backend "nccl" (a stand-in for a real run)
  std::string argv = "dtsim_make_meta_trace";
};

Trace MakeMetaTrace(const DTensorSpec& src, const Placements& dst,
                    const MetaTraceOptions& options = {});

}  // namespace dtsim::viewer
