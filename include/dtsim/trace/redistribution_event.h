// RedistributionEvent: "a redistribution ran", the one type the trace formats use for it. It says
// what ran it (an explicit call, or an op's implicit redistribution of one tensor argument) and
// holds its trace: the layout and every rank's shard before and after, and the plan's steps with
// their collectives where the writer knew the plan. Each producer fills what it knows and leaves
// the rest empty; each format writes the fields its documented JSON form has, so files keep their
// keys:
//   - op traces (op_trace.h, `dtsim op --trace`) hold dtsim's own redistributions: the whole trace,
//     plan steps included;
//   - recordings (recording.h, `dtsim.record`) hold upstream's: the states before and after, the
//     collectives as the ranks issued them (upstream's plan is not seen), and where each rank's
//     shard bytes lie in the sidecar file.
// No LibTorch (library dtsim_trace).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/trace/collective_event.h"
#include "dtsim/trace/trace.h"

namespace dtsim {

// Where one rank's shard bytes lie in a recording's sidecar file.
struct RecordedData {
  int64_t rank = 0;
  int64_t offset = 0;
  int64_t nbytes = 0;
};

struct RedistributionEvent {
  int64_t index = 0;  // its place among the run's redistributions (from 0)
  // What ran it: "redistribute", "full_tensor", "implicit" (an op's sharding propagation asked for
  // it), "backward"; with the ATen op of an implicit one ("aten::mm", else "") and which of that
  // op's tensor arguments it moved (from 0; nullopt where not said).
  std::string call;
  std::string op;
  std::optional<int64_t> arg;
  // On a submesh (a DTensor on mesh["tp"]): the root's dims the placements apply to; the specs then
  // live on the family of those submeshes (dtensor.h) and each rank runs in its own submesh
  // (root.Submesh(submesh_dims, rank)). Empty for a DTensor on a root mesh.
  std::vector<std::string> submesh_dims;
  // trace.initial: the source spec and every rank's state before (ascending by rank, one per mesh
  // rank); trace.final_state: the target and the states after; trace.steps: the plan's steps with
  // their collectives, or none where the plan was not seen. trace.meta and trace.ok: the op
  // trace's per-redistribution header and verdict (a recording has one header for the whole run).
  Trace trace;
  // The collectives as the ranks issued them, where the plan was not seen (a recording); otherwise
  // they are in trace.steps.
  std::vector<CollectiveEvent> collectives;
  // Ranks whose shard the recorder could not hash ({"hash": null, "unavailable": "<why>"} in a
  // recording; their RankState has no hash): rank -> why.
  std::map<int64_t, std::string> unavailable_before, unavailable_after;
  std::vector<double> time_us;   // per rank of the states before, measured (never compared)
  std::vector<double> start_us;  // per rank: since its recorder began (its own clock); or empty
  // Where each rank's source shard (data) and result (data_after, which lets replay tell summation
  // order from wrong values) lie in the sidecar file; nullopt: not kept (past the recorder's size
  // cap, or not asked for).
  std::optional<std::vector<RecordedData>> data, data_after;

  // The trace's parts under the names a recording's JSON gives them (read-only: write through
  // `trace`).
  const DTensorSpec& src() const { return trace.initial.spec; }
  const DTensorSpec& dst() const { return trace.final_state.spec; }
  const std::vector<RankState>& ranks_before() const { return trace.initial.ranks; }
  const std::vector<RankState>& ranks_after() const { return trace.final_state.ranks; }
};

// "redistribute", "implicit aten::mm arg 1": what ran it, as reports name it.
std::string CallText(const RedistributionEvent& r);

}  // namespace dtsim
