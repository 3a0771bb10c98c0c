// JSON and text reports of a layout.
#include "dtsim/layout/layout_report.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "dtsim/layout/error.h"

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
  return right_align ? std::string(width - text.size(), ' ') + text
                     : text + std::string(width - text.size(), ' ');
}

std::string PartialNote(const DTensorSpec& spec) {
  std::string note;
  for (int64_t m = 0; m < spec.mesh().ndim(); ++m) {
    const Placement& p = spec.placements()[m];
    if (!p.is_partial()) continue;
    note +=
        StrCat(note.empty() ? "" : ", ", p.ToString(), " over mesh dim ", spec.mesh().DimLabel(m));
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

namespace {

constexpr size_t kMaxGridSegments = 64;           // per tensor dim
constexpr int64_t kMaxGridCellEntries = 1 << 24;  // rank entries over all cells

nlohmann::json MeshToJson(const DeviceMesh& mesh, bool with_ranks) {
  nlohmann::json out = {{"shape", mesh.shape()}, {"names", mesh.names()}};
  if (with_ranks) out["ranks"] = mesh.ranks();
  return out;
}

// Segment indices [first, last) of `cuts` (sorted) covered by the interval [lo, hi).
std::pair<size_t, size_t> Segments(const std::vector<int64_t>& cuts, const Interval& v) {
  const size_t first = std::lower_bound(cuts.begin(), cuts.end(), v.lo) - cuts.begin();
  const size_t last = std::lower_bound(cuts.begin(), cuts.end(), v.hi) - cuts.begin();
  return {first, last};
}

}  // namespace

nlohmann::json LayoutToJson(const DTensorSpec& spec, const RankSelection& selection) {
  const DeviceMesh& mesh = spec.mesh();
  nlohmann::json out = {{"shape", spec.shape()},
                        {"dtype", ToString(spec.dtype())},
                        {"placements", ToString(spec.placements())}};
  selection.CheckAgainst(mesh.ranks(), mesh.ToString());
  if (!selection.Lists(mesh.size())) {
    ShapeSummary summary;
    for (int64_t rank : mesh.ranks()) summary.Add(rank, spec.LayoutOfRank(rank).local_shape);
    out["mesh"] = MeshToJson(mesh, !mesh.default_order());
    out["num_ranks"] = mesh.size();
    out["rank_summary"] = summary.ToJson();
    return out;
  }
  out["mesh"] = MeshToJson(mesh, true);
  nlohmann::json ranks = nlohmann::json::array();
  for (int64_t rank : mesh.ranks()) {
    if (selection.Includes(rank)) ranks.push_back(RankLayoutToJson(spec.LayoutOfRank(rank)));
  }
  out["ranks"] = std::move(ranks);
  if (selection.mode == RankSelection::Mode::kList) out["num_ranks"] = mesh.size();
  return out;
}

void WriteLayoutJson(std::ostream& out, const DTensorSpec& spec, const RankSelection& selection) {
  const DeviceMesh& mesh = spec.mesh();
  if (!selection.Lists(mesh.size())) {
    out << LayoutToJson(spec, selection).dump();
    return;
  }
  selection.CheckAgainst(mesh.ranks(), mesh.ToString());
  // The keys in nlohmann's (sorted) order, as LayoutToJson(...).dump() writes them.
  out << "{\"dtype\":" << nlohmann::json(ToString(spec.dtype())).dump()
      << ",\"mesh\":" << MeshToJson(mesh, true).dump();
  if (selection.mode == RankSelection::Mode::kList) out << ",\"num_ranks\":" << mesh.size();
  out << ",\"placements\":" << nlohmann::json(ToString(spec.placements())).dump() << ",\"ranks\":[";
  bool first = true;
  for (int64_t rank : mesh.ranks()) {
    if (!selection.Includes(rank)) continue;
    out << (first ? "" : ",") << RankLayoutToJson(spec.LayoutOfRank(rank)).dump();
    first = false;
  }
  out << "],\"shape\":" << nlohmann::json(spec.shape()).dump() << "}";
}

std::string RenderLayoutGrid(const DTensorSpec& spec) {
  if (spec.ndim() < 1 || spec.ndim() > 2) return "";
  const DeviceMesh& mesh = spec.mesh();
  const bool two_d = spec.ndim() == 2;
  const int64_t rows_len = two_d ? spec.shape()[0] : 1;
  const int64_t cols_len = spec.shape()[two_d ? 1 : 0];
  if (rows_len == 0 || cols_len == 0)
    return "(the global tensor has no elements: nothing to draw)\n";
  const size_t row_dim = 0, col_dim = two_d ? 1 : 0;
  // Cut points of each tensor dim: 0, L and every interval end of every rank.
  std::set<int64_t> row_set{0, rows_len}, col_set{0, cols_len};
  for (int64_t rank : mesh.ranks()) {
    const RankLayout l = spec.LayoutOfRank(rank);
    for (const Interval& v : l.intervals[col_dim]) col_set.insert({v.lo, v.hi});
    if (two_d) {
      for (const Interval& v : l.intervals[row_dim]) row_set.insert({v.lo, v.hi});
    }
    if (row_set.size() > kMaxGridSegments + 1 || col_set.size() > kMaxGridSegments + 1) break;
  }
  if (row_set.size() > kMaxGridSegments + 1 || col_set.size() > kMaxGridSegments + 1) {
    return StrCat("(the grid has more than ", kMaxGridSegments,
                  " blocks along a dim: not drawn; the ranks are "
                  "listed below)\n");
  }
  const std::vector<int64_t> row_cuts(row_set.begin(), row_set.end()),
      col_cuts(col_set.begin(), col_set.end());

  // owners[i][j]: the ranks owning block (row segment i, column segment j), as ranges in mesh
  // order.
  std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>> owners(
      row_cuts.size() - 1,
      std::vector<std::vector<std::pair<int64_t, int64_t>>>(col_cuts.size() - 1));
  int64_t entries = 0;
  for (int64_t rank : mesh.ranks()) {
    const RankLayout l = spec.LayoutOfRank(rank);
    const std::vector<Interval> rows = two_d ? l.intervals[row_dim] : std::vector<Interval>{{0, 1}};
    for (const Interval& rv : rows) {
      const auto [r0, r1] = Segments(row_cuts, rv);
      for (const Interval& cv : l.intervals[col_dim]) {
        const auto [c0, c1] = Segments(col_cuts, cv);
        for (size_t i = r0; i < r1; ++i) {
          for (size_t j = c0; j < c1; ++j) {
            auto& cell = owners[i][j];
            if (!cell.empty() && cell.back().second + 1 == rank) {
              cell.back().second = rank;
            } else {
              cell.push_back({rank, rank});
            }
            if (++entries > kMaxGridCellEntries) {
              return "(the grid has too many owners to draw; the ranks are listed below)\n";
            }
          }
        }
      }
    }
  }
  const bool big = mesh.size() > kFullListingMaxRanks;
  std::vector<std::vector<std::string>> cells;
  for (const auto& owner_row : owners) {
    std::vector<std::string> row;
    for (const auto& cell : owner_row) {
      std::string text;
      if (big) {
        text = RangesToString(cell);
      } else {
        for (const auto& [lo, hi] : cell) {
          for (int64_t r = lo; r <= hi; ++r) text += (text.empty() ? "" : ",") + std::to_string(r);
        }
      }
      row.push_back(text.empty() ? "-" : text);
    }
    cells.push_back(row);
  }
  std::vector<std::string> col_heads;
  for (size_t j = 0; j + 1 < col_cuts.size(); ++j)
    col_heads.push_back(StrCat(col_cuts[j], ":", col_cuts[j + 1]));
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

std::string RenderLayout(const DTensorSpec& spec, const RankSelection& selection) {
  const DeviceMesh& mesh = spec.mesh();
  selection.CheckAgainst(mesh.ranks(), mesh.ToString());
  std::string out =
      StrCat(mesh.ToString(), "  placements ", ToString(spec.placements()), "  global shape ",
             IntListToString(spec.shape()), "  ", ToString(spec.dtype()), "\n");
  std::string partial = PartialNote(spec);
  std::string grid = RenderLayoutGrid(spec);
  if (!grid.empty()) {
    out +=
        "\nWhich ranks hold each block of the global tensor (cells list ranks; '-' = nobody):\n" +
        grid;
  }
  if (!partial.empty()) {
    out += "Partial: " + partial +
           " — the holders of a block along those mesh dims each hold a partial value; the\n"
           "block's value is their reduction.\n";
  }
  const bool lists = selection.Lists(mesh.size());
  std::vector<std::pair<int64_t, int64_t>> empty;
  int64_t empty_count = 0;
  ShapeSummary summary;
  // Per-rank table (listing selections only).
  std::vector<std::vector<std::string>> rows;
  rows.push_back(
      {"rank", "coordinate", "local_shape", "global_offset", "intervals (per dim)", "partial"});
  for (int64_t rank : mesh.ranks()) {
    const RankLayout l = spec.LayoutOfRank(rank);
    if (l.numel() == 0 && spec.numel() > 0) {
      ++empty_count;
      if (!empty.empty() && empty.back().second + 1 == rank) {
        empty.back().second = rank;
      } else {
        empty.push_back({rank, rank});
      }
    }
    if (!lists) {
      summary.Add(rank, l.local_shape);
      continue;
    }
    if (!selection.Includes(rank)) continue;
    std::string intervals;
    for (size_t d = 0; d < l.intervals.size(); ++d)
      intervals += (d ? " x " : "") + IntervalsToString(l.intervals[d]);
    if (l.intervals.empty()) intervals = "(scalar)";
    rows.push_back({std::to_string(l.rank), IntListToString(l.coordinate),
                    IntListToString(l.local_shape), IntListToString(l.global_offset), intervals,
                    partial.empty() ? "-" : "yes"});
  }
  if (!empty.empty()) {
    if (mesh.size() <= kFullListingMaxRanks) {
      std::vector<int64_t> list;
      for (const auto& [lo, hi] : empty) {
        for (int64_t r = lo; r <= hi; ++r) list.push_back(r);
      }
      out += "Ranks holding empty shards: " + IntListToString(list) + "\n";
    } else {
      std::string ranges = RangesToString(empty);
      if (ranges.size() > 200) ranges = ranges.substr(0, 200) + "...";
      out += StrCat("Ranks holding empty shards (", empty_count, "): ", ranges, "\n");
    }
  }
  if (!lists) {
    out += StrCat("\n", mesh.size(), " ranks hold ", summary.groups().size(),
                  " distinct local shape", summary.groups().size() == 1 ? "" : "s",
                  " (--ranks all or --ranks 0,5,8-15 lists ranks):\n");
    return out + summary.ToText();
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], r[c].size());
  }
  out += "\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string line;
    for (size_t c = 0; c < rows[i].size(); ++c)
      line += (c ? "  " : "") + Pad(rows[i][c], widths[c], c == 0);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace dtsim
