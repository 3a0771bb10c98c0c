// Helpers for runs on real ranks, written over the Collectives interface so they work on every
// backend: rank 0 collects what the other ranks hold (their traces, their shards) to write one
// trace and one report. In simulation every helper is the identity (this process already holds
// every rank). They pass through the Collectives front, so the agreement check guards them too; the
// observer is paused while they run (they are not part of the traced run).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "dtsim/tensor/collectives.h"
#include "dtsim/trace/trace.h"

namespace dtsim {

// True on the rank that reports: rank 0 of a real world, or the simulating process.
bool IsReportingRank(const Collectives& collectives);

// Rank 0's `value` on every rank (simulation: `value`).
int64_t BroadcastFromRankZero(Collectives& collectives, int64_t value);

// True on every rank when `mine` is true on any rank (simulation: `mine`).
bool AnyRank(Collectives& collectives, bool mine);

// Every rank's string, in rank order, on the reporting rank; an empty vector elsewhere. Simulation:
// {mine}. Cost: one all_reduce of the longest length and one gather of padded bytes over the whole
// world.
std::vector<std::string> GatherToRankZero(Collectives& collectives, const std::string& mine);

// The whole run's trace on the reporting rank (every rank's part merged, MergeRankTraces); nullopt
// elsewhere.
std::optional<Trace> GatherTrace(Collectives& collectives, const Trace& mine);

// Every rank's shard of `local` as one LocalTensor on the reporting rank (nullopt elsewhere): what
// the report and the global-tensor verdict read. Simulation: `local` itself.
std::optional<at::Tensor> GatherShards(Collectives& collectives, const at::Tensor& local);

}  // namespace dtsim
