// Layout reports: the JSON object and the text drawing of a DTensorSpec that `dtsim layout` prints
// and that `dtsim redistribute` reuses for the layouts before and after. No LibTorch.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>

#include "dtsim/layout/rank_selection.h"
#include "dtsim/layout/spec.h"

namespace dtsim {

// {"rank", "coordinate", "local_shape", "global_offset", "intervals": [[[lo, hi], ...] per dim]}.
nlohmann::json RankLayoutToJson(const RankLayout& layout);

// {"mesh": {"shape", "names", "ranks"}, "shape", "dtype", "placements": "[S(0), S(1)]", "ranks":
// [RankLayoutToJson...]} when `selection` lists ranks (every rank of a small world by default; only
// the selected ones for a list, then with "num_ranks" too). When it summarises (big worlds by
// default): no "ranks" but "num_ranks" and "rank_summary" (ShapeSummary::ToJson), and "mesh.ranks"
// only for a mesh whose ranks are not 0..N-1 in order.
nlohmann::json LayoutToJson(const DTensorSpec& spec, const RankSelection& selection = {});
// Writes LayoutToJson(spec, selection).dump() to `out` without building the whole object: the ranks
// are written one at a time, so --ranks all on 2^20 ranks streams in constant memory.
void WriteLayoutJson(std::ostream& out, const DTensorSpec& spec,
                     const RankSelection& selection = {});

// The text `dtsim layout` prints: a header line, for 1-D and 2-D tensors a grid of the global
// tensor whose cells list the ranks owning each block (replicas together, partial holders marked;
// in big worlds as ranges "0-1023"), then a per-rank table, or for a summarising selection the
// table of distinct local shapes.
std::string RenderLayout(const DTensorSpec& spec, const RankSelection& selection = {});

// Only the grid part of RenderLayout ("" for tensors of other ranks than 1 and 2; a one-line note
// instead of a grid of more than 64 x 64 blocks).
std::string RenderLayoutGrid(const DTensorSpec& spec);

}  // namespace dtsim
