// Fuzz target: recordings that lie (`dtsim.record`, `dtsim record`, `dtsim run --trace`; read by
// replay, trace-diff, export, the viewer and Python). Each input is a program of semantic mutations
// applied to data/recording.json (a 4-rank LocalTensorMode recording with shard data: an implicit
// R -> P(sum), a P(sum) -> R all_reduce and a backward one, then an S(0) -> R all_gather, and the
// ops and collectives of a `dtsim run`): worlds and meshes that disagree, states of ranks outside
// the mesh or with local shapes the spec does not give, hashes that are not hashes, groups with
// ranks outside the world, bytes that shapes cannot hold, times of ranks that do not exist, data
// ranges outside the sidecar, redistributions dropped or duplicated, events of other ranks or in
// groups without their rank, provenance ("from") naming no earlier event or not one per input, a
// first read of an op. The JSON stays valid; what it says may be impossible. Properties,
// beyond "no crash, no sanitizer report":
//  * a refusal is InputError("recording") with a capped message (dtsim's exit 2);
//  * an accepted recording is possible — checked here independently of the validator
//    (Impossible() below);
//  * both readers (the DOM's RecordingFromJson and the text's RecordingFromText) accept the same
//    recordings and read them alike (ToJson of each), an accepted one's events agree with
//    themselves, and the writer writes what reads back as the same recording;
//  * trace-diff of the input against the seed (events read a rank at a time) refuses it exactly as
//    the whole read does, and an accepted input agrees with itself.
// DTSIM_FUZZ_SWEEP=N:SEED (ctest's fuzz_recording_semantic sets it): the first input also runs N
// programs drawn from SEED.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dtsim/layout/dtype.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/spec.h"
#include "dtsim/trace/formats.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/run_events.h"
#include "fuzz_common.h"

namespace {

using dtsim::InputError;
using dtsim::StrCat;
using dtsim::fuzz::AnyIndex;
using dtsim::fuzz::AnyOf;
using dtsim::fuzz::Pick;
using dtsim::fuzz::Program;
using Json = nlohmann::json;

// The sidecar's size: the seed's data entries end there.
constexpr int64_t kDataBytes = 2816;

const Json& Seed() {
  static const Json seed = [] {
    Json j = dtsim::fuzz::ReadSeedJson(
        std::filesystem::path(DTSIM_SOURCE_DIR) / "tests/fuzz/data/recording.json", "recording");
    dtsim::RecordingFromJson(j, kDataBytes);  // the seed is valid
    return j;
  }();
  return seed;
}

// One rank's events (SkipMutation when an earlier mutation moved them away).
Json& RankEvents(Program& p, Json& doc) {
  const std::string rank = std::to_string(p.Next() % 4);
  if (!doc["events"].contains(rank)) throw dtsim::fuzz::SkipMutation{};
  return doc["events"][rank];
}

void Mutate(Program& p, Json& doc) {
  static const std::vector<Json> kRanks = {Json(-1), Json(0),  Json(3),
                                           Json(4),  Json(99), Json(1000000)};
  static const std::vector<Json> kExtents = {
      Json(-1), Json(0), Json(1), Json(2), Json(5), Json(8), Json(int64_t{1} << 40)};
  static const std::vector<Json> kHashes = {Json("xxh3:nothex"), Json("xxh3:0000000000000000"),
                                            Json("xxh3:ABCDEF0123456789"), Json(""), Json(5)};
  static const std::vector<Json> kGroups = {
      Json::parse("[[0,1,2,3]]"), Json::parse("[[0,1],[2,3]]"), Json::parse("[[0,99]]"),
      Json::parse("[[0,0,1,2]]"), Json::parse("[[-1,0,1,2]]"),  Json::parse("[[0,1],[1,2]]"),
      Json::parse("[]")};
  static const std::vector<Json> kBytes = {
      Json(0), Json(3), Json(4), Json(16), Json(-1), Json(std::numeric_limits<int64_t>::max())};
  Json& reds = doc["redistributions"];
  switch (p.Next() % 15) {
    case 0:  // the world
      doc["meta"]["world_size"] = Pick(p, kRanks);
      break;
    case 1: {  // a state's rank
      Json& r = AnyOf(p, reds);
      AnyOf(p, r[p.Next() % 2 ? "ranks_before" : "ranks_after"])["rank"] = Pick(p, kRanks);
      break;
    }
    case 2: {  // a state's local shape
      Json& r = AnyOf(p, reds);
      Json& shape = AnyOf(p, r[p.Next() % 2 ? "ranks_before" : "ranks_after"])["local_shape"];
      if (p.Next() % 3 == 0)
        shape.push_back(Pick(p, kExtents));
      else if (!shape.empty())
        AnyOf(p, shape) = Pick(p, kExtents);
      break;
    }
    case 3: {  // a state's hash
      Json& r = AnyOf(p, reds);
      AnyOf(p, r[p.Next() % 2 ? "ranks_before" : "ranks_after"])["hash"] = Pick(p, kHashes);
      break;
    }
    case 4:  // a collective's groups
      AnyOf(p, AnyOf(p, reds)["collectives"])["groups"] = Pick(p, kGroups);
      break;
    case 5: {  // a collective's bytes
      Json& c = AnyOf(p, AnyOf(p, reds)["collectives"]);
      AnyOf(p, c[p.Next() % 2 ? "input_bytes" : "output_bytes"]) = Pick(p, kBytes);
      break;
    }
    case 6: {  // a time for a rank that may not exist
      Json& r = AnyOf(p, reds);
      r[p.Next() % 2 ? "time_us" : "start_us"][Pick(p, kRanks).dump()] = 1.0;
      break;
    }
    case 7: {  // a data entry's range
      Json& r = AnyOf(p, reds);
      Json& entry = AnyOf(p, r[p.Next() % 2 ? "data" : "data_after"]);
      entry[p.Next() % 2 ? "offset" : "nbytes"] = Pick(p, kBytes);
      break;
    }
    case 8: {  // placements, mesh or shape of a spec
      static const std::vector<Json> kPlacements = {Json("[S(9)]"),   Json("[S(0), R]"),
                                                    Json("[P(sum)]"), Json("[R]"),
                                                    Json("[S(0)]"),   Json("nonsense")};
      static const std::vector<Json> kMeshShapes = {Json::parse("[4]"), Json::parse("[2,2]"),
                                                    Json::parse("[1000000]"), Json::parse("[8]")};
      Json& spec = AnyOf(p, reds)[p.Next() % 2 ? "src" : "dst"];
      switch (p.Next() % 3) {
        case 0:
          spec["placements"] = Pick(p, kPlacements);
          break;
        case 1:
          spec["mesh"]["shape"] = Pick(p, kMeshShapes);
          break;
        default:
          AnyOf(p, spec["shape"]) = Pick(p, kExtents);
          break;
      }
      break;
    }
    case 9: {  // a redistribution dropped or duplicated
      const size_t i = AnyIndex(p, reds.size());
      if (p.Next() % 2)
        reds.erase(i);
      else
        reds.insert(reds.begin() + static_cast<std::ptrdiff_t>(i), reds[i]);
      break;
    }
    case 10: {  // a rank's events moved to another rank
      Json& events = doc["events"];
      const std::string from = std::to_string(p.Next() % 4);
      const std::string to = Pick(p, kRanks).dump();
      if (events.contains(from)) {
        Json moved = events[from];
        events.erase(from);
        events[to] = std::move(moved);
      }
      break;
    }
    case 11: {  // an event's group
      static const std::vector<Json> kEventGroups = {Json::parse("[0,1]"), Json::parse("[2,3]"),
                                                     Json::parse("[0,99]"), Json::parse("[1,1]"),
                                                     Json::parse("[]")};
      Json& event = AnyOf(p, RankEvents(p, doc));
      if (event["kind"] == "collective") event["group"] = Pick(p, kEventGroups);
      break;
    }
    case 12: {  // an event's digest
      Json& event = AnyOf(p, RankEvents(p, doc));
      Json& digest = AnyOf(p, event[p.Next() % 2 ? "inputs" : "outputs"]);
      switch (p.Next() % 3) {
        case 0:
          digest["shape"] = Json::array({Pick(p, kExtents)});
          break;
        case 1:
          digest["dtype"] = p.Next() % 2 ? "float99" : "int64";
          break;
        default:
          digest["hash"] = Pick(p, kHashes);
          break;
      }
      break;
    }
    case 13: {  // an event's provenance ("from") or first read
      static const std::vector<Json> kSources = {
          Json::parse("[0]"),
          Json::parse("[1]"),
          Json::parse("[3]"),
          Json::parse("[-1]"),
          Json::parse("[null]"),
          Json::parse("[0, 0]"),
          Json::parse("[]"),
          Json::parse("[\"0\"]"),
          Json::parse(R"([{"event": 0, "op": "aten.copy_.default"}])"),
          Json::parse(R"([{"event": 0, "op": ""}])"),
          Json::parse(R"([{"event": 0, "op": "aten.copy_.default", "size": 1}])")};
      Json& event = AnyOf(p, RankEvents(p, doc));
      if (p.Next() % 3) {
        event["from"] = Pick(p, kSources);
      } else {
        event["first_read"] = {
            {"op", "aten.mul.Tensor"},
            {"outputs", event["outputs"].is_null() ? Json::array() : event["outputs"]}};
      }
      break;
    }
    default: {  // a collective's ranks
      static const std::vector<Json> kRankLists = {
          Json::parse("[0,1,2,3]"), Json::parse("[3,2,1,0]"), Json::parse("[0,1,2,99]"),
          Json::parse("[0,0,1,2]")};
      AnyOf(p, AnyOf(p, reds)["collectives"])["ranks"] = Pick(p, kRankLists);
      break;
    }
  }
}

bool IsHash(const std::string& h) {
  if (h.size() != 21 || h.rfind("xxh3:", 0) != 0) return false;
  for (size_t i = 5; i < h.size(); ++i) {
    if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return false;
  }
  return true;
}

long double Elements(const std::vector<int64_t>& shape) {
  long double n = 1;
  for (int64_t d : shape) n *= static_cast<long double>(d);
  return n;
}

// What cannot be true of an accepted recording, checked without the validator's code; nullopt if
// none.
std::optional<std::string> Impossible(const dtsim::Recording& rec) {
  const int64_t world = rec.world_size;
  if (world < 1) return StrCat("a world of ", world);
  auto in_world = [&](int64_t rank) { return rank >= 0 && rank < world; };
  for (size_t i = 0; i < rec.redistributions.size(); ++i) {
    const dtsim::RedistributionEvent& r = rec.redistributions[i];
    if (r.index != static_cast<int64_t>(i))
      return StrCat("redistribution ", i, " has index ", r.index);
    if (r.src().mesh().size() != world || r.dst().mesh().size() != world)
      return "a mesh that is not the world";
    for (const auto* states : {&r.ranks_before(), &r.ranks_after()}) {
      const dtsim::DTensorSpec& spec = states == &r.ranks_before() ? r.src() : r.dst();
      if (static_cast<int64_t>(states->size()) != world)
        return "states that do not cover the world";
      for (size_t k = 0; k < states->size(); ++k) {
        const dtsim::RankState& s = (*states)[k];
        if (s.rank != static_cast<int64_t>(k)) return StrCat("state ", k, " of rank ", s.rank);
        if (s.hash && !IsHash(*s.hash)) return StrCat("hash '", *s.hash, "'");
        if (r.submesh_dims.empty() &&
            s.local_shape != dtsim::LocalShapeAt(spec.shape(), spec.mesh().shape(),
                                                 spec.mesh().GetCoordinate(s.rank),
                                                 spec.placements()))
          return StrCat("rank ", s.rank, "'s local shape is not its spec's");
      }
    }
    if (!r.time_us.empty() && r.time_us.size() != r.ranks_before().size())
      return "times of other ranks";
    for (double t : r.time_us)
      if (!std::isfinite(t) || t < 0) return "a time that is not one";
    for (const dtsim::CollectiveEvent& c : r.collectives) {
      std::set<int64_t> members;
      for (const auto& g : c.groups) {
        for (int64_t m : g) {
          if (!in_world(m)) return StrCat("group member ", m);
          if (!members.insert(m).second)
            return StrCat("rank ", m, " in two places of one collective's groups");
        }
      }
      for (size_t k = 0; k < c.ranks.size(); ++k) {
        if (!in_world(c.ranks[k]) || (k > 0 && c.ranks[k] <= c.ranks[k - 1]))
          return "collective ranks";
      }
      const size_t n = c.ranks.size();
      if (c.input_shapes.size() != n || c.output_shapes.size() != n || c.input_bytes.size() != n ||
          c.output_bytes.size() != n)
        return "per-rank lists of other lengths";
      for (size_t k = 0; k < n; ++k) {
        for (const auto& [shape, bytes] :
             {std::make_pair(&c.input_shapes[k], c.input_bytes[k]),
              std::make_pair(&c.output_shapes[k], c.output_bytes[k])}) {
          bool fits = false;
          for (int item : {1, 2, 4, 8, 16}) fits |= Elements(*shape) * item == bytes;
          if (!fits) return StrCat(bytes, " bytes for a shape they cannot hold");
        }
      }
    }
    for (const auto* data : {&r.data, &r.data_after}) {
      if (!*data) continue;
      const auto& states = data == &r.data ? r.ranks_before() : r.ranks_after();
      const dtsim::DType dtype = data == &r.data ? r.src().dtype() : r.dst().dtype();
      for (size_t k = 0; k < (*data)->size(); ++k) {
        const dtsim::RecordedData& d = (**data)[k];
        if (d.rank != states.at(k).rank) return "a data entry of another rank";
        if (Elements(states[k].local_shape) * dtsim::ItemSize(dtype) != d.nbytes)
          return StrCat(d.nbytes, " bytes of data for its shard");
        if (d.offset < 0 || d.nbytes < 0 || d.offset > kDataBytes - d.nbytes)
          return "data outside the sidecar";
      }
    }
  }
  if (rec.events) {
    for (const auto& [rank, events] : *rec.events) {
      if (!in_world(rank)) return StrCat("events of rank ", rank);
      for (const dtsim::RunEvent& e : events) {
        for (const auto* list : {&e.inputs, e.outputs ? &*e.outputs : nullptr}) {
          if (!list) continue;
          for (const dtsim::TensorDigest& d : *list) {
            for (int64_t x : d.shape)
              if (x < 0) return "a digest of negative extent";
            if (d.hash && !IsHash(*d.hash)) return StrCat("digest hash '", *d.hash, "'");
          }
        }
        if (!e.from.empty() && e.from.size() != e.inputs.size())
          return "provenance without one entry per input";
        const int64_t index = &e - events.data();
        for (const auto& source : e.from)
          if (source && (source->event < 0 || source->event >= index))
            return StrCat("provenance naming event ", source->event, " from event ", index);
        if (e.first_read && e.kind != dtsim::RunEvent::Kind::kCollective)
          return "a first read of an op";
        if (e.kind != dtsim::RunEvent::Kind::kCollective) continue;
        std::set<int64_t> group(e.group.begin(), e.group.end());
        if (group.size() != e.group.size()) return "a rank twice in an event's group";
        if (!group.count(rank)) return "an event's group without its rank";
        for (int64_t m : group)
          if (!in_world(m)) return StrCat("event group member ", m);
      }
    }
  }
  return std::nullopt;
}

// True when the mutated input was accepted.
bool RunProgram(const uint8_t* data, size_t size) {
  Program p(data, size);
  Json doc = Seed();
  dtsim::fuzz::ApplyMutations(p, doc, 6, Mutate);
  const std::string text = doc.dump();
  std::optional<std::string> dom_error, text_error;
  dtsim::Recording rec, from_text;
  try {
    rec = dtsim::RecordingFromJson(doc, kDataBytes);
  } catch (const InputError& e) {
    dtsim::fuzz::ExpectRefusal(e, "recording");
    dom_error = e.what();
  }
  try {
    from_text = dtsim::RecordingFromText(dtsim::TraceTextOf("input", text), kDataBytes);
  } catch (const InputError& e) {
    text_error = e.what();
  }
  DTSIM_FUZZ_EXPECT(dom_error.has_value() == text_error.has_value(), "the readers disagree: DOM ",
                    dom_error.value_or("accepts"), "; text ", text_error.value_or("accepts"));
  // trace-diff against the seed reads the two files a rank at a time, falling back to the whole
  // read on any problem: it refuses the input exactly as the whole read does, and a recording
  // agrees with itself.
  const dtsim::TraceText seed_text = dtsim::TraceTextOf("seed", Seed().dump());
  const dtsim::TraceText input_text = dtsim::TraceTextOf("input", text);
  const dtsim::TraceFormatDriver& driver = dtsim::TraceFormatDriverFor(seed_text, input_text);
  std::optional<std::string> diff_error;
  try {
    dtsim::TraceText a = seed_text, b = input_text;
    std::ostringstream ignored;
    driver.diff(a, b, {}, ignored);
  } catch (const InputError& e) {
    diff_error = e.what();
  }
  std::optional<std::string> whole_error;
  try {
    dtsim::RecordingFromText(input_text);  // as the diff reads it: no data file size
  } catch (const InputError& e) {
    whole_error = e.what();
  }
  DTSIM_FUZZ_EXPECT(diff_error == whole_error, "trace-diff refuses otherwise than the whole read: ",
                    diff_error.value_or("accepts"), "; whole read ",
                    whole_error.value_or("accepts"));
  if (!whole_error) {
    dtsim::TraceText a = input_text, b = input_text;
    std::ostringstream out;
    DTSIM_FUZZ_EXPECT(driver.diff(a, b, {}, out) == 0,
                      "a recording differs from itself: ", out.str());
  }
  if (dom_error) return false;
  if (auto why = Impossible(rec)) {
    dtsim::fuzz::Fail(StrCat("an impossible recording was accepted: ", *why));
  }
  if (rec.events) {
    const dtsim::EventDiff self = dtsim::DiffRunEvents(*rec.events, *rec.events);
    DTSIM_FUZZ_EXPECT(self.first.empty() && self.differing == 0, "events differ from themselves");
  }
  // Both readers read the same recording, and the writer writes what reads back as it.
  const Json written = dtsim::ToJson(rec);
  DTSIM_FUZZ_EXPECT(dtsim::ToJson(from_text) == written, "the readers read different recordings");
  try {
    DTSIM_FUZZ_EXPECT(dtsim::ToJson(dtsim::RecordingFromJson(written, kDataBytes)) == written,
                      "a recording written back reads as another");
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(false, "a recording written back is refused: ", e.what());
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dtsim::fuzz::RunStructuredTarget("recording_semantic", 24, data, size, RunProgram);
}
