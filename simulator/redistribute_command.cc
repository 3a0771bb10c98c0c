// dtsim redistribute: debugs one redistribution on the simulated world — the plan, the layouts before and after,
// every rank's shard, and a verdict against the global tensor; optionally a JSON trace of the run.
//
//   dtsim redistribute --mesh 2x4 [--names dp,tp] --shape 5,10 --from "S(0),R" --to "R,S(1)" [--dtype float32]
//                      [--planner greedy|min-cost] [--json] [--values] [--trace out.json]
//   dtsim redistribute --batch FILE|-    JSON cases in, one JSON result (with values) per line out
//
// The inputs are arange cases (include/dtsim/arange_case.h): the global tensor is arange(numel) in the dtype; a
// --from with Partial placements is built with from_local from scaled shards, as upstream's tests do.
#include <ATen/ATen.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "tensor_report.h"
#include "dtsim/arange_case.h"
#include "dtsim/dtensor.h"
#include "dtsim/error.h"
#include "dtsim/json_reader.h"
#include "dtsim/global_view.h"
#include "dtsim/layout_report.h"
#include "dtsim/local_tensor.h"
#include "dtsim/plan.h"
#include "dtsim/planner.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/trace.h"
#include "dtsim/trace_recorder.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim redistribute` (and `dtsim plan`'s shared part); defaults in comments.
struct RedistributeCliOptions : TensorOptions {  // --mesh, --names, --shape, --dtype
  std::string from;               // required: "S(0),R"
  std::string to;                 // required: "R,S(1)"
  std::string planner = "greedy";  // greedy (upstream's sequence) or min-cost
  bool json = false;              // one JSON object instead of text
  bool values = false;            // include every rank's values
  std::string trace;              // "" = no trace; else the path of the JSON trace to write
  std::string batch;              // "" = single case; a path or "-" for stdin
};

struct Case {
  DTensorSpec src;
  Placements to;
  PlannerKind planner;
};

struct Outcome {
  Plan plan;
  DTensor source;
  DTensor result;
  bool ok;
  std::string problem;
};

Outcome RunCase(const Case& c, TraceRecorder* recorder, const CaseLimits& limits) {
  CheckSimulationFits(c.src, c.src.mesh().size(), limits);
  std::shared_ptr<Collectives> collectives = MakeLocalCollectives();
  DTensor source = MakeArangeSource(c.src, collectives);
  if (recorder) {
    recorder->SetInitial(source.spec(), source.to_local(), *collectives);
    collectives->SetObserver(recorder);
  }
  RedistributeOptions options;
  options.planner = ToString(c.planner);
  Plan plan;
  options.plan_out = &plan;
  if (recorder) {
    options.on_step = [&](const PlanStep& step, const DTensorSpec& spec, const at::Tensor& local) {
      recorder->EndStep(step, spec, local, *collectives);
    };
  }
  DTensor result = source.Redistribute(source.mesh(), c.to, options);
  collectives->SetObserver(nullptr);
  Assembled assembled = AssembleGlobal(result.spec(), result.to_local());
  Outcome out{plan, source, result, false, assembled.problem};
  if (assembled.global) {
    out.ok = SameValues(*assembled.global, ExpectedArangeGlobal(c.src), ArangeNeedsTolerance(c.src));
    if (!out.ok) out.problem = "the global tensor after redistribution differs from the expected one";
  }
  if (recorder) recorder->SetFinal(result.spec(), result.to_local(), *collectives, out.ok);
  return out;
}

nlohmann::json OutcomeToJson(const Case& c, const Outcome& o, bool values) {
  nlohmann::json plan = ToJson(o.plan);
  nlohmann::json out = {{"ok", o.ok},
                        {"plan", plan["plan"]},
                        {"planner", o.plan.planner},
                        {"total_est_us", o.plan.total_est_us},
                        {"mesh", {{"shape", c.src.mesh().shape()}, {"names", c.src.mesh().names()}}},
                        {"shape", c.src.shape()},
                        {"dtype", ToString(c.src.dtype())},
                        {"from", ToString(c.src.placements())},
                        {"to", ToString(o.result.placements())},
                        {"ranks", RanksToJson(o.result.spec(), o.result.to_local(), values)}};
  if (!o.ok) out["problem"] = o.problem;
  return out;
}

Case CaseFromJson(const nlohmann::json& j, const CaseLimits& limits) {
  CheckCaseKeys(j, {"mesh", "names", "shape", "from", "to", "dtype", "planner", "values"},
                {"mesh", "shape", "from", "to"});
  DType dtype = j.contains("dtype") ? ParseDType(StringFromJson(j, "dtype")) : DType::kFloat32;
  PlannerKind kind = j.contains("planner") ? ParsePlannerKind(StringFromJson(j, "planner")) : PlannerKind::kGreedy;
  DeviceMesh mesh = MeshFromJson(j, limits);
  DTensorSpec src = SourceSpec(std::move(mesh), ParsePlacements(StringFromJson(j, "from"), "from"),
                               IntsFromJson(j["shape"], "shape"), dtype);
  Placements to = ValidateRedistribute(src, ParsePlacements(StringFromJson(j, "to"), "to"));
  return Case{src, to, kind};
}

}  // namespace

nlohmann::json RedistributeCase(const nlohmann::json& j, const CaseLimits& limits) {
  Case c = CaseFromJson(j, limits);
  const bool values = !j.contains("values") || JsonReader(j["values"], "values").AsBool();
  return OutcomeToJson(c, RunCase(c, nullptr, limits), values);
}

int RunRedistribute(const Args& args) {
  RedistributeCliOptions o;
  po::options_description desc("dtsim redistribute options");
  AddTensorOptions(desc, o, "element type of the arange tensor");
  desc.add_options()
      ("from", po::value(&o.from), "source placements, one per mesh dim, e.g. S(0),R (Partial allowed)")
      ("to", po::value(&o.to), "target placements, e.g. R,S(1)")
      ("planner", po::value(&o.planner)->default_value(o.planner), "greedy (upstream's sequence) or min-cost")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("values", po::bool_switch(&o.values), "include every rank's values (row-major)")
      ("trace", po::value(&o.trace), "write a JSON trace of the run to this path")
      ("batch", po::value(&o.batch), "JSON cases, one per line, from a file or - (stdin); JSON results out");
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim redistribute --mesh 2x4 [--names dp,tp] --shape 5,10 --from \"S(0),R\" "
                 "--to \"R,S(1)\" [--planner greedy|min-cost] [--json] [--values] [--trace out.json]\n"
              << desc;
    return 0;
  }
  if (vm.count("batch")) {
    RefuseOptionsWithBatch(vm);
    return RunJsonLines(o.batch, [](const nlohmann::json& j) { return RedistributeCase(j); });
  }
  RequireOptions(vm, {"mesh", "shape", "from", "to"});
  const PlannerKind kind = ParsePlannerKind(o.planner);
  DTensorSpec src = SourceSpec(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.from, "from"),
                               ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  Case c{src, ValidateRedistribute(src, ParsePlacements(o.to, "to")), kind};
  const bool want_trace = vm.count("trace") > 0;
  if (want_trace) CheckOutputPath(o.trace, "trace");
  std::unique_ptr<TraceRecorder> recorder;
  if (want_trace) {
    std::string argv = "dtsim redistribute";
    for (const std::string& a : args) argv += " " + a;
    TraceMeta meta;
    meta.command = "redistribute";
    meta.argv = argv;
    meta.backend = "local";
    meta.world_size = src.mesh().size();
    meta.planner = ToString(kind);
    recorder = std::make_unique<TraceRecorder>(meta);
  }
  Outcome out = RunCase(c, recorder.get(), CaseLimits());
  if (recorder) WriteJsonFileAtomically(o.trace, ToJson(recorder->trace()));
  if (o.json) {
    std::cout << SafeDump(OutcomeToJson(c, out, o.values)) << "\n";
  } else {
    std::cout << Explain(out.plan) << "\n== before\n" << RenderLayout(c.src);
    if (o.values) std::cout << "\nvalues before:\n" << RenderValues(out.source.spec(), out.source.to_local());
    std::cout << "\n== after\n" << RenderLayout(out.result.spec());
    if (o.values) std::cout << "\nvalues after:\n" << RenderValues(out.result.spec(), out.result.to_local());
    std::cout << "\nverdict: "
              << (out.ok ? "OK — the global tensor after redistribution equals the expected one"
                         : "MISMATCH — " + out.problem)
              << "\n";
    if (want_trace) std::cout << "trace written to " << o.trace << "\n";
  }
  return out.ok ? 0 : 1;
}

}  // namespace dtsim::cli
