#include "dtsim/trace/recording.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/files.h"
#include "json_text.h"

namespace dtsim {
namespace {

constexpr const char* kField = "recording";
constexpr size_t kMaxRedistributions = size_t{1} << 24;
constexpr size_t kMaxCollectives = 4096;
constexpr size_t kMaxRunCollectives = size_t{1} << 24;  // a recording's run-wide "collectives"
constexpr size_t kMaxMemorySamples = size_t{1} << 24;   // a rank's module boundaries

std::vector<std::string> SubmeshDims(const JsonReader& spec) {
  return spec.Has("submesh") ? spec.At("submesh").AsStrings() : std::vector<std::string>{};
}

// A SPEC, or one on a submesh: then "mesh" is the root mesh and "submesh" names the root's dims the
// placements apply to (a DTensor on mesh["tp"]), and the spec's mesh is the family of those
// submeshes (dtensor.h), cut at the root's first rank. `root` gets the spec on the root mesh with
// every placement Replicate (what rank states are checked against); the spec itself otherwise.
DTensorSpec RecordedSpecFromJson(const JsonReader& r, DTensorSpec* root) {
  if (!r.Has("submesh")) {
    DTensorSpec spec = SpecFromJson(r.json(), kField, r.path());
    *root = spec;
    return spec;
  }
  r.ExpectObject();
  const std::vector<std::string> dims = r.At("submesh").AsStrings();
  nlohmann::json root_json = r.json();
  root_json.erase("submesh");
  const size_t root_ndim = r.At("mesh").At("shape").ArraySize(64);
  std::string all_replicate;
  for (size_t i = 0; i < root_ndim; ++i) all_replicate += i ? ",R" : "R";
  root_json["placements"] = all_replicate;
  *root = SpecFromJson(root_json, kField, r.path());
  const DeviceMesh& mesh = root->mesh();
  const DeviceMesh family = [&] {
    try {
      return mesh.Submesh(dims, mesh.ranks().front());
    } catch (const InputError& e) {
      r.At("submesh").Fail(e.what());
    }
  }();
  Placements placements;
  try {
    placements = ParsePlacements(r.String("placements"));
    if (static_cast<int64_t>(placements.size()) != family.ndim()) {
      r.At("placements")
          .Fail(StrCat(r.String("placements"), " has ", placements.size(),
                       " placements for a submesh of ", family.ndim(), " dims"));
    }
    for (Placement& p : placements) p = p.Normalized(root->ndim());
    return DTensorSpec::Create(family, placements, root->shape(), root->dtype());
  } catch (const InputError& e) {
    if (e.field() == kField) throw;
    r.At("placements").Fail(e.what());
  }
}

std::vector<double> TimesFromJson(const JsonReader& r, const std::vector<RankState>& ranks) {
  r.ExpectObject();
  // One time per rank of the redistribution's mesh, keyed by that rank: no other key (a set of the
  // keys, so that reading stays linear in ranks).
  std::unordered_set<std::string> keys;
  keys.reserve(ranks.size());
  for (const RankState& s : ranks) keys.insert(std::to_string(s.rank));
  for (const auto& item : r.json().items()) {
    const std::string& key = item.key();
    if (keys.count(key) == 0) {
      r.Fail(StrCat("has a time for '", ExcerptText(key),
                    "', which is no rank of the redistribution's mesh"));
    }
  }
  std::vector<double> out;
  for (const RankState& s : ranks) {
    const std::string key = std::to_string(s.rank);
    if (!r.Has(key.c_str())) {
      out.push_back(0);
      continue;
    }
    const double t = r.At(key.c_str()).AsNumber();
    if (!(t >= 0) || t > 1e15) r.At(key.c_str()).Fail("expected a finite time >= 0 (microseconds)");
    out.push_back(t);
  }
  return out;
}

CollectiveEvent CollectiveFromJson(const JsonReader& r, const DeviceMesh& mesh) {
  r.ExpectObject();
  CollectiveEvent c;
  const std::string& op = r.String("op");
  const std::optional<CollectiveKind> kind = FindCollectiveKind(op);
  if (!kind) r.At("op").Fail(StrCat("unknown collective '", ExcerptText(op), "'"));
  c.kind = *kind;
  const int64_t max_rank = kMaxMeshRanks * 64;
  c.groups = r.At("groups").AsIntLists(0, max_rank);
  for (size_t g = 0; g < c.groups.size(); ++g) {
    for (int64_t rank : c.groups[g]) {
      if (!mesh.FindCoordinate(rank)) {
        r.At("groups").At(g).Fail(StrCat("rank ", rank, " is not in ", mesh.ToString()));
      }
    }
  }
  // A rank takes part in one group of a collective, once. (Not every rank's group is listed: under
  // LocalTensorMode one process sees every rank, and the recorder lists the groups it was given.)
  std::vector<int64_t> members;
  for (const std::vector<int64_t>& g : c.groups) members.insert(members.end(), g.begin(), g.end());
  std::sort(members.begin(), members.end());
  const auto twice = std::adjacent_find(members.begin(), members.end());
  if (twice != members.end()) {
    r.At("groups").Fail(StrCat("rank ", *twice, " is listed twice; a rank is in one group, once"));
  }
  c.ranks = r.Ints("ranks", 0, max_rank);
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    if (!mesh.FindCoordinate(c.ranks[i]))
      r.At("ranks").Fail(StrCat("rank ", c.ranks[i], " is not in ", mesh.ToString()));
    if (i > 0 && c.ranks[i] <= c.ranks[i - 1])
      r.At("ranks").Fail("ranks must be listed once each, ascending");
  }
  const size_t n = c.ranks.size();
  auto per_rank_ints = [&](const char* key) {
    std::vector<int64_t> v = r.Ints(key, 0);
    if (v.size() != n) r.At(key).Fail(StrCat("has ", v.size(), " entries for ", n, " ranks"));
    return v;
  };
  auto per_rank_shapes = [&](const char* key, std::vector<size_t>* unshaped) {
    const JsonReader list = r.At(key);
    const size_t m = list.ArraySize();
    if (m != n) list.Fail(StrCat("has ", m, " entries for ", n, " ranks"));
    std::vector<std::vector<int64_t>> out;
    for (size_t i = 0; i < m; ++i) {
      if (list.At(i).json().is_null()) {
        out.emplace_back();
        unshaped->push_back(i);
      } else {
        out.push_back(list.At(i).AsInts(0, int64_t{1} << 62, 64));
      }
    }
    return out;
  };
  c.input_shapes = per_rank_shapes("input_shapes", &c.unshaped_inputs);
  c.output_shapes = per_rank_shapes("output_shapes", &c.unshaped_outputs);
  c.input_bytes = per_rank_ints("input_bytes");
  c.output_bytes = per_rank_ints("output_bytes");
  // A rank's bytes are its tensor's elements times an element size (1 to 16 bytes; several
  // tensors are listed as their bytes, an element of 1 byte each).
  auto check_bytes = [&](const char* shapes_key, const std::vector<std::vector<int64_t>>& shapes,
                         const char* bytes_key, const std::vector<int64_t>& bytes) {
    for (size_t i = 0; i < n; ++i) {
      if (r.At(shapes_key).At(i).json().is_null()) continue;
      long double numel = 1;
      for (int64_t d : shapes[i]) numel *= static_cast<long double>(d);
      bool fits = false;
      for (int item : {1, 2, 4, 8, 16}) fits |= numel * item == static_cast<long double>(bytes[i]);
      if (!fits) {
        r.At(bytes_key).At(i).Fail(StrCat(bytes[i], " bytes cannot hold ",
                                          IntListToString(shapes[i]), " (",
                                          static_cast<double>(numel), " elements)"));
      }
    }
  };
  check_bytes("input_shapes", c.input_shapes, "input_bytes", c.input_bytes);
  check_bytes("output_shapes", c.output_shapes, "output_bytes", c.output_bytes);
  auto per_rank_hashes = [&](const char* key) {
    std::vector<std::string> out;
    if (!r.Has(key)) return out;
    const JsonReader list = r.At(key);
    const size_t m = list.ArraySize();
    if (m != n) list.Fail(StrCat("has ", m, " entries for ", n, " ranks"));
    for (size_t i = 0; i < m; ++i) {
      out.push_back(list.At(i).AsString());
      if (!IsShardHash(out.back())) {
        list.At(i).Fail(
            StrCat("expected \"xxh3:\" and 16 hex digits, got ", Excerpt(list.At(i).json())));
      }
    }
    return out;
  };
  c.input_hashes = per_rank_hashes("input_hashes");
  c.output_hashes = per_rank_hashes("output_hashes");
  return c;
}

// Where each rank's shard of `states` lies in the data file (r[key]: null, or one entry per rank).
std::optional<std::vector<RecordedData>> DataFromJson(const JsonReader& r, const char* key,
                                                      const std::vector<RankState>& states,
                                                      DType dtype,
                                                      std::optional<int64_t> data_file_bytes) {
  if (r.At(key).json().is_null()) return std::nullopt;
  const JsonReader d = r.At(key);
  const size_t n = d.ArraySize(states.size());
  if (n != states.size()) d.Fail(StrCat("has ", n, " entries for ", states.size(), " ranks"));
  std::vector<RecordedData> data;
  for (size_t i = 0; i < n; ++i) {
    const JsonReader e = d.At(i);
    e.ExpectObject();
    RecordedData x{e.Int("rank", 0), e.Int("offset", 0), e.Int("nbytes", 0)};
    if (x.rank != states[i].rank) {
      e.At("rank").Fail(StrCat("is ", x.rank, "; expected rank ", states[i].rank,
                               " (ranks ascending, as the states)"));
    }
    int64_t numel = 1;
    for (int64_t s : states[i].local_shape) numel *= s;
    if (x.nbytes != numel * ItemSize(dtype)) {
      e.At("nbytes").Fail(StrCat(x.nbytes, " bytes, but rank ", x.rank, "'s shard ",
                                 IntListToString(states[i].local_shape), " of ", ToString(dtype),
                                 " has ", numel * ItemSize(dtype)));
    }
    if (data_file_bytes && x.offset > *data_file_bytes - x.nbytes) {
      // No end offset is computed: offset + nbytes may not fit int64 (an offset near 2^63).
      e.Fail(StrCat(x.nbytes, " bytes from offset ", x.offset,
                    " lie beyond the end of the data file (", *data_file_bytes, " bytes)"));
    }
    data.push_back(x);
  }
  return data;
}

// A recording's rank states: as RankStatesFromJson reads them with hashes required, except that
// a state the recorder could not hash says so — {"hash": null, "unavailable": "<why>"} — and is
// read without a hash, its rank and reason put in `unavailable`.
std::vector<RankState> RecordedStatesFromJson(const JsonReader& r, const DTensorSpec& spec,
                                              std::map<int64_t, std::string>* unavailable) {
  nlohmann::json states = r.json();
  std::vector<size_t> marked;
  if (states.is_array()) {
    for (size_t i = 0; i < states.size(); ++i) {
      nlohmann::json& st = states[i];
      if (!st.is_object() || !st.contains("unavailable")) continue;
      const JsonReader why = r.At(i).At("unavailable");
      if (!why.json().is_string() || why.json().get<std::string>().empty()) {
        why.Fail(StrCat("expected the reason the hash is unavailable, got ", Excerpt(why.json())));
      }
      if (!st.contains("hash") || !st["hash"].is_null()) {
        r.At(i).Fail("a state marked unavailable has \"hash\": null");
      }
      st.erase("hash");
      st.erase("unavailable");
      marked.push_back(i);
    }
  }
  const JsonReader copy(states, r.field(), r.path());
  std::vector<RankState> out = RankStatesFromJson(copy, spec, false);
  for (size_t i = 0; i < out.size(); ++i) {
    const bool is_marked = std::binary_search(marked.begin(), marked.end(), i);
    if (is_marked) {
      (*unavailable)[out[i].rank] = r.At(i).At("unavailable").json().get<std::string>();
    } else if (!out[i].hash) {
      r.At(i).Fail(
          "has no hash (every state of a recording has one, or says why it is unavailable)");
    }
  }
  return out;
}

// Each state's local shape is the one its spec gives its rank: on a submesh, the rank's own
// submesh (its coordinate on `submesh_dims` of the root). _StridedShard placements are left out:
// upstream's local shapes of uneven ones follow its own split, which replay compares instead.
void CheckLocalShapes(const JsonReader& list, const std::vector<RankState>& states,
                      const DTensorSpec& spec, const DeviceMesh& root,
                      const std::vector<std::string>& submesh_dims) {
  for (const Placement& p : spec.placements())
    if (p.is_strided_shard()) return;
  std::vector<size_t> dims;  // the root dims of the submesh, in its order
  for (const std::string& name : submesh_dims) {
    const auto& names = root.names();
    dims.push_back(
        static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin()));
  }
  std::vector<int64_t> coordinate;
  for (size_t i = 0; i < states.size(); ++i) {
    const std::vector<int64_t> at_root = root.GetCoordinate(states[i].rank);
    if (dims.empty()) {
      coordinate = at_root;
    } else {
      coordinate.clear();
      for (size_t d : dims) coordinate.push_back(at_root.at(d));
    }
    const std::vector<int64_t> expected =
        LocalShapeAt(spec.shape(), spec.mesh().shape(), coordinate, spec.placements());
    if (states[i].local_shape != expected) {
      list.At(i)
          .At("local_shape")
          .Fail(StrCat(IntListToString(states[i].local_shape), ", but ", spec.ToString(),
                       " gives rank ", states[i].rank, " the local shape ",
                       IntListToString(expected)));
    }
  }
}

RedistributionEvent RedistributionFromJson(const JsonReader& r, size_t index,
                                           std::optional<int64_t> data_file_bytes) {
  r.ExpectObject();
  RedistributionEvent out;
  out.index = r.Int("index", 0);
  if (out.index != static_cast<int64_t>(index))
    r.At("index").Fail(StrCat("is ", out.index, " at position ", index));
  out.call = r.String("call");
  if (out.call != "redistribute" && out.call != "full_tensor" && out.call != "implicit" &&
      out.call != "backward") {
    r.At("call").Fail(StrCat("expected redistribute, full_tensor, implicit or backward, got '",
                             ExcerptText(out.call), "'"));
  }
  if (!r.At("op").json().is_null()) out.op = r.String("op");
  if (!r.At("arg").json().is_null()) out.arg = r.Int("arg", 0, 1 << 20);
  // The redistribution's trace: its source and the states before, its target and the states after.
  DTensorSpec& src = out.trace.initial.spec;
  DTensorSpec& dst = out.trace.final_state.spec;
  std::vector<RankState>& before = out.trace.initial.ranks;
  std::vector<RankState>& after = out.trace.final_state.ranks;
  DTensorSpec src_root = src, dst_root = dst;
  src = RecordedSpecFromJson(r.At("src"), &src_root);
  dst = RecordedSpecFromJson(r.At("dst"), &dst_root);
  out.submesh_dims = SubmeshDims(r.At("src"));
  if (SubmeshDims(r.At("dst")) != out.submesh_dims)
    r.At("dst").At("mesh").Fail("is on another submesh than src");
  if (src.mesh() != dst.mesh() || src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
    r.At("dst").Fail(
        StrCat(dst.ToString(), " has another mesh, shape or dtype than src ", src.ToString()));
  }
  // On a submesh every rank of the root takes part (each in its own submesh): states are checked
  // against the root mesh, local shapes against each rank's own submesh by replay.
  const size_t world = static_cast<size_t>(src_root.mesh().size());
  before = RecordedStatesFromJson(r.At("ranks_before"), src_root, &out.unavailable_before);
  after = RecordedStatesFromJson(r.At("ranks_after"), dst_root, &out.unavailable_after);
  if (before.size() != world)
    r.At("ranks_before").Fail(StrCat("has ", before.size(), " ranks; the mesh has ", world));
  if (after.size() != world)
    r.At("ranks_after").Fail(StrCat("has ", after.size(), " ranks; the mesh has ", world));
  CheckLocalShapes(r.At("ranks_before"), before, src, src_root.mesh(), out.submesh_dims);
  CheckLocalShapes(r.At("ranks_after"), after, dst, dst_root.mesh(), out.submesh_dims);
  out.time_us = TimesFromJson(r.At("time_us"), before);
  if (r.Has("start_us")) out.start_us = TimesFromJson(r.At("start_us"), before);
  const JsonReader cs = r.At("collectives");
  const size_t nc = cs.ArraySize(kMaxCollectives);
  for (size_t i = 0; i < nc; ++i)
    out.collectives.push_back(CollectiveFromJson(cs.At(i), src_root.mesh()));
  out.data = DataFromJson(r, "data", before, src.dtype(), data_file_bytes);
  if (r.Has("data_after")) {
    out.data_after = DataFromJson(r, "data_after", after, dst.dtype(), data_file_bytes);
  }
  return out;
}

}  // namespace

std::vector<ReplicaMismatch> ReplicaMismatches(const RedistributionEvent& r,
                                               const std::set<std::pair<bool, int64_t>>& skip) {
  std::vector<ReplicaMismatch> out;
  for (const auto* pass : {&r.trace.initial.ranks, &r.trace.final_state.ranks}) {
    const bool before = pass == &r.trace.initial.ranks;
    const DTensorSpec& spec = before ? r.src() : r.dst();
    bool any_replicate = false;
    for (const Placement& p : spec.placements()) any_replicate |= p.is_replicate();
    if (!any_replicate) continue;
    // (the rank's (sub)mesh, its coordinate with Replicate dims masked) -> (hash -> ranks)
    std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>,
             std::map<std::string, std::vector<int64_t>>>
        sets;
    for (const RankState& st : *pass) {
      if (!st.hash || skip.count({before, st.rank})) continue;
      // The rank's (sub)mesh, named by its smallest rank (a family's submeshes are disjoint); on a
      // root mesh every rank shares it, and nothing per rank is copied (linear in ranks).
      std::vector<int64_t> coordinate;
      std::vector<int64_t> which;
      if (r.submesh_dims.empty()) {
        coordinate = spec.mesh().GetCoordinate(st.rank);
      } else {
        const DeviceMesh mesh = spec.mesh().root().Submesh(r.submesh_dims, st.rank);
        coordinate = mesh.GetCoordinate(st.rank);
        which.push_back(*std::min_element(mesh.ranks().begin(), mesh.ranks().end()));
      }
      for (size_t m = 0; m < coordinate.size(); ++m) {
        if (spec.placements()[m].is_replicate()) coordinate[m] = -1;
      }
      sets[{std::move(which), std::move(coordinate)}][*st.hash].push_back(st.rank);
    }
    for (const auto& entry : sets) {
      const auto& by_hash = entry.second;
      if (by_hash.size() < 2) continue;
      const auto majority = std::max_element(
          by_hash.begin(), by_hash.end(),
          [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
      for (const auto& [hash, ranks] : by_hash) {
        if (&hash == &majority->first) continue;
        for (const int64_t rank : ranks)
          out.push_back({before, rank, hash, majority->second, majority->first});
      }
    }
  }
  return out;
}

bool IsRecording(const nlohmann::json& json) {
  return json.is_object() && json.contains("format") && json["format"] == kRecordingFormat;
}

namespace {
Recording RecordingWithoutEvents(const nlohmann::json& json,
                                 std::optional<int64_t> data_file_bytes);
void CheckEventMeshes(const Recording& rec);
// Rank `rank`'s events' meshes: each a mesh of `meshes` that holds the rank, with as many dims as
// the op's placements.
void CheckRankEventMeshes(int64_t rank, const std::vector<RunEvent>& list,
                          const std::vector<DeviceMesh>& meshes);
}  // namespace

Recording RecordingFromJson(const nlohmann::json& json, std::optional<int64_t> data_file_bytes) {
  Recording out = RecordingWithoutEvents(json, data_file_bytes);
  const JsonReader r(json, kField);
  if (r.Has("events")) out.events = RunEventsFromJson(r.At("events"), out.world_size);
  CheckEventMeshes(out);
  return out;
}

Recording RecordingFromText(const TraceText& text, std::optional<int64_t> data_file_bytes) {
  return RecordingReader(text, data_file_bytes).ReadAll();
}

RecordingReader::RecordingReader(const TraceText& text, std::optional<int64_t> data_file_bytes)
    : path_(text.path) {
  WithFileName(path_, [&] {
    const internal::JsonNode root = internal::JsonNode::OfText(text.text, kField);
    rec_ = root.ReadWithout({"events"}, [&](const JsonReader& r) {
      return RecordingWithoutEvents(r.json(), data_file_bytes);
    });
    if (root.Has("events")) events_ = std::make_shared<internal::JsonNode>(root.At("events"));
  });
}

std::vector<int64_t> RecordingReader::EventRanks() const {
  DTSIM_CHECK(events_ != nullptr, "RecordingReader::EventRanks without events");
  return WithFileName(path_, [&] {
    events_->ExpectObject();
    std::vector<int64_t> ranks;
    for (const std::string& key : events_->Keys()) {
      const int64_t rank = internal::RankOfKey(key, rec_.world_size);
      if (rank < 0) events_->Fail(StrCat("has events for '", ExcerptText(key), "'"));
      ranks.push_back(rank);
    }
    std::sort(ranks.begin(), ranks.end());
    if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end())
      events_->Fail("has one rank's events twice");
    return ranks;
  });
}

std::vector<RunEvent> RecordingReader::RankEvents(int64_t rank) const {
  return WithFileName(path_, [&] {
    const std::string key = std::to_string(rank);
    std::vector<RunEvent> events =
        RankEventsFromNode(events_->At(key.c_str()), rank, rec_.world_size);
    CheckRankEventMeshes(rank, events, rec_.meshes);
    return events;
  });
}

size_t RecordingReader::RankEventsBytes(int64_t rank) const {
  return events_->At(std::to_string(rank).c_str()).text().size();
}

Recording RecordingReader::ReadAll() && {
  return WithFileName(path_, [&] {
    Recording out = std::move(rec_);
    if (events_) out.events = RunEventsFromNode(*events_, out.world_size);
    CheckEventMeshes(out);
    return out;
  });
}

namespace {
// One device mesh of "meshes": its ranks as nested lists, one level per mesh dim (upstream's
// DeviceMesh.mesh.tolist()), every rank of the world at most once.
void NestedRanks(const JsonReader& r, size_t depth, std::vector<int64_t>* shape,
                 std::vector<int64_t>* ranks, int64_t world_size) {
  if (!r.json().is_array()) {
    if (depth != shape->size() || depth == 0)
      r.Fail("expected nested lists of ranks, every list as deep as the first");
    ranks->push_back(r.AsInt(0, world_size - 1));
    return;
  }
  const size_t n = r.ArraySize(static_cast<size_t>(world_size));
  if (n == 0) r.Fail("expected a non-empty list of ranks");
  if (depth == shape->size()) {
    if (!ranks->empty()) r.Fail("expected nested lists of ranks, every list as deep as the first");
    if (depth >= static_cast<size_t>(kMaxMeshDims))
      r.Fail(StrCat("nests deeper than ", kMaxMeshDims, " mesh dims"));
    shape->push_back(static_cast<int64_t>(n));
  } else if ((*shape)[depth] != static_cast<int64_t>(n)) {
    r.Fail(StrCat("has ", n, " entries where its siblings have ", (*shape)[depth]));
  }
  for (size_t i = 0; i < n; ++i) NestedRanks(r.At(i), depth + 1, shape, ranks, world_size);
}

std::vector<DeviceMesh> MeshesFromJson(const JsonReader& r, int64_t world_size) {
  const size_t n = r.ArraySize(size_t{1} << 20);
  std::vector<DeviceMesh> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> shape, ranks;
    NestedRanks(r.At(i), 0, &shape, &ranks, world_size);
    try {
      out.push_back(DeviceMesh::Create(shape, {}, ranks));
    } catch (const InputError& e) {
      r.At(i).Fail(e.what());
    }
  }
  return out;
}

// Each op event's mesh is one of "meshes", holds the event's rank, and has a placement per dim for
// each argument and result.
void CheckEventMeshes(const Recording& rec) {
  if (!rec.events) return;
  for (const auto& [rank, list] : *rec.events) CheckRankEventMeshes(rank, list, rec.meshes);
}

void CheckRankEventMeshes(int64_t rank, const std::vector<RunEvent>& list,
                          const std::vector<DeviceMesh>& meshes) {
  for (size_t i = 0; i < list.size(); ++i) {
    const RunEvent& e = list[i];
    if (!e.mesh) continue;
    auto fail = [&](const std::string& problem) {
      throw InputError(kField, StrCat("events.", rank, "[", i, "].mesh: ", problem));
    };
    if (*e.mesh >= static_cast<int64_t>(meshes.size())) {
      fail(StrCat(*e.mesh, " is no mesh of the recording's \"meshes\" (", meshes.size(),
                  " of them)"));
    }
    const DeviceMesh& mesh = meshes[static_cast<size_t>(*e.mesh)];
    if (mesh.PositionOf(rank) < 0)
      fail(StrCat("mesh ", *e.mesh, " ", IntListToString(mesh.ranks()), " does not hold rank ",
                  rank, ", whose op it is"));
    for (const std::vector<std::string>* texts : {&e.args, &e.results}) {
      for (const std::string& t : *texts) {
        const int64_t dims =
            static_cast<int64_t>(ParsePlacements(t.substr(1, t.size() - 2)).size());
        if (dims != mesh.ndim()) {
          fail(StrCat("mesh ", *e.mesh, " has ", mesh.ndim(), " dims, but the op's placements ", t,
                      " have ", dims));
        }
      }
    }
  }
}

// "memory": ranks of the world as keys, each a list of module boundaries.
std::map<int64_t, std::vector<MemorySample>> MemoryFromJson(const JsonReader& r,
                                                            int64_t world_size) {
  r.ExpectObject();
  std::map<int64_t, std::vector<MemorySample>> out;
  for (const auto& item : r.json().items()) {
    const std::string& key = item.key();
    const int64_t rank = internal::RankOfKey(key, world_size);
    if (rank < 0) {
      r.Fail(StrCat("has memory for '", ExcerptText(key), "', which is no rank of a world of ",
                    world_size));
    }
    const JsonReader list = r.At(key.c_str());
    const size_t n = list.ArraySize(kMaxMemorySamples);
    std::vector<MemorySample>& samples = out[rank];
    for (size_t i = 0; i < n; ++i) {
      const JsonReader s = list.At(i);
      s.ExpectObject();
      s.OnlyKeys({"module", "pass", "at", "bytes", "peak", "t_us"});
      MemorySample m;
      m.module = s.String("module");
      if (m.module.size() > 4096) s.At("module").Fail("expected a module path");
      m.pass = s.String("pass");
      if (m.pass != "forward" && m.pass != "backward")
        s.At("pass").Fail(StrCat("expected forward or backward, got '", ExcerptText(m.pass), "'"));
      const std::string& at = s.String("at");
      if (at != "begin" && at != "end")
        s.At("at").Fail(StrCat("expected begin or end, got '", ExcerptText(at), "'"));
      m.end = at == "end";
      m.bytes = s.Int("bytes", 0, int64_t{1} << 62);
      if (s.Has("peak")) {
        m.peak = s.Int("peak", 0, int64_t{1} << 62);
        if (!m.end) s.At("peak").Fail("a peak is a module's end's");
        if (*m.peak < m.bytes)
          s.At("peak").Fail(StrCat(*m.peak, " is below the bytes held then, ", m.bytes));
      }
      if (s.Has("t_us")) {
        const double t = s.Number("t_us");
        if (!(t >= 0) || t > 1e15) s.At("t_us").Fail("expected a finite time >= 0 (microseconds)");
        m.t_us = t;
      }
      samples.push_back(std::move(m));
    }
  }
  return out;
}

Recording RecordingWithoutEvents(const nlohmann::json& json,
                                 std::optional<int64_t> data_file_bytes) {
  const JsonReader r(json, kField);
  r.ExpectObject();
  if (r.String("format") != kRecordingFormat) {
    r.At("format").Fail(
        StrCat("expected \"", kRecordingFormat, "\", got ", Excerpt(json["format"])));
  }
  const int64_t version = r.Int("version");
  if (version != kRecordingVersion) {
    r.At("version").Fail(StrCat("version ", version, " is not supported (this dtsim reads version ",
                                kRecordingVersion, ")"));
  }
  Recording out;
  const JsonReader meta = r.At("meta");
  meta.ExpectObject();
  out.backend = meta.String("backend");
  out.world_size = meta.Int("world_size", 1, kMaxMeshRanks);
  if (meta.Has("torch_version")) out.torch_version = meta.String("torch_version");
  if (meta.Has("argv")) out.argv = meta.String("argv");
  if (meta.Has("data_file") && !meta.At("data_file").json().is_null()) {
    out.data_file = meta.String("data_file");
    if (out.data_file.empty() || out.data_file.find('/') != std::string::npos ||
        out.data_file == "." || out.data_file == "..") {
      meta.At("data_file").Fail("expected a file name beside the recording (no folders)");
    }
  }
  if (meta.Has("data_complete")) out.data_complete = meta.Bool("data_complete");
  if (meta.Has("tool")) {
    out.tool = meta.String("tool");
    if (out.tool.size() > 256) meta.At("tool").Fail("expected the writer's name");
  }
  if (meta.Has("data")) out.data = meta.Bool("data");
  if (meta.Has("max_data_bytes")) out.max_data_bytes = meta.Int("max_data_bytes", 0);
  if (meta.Has("fr_version")) {
    out.fr_version = meta.String("fr_version");
    if (out.fr_version.size() > 64) meta.At("fr_version").Fail("expected a format version");
  }
  for (const char* key : {"missing_ranks", "truncated_ranks"}) {
    if (!meta.Has(key)) continue;
    std::vector<int64_t> ranks = meta.Ints(key, 0, out.world_size - 1);
    for (size_t i = 1; i < ranks.size(); ++i)
      if (ranks[i] <= ranks[i - 1]) meta.At(key).Fail("ranks must be listed once each, ascending");
    (key[0] == 'm' ? out.missing_ranks : out.truncated_ranks) = std::move(ranks);
  }
  const JsonReader list = r.At("redistributions");
  const size_t n = list.ArraySize(kMaxRedistributions);
  for (size_t i = 0; i < n; ++i) {
    out.redistributions.push_back(RedistributionFromJson(list.At(i), i, data_file_bytes));
    if ((out.redistributions.back().data || out.redistributions.back().data_after) &&
        out.data_file.empty()) {
      list.At(i).At("data").Fail("refers to a data file, but meta.data_file names none");
    }
    // Every rank of the world records every redistribution (dtsim.record gathers each rank's rows,
    // and ranks that recorded others are refused): its root mesh is the world's ranks.
    const std::vector<RankState>& states = out.redistributions.back().ranks_before();
    const bool whole_world = static_cast<int64_t>(states.size()) == out.world_size &&
                             std::all_of(states.begin(), states.end(), [&](const RankState& st) {
                               return st.rank >= 0 && st.rank < out.world_size;
                             });
    if (!whole_world) {
      list.At(i).At("src").At("mesh").Fail(
          StrCat("holds ", states.size(), " ranks, but meta.world_size is ", out.world_size,
                 ": every rank of the world records every redistribution (its mesh is the world's "
                 "ranks)"));
    }
  }
  if (meta.Has("memory_source")) out.memory_source = meta.String("memory_source");
  if (r.Has("memory")) out.memory = MemoryFromJson(r.At("memory"), out.world_size);
  if (r.Has("meshes")) out.meshes = MeshesFromJson(r.At("meshes"), out.world_size);
  if (r.Has("collectives")) {
    // The run's collectives: ranks of the world (0 to world_size - 1).
    const DeviceMesh world = DeviceMesh::Create({out.world_size});
    const JsonReader cs = r.At("collectives");
    const size_t nc = cs.ArraySize(kMaxRunCollectives);
    out.collectives.emplace();
    for (size_t i = 0; i < nc; ++i) out.collectives->push_back(CollectiveFromJson(cs.At(i), world));
  }
  return out;
}
}  // namespace

namespace {

// A spec as the recording's "src"/"dst": on a submesh, the root mesh with "submesh" naming its
// dims.
nlohmann::json RecordedSpecToJson(const DTensorSpec& spec, const std::vector<std::string>& dims) {
  nlohmann::json out = SpecToJson(spec);
  if (!dims.empty()) {
    const DeviceMesh& root = spec.mesh().root();
    out["mesh"] = {{"shape", root.shape()}, {"names", root.names()}, {"ranks", root.ranks()}};
    out["submesh"] = dims;
  }
  return out;
}

nlohmann::json RecordedStatesToJson(const std::vector<RankState>& states,
                                    const std::map<int64_t, std::string>& unavailable) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankState& st : states) {
    nlohmann::json row = {{"rank", st.rank}, {"local_shape", st.local_shape}};
    const auto why = unavailable.find(st.rank);
    if (why != unavailable.end()) {
      row["hash"] = nullptr;
      row["unavailable"] = why->second;
    } else {
      row["hash"] = st.hash ? nlohmann::json(*st.hash) : nlohmann::json(nullptr);
    }
    out.push_back(std::move(row));
  }
  return out;
}

nlohmann::json TimesToJson(const std::vector<double>& times, const std::vector<RankState>& states) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < times.size() && i < states.size(); ++i)
    out[std::to_string(states[i].rank)] = times[i];
  return out;
}

nlohmann::json RecordedCollectiveToJson(const CollectiveEvent& c) {
  auto shapes = [](const std::vector<std::vector<int64_t>>& list,
                   const std::vector<size_t>& unshaped) {
    nlohmann::json out = list;
    for (size_t i : unshaped)
      if (i < out.size()) out[i] = nullptr;
    return out;
  };
  nlohmann::json out = {{"op", std::string(ToString(c.kind))},
                        {"groups", c.groups},
                        {"ranks", c.ranks},
                        {"input_shapes", shapes(c.input_shapes, c.unshaped_inputs)},
                        {"output_shapes", shapes(c.output_shapes, c.unshaped_outputs)},
                        {"input_bytes", c.input_bytes},
                        {"output_bytes", c.output_bytes}};
  if (!c.input_hashes.empty()) out["input_hashes"] = c.input_hashes;
  if (!c.output_hashes.empty()) out["output_hashes"] = c.output_hashes;
  return out;
}

nlohmann::json DataToJson(const std::optional<std::vector<RecordedData>>& data) {
  if (!data) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const RecordedData& d : *data)
    out.push_back({{"rank", d.rank}, {"offset", d.offset}, {"nbytes", d.nbytes}});
  return out;
}

// A device mesh as nested lists of its ranks, one level per dim (upstream's mesh.tolist()).
nlohmann::json NestedRanksJson(const std::vector<int64_t>& shape, const std::vector<int64_t>& ranks,
                               size_t dim, size_t* next) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (dim + 1 == shape.size()) {
      out.push_back(ranks.at((*next)++));
    } else {
      out.push_back(NestedRanksJson(shape, ranks, dim + 1, next));
    }
  }
  return out;
}

}  // namespace

nlohmann::json ToJson(const Recording& rec) {
  nlohmann::json meta = {{"backend", rec.backend},
                         {"world_size", rec.world_size},
                         {"data_complete", rec.data_complete}};
  meta["data_file"] =
      rec.data_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(rec.data_file);
  if (!rec.tool.empty()) meta["tool"] = rec.tool;
  if (!rec.argv.empty()) meta["argv"] = rec.argv;
  if (!rec.torch_version.empty()) meta["torch_version"] = rec.torch_version;
  if (rec.data) meta["data"] = *rec.data;
  if (rec.max_data_bytes) meta["max_data_bytes"] = *rec.max_data_bytes;
  if (!rec.memory_source.empty()) meta["memory_source"] = rec.memory_source;
  if (!rec.fr_version.empty()) meta["fr_version"] = rec.fr_version;
  if (rec.missing_ranks) meta["missing_ranks"] = *rec.missing_ranks;
  if (rec.truncated_ranks) meta["truncated_ranks"] = *rec.truncated_ranks;

  nlohmann::json redistributions = nlohmann::json::array();
  for (const RedistributionEvent& r : rec.redistributions) {
    nlohmann::json collectives = nlohmann::json::array();
    for (const CollectiveEvent& c : r.collectives)
      collectives.push_back(RecordedCollectiveToJson(c));
    nlohmann::json row = {
        {"index", r.index},
        {"call", r.call},
        {"src", RecordedSpecToJson(r.src(), r.submesh_dims)},
        {"dst", RecordedSpecToJson(r.dst(), r.submesh_dims)},
        {"ranks_before", RecordedStatesToJson(r.ranks_before(), r.unavailable_before)},
        {"ranks_after", RecordedStatesToJson(r.ranks_after(), r.unavailable_after)},
        {"time_us", TimesToJson(r.time_us, r.ranks_before())},
        {"collectives", std::move(collectives)},
        {"data", DataToJson(r.data)},
        {"data_after", DataToJson(r.data_after)}};
    row["op"] = r.op.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.op);
    row["arg"] = r.arg ? nlohmann::json(*r.arg) : nlohmann::json(nullptr);
    if (!r.start_us.empty()) row["start_us"] = TimesToJson(r.start_us, r.ranks_before());
    redistributions.push_back(std::move(row));
  }

  nlohmann::json out = {{"format", kRecordingFormat},
                        {"version", kRecordingVersion},
                        {"meta", std::move(meta)},
                        {"redistributions", std::move(redistributions)}};
  if (rec.collectives) {
    nlohmann::json list = nlohmann::json::array();
    for (const CollectiveEvent& c : *rec.collectives) list.push_back(RecordedCollectiveToJson(c));
    out["collectives"] = std::move(list);
  }
  if (rec.events) out["events"] = RunEventsToJson(*rec.events);
  if (rec.memory) {
    nlohmann::json memory = nlohmann::json::object();
    for (const auto& [rank, samples] : *rec.memory) {
      nlohmann::json& rows = memory[std::to_string(rank)] = nlohmann::json::array();
      for (const MemorySample& m : samples) {
        nlohmann::json row = {{"module", m.module},
                              {"pass", m.pass},
                              {"at", m.end ? "end" : "begin"},
                              {"bytes", m.bytes}};
        if (m.peak) row["peak"] = *m.peak;
        if (m.t_us) row["t_us"] = *m.t_us;
        rows.push_back(std::move(row));
      }
    }
    out["memory"] = std::move(memory);
  }
  if (!rec.meshes.empty()) {
    nlohmann::json meshes = nlohmann::json::array();
    for (const DeviceMesh& m : rec.meshes) {
      size_t next = 0;
      meshes.push_back(NestedRanksJson(m.shape(), m.ranks(), 0, &next));
    }
    out["meshes"] = std::move(meshes);
  }
  return out;
}

Recording ReadRecording(const std::string& path) {
  const std::string text = ReadInputFile(path, "recording", kMaxRecordingBytes);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError("recording", StrCat("'", ExcerptText(path), "' is empty"));
  const nlohmann::json doc = ParseJsonText(text, "recording", StrCat("'", ExcerptText(path), "'"));
  return WithFileName(path, [&] { return RecordingFromJson(doc); });
}

}  // namespace dtsim
