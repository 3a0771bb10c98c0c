// Plan and PlanStep: JSON and text forms (see include/dtsim/layout/plan.h).
#include "dtsim/layout/plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/transition.h"

namespace dtsim {
namespace {

std::string Label(const std::vector<std::string>& labels, int64_t mesh_dim) {
  if (mesh_dim >= 0 && mesh_dim < static_cast<int64_t>(labels.size())) return labels[mesh_dim];
  return std::to_string(mesh_dim);
}

// "tp(1)" for a named mesh dim, "dim 1" for an unnamed one.
std::string DimText(const std::vector<std::string>& labels, int64_t mesh_dim) {
  std::string label = Label(labels, mesh_dim);
  if (label == std::to_string(mesh_dim)) return "dim " + label;
  return label + "(" + std::to_string(mesh_dim) + ")";
}

// "80" when every rank agrees, "0..80" otherwise, "0" for an empty list.
std::string RangeText(const std::vector<int64_t>& values) {
  if (values.empty()) return "0";
  auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  if (*lo == *hi) return std::to_string(*lo);
  return std::to_string(*lo) + ".." + std::to_string(*hi);
}

// "[0, 1, 2]"; a group of more than 16 ranks prints its first 4 and last one: "[0, 1, 2, 3, …, 4095
// (4096 ranks)]".
std::string GroupText(const std::vector<int64_t>& group) {
  if (group.size() <= 16) return IntListToString(group);
  std::string out = "[";
  for (size_t i = 0; i < 4; ++i) out += std::to_string(group[i]) + ", ";
  return out + "…, " + std::to_string(group.back()) + " (" + std::to_string(group.size()) +
         " ranks)]";
}

// "[[0, 1], [2, 3]]"; more than 4 groups print the first two and a count: "[[0, 4], [1, 5], … 16
// groups]".
std::string GroupsText(const std::vector<std::vector<int64_t>>& groups) {
  if (groups.empty()) return "-";
  const size_t shown = groups.size() > 4 ? 2 : groups.size();
  std::string out = "[";
  for (size_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    out += GroupText(groups[i]);
  }
  if (shown < groups.size()) out += ", … " + std::to_string(groups.size()) + " groups";
  return out + "]";
}

std::string Us(double us) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", us);
  return buf;
}

}  // namespace

std::string ToString(PlannerKind kind) {
  switch (kind) {
    case PlannerKind::kGreedy:
      return "greedy";
    case PlannerKind::kMinCost:
      return "min-cost";
    case PlannerKind::kUpstreamGraph:
      return "graph";
  }
  return "?";
}

PlannerKind ParsePlannerKind(std::string_view text, const std::string& field) {
  if (text == "greedy") return PlannerKind::kGreedy;
  if (text == "min-cost" || text == "min_cost" || text == "mincost") return PlannerKind::kMinCost;
  if (text == "graph") return PlannerKind::kUpstreamGraph;
  throw InputError(field, StrCat("unknown planner '", ExcerptText(text, 40),
                                 "' (expected greedy, min-cost or graph)"));
}

namespace {

// True if no mesh dim after `mesh_dim` shards tensor dim `dim` in `state`: mesh dim `mesh_dim` is
// then the innermost split of that dim, so gathering it or splitting it further keeps the
// left-to-right nesting.
bool InnermostFor(const Placements& state, int64_t mesh_dim, int64_t dim) {
  for (size_t j = mesh_dim + 1; j < state.size(); ++j) {
    if (state[j].is_shard_like() && state[j].dim() == dim) return false;
  }
  return true;
}

std::string StepText(const PlanStep& step) {
  return StrCat("mesh dim ", step.mesh_dim, " changes ", step.from.ToString(), " -> ",
                step.to.ToString());
}

}  // namespace

bool StepRunsLeftToRight(const Placements& before, int64_t mesh_dim, const Placement& from,
                         const Placement& to) {
  if (from.is_shard_like() && !InnermostFor(before, mesh_dim, from.dim())) return false;
  if (to.is_shard_like() && !InnermostFor(before, mesh_dim, to.dim())) return false;
  return true;
}

std::optional<std::string> WhyNotExecutable(const Placements& before,
                                            const std::vector<int64_t>& mesh_shape,
                                            const PlanStep& step) {
  const int64_t ndim = static_cast<int64_t>(mesh_shape.size());
  if (step.mesh_dim < 0 || step.mesh_dim >= ndim || static_cast<int64_t>(before.size()) != ndim) {
    return StrCat("mesh dim ", step.mesh_dim, " of a step on ", ToString(before),
                  " does not fit a mesh of ", ndim, " dims");
  }
  if (before[step.mesh_dim].Canonical() != step.from.Canonical()) {
    return StrCat(StepText(step), " but the layout has ", before[step.mesh_dim].ToString(),
                  " there (", ToString(before), ")");
  }
  const int64_t n = mesh_shape[step.mesh_dim];
  TransitionRule rule;
  try {
    rule = RuleFor(step.from, step.to, n, step.mesh_dim);
  } catch (const InputError& e) {
    return StrCat(StepText(step), ", which no collective runs: ", e.what());
  }
  if (!(rule == TransitionRule{step.collective, step.then_local_split})) {
    return StrCat(StepText(step), ", which runs ", ToString(rule.collective),
                  rule.then_local_split ? "+local_split" : "", ", but the step names ",
                  ToString(step.collective), step.then_local_split ? "+local_split" : "",
                  " (upstream's transition ", step.upstream_from.ToString(), " -> ",
                  step.upstream_to.ToString(), ")");
  }
  if (step.from == step.to || n == 1) return std::nullopt;  // nothing runs
  // A shard over a mesh dim of size 1 splits nothing: read it as Replicate.
  Placements effective = before;
  for (int64_t m = 0; m < ndim; ++m) {
    if (mesh_shape[m] == 1) effective[m] = Placement::Replicate();
  }
  if (StepRunsLeftToRight(effective, step.mesh_dim, step.from, step.to)) return std::nullopt;
  return StrCat(StepText(step), " in ", ToString(before),
                " while a later mesh dim still shards the same tensor dim");
}

std::optional<std::string> WhyNotExecutable(const Plan& plan,
                                            const std::vector<int64_t>& mesh_shape) {
  Placements current = plan.src;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    if (step.placements_before != current) {
      return StrCat("step ", i + 1, ": starts at ", ToString(step.placements_before),
                    " but the plan is at ", ToString(current), " there");
    }
    if (auto why = WhyNotExecutable(current, mesh_shape, step))
      return StrCat("step ", i + 1, ": ", *why);
    Placements next = current;
    next[step.mesh_dim] = step.to;
    if (step.placements_after != next) {
      return StrCat("step ", i + 1, ": ", StepText(step), " but ends at ",
                    ToString(step.placements_after));
    }
    current = std::move(next);
  }
  if (!plan.dst.empty() && current != plan.dst) {
    return StrCat("the plan ends at ", ToString(current), ", not at its target ",
                  ToString(plan.dst));
  }
  return std::nullopt;
}

bool PlanStep::communicates() const { return MovesData(collective); }

int64_t Plan::num_collectives() const {
  return std::count_if(steps.begin(), steps.end(),
                       [](const PlanStep& s) { return s.communicates(); });
}

nlohmann::json ToJson(const PlanStep& step, const std::vector<std::string>& mesh_dim_labels) {
  return {
      {"mesh_dim", step.mesh_dim},
      {"mesh_dim_name", Label(mesh_dim_labels, step.mesh_dim)},
      {"from", step.from.ToString()},
      {"to", step.to.ToString()},
      {"upstream_from", step.upstream_from.ToString()},
      {"upstream_to", step.upstream_to.ToString()},
      {"collective", ToString(step.collective)},
      {"then_local_split", step.then_local_split},
      {"groups", step.groups},
      {"bytes_per_rank", step.bytes_sent_per_rank},
      {"bytes_received_per_rank", step.bytes_received_per_rank},
      {"logical_shape_per_rank", step.logical_shape_per_rank},
      {"placements_before", ToString(step.placements_before)},
      {"placements_after", ToString(step.placements_after)},
      {"est_us", step.est_us},
      {"peak_extra_bytes_per_rank", step.peak_extra_bytes_per_rank},
  };
}

nlohmann::json ToJson(const Plan& plan) {
  nlohmann::json steps = nlohmann::json::array();
  for (const PlanStep& s : plan.steps) steps.push_back(ToJson(s, plan.mesh_dim_labels));
  return {
      {"plan", steps},
      {"planner", ToString(plan.planner)},
      {"total_est_us", plan.total_est_us},
      {"num_collectives", plan.num_collectives()},
      {"mesh", plan.mesh},
      {"from", ToString(plan.src)},
      {"to", ToString(plan.dst)},
      {"shape", plan.shape},
      {"dtype", ToString(plan.dtype)},
      {"note", plan.note},
      {"runs_left_to_right", plan.runs_left_to_right},
  };
}

namespace {

Placement PlacementAt(const JsonReader& r, const char* key) {
  JsonReader v = r.At(key);
  try {
    return Placement::Parse(v.AsString(), "placement");
  } catch (const InputError& e) {
    v.Fail(e.what());
  }
}

Placements PlacementsAt(const JsonReader& r, const char* key) {
  JsonReader v = r.At(key);
  try {
    return ParsePlacements(v.AsString(), "placements");
  } catch (const InputError& e) {
    v.Fail(e.what());
  }
}

}  // namespace

PlanStep PlanStepFromJson(const nlohmann::json& json, const std::string& field,
                          const std::string& path, std::string* mesh_dim_name) {
  JsonReader r(json, field, path);
  r.ExpectObject();
  PlanStep s;
  s.mesh_dim = r.Int("mesh_dim", 0, 63);
  if (mesh_dim_name && r.Has("mesh_dim_name")) *mesh_dim_name = r.String("mesh_dim_name");
  s.from = PlacementAt(r, "from");
  s.to = PlacementAt(r, "to");
  s.upstream_from = r.Has("upstream_from") ? PlacementAt(r, "upstream_from") : s.from;
  s.upstream_to = r.Has("upstream_to") ? PlacementAt(r, "upstream_to") : s.to;
  const JsonReader c = r.At("collective");
  auto kind = FindCollectiveKind(c.AsString());
  if (!kind) c.Fail(StrCat("unknown collective ", Excerpt(c.json())));
  s.collective = *kind;
  s.then_local_split = r.Has("then_local_split") && r.Bool("then_local_split");
  s.groups = r.At("groups").AsIntLists(0);
  s.bytes_sent_per_rank = r.Ints("bytes_per_rank", 0);
  if (r.Has("bytes_received_per_rank"))
    s.bytes_received_per_rank = r.Ints("bytes_received_per_rank", 0);
  if (r.Has("logical_shape_per_rank"))
    s.logical_shape_per_rank = r.At("logical_shape_per_rank").AsIntLists(0);
  s.placements_before = PlacementsAt(r, "placements_before");
  s.placements_after = PlacementsAt(r, "placements_after");
  if (static_cast<int64_t>(s.placements_before.size()) <= s.mesh_dim ||
      s.placements_after.size() != s.placements_before.size()) {
    r.Fail(StrCat("mesh_dim ", s.mesh_dim, " does not fit placements_before ",
                  ToString(s.placements_before), " / placements_after ",
                  ToString(s.placements_after)));
  }
  s.est_us = r.Has("est_us") ? r.Number("est_us") : 0;
  if (r.Has("peak_extra_bytes_per_rank"))
    s.peak_extra_bytes_per_rank = r.Ints("peak_extra_bytes_per_rank", 0);
  return s;
}

Plan PlanFromJson(const nlohmann::json& json, const std::string& field, const std::string& path) {
  JsonReader r(json, field, path);
  r.ExpectObject();
  Plan plan;
  JsonReader steps = r.At("plan");
  const size_t n = steps.ArraySize();
  for (size_t i = 0; i < n; ++i) {
    std::string name;
    plan.steps.push_back(PlanStepFromJson(steps.At(i).json(), field, steps.At(i).path(), &name));
    const int64_t md = plan.steps.back().mesh_dim;
    if (static_cast<int64_t>(plan.mesh_dim_labels.size()) <= md)
      plan.mesh_dim_labels.resize(md + 1);
    if (!name.empty()) plan.mesh_dim_labels[md] = name;
  }
  for (size_t i = 0; i < plan.mesh_dim_labels.size(); ++i) {
    if (plan.mesh_dim_labels[i].empty()) plan.mesh_dim_labels[i] = std::to_string(i);
  }
  if (r.Has("total_est_us")) plan.total_est_us = r.Number("total_est_us");
  if (r.Has("planner")) {
    const JsonReader v = r.At("planner");
    try {
      plan.planner = ParsePlannerKind(v.AsString(), "planner");
    } catch (const InputError& e) {
      v.Fail(e.what());
    }
  }
  if (r.Has("note")) plan.note = r.String("note");
  if (r.Has("runs_left_to_right")) plan.runs_left_to_right = r.Bool("runs_left_to_right");
  if (r.Has("mesh")) plan.mesh = r.String("mesh");
  if (r.Has("from")) plan.src = PlacementsAt(r, "from");
  if (r.Has("to")) plan.dst = PlacementsAt(r, "to");
  if (r.Has("shape")) plan.shape = r.Ints("shape", 0);
  if (r.Has("dtype")) {
    const JsonReader v = r.At("dtype");
    try {
      plan.dtype = ParseDType(v.AsString(), "dtype");
    } catch (const InputError& e) {
      v.Fail(e.what());
    }
  }
  return plan;
}

std::string Explain(const Plan& plan) {
  std::ostringstream out;
  out << plan.mesh << " shape=" << IntListToString(plan.shape) << " " << ToString(plan.dtype)
      << ": " << ToString(plan.src) << " → " << ToString(plan.dst) << "  (planner "
      << ToString(plan.planner) << ")\n";
  if (!plan.note.empty()) out << "  note: " << plan.note << "\n";
  if (plan.steps.empty()) out << "  nothing to do\n";
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    out << "  step " << (i + 1) << "  " << DimText(plan.mesh_dim_labels, s.mesh_dim) << ": "
        << s.from.ToString() << " → " << s.to.ToString() << "  " << ToString(s.collective)
        << (s.then_local_split ? "+local_split" : "")
        << (s.upstream_from != s.from || s.upstream_to != s.to
                ? " (upstream runs " + s.upstream_from.ToString() + " → " +
                      s.upstream_to.ToString() + ")"
                : "")
        << "  groups " << GroupsText(s.groups) << "  bytes/rank "
        << RangeText(s.bytes_sent_per_rank) << "  est " << Us(s.est_us) << " us\n";
  }
  out << "  total: " << plan.steps.size() << " step" << (plan.steps.size() == 1 ? "" : "s") << ", "
      << plan.num_collectives() << " collective" << (plan.num_collectives() == 1 ? "" : "s")
      << ", est " << Us(plan.total_est_us) << " us\n";
  return out.str();
}

}  // namespace dtsim
