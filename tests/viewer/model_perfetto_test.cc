// The Perfetto export of model traces (model_perfetto.h): on every exported rank's track the slices
// nest strictly (a child starts after and ends before its parent, siblings never touch — what
// Perfetto and chrome://tracing need to draw a stack), every event of the trace is there once
// (module calls, backward, ops, each collective of each op, standalone collectives, parameters,
// loss, gradients) in the right parent, collectives too long for their op are scaled to fit, and
// large worlds export a documented sample of ranks.
#include "dtsim/trace/model_perfetto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "dtsim/trace/perfetto.h"
#include "model_trace_support.h"
#include "test_support.h"

namespace dtsim::viewer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeModelTrace;

std::string Data(const std::string& name) {
  return std::string(DTSIM_SOURCE_DIR) + "/tests/viewer/data/" + name;
}

ModelTrace Valid(const ModelTrace& t) { return ModelTraceFromJson(ToJson(t)); }

ModelTrace ReadModel(const std::string& path) {
  return ModelTraceFromJson(testing::ReadJson(path));
}

// Times in whole nanoseconds (the export writes microseconds with at most 3 decimals).
int64_t Ns(const nlohmann::json& us) { return std::llround(us.get<double>() * 1000.0); }

struct Track {
  std::vector<nlohmann::json> slices;  // in file order
};

// Checks one track: file order is pre-order (a parent before its children), every slice lies
// strictly inside the enclosing one, siblings leave a gap. Returns each slice's parent (index into
// slices, -1 for the phases).
std::vector<int64_t> CheckNesting(const Track& track, const std::string& where) {
  std::vector<int64_t> parent(track.slices.size(), -1);
  std::vector<size_t> stack;                // the open slices, outermost first
  std::vector<int64_t> sibling_end = {-1};  // per level: the end of its last slice (-1: none)
  for (size_t i = 0; i < track.slices.size(); ++i) {
    const nlohmann::json& s = track.slices[i];
    const int64_t ts = Ns(s["ts"]), end = ts + Ns(s["dur"]);
    EXPECT_GE(end, ts);
    while (!stack.empty()) {
      const nlohmann::json& top = track.slices[stack.back()];
      if (ts < Ns(top["ts"]) + Ns(top["dur"])) break;
      stack.pop_back();
      sibling_end.pop_back();
    }
    if (!stack.empty()) {
      const nlohmann::json& p = track.slices[stack.back()];
      const int64_t pts = Ns(p["ts"]), pend = pts + Ns(p["dur"]);
      EXPECT_GT(ts, pts) << where << ": " << s.dump() << " starts with its parent " << p.dump();
      EXPECT_LT(end, pend) << where << ": " << s.dump() << " ends outside " << p.dump();
      parent[i] = static_cast<int64_t>(stack.back());
    }
    if (sibling_end.back() >= 0) {
      EXPECT_GT(ts, sibling_end.back())
          << where << ": " << s.dump() << " touches or overlaps its previous sibling";
    }
    sibling_end.back() = end;
    stack.push_back(i);
    sibling_end.push_back(-1);
  }
  return parent;
}

// The export of `sources` by pid and thread.
std::map<int64_t, Track> Tracks(const nlohmann::json& doc) {
  std::map<int64_t, Track> tracks;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] == "X") {
      EXPECT_EQ(e["tid"], 1);
      tracks[e["pid"].get<int64_t>()].slices.push_back(e);
    }
  }
  return tracks;
}

// Every event of `trace` on `track` of `rank`, once, in the parent it belongs in.
void CheckEveryEvent(const ModelTrace& trace, const Track& track, int64_t rank,
                     const std::string& where) {
  const std::vector<int64_t> parent = CheckNesting(track, where);
  std::map<std::pair<int64_t, int64_t>, size_t> found;  // (event, collective or -1) -> slice
  for (size_t i = 0; i < track.slices.size(); ++i) {
    const nlohmann::json& s = track.slices[i];
    if (s["cat"] == "phase") continue;
    const int64_t event = s["args"]["event"];
    const bool nested = s["cat"] == "collective" && trace.events[event].kind == RunEvent::Kind::kOp;
    int64_t collective = -1;
    if (nested) {
      // Which of the op's collectives: the k-th child of its op slice.
      collective = 0;
      for (size_t j = parent[i] + 1; j < i; ++j) collective += parent[j] == parent[i];
    }
    EXPECT_TRUE(found.emplace(std::make_pair(event, collective), i).second)
        << where << ": event " << event << " twice";
  }
  auto in_group = [&](const CollectiveEvent& c) {
    if (c.groups.empty()) return true;
    for (const auto& g : c.groups) {
      if (std::find(g.begin(), g.end(), rank) != g.end()) return true;
    }
    return false;
  };
  for (size_t e = 0; e < trace.events.size(); ++e) {
    const RunEvent& ev = trace.events[e];
    const auto event = static_cast<int64_t>(e);
    if (ev.kind == RunEvent::Kind::kModuleEnd) continue;  // the end of its begin's slice
    if (ev.kind == RunEvent::Kind::kCollective && !in_group(ev.collectives[0])) continue;
    const auto it = found.find({event, -1});
    ASSERT_NE(it, found.end()) << where << ": event " << e << " (" << EventLabel(ev) << ") missing";
    const nlohmann::json& s = track.slices[it->second];
    if (ev.kind == RunEvent::Kind::kModuleBegin || ev.kind == RunEvent::Kind::kBackwardBegin) {
      EXPECT_EQ(s["name"], ev.module);
      EXPECT_EQ(s["cat"], "module");
    }
    if (ev.kind == RunEvent::Kind::kOp) {
      EXPECT_EQ(s["name"], ev.op);
      EXPECT_EQ(s["args"]["placements"], PlacementsText(ev));
      for (size_t k = 0; k < ev.collectives.size(); ++k) {
        const auto c = found.find({event, static_cast<int64_t>(k)});
        if (!in_group(ev.collectives[k])) continue;
        ASSERT_NE(c, found.end()) << where << ": collective " << k << " of event " << e;
        EXPECT_EQ(parent[c->second], static_cast<int64_t>(it->second));
        const nlohmann::json& a = track.slices[c->second]["args"];
        EXPECT_EQ(a["kind"], std::string(ToString(ev.collectives[k].kind)));
        EXPECT_EQ(a["cause"], ev.collectives[k].cause);
        EXPECT_EQ(a["implicit"], ev.collectives[k].implicit);
        EXPECT_EQ(a["groups"], ev.collectives[k].groups.size());
        EXPECT_EQ(a["bytes_sent"], ev.collectives[k].max_bytes_sent);
        EXPECT_THAT(a["group"].get<std::vector<int64_t>>(), ::testing::Contains(rank));
      }
    }
    // Op, collective and module events sit in the slice of the module they belong to.
    if (ev.kind == RunEvent::Kind::kOp || ev.kind == RunEvent::Kind::kCollective) {
      ASSERT_GE(parent[it->second], 0);
      EXPECT_EQ(track.slices[parent[it->second]]["name"], ev.module) << where << " event " << e;
    }
    if (ev.tensor && rank < static_cast<int64_t>(ev.tensor->hashes.size())) {
      const char* key = ev.kind == RunEvent::Kind::kModuleBegin     ? "input"
                        : ev.kind == RunEvent::Kind::kBackwardBegin ? "output_gradient"
                                                                    : "tensor";
      EXPECT_EQ(s["args"][key]["hash"], ev.tensor->hashes[rank]) << where << " event " << e;
      EXPECT_EQ(s["args"][key]["placements"], ev.tensor->placements);
    }
  }
}

TEST(ModelPerfettoTest, SlicesNestStrictlyAndEveryEventIsThere) {
  // Synthetic: equal times every third event, a collective far longer than its op.
  const ModelTrace t = Valid(MakeModelTrace({2, 4}, {"dp", "tp"}, 2));
  const nlohmann::json doc = ModelTraceToPerfetto({{&t, ""}});
  const auto tracks = Tracks(doc);
  ASSERT_EQ(tracks.size(), 8u);
  for (const auto& [pid, track] : tracks)
    CheckEveryEvent(t, track, pid - 1, StrCat("synthetic rank ", pid - 1));
  // The real runs (simulated and MPI).
  for (const char* name : {"model_fsdp_tp_2x4_sim.json", "model_fsdp_tp_2x4_real_fault.json"}) {
    const ModelTrace real = ReadModel(Data(name));
    const auto real_tracks = Tracks(ModelTraceToPerfetto({{&real, ""}}));
    ASSERT_EQ(real_tracks.size(), 8u);
    for (const auto& [pid, track] : real_tracks)
      CheckEveryEvent(real, track, pid - 1, StrCat(name, " rank ", pid - 1));
  }
}

TEST(ModelPerfettoTest, ModulesSpanTheirCallsAndBackwardHoldsTheChildren) {
  const ModelTrace t = Valid(MakeModelTrace({4}, {"tp"}, 2));
  const auto tracks = Tracks(ModelTraceToPerfetto({{&t, ""}}));
  const Track& track = tracks.at(1);
  const std::vector<int64_t> parent = CheckNesting(track, "rank 0");
  std::vector<std::string> phases;
  std::map<std::string, std::vector<size_t>> by_name;
  for (size_t i = 0; i < track.slices.size(); ++i) {
    if (track.slices[i]["cat"] == "phase") phases.push_back(track.slices[i]["name"]);
    by_name[track.slices[i]["name"]].push_back(i);
  }
  EXPECT_THAT(phases, ElementsAre("setup", "forward", "backward", "end"));
  // layers.1.mlp: a forward call and a backward slice; the backward one lies in layers.1's
  // backward, which lies in Model's.
  ASSERT_EQ(by_name["layers.1.mlp"].size(), 2u);
  const size_t fwd = by_name["layers.1.mlp"][0], bwd = by_name["layers.1.mlp"][1];
  EXPECT_EQ(track.slices[fwd]["args"]["pass"], "forward");
  EXPECT_EQ(track.slices[bwd]["args"]["pass"], "backward");
  EXPECT_EQ(track.slices[parent[bwd]]["name"], "layers.1");
  EXPECT_EQ(track.slices[parent[parent[bwd]]]["name"], "Model");
  EXPECT_EQ(track.slices[parent[parent[parent[bwd]]]]["name"], "backward");
  // The forward call's args: input and output with rank 0's hashes, its collectives.
  const nlohmann::json& a = track.slices[fwd]["args"];
  EXPECT_EQ(a["type"], "MLP");
  EXPECT_TRUE(a["input"].contains("hash"));
  EXPECT_TRUE(a["output"].contains("hash"));
  EXPECT_EQ(a["collectives"], "all_reduce 1, reduce_scatter 1 | 2.00 KiB/rank, 1000008.0 us");
  // The all_reduce of 1e6 us estimated is scaled into its op, which the trace gives 10 us.
  bool scaled = false;
  for (size_t i = 0; i < track.slices.size(); ++i) {
    const nlohmann::json& s = track.slices[i];
    if (s["cat"] != "collective" || s["args"]["kind"] != "all_reduce") continue;
    scaled = true;
    EXPECT_EQ(s["args"]["scaled_to_fit"], true);
    EXPECT_EQ(s["args"]["est_us"], 1e6);
    EXPECT_LT(s["dur"].get<double>(), 10.0);
    EXPECT_EQ(track.slices[parent[i]]["cat"], "op");
  }
  EXPECT_TRUE(scaled);
  // Collectives that fit last est_us; those that do not are scaled together to fit their op.
  int64_t unscaled = 0;
  for (size_t i = 0; i < track.slices.size(); ++i) {
    const nlohmann::json& s = track.slices[i];
    if (s["cat"] != "collective" || track.slices[parent[i]]["cat"] != "op") continue;
    const int64_t est = std::llround(s["args"]["est_us"].get<double>() * 1000);
    if (s["args"]["scaled_to_fit"] == false) {
      EXPECT_EQ(Ns(s["dur"]), est);
      ++unscaled;
    } else {
      EXPECT_LT(Ns(s["dur"]), est);
      EXPECT_EQ(s["args"]["drawn_us"], s["dur"]);
    }
  }
  EXPECT_GT(unscaled, 0);
}

TEST(ModelPerfettoTest, ProcessesAreRanksAndLargeWorldsASample) {
  EXPECT_THAT(ExportedRanks({2, 4}, {}), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  std::string why;
  EXPECT_THAT(ExportedRanks({512, 8}, {}, &why), ElementsAre(0, 1, 7, 8, 4088, 4095));
  EXPECT_THAT(why, HasSubstr("6 of 4096 ranks (more than 64): a sample of 6"));
  EXPECT_THAT(ExportedRanks({16, 16, 16}, {1380, 5}),
              ElementsAre(0, 1, 5, 15, 16, 240, 256, 1380, 3840, 4095));
  std::vector<int64_t> many;
  for (int64_t r = 100; r < 300; ++r) many.push_back(r);
  EXPECT_EQ(ExportedRanks({512, 8}, many).size(), 64u);
  // A 4,096-rank metadata trace: 6 processes named by rank and coordinate, the selection said.
  const ModelTrace big = Valid(MakeModelTrace({512, 8}, {"dp", "tp"}, 1, /*data=*/false));
  const nlohmann::json doc = ModelTraceToPerfetto({{&big, ""}});
  std::map<int64_t, std::string> names;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
  }
  ASSERT_EQ(names.size(), 6u);
  EXPECT_EQ(names[4096], "rank 4095 [dp=511, tp=7]");
  const nlohmann::json& info = doc["otherData"]["traces"][0];
  EXPECT_EQ(info["ranks_exported"], nlohmann::json({0, 1, 7, 8, 4088, 4095}));
  EXPECT_EQ(info["world_size"], 4096);
  for (const auto& [pid, track] : Tracks(doc))
    CheckEveryEvent(big, track, pid - 1, StrCat("4096 rank ", pid - 1));
}

TEST(ModelPerfettoTest, TwoTracesSideBySideWithTheDifferingRanks) {
  const ModelTrace sim = ReadModel(Data("model_fsdp_tp_2x4_sim.json"));
  const ModelTrace real = ReadModel(Data("model_fsdp_tp_2x4_real_fault.json"));
  const nlohmann::json doc =
      ModelTraceToPerfetto({{&sim, "simulated (local) sim.json"}, {&real, "real (mpi) real.json"}});
  std::map<int64_t, std::string> names;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
  }
  ASSERT_EQ(names.size(), 16u);
  EXPECT_EQ(names[3], "simulated (local) sim.json: rank 2 [dp=0, tp=2]");
  EXPECT_EQ(names[kPerfettoPidStride + 3], "real (mpi) real.json: rank 2 [dp=0, tp=2]");
  // The real run's rank 2 carries its own (wrong) hashes.
  const auto tracks = Tracks(doc);
  CheckEveryEvent(real, tracks.at(kPerfettoPidStride + 3), 2, "real rank 2");
  // A large pair exports the differing ranks beside the sample.
  ModelTrace a = Valid(MakeModelTrace({512, 8}, {"dp", "tp"}, 1));
  ModelTrace b = a;
  for (RunEvent& e : b.events) {
    if (e.kind == RunEvent::Kind::kModuleEnd && e.module == "layers.0.attn") {
      e.tensor->hashes[1380] = testing::FakeHash(0, 0, 9);
      e.tensor->sketches[1380][0] += 5;
    }
  }
  const nlohmann::json pair = ModelTraceToPerfetto({{&a, "a"}, {&b, "b"}});
  EXPECT_EQ(pair["otherData"]["traces"][1]["ranks_exported"],
            nlohmann::json({0, 1, 7, 8, 1380, 4088, 4095}));
  EXPECT_THAT(pair["otherData"]["traces"][1]["rank_selection"].get<std::string>(),
              HasSubstr("and 1 of the 1 ranks whose values differ"));
}

}  // namespace
}  // namespace dtsim::viewer
