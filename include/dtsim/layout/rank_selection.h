// Rank selection for reports: which ranks a per-rank listing shows, and the summary that replaces
// the listing in big worlds (the distinct local shapes, each with the ranks that hold it). No
// LibTorch.
//
// A world is "big" when it has more than kFullListingMaxRanks (256) ranks: printing every rank of
// 4,096 or 2^20 ranks helps nobody, so by default (`--ranks auto`) reports of big worlds summarise,
// and reports of small worlds list every rank as they always did. `--ranks all` lists every rank
// anyway (streamed), `--ranks summary` summarises a small world too, and `--ranks 0,5,8-15` lists
// just those ranks.
//
// Example: mesh (4,) with [S(0)] on 9 rows: shapes 3,3,3,0 → summary
//   [{"local_shape": [3], "count": 3, "ranks": [[0, 2]]}, {"local_shape": [0], "count": 1, "ranks":
//   [[3, 3]]}]
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtsim/layout/mesh.h"

namespace dtsim {

// Worlds with more ranks than this are summarised by default.
inline constexpr int64_t kFullListingMaxRanks = 256;

struct RankSelection {
  enum class Mode { kAuto, kAll, kSummary, kList };
  Mode mode = Mode::kAuto;
  std::vector<int64_t> ranks;  // kList: the ranks to list, ascending and distinct

  // "auto", "all", "summary", or ranks and inclusive ranges "0,5,8-15". InputError(field) naming
  // the text otherwise (an empty list, a reversed range "9-3", a negative rank).
  static RankSelection Parse(std::string_view text, const std::string& field = "ranks");
  // "auto", "all", "summary", or the list as "0,5,8-15".
  std::string ToString() const;

  // True when the report lists ranks one by one (kAll, kList, or kAuto for a world of at most
  // kFullListingMaxRanks); false when it summarises.
  bool Lists(int64_t world_size) const;
  // Whether `rank` is listed (kAll/kAuto listing: every rank; kList: those given).
  bool Includes(int64_t rank) const;
  // Checks that every listed rank is among `world` (ascending); InputError(field) naming the first
  // that is not.
  void CheckAgainst(const std::vector<int64_t>& world, const std::string& mesh_text,
                    const std::string& field = "ranks") const;
};

// The distinct per-rank local shapes of a world, each with the ranks holding it as inclusive
// ranges, in order of first appearance (ranks added in ascending order or mesh order).
class ShapeSummary {
 public:
  struct Group {
    std::vector<int64_t> local_shape;
    int64_t count = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // inclusive [first, last], in the order added
  };

  void Add(int64_t rank, const std::vector<int64_t>& local_shape);
  const std::vector<Group>& groups() const { return groups_; }

  // [{"local_shape", "count", "ranks": [[first, last], ...]}, ...]
  nlohmann::json ToJson() const;
  // A table with the columns local_shape, count and ranks (ranges written "0-3,8-11").
  std::string ToText() const;

 private:
  std::vector<Group> groups_;
  std::map<std::vector<int64_t>, size_t> index_;
};

// "0-3,8,10-11" for inclusive ranges.
std::string RangesToString(const std::vector<std::pair<int64_t, int64_t>>& ranges);

}  // namespace dtsim
