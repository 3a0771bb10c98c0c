// Rank selection and the shape summary (see include/dtsim/layout/rank_selection.h).
#include "dtsim/layout/rank_selection.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "dtsim/layout/error.h"

namespace dtsim {

RankSelection RankSelection::Parse(std::string_view text, const std::string& field) {
  RankSelection s;
  std::string t(text);
  t.erase(std::remove_if(t.begin(), t.end(), [](char c) { return c == ' ' || c == '\t'; }),
          t.end());
  if (t == "auto") return s;
  if (t == "all") {
    s.mode = Mode::kAll;
    return s;
  }
  if (t == "summary") {
    s.mode = Mode::kSummary;
    return s;
  }
  if (t.empty())
    throw InputError(field, "empty: give auto, all, summary or ranks such as 0,5,8-15");
  s.mode = Mode::kList;
  size_t start = 0;
  while (start <= t.size()) {
    size_t end = t.find(',', start);
    if (end == std::string::npos) end = t.size();
    const std::string item = t.substr(start, end - start);
    const size_t dash = item.find('-', 1);
    const std::string lo_text = dash == std::string::npos ? item : item.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? item : item.substr(dash + 1);
    std::vector<int64_t> lo = ParseIntList(lo_text, field), hi = ParseIntList(hi_text, field);
    if (lo.size() != 1 || hi.size() != 1) {
      throw InputError(field, StrCat("'", text, "': '", item,
                                     "' is not a rank or a range lo-hi (expected auto, all, "
                                     "summary or ranks such as 0,5,8-15)"));
    }
    if (lo[0] < 0) throw InputError(field, StrCat("'", text, "': rank ", lo[0], " is negative"));
    if (hi[0] < lo[0])
      throw InputError(field, StrCat("'", text, "': range ", item, " runs backwards"));
    if (hi[0] - lo[0] >= kMaxMeshRanks) {
      throw InputError(
          field, StrCat("'", text, "': range ", item, " has more than ", kMaxMeshRanks, " ranks"));
    }
    for (int64_t r = lo[0]; r <= hi[0]; ++r) s.ranks.push_back(r);
    if (static_cast<int64_t>(s.ranks.size()) > kMaxMeshRanks) {
      throw InputError(field, StrCat("'", text, "' names more than ", kMaxMeshRanks, " ranks"));
    }
    if (end == t.size()) break;
    start = end + 1;
  }
  std::sort(s.ranks.begin(), s.ranks.end());
  s.ranks.erase(std::unique(s.ranks.begin(), s.ranks.end()), s.ranks.end());
  return s;
}

std::string RankSelection::ToString() const {
  switch (mode) {
    case Mode::kAuto:
      return "auto";
    case Mode::kAll:
      return "all";
    case Mode::kSummary:
      return "summary";
    case Mode::kList:
      break;
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t r : ranks) {
    if (!ranges.empty() && ranges.back().second + 1 == r) {
      ranges.back().second = r;
    } else {
      ranges.push_back({r, r});
    }
  }
  return RangesToString(ranges);
}

bool RankSelection::Lists(int64_t world_size) const {
  switch (mode) {
    case Mode::kAuto:
      return world_size <= kFullListingMaxRanks;
    case Mode::kSummary:
      return false;
    default:
      return true;
  }
}

bool RankSelection::Includes(int64_t rank) const {
  if (mode != Mode::kList) return true;
  return std::binary_search(ranks.begin(), ranks.end(), rank);
}

void RankSelection::CheckAgainst(const std::vector<int64_t>& world, const std::string& mesh_text,
                                 const std::string& field) const {
  if (mode != Mode::kList) return;
  std::vector<int64_t> sorted = world;
  if (!std::is_sorted(sorted.begin(), sorted.end())) std::sort(sorted.begin(), sorted.end());
  for (int64_t r : ranks) {
    if (!std::binary_search(sorted.begin(), sorted.end(), r)) {
      throw InputError(field,
                       StrCat("rank ", r, " is not in ", mesh_text, " (", world.size(), " ranks)"));
    }
  }
}

void ShapeSummary::Add(int64_t rank, const std::vector<int64_t>& local_shape) {
  auto [it, inserted] = index_.emplace(local_shape, groups_.size());
  if (inserted) groups_.push_back(Group{local_shape, 0, {}});
  Group& g = groups_[it->second];
  ++g.count;
  if (!g.ranges.empty() && g.ranges.back().second + 1 == rank) {
    g.ranges.back().second = rank;
  } else {
    g.ranges.push_back({rank, rank});
  }
}

nlohmann::json ShapeSummary::ToJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Group& g : groups_) {
    nlohmann::json ranges = nlohmann::json::array();
    for (const auto& [lo, hi] : g.ranges) ranges.push_back({lo, hi});
    out.push_back(
        {{"local_shape", g.local_shape}, {"count", g.count}, {"ranks", std::move(ranges)}});
  }
  return out;
}

std::string ShapeSummary::ToText() const {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"local_shape", "count", "ranks"});
  for (const Group& g : groups_) {
    std::string which = RangesToString(g.ranges);
    if (which.size() > 200)
      which = which.substr(0, 200) + StrCat("... (", g.ranges.size(), " ranges)");
    rows.push_back({IntListToString(g.local_shape), std::to_string(g.count), which});
  }
  std::vector<size_t> widths(3, 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      std::string cell = r[c];
      if (c == 1) cell = std::string(widths[c] - cell.size(), ' ') + cell;
      if (c + 1 < r.size()) cell += std::string(widths[c] - std::min(widths[c], cell.size()), ' ');
      line += (c ? "  " : "") + cell;
    }
    out += line + "\n";
  }
  return out;
}

std::string RangesToString(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::string out;
  for (const auto& [lo, hi] : ranges) {
    if (!out.empty()) out += ",";
    out += lo == hi ? std::to_string(lo) : StrCat(lo, "-", hi);
  }
  return out;
}

}  // namespace dtsim
