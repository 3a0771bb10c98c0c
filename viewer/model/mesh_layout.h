// The mesh panel's pure layout step: the device mesh as a grid of rank cells, coloured by rank,
// with the view's highlights — draw records only, no GUI call (panels/mesh_panel.cc draws them,
// tests inspect them).
//
// 1-D meshes are one row wrapped to the area's shape; 2-D meshes a grid (rows = one mesh dim,
// columns = another); 3-D and beyond a grid of 2-D slices, one per coordinate of the remaining
// dims, titled "pp=1" etc. Cells are whole pixels; labels appear only where they fit; below 2 px
// per cell, k x k cells are aggregated into one record.
//
// Example: mesh[pp=2, dp=2, tp=4], grid rows=dp, cols=tp: two slices "pp=0" and "pp=1" of 2 x 4
// cells; the cell of rank 6 (pp=0, dp=1, tp=2) is in slice 0, row 1, column 2.
#pragma once

#include <vector>

#include "draw.h"
#include "trace_model.h"
#include "view_state.h"

namespace dtsim::viewer {

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
};

MeshLayout LayoutMesh(const TraceModel& model, const Frame& frame, const Highlight& highlight,
                      const MeshGrid& grid, const Rect& area, const TextMetrics& metrics);

}  // namespace dtsim::viewer
