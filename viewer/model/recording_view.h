// A recording of a real PyTorch run (dtsim.record, trace/recording.h) as traces the viewer draws:
// one per recorded redistribution, on the root mesh, steps as dtsim plans it, with what the run
// recorded laid on top — every rank's local shape and hash before and after, and the collectives
// upstream issued (their groups and bytes) when they line up with the plan's steps one to one.
//
// Example: a recording of a ColwiseParallel linear layer on 4 Gloo ranks has redistribution #0
// "implicit aten::addmm arg 0: [R] -> [R]" and so on; ViewsOfRecording gives one view each,
// meta.backend "torch-gloo" (drawn as a real run), its initial ranks the recorded ranks_before.
#pragma once

#include <string>
#include <vector>

#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"

namespace dtsim::viewer {

struct RecordedView {
  Trace trace;
  // "#3 implicit aten::mm arg 1: [S(0)] -> [R] (all_gather)": what the redistribution picker shows.
  std::string title;
  // Why the recorded collectives are not on the steps ("" when they are): the run issued another
  // number of collectives than dtsim plans (`dtsim replay` says which).
  std::string collectives_note;
  // Ranks whose recorded hash differs from their replicas' (ReplicaMismatches, as dtsim replay
  // reports them): drawn as differences, red, at the initial (before) or final (after) frame.
  std::vector<ReplicaMismatch> replica_mismatches;
};

// One view per redistribution, in recorded order. A DTensor on a submesh (mesh["tp"]) is drawn on
// the root mesh, Replicate over the other dims: every rank's own submesh holds the same layout.
std::vector<RecordedView> ViewsOfRecording(const Recording& recording);

}  // namespace dtsim::viewer
