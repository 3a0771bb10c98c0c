// Traces: the golden examples in traces/ are valid and agree with the global tensor (every final shard's hash is the
// hash of its part of the expected global tensor; every step's shapes match its layout); the schema is a contract
// (round trip, unknown versions and broken files refused with a clear error, atomic writes).
#include "dtsim/trace.h"
#include "dtsim/trace_diff.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "dtsim/arange_case.h"
#include "dtsim/error.h"
#include "dtsim/global_view.h"
#include "dtsim/local_tensor.h"

namespace dtsim {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<fs::path> GoldenTraces() {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(fs::path(DTSIM_SOURCE_DIR) / "traces")) {
    if (entry.path().extension() == ".json") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TraceTest, GoldenTracesAgreeWithTheGlobalTensor) {
  const auto files = GoldenTraces();
  ASSERT_GE(files.size(), 3u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    nlohmann::json trace = ReadTrace(file.string());
    EXPECT_TRUE(trace["ok"].get<bool>());
    DTensorSpec initial = SpecFromJson(trace["initial"]["spec"]);
    DTensorSpec final_spec = SpecFromJson(trace["final"]["spec"]);
    // The initial shards are the arange case's source.
    DTensor source = MakeArangeSource(initial);
    for (const auto& r : trace["initial"]["ranks"]) {
      EXPECT_EQ(r["hash"], ShardHash(LocalShard(source.to_local(), r["rank"].get<int64_t>()))) << r.dump();
    }
    // Every step's shards have the shapes its placements give.
    for (const auto& step : trace["steps"]) {
      DTensorSpec after = DTensorSpec::Create(initial.mesh(), ParsePlacements(step["placements_after"].get<std::string>()),
                                              initial.shape(), initial.dtype());
      for (const auto& r : step["ranks_after"]) {
        EXPECT_EQ(r["local_shape"].get<std::vector<int64_t>>(),
                  after.LayoutOfRank(r["rank"].get<int64_t>()).local_shape);
      }
    }
    // The final shards are their parts of the expected global tensor (targets hold no Partial here).
    ASSERT_FALSE(final_spec.has_partial());
    const at::Tensor expected = ExpectedArangeGlobal(initial);
    for (const auto& r : trace["final"]["ranks"]) {
      RankLayout layout = final_spec.LayoutOfRank(r["rank"].get<int64_t>());
      EXPECT_EQ(r["hash"], ShardHash(ShardOf(expected, layout))) << r.dump();
      EXPECT_EQ(r["global_offset"].get<std::vector<int64_t>>(), layout.global_offset);
    }
  }
}

TEST(TraceTest, HashDependsOnValuesShapeAndDtype) {
  at::Tensor a = at::arange(6, at::kFloat);
  EXPECT_EQ(ShardHash(a), ShardHash(a.clone()));
  EXPECT_NE(ShardHash(a), ShardHash(a.reshape({2, 3})));
  EXPECT_NE(ShardHash(a), ShardHash(a.to(at::kDouble)));
  EXPECT_NE(ShardHash(a), ShardHash(a + 1));
  EXPECT_EQ(ShardHash(a.reshape({2, 3}).t()), ShardHash(a.reshape({2, 3}).t().contiguous()));
  EXPECT_THAT(ShardHash(a), ::testing::MatchesRegex("xxh3:[0-9a-f]{16}"));
}

TEST(TraceTest, SchemaIsAContract) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/dtsim_trace_test.json";
  TraceRecorder recorder(nlohmann::json{{"tool", "dtsim"}});
  DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create({2}), ParsePlacements("S(0)"), {4});
  DTensor dt = MakeArangeSource(spec);
  recorder.SetInitial(spec, dt.to_local());
  recorder.SetFinal(spec, dt.to_local(), true);
  WriteJsonFileAtomically(path, recorder.json());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  nlohmann::json back = ReadTrace(path);
  EXPECT_EQ(back, recorder.json());
  EXPECT_EQ(SpecFromJson(back["initial"]["spec"]).ToString(), spec.ToString());

  auto expect_refused = [&](const std::string& text, const std::string& message) {
    {
      std::ofstream out(path);
      out << text;
    }
    try {
      ReadTrace(path);
      ADD_FAILURE() << "accepted: " << text.substr(0, 60);
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "trace");
      EXPECT_THAT(e.what(), HasSubstr(message));
    }
  };
  nlohmann::json future = recorder.json();
  future["version"] = 99;
  expect_refused(future.dump(), "version 99 is not supported");
  nlohmann::json other = recorder.json();
  other["format"] = "chrome-trace";
  expect_refused(other.dump(), "format is \"chrome-trace\"");
  nlohmann::json missing = recorder.json();
  missing.erase("steps");
  expect_refused(missing.dump(), "field 'steps' is missing");
  expect_refused("{\"format\": \"dtsim-trace\", ", "is not valid JSON");
  expect_refused("[1, 2]", "no JSON object");
  EXPECT_THROW(ReadTrace(dir + "/does_not_exist.json"), InputError);
  // A write that cannot happen leaves nothing behind.
  EXPECT_THROW(WriteJsonFileAtomically(dir + "/no/such/dir/t.json", back), InputError);
  EXPECT_FALSE(fs::exists(dir + "/no/such/dir/t.json.tmp"));
}

}  // namespace
}  // namespace dtsim

namespace dtsim {
namespace {

TEST(TraceDiffTest, FindsWhereTwoRunsPart) {
  const std::string path = std::string(DTSIM_SOURCE_DIR) + "/traces/uneven_2x4_S0R_to_RS1.json";
  nlohmann::json a = ReadTrace(path);
  EXPECT_TRUE(DiffTraces(a, a).empty());
  // Plant a wrong shard on rank 5 after step 1 and a different collective op in step 1.
  nlohmann::json b = a;
  b["steps"][1]["ranks_after"][5]["hash"] = "xxh3:0000000000000000";
  b["steps"][1]["collectives"][0]["op"] = "all_to_all";
  std::vector<TraceDifference> diffs = DiffTraces(a, b);
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_THAT(diffs[0].where, HasSubstr("step 1"));
  EXPECT_THAT(diffs[0].what, HasSubstr("op \"all_gather\" vs \"all_to_all\""));
  EXPECT_THAT(diffs[1].what, HasSubstr("rank 5: hash"));
  // A missing step is reported too.
  nlohmann::json c = a;
  c["steps"].erase(1);
  EXPECT_THAT(DiffTraces(a, c)[0].what, HasSubstr("2 steps vs 1"));
  EXPECT_EQ(DiffTraces(a, b, 1).size(), 1u);
}

}  // namespace
}  // namespace dtsim
