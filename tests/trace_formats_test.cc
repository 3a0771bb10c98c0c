// The conformance checks every trace format driver (include/dtsim/trace/formats.h) passes, on a
// file of its format that dtsim wrote: it is the driver picked for that file; it validates; it
// agrees with itself; the same file with one shard hash changed differs; its Perfetto export (where
// it has one) is trace-event JSON with events; it round-trips through its typed model (where dtsim
// writes it from C++); and a file of another format is refused by its validation, naming the
// format. A new driver gets these checks by adding its sample below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/trace/formats.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/op_trace.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/run_events.h"

namespace dtsim {
namespace {

struct Sample {
  const char* format;
  const char* path;       // from the source tree
  const char* differing;  // a file of the format that differs from it; nullptr: the same file with
                          // one shard's hash (and value sketch) changed
};

void PrintTo(const Sample& s, std::ostream* os) { *os << s.format; }

// clang-format off
const Sample kSamples[] = {
    {"dtsim-model-trace", "tests/viewer/data/model_fsdp_tp_2x4_sim.json",
                          "tests/viewer/data/model_fsdp_tp_2x4_real_fault.json"},
    {"dtsim-recording",   "tests/fuzz/corpus/recording/seed-local-mlp", nullptr},
    {"dtsim-op-trace",    "tests/fuzz/corpus/trace/seed-op-add-2x2",    nullptr},
    {"dtsim-trace",       "traces/uneven_2x4_S0R_to_RS1.json",          nullptr},
};
// clang-format on

TraceText ReadSource(const char* path) {
  return ReadTraceText(StrCat(DTSIM_SOURCE_DIR, "/", path));
}
TraceText Read(const Sample& s) { return ReadSource(s.path); }

// The last object with a shard hash ("hash": "xxh3:..."), in document order.
nlohmann::json* LastHashed(nlohmann::json& j) {
  nlohmann::json* found = nullptr;
  if (j.is_object()) {
    auto h = j.find("hash");
    if (h != j.end() && h->is_string() && h->get<std::string>().rfind("xxh3:", 0) == 0) found = &j;
  }
  if (j.is_object() || j.is_array()) {
    for (auto& child : j)
      if (nlohmann::json* inner = LastHashed(child)) found = inner;
  }
  return found;
}

// The file with one shard's hash changed, and its value sketch moved well beyond float rounding
// where it has one: another value, not a rounding of it.
TraceText WithOneShardChanged(const TraceText& text) {
  nlohmann::json j = nlohmann::json::parse(text.text);
  nlohmann::json* shard = LastHashed(j);
  EXPECT_NE(shard, nullptr) << text.path;
  if (shard == nullptr) return text;
  std::string hash = (*shard)["hash"];
  hash[5] = hash[5] == '0' ? '1' : '0';
  (*shard)["hash"] = hash;
  if (shard->contains("sketch") && shard->contains("scale") && (*shard)["sketch"].is_number()) {
    const double sketch = (*shard)["sketch"], scale = (*shard)["scale"];
    (*shard)["sketch"] = std::abs(sketch) > scale / 4 ? -sketch : scale / 2;
  }
  return TraceTextOf(text.path + " (one shard changed)", j.dump());
}

TEST(TraceFormatDrivers, EveryFormatHasOneDriverAndOneSample) {
  ASSERT_EQ(TraceFormatDrivers().size(), std::size(kSamples));
  for (const TraceFormatDriver& d : TraceFormatDrivers()) {
    int samples = 0;
    for (const Sample& s : kSamples) samples += std::string(s.format) == d.format;
    EXPECT_EQ(samples, 1) << d.format;
    EXPECT_NE(d.validate, nullptr) << d.format;
    EXPECT_NE(d.diff, nullptr) << d.format;
    EXPECT_NE(d.rewrite, nullptr) << d.format;
  }
}

class Conformance : public ::testing::TestWithParam<Sample> {};

TEST_P(Conformance, PickedValidatedSelfDiffedDiffedAndExported) {
  const Sample& s = GetParam();
  const TraceText text = Read(s);
  ASSERT_EQ(text.format, s.format);
  const TraceFormatDriver& driver = TraceFormatDriverFor(text, text);
  ASSERT_STREQ(driver.format, s.format);
  EXPECT_NO_THROW(driver.validate(text, nullptr));

  TraceText a = text, b = text;
  std::ostringstream same;
  EXPECT_EQ(driver.diff(a, b, TraceDiffOptions{}, same), 0) << same.str();
  EXPECT_NE(same.str().find("agree"), std::string::npos) << same.str();

  TraceText c = text, d = s.differing ? ReadSource(s.differing) : WithOneShardChanged(text);
  std::ostringstream changed;
  EXPECT_EQ(driver.diff(c, d, TraceDiffOptions{}, changed), 1) << changed.str();
  EXPECT_NE(changed.str().find("differ"), std::string::npos) << changed.str();

  if (driver.to_perfetto != nullptr) {
    TraceText e = text;
    const nlohmann::json exported = nlohmann::json::parse(driver.to_perfetto(e, nullptr));
    ASSERT_TRUE(exported.contains("traceEvents")) << s.path;
    EXPECT_FALSE(exported["traceEvents"].empty()) << s.path;
  }
}

// Round trip: the sample (as dtsim wrote it) read into the typed model and written back is the same
// JSON, key for key; written back once more it is unchanged; and it agrees with the file.
TEST_P(Conformance, RoundTripsThroughItsTypedModel) {
  const Sample& s = GetParam();
  const TraceText text = Read(s);
  const TraceFormatDriver& driver = TraceFormatDriverFor(text, text);
  ASSERT_NE(driver.rewrite, nullptr) << s.format;
  const nlohmann::json original = nlohmann::json::parse(text.text);
  const nlohmann::json written = driver.rewrite(text, nullptr);
  EXPECT_EQ(written, original) << s.path << "\nwritten: " << written.dump().substr(0, 2000);
  const TraceText again = TraceTextOf(s.path + std::string(" (written back)"), written.dump());
  EXPECT_EQ(driver.rewrite(again, nullptr), written) << s.path;
  TraceText a = text, b = again;
  std::ostringstream out;
  EXPECT_EQ(driver.diff(a, b, TraceDiffOptions{}, out), 0) << out.str();
}

TEST_P(Conformance, AFileOfAnotherFormatIsRefusedNamingItsFormat) {
  const Sample& s = GetParam();
  const TraceFormatDriver& driver = TraceFormatDriverFor(Read(s), Read(s));
  for (const Sample& other : kSamples) {
    if (std::string(other.format) == s.format) continue;
    const TraceText text = Read(other);
    try {
      driver.validate(text, nullptr);
      ADD_FAILURE() << s.format << " accepted " << other.path;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("format"), std::string::npos)
          << s.format << " on " << other.path << ": " << e.what();
    }
  }
}

std::string Hash(int i) { return StrCat("xxh3:", std::string(15, '0'), i); }

// Recordings and op traces hold their redistributions as one type, RedistributionEvent: each is
// read into it with what ran it and its trace, checked here against the files' own JSON. An op
// trace's redistributions are implicit ones with their whole trace (plan steps and their
// collectives); a recording's carry the states before and after, no plan steps, and the
// collectives as issued.
TEST(RedistributionEventTest, RecordingsAndOpTracesReadIntoOneEventType) {
  // What both formats say of a redistribution (`j`: its JSON; `src`, `dst`: its specs' JSON, and
  // `before`, `after`: its rank states', wherever the format keeps them).
  const auto expect_read = [](const RedistributionEvent& r, const nlohmann::json& j, int64_t index,
                              const std::string& call, const nlohmann::json& src,
                              const nlohmann::json& dst, const nlohmann::json& before,
                              const nlohmann::json& after) {
    EXPECT_EQ(r.index, index);
    EXPECT_EQ(r.call, call);
    std::string text = call;
    if (j.contains("op") && j["op"].is_string()) text += " " + j["op"].get<std::string>();
    if (j.contains("arg") && j["arg"].is_number()) text += StrCat(" arg ", j["arg"].get<int64_t>());
    EXPECT_EQ(CallText(r), text);
    EXPECT_EQ(ToString(r.src().placements()), src["placements"]);
    EXPECT_EQ(ToString(r.dst().placements()), dst["placements"]);
    EXPECT_EQ(r.src().shape(), src["shape"].get<std::vector<int64_t>>());
    ASSERT_EQ(r.ranks_before().size(), before.size());
    ASSERT_EQ(r.ranks_after().size(), after.size());
    for (size_t k = 0; k < r.ranks_after().size(); ++k) {
      EXPECT_EQ(r.ranks_before()[k].hash.value_or(""), before[k]["hash"]);
      EXPECT_EQ(r.ranks_after()[k].hash.value_or(""), after[k]["hash"]);
    }
  };

  const TraceText op_text = ReadSource("tests/fuzz/corpus/trace/seed-op-add-2x2");
  const nlohmann::json op_json = nlohmann::json::parse(op_text.text);
  const OpTrace op = OpTraceFromJson(op_json);
  ASSERT_EQ(op.redistributions.size(), op_json["redistributions"].size());
  ASSERT_FALSE(op.redistributions.empty());
  for (size_t i = 0; i < op.redistributions.size(); ++i) {
    const RedistributionEvent& r = op.redistributions[i];
    const nlohmann::json& j = op_json["redistributions"][i];
    const nlohmann::json& trace = j["trace"];
    expect_read(r, j, static_cast<int64_t>(i), "implicit", trace["initial"]["spec"],
                trace["final"]["spec"], trace["initial"]["ranks"], trace["final"]["ranks"]);
    EXPECT_EQ(r.trace.steps.size(), trace["steps"].size());
    EXPECT_FALSE(r.trace.steps.empty());
    EXPECT_TRUE(r.collectives.empty()) << "an op trace's collectives are in its steps";
  }

  const TraceText rec_text = ReadSource("tests/fuzz/corpus/recording/seed-local-mlp");
  const nlohmann::json rec_json = nlohmann::json::parse(rec_text.text);
  const Recording rec = RecordingFromText(rec_text);
  ASSERT_EQ(rec.redistributions.size(), rec_json["redistributions"].size());
  ASSERT_FALSE(rec.redistributions.empty());
  for (size_t i = 0; i < rec.redistributions.size(); ++i) {
    const RedistributionEvent& r = rec.redistributions[i];
    const nlohmann::json& j = rec_json["redistributions"][i];
    expect_read(r, j, j["index"], j["call"], j["src"], j["dst"], j["ranks_before"],
                j["ranks_after"]);
    EXPECT_TRUE(r.trace.steps.empty()) << "a recording does not see upstream's plan";
    EXPECT_EQ(r.collectives.size(), j["collectives"].size());
  }
}

// Model traces and recordings hold their events as one type, RunEvent: each is read into it,
// checked here against the files' own JSON. A model trace's event stands for every rank (module
// boundaries with each rank's hash, ops with their placements in one line); a recording's is one
// rank's op or collective with its placements as lists. One label names both, and a recording
// refuses the kinds only a model trace holds.
TEST(RunEventTest, ModelTracesAndRecordingsReadIntoOneEventType) {
  const auto joined = [](const nlohmann::json& list) {
    std::string text;
    for (size_t i = 0; i < list.size(); ++i)
      text += StrCat(i ? ", " : "", list[i].get<std::string>());
    return text;
  };

  const TraceText model_text = ReadSource("tests/viewer/data/model_fsdp_tp_2x4_sim.json");
  const nlohmann::json model_json = nlohmann::json::parse(model_text.text);
  const ModelTrace model = ModelTraceFromJson(model_json);
  ASSERT_EQ(model.events.size(), model_json["events"].size());
  std::set<std::string> kinds;
  int64_t two_argument_ops = 0;
  for (size_t i = 0; i < model.events.size(); ++i) {
    const RunEvent& e = model.events[i];
    const nlohmann::json& j = model_json["events"][i];
    SCOPED_TRACE(StrCat("model trace event ", i, ": ", j.dump().substr(0, 200)));
    EXPECT_EQ(ToString(e.kind), j["event"]);
    kinds.insert(j["event"]);
    EXPECT_EQ(e.pass, j["phase"]);
    EXPECT_EQ(e.module, j.value("module", ""));
    EXPECT_EQ(e.t_us, j["t_us"].get<double>());
    if (j["event"] == "op") {
      EXPECT_EQ(PlacementsText(e), j["placements"]);
      // The file's text, split at its arrow and at the commas between brackets.
      const std::string text = j["placements"];
      const size_t arrow = text.find(" -> ");
      EXPECT_EQ(StrCat(joined(e.args), " -> ", joined(e.results)), text);
      EXPECT_EQ(e.args.size(),
                static_cast<size_t>(std::count(text.begin(), text.begin() + arrow, '[')))
          << "one argument per top-level bracket";
      for (const std::string& p : e.args) EXPECT_TRUE(p.front() == '[' && p.back() == ']') << p;
      if (j["op"] == "aten::mm") {
        EXPECT_EQ(e.args.size(), 2u) << "mm takes two DTensors";
        EXPECT_EQ(e.results.size(), 1u);
        ++two_argument_ops;
      }
      EXPECT_EQ(e.collectives.size(), j["collectives"].size());
    }
    if (j.contains("tensor")) {
      ASSERT_TRUE(e.tensor.has_value());
      EXPECT_EQ(e.tensor->placements, j["tensor"]["placements"]);
      EXPECT_EQ(e.tensor->hashes, j["tensor"]["hashes"].get<std::vector<std::string>>());
    }
    if (j["event"] == "module_end")
      EXPECT_EQ(EventLabel(e), StrCat("forward output of ", e.module));
    if (j["event"] == "gradient")
      EXPECT_EQ(EventLabel(e), StrCat("gradient of ", j["name"].get<std::string>()));
  }
  EXPECT_GT(two_argument_ops, 0);
  EXPECT_EQ(kinds.size(), 8u) << "the sample holds every kind";

  const TraceText rec_text = ReadSource("tests/fuzz/corpus/recording/seed-meshes");
  nlohmann::json rec_json = nlohmann::json::parse(rec_text.text);
  const Recording rec = RecordingFromText(rec_text);
  int64_t ops = 0;
  ASSERT_TRUE(rec.events.has_value());
  for (const auto& [rank, events] : *rec.events) {
    const nlohmann::json& list = rec_json["events"][std::to_string(rank)];
    ASSERT_EQ(events.size(), list.size());
    for (size_t i = 0; i < events.size(); ++i) {
      const RunEvent& e = events[i];
      const nlohmann::json& j = list[i];
      EXPECT_EQ(ToString(e.kind), j["kind"]);
      EXPECT_EQ(e.pass, j["pass"]);
      if (j["kind"] == "op") {
        ++ops;
        EXPECT_EQ(PlacementsText(e), StrCat(joined(j["args"]), " -> ", joined(j["results"])));
        EXPECT_EQ(EventLabel(e),
                  StrCat(j["op"].get<std::string>(), " in ", j["module"].get<std::string>(), " (",
                         j["pass"].get<std::string>(), ")",
                         j.value("line", "").empty() ? "" : " at " + j["line"].get<std::string>()));
      }
    }
  }
  EXPECT_GT(ops, 0);

  // A recording's events are ops and collectives: a module boundary in one is refused.
  nlohmann::json& first = rec_json["events"].begin().value()[0];
  first["kind"] = "module_begin";
  try {
    RunEventsFromJson(JsonReader(rec_json["events"], "events"), rec.world_size);
    ADD_FAILURE() << "a recording with a module_begin event was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown event kind 'module_begin' (op or collective)"),
              std::string::npos)
        << e.what();
  }
}

// The C++ writer of recordings (ToJson(Recording)) writes what dtsim's Python writers wrote, key
// for key: recordings of dtsim.record (redistributions with their data entries, events with
// digests, memory) and of dtsim run --trace, as those writers left them in the fuzz corpus. Two
// seeds are of older forms, and differ by exactly what changed since: a redistribution without
// "data_after" (written as null now), and Flight Recorder events with an absolute "time_ns" that
// nothing read.
TEST(RecordingWriterTest, WritesWhatThePythonWritersWroteKeyForKey) {
  struct Seed {
    const char* name;
    const char* older;  // the JSON patch from the seed to what is written now ("": none)
  };
  const std::string no_time_ns = [] {
    nlohmann::json patch = nlohmann::json::array();
    for (int rank = 0; rank < 4; ++rank)
      for (int i = 0; i < 2; ++i)
        patch.push_back({{"op", "remove"}, {"path", StrCat("/events/", rank, "/", i, "/time_ns")}});
    return patch.dump();
  }();
  const Seed seeds[] = {
      {"seed-local-mlp", ""},
      {"seed-local-mlp-compact", ""},
      {"seed-events", ""},
      {"seed-events-timed", ""},
      {"seed-memory", ""},
      {"seed-meshes", R"([{"op":"add","path":"/redistributions/0/data_after","value":null}])"},
      {"seed-flight-recorder", no_time_ns.c_str()},
  };
  for (const Seed& seed : seeds) {
    const TraceText text = ReadSource(StrCat("tests/fuzz/corpus/recording/", seed.name).c_str());
    const nlohmann::json original = nlohmann::json::parse(text.text);
    const nlohmann::json written = ToJson(RecordingFromText(text));
    const nlohmann::json patch = nlohmann::json::diff(original, written);
    EXPECT_EQ(patch, *seed.older ? nlohmann::json::parse(seed.older) : nlohmann::json::array())
        << seed.name;
    // Written once more: unchanged.
    const TraceText again = TraceTextOf(StrCat(seed.name, " (written back)"), written.dump());
    EXPECT_TRUE(ToJson(RecordingFromText(again)) == written) << seed.name;
  }
}

// Fields only some writers set, and the rows a recording's writer marks: unavailable hashes (a
// redistribution's rank and an event's digest), a collective's list-valued buffer (a null shape),
// a failed collective's reason, a race, a submesh, Flight Recorder ranks. Each is read, written
// back as it was, and read again to the same.
TEST(RecordingWriterTest, EveryOptionalFieldComesBackAsItWas) {
  nlohmann::json doc =
      nlohmann::json::parse(ReadSource("tests/fuzz/corpus/recording/seed-local-mlp").text);
  nlohmann::json& red = doc["redistributions"][0];
  red["ranks_before"][1]["hash"] = nullptr;
  red["ranks_before"][1]["unavailable"] = "storage not allocated";
  red["start_us"] = {{"0", 1.5}, {"1", 2.5}, {"2", 3.5}, {"3", 4.5}};
  red["collectives"] =
      nlohmann::json::array({{{"op", "all_gather"},
                              {"groups", {{0, 1, 2, 3}}},
                              {"ranks", {0, 1, 2, 3}},
                              {"input_shapes", {{8}, nullptr, {8}, {8}}},
                              {"output_shapes", {{32}, {32}, nullptr, {32}}},
                              {"input_bytes", {32, 64, 32, 32}},
                              {"output_bytes", {128, 128, 256, 128}},
                              {"input_hashes", {Hash(1), Hash(2), Hash(3), Hash(4)}},
                              {"output_hashes", {Hash(5), Hash(5), Hash(5), Hash(5)}}}});
  doc["meta"]["missing_ranks"] = {3};
  doc["meta"]["truncated_ranks"] = {0, 2};
  doc["meta"]["fr_version"] = "2.10";
  doc["meta"]["memory_source"] = "dtsim run";
  doc["memory"] = {{"0",
                    {{{"module", "MLP"}, {"pass", "forward"}, {"at", "begin"}, {"bytes", 10}},
                     {{"module", "MLP"},
                      {"pass", "forward"},
                      {"at", "end"},
                      {"bytes", 12},
                      {"peak", 40},
                      {"t_us", 7.25}}}}};
  doc["meshes"] = {{{0, 1}, {2, 3}}};
  const nlohmann::json digest = {{"shape", {2}}, {"dtype", "float32"}, {"hash", Hash(1)}};
  nlohmann::json meta_digest = {{"shape", {2}}, {"dtype", "float32"}, {"hash", nullptr}};
  meta_digest["unavailable"] = "meta tensor";
  doc["events"] = {
      {"1",
       {{{"kind", "op"},
         {"op", "aten.mm.default"},
         {"module", "MLP.fc1"},
         {"pass", "backward"},
         {"line", "train.py:3"},
         {"args", {"[R, S(0)]"}},
         {"results", {"[R, S(0)]"}},
         {"mesh", 0},
         {"inputs", {digest, meta_digest}},
         {"outputs", {digest}},
         {"t_us", 1.0},
         {"dur_us", 2.0}},
        {{"kind", "collective"},
         {"op", "all_reduce"},
         {"module", "Global"},
         {"pass", "forward"},
         {"line", ""},
         {"group", {0, 1}},
         {"inputs", {digest}},
         {"outputs", nullptr},
         {"unavailable", "its work failed"},
         {"seq", 4},
         {"state", "started"},
         {"written", true},
         {"at", "end"},
         {"read_before_wait", {{"op", "aten.add.Tensor"}, {"line", "train.py:9"}}},
         {"from",
          {{{"event", 0}, {"op", "fsdp.split_with_sizes_copy.default"}, {"line", "train.py:5"}}}},
         {"first_read",
          {{"op", "aten.mul.Tensor"}, {"line", "train.py:6"}, {"outputs", {digest}}}}},
        {{"kind", "op"},
         {"op", "aten.add.Tensor"},
         {"module", "MLP"},
         {"pass", "forward"},
         {"line", "train.py:7"},
         {"args", {"[R]", "[R]"}},
         {"results", {"[R]"}},
         {"inputs", {digest, digest}},
         {"outputs", {digest}},
         {"from", {1, nullptr}}}}}};
  const TraceText text = TraceTextOf("optional fields", doc.dump());
  const nlohmann::json written = ToJson(RecordingFromText(text));
  EXPECT_EQ(nlohmann::json::diff(doc, written), nlohmann::json::array());
  const nlohmann::json from_dom = ToJson(RecordingFromJson(doc));
  EXPECT_EQ(nlohmann::json::diff(doc, from_dom), nlohmann::json::array());
}

// ---- consistency inside one run: CheckReplicas (dtsim trace-diff RECORDING) ----

RunEvent OpEvent(const std::string& op, int64_t mesh, std::vector<std::string> args,
                 std::vector<std::string> results, std::vector<std::string> in_hashes,
                 std::vector<std::string> out_hashes) {
  RunEvent e;
  e.op = op;
  e.module = "Block";
  e.pass = "forward";
  e.mesh = mesh;
  e.args = std::move(args);
  e.results = std::move(results);
  for (const std::string& h : in_hashes)
    e.inputs.push_back({{4}, "float32", h, std::nullopt, std::nullopt});
  e.outputs.emplace();
  for (const std::string& h : out_hashes)
    e.outputs->push_back({{4}, "float32", h, std::nullopt, std::nullopt});
  return e;
}

// Replica sets from the placements, by hand: on mesh [0, 1, 2, 3] an argument [R] is one replica
// on all four ranks; on mesh [[0, 1], [2, 3]] a result [R, S(0)] has the replicas {0, 2} and
// {1, 3} (equal tp coordinate), [S(0), S(0)] none. A planted odd hash is named at its rank and
// event, by cause; a two-rank set that disagrees names both (no majority); a rank that ran
// another op is a structural divergence; an op without a mesh is not checked.
TEST(ReplicaCheckTest, OddRanksOutAreNamedFromThePlacements) {
  const std::vector<DeviceMesh> meshes = {DeviceMesh::Create({4}), DeviceMesh::Create({2, 2})};
  RunEvents events;
  for (int64_t r = 0; r < 4; ++r) {
    // Op 0 of mesh 0: rank 3's replicated argument was written (hash 9): input.
    events[r].push_back(OpEvent("aten.mm.default", 0, {"[S(0)]", "[R]"}, {"[S(0)]"},
                                {Hash(r), Hash(r == 3 ? 9 : 5)}, {Hash(r + 4)}));
    // Op 0 of mesh 1: rank 2's result differs from its replica rank 0's; arguments have none.
    events[r].push_back(OpEvent("aten.add.Tensor", 1, {"[S(0), S(0)]"}, {"[R, S(0)]"}, {Hash(r)},
                                {Hash(r == 2 ? 8 : r % 2)}));
    // No mesh: not checked.
    RunEvent e = OpEvent("aten.relu.default", 0, {"[R]"}, {"[R]"}, {Hash(1)}, {Hash(1)});
    e.mesh.reset();
    events[r].push_back(e);
  }
  const ReplicaCheck c = CheckReplicas(events, meshes);
  EXPECT_EQ(c.ops, 2);
  EXPECT_EQ(c.not_checked, 4);
  EXPECT_EQ(c.tensors, 3);  // mm's argument 1; add's result on {0, 2} and on {1, 3}
  EXPECT_EQ(c.odd, 2);
  ASSERT_EQ(c.first.size(), 3u);
  EXPECT_EQ(c.first[0].rank, 3);
  EXPECT_EQ(c.first[0].index, 0);
  EXPECT_EQ(c.first[0].cause, EventDivergence::Cause::kInput);
  EXPECT_NE(c.first[0].what.find("argument 1 ([R]): rank 3 holds " + Hash(9) +
                                 ", its replicas (ranks [0, 1, 2]) hold " + Hash(5)),
            std::string::npos)
      << c.first[0].what;
  for (int i : {1, 2}) {
    EXPECT_EQ(c.first[i].index, 1);
    EXPECT_EQ(c.first[i].cause, EventDivergence::Cause::kComputed);
    EXPECT_NE(c.first[i].what.find("no hash held by most"), std::string::npos) << c.first[i].what;
  }
  EXPECT_EQ(c.first[1].rank, 0);
  EXPECT_EQ(c.first[2].rank, 2);

  // Equal replicas: nothing to name. Another op on rank 1: a structural divergence there.
  RunEvents clean = events;
  clean[3][0].inputs[1].hash = Hash(5);
  clean[2][1].outputs->at(0).hash = Hash(0);
  EXPECT_TRUE(CheckReplicas(clean, meshes).first.empty());
  clean[1][0].op = "aten.bmm.default";
  const ReplicaCheck s = CheckReplicas(clean, meshes);
  ASSERT_EQ(s.first.size(), 1u);
  EXPECT_EQ(s.first[0].rank, 1);
  EXPECT_EQ(s.first[0].cause, EventDivergence::Cause::kStructure);
}

INSTANTIATE_TEST_SUITE_P(Drivers, Conformance, ::testing::ValuesIn(kSamples),
                         [](const ::testing::TestParamInfo<Sample>& info) {
                           std::string name = info.param.format;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// ---- two runs' events compared one rank at a time (trace-diff of two recordings) ----

// Two runs of 10 ranks (8 in each) whose events differ in one way per rank, each cause once.
std::pair<RunEvents, RunEvents> RunsWithEveryCause() {
  RunEvents a, b;
  for (int64_t r = 0; r < 8; ++r) {
    std::vector<RunEvent>& xs = a[r];
    for (int i = 0; i < 8; ++i) {
      RunEvent e =
          OpEvent("aten.mm.default", 0, {"[S(0)]"}, {"[S(0)]"}, {Hash(i + 1)}, {Hash(i + 2)});
      if (i % 4 == 3) {
        e.kind = RunEvent::Kind::kCollective;
        e.op = "all_reduce";
        e.mesh.reset();
        e.args.clear();
        e.results.clear();
        e.group = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
      }
      xs.push_back(e);
    }
    b[r] = xs;
  }
  b[1][3].outputs->at(0).hash = Hash(9);  // computed: a collective's output, its input equal
  b[1][6].outputs->at(0).hash = Hash(9);  // and after it
  b[2][2].inputs[0].hash = Hash(9);       // input
  b[3][5].op = "aten.add.Tensor";         // structure
  b[4].resize(6);                         // length
  b[5][1].read_before_wait = RunEvent::Read{"aten.add.Tensor", "train.py:7"};  // race in one run
  a[6][3].read_before_wait = b[6][3].read_before_wait = RunEvent::Read{"aten.mul.Tensor", ""};
  for (RunEvents* run : {&a, &b}) {  // rank 0: equal within float32 rounding, and one output unseen
    TensorDigest& d = (*run)[0][4].outputs->at(0);
    d.hash = run == &a ? Hash(7) : Hash(8);
    d.sketch = run == &a ? 1.0 : 1.00001;
    d.scale = 10.0;
  }
  b[0][5].outputs.reset();
  a[8] = a[0];  // only in the first run
  b[9] = b[0];  // only in the second
  return {a, b};
}

TEST(EventDiffTest, RankByRankAgreesWithTheWholeRunsOnEveryCause) {
  const auto [a, b] = RunsWithEveryCause();
  const EventDiff whole = DiffRunEvents(a, b);
  auto ranks = [](const RunEvents& run) {
    std::vector<int64_t> out;
    for (const auto& entry : run) out.push_back(entry.first);
    return out;
  };
  std::vector<int64_t> asked;
  const EventDiff by_rank = DiffRunEventsByRank(ranks(a), ranks(b), [&](int64_t rank) {
    asked.push_back(rank);
    return RankEventsPair(a.count(rank) ? a.at(rank) : std::vector<RunEvent>{},
                          b.count(rank) ? b.at(rank) : std::vector<RunEvent>{});
  });
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // The planted differences, each found (by the whole comparison, which the rank-by-rank one must
  // then equal field for field).
  using Cause = EventDivergence::Cause;
  std::vector<std::tuple<int64_t, int64_t, Cause>> firsts;
  for (const EventDivergence& d : whole.first) firsts.emplace_back(d.rank, d.index, d.cause);
  EXPECT_EQ(firsts, (std::vector<std::tuple<int64_t, int64_t, Cause>>{{5, 1, Cause::kRace},
                                                                      {2, 2, Cause::kInput},
                                                                      {1, 3, Cause::kComputed},
                                                                      {3, 5, Cause::kStructure},
                                                                      {4, 6, Cause::kLength}}));
  EXPECT_EQ(whole.ranks_only_in_a, std::vector<int64_t>{8});
  EXPECT_EQ(whole.ranks_only_in_b, std::vector<int64_t>{9});
  EXPECT_EQ(whole.rounded, 1);
  EXPECT_EQ(whole.not_checked, 1);
  EXPECT_EQ(whole.races_in_both.size(), 1u);
  ASSERT_EQ(by_rank.first.size(), whole.first.size());
  for (size_t i = 0; i < whole.first.size(); ++i) {
    EXPECT_EQ(by_rank.first[i].rank, whole.first[i].rank);
    EXPECT_EQ(by_rank.first[i].index, whole.first[i].index);
    EXPECT_EQ(by_rank.first[i].cause, whole.first[i].cause);
    EXPECT_EQ(by_rank.first[i].where, whole.first[i].where);
    EXPECT_EQ(by_rank.first[i].what, whole.first[i].what);
  }
  EXPECT_EQ(by_rank.compared, whole.compared);
  EXPECT_EQ(by_rank.rounded, whole.rounded);
  EXPECT_EQ(by_rank.not_checked, whole.not_checked);
  EXPECT_EQ(by_rank.differing, whole.differing);
  EXPECT_EQ(by_rank.differing_by_rank, whole.differing_by_rank);
  EXPECT_EQ(by_rank.ranks_only_in_a, whole.ranks_only_in_a);
  EXPECT_EQ(by_rank.ranks_only_in_b, whole.ranks_only_in_b);
  ASSERT_EQ(by_rank.races_in_both.size(), whole.races_in_both.size());
  EXPECT_EQ(by_rank.races_in_both[0].what, whole.races_in_both[0].what);
}

// Provenance: an op's input that differs while everything before agreed names the event that last
// wrote its storage, from each run's "from", with the plain op that copied it since; for a
// collective, whether its output changed after it completed (its first read against its digest at
// completion) in each run; for an op, that this is not checked.
TEST(EventDiffTest, AnInputsLastProducerIsNamedWithWhetherItChangedAfterCompleting) {
  RunEvents a, b;
  RunEvent gather = OpEvent("all_gather", 0, {}, {}, {Hash(1)}, {Hash(2)});
  gather.kind = RunEvent::Kind::kCollective;
  gather.mesh.reset();
  gather.group = {0, 1};
  gather.line = "t.py:2";
  RunEvent mm =
      OpEvent("aten.mm.default", 0, {"[R]", "[R]"}, {"[R]"}, {Hash(3), Hash(2)}, {Hash(4)});
  mm.line = "t.py:3";
  RunEvent relu = OpEvent("aten.relu.default", 0, {"[R]"}, {"[R]"}, {Hash(4)}, {Hash(5)});
  a[0] = {gather, mm, relu};
  b[0] = a[0];
  a[0][0].first_read =
      RunEvent::FirstRead{"fsdp.split_with_sizes_copy.default", "t.py:2", *a[0][0].outputs};
  b[0][0].first_read = a[0][0].first_read;
  b[0][0].first_read->outputs[0].hash = Hash(9);  // changed after it completed, in b only
  for (RunEvents* run : {&a, &b}) {
    (*run)[0][1].from = {std::nullopt,
                         RunEvent::Source{0, "fsdp.split_with_sizes_copy.default", "t.py:2"}};
    (*run)[0][2].from = {RunEvent::Source{1, "", ""}};
  }
  b[0][1].inputs[1].hash = Hash(9);
  EventDiff diff = DiffRunEvents(a, b);
  ASSERT_EQ(diff.first.size(), 1u);
  EXPECT_EQ(diff.first[0].cause, EventDivergence::Cause::kInput);
  EXPECT_EQ(diff.first[0].index, 1);
  const std::string& what = diff.first[0].what;
  for (const std::string& part :
       {std::string("its storage was last written by event 0, all_gather over [0, 1] in Block "
                    "(forward) at t.py:2, then fsdp.split_with_sizes_copy.default at t.py:2 (in "
                    "both runs)"),
        StrCat("in the first run, its output was unchanged at its first read, by "
               "fsdp.split_with_sizes_copy.default at t.py:2; in the second, its output changed "
               "after it completed: ",
               Hash(2), " at completion, ", Hash(9), " at its first read")}) {
    EXPECT_NE(what.find(part), std::string::npos) << part << "\n" << what;
  }
  // The producer's own outputs differ between the runs, written in place before their digest.
  {
    RunEvents c = a, d = b;
    d[0][0].outputs->at(0).hash = Hash(8);
    d[0][0].written = true;
    const EventDiff written = DiffRunEvents(c, d);
    ASSERT_EQ(written.first.size(), 1u);
    EXPECT_NE(written.first[0].what.find(
                  "(in both runs); that event's outputs differ between the runs (written in place "
                  "before their digest: not counted as its divergence)"),
              std::string::npos)
        << written.first[0].what;
  }
  // Without a first read: not checked, never "unchanged".
  a[0][0].first_read.reset();
  diff = DiffRunEvents(a, b);
  ASSERT_EQ(diff.first.size(), 1u);
  EXPECT_NE(diff.first[0].what.find("in the first run, whether its output changed after it "
                                    "completed is not checked"),
            std::string::npos)
      << diff.first[0].what;
  // An op as the producer: its results are not digested again.
  b[0][1].inputs[1].hash = Hash(2);
  b[0][2].inputs[0].hash = Hash(9);
  diff = DiffRunEvents(a, b);
  ASSERT_EQ(diff.first.size(), 1u);
  EXPECT_EQ(diff.first[0].index, 2);
  EXPECT_NE(diff.first[0].what.find("last written by event 1, aten.mm.default in Block (forward) "
                                    "at t.py:3 (in both runs); in both runs, whether its results "
                                    "changed after the op is not checked"),
            std::string::npos)
      << diff.first[0].what;
  EXPECT_EQ(SourceText(a[0], 2, 0),
            "its storage was last written by event 1, aten.mm.default in Block (forward) at "
            "t.py:3; whether its results changed after the op is not checked (an op's results "
            "are not digested again)");
  EXPECT_EQ(SourceText(a[0], 1, 0), "");  // no producer recorded
}

// A recording of the runs above as a file (world of 10, one 1-D mesh of all ranks).
TraceText RecordingText(const RunEvents& events, const std::string& name) {
  nlohmann::json doc =
      nlohmann::json::parse(ReadSource("tests/fuzz/corpus/recording/seed-local-mlp").text);
  doc["redistributions"] = nlohmann::json::array();
  doc["meta"]["world_size"] = 10;
  doc["meta"]["data"] = false;
  doc["meta"]["data_file"] = nullptr;
  doc["meshes"] = {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  doc["events"] = RunEventsToJson(events);
  return TraceTextOf(name, doc.dump());
}

// The driver reads two recordings one rank at a time: its verdict names the planted differences,
// and a problem in either file is the one reading that file whole names first.
TEST(EventDiffTest, TheRecordingDriverNamesEveryCauseAndEveryFilesFirstProblem) {
  const auto [a, b] = RunsWithEveryCause();
  TraceText ta = RecordingText(a, "a.json"), tb = RecordingText(b, "b.json");
  const TraceFormatDriver& driver = TraceFormatDriverFor(ta, tb);
  std::ostringstream out;
  EXPECT_EQ(driver.diff(ta, tb, {}, out), 1);
  const std::string text = out.str();
  EXPECT_NE(text.find("recordings differ; first at rank 5, event 1"), std::string::npos) << text;
  for (const char* line :
       {"rank 2, event 2 (input)", "rank 1, event 3 (computed)", "rank 3, event 5 (structure)",
        "rank 4, event 6 (length)", "rank 8: events only in the first",
        "rank 9: events only in the second", "race in the program: rank 6, event 3"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  std::ostringstream self;
  TraceText ta2 = ta;
  EXPECT_EQ(driver.diff(ta, ta2, {}, self), 0) << self.str();

  // Problems: an event the fast path and the DOM reader refuse, a mesh that is not the recording's,
  // a rank outside the world, each in the second file after a good rank.
  auto with = [&](const char* what, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json doc = nlohmann::json::parse(tb.text);
    edit(doc);
    TraceText bad = TraceTextOf(StrCat("bad-", what, ".json"), doc.dump());
    std::string whole_error, driver_error;
    try {
      RecordingFromText(bad);
    } catch (const InputError& e) {
      whole_error = e.what();
    }
    try {
      std::ostringstream ignored;
      TraceText first = ta;
      driver.diff(first, bad, {}, ignored);
    } catch (const InputError& e) {
      driver_error = e.what();
    }
    EXPECT_FALSE(whole_error.empty()) << what;
    EXPECT_EQ(driver_error, whole_error) << what;
  };
  with("pass", [](nlohmann::json& d) { d["events"]["3"][2]["pass"] = "sideways"; });
  with("mesh", [](nlohmann::json& d) { d["events"]["4"][1]["mesh"] = 5; });
  with("rank", [](nlohmann::json& d) { d["events"]["12"] = d["events"]["0"]; });
  // Provenance that names no earlier event, or not one per input; a first read of an op.
  with("from-later", [](nlohmann::json& d) { d["events"]["3"][2]["from"] = {2}; });
  with("from-first", [](nlohmann::json& d) { d["events"]["3"][0]["from"] = {0}; });
  with("from-count", [](nlohmann::json& d) { d["events"]["3"][2]["from"] = {0, 1}; });
  with("from-kind", [](nlohmann::json& d) { d["events"]["3"][2]["from"] = {"0"}; });
  with("from-op", [](nlohmann::json& d) {
    d["events"]["3"][2]["from"] = {{{"event", 1}, {"op", ""}}};
  });
  with("first-read-of-op", [](nlohmann::json& d) {
    d["events"]["3"][2]["first_read"] = {{"op", "aten.mul.Tensor"},
                                         {"outputs", d["events"]["3"][2]["outputs"]}};
  });
  with("both", [](nlohmann::json& d) {
    d["events"]["7"][0]["kind"] = "opp";
    d["events"]["1"][4]["mesh"] = 3;
  });
}

}  // namespace
}  // namespace dtsim
