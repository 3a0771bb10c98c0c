// Arange cases (see include/dtsim/core/arange_case.h).
#include "dtsim/core/arange_case.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/global_view.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {
namespace {

std::vector<int64_t> PartialDims(const DTensorSpec& spec) {
  std::vector<int64_t> dims;
  for (int64_t m = 0; m < spec.mesh().ndim(); ++m) {
    if (spec.placements()[m].is_partial()) dims.push_back(m);
  }
  return dims;
}

// (1 + coordinate) multiplied over the Partial mesh dims.
int64_t PartialFactor(const std::vector<int64_t>& partial_dims,
                      const std::vector<int64_t>& coordinate) {
  int64_t f = 1;
  for (int64_t m : partial_dims) f *= 1 + coordinate[m];
  return f;
}

}  // namespace

at::Tensor ArangeGlobal(const DTensorSpec& spec) {
  at::Tensor t = at::arange(spec.numel(), at::kLong);
  if (spec.dtype() == DType::kBool) return t.remainder(2).to(at::kBool).reshape(spec.shape());
  return t.to(ToScalarType(spec.dtype())).reshape(spec.shape());
}

DTensor MakeArangeSource(const DTensorSpec& spec, std::shared_ptr<Collectives> collectives) {
  return MakeSourceFromGlobal(spec, ArangeGlobal(spec), std::move(collectives));
}

DTensor MakeSourceFromGlobal(const DTensorSpec& spec, const at::Tensor& global,
                             std::shared_ptr<Collectives> collectives) {
  if (!collectives) collectives = MakeLocalCollectives();
  const std::vector<int64_t> partial_dims = PartialDims(spec);
  if (partial_dims.empty())
    return DistributeTensor(global, spec.mesh(), spec.placements(), 0, collectives);
  Placements as_replicate = spec.placements();
  for (int64_t m : partial_dims) as_replicate[m] = Placement::Replicate();
  const DTensorSpec read =
      DTensorSpec::Create(spec.mesh(), as_replicate, spec.shape(), spec.dtype());
  MeshView view(spec.mesh());
  at::Tensor local = collectives->FromRankFn(view.ranks(), [&](int64_t rank) {
    RankLayout layout = read.LayoutAt(view.Coordinate(rank));
    return ShardOf(global, layout)
        .mul(PartialFactor(partial_dims, layout.coordinate))
        .to(global.scalar_type());
  });
  return DTensor::FromLocal(local, spec.mesh(), spec.placements(), spec.shape(), std::nullopt,
                            std::move(collectives));
}

at::Tensor ExpectedArangeGlobal(const DTensorSpec& spec) {
  return ExpectedGlobalOf(spec, ArangeGlobal(spec));
}

at::Tensor ExpectedGlobalOf(const DTensorSpec& spec, const at::Tensor& global) {
  const std::vector<int64_t> partial_dims = PartialDims(spec);
  if (partial_dims.empty()) return global;
  std::map<std::vector<int64_t>, at::Tensor> values;
  std::vector<int64_t> coordinate(spec.mesh().ndim(), 0), key(partial_dims.size(), 0);
  while (true) {
    for (size_t i = 0; i < partial_dims.size(); ++i) coordinate[partial_dims[i]] = key[i];
    values[key] = global.mul(PartialFactor(partial_dims, coordinate)).to(global.scalar_type());
    int64_t i = static_cast<int64_t>(key.size()) - 1;
    for (; i >= 0; --i) {
      if (++key[i] < spec.mesh().size(partial_dims[i])) break;
      key[i] = 0;
    }
    if (i < 0) break;
  }
  return ReducePartials(values, spec, partial_dims);
}

double ArangeTolerance(const DTensorSpec& spec) {
  const at::ScalarType type = ToScalarType(spec.dtype());
  if (!at::isFloatingType(type)) return 0;
  bool avg = false;
  int64_t rounding_dims = 0, partial_ranks = 1;
  for (int64_t m = 0; m < spec.mesh().ndim(); ++m) {
    const Placement& p = spec.placements()[m];
    if (!p.is_partial()) continue;
    avg = avg || p.reduce_op() == ReduceOp::kAvg;
    if (p.reduce_op() == ReduceOp::kSum || p.reduce_op() == ReduceOp::kProduct) ++rounding_dims;
    partial_ranks *= spec.mesh().size(m);
  }
  if (!avg && rounding_dims < 2) return 0;
  double epsilon = 0;
  switch (type) {
    case at::kDouble:
      epsilon = 0x1p-52;
      break;
    case at::kFloat:
      epsilon = 0x1p-23;
      break;
    case at::kHalf:
      epsilon = 0x1p-10;
      break;
    default:
      epsilon = 0x1p-7;
      break;  // bfloat16
  }
  return std::max(1e-6, static_cast<double>(partial_ranks) * epsilon);
}

}  // namespace dtsim
