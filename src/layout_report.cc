// JSON and text reports of a layout.
#include "dtsim/layout_report.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "dtsim/error.h"

namespace dtsim {
namespace {

std::string IntervalsToString(const std::vector<Interval>& intervals) {
  if (intervals.empty()) return "{}";
  std::string out;
  for (size_t i = 0; i < intervals.size(); ++i) {
    out += (i ? "+" : "") + StrCat(intervals[i].lo, ":", intervals[i].hi);
  }
  return out;
}

// Pads `text` on the right to `width` (or on the left when `right_align`).
std::string Pad(const std::string& text, size_t width, bool right_align = false) {
  if (text.size() >= width) return text;
  return right_align ? std::string(width - text.size(), ' ') + text : text + std::string(width - text.size(), ' ');
}

// Sorted cut points of one tensor dim: 0, L and every interval end of every rank.
std::vector<int64_t> CutPoints(const std::vector<RankLayout>& layouts, size_t dim, int64_t length) {
  std::set<int64_t> cuts{0, length};
  for (const RankLayout& l : layouts) {
    for (const Interval& v : l.intervals[dim]) {
      cuts.insert(v.lo);
      cuts.insert(v.hi);
    }
  }
  return {cuts.begin(), cuts.end()};
}

bool Owns(const RankLayout& l, size_t dim, int64_t index) {
  for (const Interval& v : l.intervals[dim]) {
    if (index >= v.lo && index < v.hi) return true;
  }
  return false;
}

std::string PartialNote(const DTensorSpec& spec) {
  std::string note;
  for (int64_t m = 0; m < spec.mesh().ndim(); ++m) {
    const Placement& p = spec.placements()[m];
    if (!p.is_partial()) continue;
    note += StrCat(note.empty() ? "" : ", ", p.ToString(), " over mesh dim ", spec.mesh().DimLabel(m));
  }
  return note;
}

}  // namespace

nlohmann::json RankLayoutToJson(const RankLayout& layout) {
  nlohmann::json intervals = nlohmann::json::array();
  for (const auto& dim : layout.intervals) {
    nlohmann::json list = nlohmann::json::array();
    for (const Interval& v : dim) list.push_back({v.lo, v.hi});
    intervals.push_back(list);
  }
  return {{"rank", layout.rank},
          {"coordinate", layout.coordinate},
          {"local_shape", layout.local_shape},
          {"global_offset", layout.global_offset},
          {"intervals", intervals}};
}

nlohmann::json LayoutToJson(const DTensorSpec& spec) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankLayout& l : spec.AllLayouts()) ranks.push_back(RankLayoutToJson(l));
  nlohmann::json mesh = {{"shape", spec.mesh().shape()}, {"names", spec.mesh().names()},
                         {"ranks", spec.mesh().ranks()}};
  return {{"mesh", mesh},
          {"shape", spec.shape()},
          {"dtype", ToString(spec.dtype())},
          {"placements", ToString(spec.placements())},
          {"ranks", ranks}};
}

std::string RenderLayoutGrid(const DTensorSpec& spec) {
  if (spec.ndim() < 1 || spec.ndim() > 2) return "";
  const std::vector<RankLayout> layouts = spec.AllLayouts();
  const bool two_d = spec.ndim() == 2;
  const int64_t rows_len = two_d ? spec.shape()[0] : 1;
  const int64_t cols_len = spec.shape()[two_d ? 1 : 0];
  if (rows_len == 0 || cols_len == 0) return "(the global tensor has no elements: nothing to draw)\n";
  const size_t row_dim = 0, col_dim = two_d ? 1 : 0;
  std::vector<int64_t> row_cuts = two_d ? CutPoints(layouts, row_dim, rows_len) : std::vector<int64_t>{0, 1};
  std::vector<int64_t> col_cuts = CutPoints(layouts, col_dim, cols_len);
  // Each cell looks at every owned range of every rank: beyond this much work the grid would take minutes, and
  // beyond this many blocks nobody can read it (the table below still lists every rank).
  constexpr long double kMaxGridWork = 1 << 27;
  constexpr long double kMaxGridBlocks = 1 << 16;
  long double ranges = 0;
  for (const RankLayout& l : layouts) {
    ranges += std::max<size_t>(1, l.intervals[col_dim].size() + (two_d ? l.intervals[row_dim].size() : 0));
  }
  const long double blocks = static_cast<long double>(row_cuts.size() - 1) * (col_cuts.size() - 1);
  if (blocks > kMaxGridBlocks || blocks * ranges > kMaxGridWork) {
    return StrCat("(not drawn: ", row_cuts.size() - 1, " x ", col_cuts.size() - 1, " blocks over ", layouts.size(),
                  " ranks is too large to draw; the table lists every rank)\n");
  }

  // cells[i][j]: owners of block (row segment i, column segment j).
  std::vector<std::vector<std::string>> cells;
  for (size_t i = 0; i + 1 < row_cuts.size(); ++i) {
    std::vector<std::string> row;
    for (size_t j = 0; j + 1 < col_cuts.size(); ++j) {
      std::string owners;
      for (const RankLayout& l : layouts) {
        bool owns = Owns(l, col_dim, col_cuts[j]) && (!two_d || Owns(l, row_dim, row_cuts[i]));
        if (owns) owners += (owners.empty() ? "" : ",") + std::to_string(l.rank);
      }
      row.push_back(owners.empty() ? "-" : owners);
    }
    cells.push_back(row);
  }
  std::vector<std::string> col_heads;
  for (size_t j = 0; j + 1 < col_cuts.size(); ++j) col_heads.push_back(StrCat(col_cuts[j], ":", col_cuts[j + 1]));
  std::vector<std::string> row_heads;
  for (size_t i = 0; i + 1 < row_cuts.size(); ++i) {
    row_heads.push_back(two_d ? StrCat(row_cuts[i], ":", row_cuts[i + 1]) : "");
  }
  size_t head_width = std::string(two_d ? "rows\\cols" : "cols").size();
  for (const auto& h : row_heads) head_width = std::max(head_width, h.size());
  std::vector<size_t> widths(col_heads.size());
  for (size_t j = 0; j < col_heads.size(); ++j) {
    widths[j] = col_heads[j].size();
    for (const auto& row : cells) widths[j] = std::max(widths[j], row[j].size());
  }
  std::string out = Pad(two_d ? "rows\\cols" : "cols", head_width) + " |";
  std::string rule = std::string(head_width + 1, '-') + "+";
  for (size_t j = 0; j < col_heads.size(); ++j) {
    out += " " + Pad(col_heads[j], widths[j]) + " |";
    rule += std::string(widths[j] + 2, '-') + "+";
  }
  out += "\n" + rule + "\n";
  for (size_t i = 0; i < cells.size(); ++i) {
    out += Pad(row_heads[i], head_width, true) + " |";
    for (size_t j = 0; j < cells[i].size(); ++j) out += " " + Pad(cells[i][j], widths[j]) + " |";
    out += "\n";
  }
  return out;
}

std::string RenderLayout(const DTensorSpec& spec) {
  const std::vector<RankLayout> layouts = spec.AllLayouts();
  std::string out = StrCat(spec.mesh().ToString(), "  placements ", ToString(spec.placements()), "  global shape ",
                           IntListToString(spec.shape()), "  ", ToString(spec.dtype()), "\n");
  std::string partial = PartialNote(spec);
  std::string grid = RenderLayoutGrid(spec);
  if (!grid.empty()) {
    out += "\nWhich ranks hold each block of the global tensor (cells list ranks; '-' = nobody):\n" + grid;
  }
  if (!partial.empty()) {
    out += "Partial: " + partial + " — the holders of a block along those mesh dims each hold a partial value; the\n"
           "block's value is their reduction.\n";
  }
  std::vector<int64_t> empty;
  for (const RankLayout& l : layouts) {
    if (l.numel() == 0 && spec.numel() > 0) empty.push_back(l.rank);
  }
  if (!empty.empty()) out += "Ranks holding empty shards: " + IntListToString(empty) + "\n";

  // Per-rank table.
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "coordinate", "local_shape", "global_offset", "intervals (per dim)", "partial"});
  for (const RankLayout& l : layouts) {
    std::string intervals;
    for (size_t d = 0; d < l.intervals.size(); ++d) intervals += (d ? " x " : "") + IntervalsToString(l.intervals[d]);
    if (l.intervals.empty()) intervals = "(scalar)";
    rows.push_back({std::to_string(l.rank), IntListToString(l.coordinate), IntListToString(l.local_shape),
                    IntListToString(l.global_offset), intervals, partial.empty() ? "-" : "yes"});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], r[c].size());
  }
  out += "\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string line;
    for (size_t c = 0; c < rows[i].size(); ++c) line += (c ? "  " : "") + Pad(rows[i][c], widths[c], c == 0);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace dtsim
