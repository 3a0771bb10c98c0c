// Model traces (see include/dtsim/trace/model_trace.h).
#include "dtsim/trace/model_trace.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "dtsim/layout/checked_math.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/placement.h"

namespace dtsim {
namespace {

constexpr const char* kPhases[] = {"setup", "forward", "backward", "end"};

// A run's times fit in the Perfetto export's 64-bit nanoseconds with room to spare.
constexpr double kMaxMicros = 1e15;
constexpr int64_t kMaxWorld = int64_t{1} << 24;
constexpr int64_t kMaxBytes = int64_t{1} << 62;

nlohmann::json CollectiveJson(const CollectiveEvent& c) {
  return {{"kind", std::string(ToString(c.kind))},
          {"mesh_dim", c.mesh_dim},
          {"groups", c.groups},
          {"bytes_sent_per_rank", c.max_bytes_sent},
          {"bytes_received_per_rank", c.max_bytes_received},
          {"est_us", c.est_us},
          {"from", c.from},
          {"to", c.to},
          {"cause", c.cause},
          {"implicit", c.implicit}};
}

nlohmann::json TensorJson(const WorldTensor& t) {
  nlohmann::json j = {{"placements", t.placements}, {"shape", t.shape}};
  if (!t.hashes.empty()) j["hashes"] = t.hashes;
  if (!t.sketches.empty()) j["sketches"] = t.sketches;
  return j;
}

double Micros(const JsonReader& r) {
  const double v = r.AsNumber();
  if (!(v >= 0 && v <= kMaxMicros))
    r.Fail(StrCat(Excerpt(r.json()), " is not a time in 0..1e15 us"));
  return v;
}

CollectiveEvent CollectiveFromJson(const JsonReader& r, int64_t world) {
  r.ExpectObject();
  r.OnlyKeys({"kind", "mesh_dim", "groups", "bytes_sent_per_rank", "bytes_received_per_rank",
              "est_us", "from", "to", "cause", "implicit"});
  CollectiveEvent c;
  const JsonReader kind = r.At("kind");
  const std::optional<CollectiveKind> k = FindCollectiveKind(kind.AsString());
  if (!k || *k == CollectiveKind::kNone) {
    kind.Fail(StrCat("unknown collective ", Excerpt(kind.json())));
  }
  c.kind = *k;
  c.mesh_dim = r.String("mesh_dim");
  const JsonReader groups = r.At("groups");
  c.groups = groups.AsIntLists(0, world - 1);
  std::set<int64_t> seen;
  for (const auto& g : c.groups) {
    if (g.empty()) groups.Fail("has an empty group");
    for (int64_t rank : g) {
      if (!seen.insert(rank).second)
        groups.Fail(StrCat("names rank ", rank, " in more than one place"));
    }
  }
  c.max_bytes_sent = r.Int("bytes_sent_per_rank", 0, kMaxBytes);
  c.max_bytes_received = r.Int("bytes_received_per_rank", 0, kMaxBytes);
  c.est_us = Micros(r.At("est_us"));
  c.from = r.String("from");
  c.to = r.String("to");
  c.cause = r.String("cause");
  c.implicit = r.Bool("implicit");
  return c;
}

WorldTensor TensorFromJson(const JsonReader& r, int64_t world, bool data) {
  r.ExpectObject();
  r.OnlyKeys({"placements", "shape", "hashes", "sketches"});
  WorldTensor t;
  t.placements = r.String("placements");
  t.shape = r.At("shape").AsInts(0, kMaxBytes, 64);
  if (r.Has("hashes")) {
    const JsonReader h = r.At("hashes");
    t.hashes = h.AsStrings();
    if (static_cast<int64_t>(t.hashes.size()) != world) {
      h.Fail(StrCat("has ", t.hashes.size(), " entries for ", world, " ranks"));
    }
    for (size_t i = 0; i < t.hashes.size(); ++i) {
      if (!IsShardHash(t.hashes[i])) {
        h.At(i).Fail(StrCat("expected \"xxh3:\" and 16 hex digits, got ", Excerpt(h.At(i).json())));
      }
    }
  } else if (data) {
    r.Fail("has no hashes (required unless meta.data is false)");
  }
  if (r.Has("sketches")) {
    const JsonReader sk = r.At("sketches");
    const size_t n = sk.ArraySize();
    if (static_cast<int64_t>(n) != world)
      sk.Fail(StrCat("has ", n, " entries for ", world, " ranks"));
    for (size_t i = 0; i < n; ++i) {
      const JsonReader one = sk.At(i);
      if (one.ArraySize() != 3) one.Fail("is not 3 numbers");
      std::array<double, 3> v{};
      for (size_t k = 0; k < 3; ++k) {
        v[k] = one.At(k).AsNumber();
        if (!std::isfinite(v[k]) || (k == 2 && v[k] < 0)) {
          one.At(k).Fail(StrCat(Excerpt(one.At(k).json()), " is not a finite",
                                k == 2 ? " non-negative norm" : " number"));
        }
      }
      t.sketches.push_back(v);
    }
  }
  return t;
}

// "[...]": one bracketed list, its brackets closing at its end.
bool OneBracketedList(std::string_view text) {
  if (text.size() < 2 || text.front() != '[') return false;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') ++depth;
    if (text[i] == ']' && --depth == 0) return i + 1 == text.size();
  }
  return false;
}

// An op's placements as one line ("[S(0)], [R] -> [S(0)]", as PlacementsText writes them) into its
// arguments' and results': each side a list of bracketed placements or "none", split at the commas
// outside brackets; a line that does not read back to itself is refused.
void SplitOpPlacements(const JsonReader& r, RunEvent* e) {
  const std::string& text = r.AsString();
  const size_t arrow = text.find(" -> ");
  if (arrow == std::string::npos || text.find(" -> ", arrow + 1) != std::string::npos) {
    r.Fail(StrCat("'", ExcerptText(text), "' is not \"ARGUMENTS -> RESULTS\""));
  }
  auto split = [&](std::string_view side, std::vector<std::string>* out) {
    int depth = 0;
    size_t begin = 0;
    for (size_t i = 0; i <= side.size(); ++i) {
      if (i < side.size() && side[i] == '[') ++depth;
      if (i < side.size() && side[i] == ']') --depth;
      if (depth < 0) break;
      if (i == side.size() || (depth == 0 && side.compare(i, 2, ", ") == 0)) {
        if (i == side.size() && begin == 0 && side.empty()) return true;
        const std::string_view one = side.substr(begin, i - begin);
        if (!OneBracketedList(one) && one != "none") return false;
        out->emplace_back(one);
        begin = i + 2;
        ++i;
      }
    }
    return depth == 0;
  };
  const std::string_view all(text);
  if (!split(all.substr(0, arrow), &e->args) || !split(all.substr(arrow + 4), &e->results) ||
      PlacementsText(*e) != text) {
    r.Fail(StrCat("'", ExcerptText(text),
                  "' is not a list of bracketed placements (or none) on each side of \" -> \""));
  }
}

// A collective runs along a dim of the trace's mesh, in groups of that dim's size.
void CheckAlongMeshDim(const CollectiveEvent& c, const JsonReader& r,
                       const std::vector<int64_t>& mesh_shape,
                       const std::vector<std::string>& mesh_names) {
  const auto dim = std::find(mesh_names.begin(), mesh_names.end(), c.mesh_dim);
  if (dim == mesh_names.end()) {
    std::string known;
    for (const std::string& name : mesh_names) known += (known.empty() ? "" : ", ") + name;
    r.At("mesh_dim")
        .Fail(StrCat("'", ExcerptText(c.mesh_dim), "' is no dim of the mesh (dims: ", known, ")"));
  }
  const int64_t size = mesh_shape[static_cast<size_t>(dim - mesh_names.begin())];
  for (size_t g = 0; g < c.groups.size(); ++g) {
    if (static_cast<int64_t>(c.groups[g].size()) != size) {
      r.At("groups").At(g).Fail(
          StrCat("has ", c.groups[g].size(), " ranks; mesh dim '", c.mesh_dim, "' has ", size));
    }
  }
}

// A tensor's placements ("local": a plain tensor) are at most one per mesh dim (a module on a
// submesh has fewer), each valid for the tensor's rank, without mixed Partial reduce ops.
void CheckPlacements(const WorldTensor& t, const JsonReader& r, size_t mesh_ndim) {
  if (t.placements == "local") return;
  const JsonReader at = r.At("placements");
  std::string why;
  try {
    const Placements list = ParsePlacements(t.placements, "placements");
    if (list.empty() || list.size() > mesh_ndim) {
      why = StrCat("has ", list.size(), " placements for a mesh of ", mesh_ndim, " dims");
    } else {
      for (const Placement& p : list) p.Normalized(static_cast<int64_t>(t.shape.size()));
      CheckNoMixedPartials(list, "placements");
    }
  } catch (const InputError& e) {
    why = e.what();
    if (why.rfind(e.field() + ": ", 0) == 0) why = why.substr(e.field().size() + 2);
  }
  if (!why.empty()) {
    at.Fail(StrCat("'", ExcerptText(t.placements), "' on a ", t.shape.size(), "-d tensor: ", why));
  }
}

// The ranks whose hashes differ, in order.
std::vector<int64_t> DifferingRanks(const WorldTensor& a, const WorldTensor& b) {
  std::vector<int64_t> out;
  const size_t n = std::min(a.hashes.size(), b.hashes.size());
  for (size_t i = 0; i < n; ++i) {
    if (a.hashes[i] != b.hashes[i]) out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

std::string RankList(const std::vector<int64_t>& ranks, size_t max = 16) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < max; ++i) s += StrCat(i == 0 ? "" : ", ", ranks[i]);
  if (ranks.size() > max) s += StrCat(" and ", ranks.size() - max, " more");
  return s;
}

std::string CollectiveText(const CollectiveEvent& c) {
  return StrCat(ToString(c.kind), " on ", c.mesh_dim, " (", c.groups.size(), " groups, ",
                c.max_bytes_sent, " -> ", c.max_bytes_received, " B/rank, ", c.cause, ")");
}

}  // namespace

bool SketchesAgree(const std::array<double, 3>& a, const std::array<double, 3>& b) {
  const double tol = kSketchTolerance * std::max(a[2], b[2]);
  for (size_t k = 0; k < 3; ++k) {
    if (!(std::abs(a[k] - b[k]) <= tol)) return false;
  }
  return true;
}

nlohmann::json ToJson(const ModelTrace& t) {
  nlohmann::json events = nlohmann::json::array();
  for (const RunEvent& e : t.events) {
    nlohmann::json j = {{"event", std::string(ToString(e.kind))}, {"phase", e.pass}};
    if (!e.module.empty()) j["module"] = e.module;
    if (e.kind == RunEvent::Kind::kModuleBegin) j["type"] = e.type;
    if (e.kind == RunEvent::Kind::kParameter || e.kind == RunEvent::Kind::kGradient)
      j["name"] = e.name;
    if (e.kind == RunEvent::Kind::kOp) {
      j["op"] = e.op;
      j["placements"] = PlacementsText(e);
    }
    if (e.kind == RunEvent::Kind::kOp || e.kind == RunEvent::Kind::kCollective) {
      nlohmann::json cs = nlohmann::json::array();
      for (const CollectiveEvent& c : e.collectives) cs.push_back(CollectiveJson(c));
      j["collectives"] = cs;
    }
    if (e.tensor) j["tensor"] = TensorJson(*e.tensor);
    j["t_us"] = e.t_us.value_or(0);
    events.push_back(std::move(j));
  }
  nlohmann::json out = {{"format", kModelTraceFormat},
                        {"version", kModelTraceVersion},
                        {"meta", ToJson(t.meta)},
                        {"model", t.model},
                        {"mesh", {{"shape", t.mesh_shape}, {"names", t.mesh_names}}},
                        {"events", events}};
  if (!t.peak_bytes.empty()) out["peak_bytes"] = t.peak_bytes;
  return out;
}

bool IsModelTrace(const nlohmann::json& json) {
  return json.is_object() && json.contains("format") && json["format"] == kModelTraceFormat;
}

ModelTrace ModelTraceFromJson(const nlohmann::json& json) {
  if (!IsModelTrace(json)) {
    throw InputError(
        "trace",
        StrCat("format is ",
               json.is_object() && json.contains("format") ? Excerpt(json["format"]) : "missing",
               ", expected \"", kModelTraceFormat, "\""));
  }
  JsonReader r(json, "trace");
  r.OnlyKeys({"format", "version", "meta", "model", "mesh", "events", "peak_bytes"});
  const int64_t version = r.Int("version", 0, 1000000);
  if (version != kModelTraceVersion) {
    r.At("version").Fail(StrCat("version ", version, " is not supported (this dtsim reads version ",
                                kModelTraceVersion, ")"));
  }
  ModelTrace t;
  t.meta = TraceMetaFromJson(r.At("meta"));
  const JsonReader model = r.At("model");
  model.ExpectObject();
  t.model = model.json();
  const JsonReader mesh = r.At("mesh");
  mesh.ExpectObject();
  mesh.OnlyKeys({"shape", "names"});
  t.mesh_shape = mesh.At("shape").AsInts(1, kMaxWorld, 16);
  if (t.mesh_shape.empty()) mesh.At("shape").Fail("is empty");
  int64_t world = 1;
  for (int64_t s : t.mesh_shape) {
    const std::optional<int64_t> next = CheckedMul(world, s);
    if (!next || *next > kMaxWorld) {
      mesh.At("shape").Fail(StrCat("has more than ", kMaxWorld, " ranks"));
    }
    world = *next;
  }
  t.mesh_names = mesh.At("names").AsStrings();
  if (t.mesh_names.size() != t.mesh_shape.size()) {
    mesh.At("names").Fail(
        StrCat("has ", t.mesh_names.size(), " names for ", t.mesh_shape.size(), " mesh dims"));
  }
  {
    std::set<std::string> names;
    for (size_t i = 0; i < t.mesh_names.size(); ++i) {
      if (t.mesh_names[i].empty()) mesh.At("names").At(i).Fail("is empty");
      if (!names.insert(t.mesh_names[i]).second) {
        mesh.At("names").At(i).Fail(
            StrCat("'", ExcerptText(t.mesh_names[i]), "' names two mesh dims"));
      }
    }
  }
  // The model's sizes that the run reads (a Llama of `dtsim model`, LlamaArgs): whole numbers of
  // at least 1 (ffn: 0 stands for 4 x dim).
  for (const char* key : {"dim", "heads", "layers", "vocab", "seq", "batch", "ffn"}) {
    if (!model.Has(key)) continue;
    const JsonReader v = model.At(key);
    const int64_t least = std::string_view(key) == "ffn" ? 0 : 1;
    if (!v.json().is_number_integer() || v.json().get<int64_t>() < least) {
      v.Fail(StrCat(Excerpt(v.json()), " is not a whole number of at least ", least));
    }
  }
  if (t.meta.world_size != world) {
    r.At("meta")
        .At("world_size")
        .Fail(StrCat(t.meta.world_size, " is not the mesh's ", world, " ranks"));
  }
  if (r.Has("peak_bytes")) {
    const JsonReader peaks = r.At("peak_bytes");
    t.peak_bytes = peaks.AsInts(0, kMaxBytes);
    if (static_cast<int64_t>(t.peak_bytes.size()) != world) {
      peaks.Fail(StrCat("has ", t.peak_bytes.size(), " entries for ", world, " ranks"));
    }
  }
  const JsonReader events = r.At("events");
  const size_t n = events.ArraySize();
  std::vector<std::string> open;  // modules whose forward has begun and not ended
  t.events.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const JsonReader item = events.At(i);
    item.ExpectObject();
    item.OnlyKeys({"event", "phase", "module", "type", "name", "op", "placements", "collectives",
                   "tensor", "t_us"});
    RunEvent e;
    const JsonReader kind = item.At("event");
    const std::string& kind_name = kind.AsString();
    const std::optional<RunEvent::Kind> k = FindRunEventKind(kind_name);
    if (!k) kind.Fail(StrCat("unknown event ", Excerpt(kind.json())));
    e.kind = *k;
    const JsonReader phase = item.At("phase");
    e.pass = phase.AsString();
    if (std::find(std::begin(kPhases), std::end(kPhases), e.pass) == std::end(kPhases)) {
      phase.Fail(StrCat(Excerpt(phase.json()), " is not setup, forward, backward or end"));
    }
    e.t_us = Micros(item.At("t_us"));
    const bool needs_module =
        e.kind == RunEvent::Kind::kModuleBegin || e.kind == RunEvent::Kind::kModuleEnd ||
        e.kind == RunEvent::Kind::kBackwardBegin || e.kind == RunEvent::Kind::kOp ||
        e.kind == RunEvent::Kind::kCollective;
    if (needs_module) e.module = item.String("module");
    if (e.kind == RunEvent::Kind::kModuleBegin) e.type = item.String("type");
    if (e.kind == RunEvent::Kind::kParameter || e.kind == RunEvent::Kind::kGradient)
      e.name = item.String("name");
    if (e.kind == RunEvent::Kind::kOp) {
      e.op = item.String("op");
      SplitOpPlacements(item.At("placements"), &e);
    }
    if (e.kind == RunEvent::Kind::kOp || e.kind == RunEvent::Kind::kCollective) {
      const JsonReader cs = item.At("collectives");
      const size_t m = cs.ArraySize();
      for (size_t c = 0; c < m; ++c) {
        e.collectives.push_back(CollectiveFromJson(cs.At(c), world));
        CheckAlongMeshDim(e.collectives.back(), cs.At(c), t.mesh_shape, t.mesh_names);
      }
      if (e.kind == RunEvent::Kind::kCollective && e.collectives.size() != 1) {
        cs.Fail(StrCat("has ", e.collectives.size(), " entries; a collective event has one"));
      }
    }
    const bool needs_tensor =
        e.kind == RunEvent::Kind::kParameter || e.kind == RunEvent::Kind::kModuleBegin ||
        e.kind == RunEvent::Kind::kModuleEnd || e.kind == RunEvent::Kind::kBackwardBegin ||
        e.kind == RunEvent::Kind::kLoss || e.kind == RunEvent::Kind::kGradient;
    if (needs_tensor) {
      e.tensor = TensorFromJson(item.At("tensor"), world, t.meta.data);
      CheckPlacements(*e.tensor, item.At("tensor"), t.mesh_shape.size());
    }
    // Forward module calls nest: an end closes the innermost open begin.
    if (e.kind == RunEvent::Kind::kModuleBegin) open.push_back(e.module);
    if (e.kind == RunEvent::Kind::kModuleEnd) {
      if (open.empty() || open.back() != e.module) {
        item.At("module").Fail(
            StrCat("ends ", Excerpt(item.At("module").json()), " while ",
                   open.empty() ? std::string("no module") : "'" + open.back() + "'",
                   " is the innermost open module"));
      }
      open.pop_back();
    }
    t.events.push_back(std::move(e));
  }
  if (!open.empty()) events.Fail(StrCat("module '", open.back(), "' begins and never ends"));
  return t;
}

std::vector<TraceDifference> DiffModelTraces(const ModelTrace& a, const ModelTrace& b, size_t limit,
                                             int64_t* rounded) {
  if (rounded != nullptr) *rounded = 0;
  std::vector<TraceDifference> out;
  int64_t event = -1;  // the event being compared
  auto add = [&](std::string where, std::string what, std::vector<int64_t> ranks = {}) {
    if (out.size() >= limit) return;
    TraceDifference d;
    d.event = event;
    d.where = std::move(where);
    d.what = std::move(what);
    d.ranks = std::move(ranks);
    out.push_back(std::move(d));
  };
  if (a.model != b.model) add("model", StrCat(a.model.dump(), " vs ", b.model.dump()));
  if (a.mesh_shape != b.mesh_shape || a.mesh_names != b.mesh_names) {
    add("mesh", "the meshes differ");
    return out;
  }
  const size_t n = std::min(a.events.size(), b.events.size());
  std::string last_collective;  // the collective that ran last before an event, for the reader
  for (size_t i = 0; i < n && out.size() < limit; ++i) {
    const RunEvent& x = a.events[i];
    const RunEvent& y = b.events[i];
    event = static_cast<int64_t>(i);
    const std::string where = StrCat("event ", i + 1, ": ", EventLabel(x));
    const std::string after =
        last_collective.empty()
            ? ""
            : StrCat("; the last collective before it: event ", last_collective);
    if (!x.collectives.empty()) {
      const CollectiveEvent& c = x.collectives.back();
      last_collective =
          StrCat(i + 1, ", ", ToString(c.kind), " on ", c.mesh_dim, " (", c.cause, ")");
    }
    if (x.kind != y.kind || x.pass != y.pass || x.module != y.module || x.op != y.op ||
        x.name != y.name || x.type != y.type) {
      add(where, StrCat("the other trace has ", EventLabel(y),
                        " here; the runs part and the rest is "
                        "not compared"));
      return out;
    }
    if (x.args != y.args || x.results != y.results) {
      add(where, StrCat("placements ", PlacementsText(x), " vs ", PlacementsText(y)));
    }
    if (x.collectives.size() != y.collectives.size()) {
      add(where, StrCat(x.collectives.size(), " vs ", y.collectives.size(), " collectives"));
    } else {
      for (size_t c = 0; c < x.collectives.size(); ++c) {
        const CollectiveEvent& p = x.collectives[c];
        const CollectiveEvent& q = y.collectives[c];
        if (p.kind != q.kind || p.mesh_dim != q.mesh_dim || p.groups != q.groups ||
            p.max_bytes_sent != q.max_bytes_sent || p.max_bytes_received != q.max_bytes_received ||
            p.from != q.from || p.to != q.to || p.cause != q.cause || p.implicit != q.implicit) {
          add(StrCat(where, ", collective ", c + 1),
              StrCat(CollectiveText(p), " vs ", CollectiveText(q)));
        }
      }
    }
    if (x.tensor.has_value() != y.tensor.has_value()) {
      add(where, "a tensor in one trace only");
    } else if (x.tensor) {
      if (x.tensor->placements != y.tensor->placements) {
        add(where, StrCat("placements ", x.tensor->placements, " vs ", y.tensor->placements));
      }
      if (x.tensor->shape != y.tensor->shape) add(where, "the shapes differ");
      if (!x.tensor->hashes.empty() && !y.tensor->hashes.empty()) {
        // Ranks whose hashes differ: equal within rounding where both sketches agree.
        std::vector<int64_t> ranks;
        bool any_rounded = false;
        double worst = 0;
        for (int64_t r : DifferingRanks(*x.tensor, *y.tensor)) {
          const size_t i = static_cast<size_t>(r);
          if (i < x.tensor->sketches.size() && i < y.tensor->sketches.size()) {
            const auto& p = x.tensor->sketches[i];
            const auto& q = y.tensor->sketches[i];
            if (SketchesAgree(p, q)) {
              any_rounded = true;
              continue;
            }
            const double scale = std::max({p[2], q[2], 1e-300});
            for (size_t k = 0; k < 3; ++k) worst = std::max(worst, std::abs(p[k] - q[k]) / scale);
          }
          ranks.push_back(r);
        }
        if (any_rounded && rounded != nullptr) ++*rounded;
        if (!ranks.empty()) {
          const size_t r = static_cast<size_t>(ranks[0]);
          add(where,
              StrCat("values differ on rank", ranks.size() == 1 ? " " : "s ", RankList(ranks),
                     " (rank ", ranks[0], ": ", x.tensor->hashes[r], " vs ", y.tensor->hashes[r],
                     worst > 0 ? StrCat(", sketch off by ", worst, " of the norm") : "", ")",
                     out.empty() ? after : ""),
              ranks);
        }
      }
    }
  }
  event = -1;
  if (a.events.size() != b.events.size()) {
    add("events", StrCat(a.events.size(), " vs ", b.events.size(), " events"));
  }
  return out;
}

namespace {

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string BytesText(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : (v < 100 ? "%.1f %s" : "%.0f %s"), v,
                  units[u]);
  }
  return buf;
}

std::string ShortName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "AG";
    case CollectiveKind::kReduceScatter:
      return "RS";
    case CollectiveKind::kAllReduce:
      return "AR";
    case CollectiveKind::kAllToAll:
      return "A2A";
    default:
      return std::string(ToString(kind));
  }
}

void CommCounts::Add(const CollectiveEvent& c) {
  ++by_kind[static_cast<size_t>(c.kind)];
  ++count;
  bytes += c.max_bytes_sent;
  est_us += c.est_us;
}

void CommCounts::Add(const CommCounts& o) {
  for (size_t k = 0; k < kKinds; ++k) by_kind[k] += o.by_kind[k];
  count += o.count;
  bytes += o.bytes;
  est_us += o.est_us;
}

std::string CommCounts::Text(bool short_names) const {
  if (count == 0) return "none";
  // Kinds in the order `dtsim model` prints them (alphabetical names).
  std::vector<std::pair<std::string, int64_t>> kinds;
  for (size_t k = 0; k < kKinds; ++k) {
    if (by_kind[k] == 0) continue;
    const auto kind = static_cast<CollectiveKind>(k);
    kinds.emplace_back(short_names ? ShortName(kind) : std::string(ToString(kind)), by_kind[k]);
  }
  std::sort(kinds.begin(), kinds.end());
  std::string out;
  for (size_t i = 0; i < kinds.size(); ++i)
    out += StrCat(i ? ", " : "", kinds[i].first, " ", kinds[i].second);
  if (short_names) return StrCat(out, " | ", BytesText(bytes));
  return StrCat(out, " | ", BytesText(bytes), "/rank, ", Fixed(est_us, 1), " us");
}

}  // namespace dtsim
