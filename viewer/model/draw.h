// Draw records: what the pure layout step (mesh_layout.h, tensor_layout.h, timeline_layout.h)
// produces and what the panels (ImGui), the SVG writer and the PNG rasteriser draw — plain data in
// pixels, no GUI types. Coordinates are whole pixels (the layout rounds them), so a renderer fills
// exactly the pixels a test expects.
//
// Example: the mesh layout of mesh[dp=2, tp=4] in a 400x200 rect holds 8 DrawRects of role
// kMeshCell, the one with rank 6 at row 1, column 2, filled with RankColor(6); HitTest(list, x, y,
// Role::kMeshCell) finds it again.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dtsim::viewer {

// A colour, 8 bits per channel, straight (not premultiplied) alpha; a == 0 means "nothing to draw".
struct Rgba {
  uint8_t r = 0, g = 0, b = 0, a = 0;
  bool visible() const { return a != 0; }
  bool operator==(const Rgba& o) const { return r == o.r && g == o.g && b == o.b && a == o.a; }
  bool operator!=(const Rgba& o) const { return !(*this == o); }
};

// "#rrggbb" (alpha left out).
std::string ToHex(Rgba c);

// One line of a details panel (the model window's selected row, the events window's selected
// event): its text, and whether it states a difference (drawn in the diff colour).
struct DetailLine {
  std::string text;
  bool differs = false;
};

// An axis-aligned rectangle [x0, x1) x [y0, y1) in pixels, y growing downwards.
struct Rect {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  float width() const { return x1 - x0; }
  float height() const { return y1 - y0; }
  bool Contains(float x, float y) const { return x >= x0 && x < x1 && y >= y0 && y < y1; }
  bool Intersects(const Rect& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

// What a record stands for, so panels and tests can find it (hit tests, pixel tests).
enum class Role : uint8_t {
  kBackground,   // a panel or slice background
  kMeshCell,     // one rank of the mesh (rank set)
  kMeshGroup,    // the rank's collective group outline
  kTensorBlock,  // one block of the global tensor (block set: TensorLayout::blocks)
  kTensorOwner,  // the part of a block drawn in one owner's colour (rank and block set)
  kEmptyShard,   // a rank that holds an empty shard (rank set)
  kBar,  // a bytes bar of one rank (rank set) or of a bucket of ranks (rank = first rank, rank_end
         // set)
  kFrameBox,    // a timeline frame (frame set)
  kHighlight,   // an outline drawn over a record to highlight it (hover, selection, diff)
  kDecoration,  // axes, ticks, separators
  kTreeRow,     // one row of the module tree of a model trace (key set: model_view.h)
};

std::string ToString(Role role);

struct DrawRect {
  Rect rect;
  Rgba fill;               // invisible: not filled
  Rgba border;             // invisible: no border
  float border_width = 0;  // drawn INSIDE the rect
  Role role = Role::kDecoration;
  int64_t rank = -1;  // the rank the record stands for, or -1
  int64_t rank_end =
      -1;  // for aggregated records: one past the last position covered (see kBar), else -1
  int32_t block = -1;    // kTensorBlock / kTensorOwner: index into TensorLayout::blocks
  int32_t frame = -1;    // kFrameBox: the frame index
  bool zoomed = false;   // part of a panel's zoomable content: painted clipped to its viewport
  std::string key = {};  // kTreeRow: the row's key ("m3", "e57"; model_view.h)
};

struct DrawText {
  float x = 0, y = 0;  // top-left
  float w = 0, h = 0;  // the box the layout reserved (TextMetrics below)
  std::string text;
  Rgba color;
  Role role = Role::kDecoration;
  bool zoomed = false;  // see DrawRect::zoomed
};

struct DrawLine {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  Rgba color;
  float width = 1;
  Role role = Role::kDecoration;
  int64_t rank = -1;
  bool zoomed = false;  // see DrawRect::zoomed
};

// Records in painting order: rects, then lines, then texts.
struct DrawList {
  std::vector<DrawRect> rects;
  std::vector<DrawLine> lines;
  std::vector<DrawText> texts;

  void Append(const DrawList& other);
  // Marks the records from index (rects, lines, texts) on as zoomed content.
  void MarkZoomed(size_t rects_from, size_t lines_from, size_t texts_from);
  // Moves every record by (dx, dy).
  void Translate(float dx, float dy);
  bool empty() const { return rects.empty() && lines.empty() && texts.empty(); }
};

// The size of one character of the font that will draw the text: fixed-width estimate, used to
// decide whether a label fits. ImGui's default font (ProggyClean 13 px) is 7 x 13; the PNG
// rasteriser's (stb_easy_font) about 6 x 12.
struct TextMetrics {
  float char_width = 7;
  float line_height = 13;
  float Width(const std::string& text) const;
};

// The index of the top-most rect of `role` containing (x, y), or nullopt.
std::optional<size_t> HitTest(const DrawList& list, float x, float y, Role role);

// {"rects": [{"x0", "y0", "x1", "y1", "fill": [r, g, b, a], "border": [...], "border_width",
// "role", "rank", "rank_end", "block", "frame", "key" (tree rows only)}], "lines": [...], "texts":
// [{"x", "y", "w", "h", "text", "color", "role"}]}: what a headless run dumps (dtsim-viewer
// --dump-records) so tests find where a record was drawn.
nlohmann::json ToJson(const DrawList& list);

}  // namespace dtsim::viewer
