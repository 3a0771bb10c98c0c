// Trace diff (see include/dtsim/trace/trace_diff.h).
#include "dtsim/trace/trace_diff.h"

#include <map>
#include <set>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/layout/placement.h"

namespace dtsim {
namespace {

std::string RankList(const std::vector<int64_t>& ranks) {
  std::ostringstream out;
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << ranks[i];
  if (shown < ranks.size()) out << ", … (" << ranks.size() << " ranks)";
  return out.str();
}

std::string ShapeText(const std::vector<int64_t>& v) { return IntListToString(v); }

class Differ {
 public:
  explicit Differ(size_t limit) : limit_(limit) {}

  // Whether shard hashes are compared (not where both recordings have events: those compare values
  // within float rounding).
  void set_hashes(bool on) { hashes_ = on; }

  bool full() const { return out_.size() >= limit_; }
  std::vector<TraceDifference> take() { return std::move(out_); }

  void At(TraceDifference::Phase phase, int64_t step, int64_t collective, std::string where) {
    phase_ = phase;
    step_ = step;
    collective_ = collective;
    where_ = std::move(where);
  }

  void Add(const std::string& what, std::vector<int64_t> ranks = {}) {
    if (full()) return;
    out_.push_back({phase_, step_, collective_, where_, what, std::move(ranks)});
  }

  // Compares one field over rank rows: `a_rows`/`b_rows` map rank → text of the value.
  void PerRank(const std::string& field, const std::map<int64_t, std::string>& a_rows,
               const std::map<int64_t, std::string>& b_rows) {
    std::vector<int64_t> ranks;
    std::string example;
    for (const auto& [rank, x] : a_rows) {
      auto it = b_rows.find(rank);
      if (it == b_rows.end() || it->second == x) continue;
      if (ranks.empty()) example = StrCat("rank ", rank, ": ", x, " vs ", it->second);
      ranks.push_back(rank);
    }
    if (ranks.empty()) return;
    const std::string what = StrCat(field, " differs on rank", ranks.size() == 1 ? " " : "s ",
                                    RankList(ranks), " (", example, ")");
    Add(what, std::move(ranks));
  }

  void RankSets(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const char* what) {
    std::vector<int64_t> only_a, only_b;
    std::set<int64_t> sa(a.begin(), a.end()), sb(b.begin(), b.end());
    for (int64_t r : a)
      if (!sb.count(r)) only_a.push_back(r);
    for (int64_t r : b)
      if (!sa.count(r)) only_b.push_back(r);
    if (!only_a.empty())
      Add(StrCat(what, " only in the first trace: ranks ", RankList(only_a)), only_a);
    if (!only_b.empty())
      Add(StrCat(what, " only in the second trace: ranks ", RankList(only_b)), only_b);
  }

  void States(const std::vector<RankState>& a, const std::vector<RankState>& b) {
    std::vector<int64_t> ra, rb;
    for (const auto& s : a) ra.push_back(s.rank);
    for (const auto& s : b) rb.push_back(s.rank);
    RankSets(ra, rb, "rank states");
    auto rows = [](const std::vector<RankState>& v, auto get) {
      std::map<int64_t, std::string> m;
      for (const RankState& s : v) {
        std::string text = get(s);
        if (!text.empty()) m[s.rank] = text;
      }
      return m;
    };
    auto shape = [](const RankState& s) { return ShapeText(s.local_shape); };
    auto offset = [](const RankState& s) { return ShapeText(s.global_offset); };
    auto coord = [](const RankState& s) { return ShapeText(s.coordinate); };
    PerRank("local_shape", rows(a, shape), rows(b, shape));
    PerRank("global_offset", rows(a, offset), rows(b, offset));
    PerRank("coordinate", rows(a, coord), rows(b, coord));
    // Hashes only where both traces have them.
    auto hash = [](const RankState& s) { return s.hash ? *s.hash : std::string(); };
    if (hashes_) PerRank("hash", rows(a, hash), rows(b, hash));
  }

  void Collective(const CollectiveEvent& a, const CollectiveEvent& b) {
    if (a.kind != b.kind)
      Add(StrCat("op \"", ToString(a.kind), "\" vs \"", ToString(b.kind), "\""));
    if (a.groups != b.groups) {
      std::vector<int64_t> ranks;
      std::set<std::vector<int64_t>> gb(b.groups.begin(), b.groups.end());
      for (const auto& g : a.groups) {
        if (!gb.count(g)) ranks.insert(ranks.end(), g.begin(), g.end());
      }
      std::sort(ranks.begin(), ranks.end());
      const std::string what =
          StrCat("groups differ: ", GroupsText(a.groups), " vs ", GroupsText(b.groups));
      Add(what, std::move(ranks));
    }
    RankSets(a.ranks, b.ranks, "collective rows");
    auto rows = [](const CollectiveEvent& c, auto get) {
      std::map<int64_t, std::string> m;
      for (size_t i = 0; i < c.ranks.size(); ++i) m[c.ranks[i]] = get(c, i);
      return m;
    };
    auto in = [](const CollectiveEvent& c, size_t i) { return ShapeText(c.input_shapes[i]); };
    auto out = [](const CollectiveEvent& c, size_t i) { return ShapeText(c.output_shapes[i]); };
    auto sent = [](const CollectiveEvent& c, size_t i) { return std::to_string(c.bytes_sent[i]); };
    auto received = [](const CollectiveEvent& c, size_t i) {
      return std::to_string(c.bytes_received[i]);
    };
    PerRank("input shape", rows(a, in), rows(b, in));
    PerRank("output shape", rows(a, out), rows(b, out));
    PerRank("bytes_sent", rows(a, sent), rows(b, sent));
    PerRank("bytes_received", rows(a, received), rows(b, received));
  }

  static std::string GroupsText(const std::vector<std::vector<int64_t>>& groups) {
    std::string out = "[";
    const size_t shown = std::min<size_t>(groups.size(), 4);
    for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + IntListToString(groups[i]);
    if (shown < groups.size()) out += StrCat(", … ", groups.size(), " groups");
    return out + "]";
  }

 private:
  size_t limit_;
  bool hashes_ = true;
  std::vector<TraceDifference> out_;
  TraceDifference::Phase phase_ = TraceDifference::Phase::kInitial;
  int64_t step_ = -1;
  int64_t collective_ = -1;
  std::string where_;
};

std::string StepLabel(const TraceStep& step, size_t index) {
  return StrCat("step ", index + 1, " (mesh dim ", step.plan.mesh_dim, ": ",
                step.plan.from.ToString(), " -> ", step.plan.to.ToString(), ", ",
                ToString(step.plan.collective), ")");
}

}  // namespace

std::vector<TraceDifference> DiffTraces(const Trace& a, const Trace& b, size_t limit) {
  using Phase = TraceDifference::Phase;
  Differ d(limit);
  d.At(Phase::kInitial, -1, -1, "initial");
  if (a.initial.spec.ToString() != b.initial.spec.ToString()) {
    d.Add(StrCat("spec ", a.initial.spec.ToString(), " vs ", b.initial.spec.ToString()));
  }
  d.States(a.initial.ranks, b.initial.ranks);
  if (a.steps.size() != b.steps.size()) {
    d.At(Phase::kStep, static_cast<int64_t>(std::min(a.steps.size(), b.steps.size())), -1, "steps");
    d.Add(StrCat(a.steps.size(), " steps vs ", b.steps.size()));
  }
  for (size_t i = 0; i < std::min(a.steps.size(), b.steps.size()) && !d.full(); ++i) {
    const TraceStep& x = a.steps[i];
    const TraceStep& y = b.steps[i];
    const std::string where = StepLabel(x, i);
    d.At(Phase::kStep, static_cast<int64_t>(i), -1, where);
    if (x.plan.mesh_dim != y.plan.mesh_dim)
      d.Add(StrCat("mesh_dim ", x.plan.mesh_dim, " vs ", y.plan.mesh_dim));
    if (x.plan.from != y.plan.from)
      d.Add(StrCat("from ", x.plan.from.ToString(), " vs ", y.plan.from.ToString()));
    if (x.plan.to != y.plan.to)
      d.Add(StrCat("to ", x.plan.to.ToString(), " vs ", y.plan.to.ToString()));
    if (x.plan.collective != y.plan.collective) {
      d.Add(
          StrCat("collective ", ToString(x.plan.collective), " vs ", ToString(y.plan.collective)));
    }
    if (x.placements_after != y.placements_after) {
      d.Add(StrCat("placements_after ", ToString(x.placements_after), " vs ",
                   ToString(y.placements_after)));
    }
    if (x.collectives.size() != y.collectives.size()) {
      d.Add(StrCat(x.collectives.size(), " collectives vs ", y.collectives.size()));
    }
    for (size_t k = 0; k < std::min(x.collectives.size(), y.collectives.size()) && !d.full(); ++k) {
      d.At(Phase::kStep, static_cast<int64_t>(i), static_cast<int64_t>(k),
           StrCat(where, ", collective ", k, " (", ToString(x.collectives[k].kind), ")"));
      d.Collective(x.collectives[k], y.collectives[k]);
    }
    d.At(Phase::kStep, static_cast<int64_t>(i), -1, where);
    d.States(x.ranks_after, y.ranks_after);
  }
  d.At(Phase::kFinal, -1, -1, "final");
  if (a.final_state.spec.ToString() != b.final_state.spec.ToString()) {
    d.Add(StrCat("spec ", a.final_state.spec.ToString(), " vs ", b.final_state.spec.ToString()));
  }
  d.States(a.final_state.ranks, b.final_state.ranks);
  if (a.ok && b.ok && *a.ok != *b.ok) {
    d.Add(StrCat("verdict ", *a.ok ? "OK" : "MISMATCH", " vs ", *b.ok ? "OK" : "MISMATCH"));
  }
  return d.take();
}

std::vector<int64_t> RanksThatDiffer(const std::vector<TraceDifference>& diffs) {
  std::set<int64_t> ranks;
  for (const auto& d : diffs) ranks.insert(d.ranks.begin(), d.ranks.end());
  return {ranks.begin(), ranks.end()};
}

}  // namespace dtsim

namespace dtsim {
namespace {

// One recorded collective against another: op, groups, ranks, per-rank shapes and bytes, and the
// per-rank hashes where both have them.
void CompareRecorded(Differ& d, const CollectiveEvent& cx, const CollectiveEvent& cy) {
  if (cx.kind != cy.kind)
    d.Add(StrCat("op \"", ToString(cx.kind), "\" vs \"", ToString(cy.kind), "\""));
  if (cx.groups != cy.groups) {
    d.Add(StrCat("groups differ: ", Differ::GroupsText(cx.groups), " vs ",
                 Differ::GroupsText(cy.groups)));
  }
  d.RankSets(cx.ranks, cy.ranks, "collective rows");
  auto rows = [](const CollectiveEvent& c, auto get) {
    std::map<int64_t, std::string> m;
    for (size_t k = 0; k < c.ranks.size(); ++k) m[c.ranks[k]] = get(c, k);
    return m;
  };
  auto in = [](const CollectiveEvent& c, size_t k) { return ShapeText(c.input_shapes[k]); };
  auto out = [](const CollectiveEvent& c, size_t k) { return ShapeText(c.output_shapes[k]); };
  auto in_bytes = [](const CollectiveEvent& c, size_t k) {
    return std::to_string(c.input_bytes[k]);
  };
  auto out_bytes = [](const CollectiveEvent& c, size_t k) {
    return std::to_string(c.output_bytes[k]);
  };
  d.PerRank("input shape", rows(cx, in), rows(cy, in));
  d.PerRank("output shape", rows(cx, out), rows(cy, out));
  d.PerRank("input_bytes", rows(cx, in_bytes), rows(cy, in_bytes));
  d.PerRank("output_bytes", rows(cx, out_bytes), rows(cy, out_bytes));
  if (!cx.input_hashes.empty() && !cy.input_hashes.empty()) {
    auto hash_in = [](const CollectiveEvent& c, size_t k) { return c.input_hashes[k]; };
    d.PerRank("input hash", rows(cx, hash_in), rows(cy, hash_in));
  }
  if (!cx.output_hashes.empty() && !cy.output_hashes.empty()) {
    auto hash_out = [](const CollectiveEvent& c, size_t k) { return c.output_hashes[k]; };
    d.PerRank("output hash", rows(cx, hash_out), rows(cy, hash_out));
  }
}

std::string RedistributionLabel(const RedistributionEvent& r) {
  const std::string call = CallText(r);
  return StrCat("redistribution ", r.index + 1, " (", call, ": ", ToString(r.src().placements()),
                " -> ", ToString(r.dst().placements()), ")");
}

}  // namespace

std::vector<TraceDifference> DiffRecordings(const Recording& a, const Recording& b, size_t limit) {
  Differ d(limit);
  d.set_hashes(!(a.events && b.events));
  using Phase = TraceDifference::Phase;
  d.At(Phase::kInitial, -1, -1, "recording");
  if (a.world_size != b.world_size)
    d.Add(StrCat("world_size ", a.world_size, " vs ", b.world_size));
  const size_t n = std::min(a.redistributions.size(), b.redistributions.size());
  for (size_t i = 0; i < n && !d.full(); ++i) {
    const RedistributionEvent& x = a.redistributions[i];
    const RedistributionEvent& y = b.redistributions[i];
    const std::string label = RedistributionLabel(x);
    const int64_t step = static_cast<int64_t>(i);
    d.At(Phase::kStep, step, -1, label);
    if (x.call != y.call || x.op != y.op || x.arg != y.arg)
      d.Add(StrCat("call differs: ", RedistributionLabel(x), " vs ", RedistributionLabel(y)));
    if (x.src().ToString() != y.src().ToString())
      d.Add(StrCat("source differs: ", x.src().ToString(), " vs ", y.src().ToString()));
    if (x.dst().ToString() != y.dst().ToString())
      d.Add(StrCat("target differs: ", x.dst().ToString(), " vs ", y.dst().ToString()));
    if (x.submesh_dims != y.submesh_dims) d.Add("submesh dims differ");
    d.At(Phase::kStep, step, -1, label + ", before");
    d.States(x.ranks_before(), y.ranks_before());
    d.At(Phase::kStep, step, -1, label);
    if (x.collectives.size() != y.collectives.size()) {
      d.Add(StrCat(x.collectives.size(), " collective", x.collectives.size() == 1 ? "" : "s",
                   " vs ", y.collectives.size()));
    }
    for (size_t j = 0; j < std::min(x.collectives.size(), y.collectives.size()); ++j) {
      d.At(Phase::kStep, step, static_cast<int64_t>(j),
           StrCat(label, ", collective ", j + 1, " (", ToString(x.collectives[j].kind), ")"));
      CompareRecorded(d, x.collectives[j], y.collectives[j]);
    }
    d.At(Phase::kStep, step, -1, label + ", after");
    d.States(x.ranks_after(), y.ranks_after());
  }
  if (a.redistributions.size() != b.redistributions.size()) {
    d.At(Phase::kFinal, -1, -1, "end");
    d.Add(StrCat(a.redistributions.size(), " redistributions vs ", b.redistributions.size(),
                 ": the runs part after redistribution ", n));
  }
  if (a.collectives && b.collectives) {
    // The run's collectives (both recordings have them: dtsim run --trace), in completion order.
    const std::vector<CollectiveEvent>& ca = *a.collectives;
    const std::vector<CollectiveEvent>& cb = *b.collectives;
    const size_t m = std::min(ca.size(), cb.size());
    for (size_t j = 0; j < m && !d.full(); ++j) {
      d.At(Phase::kFinal, -1, static_cast<int64_t>(j),
           StrCat("run collective ", j + 1, " (", ToString(ca[j].kind), " over ",
                  Differ::GroupsText(ca[j].groups), ")"));
      CompareRecorded(d, ca[j], cb[j]);
    }
    if (ca.size() != cb.size()) {
      d.At(Phase::kFinal, -1, -1, "run collectives");
      d.Add(StrCat(ca.size(), " collectives vs ", cb.size()));
    }
  }
  return d.take();
}

}  // namespace dtsim
