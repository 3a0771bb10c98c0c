// Helpers shared by the dtsim subcommands: reading cases from JSON (batch mode) and running a JSON-lines batch.
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "dtsim/mesh.h"
#include "dtsim/placement.h"
#include "dtsim/spec.h"

namespace dtsim::cli {

// The options every tensor command takes; defaults in comments.
struct TensorOptions {
  std::string mesh;               // required: "2x4"
  std::string names;              // "" = unnamed mesh
  std::string shape;              // required: "5,10"
  std::string dtype = "float32";  // element type
};

// Adds --help, --mesh, --names, --shape and --dtype (described by `dtype_help`) to `desc`.
void AddTensorOptions(boost::program_options::options_description& desc, TensorOptions& o,
                      const char* dtype_help = "element type (sizes in bytes)");
// Parses `args` against `desc` (unknown options are input errors, reported by main).
boost::program_options::variables_map ParseOptions(const Args& args,
                                                   const boost::program_options::options_description& desc);
// InputError("<name>", "missing: give --<name>") for the first option in `names` that was not given.
void RequireOptions(const boost::program_options::variables_map& vm, std::initializer_list<const char*> names);

// A list of integers given as a JSON array or as text ("2x4", "5,10"); InputError(field) otherwise.
std::vector<int64_t> IntsFromJson(const nlohmann::json& value, const std::string& field);
// The string at `key` of a case; InputError(key) when missing or not a string.
std::string StringFromJson(const nlohmann::json& c, const char* key);
// The mesh of a case: "mesh" (list or text) and the optional "names" (list or "dp,tp").
DeviceMesh MeshFromJson(const nlohmann::json& c);

// The spec a redistribution starts from, with errors in the placements reported against "from" (the option the user
// typed): "from: '[S(0)]' has 1 placement for mesh[2, 4] of 2 dims".
DTensorSpec SourceSpec(DeviceMesh mesh, Placements from, std::vector<int64_t> shape, DType dtype);

// Refuses a simulation of more than 65536 ranks (InputError("mesh"): its collectives would run for hours), and
// (InputError("shape")) one whose tensors would not fit in memory: every one of the mesh's ranks
// may hold a whole replica (S -> R), and a step holds its input and output, so it needs about
// numel * itemsize * (ranks + 2) bytes; this is compared with the memory available now.
void CheckSimulationFits(const DTensorSpec& spec, int64_t world_size);

// Reads JSON cases one per line from `path` ("-" = stdin) and prints `run(case)` per line; a line that is not JSON or
// whose case throws InputError prints {"error": "<field>: <message>", "field": <field>} instead; any other exception
// (a dtsim bug) prints {"error": "internal error: ...", "internal": true}. Returns 0.
int RunJsonLines(const std::string& path, const std::function<nlohmann::json(const nlohmann::json&)>& run);

}  // namespace dtsim::cli
