// Op traces: what `dtsim op --trace` writes — every implicit redistribution one ATen op on DTensors
// ran, each as a whole dtsim trace (trace.h: its plan steps, the collectives with their groups,
// shapes and bytes, every rank's shard before and after each step), under one header naming the op.
// Real and simulated runs write the same op trace; `dtsim trace-diff` says where two part.
//
//   {"format": "dtsim-op-trace", "version": 1, "meta": {...as in a trace...}, "op": "mm",
//    "strategy": "[S(0), R] x [R, S(1)] -> [S(0), S(1)]", "ok": true,
//    "redistributions": [{"op": "aten::mm", "arg": 1, "trace": {"format": "dtsim-trace", ...}}]}
//
// "op" is the op as asked (a composite such as matmul runs several ATen ops: each redistribution
// names the one it belongs to); "arg" counts that op's tensor arguments from 0. No LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/trace/redistribution_event.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"

namespace dtsim {

inline constexpr const char* kOpTraceFormat = "dtsim-op-trace";
inline constexpr int kOpTraceVersion = 1;

struct OpTrace {
  TraceMeta meta;
  std::string op;
  std::string strategy;
  // Each implicit redistribution (redistribution_event.h): call "implicit", its op and argument,
  // and its whole trace.
  std::vector<RedistributionEvent> redistributions;
  std::optional<bool> ok;  // every output against the op on the global tensors, when computed
};

nlohmann::json ToJson(const OpTrace& trace);
// What is wrong with a redistribution of tensor argument `arg` of `op` ("aten::mm"), named as
// "arg 99, but ..." or "op 'aten::x' ...", or "" when nothing is. The ops layer knows ATen's
// schemas (TensorArgumentProblem, include/dtsim/core/op_schema.h); this one does not.
using OpArgumentCheck = std::function<std::string(const std::string& op, int64_t arg)>;

// Reads and validates an op trace (each redistribution's trace as TraceFromJson does, its op and
// argument by `check` when given); InputError ("trace", "<path>: <problem>") on the first problem.
OpTrace OpTraceFromJson(const nlohmann::json& json, const OpArgumentCheck& check = nullptr);
// True when `json` says it is an op trace (its "format" is dtsim-op-trace).
bool IsOpTrace(const nlohmann::json& json);

// Where two op traces part: the op, the number of redistributions, which op and argument each
// belongs to, then DiffTraces of each pair in order, its `where` prefixed with "redistribution 2
// (aten::mm arg 1): ". At most `limit` differences.
std::vector<TraceDifference> DiffOpTraces(const OpTrace& a, const OpTrace& b, size_t limit = 20);

}  // namespace dtsim
