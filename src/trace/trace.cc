// The trace model: JSON forms, validation, reading, atomic writing, merging per-rank traces (see
// include/dtsim/trace/trace.h).
#include "dtsim/trace/trace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/transition.h"
#include "dtsim/trace/files.h"
#include "trace/json_text.h"

namespace dtsim {
namespace {

constexpr double kMaxTraceMicros = 1e15;

constexpr int64_t kMaxDim = int64_t{1} << 62;
constexpr int64_t kMaxTraceFileBytes = int64_t{1} << 30;

}  // namespace

bool IsShardHash(const std::string& s) {
  if (s.size() != 21 || s.compare(0, 5, "xxh3:") != 0) return false;
  return std::all_of(s.begin() + 5, s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

namespace {

// Checks an entry list against `ranks`: same length.
void ExpectPerRank(const JsonReader& r, size_t got, size_t ranks) {
  if (got != ranks) r.Fail(StrCat("has ", got, " entries for ", ranks, " ranks"));
}

Placements PlacementsOf(const JsonReader& r, int64_t mesh_ndim, int64_t tensor_ndim) {
  Placements p;
  try {
    p = ParsePlacements(r.AsString(), "placements");
    if (static_cast<int64_t>(p.size()) != mesh_ndim) {
      r.Fail(StrCat(Excerpt(r.json()), " has ", p.size(), " placements for a mesh of ", mesh_ndim,
                    " dims"));
    }
    for (Placement& q : p) q = q.Normalized(tensor_ndim, "placements");
  } catch (const InputError& e) {
    if (e.field() == "trace") throw;
    r.Fail(e.what());
  }
  return p;
}

// A time in microseconds as a trace may hold it: finite (JsonReader), not negative, and small
// enough that an export writes it in whole nanoseconds in a 64-bit integer (1e15 us is 31 years).
void CheckMicros(const JsonReader& r, double v) {
  if (v < 0) r.Fail(StrCat("negative time ", v));
  if (!(v <= kMaxTraceMicros))
    r.Fail(StrCat("time ", v, " us is larger than ", kMaxTraceMicros, " us"));
}

RankState RankStateFromJson(const JsonReader& r, const DTensorSpec& spec, bool need_hash) {
  r.ExpectObject();
  RankState s;
  const DeviceMesh& mesh = spec.mesh();
  s.rank = r.Int("rank", 0, kMaxMeshRanks * 64);
  const std::optional<std::vector<int64_t>> where = mesh.FindCoordinate(s.rank);
  if (!where)
    r.At("rank").Fail(StrCat("rank ", s.rank, " is not in ", ExcerptText(mesh.ToString())));
  if (r.Has("coordinate")) {
    s.coordinate = r.Ints("coordinate", 0);
    if (static_cast<int64_t>(s.coordinate.size()) != mesh.ndim()) {
      r.At("coordinate")
          .Fail(StrCat(ExcerptText(IntListToString(s.coordinate)), " has ", s.coordinate.size(),
                       " entries for a mesh of ", mesh.ndim(), " dims"));
    }
    if (s.coordinate != *where) {
      r.At("coordinate")
          .Fail(StrCat(IntListToString(s.coordinate), " is not the coordinate of rank ", s.rank,
                       " in ", ExcerptText(mesh.ToString()), " (", IntListToString(*where), ")"));
    }
  } else {
    s.coordinate = *where;  // optional in the file: the mesh gives it
  }
  s.local_shape = r.Ints("local_shape", 0, kMaxDim);
  if (static_cast<int64_t>(s.local_shape.size()) != spec.ndim()) {
    r.At("local_shape")
        .Fail(StrCat(IntListToString(s.local_shape), " has ", s.local_shape.size(),
                     " dims but the tensor has ", spec.ndim()));
  }
  for (int64_t d = 0; d < spec.ndim(); ++d) {
    if (s.local_shape[d] > spec.shape()[d]) {
      r.At("local_shape")
          .Fail(StrCat(IntListToString(s.local_shape), " is larger than the global shape ",
                       IntListToString(spec.shape())));
    }
  }
  if (r.Has("global_offset")) {
    s.global_offset = r.Ints("global_offset", 0, kMaxDim);
    if (s.global_offset.size() != s.local_shape.size()) {
      r.At("global_offset")
          .Fail(StrCat(ExcerptText(IntListToString(s.global_offset)), " has ",
                       s.global_offset.size(), " dims but the tensor has ", spec.ndim()));
    }
    // Where a shard starts lies inside the tensor, on a real run too (its layout may differ from
    // the spec's, but every backend takes offsets from the layout rule).
    for (int64_t d = 0; d < spec.ndim(); ++d) {
      if (s.global_offset[d] > spec.shape()[d]) {
        r.At("global_offset")
            .Fail(StrCat(ExcerptText(IntListToString(s.global_offset)),
                         " lies beyond the global shape ", IntListToString(spec.shape())));
      }
    }
  } else {
    try {
      s.global_offset =
          spec.LayoutAt(*where).global_offset;  // optional in the file: the layout gives it
    } catch (const InputError& e) {
      r.Fail(e.what());
    }
  }
  if (r.Has("hash")) {
    const JsonReader h = r.At("hash");
    if (!h.json().is_string() || !IsShardHash(h.json().get<std::string>())) {
      h.Fail(StrCat("expected \"xxh3:\" and 16 hex digits, got ", Excerpt(h.json())));
    }
    s.hash = h.json().get<std::string>();
  } else if (need_hash) {
    r.At("hash");  // fails: missing
  }
  return s;
}

// The last of `states`, read at `r` (a JsonReader or a JsonNode), follows the one before it (ranks
// ascending, each once).
template <typename Reader>
void CheckAscending(const Reader& r, const std::vector<RankState>& states) {
  const size_t i = states.size() - 1;
  if (i > 0 && states[i].rank <= states[i - 1].rank) {
    r.At("rank").Fail(StrCat("ranks must be listed once each, ascending: rank ", states[i].rank,
                             " follows rank ", states[i - 1].rank));
  }
}

// A list of RANK_STATEs, one element's DOM at a time.
std::vector<RankState> RankStatesFromNode(const internal::JsonNode& list, const DTensorSpec& spec,
                                          bool need_hash) {
  const size_t n = list.ArraySize();
  std::vector<RankState> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const internal::JsonNode item = list.At(i);
    out.push_back(
        item.Read([&](const JsonReader& r) { return RankStateFromJson(r, spec, need_hash); }));
    CheckAscending(item, out);
  }
  return out;
}

TraceState StateFromNode(const internal::JsonNode& node, bool need_hash) {
  node.ExpectObject();
  TraceState s;
  s.spec = node.At("spec").Read(
      [](const JsonReader& r) { return SpecFromJson(r.json(), "trace", r.path()); });
  s.ranks = RankStatesFromNode(node.At("ranks"), s.spec, need_hash);
  return s;
}

CollectiveEvent CollectiveFromJson(const JsonReader& r) {
  r.ExpectObject();
  CollectiveEvent c;
  const JsonReader op = r.At("op");
  auto kind = FindCollectiveKind(op.AsString());
  if (!kind) op.Fail(StrCat("unknown collective ", Excerpt(op.json())));
  c.kind = *kind;
  c.groups = r.At("groups").AsIntLists(0);
  c.ranks = r.Ints("ranks", 0);
  std::set<int64_t> seen(c.ranks.begin(), c.ranks.end());
  if (seen.size() != c.ranks.size()) r.At("ranks").Fail("lists a rank twice");
  const size_t n = c.ranks.size();
  auto shapes = [&](const char* key) {
    JsonReader s = r.At(key);
    auto v = s.AsIntLists(0, kMaxDim);
    ExpectPerRank(s, v.size(), n);
    return v;
  };
  auto ints = [&](const char* key) {
    JsonReader s = r.At(key);
    auto v = s.AsInts(0);
    ExpectPerRank(s, v.size(), n);
    return v;
  };
  c.input_shapes = shapes("input_shapes");
  c.output_shapes = shapes("output_shapes");
  c.bytes_sent = ints("bytes_sent");
  c.bytes_received = ints("bytes_received");
  if (r.Has("time_us")) {
    JsonReader t = r.At("time_us");
    const size_t m = t.ArraySize();
    ExpectPerRank(t, m, n);
    for (size_t i = 0; i < m; ++i) {
      const double v = t.At(i).AsNumber();
      CheckMicros(t.At(i), v);
      c.time_us.push_back(v);
    }
  }
  return c;
}

// Process groups along `mesh_dim` (each the ranks that share every other coordinate, in
// coordinate order), none listed twice, as the planner and every backend write them (and together
// a partition of the mesh: CheckPartition). An empty list is allowed (a step that moves no data, or
// a trace written without them). `r` reads the list.
void CheckGroupList(const JsonReader& r, const std::vector<std::vector<int64_t>>& groups,
                    const DeviceMesh& mesh, int64_t mesh_dim) {
  std::set<std::vector<int64_t>> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int64_t>& group = groups[g];
    const JsonReader at = r.At(g);
    if (group.empty()) at.Fail("is an empty group");
    if (!mesh.FindCoordinate(group.front())) {
      at.Fail(StrCat("rank ", group.front(), " is not in ", ExcerptText(mesh.ToString())));
    }
    const std::vector<int64_t> want = mesh.GroupAlong(mesh_dim, group.front());
    if (group != want) {
      at.Fail(StrCat(ExcerptText(IntListToString(group)), " is not a group along mesh dim ",
                     mesh_dim, " of ", ExcerptText(mesh.ToString()), " (rank ", group.front(),
                     "'s is ", ExcerptText(IntListToString(want)), ")"));
    }
    if (!seen.insert(group).second) at.Fail("lists the same group twice");
  }
}

// Groups that CheckGroupList accepted cover the mesh (when there are any).
void CheckPartition(const JsonReader& r, const std::vector<std::vector<int64_t>>& groups,
                    const DeviceMesh& mesh, int64_t mesh_dim) {
  // Distinct groups along one mesh dim are disjoint: they cover the mesh when there are as many as
  // the mesh has ranks per group.
  const int64_t per_group = mesh.shape()[mesh_dim];
  if (!groups.empty() && static_cast<int64_t>(groups.size()) * per_group != mesh.size()) {
    std::set<int64_t> covered;
    for (const auto& group : groups) covered.insert(group.begin(), group.end());
    for (int64_t rank : mesh.ranks()) {
      if (!covered.count(rank)) {
        r.Fail(StrCat("rank ", rank, " is in no group: the groups along mesh dim ", mesh_dim,
                      " partition ", ExcerptText(mesh.ToString()), " (", mesh.size() / per_group,
                      " groups of ", per_group, "), these are ", groups.size()));
      }
    }
  }
}

// A collective's rows are ranks of the mesh, and its groups (CheckGroupList) hold every one of
// them.
void CheckGroups(const JsonReader& r, const CollectiveEvent& c, const DeviceMesh& mesh,
                 int64_t mesh_dim) {
  for (int64_t rank : c.ranks) {
    if (!mesh.FindCoordinate(rank)) {
      r.At("ranks").Fail(StrCat("rank ", rank, " is not in ", ExcerptText(mesh.ToString())));
    }
  }
  CheckGroupList(r.At("groups"), c.groups, mesh, mesh_dim);
  std::set<int64_t> in_groups;
  for (const auto& group : c.groups) in_groups.insert(group.begin(), group.end());
  for (int64_t rank : c.ranks) {
    if (!c.groups.empty() && !in_groups.count(rank)) {
      r.At("ranks").Fail(StrCat("rank ", rank, " is in no group of the collective"));
    }
  }
  CheckPartition(r.At("groups"), c.groups, mesh, mesh_dim);
}

TraceMeta MetaFromJson(const JsonReader& r) {
  r.ExpectObject();
  TraceMeta m;
  m.extra = nlohmann::json::object();
  for (const auto& [key, value] : r.json().items()) {
    if (key == "tool") {
      m.tool = r.String("tool");
    } else if (key == "command") {
      m.command = r.String("command");
    } else if (key == "argv") {
      m.argv = r.String("argv");
    } else if (key == "backend") {
      m.backend = r.String("backend");
      if (m.backend != "local" && m.backend != "mpi" && m.backend != "nccl") {
        r.At("backend").Fail(
            StrCat("unknown backend ", Excerpt(value), " (expected local, mpi or nccl)"));
      }
    } else if (key == "world_size") {
      m.world_size = r.Int("world_size", 0, kMaxMeshRanks);
    } else if (key == "planner") {
      m.planner = r.String("planner");
    } else if (key == "data") {
      m.data = r.Bool("data");
    } else if (key == "format" || key == "version") {
      // repeated from the top level by older writers
    } else {
      m.extra[key] = value;
    }
  }
  return m;
}

}  // namespace

std::vector<RankState> RankStatesFromJson(const JsonReader& r, const DTensorSpec& spec,
                                          bool need_hash) {
  const size_t n = r.ArraySize();
  std::vector<RankState> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(RankStateFromJson(r.At(i), spec, need_hash));
    CheckAscending(r.At(i), out);
  }
  return out;
}

TraceMeta TraceMetaFromJson(const JsonReader& r) { return MetaFromJson(r); }

nlohmann::json SpecToJson(const DTensorSpec& spec) {
  return {{"mesh",
           {{"shape", spec.mesh().shape()},
            {"names", spec.mesh().names()},
            {"ranks", spec.mesh().ranks()}}},
          {"placements", ToString(spec.placements())},
          {"shape", spec.shape()},
          {"dtype", ToString(spec.dtype())}};
}

DTensorSpec SpecFromJson(const nlohmann::json& json, const std::string& field,
                         const std::string& path) {
  JsonReader r(json, field, path);
  r.ExpectObject();
  const JsonReader mesh = r.At("mesh");
  mesh.ExpectObject();
  const std::vector<int64_t> mesh_shape = mesh.At("shape").AsInts(1, kMaxMeshRanks, 64);
  std::vector<std::string> names =
      mesh.Has("names") ? mesh.At("names").AsStrings() : std::vector<std::string>{};
  std::vector<int64_t> ranks = mesh.Has("ranks")
                                   ? mesh.At("ranks").AsInts(0, INT64_MAX, kMaxMeshRanks)
                                   : std::vector<int64_t>{};
  const std::vector<int64_t> shape = r.At("shape").AsInts(0, kMaxDim, 64);
  DeviceMesh m = [&] {
    try {
      return DeviceMesh::Create(mesh_shape, names, ranks);
    } catch (const InputError& e) {
      mesh.Fail(e.what());
    }
  }();
  const Placements placements =
      PlacementsOf(r.At("placements"), m.ndim(), static_cast<int64_t>(shape.size()));
  DType dtype = [&] {
    try {
      return ParseDType(r.String("dtype"));
    } catch (const InputError& e) {
      if (e.field() == field) throw;
      r.At("dtype").Fail(e.what());
    }
  }();
  try {
    return DTensorSpec::Create(std::move(m), placements, shape, dtype);
  } catch (const InputError& e) {
    r.Fail(e.what());
  }
}

nlohmann::json ToJson(const TraceMeta& m) {
  nlohmann::json out = m.extra.is_object() ? m.extra : nlohmann::json::object();
  out["tool"] = m.tool;
  out["command"] = m.command;
  out["argv"] = m.argv;
  out["backend"] = m.backend;
  out["world_size"] = m.world_size;
  if (!m.planner.empty()) out["planner"] = m.planner;
  out["data"] = m.data;
  out["format"] = kTraceFormat;
  out["version"] = kTraceVersion;
  return out;
}

nlohmann::json ToJson(const RankState& s) {
  nlohmann::json out = {{"rank", s.rank},
                        {"coordinate", s.coordinate},
                        {"local_shape", s.local_shape},
                        {"global_offset", s.global_offset}};
  if (s.hash) out["hash"] = *s.hash;
  return out;
}

nlohmann::json TraceCollectiveJson(const CollectiveEvent& c) {
  nlohmann::json out = {{"op", std::string(ToString(c.kind))},
                        {"groups", c.groups},
                        {"ranks", c.ranks},
                        {"input_shapes", c.input_shapes},
                        {"output_shapes", c.output_shapes},
                        {"bytes_sent", c.bytes_sent},
                        {"bytes_received", c.bytes_received}};
  if (!c.time_us.empty()) out["time_us"] = c.time_us;
  return out;
}

nlohmann::json ToJson(const TraceStep& step, size_t index, const std::vector<std::string>& labels) {
  nlohmann::json out = ToJson(step.plan, labels);
  out["index"] = index;
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveEvent& c : step.collectives) collectives.push_back(TraceCollectiveJson(c));
  out["collectives"] = std::move(collectives);
  out["placements_after"] = ToString(step.placements_after);
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankState& s : step.ranks_after) ranks.push_back(ToJson(s));
  out["ranks_after"] = std::move(ranks);
  return out;
}

nlohmann::json ToJson(const TraceStep& step) {
  std::vector<std::string> labels(step.plan.mesh_dim + 1);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = std::to_string(i);
  if (!step.mesh_dim_name.empty()) labels[step.plan.mesh_dim] = step.mesh_dim_name;
  return ToJson(step, 0, labels);
}

namespace {
nlohmann::json StateToJson(const TraceState& s) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankState& r : s.ranks) ranks.push_back(ToJson(r));
  return {{"spec", SpecToJson(s.spec)}, {"ranks", std::move(ranks)}};
}
}  // namespace

nlohmann::json ToJson(const Trace& t) {
  nlohmann::json steps = nlohmann::json::array();
  std::vector<std::string> labels;
  for (int64_t m = 0; m < t.initial.spec.mesh().ndim(); ++m)
    labels.push_back(t.initial.spec.mesh().DimLabel(m));
  for (size_t i = 0; i < t.steps.size(); ++i) {
    std::vector<std::string> l = labels;
    const TraceStep& s = t.steps[i];
    if (static_cast<int64_t>(l.size()) <= s.plan.mesh_dim) l.resize(s.plan.mesh_dim + 1);
    if (!s.mesh_dim_name.empty()) l[s.plan.mesh_dim] = s.mesh_dim_name;
    steps.push_back(ToJson(s, i, l));
  }
  nlohmann::json out = {{"format", kTraceFormat},    {"version", kTraceVersion},
                        {"meta", ToJson(t.meta)},    {"initial", StateToJson(t.initial)},
                        {"steps", std::move(steps)}, {"final", StateToJson(t.final_state)}};
  if (t.ok) out["ok"] = *t.ok;
  return out;
}

void CheckTraceHeader(const nlohmann::json& trace) {
  if (!trace.is_object()) {
    throw InputError("trace",
                     StrCat("the file holds no JSON object (it holds ", trace.type_name(), ")"));
  }
  if (!trace.contains("format") || trace["format"] != kTraceFormat) {
    const bool op_trace = trace.contains("format") && trace["format"] == "dtsim-op-trace";
    throw InputError(
        "trace",
        StrCat("format is ", trace.contains("format") ? Excerpt(trace["format"]) : "missing",
               ", expected \"", kTraceFormat, "\"",
               op_trace ? " (an op trace of `dtsim op --trace`: dtsim trace-diff compares two; "
                          "each of its redistributions[k].trace is a dtsim trace)"
                        : ""));
  }
  if (!trace.contains("version") || !trace["version"].is_number_integer()) {
    throw InputError(
        "trace",
        StrCat("version is ", trace.contains("version") ? Excerpt(trace["version"]) : "missing",
               ", expected the integer ", kTraceVersion));
  }
  if (trace["version"] != kTraceVersion) {
    throw InputError("trace",
                     StrCat("version ", Excerpt(trace["version"]),
                            " is not supported (this dtsim reads version ", kTraceVersion, ")"));
  }
  for (const char* key : {"meta", "initial", "steps", "final"}) {
    if (!trace.contains(key)) throw InputError("trace", StrCat("field '", key, "' is missing"));
  }
}

namespace {

// A simulated trace holds exactly the layout its specs give (a real run's may differ: trace-diff
// shows where). Each state's local shape and global offset against spec.LayoutAt(coordinate).
void CheckSimulatedLayout(const internal::JsonNode& states, const std::vector<RankState>& ranks,
                          const DTensorSpec& spec) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankState& s = ranks[i];
    const RankLayout layout = [&] {
      try {
        return spec.LayoutAt(s.coordinate);
      } catch (const InputError& e) {
        states.At(i).Fail(e.what());
      }
    }();
    if (layout.local_shape != s.local_shape || layout.global_offset != s.global_offset) {
      states.At(i).Fail(StrCat(
          "rank ", s.rank, " holds ", IntListToString(s.local_shape), " at ",
          IntListToString(s.global_offset), ", but ", ExcerptText(ToString(spec.placements())),
          " on ", ExcerptText(spec.mesh().ToString()), " gives ",
          IntListToString(layout.local_shape), " at ", IntListToString(layout.global_offset),
          " (a simulated trace holds its layout exactly)"));
    }
  }
}

}  // namespace

namespace {

// CheckTraceHeader on a node: a DOM as it is; text through a stand-in holding only what the header
// check reads (the format, the version, which sections exist), so the messages are the same.
void CheckTraceHeaderOf(const internal::JsonNode& root) {
  if (root.is_dom()) return root.Read([](const JsonReader& r) { CheckTraceHeader(r.json()); });
  nlohmann::json header;
  const std::string_view type = root.TypeName();
  if (type == "object") {
    header = root.ReadWithout({"meta", "initial", "steps", "final"},
                              [](const JsonReader& r) { return r.json(); });
    for (const char* key : {"meta", "initial", "steps", "final"}) {
      if (root.Has(key)) header[key] = nullptr;
    }
  } else if (type == "array") {
    header = nlohmann::json::array();
  } else if (type == "string") {
    header = "";
  } else if (type == "boolean") {
    header = false;
  } else if (type == "number") {
    header = 0;
  }
  CheckTraceHeader(header);
}

// Every state of a trace lists the ranks its initial state lists (all of the mesh for a simulated
// or merged real run; one rank's own in the part a real rank records): none missing, none added.
void CheckSameRanks(const internal::JsonNode& list, const std::vector<RankState>& got,
                    const std::vector<RankState>& want) {
  size_t i = 0, j = 0;
  while (i < got.size() || j < want.size()) {
    if (j == want.size() || (i < got.size() && got[i].rank < want[j].rank)) {
      list.At(i).At("rank").Fail(
          StrCat("rank ", got[i].rank,
                 " is listed here but not in initial.ranks (every state of a trace lists the "
                 "same ranks)"));
    }
    if (i == got.size() || got[i].rank > want[j].rank) {
      list.Fail(StrCat("rank ", want[j].rank,
                       " is missing (initial.ranks lists it; every state of a trace lists the "
                       "same ranks)"));
    }
    ++i;
    ++j;
  }
}

// `p` normalized onto a tensor of `ndim` dims, in canonical form (_S(d,1) is S(d)): how the
// executor compares layouts. `r` names the field when a dim is outside the tensor.
Placement CanonicalAt(const JsonReader& r, const Placement& p, int64_t ndim) {
  try {
    return p.Normalized(ndim, "placements").Canonical();
  } catch (const InputError& e) {
    r.Fail(e.what());
  }
}

Placements CanonicalAt(const JsonReader& r, const Placements& ps, int64_t ndim) {
  Placements out;
  for (const Placement& p : ps) out.push_back(CanonicalAt(r, p, ndim));
  return out;
}

// The plan keys of a step against the mesh, the tensor and the layout `current` the trace is at
// before it (canonical; updated to where the step leads): its times, its per-rank lists (one
// entry per rank of the mesh), its groups (CheckGroupList), and the chain of layouts — the step
// starts where the previous one ended, changes the placement the layout has on its mesh dim with
// the collective that the transition table gives for `from` -> `to`, and leads to
// placements_after.
void CheckPlanStep(const JsonReader& r, const PlanStep& plan, const DTensorSpec& spec, bool first,
                   Placements* current) {
  const DeviceMesh& mesh = spec.mesh();
  if (r.Has("est_us")) CheckMicros(r.At("est_us"), plan.est_us);
  for (const char* key : {"bytes_per_rank", "bytes_received_per_rank", "logical_shape_per_rank",
                          "peak_extra_bytes_per_rank"}) {
    if (!r.Has(key)) continue;
    const size_t n = r.At(key).ArraySize();
    if (n != 0 && static_cast<int64_t>(n) != mesh.size()) {
      r.At(key).Fail(StrCat("has ", n, " entries for the ", mesh.size(), " ranks of ",
                            ExcerptText(mesh.ToString())));
    }
  }
  CheckGroupList(r.At("groups"), plan.groups, mesh, plan.mesh_dim);
  CheckPartition(r.At("groups"), plan.groups, mesh, plan.mesh_dim);
  const Placements before =
      CanonicalAt(r.At("placements_before"), plan.placements_before, spec.ndim());
  if (static_cast<int64_t>(before.size()) != mesh.ndim()) {
    r.At("placements_before")
        .Fail(StrCat(ToString(plan.placements_before), " has ", before.size(),
                     " placements for a mesh of ", mesh.ndim(), " dims"));
  }
  // Not checked against initial.spec for the first step, nor final.spec against the last: a real
  // run's final layout may differ from its steps' (trace-diff shows where), and the viewer diffs
  // traces that hold part of a run (tests/viewer/trace_model_test.cc drops a step). Between steps
  // the chain holds.
  if (first) *current = before;
  if (before != *current) {
    r.At("placements_before")
        .Fail(StrCat(ToString(plan.placements_before), " is not where the previous step ended (",
                     ToString(*current), ")"));
  }
  PlanStep step = plan;
  step.from = CanonicalAt(r.At("from"), plan.from, spec.ndim());
  step.to = CanonicalAt(r.At("to"), plan.to, spec.ndim());
  // Part (1) of the executor's rule (WhyNotExecutable): the step changes the placement the layout
  // has on its mesh dim, with the collective the transition table gives. Part (2), shards read left
  // to right, is not required: a trace may record a plan's steps as planned (the viewer's
  // metadata traces, viewer/tools/meta_trace.h, do).
  if (step.from != (*current)[plan.mesh_dim]) {
    r.At("from").Fail(StrCat("mesh dim ", plan.mesh_dim, " changes ", step.from.ToString(), " -> ",
                             step.to.ToString(), " but the layout has ",
                             (*current)[plan.mesh_dim].ToString(), " there (", ToString(*current),
                             ")"));
  }
  TransitionRule rule;
  try {
    rule = RuleFor(step.from, step.to, mesh.shape()[plan.mesh_dim], plan.mesh_dim);
  } catch (const InputError& e) {
    r.At("to").Fail(StrCat(step.from.ToString(), " -> ", step.to.ToString(),
                           " is no transition a collective runs: ", e.what()));
  }
  if (!(rule == TransitionRule{plan.collective, plan.then_local_split})) {
    r.At("collective")
        .Fail(StrCat(ToString(plan.collective), plan.then_local_split ? "+local_split" : "",
                     " is not what changes ", step.from.ToString(), " -> ", step.to.ToString(),
                     " on mesh dim ", plan.mesh_dim, " (", ToString(rule.collective),
                     rule.then_local_split ? "+local_split" : "", ")"));
  }
  Placements next = *current;
  next[plan.mesh_dim] = step.to;
  const Placements after =
      CanonicalAt(r.At("placements_after"), plan.placements_after, spec.ndim());
  if (after != next) {
    r.At("placements_after")
        .Fail(StrCat(ToString(plan.placements_after), " is not where mesh dim ", plan.mesh_dim,
                     " changing ", step.from.ToString(), " -> ", step.to.ToString(), " leads from ",
                     ToString(*current), " (", ToString(next), ")"));
  }
  *current = std::move(next);
}

// The whole validation of a trace (TraceFromJson's documentation), on a DOM or on checked text:
// the per-rank lists and the collectives are read one element's DOM at a time, a step's other keys
// as one small DOM.
Trace TraceFromNode(const internal::JsonNode& root) {
  CheckTraceHeaderOf(root);
  Trace t;
  t.meta = root.At("meta").Read([](const JsonReader& r) { return MetaFromJson(r); });
  const bool need_hash = t.meta.data;
  t.initial = StateFromNode(root.At("initial"), need_hash);
  t.final_state = StateFromNode(root.At("final"), need_hash);
  const DTensorSpec& spec = t.initial.spec;
  const bool simulated = t.meta.backend == "local";
  if (simulated) {
    CheckSimulatedLayout(root.At("initial").At("ranks"), t.initial.ranks, t.initial.spec);
    CheckSimulatedLayout(root.At("final").At("ranks"), t.final_state.ranks, t.final_state.spec);
  }
  if (t.final_state.spec.shape() != spec.shape() || t.final_state.spec.dtype() != spec.dtype()) {
    root.At("final").At("spec").Fail(StrCat("shape/dtype ", t.final_state.spec.ToString(),
                                            " differ from the initial ", spec.ToString()));
  }
  const DeviceMesh& mesh = spec.mesh();
  if (t.meta.world_size != 0 && t.meta.world_size != mesh.size()) {
    root.At("meta")
        .At("world_size")
        .Fail(StrCat(t.meta.world_size, " ranks, but ", ExcerptText(mesh.ToString()), " has ",
                     mesh.size()));
  }
  CheckSameRanks(root.At("final").At("ranks"), t.final_state.ranks, t.initial.ranks);
  // The layout the steps are at (canonical placements) and the time they have taken.
  Placements current;
  double total_us = 0;
  const internal::JsonNode steps = root.At("steps");
  const size_t n = steps.ArraySize();
  for (size_t i = 0; i < n; ++i) {
    const internal::JsonNode s = steps.At(i);
    s.ExpectObject();
    TraceStep step;
    // The plan step's keys (its per-rank lists included), without the collectives and rank
    // states read below.
    s.ReadWithout({"collectives", "ranks_after"}, [&](const JsonReader& r) {
      step.plan = PlanStepFromJson(r.json(), "trace", r.path(), &step.mesh_dim_name);
      if (r.Has("index") && r.Int("index") != static_cast<int64_t>(i)) {
        r.At("index").Fail(StrCat("is ", r.Int("index"), " at position ", i));
      }
      if (step.plan.mesh_dim >= spec.mesh().ndim()) {
        r.At("mesh_dim").Fail(StrCat(step.plan.mesh_dim, " is outside ", spec.mesh().ToString()));
      }
      CheckPlanStep(r, step.plan, spec, i == 0, &current);
    });
    total_us += step.plan.est_us;
    if (s.Has("collectives")) {
      const internal::JsonNode cs = s.At("collectives");
      const size_t m = cs.ArraySize();
      for (size_t k = 0; k < m; ++k) {
        step.collectives.push_back(cs.At(k).Read([&](const JsonReader& r) {
          CollectiveEvent c = CollectiveFromJson(r);
          CheckGroups(r, c, spec.mesh(), step.plan.mesh_dim);
          return c;
        }));
        const std::vector<double>& times = step.collectives.back().time_us;
        if (!times.empty()) total_us += *std::max_element(times.begin(), times.end());
      }
    }
    // An export lays the steps end to end (a step lasts its est_us, or its collectives' measured
    // times one after the other) in whole nanoseconds of a 64-bit integer: the whole run fits.
    if (!(total_us <= kMaxTraceMicros)) {
      s.Fail(StrCat("the trace's times add up to ", total_us, " us by this step, more than ",
                    kMaxTraceMicros,
                    " us (an export writes whole nanoseconds in 64-bit integers)"));
    }
    step.placements_after = s.At("placements_after").Read([&](const JsonReader& r) {
      return PlacementsOf(r, spec.mesh().ndim(), spec.ndim());
    });
    const DTensorSpec after =
        DTensorSpec::Create(spec.mesh(), step.placements_after, spec.shape(), spec.dtype());
    const internal::JsonNode ranks_after = s.At("ranks_after");
    step.ranks_after = RankStatesFromNode(ranks_after, after, need_hash);
    if (simulated) CheckSimulatedLayout(ranks_after, step.ranks_after, after);
    CheckSameRanks(ranks_after, step.ranks_after, t.initial.ranks);
    t.steps.push_back(std::move(step));
  }
  if (root.Has("ok")) t.ok = root.At("ok").Read([](const JsonReader& r) { return r.AsBool(); });
  return t;
}

}  // namespace

Trace TraceFromJson(const nlohmann::json& json) {
  return TraceFromNode(internal::JsonNode::OfDom(json, "trace"));
}

namespace {

std::string ReadTraceFileText(const std::string& path) {
  if (path.empty()) throw InputError("trace", "the trace path is empty");
  std::string text = ReadInputFile(path, "trace", kMaxTraceFileBytes);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw InputError("trace", StrCat("'", ExcerptText(path), "' is empty"));
  }
  return text;
}

}  // namespace

nlohmann::json ReadTraceJson(const std::string& path) {
  const std::string text = ReadTraceFileText(path);
  const nlohmann::json json = ParseJsonText(text, "trace", StrCat("'", ExcerptText(path), "'"));
  return json;
}

TraceText ReadTraceText(const std::string& path) {
  return TraceTextOf(path, ReadTraceFileText(path));
}

TraceText TraceTextOf(std::string path, std::string text) {
  TraceText out;
  out.format = internal::CheckJsonText(text, "trace", StrCat("'", ExcerptText(path), "'"));
  out.path = std::move(path);
  out.text = std::move(text);
  return out;
}

Trace TraceFromText(const TraceText& text) {
  return WithFileName(
      text.path, [&] { return TraceFromNode(internal::JsonNode::OfText(text.text, "trace")); });
}

nlohmann::json ParseTraceText(const TraceText& text) {
  return ParseJsonText(text.text, "trace", StrCat("'", ExcerptText(text.path), "'"));
}

Trace ReadTrace(const std::string& path) { return TraceFromText(ReadTraceText(path)); }

void WriteFileAtomically(const std::string& path, const std::string& text,
                         const std::string& field) {
  WriteOutputFile(path, text, field);
}

void WriteJsonFileAtomically(const std::string& path, const nlohmann::json& json,
                             const std::string& field) {
  WriteFileAtomically(path, SafeDump(json, 1) + "\n", field);
}

namespace {

std::vector<RankState> MergeStates(const std::vector<const std::vector<RankState>*>& lists,
                                   const std::string& where) {
  std::map<int64_t, RankState> by_rank;
  for (const auto* list : lists) {
    for (const RankState& s : *list) {
      if (!by_rank.emplace(s.rank, s).second) {
        throw InputError("trace",
                         StrCat(where, ": rank ", s.rank, " is reported by more than one part"));
      }
    }
  }
  std::vector<RankState> out;
  for (auto& [rank, s] : by_rank) out.push_back(std::move(s));
  return out;
}

CollectiveEvent MergeCollectives(const std::vector<const CollectiveEvent*>& parts,
                                 const std::string& where) {
  CollectiveEvent out = *parts[0];
  struct Row {
    std::vector<int64_t> in, outs;
    int64_t sent, received;
    std::optional<double> time;
  };
  std::map<int64_t, Row> rows;
  for (const CollectiveEvent* c : parts) {
    if (c->kind != out.kind || c->groups != out.groups) {
      throw InputError(
          "trace",
          StrCat(where, ": the parts ran different collectives (", ToString(out.kind), " on ",
                 IntListToString(out.groups.empty() ? std::vector<int64_t>{} : out.groups[0]),
                 "… vs ", ToString(c->kind), ")"));
    }
    for (size_t i = 0; i < c->ranks.size(); ++i) {
      Row row{c->input_shapes[i], c->output_shapes[i], c->bytes_sent[i], c->bytes_received[i],
              std::nullopt};
      if (i < c->time_us.size()) row.time = c->time_us[i];
      if (!rows.emplace(c->ranks[i], std::move(row)).second) {
        throw InputError(
            "trace", StrCat(where, ": rank ", c->ranks[i], " is reported by more than one part"));
      }
    }
  }
  out.ranks.clear();
  out.input_shapes.clear();
  out.output_shapes.clear();
  out.bytes_sent.clear();
  out.bytes_received.clear();
  out.time_us.clear();
  bool all_timed = true;
  for (const auto& [rank, row] : rows) all_timed = all_timed && row.time.has_value();
  for (auto& [rank, row] : rows) {
    out.ranks.push_back(rank);
    out.input_shapes.push_back(row.in);
    out.output_shapes.push_back(row.outs);
    out.bytes_sent.push_back(row.sent);
    out.bytes_received.push_back(row.received);
    if (all_timed) out.time_us.push_back(*row.time);
  }
  return out;
}

}  // namespace

Trace MergeRankTraces(const std::vector<Trace>& parts) {
  if (parts.empty()) throw InputError("trace", "no traces to merge");
  Trace out = parts[0];
  const size_t steps = parts[0].steps.size();
  for (size_t p = 1; p < parts.size(); ++p) {
    if (parts[p].steps.size() != steps) {
      throw InputError("trace", StrCat("part ", p, " has ", parts[p].steps.size(),
                                       " steps, part 0 has ", steps));
    }
    if (parts[p].initial.spec.ToString() != parts[0].initial.spec.ToString()) {
      throw InputError("trace",
                       StrCat("part ", p, " starts from ", parts[p].initial.spec.ToString(),
                              ", part 0 from ", parts[0].initial.spec.ToString()));
    }
  }
  auto collect = [&](auto get) {
    std::vector<const std::vector<RankState>*> lists;
    for (const Trace& t : parts) lists.push_back(&get(t));
    return lists;
  };
  out.initial.ranks = MergeStates(
      collect([](const Trace& t) -> const auto& { return t.initial.ranks; }), "initial");
  out.final_state.ranks = MergeStates(
      collect([](const Trace& t) -> const auto& { return t.final_state.ranks; }), "final");
  for (size_t s = 0; s < steps; ++s) {
    const std::string where = StrCat("step ", s);
    TraceStep& step = out.steps[s];
    step.ranks_after = MergeStates(
        collect([&](const Trace& t) -> const auto& { return t.steps[s].ranks_after; }), where);
    const size_t n = parts[0].steps[s].collectives.size();
    for (size_t p = 1; p < parts.size(); ++p) {
      if (parts[p].steps[s].collectives.size() != n) {
        throw InputError("trace",
                         StrCat(where, ": part ", p, " ran ", parts[p].steps[s].collectives.size(),
                                " collectives, part 0 ran ", n));
      }
    }
    for (size_t k = 0; k < n; ++k) {
      std::vector<const CollectiveEvent*> cs;
      for (const Trace& t : parts) cs.push_back(&t.steps[s].collectives[k]);
      step.collectives[k] = MergeCollectives(cs, StrCat(where, ", collective ", k));
    }
  }
  for (const Trace& t : parts) {
    if (t.ok && !*t.ok) out.ok = false;
  }
  return out;
}

}  // namespace dtsim
