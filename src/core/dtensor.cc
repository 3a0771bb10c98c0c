// DTensor: construction (from_local, distribute_tensor, distribution onto another submesh),
// redistribute, full_tensor.
#include "dtsim/core/dtensor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <set>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/planner.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/sim_world.h"

namespace dtsim {
namespace {

std::vector<int64_t> ShapeOf(const at::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}

// The collectives a DTensor over `local` uses: the given ones, or a fresh simulated world for a
// LocalTensor.
std::shared_ptr<Collectives> CollectivesFor(std::shared_ptr<Collectives> given,
                                            const at::Tensor& local) {
  if (given) return given;
  if (!IsLocalTensor(local)) {
    throw InputError("collectives",
                     "a plain tensor is one rank's data: give the Collectives of its real backend "
                     "(or a LocalTensor to simulate every rank)");
  }
  return MakeLocalCollectives();
}

}  // namespace

DTensor MakeDTensor(DTensorSpec spec, at::Tensor local, std::shared_ptr<Collectives> collectives,
                    std::optional<std::vector<int64_t>> stride) {
  return MakeDTensor(std::make_shared<const DTensorSpec>(std::move(spec)), std::move(local),
                     std::move(collectives), std::move(stride));
}

DTensor MakeDTensor(std::shared_ptr<const DTensorSpec> spec, at::Tensor local,
                    std::shared_ptr<Collectives> collectives,
                    std::optional<std::vector<int64_t>> stride) {
  DTSIM_CHECK(spec != nullptr, "MakeDTensor needs a spec");
  const std::vector<int64_t>& shape = spec->shape();
  if (!stride) {
    stride = std::vector<int64_t>(shape.size(), 1);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
      (*stride)[d] = (*stride)[d + 1] * std::max<int64_t>(shape[d + 1], 1);
    }
  }
  return MakeDTensor(std::move(spec), std::move(local), std::move(collectives),
                     std::make_shared<const std::vector<int64_t>>(std::move(*stride)));
}

DTensor MakeDTensor(std::shared_ptr<const DTensorSpec> spec, at::Tensor local,
                    std::shared_ptr<Collectives> collectives,
                    std::shared_ptr<const std::vector<int64_t>> stride) {
  DTSIM_CHECK(spec != nullptr && stride != nullptr, "MakeDTensor needs a spec and a stride");
  DTSIM_CHECK(stride->size() == spec->shape().size(), "stride ", IntListToString(*stride), " for ",
              spec->ToString());
  collectives = CollectivesFor(std::move(collectives), local);
  return DTensor(std::move(spec), std::move(local), std::move(collectives), std::move(stride));
}

DTensor DTensor::FromLocal(const at::Tensor& local, const DeviceMesh& mesh,
                           const Placements& placements, std::optional<std::vector<int64_t>> shape,
                           std::optional<std::vector<int64_t>> stride,
                           std::shared_ptr<Collectives> collectives) {
  CheckNoMixedPartials(placements, "placements");
  collectives = CollectivesFor(std::move(collectives), local);
  const Collectives& comm = *collectives;
  auto ShardShape = [&](const at::Tensor& t, int64_t rank) { return ShapeOf(comm.Shard(t, rank)); };
  MeshView view(mesh);
  const std::vector<int64_t> held = comm.HeldRanks(local);
  const std::vector<int64_t>& ranks = comm.simulated() ? view.ranks() : held;
  for (int64_t rank : ranks) {
    if (!std::binary_search(held.begin(), held.end(), rank)) {  // HeldRanks is ascending
      throw InputError("from_local", StrCat("the local tensor holds no shard for rank ", rank,
                                            " of ", mesh.ToString()));
    }
  }
  if (!comm.simulated() &&
      std::find(view.ranks().begin(), view.ranks().end(), held[0]) == view.ranks().end()) {
    throw InputError("from_local", StrCat("rank ", held[0], " is not in ", mesh.ToString()));
  }
  if (!shape) {
    // Upstream's default: the global shape implied by even sharding, which must agree on every
    // rank.
    for (int64_t rank : ranks) {
      std::vector<int64_t> implied = ShardShape(local, rank);
      for (int64_t m = 0; m < mesh.ndim(); ++m) {
        const Placement& p = placements[m];
        if (p.is_shard_like()) {
          const int64_t d = p.Normalized(static_cast<int64_t>(implied.size())).dim();
          implied[d] *= mesh.size(m);
        }
      }
      if (shape && *shape != implied) {
        throw InputError(
            "shape",
            StrCat("not given, and the shards imply different global shapes on different ranks (",
                   IntListToString(*shape), " and ", IntListToString(implied),
                   "): pass the global shape"));
      }
      shape = implied;
    }
  }
  const at::Tensor first = comm.Shard(local, ranks.front());
  DTensorSpec spec =
      DTensorSpec::Create(mesh, placements, *shape, FromScalarType(first.scalar_type()));
  for (int64_t rank : ranks) {
    const std::vector<int64_t> want =
        LocalShapeAt(spec.shape(), mesh.shape(), view.Coordinate(rank), spec.placements());
    const at::Tensor shard = comm.Shard(local, rank);
    if (shard.sizes() != c10::IntArrayRef(want)) {
      throw InputError("from_local", StrCat("rank ", rank, " holds a shard of shape ",
                                            IntListToString(ShapeOf(shard)), " but ",
                                            spec.ToString(), " gives it ", IntListToString(want)));
    }
  }
  if (stride) {
    if (stride->size() != spec.shape().size()) {
      throw InputError("stride", StrCat(IntListToString(*stride), " has ", stride->size(),
                                        " entries for a tensor of ", spec.shape().size(), " dims"));
    }
    for (int64_t s : *stride) {
      if (s < 0)
        throw InputError("stride", StrCat(IntListToString(*stride), " has a negative entry"));
    }
  }
  return MakeDTensor(std::move(spec), local, std::move(collectives), std::move(stride));
}

DTensor DTensor::Redistribute(const DeviceMesh& mesh, const Placements& placements,
                              const RedistributeOptions& options) const {
  if (mesh != spec_->mesh()) {
    throw InputError("mesh", StrCat("redistribute from ", spec_->mesh().ToString(),
                                    " to another mesh ", mesh.ToString(),
                                    " is not supported (use DistributeTensor to shard onto another "
                                    "submesh of the same root)"));
  }
  const DTensor out =
      ExecutePlan(*this, PlanFor(*spec_, placements, options.planner), options.on_step);
  const Placements& current = out.placements();
  // The plan ends at the requested placements (normalised); the result keeps them as the user wrote
  // them.
  DTensorSpec target = DTensorSpec::Create(mesh, placements, spec_->shape(), spec_->dtype());
  for (size_t m = 0; m < target.placements().size(); ++m) {
    DTSIM_CHECK(current[m] == target.placements()[m].Canonical(), "plan ended at ",
                ToString(current), " instead of ", ToString(target.placements()));
  }
  return MakeDTensor(std::make_shared<const DTensorSpec>(std::move(target)), out.to_local(),
                     collectives_, stride_);
}

at::Tensor DTensor::FullTensor() const {
  if (local_.is_meta()) {  // a LocalTensor's device is its shards'
    throw InputError("tensor", StrCat("full_tensor of a metadata-only DTensor (", spec_->ToString(),
                                      "): its shards are meta tensors, there are no values"));
  }
  DTensor replicated = Redistribute(mesh(), Placements(mesh().ndim(), Placement::Replicate()));
  const at::Tensor& local = replicated.to_local();
  const Collectives& comm = *collectives_;
  const std::vector<int64_t> ranks = comm.HeldRanks(local);
  at::Tensor first = comm.Shard(local, ranks.front());
  // Bitwise the same value on every rank; NaN equals NaN (an op may produce it: var of one
  // element).
  const bool floating =
      at::isFloatingType(first.scalar_type()) || at::isComplexType(first.scalar_type());
  for (int64_t rank : ranks) {
    const at::Tensor shard = comm.Shard(local, rank);
    const bool same = floating
                          ? shard.sizes() == first.sizes() && at::allclose(shard, first, 0, 0, true)
                          : at::equal(shard, first);
    // Replicas that differ after the all-Replicate redistribution come from the caller (a replica
    // written through to_local(), or from_local with Replicate shards that differ), not from dtsim.
    if (!same) {
      throw InputError("full_tensor",
                       StrCat("rank ", rank, " disagrees with rank ", ranks.front(),
                              ": its replicated value differs (a Replicate shard written after the "
                              "DTensor was made, or from_local with differing replicas?)"));
    }
  }
  return first;
}

namespace {
// A LocalTensor holds its ranks ascending; a mesh may list them in any order ([[0, 2], [1, 3]]).
std::vector<int64_t> SortedRanks(std::vector<int64_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}
}  // namespace

DTensor DistributeTensor(const at::Tensor& tensor, const DeviceMesh& mesh,
                         const Placements& placements, std::optional<int64_t> src_data_rank,
                         std::shared_ptr<Collectives> collectives) {
  if (!collectives) collectives = MakeLocalCollectives();
  if (placements.size() != static_cast<size_t>(mesh.ndim())) {
    throw InputError("placements",
                     StrCat(placements.size(), " placements ", ExcerptText(ToString(placements)),
                            " for ", mesh.ToString(), " of ", mesh.ndim(), " dims"));
  }
  CheckNoMixedPartials(placements, "placements");
  MeshView view(mesh);
  if (src_data_rank && (*src_data_rank < 0)) {
    throw InputError("src_data_rank", StrCat(*src_data_rank, " is negative"));
  }
  // In simulation every rank's copy of a plain tensor is a copy-on-write replica of it (one buffer
  // until written).
  at::Tensor local = IsLocalTensor(tensor)
                         ? tensor
                         : collectives->FromRankFn(SortedRanks(view.ranks()), [&](int64_t) {
                             return collectives->simulated()
                                        ? ShareReplica(tensor, collectives->sim_world().get())
                                        : tensor;
                           });
  const at::Tensor first = collectives->Shard(local, collectives->HeldRanks(local).front());
  const std::vector<int64_t> shape = ShapeOf(first);
  DTensorSpec spec =
      DTensorSpec::Create(mesh, placements, shape, FromScalarType(first.scalar_type()));
  // Apply the placements left to right, each from the replicated state of its mesh dim.
  DTensorSpec current =
      DTensorSpec::Create(mesh, Placements(mesh.ndim(), Placement::Replicate()), shape);
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    const Placement& p = spec.placements()[m];
    if (src_data_rank) {
      if (*src_data_rank >= mesh.size(m)) {
        throw InputError("src_data_rank", StrCat(*src_data_rank, " is outside mesh dim ",
                                                 mesh.DimLabel(m), " of size ", mesh.size(m)));
      }
      if (mesh.size(m) > 1) local = collectives->Broadcast(local, view.Groups(m), *src_data_rank);
    }
    if (p.is_replicate()) continue;
    Transition t{m, Placement::Replicate(), p};
    local = ApplyTransition(local, current, t, *collectives);
    current = SpecAfter(current, t);
  }
  const at::Tensor& given = IsLocalTensor(tensor) ? first : tensor;
  return MakeDTensor(std::move(spec), std::move(local), std::move(collectives),
                     given.strides().vec());
}

DTensor DistributeTensor(const DTensor& tensor, const DeviceMesh& mesh,
                         const Placements& placements) {
  const DeviceMesh& a = tensor.mesh();
  if (&a.root() != &a && !(a.root() == mesh.root())) {
    throw InputError("mesh", StrCat(mesh.ToString(), " and the DTensor's ", a.ToString(),
                                    " are not submeshes of the same root mesh"));
  }
  if (!(a.root() == mesh.root())) {
    throw InputError("mesh", StrCat(mesh.ToString(), " and the DTensor's ", a.ToString(),
                                    " are not submeshes of the same root mesh"));
  }
  if (mesh.is_root() && a.is_root()) {
    throw InputError("mesh", StrCat("the DTensor already lives on ", a.ToString(),
                                    "; use Redistribute to change its placements"));
  }
  if (placements.size() != static_cast<size_t>(mesh.ndim())) {
    throw InputError("placements",
                     StrCat(placements.size(), " placements ", ExcerptText(ToString(placements)),
                            " for ", mesh.ToString(), " of ", mesh.ndim(), " dims"));
  }
  const DeviceMesh& root = a.is_root() ? a : a.root();
  // Root dims of each side, in application (time) order: first the DTensor's, then the new ones.
  std::vector<int64_t> time_dims;
  Placements time_placements = tensor.placements();
  for (const auto& dims : a.root_dims()) {
    if (dims.size() != 1)
      throw InputError("mesh", StrCat(a.ToString(), " is flattened; give a plain submesh"));
    time_dims.push_back(dims[0]);
  }
  for (size_t i = 0; i < mesh.root_dims().size(); ++i) {
    const auto& dims = mesh.root_dims()[i];
    if (dims.size() != 1)
      throw InputError("mesh", StrCat(mesh.ToString(), " is flattened; give a plain submesh"));
    if (std::find(time_dims.begin(), time_dims.end(), dims[0]) != time_dims.end()) {
      throw InputError("mesh", StrCat("mesh dim ", root.DimLabel(dims[0]), " of ", mesh.ToString(),
                                      " is already used by the DTensor on ", a.ToString()));
    }
    time_dims.push_back(dims[0]);
    time_placements.push_back(
        placements[i].Normalized(static_cast<int64_t>(tensor.shape().size())));
  }
  CheckNoMixedPartials(time_placements, "placements");
  // The combined mesh: the root's submesh over the used dims, in root order.
  std::vector<int64_t> sorted = time_dims;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> names;
  for (int64_t d : sorted) names.push_back(root.DimLabel(d));
  DeviceMesh combined =
      static_cast<int64_t>(sorted.size()) == root.ndim() && root.names().size() == sorted.size()
          ? root
          : root.Submesh(names, root.ranks().front());
  // Placements in mesh order: S(d) where the time order agrees, _S(d, k) where mesh dims later in
  // mesh order shard the same tensor dim earlier in time (k = product of their sizes).
  Placements combined_placements;
  for (int64_t d : sorted) {
    size_t t = std::find(time_dims.begin(), time_dims.end(), d) - time_dims.begin();
    Placement p = time_placements[t];
    if (p.is_shard()) {
      int64_t k = 1;
      for (size_t u = 0; u < t; ++u) {
        if (time_dims[u] > d && time_placements[u].is_shard_like() &&
            time_placements[u].dim() == p.dim()) {
          k *= root.size(time_dims[u]);
        }
      }
      if (k > 1) p = Placement::StridedShard(p.dim(), k);
    }
    combined_placements.push_back(p);
  }
  DTensorSpec spec =
      DTensorSpec::Create(combined, combined_placements, tensor.shape(), tensor.spec().dtype());
  // New local data: each rank splits its shard by the new placements over the new mesh's dims, in
  // order.
  MeshView new_view(mesh);
  const Collectives& comm = tensor.collectives();
  at::Tensor local = tensor.to_local();
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    const Placement& p = placements[m];
    if (p.is_replicate()) continue;
    if (p.is_partial() || p.is_shard_like()) {
      // Split each rank's own shard (shapes may differ per rank, so split per rank, not via a
      // shared spec).
      local = comm.MapShards(local, [&](int64_t rank, const at::Tensor& s) {
        const int64_t n = mesh.size(m);
        const int64_t c = new_view.Coordinate(rank)[m];
        if (p.is_partial()) {
          if (p.reduce_op() == ReduceOp::kSum) return at::div(s, n);
          if (p.reduce_op() == ReduceOp::kAvg || p.reduce_op() == ReduceOp::kMin ||
              p.reduce_op() == ReduceOp::kMax) {
            return s;
          }
          throw InputError("placements",
                           StrCat("Replicate to ", p.ToString(), " is not supported"));
        }
        const int64_t d = p.Normalized(s.dim()).dim();
        std::vector<Interval> mine = ShardIndices(p.Normalized(s.dim()), s.size(d), n, c);
        std::vector<at::Tensor> pieces;
        for (const Interval& v : mine) pieces.push_back(s.narrow(d, v.lo, v.size()));
        if (pieces.empty()) return s.narrow(d, 0, 0).clone();
        return pieces.size() == 1 ? pieces[0].clone() : at::cat(pieces, d);
      });
    }
  }
  // Check that the placements describe what every rank now holds.
  MeshView combined_view(combined);
  DeviceMesh time_mesh = DeviceMesh::Create([&] {
    std::vector<int64_t> s;
    for (int64_t d : time_dims) s.push_back(root.size(d));
    return s;
  }());
  for (int64_t rank : combined_view.ranks()) {
    std::vector<int64_t> root_coord = root.GetCoordinate(rank);
    std::vector<int64_t> time_coord;
    for (int64_t d : time_dims) time_coord.push_back(root_coord[d]);
    RankLayout truth =
        ComputeRankLayout(tensor.shape(), time_mesh.shape(), time_coord, time_placements, rank);
    RankLayout described = spec.LayoutOfRank(rank);
    if (truth.intervals != described.intervals) {
      throw InputError(
          "placements",
          StrCat("sharding ", tensor.spec().ToString(), " further with ", ToString(placements),
                 " on ", mesh.ToString(), " gives rank ", rank, " a region that no placements on ",
                 combined.ToString(), " describe (tried ", ToString(combined_placements), ")"));
    }
  }
  return MakeDTensor(std::move(spec), std::move(local), tensor.collectives_ptr(), tensor.stride());
}

}  // namespace dtsim
