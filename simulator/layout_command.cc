// dtsim layout: prints which part of the global tensor every rank holds.
//
//   dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements "S(0),S(1)" [--dtype float32] [--json]
//   dtsim layout --batch cases.jsonl      one JSON case per line in, one JSON layout (or {"error": ...}) per line out
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "dtsim/error.h"
#include "dtsim/layout_report.h"
#include "dtsim/spec.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim layout`; defaults in comments.
struct LayoutOptions {
  std::string mesh;        // required: "2x4"
  std::string names;       // "" = unnamed mesh
  std::string shape;       // required: "5,10" ("" is a 0-d tensor only when given explicitly)
  std::string placements;  // required: "S(0),S(1)"
  std::string dtype = "float32";
  bool json = false;       // print one JSON object instead of text
  std::string batch;       // "" = single case; a path or "-" for stdin
};

// Reads an int list that a batch case may give as a JSON array or as text.
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

DTensorSpec SpecFromJson(const nlohmann::json& c) {
  if (!c.is_object()) throw InputError("case", "expected a JSON object");
  for (const char* key : {"mesh", "shape", "placements"}) {
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
  if (!c["placements"].is_string()) throw InputError("placements", "expected a string such as \"S(0),R\"");
  DType dtype = DType::kFloat32;
  if (c.contains("dtype")) {
    if (!c["dtype"].is_string()) throw InputError("dtype", "expected a string such as \"float32\"");
    dtype = ParseDType(c["dtype"].get<std::string>());
  }
  return DTensorSpec::Create(DeviceMesh::Create(IntsFromJson(c["mesh"], "mesh"), names),
                             ParsePlacements(c["placements"].get<std::string>()), IntsFromJson(c["shape"], "shape"),
                             dtype);
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
      nlohmann::json c = nlohmann::json::parse(line);
      result = LayoutToJson(SpecFromJson(c));
    } catch (const nlohmann::json::parse_error& e) {
      result = {{"error", StrCat("batch: line ", line_no, " is not JSON: ", e.what())}};
    } catch (const InputError& e) {
      result = {{"error", e.what()}};
    }
    std::cout << result.dump() << "\n";
  }
  return 0;
}

}  // namespace

int RunLayout(const Args& args) {
  LayoutOptions o;
  po::options_description desc("dtsim layout options");
  desc.add_options()
      ("help,h", "show this help")
      ("mesh", po::value(&o.mesh), "mesh shape, e.g. 2x4")
      ("names", po::value(&o.names), "mesh dim names, e.g. dp,tp")
      ("shape", po::value(&o.shape), "global tensor shape, e.g. 5,10")
      ("placements", po::value(&o.placements), "one placement per mesh dim, e.g. S(0),S(1) or [_S(0,2), R]")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), "element type (sizes in bytes)")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("batch", po::value(&o.batch), "read JSON cases, one per line, from a file or - (stdin); print JSON lines");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements \"S(0),S(1)\" [--json]\n"
              << desc;
    return 0;
  }
  if (!o.batch.empty()) return RunBatch(o.batch);
  for (const char* required : {"mesh", "shape", "placements"}) {
    if (!vm.count(required)) throw InputError(required, StrCat("missing: give --", required));
  }
  DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.placements),
                                         ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  if (o.json) {
    std::cout << LayoutToJson(spec).dump() << "\n";
  } else {
    std::cout << RenderLayout(spec);
  }
  return 0;
}

}  // namespace dtsim::cli
