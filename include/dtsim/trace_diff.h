// Trace diff: where two traces of the same redistribution part — a simulated run against a real one, or two builds.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dtsim {

// One difference between two traces.
struct TraceDifference {
  std::string where;  // "initial", "step 2 (mesh dim 0: S(0) -> R)", "final"
  std::string what;   // "rank 5: hash xxh3:... vs xxh3:...", "collective 0: op all_gather vs all_to_all"
};

// Compares two validated traces: the specs, the sequence of steps (mesh dim, from, to, collective), each step's
// collectives (op, groups, per-rank shapes and bytes) and every rank's state (shape, offset, hash) before, after each
// step and at the end. Meta (tool, backend, argv) is not compared. Returns at most `limit` differences, in run order,
// so the first one is where the runs part.
std::vector<TraceDifference> DiffTraces(const nlohmann::json& a, const nlohmann::json& b, size_t limit = 20);

}  // namespace dtsim
