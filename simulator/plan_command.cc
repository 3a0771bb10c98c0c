// dtsim plan: prints the steps that redistribute a tensor from one placement list to another.
//
//   dtsim plan --mesh 2x4 [--names dp,tp] --shape 5,10 --from "S(0),R" --to "R,S(1)" [--dtype
//   float32]
//              [--planner greedy|graph|min-cost] [--json] [--meta] [--memory] [--ranks
//              auto|all|summary|0,5,8-15]
//
// --meta runs the plan on the simulated world with meta tensors (shapes, no data; the executor and
// collectives of a real run) and adds every rank's local shape after each step; --memory adds every
// rank's peak memory per step, measured on that run (on meta tensors with --meta, else on the
// arange data as `dtsim redistribute` runs it).
//   dtsim plan --batch cases.jsonl   one JSON case per line in ({"mesh", "names"?, "shape", "from",
//   "to", "dtype"?,
//                                    "planner"?}), one JSON plan (or {"error": ...}) per line out
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/planner.h"
#include "dtsim/layout/rank_selection.h"
#include "dtsim/layout/spec.h"
#include "memory_report.h"
#include "redistribute_command.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim plan`; defaults in comments.
struct PlanOptions : TensorOptions {  // --mesh, --names, --shape, --dtype
  std::string from;                   // required: "S(0),R"
  std::string to;                     // required: "R,S(1)"
  std::string planner = "greedy";     // greedy (upstream's default), graph or min-cost
  bool json = false;                  // print one JSON object instead of text
  std::string batch;                  // "" = single case; a path or "-" for stdin
  bool meta = false;    // run the plan on meta tensors; report every rank's shape after each step
  bool memory = false;  // run the plan and report every rank's peak memory per step
  std::string ranks =
      "auto";  // which ranks the per-step states list (auto: all up to 256 ranks, else summary)
};

// The per-rank states after each step of `trace` as JSON: the listed ranks, or a summary of their
// shapes.
nlohmann::json StepStatesToJson(const Trace& trace, const RankSelection& selection) {
  nlohmann::json out = nlohmann::json::array();
  for (const TraceStep& step : trace.steps) {
    const int64_t world = static_cast<int64_t>(step.ranks_after.size());
    nlohmann::json s = {{"placements_after", ToString(step.placements_after)}};
    if (selection.Lists(world)) {
      nlohmann::json ranks = nlohmann::json::array();
      for (const RankState& r : step.ranks_after) {
        if (selection.Includes(r.rank)) ranks.push_back(ToJson(r));
      }
      s["ranks"] = std::move(ranks);
    } else {
      ShapeSummary summary;
      for (const RankState& r : step.ranks_after) summary.Add(r.rank, r.local_shape);
      s["rank_summary"] = summary.ToJson();
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string RenderStepStates(const Trace& trace, const RankSelection& selection) {
  std::string out = "local shapes after each step:\n";
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const TraceStep& step = trace.steps[i];
    out += StrCat("  step ", i + 1, "  ", ToString(step.placements_after), "\n");
    const int64_t world = static_cast<int64_t>(step.ranks_after.size());
    if (selection.Lists(world)) {
      for (const RankState& r : step.ranks_after) {
        if (!selection.Includes(r.rank)) continue;
        out += StrCat("    rank ", r.rank, " ", IntListToString(r.coordinate), "  local_shape ",
                      IntListToString(r.local_shape), "  global_offset ",
                      IntListToString(r.global_offset), "\n");
      }
    } else {
      ShapeSummary summary;
      for (const RankState& r : step.ranks_after) summary.Add(r.rank, r.local_shape);
      std::string table = summary.ToText();
      size_t pos = 0;
      while (pos < table.size()) {
        const size_t end = table.find('\n', pos);
        out += "    " + table.substr(pos, end - pos) + "\n";
        pos = end + 1;
      }
    }
  }
  return out;
}

Plan PlanFromJson(const nlohmann::json& c, const CaseLimits& limits) {
  CheckCaseKeys(c, {"mesh", "names", "shape", "from", "to", "dtype", "planner"},
                {"mesh", "shape", "from", "to"});
  DType dtype = c.contains("dtype") ? ParseDType(StringFromJson(c, "dtype")) : DType::kFloat32;
  PlannerKind kind =
      c.contains("planner") ? ParsePlannerKind(StringFromJson(c, "planner")) : PlannerKind::kGreedy;
  DeviceMesh mesh = MeshFromJson(c, limits);
  DTensorSpec src = SourceSpec(std::move(mesh), ParsePlacements(StringFromJson(c, "from"), "from"),
                               IntsFromJson(c["shape"], "shape"), dtype);
  return PlanRedistribute(src, ParsePlacements(StringFromJson(c, "to"), "to"), kind);
}

}  // namespace

nlohmann::json PlanCase(const nlohmann::json& c, const CaseLimits& limits) {
  return ToJson(PlanFromJson(c, limits));
}

int RunPlan(const Args& args) {
  PlanOptions o;
  po::options_description desc("dtsim plan options");
  AddTensorOptions(desc, o, "element type (sizes in bytes)");
  desc.add_options()("from", po::value(&o.from),
                     "source placements, one per mesh dim, e.g. S(0),R")(
      "to", po::value(&o.to), "target placements, e.g. R,S(1)")(
      "planner", po::value(&o.planner)->default_value(o.planner),
      "greedy (upstream's default plan), graph (upstream's graph-based planner) or min-cost")(
      "json", po::bool_switch(&o.json), "print one JSON object")(
      "batch", po::value(&o.batch),
      "read JSON cases, one per line, from a file or - (stdin); print JSON lines")(
      "meta", po::bool_switch(&o.meta),
      "run the plan on meta tensors (no data): every rank's shape after each step")(
      "memory", po::bool_switch(&o.memory),
      "run the plan (on meta tensors with --meta, else on data) and print every rank's peak memory "
      "per step")("ranks", po::value(&o.ranks)->default_value(o.ranks),
                  "ranks --meta lists: auto (all up to 256 ranks, else a summary of shapes), all, "
                  "summary, or e.g. 0,5,8-15");
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim plan --mesh 2x4 [--names dp,tp] --shape 5,10 --from \"S(0),R\" --to "
                 "\"R,S(1)\" "
                 "[--planner greedy|graph|min-cost] [--json]\n"
              << desc;
    return 0;
  }
  if (vm.count("batch")) {
    RefuseOptionsWithBatch(vm);
    return RunJsonLines(o.batch, [](const nlohmann::json& c) { return PlanCase(c); });
  }
  RequireOptions(vm, {"mesh", "shape", "from", "to"});
  const PlannerKind kind = ParsePlannerKind(o.planner);
  DTensorSpec src = SourceSpec(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.from, "from"),
                               ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  const RankSelection selection = RankSelection::Parse(o.ranks);
  selection.CheckAgainst(src.mesh().ranks(), src.mesh().ToString());
  if (!o.meta && !o.memory) {
    Plan plan = PlanRedistribute(src, ParsePlacements(o.to, "to"), kind);
    if (o.json) {
      std::cout << SafeDump(ToJson(plan)) << "\n";
    } else {
      std::cout << Explain(plan);
    }
    return 0;
  }
  // Run the plan on the simulated world (meta tensors with --meta) and report what it did.
  Case c{src, ValidateRedistribute(src, ParsePlacements(o.to, "to")), kind};
  RunCaseOptions options;
  options.meta = o.meta;
  options.memory = o.memory;
  if (o.meta) {
    TraceMeta meta;
    meta.command = "plan";
    meta.planner = ToString(kind);
    meta.world_size = src.mesh().size();
    options.trace_meta = meta;  // the per-step states
  }
  Outcome out = RunCase(c, MakeLocalCollectives(), options);
  const bool per_rank = selection.Lists(src.mesh().size());
  if (o.json) {
    nlohmann::json j = ToJson(out.plan);
    j["ok"] = out.ok;
    if (!out.ok) j["problem"] = out.problem;
    if (o.meta) {
      j["meta"] = true;
      j["states"] = StepStatesToJson(*out.trace, selection);
    }
    if (o.memory) j["memory"] = MemoryToJson(out.memory, per_rank);
    std::cout << j.dump() << "\n";
  } else {
    std::cout << Explain(out.plan);
    if (o.meta) std::cout << "\n" << RenderStepStates(*out.trace, selection);
    if (o.memory) std::cout << "\n" << RenderMemory(out.memory);
    if (!out.ok) std::cout << "\nMISMATCH — " << out.problem << "\n";
  }
  return out.ok ? 0 : 1;
}

}  // namespace dtsim::cli
