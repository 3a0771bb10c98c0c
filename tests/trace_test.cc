// Traces: the golden examples in traces/ are valid and agree with the global tensor (every final
// shard's hash is the hash of its part of the expected global tensor; every step's shapes match its
// layout); the schema is a contract (round trip, unknown versions and broken files refused with a
// clear error, atomic writes).
#include "dtsim/trace/trace.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/arange_case.h"
#include "dtsim/core/global_view.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/trace/trace_diff.h"

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
    const Trace trace = ReadTrace(file.string());
    ASSERT_TRUE(trace.ok.has_value());
    EXPECT_TRUE(*trace.ok);
    const DTensorSpec& initial = trace.initial.spec;
    const DTensorSpec& final_spec = trace.final_state.spec;
    // The initial shards are the arange case's source.
    DTensor source = MakeArangeSource(initial);
    for (const RankState& r : trace.initial.ranks) {
      EXPECT_EQ(r.hash, ShardHash(LocalShard(source.to_local(), r.rank))) << r.rank;
    }
    // Every step's shards have the shapes its placements give.
    for (const TraceStep& step : trace.steps) {
      DTensorSpec after = DTensorSpec::Create(initial.mesh(), step.placements_after,
                                              initial.shape(), initial.dtype());
      for (const RankState& r : step.ranks_after)
        EXPECT_EQ(r.local_shape, after.LayoutOfRank(r.rank).local_shape);
    }
    // The final shards are their parts of the expected global tensor (targets hold no Partial
    // here).
    ASSERT_FALSE(final_spec.has_partial());
    const at::Tensor expected = ExpectedArangeGlobal(initial);
    for (const RankState& r : trace.final_state.ranks) {
      RankLayout layout = final_spec.LayoutOfRank(r.rank);
      EXPECT_EQ(r.hash, ShardHash(ShardOf(expected, layout))) << r.rank;
      EXPECT_EQ(r.global_offset, layout.global_offset);
    }
    // The JSON form round-trips exactly.
    std::ifstream in(file);
    nlohmann::json raw = nlohmann::json::parse(in);
    EXPECT_EQ(ToJson(trace), raw);
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

// The sketch as trace_recorder.h defines it, element by element: lane i % 16 of sixteen sums of
// x[i] * w(i) (in Acc, w rounded to Acc), the lanes added pairwise in double.
template <typename Acc>
std::pair<double, double> DefinedSketch(const at::Tensor& t) {
  const at::Tensor x =
      t.contiguous().reshape(-1).to(std::is_same_v<Acc, double> ? at::kDouble : at::kFloat);
  const Acc* data = x.const_data_ptr<Acc>();
  std::vector<Acc> s(16, 0), a(16, 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = static_cast<double>(i) * 0.6180339887498949 + 0.25;
    const Acc w = static_cast<Acc>((v - std::floor(v)) * 2.0 - 1.0);
    const Acc p = data[i] * w;
    s[i % 16] += p;
    a[i % 16] += std::fabs(p);
  }
  std::vector<double> ds(s.begin(), s.end()), da(a.begin(), a.end());
  for (size_t width = 16; width > 1; width /= 2) {
    for (size_t k = 0; k < width / 2; ++k) {
      ds[k] = ds[2 * k] + ds[2 * k + 1];
      da[k] = da[2 * k] + da[2 * k + 1];
    }
  }
  return {ds[0], da[0]};
}

TEST(TraceTest, DigestIsItsDefinitionOnEveryVectorWidthAndLayout) {
  // Shapes that leave partial lanes, partial row blocks of the transposed path, rows a multiple of
  // the lanes (padded) or not, and a 4 KiB row stride.
  const std::vector<std::vector<int64_t>> shapes = {{1},        {7},      {37, 301}, {48, 40},
                                                    {1024, 33}, {20, 36}, {64, 512}, {3, 4096}};
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (const auto& shape : shapes) {
      at::manual_seed(11);
      const at::Tensor base = (at::randn(shape, at::kDouble) * 3).to(dtype);
      std::vector<at::Tensor> views = {base};
      if (shape.size() == 2) views.push_back(base.t());  // read in place (a transposed matrix)
      for (const at::Tensor& view : views) {
        const std::string what = std::string(c10::toString(dtype)) + " " +
                                 IntListToString(view.sizes().vec()) +
                                 (view.is_contiguous() ? "" : " transposed");
        const ShardDigestValues widest = ShardDigest(view, DigestVectors::kWidest);
        const ShardDigestValues portable = ShardDigest(view, DigestVectors::kPortable);
        const ShardDigestValues copy = ShardDigest(view.contiguous());
        ASSERT_TRUE(widest.sketch && widest.scale) << what;
        EXPECT_EQ(widest.hash, ShardHash(view)) << what;
        for (const ShardDigestValues* other : {&portable, &copy}) {
          EXPECT_EQ(other->hash, widest.hash) << what;
          EXPECT_EQ(*other->sketch, *widest.sketch) << what;  // bit for bit
          EXPECT_EQ(*other->scale, *widest.scale) << what;
        }
        const auto [sketch, scale] =
            dtype == at::kDouble ? DefinedSketch<double>(view) : DefinedSketch<float>(view);
        EXPECT_EQ(*widest.sketch, sketch) << what;
        EXPECT_EQ(*widest.scale, scale) << what;
      }
    }
  }
}

// The hash is libxxhash's XXH3 (the library, called here, as an independent reference for the
// kernels dtsim compiles itself) over the dtype name, the shape and the row-major bytes: on lengths
// around XXH3's short-input, stripe, block and buffer sizes and the digest's pieces, at offsets
// that misalign the data, contiguous and transposed.
TEST(TraceTest, HashIsLibxxhashXxh3OfDtypeShapeAndBytes) {
  const std::vector<int64_t> lengths = {0,    1,    3,    16,   17,    60,    64,    65,
                                        240,  241,  256,  257,  1023,  1024,  1025,  4095,
                                        4096, 4097, 8192, 8193, 20000, 65537, 262147};
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kLong, at::kByte}) {
    for (int64_t length : lengths) {
      for (int64_t offset : {0, 1, 3}) {
        at::manual_seed(length + offset);
        const at::Tensor storage = (at::randn({length + offset}, at::kDouble) * 50).to(dtype);
        const at::Tensor view = storage.narrow(0, offset, length);
        const at::Tensor c = view.contiguous();
        std::string bytes = std::string(c10::toString(dtype)) + IntListToString(view.sizes().vec());
        bytes.append(static_cast<const char*>(c.const_data_ptr()), c.numel() * c.element_size());
        char expected[32];
        std::snprintf(expected, sizeof(expected), "xxh3:%016llx",
                      static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
        const std::string what = std::string(c10::toString(dtype)) + " length " +
                                 std::to_string(length) + " offset " + std::to_string(offset);
        EXPECT_EQ(ShardHash(view), expected) << what;
        EXPECT_EQ(ShardDigest(view, DigestVectors::kWidest).hash, expected) << what;
        EXPECT_EQ(ShardDigest(view, DigestVectors::kPortable).hash, expected) << what;
      }
    }
  }
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{64, 512}, {37, 301}}) {
    const at::Tensor t = at::randn(shape).t();
    const at::Tensor c = t.contiguous();
    std::string bytes = "Float" + IntListToString(t.sizes().vec());
    bytes.append(static_cast<const char*>(c.const_data_ptr()), c.numel() * c.element_size());
    char expected[32];
    std::snprintf(expected, sizeof(expected), "xxh3:%016llx",
                  static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
    EXPECT_EQ(ShardDigest(t).hash, expected) << IntListToString(shape);
  }
}

TEST(TraceTest, SchemaIsAContract) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/dtsim_trace_test.json";
  TraceMeta meta;
  meta.command = "test";
  TraceRecorder recorder(meta);
  auto comm = MakeLocalCollectives();
  DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create({2}), ParsePlacements("S(0)"), {4});
  DTensor dt = MakeArangeSource(spec);
  recorder.SetInitial(spec, dt.to_local(), *comm);
  recorder.SetFinal(spec, dt.to_local(), *comm, true);
  WriteJsonFileAtomically(path, ToJson(recorder.trace()));
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_THAT(entry.path().filename().string(),
                ::testing::Not(HasSubstr("dtsim_trace_test.json.tmp")));
  }
  const Trace back = ReadTrace(path);
  EXPECT_EQ(ToJson(back), ToJson(recorder.trace()));
  EXPECT_EQ(back.initial.spec.ToString(), spec.ToString());

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
  const nlohmann::json good = ToJson(recorder.trace());
  nlohmann::json future = good;
  future["version"] = 99;
  expect_refused(future.dump(), "version 99 is not supported");
  nlohmann::json other = good;
  other["format"] = "chrome-trace";
  expect_refused(other.dump(), "format is \"chrome-trace\"");
  nlohmann::json missing = good;
  missing.erase("steps");
  expect_refused(missing.dump(), "field 'steps' is missing");
  expect_refused("{\"format\": \"dtsim-trace\", ", "is not valid JSON");
  expect_refused("[1, 2]", "no JSON object");
  expect_refused("", "is empty");
  // Values are validated, with the path of the bad field.
  nlohmann::json bad_hash = good;
  bad_hash["initial"]["ranks"][1]["hash"] = 5;
  expect_refused(bad_hash.dump(),
                 "initial.ranks[1].hash: expected \"xxh3:\" and 16 hex digits, got 5");
  nlohmann::json bad_rank = good;
  bad_rank["final"]["ranks"][0]["rank"] = "zero";
  expect_refused(bad_rank.dump(), "final.ranks[0].rank: expected an integer, got string \"zero\"");
  nlohmann::json negative = good;
  negative["initial"]["ranks"][0]["local_shape"] = {-2};
  expect_refused(negative.dump(), "initial.ranks[0].local_shape[0]: -2 is out of range");
  nlohmann::json huge = good;
  huge["initial"]["spec"]["shape"] = {1e20};
  expect_refused(huge.dump(), "initial.spec.shape[0]: integer 1e+20 is too large");
  nlohmann::json dtype = good;
  dtype["initial"]["spec"]["dtype"] = "float128";
  expect_refused(dtype.dump(), "initial.spec.dtype: dtype: unknown dtype 'float128'");
  nlohmann::json placements = good;
  placements["final"]["spec"]["placements"] = "[S(]";
  expect_refused(placements.dump(), "final.spec.placements");
  expect_refused(R"({"format": "dtsim-trace", "format": "x"})", "has the key 'format' twice");
  expect_refused(R"({"format": "dtsim-trace", "version": 1e400})", "holds a number out of range");
  // Ranks belong to the mesh and coordinates to their ranks (fuzz finding: a trace without
  // coordinates read, but its written form did not read back). Without coordinate/global_offset the
  // mesh and the layout give them.
  nlohmann::json outside = good;
  outside["final"]["ranks"][1]["rank"] = 7;
  expect_refused(outside.dump(), "final.ranks[1].rank: rank 7 is not in mesh[2]");
  nlohmann::json wrong_coordinate = good;
  wrong_coordinate["initial"]["ranks"][1]["coordinate"] = {0};
  expect_refused(wrong_coordinate.dump(),
                 "initial.ranks[1].coordinate: [0] is not the coordinate of rank 1");
  nlohmann::json sparse = good;
  sparse["initial"]["ranks"][1].erase("coordinate");
  sparse["initial"]["ranks"][1].erase("global_offset");
  const Trace filled = TraceFromJson(sparse);
  EXPECT_EQ(filled.initial.ranks[1].coordinate, std::vector<int64_t>{1});
  EXPECT_EQ(filled.initial.ranks[1].global_offset, std::vector<int64_t>{2});
  EXPECT_EQ(ToJson(TraceFromJson(ToJson(filled))), ToJson(filled));
  expect_refused(std::string(600, '[') + std::string(600, ']'),
                 "nests JSON deeper than 512 levels");
  EXPECT_THROW(ReadTrace(dir + "/does_not_exist.json"), InputError);
  try {
    ReadTrace(dir);
    ADD_FAILURE() << "a directory was read as a trace";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is a directory"));
  }
  // A write that cannot happen leaves nothing behind, and says why.
  try {
    WriteJsonFileAtomically(dir + "/no/such/dir/t.json", good);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
  EXPECT_FALSE(fs::exists(dir + "/no/such/dir"));
  EXPECT_THROW(WriteJsonFileAtomically("", good), InputError);
  EXPECT_THROW(WriteJsonFileAtomically(dir, good), InputError);
}

TEST(TraceTest, MergingPerRankTracesGivesTheWholeRun) {
  // Split a golden trace into one part per rank (each holding its own rows, as real ranks record),
  // merge them back.
  const Trace whole =
      ReadTrace(std::string(DTSIM_SOURCE_DIR) + "/traces/uneven_2x4_S0R_to_RS1.json");
  std::vector<Trace> parts;
  for (const RankState& r : whole.initial.ranks) {
    Trace part = whole;
    auto keep = [&](std::vector<RankState>& states) {
      std::vector<RankState> mine;
      for (const RankState& s : states) {
        if (s.rank == r.rank) mine.push_back(s);
      }
      states = mine;
    };
    keep(part.initial.ranks);
    keep(part.final_state.ranks);
    for (TraceStep& step : part.steps) {
      keep(step.ranks_after);
      for (CollectiveEvent& c : step.collectives) {
        size_t i = std::find(c.ranks.begin(), c.ranks.end(), r.rank) - c.ranks.begin();
        ASSERT_LT(i, c.ranks.size());
        CollectiveEvent row;  // this rank's row alone, as a real rank records it
        row.kind = c.kind;
        row.groups = c.groups;
        row.ranks = {c.ranks[i]};
        row.input_shapes = {c.input_shapes[i]};
        row.output_shapes = {c.output_shapes[i]};
        row.bytes_sent = {c.bytes_sent[i]};
        row.bytes_received = {c.bytes_received[i]};
        c = std::move(row);
      }
    }
    parts.push_back(std::move(part));
  }
  std::reverse(parts.begin(), parts.end());  // arrival order does not matter
  const Trace merged = MergeRankTraces(parts);
  EXPECT_TRUE(DiffTraces(whole, merged).empty());
  EXPECT_EQ(ToJson(merged)["steps"], ToJson(whole)["steps"]);
  parts.push_back(parts[0]);
  EXPECT_THROW(MergeRankTraces(parts), InputError);  // a rank reported twice
}

}  // namespace
}  // namespace dtsim

namespace dtsim {
namespace {

TEST(TraceDiffTest, FindsWhereTwoRunsPart) {
  const std::string path = std::string(DTSIM_SOURCE_DIR) + "/traces/uneven_2x4_S0R_to_RS1.json";
  const Trace a = ReadTrace(path);
  EXPECT_TRUE(DiffTraces(a, a).empty());
  // Plant a wrong shard on ranks 5 and 6 after step 1 and a different collective op in step 1.
  Trace b = a;
  b.steps[1].ranks_after[5].hash = "xxh3:0000000000000000";
  b.steps[1].ranks_after[6].hash = "xxh3:0000000000000001";
  b.steps[1].collectives[0].kind = CollectiveKind::kAllToAll;
  b.steps[1].collectives[0].bytes_sent[2] += 4;
  std::vector<TraceDifference> diffs = DiffTraces(a, b);
  ASSERT_EQ(diffs.size(), 3u);
  EXPECT_THAT(diffs[0].where,
              HasSubstr("step 2 (mesh dim 0"));  // numbered from 1, as dtsim plan does
  EXPECT_EQ(diffs[0].step, 1);
  EXPECT_EQ(diffs[0].collective, 0);
  EXPECT_THAT(diffs[0].what, HasSubstr("op \"all_gather\" vs \"all_to_all\""));
  EXPECT_THAT(diffs[1].what, HasSubstr("bytes_sent differs on rank 2"));
  EXPECT_EQ(diffs[1].ranks, std::vector<int64_t>{2});
  EXPECT_THAT(diffs[2].what, HasSubstr("hash differs on ranks 5, 6 (rank 5: xxh3:"));
  EXPECT_EQ(diffs[2].ranks, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(RanksThatDiffer(diffs), (std::vector<int64_t>{2, 5, 6}));
  // A missing step is reported too.
  Trace c = a;
  c.steps.erase(c.steps.begin() + 1);
  EXPECT_THAT(DiffTraces(a, c)[0].what, HasSubstr("2 steps vs 1"));
  EXPECT_EQ(DiffTraces(a, b, 1).size(), 1u);
  // Measured times and meta are not compared; a trace without hashes compares shapes only.
  Trace d = a;
  d.meta.backend = "mpi";
  for (TraceStep& s : d.steps) {
    for (CollectiveEvent& col : s.collectives) col.time_us.assign(col.ranks.size(), 12.5);
  }
  EXPECT_TRUE(DiffTraces(a, d).empty());
  Trace e = a;
  e.meta.data = false;
  for (RankState& r : e.final_state.ranks) r.hash.reset();
  EXPECT_TRUE(DiffTraces(a, e).empty());
  e.final_state.ranks[3].local_shape[0] += 1;
  EXPECT_THAT(DiffTraces(a, e)[0].what, HasSubstr("local_shape differs on rank 3"));
}

}  // namespace
}  // namespace dtsim
