// The per-step memory report of `dtsim plan --memory` and `dtsim redistribute --memory`: for the
// start and for every step, each rank's peak bytes of live tensor buffers (its shards, padding
// buffers, collective outputs) as a MemoryMeter (dtsim/tensor/memory_meter.h) measured them,
// summarised as min / median / max and the rank at the max.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dtsim::cli {

struct MemoryRow {
  std::string label;           // "start" or "step 2  dim 0: S(0) → R  all_gather"
  int64_t step = 0;            // 0 for the start
  std::vector<int64_t> ranks;  // in mesh order
  std::vector<int64_t> bytes;  // per rank: the peak during the step (the live bytes at the start)
};

struct MemoryStats {
  int64_t min = 0;
  int64_t median = 0;  // the lower median: a value some rank has
  int64_t max = 0;
  int64_t max_rank = -1;  // the first rank (mesh order) at the max
};

MemoryStats Summarize(const MemoryRow& row);

// [{"step", "label", "min_bytes", "median_bytes", "max_bytes", "max_rank",
// "peak_bytes_per_rank"?}]; the per-rank list when `per_rank` (small worlds and --ranks all).
nlohmann::json MemoryToJson(const std::vector<MemoryRow>& rows, bool per_rank);

// "peak memory per rank (...)" then one line per row: "  step 1  dim 0: S(0) → R  all_gather   min
// 64 B  median 64 B  max 1.5 KiB (rank 3)".
std::string RenderMemory(const std::vector<MemoryRow>& rows);

// "1.5 KiB" (exact bytes below 1 KiB).
std::string FormatBytes(int64_t bytes);

}  // namespace dtsim::cli
