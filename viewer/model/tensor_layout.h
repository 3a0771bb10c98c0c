// The tensor panel's pure layout step: the global tensor partitioned into the blocks each rank owns
// — draw records only (panels/tensor_panel.cc draws them; tests, `dtsim layout --svg/--png` use
// them too).
//
// Two tensor dims are shown (rows, columns); every other dim is sliced at one index. A block is a
// rectangle of global indices [rows) x [cols) with the ranks that own it: ranks hold identical sets
// or disjoint ones (the layout rule), so blocks never overlap. A block is filled with its first
// owner's colour; a block with several owners also has a band of chips along its bottom, one per
// owner in its colour (replicas: "R x2"; Partial mesh dims: a blue outline and "P(sum) x2", the
// owners hold addends) — a legend, unlike a split, which draws a line across the data. A strided
// shard owns several intervals, so its rank has several blocks. Uneven shards show as unequal
// blocks (element sizes are proportional); empty shards have no block and are listed under the
// tensor instead.
//
// Example: shape [5, 10] on mesh[dp=2, tp=4] with [R, S(1)]: 4 blocks of columns 0:3, 3:6, 6:9,
// 9:10, each with two owners (rank c and c + 4, replicated over dp): filled in rank c's colour,
// with chips for c and c + 4.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "draw.h"
#include "trace_model.h"
#include "view_state.h"

namespace dtsim::viewer {

// Which tensor dims are shown and where the others are sliced.
struct TensorView {
  int row_dim = -1;  // -1: no row dim (tensors of fewer than 2 dims)
  int col_dim = -1;  // -1: no column dim (a 0-d tensor)
  std::vector<int64_t>
      slice;  // per tensor dim: the index shown along dims that are neither rows nor columns
};

// The view's tensor dims and slice, checked against `spec` (InputError("tensor-grid") / ("slice")
// naming the dim and its size). Defaults: rows dim 0, columns dim 1; a 1-D tensor is one row; slice
// index 0.
TensorView ResolveTensorView(const DTensorSpec& spec, const ViewState& view);

struct TensorBlock {
  Interval rows;               // global indices along the row dim ([0, 1) without one)
  Interval cols;               // along the column dim
  std::vector<int64_t> ranks;  // the owners, ascending
  int64_t partial_ways =
      1;      // owners holding addends of a Partial (product of the Partial mesh dims' sizes)
  Rect rect;  // where it is drawn
};

struct TensorLayout {
  DrawList draw;
  std::vector<TensorBlock> blocks;
  std::vector<int64_t> empty_ranks;  // ranks whose whole shard is empty, ascending
  int64_t ranks_outside_slice = 0;   // ranks with data, none of it in the shown slice
  Rect tensor;    // where the global tensor is drawn (zoomed: may exceed the area)
  Rect viewport;  // the zoomable area: what is visible of the tensor

  // The block nearest to (x, y) when the point lies on the tensor (inside `tensor` grown by 3 px,
  // and inside the viewport): no dead pixel between blocks or at their edges. Index into `blocks`.
  std::optional<size_t> BlockAt(float x, float y) const;
  // The owner drawn at (x, y) in block `block` (its chip, else the block's fill: the first owner).
  int64_t OwnerAt(size_t block, float x, float y) const;
};

// Zoom (view_state.h): the tensor is laid out `scale` times the fitted size and moved by the pan;
// the header stays and the axis ticks stay along the top and left edges of the viewport. Blocks
// outside the viewport are not drawn (their `rect` is still set); labels appear as blocks grow.
TensorLayout LayoutTensor(const TraceModel& model, const Frame& frame, const Highlight& highlight,
                          const TensorView& view, const Rect& area, const TextMetrics& metrics,
                          const Zoom& zoom = Zoom{});

// "3", "3, 7", "0, 1, 2 ... (+13)": the owners of a block, short.
std::string OwnersText(const std::vector<int64_t>& ranks, size_t max_shown = 4);

}  // namespace dtsim::viewer
