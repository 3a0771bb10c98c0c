// Draw records (see draw.h).
#include "draw.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace dtsim::viewer {

std::string ToHex(Rgba c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

std::string ToString(Role role) {
  switch (role) {
    case Role::kBackground:
      return "background";
    case Role::kMeshCell:
      return "mesh_cell";
    case Role::kMeshGroup:
      return "mesh_group";
    case Role::kTensorBlock:
      return "tensor_block";
    case Role::kTensorOwner:
      return "tensor_owner";
    case Role::kEmptyShard:
      return "empty_shard";
    case Role::kBar:
      return "bar";
    case Role::kFrameBox:
      return "frame_box";
    case Role::kHighlight:
      return "highlight";
    case Role::kDecoration:
      return "decoration";
    case Role::kTreeRow:
      return "tree_row";
  }
  return "?";
}

void DrawList::Append(const DrawList& other) {
  rects.insert(rects.end(), other.rects.begin(), other.rects.end());
  lines.insert(lines.end(), other.lines.begin(), other.lines.end());
  texts.insert(texts.end(), other.texts.begin(), other.texts.end());
}

void DrawList::MarkZoomed(size_t rects_from, size_t lines_from, size_t texts_from) {
  for (size_t i = rects_from; i < rects.size(); ++i) rects[i].zoomed = true;
  for (size_t i = lines_from; i < lines.size(); ++i) lines[i].zoomed = true;
  for (size_t i = texts_from; i < texts.size(); ++i) texts[i].zoomed = true;
}

void DrawList::Translate(float dx, float dy) {
  for (DrawRect& r : rects) {
    r.rect.x0 += dx;
    r.rect.x1 += dx;
    r.rect.y0 += dy;
    r.rect.y1 += dy;
  }
  for (DrawLine& l : lines) {
    l.x0 += dx;
    l.x1 += dx;
    l.y0 += dy;
    l.y1 += dy;
  }
  for (DrawText& t : texts) {
    t.x += dx;
    t.y += dy;
  }
}

float TextMetrics::Width(const std::string& text) const {
  size_t chars = 0;
  for (unsigned char c : text) chars += (c & 0xC0) != 0x80;  // UTF-8 code points
  return static_cast<float>(chars) * char_width;
}

std::optional<size_t> HitTest(const DrawList& list, float x, float y, Role role) {
  for (size_t i = list.rects.size(); i-- > 0;) {
    const DrawRect& r = list.rects[i];
    if (r.role == role && r.rect.Contains(x, y)) return i;
  }
  return std::nullopt;
}

namespace {
nlohmann::json ColorJson(Rgba c) { return {c.r, c.g, c.b, c.a}; }
}  // namespace

nlohmann::json ToJson(const DrawList& list) {
  nlohmann::json rects = nlohmann::json::array(), lines = nlohmann::json::array(),
                 texts = nlohmann::json::array();
  for (const DrawRect& r : list.rects) {
    rects.push_back({{"x0", r.rect.x0},
                     {"y0", r.rect.y0},
                     {"x1", r.rect.x1},
                     {"y1", r.rect.y1},
                     {"fill", ColorJson(r.fill)},
                     {"border", ColorJson(r.border)},
                     {"border_width", r.border_width},
                     {"role", ToString(r.role)},
                     {"rank", r.rank},
                     {"rank_end", r.rank_end},
                     {"block", r.block},
                     {"frame", r.frame}});
    if (!r.key.empty()) rects.back()["key"] = r.key;
  }
  for (const DrawLine& l : list.lines) {
    lines.push_back({{"x0", l.x0},
                     {"y0", l.y0},
                     {"x1", l.x1},
                     {"y1", l.y1},
                     {"color", ColorJson(l.color)},
                     {"width", l.width},
                     {"role", ToString(l.role)},
                     {"rank", l.rank}});
  }
  for (const DrawText& t : list.texts) {
    texts.push_back({{"x", t.x},
                     {"y", t.y},
                     {"w", t.w},
                     {"h", t.h},
                     {"text", t.text},
                     {"color", ColorJson(t.color)},
                     {"role", ToString(t.role)}});
  }
  return {{"rects", std::move(rects)}, {"lines", std::move(lines)}, {"texts", std::move(texts)}};
}

}  // namespace dtsim::viewer
