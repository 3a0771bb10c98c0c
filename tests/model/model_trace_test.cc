// Model traces (dtsim model --trace): judged by what a trace must say whatever dtsim computes — a
// corrupted shard is found at the first module boundary it reaches and on its rank only, a
// metadata run records the data run's events, a value moved by rounding is told from a wrong one
// — and the format's reader refusing what a run cannot write.
#include "dtsim/trace/model_trace.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "dtsim/layout/error.h"
#include "dtsim/model/model_run.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim::model {
namespace {

ModelRunOptions Traced(const std::string& plan, std::vector<int64_t> shape,
                       std::vector<std::string> names) {
  ModelRunOptions o;
  o.args.dim = 16;
  o.args.heads = 4;
  o.args.layers = 2;
  o.args.vocab = 37;
  o.args.seq = 8;
  o.args.batch = 2;
  o.mesh = DeviceMesh::Create(shape, names);
  o.plan = plan;
  o.backward = true;
  o.trace = true;
  o.check = false;
  return o;
}

// The index of the first event of `kind` in `module` (phase forward), or -1.
int64_t Find(const ModelTrace& t, RunEvent::Kind kind, const std::string& module) {
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (t.events[i].kind == kind && t.events[i].module == module) return static_cast<int64_t>(i);
  }
  return -1;
}

TEST(ModelTraceTest, ACorruptActivationIsFoundAtItsModuleOnItsRank) {
  // Rank 1's shard of layers.1.attention.wk's weight scaled after the parameter events: the
  // weight's own event and everything before wk's output agree; wk's output differs on the tp
  // rank holding that shard (1) alone.
  ModelRunOptions clean = Traced("tp+sp", {4}, {"tp"});
  ModelRunOptions bad = clean;
  bad.tamper = [](Transformer& model) {
    Module* wk = FindModule(model, "layers.1.attention.wk");
    ASSERT_NE(wk, nullptr);
    at::Tensor shard = LocalShard(ops::GetDTensor(wk->Param("weight")).to_local(), 1);
    at::NoGradGuard no_grad;
    shard.mul_(1.5);
  };
  const ModelTrace a = *RunModel(clean).trace;
  const ModelTrace b = *RunModel(bad).trace;
  const auto diffs = DiffModelTraces(a, b, 1000);
  ASSERT_FALSE(diffs.empty());
  // The first difference: the parameter itself, rank 1 only.
  EXPECT_NE(diffs[0].where.find("parameter layers.1.attention.wk.weight"), std::string::npos)
      << diffs[0].where;
  EXPECT_EQ(diffs[0].ranks, std::vector<int64_t>({1}));
  // The first activation that differs is wk's output (wk's input agrees), on rank 1 only.
  const TraceDifference* first_activation = nullptr;
  for (const TraceDifference& d : diffs) {
    if (d.where.find("parameter") == std::string::npos) {
      first_activation = &d;
      break;
    }
  }
  ASSERT_NE(first_activation, nullptr);
  EXPECT_NE(first_activation->where.find("forward output of layers.1.attention.wk"),
            std::string::npos)
      << first_activation->where;
  EXPECT_EQ(first_activation->ranks, std::vector<int64_t>({1}));
  // The event index names the same event as the text.
  ASSERT_GE(first_activation->event, 0);
  EXPECT_EQ(a.events.at(first_activation->event).kind, RunEvent::Kind::kModuleEnd);
  EXPECT_EQ(a.events.at(first_activation->event).module, "layers.1.attention.wk");
  // The same run twice agrees bit for bit (nothing counted as rounding).
  int64_t rounded = -1;
  EXPECT_TRUE(DiffModelTraces(a, *RunModel(clean).trace, 20, &rounded).empty());
  EXPECT_EQ(rounded, 0);
}

TEST(ModelTraceTest, EveryModuleCallAndCollectiveOfTheReportIsInTheTrace) {
  for (const std::string plan : {"tp", "tp+sp", "fsdp+tp"}) {
    ModelRunOptions o =
        plan == "fsdp+tp" ? Traced(plan, {2, 2}, {"dp", "tp"}) : Traced(plan, {2}, {"tp"});
    if (plan == "tp") o.loss_parallel = true;
    const ModelReport r = RunModel(o);
    const ModelTrace& t = *r.trace;
    int64_t report_collectives = 0, trace_collectives = 0;
    for (const ModuleNode& n : r.modules) {
      report_collectives += static_cast<int64_t>(n.collectives[0].size() + n.collectives[1].size());
      if (n.fqn == "Global" || n.fqn == "Transformer") continue;
      // Each module called once in forward: one begin, one end, in that order.
      const int64_t begin = Find(t, RunEvent::Kind::kModuleBegin, n.fqn);
      const int64_t end = Find(t, RunEvent::Kind::kModuleEnd, n.fqn);
      EXPECT_GE(begin, 0) << plan << " " << n.fqn;
      EXPECT_GT(end, begin) << plan << " " << n.fqn;
      EXPECT_GE(Find(t, RunEvent::Kind::kBackwardBegin, n.fqn), 0) << plan << " " << n.fqn;
    }
    for (const RunEvent& e : t.events) {
      trace_collectives += static_cast<int64_t>(e.collectives.size());
      for (const CollectiveEvent& c : e.collectives) {
        // Groups partition the world (every rank once).
        std::vector<int64_t> seen(o.mesh.size(), 0);
        for (const auto& g : c.groups) {
          for (int64_t rank : g) ++seen.at(rank);
        }
        EXPECT_EQ(seen, std::vector<int64_t>(o.mesh.size(), 1)) << plan << " " << c.cause;
      }
      if (e.tensor) {
        EXPECT_EQ(e.tensor->hashes.size(), static_cast<size_t>(o.mesh.size()));
      }
    }
    EXPECT_EQ(trace_collectives, report_collectives) << plan;
    // Written and read back unchanged.
    EXPECT_EQ(ToJson(ModelTraceFromJson(ToJson(t))), ToJson(t));
  }
}

TEST(ModelTraceTest, AMetadataRunRecordsTheDataRunsEvents) {
  ModelRunOptions data = Traced("fsdp+tp", {2, 2}, {"dp", "tp"});
  ModelRunOptions meta = data;
  meta.meta = true;
  const ModelTrace a = *RunModel(data).trace;
  const ModelTrace b = *RunModel(meta).trace;
  EXPECT_FALSE(b.meta.data);
  for (const RunEvent& e : b.events) {
    if (e.tensor) EXPECT_TRUE(e.tensor->hashes.empty());
  }
  // Same events, placements, shapes and collectives; hashes compared only where both have them.
  const auto diffs = DiffModelTraces(a, b);
  EXPECT_TRUE(diffs.empty()) << diffs[0].where << ": " << diffs[0].what;
}

TEST(ModelTraceTest, RoundingIsToldFromAWrongValue) {
  const ModelTrace a = *RunModel(Traced("tp", {2}, {"tp"})).trace;
  ModelTrace b = a;
  // One tensor moved by 1e-7 of its norm on rank 0 (a reduction in another order), another by
  // 1e-2 on rank 1 (a wrong value).
  std::vector<WorldTensor*> outputs;
  for (RunEvent& e : b.events) {
    if (e.kind == RunEvent::Kind::kModuleEnd) outputs.push_back(&*e.tensor);
  }
  ASSERT_GE(outputs.size(), 2u);
  auto nudge = [](WorldTensor& t, int64_t rank, double by) {
    t.hashes[rank] = "xxh3:0123456789abcdef";
    t.sketches[rank][0] += by * t.sketches[rank][2];
  };
  nudge(*outputs[0], 0, 1e-7);
  int64_t rounded = 0;
  EXPECT_TRUE(DiffModelTraces(a, b, 20, &rounded).empty());
  EXPECT_EQ(rounded, 1);
  nudge(*outputs[1], 1, 1e-2);
  const auto diffs = DiffModelTraces(a, b, 20, &rounded);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].ranks, std::vector<int64_t>({1}));
  EXPECT_NE(diffs[0].what.find("values differ on rank 1"), std::string::npos) << diffs[0].what;
}

TEST(ModelTraceTest, TheReaderRefusesWhatARunCannotWrite) {
  const nlohmann::json good = ToJson(*RunModel(Traced("tp", {2}, {"tp"})).trace);
  auto refuses = [&](const std::function<void(nlohmann::json&)>& change, const std::string& says) {
    nlohmann::json j = good;
    change(j);
    try {
      ModelTraceFromJson(j);
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "trace");
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  auto first = [](nlohmann::json& j, const std::string& kind) -> nlohmann::json& {
    for (nlohmann::json& e : j["events"]) {
      if (e["event"] == kind) return e;
    }
    throw std::runtime_error("no " + kind);
  };
  refuses([](nlohmann::json& j) { j["version"] = 2; }, "version 2 is not supported");
  refuses([&](nlohmann::json& j) { first(j, "module_end")["tensor"]["hashes"][1] = "xxh3:zz"; },
          "hashes[1]: expected \"xxh3:\"");
  refuses([&](nlohmann::json& j) { first(j, "module_end")["tensor"]["hashes"].erase(1); },
          "has 1 entries for 2 ranks");
  refuses([&](nlohmann::json& j) { first(j, "module_end")["tensor"].erase("hashes"); },
          "has no hashes");
  refuses([&](nlohmann::json& j) { first(j, "op")["event"] = "jump"; }, "unknown event \"jump\"");
  refuses([&](nlohmann::json& j) { first(j, "module_begin")["phase"] = "sideways"; },
          "is not setup, forward, backward or end");
  refuses(
      [&](nlohmann::json& j) {
        first(j, "collective")["collectives"][0]["groups"] = {{0, 2}};
      },
      "groups");
  refuses([&](nlohmann::json& j) { first(j, "collective")["collectives"][0]["kind"] = "gossip"; },
          "unknown collective \"gossip\"");
  refuses([&](nlohmann::json& j) { first(j, "module_end")["module"] = "elsewhere"; },
          "is the innermost open module");
  refuses([&](nlohmann::json& j) { j["meta"]["world_size"] = 3; }, "not the mesh's 2 ranks");
  refuses([&](nlohmann::json& j) { first(j, "op")["t_us"] = -1; }, "is not a time");
  refuses([&](nlohmann::json& j) { first(j, "module_end")["tensor"]["sketches"][0][2] = -1.0; },
          "non-negative norm");
  // An op's placements: bracketed lists (or none) on each side of one arrow.
  refuses([&](nlohmann::json& j) { first(j, "op")["placements"] = "[S(0)], [R]"; },
          "is not \"ARGUMENTS -> RESULTS\"");
  refuses([&](nlohmann::json& j) { first(j, "op")["placements"] = "[S(0)] -> [R] -> [R]"; },
          "is not \"ARGUMENTS -> RESULTS\"");
  refuses([&](nlohmann::json& j) { first(j, "op")["placements"] = "S(0), [R] -> [R]"; },
          "is not a list of bracketed placements");
  refuses([&](nlohmann::json& j) { first(j, "op")["placements"] = "[S(0), [R] -> [R]"; },
          "is not a list of bracketed placements");
  refuses([&](nlohmann::json& j) { first(j, "op")["placements"] = "[S(0)],[R] -> [R]"; },
          "is not a list of bracketed placements");
}

}  // namespace
}  // namespace dtsim::model
