// dtsim plan: prints the steps that redistribute a tensor from one placement list to another.
//
//   dtsim plan --mesh 2x4 [--names dp,tp] --shape 5,10 --from "S(0),R" --to "R,S(1)" [--dtype float32]
//              [--planner greedy|min-cost] [--json]
//   dtsim plan --batch cases.jsonl   one JSON case per line in ({"mesh", "names"?, "shape", "from", "to", "dtype"?,
//                                    "planner"?}), one JSON plan (or {"error": ...}) per line out
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "dtsim/error.h"
#include "dtsim/planner.h"
#include "dtsim/spec.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim plan`; defaults in comments.
struct PlanOptions {
  std::string mesh;                 // required: "2x4"
  std::string names;                // "" = unnamed mesh
  std::string shape;                // required: "5,10"
  std::string from;                 // required: "S(0),R"
  std::string to;                   // required: "R,S(1)"
  std::string dtype = "float32";    // element type (bytes per element)
  std::string planner = "greedy";   // greedy (upstream's default) or min-cost
  bool json = false;                // print one JSON object instead of text
  std::string batch;                // "" = single case; a path or "-" for stdin
};

std::vector<int64_t> IntsFromJson(const nlohmann::json& value, const std::string& field) {
  if (value.is_string()) return ParseIntList(value.get<std::string>(), field);
  if (!value.is_array()) throw InputError(field, StrCat("expected a list of integers, got ", value.dump()));
  std::vector<int64_t> out;
  for (const auto& v : value) {
    if (!v.is_number_integer()) throw InputError(field, StrCat("expected integers, got ", v.dump()));
    out.push_back(v.get<int64_t>());
  }
  return out;
}

std::string StringFromJson(const nlohmann::json& c, const char* key) {
  if (!c.contains(key)) throw InputError(key, "missing");
  if (!c[key].is_string()) throw InputError(key, StrCat("expected a string, got ", c[key].dump()));
  return c[key].get<std::string>();
}

// The source spec, with errors in the source placements reported against "from" (the option the user typed).
DTensorSpec SourceSpec(DeviceMesh mesh, Placements from, std::vector<int64_t> shape, DType dtype) {
  if (static_cast<int64_t>(from.size()) != mesh.ndim()) {
    throw InputError("from", StrCat("'", ToString(from), "' has ", from.size(), " placement",
                                    from.size() == 1 ? "" : "s", " for ", mesh.ToString(), " of ", mesh.ndim(),
                                    " dim", mesh.ndim() == 1 ? "" : "s"));
  }
  for (Placement& p : from) p = p.Normalized(static_cast<int64_t>(shape.size()), "from");
  return DTensorSpec::Create(std::move(mesh), std::move(from), std::move(shape), dtype);
}

Plan PlanFromJson(const nlohmann::json& c) {
  if (!c.is_object()) throw InputError("case", "expected a JSON object");
  for (const char* key : {"mesh", "shape", "from", "to"}) {
    if (!c.contains(key)) throw InputError(key, "missing");
  }
  std::vector<std::string> names;
  if (c.contains("names")) {
    const auto& n = c["names"];
    if (n.is_string()) {
      names = ParseNameList(n.get<std::string>());
    } else if (n.is_array()) {
      for (const auto& v : n) {
        if (!v.is_string()) throw InputError("names", StrCat("expected strings, got ", v.dump()));
        names.push_back(v.get<std::string>());
      }
    } else {
      throw InputError("names", StrCat("expected a list of names, got ", n.dump()));
    }
  }
  DType dtype = c.contains("dtype") ? ParseDType(StringFromJson(c, "dtype")) : DType::kFloat32;
  PlannerKind kind = c.contains("planner") ? ParsePlannerKind(StringFromJson(c, "planner")) : PlannerKind::kGreedy;
  DTensorSpec src = SourceSpec(DeviceMesh::Create(IntsFromJson(c["mesh"], "mesh"), names),
                               ParsePlacements(StringFromJson(c, "from"), "from"), IntsFromJson(c["shape"], "shape"),
                               dtype);
  return PlanRedistribute(src, ParsePlacements(StringFromJson(c, "to"), "to"), kind);
}

int RunBatch(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file) throw InputError("batch", StrCat("cannot open '", path, "'"));
    in = &file;
  }
  std::string line;
  int64_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json result;
    try {
      result = ToJson(PlanFromJson(nlohmann::json::parse(line)));
    } catch (const nlohmann::json::parse_error& e) {
      result = {{"error", StrCat("batch: line ", line_no, " is not JSON: ", e.what())}};
    } catch (const InputError& e) {
      result = {{"error", e.what()}, {"field", e.field()}};
    }
    std::cout << result.dump() << "\n";
  }
  return 0;
}

}  // namespace

int RunPlan(const Args& args) {
  PlanOptions o;
  po::options_description desc("dtsim plan options");
  desc.add_options()
      ("help,h", "show this help")
      ("mesh", po::value(&o.mesh), "mesh shape, e.g. 2x4")
      ("names", po::value(&o.names), "mesh dim names, e.g. dp,tp")
      ("shape", po::value(&o.shape), "global tensor shape, e.g. 5,10")
      ("from", po::value(&o.from), "source placements, one per mesh dim, e.g. S(0),R")
      ("to", po::value(&o.to), "target placements, e.g. R,S(1)")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), "element type (sizes in bytes)")
      ("planner", po::value(&o.planner)->default_value(o.planner), "greedy (upstream's default) or min-cost")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("batch", po::value(&o.batch), "read JSON cases, one per line, from a file or - (stdin); print JSON lines");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: dtsim plan --mesh 2x4 [--names dp,tp] --shape 5,10 --from \"S(0),R\" --to \"R,S(1)\" "
                 "[--planner greedy|min-cost] [--json]\n"
              << desc;
    return 0;
  }
  if (!o.batch.empty()) return RunBatch(o.batch);
  for (const char* required : {"mesh", "shape", "from", "to"}) {
    if (!vm.count(required)) throw InputError(required, StrCat("missing: give --", required));
  }
  const PlannerKind kind = ParsePlannerKind(o.planner);
  DTensorSpec src = SourceSpec(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.from, "from"),
                               ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  Plan plan = PlanRedistribute(src, ParsePlacements(o.to, "to"), kind);
  if (o.json) {
    std::cout << ToJson(plan).dump() << "\n";
  } else {
    std::cout << Explain(plan);
  }
  return 0;
}

}  // namespace dtsim::cli
