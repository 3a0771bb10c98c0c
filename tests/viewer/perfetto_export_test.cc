// Perfetto / Chrome trace-event export: processes per rank, slices with the cost model's or the
// measured times, flows per group. The format itself is validated event by event in
// test_viewer_cli.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "dtsim/trace/perfetto.h"
#include "test_support.h"
#include "viewer/tools/meta_trace.h"

namespace dtsim::viewer {
namespace {

using ::testing::ElementsAre;
using testing::Golden;

std::vector<nlohmann::json> Events(const nlohmann::json& out, const std::string& ph,
                                   const std::string& name = "") {
  std::vector<nlohmann::json> v;
  for (const auto& e : out["traceEvents"]) {
    if (e["ph"] == ph && (name.empty() || e["name"] == name)) v.push_back(e);
  }
  return v;
}

double Ns(double us) { return std::llround(us * 1000) / 1000.0; }

TEST(PerfettoExportTest, SimulatedTraceUsesTheCostModel) {
  const Trace t = ReadTrace(Golden("uneven_2x4_S0R_to_RS1.json"));
  const nlohmann::json out = ToPerfetto({{&t, ""}});
  const auto names = Events(out, "M", "process_name");
  ASSERT_EQ(names.size(), 8u);
  for (const auto& e : names) {
    const int64_t rank = e["pid"].get<int64_t>() - 1;
    EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(rank) +
                                     " [dp=" + std::to_string(rank / 4) +
                                     ", tp=" + std::to_string(rank % 4) + "]");
  }
  // Step 2's all_gather: one slice per rank lasting the plan's estimate, after step 1 (a local
  // split, 0 us).
  const auto gathers = Events(out, "X", "all_gather");
  ASSERT_EQ(gathers.size(), 8u);
  const double est = t.steps[1].plan.est_us;
  for (const auto& e : gathers) {
    EXPECT_DOUBLE_EQ(e["dur"].get<double>(), Ns(est));
    EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.001);  // step 1 ends at 0, plus the 1 ns gap
    EXPECT_EQ(e["tid"], 2);
    EXPECT_EQ(e["args"]["time_source"], "estimated (cost model)");
    const int64_t rank = e["pid"].get<int64_t>() - 1;
    EXPECT_EQ(e["args"]["bytes_sent"], rank % 4 == 3 ? 12 : 36);
    EXPECT_THAT(e["args"]["group"].get<std::vector<int64_t>>(),
                ElementsAre(rank % 4, rank % 4 + 4));
  }
  // Step slices on thread 1 for every rank.
  EXPECT_EQ(Events(out, "X", "step 2: dp(0) S(0) -> R").size(), 8u);
  EXPECT_EQ(Events(out, "X", "step 1: tp(1) R -> S(1)").size(), 8u);
  // One flow per group: s on the first rank, f (bound to the enclosing slice) on the second.
  std::map<int64_t, std::vector<std::string>> flows;
  for (const auto& e : out["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "s" || ph == "t" || ph == "f")
      flows[e["id"]].push_back(ph + std::to_string(e["pid"].get<int64_t>() - 1));
  }
  ASSERT_EQ(flows.size(), 4u);
  std::set<std::vector<std::string>> chains;
  for (const auto& [id, chain] : flows) chains.insert(chain);
  EXPECT_EQ(chains, (std::set<std::vector<std::string>>{
                        {"s0", "f4"}, {"s1", "f5"}, {"s2", "f6"}, {"s3", "f7"}}));
}

TEST(PerfettoExportTest, MeasuredTraceUsesItsTimes) {
  const DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create({2, 4}, {"dp", "tp"}),
                                               ParsePlacements("S(0),S(1)"), {8, 8});
  MetaTraceOptions options;
  options.measured = true;
  const Trace t = MakeMetaTrace(spec, ParsePlacements("R,R"), options);
  const nlohmann::json out = ToPerfetto({{&t, ""}});
  double step_end = 0;
  for (size_t s = 0; s < t.steps.size(); ++s) {
    const CollectiveEvent& c = t.steps[s].collectives.at(0);
    const std::string op(ToString(c.kind));
    double slowest = 0;
    for (size_t i = 0; i < c.ranks.size(); ++i) {
      bool found = false;
      for (const auto& e : Events(out, "X", op)) {
        if (e["pid"] != c.ranks[i] + 1 || e["args"]["step"] != s + 1) continue;
        found = true;
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), Ns(c.time_us[i]));
        EXPECT_EQ(e["args"]["time_source"], "measured");
        EXPECT_NEAR(e["ts"].get<double>(), step_end + (s ? 0.001 : 0), 1e-9);
      }
      EXPECT_TRUE(found) << "step " << s << " rank " << c.ranks[i];
      slowest = std::max(slowest, Ns(c.time_us[i]));
    }
    // The step lasts as long as its slowest rank.
    for (const auto& e : Events(out, "X")) {
      if (e["tid"] == 1 && e["args"]["step"] == s + 1)
        EXPECT_NEAR(e["dur"].get<double>(), slowest, 1e-9);
    }
    step_end += (s ? 0.001 : 0) + slowest;
  }
}

TEST(PerfettoExportTest, TwoTracesSideBySide) {
  const Trace a = ReadTrace(Golden("partial_2x2_Psum_to_S0.json"));
  const Trace b = ReadTrace(Golden("partial_2x2_Psum_to_S0.json"));
  const nlohmann::json out = ToPerfetto({{&a, "simulated"}, {&b, "real"}});
  std::set<int64_t> pids;
  std::set<std::string> names;
  for (const auto& e : Events(out, "M", "process_name")) {
    pids.insert(e["pid"].get<int64_t>());
    names.insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(pids, (std::set<int64_t>{1, 2, 3, 4, kPerfettoPidStride + 1, kPerfettoPidStride + 2,
                                     kPerfettoPidStride + 3, kPerfettoPidStride + 4}));
  EXPECT_TRUE(names.count("simulated: rank 0 [dp=0, tp=0]"));
  EXPECT_TRUE(names.count("real: rank 3 [dp=1, tp=1]"));
  EXPECT_EQ(out["otherData"]["traces"].size(), 2u);
  EXPECT_EQ(BackendLabel(a), "simulated (local)");
}

}  // namespace
}  // namespace dtsim::viewer
