// Layout reports: the JSON object and the text drawing of a DTensorSpec that `dtsim layout` prints and that
// `dtsim redistribute` reuses for the layouts before and after. No LibTorch.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "dtsim/spec.h"

namespace dtsim {

// {"rank", "coordinate", "local_shape", "global_offset", "intervals": [[[lo, hi], ...] per dim]}.
nlohmann::json RankLayoutToJson(const RankLayout& layout);

// {"mesh": {"shape", "names", "ranks"}, "shape", "dtype", "placements": "[S(0), S(1)]", "ranks": [RankLayoutToJson...]}.
nlohmann::json LayoutToJson(const DTensorSpec& spec);

// The text `dtsim layout` prints: a header line, for 1-D and 2-D tensors a grid of the global tensor whose cells list
// the ranks owning each block (replicas together, partial holders marked), then a per-rank table.
std::string RenderLayout(const DTensorSpec& spec);

// Only the grid part of RenderLayout ("" for tensors of other ranks than 1 and 2).
std::string RenderLayoutGrid(const DTensorSpec& spec);

}  // namespace dtsim
