// Per-rank data reports shared by the subcommands.
#include "tensor_report.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

#include "dtsim/core/dtensor.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim::cli {

nlohmann::json ValuesToJson(const at::Tensor& shard) {
  at::Tensor flat = shard.contiguous().reshape({-1});
  nlohmann::json out = nlohmann::json::array();
  if (at::isFloatingType(flat.scalar_type())) {
    at::Tensor d = flat.to(at::kDouble);
    const double* p = d.const_data_ptr<double>();
    for (int64_t i = 0; i < d.numel(); ++i) out.push_back(p[i]);
  } else {
    at::Tensor l = flat.to(at::kLong);
    const int64_t* p = l.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < l.numel(); ++i) out.push_back(p[i]);
  }
  return out;
}

nlohmann::json RanksToJson(const DTensorSpec& spec, const at::Tensor& local, bool values,
                           const RankSelection& selection) {
  nlohmann::json ranks = nlohmann::json::array();
  MeshView view(spec.mesh());
  for (int64_t rank : view.ranks()) {
    if (!selection.Includes(rank)) continue;
    RankLayout l = ComputeRankLayout(spec.shape(), spec.mesh().shape(), view.Coordinate(rank),
                                     spec.placements(), rank);
    at::Tensor shard = LocalShard(local, rank);
    nlohmann::json r = {{"rank", rank},
                        {"coordinate", l.coordinate},
                        {"local_shape", shard.sizes().vec()},
                        {"global_offset", l.global_offset}};
    if (values && !shard.is_meta()) r["values"] = ValuesToJson(shard);
    ranks.push_back(std::move(r));
  }
  return ranks;
}

void AddRanksJson(nlohmann::json& out, const DTensorSpec& spec, const at::Tensor& local,
                  bool values, const RankSelection& selection) {
  MeshView view(spec.mesh());
  selection.CheckAgainst(view.ranks(), spec.mesh().ToString());
  const int64_t world = static_cast<int64_t>(view.ranks().size());
  if (selection.Lists(world)) {
    out["ranks"] = RanksToJson(spec, local, values, selection);
    if (selection.mode == RankSelection::Mode::kList) out["num_ranks"] = world;
    return;
  }
  ShapeSummary summary;
  for (int64_t rank : view.ranks()) summary.Add(rank, LocalShard(local, rank).sizes().vec());
  out["num_ranks"] = world;
  out["rank_summary"] = summary.ToJson();
}

namespace {

// A value as people write it: integers without a fraction ("12"), others with up to 6 significant
// digits.
std::string FormatValue(double v) {
  char buf[32];
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v > -1e15 && v < 1e15) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof(buf), "%.6g", v);
  }
  return buf;
}

}  // namespace

std::string RenderValues(const DTensorSpec& spec, const at::Tensor& local) {
  std::string out;
  MeshView view(spec.mesh());
  for (int64_t rank : view.ranks()) {
    at::Tensor shard = LocalShard(local, rank);
    out += StrCat("  rank ", rank, " ", IntListToString(shard.sizes().vec()), ":");
    if (shard.numel() == 0) {
      out += " (empty)\n";
      continue;
    }
    // Rows of the last dim, one per line; leading dims flattened.
    at::Tensor d =
        shard.to(at::kDouble).contiguous().reshape({-1, shard.dim() == 0 ? 1 : shard.size(-1)});
    std::vector<std::string> cells;
    size_t width = 1;
    const double* p = d.const_data_ptr<double>();
    for (int64_t i = 0; i < d.numel(); ++i) {
      cells.push_back(FormatValue(p[i]));
      width = std::max(width, cells.back().size());
    }
    out += "\n";
    for (int64_t r = 0; r < d.size(0); ++r) {
      std::string line = "    [";
      for (int64_t c = 0; c < d.size(1); ++c) {
        const std::string& cell = cells[r * d.size(1) + c];
        line += (c ? " " : "") + std::string(width - cell.size(), ' ') + cell;
      }
      out += line + "]\n";
    }
  }
  return out;
}

}  // namespace dtsim::cli
