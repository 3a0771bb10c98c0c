// Per-rank data reports shared by the subcommands.
#include "tensor_report.h"

#include <ATen/ATen.h>

#include "dtsim/aten_dtype.h"
#include "dtsim/dtensor.h"
#include "dtsim/error.h"
#include "dtsim/local_tensor.h"

namespace dtsim::cli {

nlohmann::json ValuesToJson(const at::Tensor& shard) {
  at::Tensor flat = shard.contiguous().reshape({-1});
  nlohmann::json out = nlohmann::json::array();
  if (at::isFloatingType(flat.scalar_type())) {
    at::Tensor d = flat.to(at::kDouble);
    const double* p = d.data_ptr<double>();
    for (int64_t i = 0; i < d.numel(); ++i) out.push_back(p[i]);
  } else {
    at::Tensor l = flat.to(at::kLong);
    const int64_t* p = l.data_ptr<int64_t>();
    for (int64_t i = 0; i < l.numel(); ++i) out.push_back(p[i]);
  }
  return out;
}

nlohmann::json RanksToJson(const DTensorSpec& spec, const at::Tensor& local, bool values) {
  nlohmann::json ranks = nlohmann::json::array();
  MeshView view(spec.mesh());
  for (int64_t rank : view.ranks()) {
    RankLayout l = ComputeRankLayout(spec.shape(), spec.mesh().shape(), view.Coordinate(rank), spec.placements(), rank);
    at::Tensor shard = LocalShard(local, rank);
    nlohmann::json r = {{"rank", rank},
                        {"coordinate", l.coordinate},
                        {"local_shape", shard.sizes().vec()},
                        {"global_offset", l.global_offset}};
    if (values) r["values"] = ValuesToJson(shard);
    ranks.push_back(std::move(r));
  }
  return ranks;
}

std::string RenderValues(const DTensorSpec& spec, const at::Tensor& local) {
  std::string out;
  MeshView view(spec.mesh());
  for (int64_t rank : view.ranks()) {
    at::Tensor shard = LocalShard(local, rank);
    out += StrCat("  rank ", rank, " ", IntListToString(shard.sizes().vec()), ": ",
                  ValuesToJson(shard).dump(), "\n");
  }
  return out;
}

}  // namespace dtsim::cli
