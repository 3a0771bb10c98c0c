// Helpers shared by the dtsim subcommands: reading cases from JSON (batch mode) and running a JSON-lines batch.
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "dtsim/collectives.h"
#include "dtsim/fault.h"
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

// The options that pick where a run happens (redistribute, distribute, compare); defaults in comments.
struct BackendCliOptions {
  std::string backend = "local";  // local (simulated in this process), mpi or nccl (real ranks under mpirun)
  double timeout = 60;            // real backends: seconds a rank waits at a collective before the job is ended
  std::string fault;              // real backends: "" = none, else wrong-offset:R, wrong-op:R, drop-rank:R, stall-rank:R:S
};

// Adds --backend, --timeout and --inject-fault to `desc`.
void AddBackendOptions(boost::program_options::options_description& desc, BackendCliOptions& o);

// The backend of a run on `mesh`, checked: InputError("backend") for an unknown or unbuilt backend,
// InputError("timeout") for a timeout that is not positive, InputError("inject-fault") for a malformed fault, a fault
// on the simulated backend or one naming a rank outside the mesh, InputError("mesh") when a real world's size differs
// from the mesh's rank count ("launch with mpirun -np 8"). On a real backend, ranks other than 0 print nothing from
// here on (rank 0 reports; see ReportingRankOnly).
std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, const DeviceMesh& mesh, FaultSpec* fault);
// The same without a mesh yet (batch mode: each line's mesh is checked with CheckMeshFitsWorld).
std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, FaultSpec* fault);
// InputError("mesh") when a real world's size differs from the mesh's rank count, or the mesh does not hold the
// world's ranks 0..N-1. Nothing for the simulated backend.
void CheckMeshFitsWorld(const Collectives& backend, const DeviceMesh& mesh);

// True while this process must not print (a real rank other than 0): main's error printer checks it.
bool Silenced();
// When a real run is on (MakeBackend made a real backend): ends the whole job with `message` printed by this rank
// (failures only this rank saw must not leave the others waiting until their timeout). Otherwise returns.
void EndRealJob(const std::string& message, int code);

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
