// dtsim layout: prints which part of the global tensor every rank holds.
//
//   dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements "S(0),S(1)" [--dtype float32] [--json]
//   dtsim layout --batch cases.jsonl      one JSON case per line in, one JSON layout (or {"error": ...}) per line out;
//                                         exit code 1 when any line failed
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/error.h"
#include "dtsim/json_reader.h"
#include "dtsim/layout_report.h"
#include "dtsim/spec.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim layout`; defaults in comments.
struct LayoutOptions : TensorOptions {  // --mesh, --names, --shape, --dtype
  std::string placements;  // required: "S(0),S(1)"
  bool json = false;       // print one JSON object instead of text
  std::string batch;       // "" = single case; a path or "-" for stdin
};

DTensorSpec SpecFromJson(const nlohmann::json& c, const CaseLimits& limits) {
  CheckCaseKeys(c, {"mesh", "names", "shape", "placements", "dtype"}, {"mesh", "shape", "placements"});
  DType dtype = c.contains("dtype") ? ParseDType(StringFromJson(c, "dtype")) : DType::kFloat32;
  DeviceMesh mesh = MeshFromJson(c, limits);
  return DTensorSpec::Create(std::move(mesh), ParsePlacements(StringFromJson(c, "placements")),
                             IntsFromJson(c["shape"], "shape"), dtype);
}

}  // namespace

nlohmann::json LayoutCase(const nlohmann::json& c, const CaseLimits& limits) {
  return LayoutToJson(SpecFromJson(c, limits));
}

int RunLayout(const Args& args) {
  LayoutOptions o;
  po::options_description desc("dtsim layout options");
  AddTensorOptions(desc, o, "element type (sizes in bytes)");
  desc.add_options()
      ("placements", po::value(&o.placements), "one placement per mesh dim, e.g. S(0),S(1) or [_S(0,2), R]")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("batch", po::value(&o.batch), "read JSON cases, one per line, from a file or - (stdin); print JSON lines");
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements \"S(0),S(1)\" [--json]\n"
              << desc;
    return 0;
  }
  if (vm.count("batch")) {
    RefuseOptionsWithBatch(vm);
    return RunJsonLines(o.batch, [](const nlohmann::json& c) { return LayoutCase(c); });
  }
  RequireOptions(vm, {"mesh", "shape", "placements"});
  DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.placements),
                                         ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  if (o.json) {
    std::cout << SafeDump(LayoutToJson(spec)) << "\n";
  } else {
    std::cout << RenderLayout(spec);
  }
  return 0;
}

}  // namespace dtsim::cli
