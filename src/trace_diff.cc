// Trace diff (see include/dtsim/trace_diff.h).
#include "dtsim/trace_diff.h"

#include "dtsim/error.h"

namespace dtsim {
namespace {

class Differ {
 public:
  explicit Differ(size_t limit) : limit_(limit) {}

  bool full() const { return out_.size() >= limit_; }
  std::vector<TraceDifference> take() { return std::move(out_); }

  void Add(const std::string& where, const std::string& what) {
    if (!full()) out_.push_back({where, what});
  }

  // Compares the values at `key` of two objects; a missing key counts as null.
  void Field(const std::string& where, const std::string& prefix, const nlohmann::json& a, const nlohmann::json& b,
             const char* key) {
    const nlohmann::json none;
    const nlohmann::json& x = a.contains(key) ? a[key] : none;
    const nlohmann::json& y = b.contains(key) ? b[key] : none;
    if (x != y) Add(where, StrCat(prefix, key, " ", x.dump(), " vs ", y.dump()));
  }

  void Ranks(const std::string& where, const nlohmann::json& a, const nlohmann::json& b) {
    if (!a.is_array() || !b.is_array()) {
      if (a != b) Add(where, "rank lists differ");
      return;
    }
    if (a.size() != b.size()) Add(where, StrCat(a.size(), " ranks vs ", b.size()));
    for (size_t i = 0; i < std::min(a.size(), b.size()) && !full(); ++i) {
      const std::string prefix = StrCat("rank ", a[i].value("rank", -1), ": ");
      for (const char* key : {"rank", "local_shape", "global_offset", "hash"}) Field(where, prefix, a[i], b[i], key);
    }
  }

  void Collectives(const std::string& where, const nlohmann::json& a, const nlohmann::json& b) {
    if (a.size() != b.size()) Add(where, StrCat(a.size(), " collectives vs ", b.size()));
    for (size_t i = 0; i < std::min(a.size(), b.size()) && !full(); ++i) {
      const std::string prefix = StrCat("collective ", i, ": ");
      for (const char* key : {"op", "groups", "ranks", "input_shapes", "output_shapes", "bytes_sent",
                              "bytes_received"}) {
        Field(where, prefix, a[i], b[i], key);
      }
    }
  }

 private:
  size_t limit_;
  std::vector<TraceDifference> out_;
};

std::string StepLabel(const nlohmann::json& step, size_t index) {
  return StrCat("step ", index, " (mesh dim ", step.value("mesh_dim", -1), ": ", step.value("from", "?"), " -> ",
                step.value("to", "?"), ")");
}

}  // namespace

std::vector<TraceDifference> DiffTraces(const nlohmann::json& a, const nlohmann::json& b, size_t limit) {
  Differ d(limit);
  d.Field("initial", "", a["initial"], b["initial"], "spec");
  d.Ranks("initial", a["initial"]["ranks"], b["initial"]["ranks"]);
  const auto& sa = a["steps"];
  const auto& sb = b["steps"];
  if (sa.size() != sb.size()) d.Add("steps", StrCat(sa.size(), " steps vs ", sb.size()));
  for (size_t i = 0; i < std::min(sa.size(), sb.size()) && !d.full(); ++i) {
    const std::string where = StepLabel(sa[i], i);
    for (const char* key : {"mesh_dim", "from", "to", "collective", "placements_after"}) {
      d.Field(where, "", sa[i], sb[i], key);
    }
    d.Collectives(where, sa[i].value("collectives", nlohmann::json::array()),
                  sb[i].value("collectives", nlohmann::json::array()));
    d.Ranks(where, sa[i]["ranks_after"], sb[i]["ranks_after"]);
  }
  d.Field("final", "", a["final"], b["final"], "spec");
  d.Ranks("final", a["final"]["ranks"], b["final"]["ranks"]);
  d.Field("final", "", a, b, "ok");
  return d.take();
}

}  // namespace dtsim
