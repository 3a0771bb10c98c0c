// Per-rank data reports shared by `dtsim redistribute` and `dtsim distribute` (LibTorch side of the CLI).
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dtsim/spec.h"

namespace dtsim::cli {

// A shard's values, row-major flattened: numbers (ints for integral dtypes).
nlohmann::json ValuesToJson(const at::Tensor& shard);
// [{"rank", "coordinate", "local_shape", "global_offset", "values"?}] for every rank of `local`.
nlohmann::json RanksToJson(const DTensorSpec& spec, const at::Tensor& local, bool values);
// "  rank 3 [2, 1]: [9.0, 19.0]" lines.
std::string RenderValues(const DTensorSpec& spec, const at::Tensor& local);

}  // namespace dtsim::cli
