// The dtsim command line: one function per subcommand, each taking the arguments after the
// subcommand name. A command returns the process exit code; bad input throws dtsim::InputError
// (main prints it and exits 2).
#pragma once

#include <string>
#include <vector>

namespace dtsim::cli {

using Args = std::vector<std::string>;

// dtsim layout: per-rank local shapes, offsets and owned intervals of a mesh + placements + shape.
int RunLayout(const Args& args);
// dtsim plan: the redistribution plan from one placement list to another (greedy, graph or
// min-cost).
int RunPlan(const Args& args);

// dtsim redistribute: runs a redistribution on the simulated world: plan, layouts, shards, verdict,
// trace.
int RunRedistribute(const Args& args);

// dtsim distribute: distributes a tensor step by step over submeshes of one root (TP + FSDP).
int RunDistribute(const Args& args);

// dtsim trace-diff: where two traces part.
int RunTraceDiff(const Args& args);

// dtsim compare: a redistribution simulated and on real ranks (launched with mpirun), diffed.
int RunCompare(const Args& args);

// dtsim op: one ATen op on DTensors: the sharding strategy chosen, implicit redistributions,
// outputs, verdict.
int RunOp(const Args& args);

// dtsim export: a trace as Chrome / Perfetto trace-event JSON.
int RunExport(const Args& args);

int RunModel(const Args& args);

// dtsim replay: re-runs a recorded upstream PyTorch run (dtsim.record) and says where it differs.
int RunReplay(const Args& args);

// dtsim run: a torchrun script, unchanged, as N simulated ranks in one process (python -m dtsim
// run).
int RunRun(const Args& args);
int RunRecord(const Args& args);
int RunImportFr(const Args& args);

}  // namespace dtsim::cli
