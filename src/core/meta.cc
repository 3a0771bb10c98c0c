// Metadata-only DTensors (see include/dtsim/core/meta.h).
#include "dtsim/core/meta.h"

#include <ATen/ATen.h>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {

DTensor MakeMetaDTensor(const DTensorSpec& spec, std::shared_ptr<Collectives> collectives) {
  if (!collectives) collectives = MakeLocalCollectives();
  const at::TensorOptions options =
      at::TensorOptions().dtype(ToScalarType(spec.dtype())).device(at::kMeta);
  MeshView view(spec.mesh());
  at::Tensor local = collectives->FromRankFn(view.ranks(), [&](int64_t rank) {
    return at::empty(
        LocalShapeAt(spec.shape(), spec.mesh().shape(), view.Coordinate(rank), spec.placements()),
        options);
  });
  return DTensor::FromLocal(local, spec.mesh(), spec.placements(), spec.shape(), std::nullopt,
                            std::move(collectives));
}

bool IsMetaData(const at::Tensor& local) {
  if (!local.defined()) return false;
  return local.is_meta();  // a LocalTensor's device is its shards' (local_tensor_impl.h)
}

std::optional<std::string> FindShapeMismatch(const DTensorSpec& spec, const at::Tensor& local,
                                             const Collectives& collectives) {
  MeshView view(spec.mesh());
  const at::ScalarType dtype = ToScalarType(spec.dtype());
  for (int64_t rank : collectives.HeldRanks(local)) {
    const at::Tensor shard = collectives.Shard(local, rank);
    const std::vector<int64_t> want =
        LocalShapeAt(spec.shape(), spec.mesh().shape(), view.Coordinate(rank), spec.placements());
    if (shard.sizes() != c10::IntArrayRef(want)) {
      return StrCat("rank ", rank, " holds ", IntListToString(shard.sizes().vec()),
                    " but the layout gives ", IntListToString(want));
    }
    if (shard.scalar_type() != dtype) {
      return StrCat("rank ", rank, " holds ", shard.scalar_type(), " but the spec is ",
                    ToString(spec.dtype()));
    }
  }
  return std::nullopt;
}

}  // namespace dtsim
