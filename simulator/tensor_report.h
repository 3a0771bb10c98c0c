// Per-rank data reports shared by `dtsim redistribute` and `dtsim distribute` (LibTorch side of the
// CLI).
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dtsim/layout/rank_selection.h"
#include "dtsim/layout/spec.h"

namespace dtsim::cli {

// A shard's values, row-major flattened: numbers (ints for integral dtypes).
nlohmann::json ValuesToJson(const at::Tensor& shard);
// [{"rank", "coordinate", "local_shape", "global_offset", "values"?}] for every rank of `local`
// that `selection` includes (values only for data, not for meta shards).
nlohmann::json RanksToJson(const DTensorSpec& spec, const at::Tensor& local, bool values,
                           const RankSelection& selection = {});
// Sets out["ranks"] = RanksToJson(...) when `selection` lists ranks (plus out["num_ranks"] for a
// list), or out["num_ranks"] and out["rank_summary"] (the distinct shapes the shards have,
// ShapeSummary) when it summarises.
void AddRanksJson(nlohmann::json& out, const DTensorSpec& spec, const at::Tensor& local,
                  bool values, const RankSelection& selection);
// "  rank 3 [2, 1]: [9.0, 19.0]" lines.
std::string RenderValues(const DTensorSpec& spec, const at::Tensor& local);

}  // namespace dtsim::cli
