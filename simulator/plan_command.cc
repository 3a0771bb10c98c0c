// dtsim plan: prints the steps that redistribute a tensor from one placement list to another.
//
//   dtsim plan --mesh 2x4 [--names dp,tp] --shape 5,10 --from "S(0),R" --to "R,S(1)" [--dtype float32]
//              [--planner greedy|graph|min-cost] [--json]
//   dtsim plan --batch cases.jsonl   one JSON case per line in ({"mesh", "names"?, "shape", "from", "to", "dtype"?,
//                                    "planner"?}), one JSON plan (or {"error": ...}) per line out
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/error.h"
#include "dtsim/json_reader.h"
#include "dtsim/planner.h"
#include "dtsim/spec.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim plan`; defaults in comments.
struct PlanOptions : TensorOptions {  // --mesh, --names, --shape, --dtype
  std::string from;                 // required: "S(0),R"
  std::string to;                   // required: "R,S(1)"
  std::string planner = "greedy";   // greedy (upstream's default), graph or min-cost
  bool json = false;                // print one JSON object instead of text
  std::string batch;                // "" = single case; a path or "-" for stdin
};

Plan PlanFromJson(const nlohmann::json& c, const CaseLimits& limits) {
  CheckCaseKeys(c, {"mesh", "names", "shape", "from", "to", "dtype", "planner"}, {"mesh", "shape", "from", "to"});
  DType dtype = c.contains("dtype") ? ParseDType(StringFromJson(c, "dtype")) : DType::kFloat32;
  PlannerKind kind = c.contains("planner") ? ParsePlannerKind(StringFromJson(c, "planner")) : PlannerKind::kGreedy;
  DeviceMesh mesh = MeshFromJson(c, limits);
  DTensorSpec src = SourceSpec(std::move(mesh), ParsePlacements(StringFromJson(c, "from"), "from"),
                               IntsFromJson(c["shape"], "shape"), dtype);
  return PlanRedistribute(src, ParsePlacements(StringFromJson(c, "to"), "to"), kind);
}

}  // namespace

nlohmann::json PlanCase(const nlohmann::json& c, const CaseLimits& limits) { return ToJson(PlanFromJson(c, limits)); }

int RunPlan(const Args& args) {
  PlanOptions o;
  po::options_description desc("dtsim plan options");
  AddTensorOptions(desc, o, "element type (sizes in bytes)");
  desc.add_options()
      ("from", po::value(&o.from), "source placements, one per mesh dim, e.g. S(0),R")
      ("to", po::value(&o.to), "target placements, e.g. R,S(1)")
      ("planner", po::value(&o.planner)->default_value(o.planner),
       "greedy (upstream's default plan), graph (upstream's graph-based planner) or min-cost")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("batch", po::value(&o.batch), "read JSON cases, one per line, from a file or - (stdin); print JSON lines");
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim plan --mesh 2x4 [--names dp,tp] --shape 5,10 --from \"S(0),R\" --to \"R,S(1)\" "
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
  Plan plan = PlanRedistribute(src, ParsePlacements(o.to, "to"), kind);
  if (o.json) {
    std::cout << SafeDump(ToJson(plan)) << "\n";
  } else {
    std::cout << Explain(plan);
  }
  return 0;
}

}  // namespace dtsim::cli
