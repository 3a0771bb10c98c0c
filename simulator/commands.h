// The dtsim command line: one function per subcommand, each taking the arguments after the subcommand name.
// A command returns the process exit code; bad input throws dtsim::InputError (main prints it and exits 2).
#pragma once

#include <string>
#include <vector>

namespace dtsim::cli {

using Args = std::vector<std::string>;

// dtsim layout: per-rank local shapes, offsets and owned intervals of a mesh + placements + shape.
int RunLayout(const Args& args);
// dtsim plan: the redistribution plan from one placement list to another (greedy or min-cost).
int RunPlan(const Args& args);

}  // namespace dtsim::cli
