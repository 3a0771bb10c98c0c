// The mesh panel's pure layout step: the device mesh as a grid of rank cells, coloured by rank,
// with the view's highlights — draw records only, no GUI call (panels/mesh_panel.cc draws them,
// tests inspect them).
//
// 1-D meshes are one row wrapped to the area's shape; 2-D meshes a grid (rows = one mesh dim,
// columns = another); 3-D and beyond a grid of 2-D slices, one per coordinate of the remaining
// dims, titled "pp=1" etc. Cells are whole pixels; labels appear only where they fit; below 2 px
// per cell, k x k cells are aggregated into one record.
//
// Zoom (view_state.h): the grid is laid out `scale` times the size of the area below the header and
// moved by the pan; the header stays. Only records that meet the visible area are emitted (a
// 4,096-rank mesh zoomed in draws a few cells), while `cells` keeps every position. The labels grow
// with the cells (semantic zoom): the rank number once it fits, then its coordinate, then its local
// shape.
//
// Example: mesh[pp=2, dp=2, tp=4], grid rows=dp, cols=tp: two slices "pp=0" and "pp=1" of 2 x 4
// cells; the cell of rank 6 (pp=0, dp=1, tp=2) is in slice 0, row 1, column 2.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "draw.h"
#include "trace_model.h"
#include "view_state.h"

namespace dtsim::viewer {

// A mesh dim as the viewer names it: its name ("dp"), or "dim 0" when the mesh has no names.
std::string DimName(const DeviceMesh& mesh, int64_t dim);
// A dim and a value (its size, a coordinate): "dp=2", or "dim 0 = 2" when the mesh has no names.
std::string DimIs(const DeviceMesh& mesh, int64_t dim, int64_t value);

// A cell's coordinate line: "pp=5 dp=6 tp=4", or "[5, 6, 4]" when the mesh has no names.
std::string CellCoordinate(const DeviceMesh& mesh, const std::vector<int64_t>& coordinate);
// The semantic zoom's levels: the cell pitch (px) from which a cell shows its coordinate under its
// rank number (where the coordinate's text fits too), and then its local shape.
float CoordinateLevelPitch(const TextMetrics& metrics);
float ShapeLevelPitch(const TextMetrics& metrics);

// Which mesh dims form each 2-D grid.
struct MeshGrid {
  int row_dim = -1;  // -1: no row dim (a 1-D mesh, wrapped)
  int col_dim = 0;
  std::vector<int>
      slice_dims;  // the other dims, in mesh order: one slice per combination of their coordinates
};

// The view's grid dims, checked: rows and columns two different dims of the mesh. Defaults: the
// last two dims. InputError("mesh-grid") naming the dim otherwise ("dim 3 is not a dim of
// mesh[dp=2, tp=4]").
MeshGrid ResolveMeshGrid(const DeviceMesh& mesh, const ViewState& view);

struct MeshLayout {
  DrawList draw;
  std::vector<Rect>
      cells;          // per mesh position: its cell (aggregated layouts: the cell of its aggregate)
  int pitch = 0;      // pixels per cell (aggregated: per aggregate)
  int aggregate = 1;  // k: each record covers k x k cells
  Rect viewport;      // the zoomable area (below the header): what is visible of the grid
  // Per slice: the rectangle its cells cover, grown by half the gap to the next slice. Every pixel
  // inside one of them (and inside the viewport) belongs to the nearest cell: RankAt.
  std::vector<Rect> slice_bounds;

  // The rank whose cell is nearest to (x, y), when the point lies in the mesh area (a slice's
  // bounds, inside the viewport): no dead pixel between cells, between slices or at the edges.
  // Aggregated layouts: the first rank of the aggregate, as drawn. nullopt elsewhere (the header,
  // outside the grid).
  std::optional<int64_t> RankAt(float x, float y) const;
  float cell_inset = 0;  // pixels between a cell and its drawn rect (the gap is twice this)
};

MeshLayout LayoutMesh(const TraceModel& model, const Frame& frame, const Highlight& highlight,
                      const MeshGrid& grid, const Rect& area, const TextMetrics& metrics,
                      const Zoom& zoom = Zoom{});

// Zooms the mesh by `factor` about the point (x, y) of `area`: ZoomAbout, then the pan corrected so
// that the same point of the same cell is under (x, y) again (whole-pixel cells do not grow by
// exactly the factor, and the error would grow with the distance from the corner).
Zoom ZoomMeshAbout(const TraceModel& model, const Frame& frame, const Highlight& highlight,
                   const MeshGrid& grid, const Rect& area, const TextMetrics& metrics,
                   const Zoom& zoom, float factor, float x, float y);

}  // namespace dtsim::viewer
