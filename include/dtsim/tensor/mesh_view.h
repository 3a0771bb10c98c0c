// MeshView: the ranks a mesh's DTensors live on in a world and their coordinates, for a root mesh
// or a family of submeshes (see "Submeshes in simulation" in dtensor.h): a DTensor on mesh["tp"] of
// a (dp=2, tp=4) root stands for every tp submesh at once, so its view holds all 8 ranks, a rank's
// coordinate is its root coordinate on tp, and a collective along tp runs in every tp group.
#pragma once

#include <cstdint>
#include <vector>

#include "dtsim/layout/mesh.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim {

// The ranks a mesh's DTensors live on in this world and their coordinates (see "Submeshes in
// simulation").
class MeshView {
 public:
  explicit MeshView(const DeviceMesh& mesh) : mesh_(&mesh) {}
  // Every rank that holds a shard: the root mesh's ranks.
  const std::vector<int64_t>& ranks() const;
  // The coordinate of a world rank in this mesh (its own submesh of the family).
  std::vector<int64_t> Coordinate(int64_t rank) const;
  // Coordinate(rank)[dim] in O(mesh dims) without allocating (per-rank loops of big worlds).
  int64_t CoordinateAlong(int64_t rank, int64_t dim) const;
  // The groups that run a collective along mesh dim `dim`, in every submesh of the family at once.
  GroupSet Groups(int64_t dim) const;

 private:
  const DeviceMesh* mesh_;
};

// True for a submesh whose dims are each one dim of its root (mesh["tp"], mesh["dp", "tp"]): its
// DTensors stand for the whole family of such submeshes. False for a root mesh and for flattened
// dims.
bool IsFamilySubmesh(const DeviceMesh& mesh);

}  // namespace dtsim
