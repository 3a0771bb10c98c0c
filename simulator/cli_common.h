// Helpers shared by the dtsim subcommands: options, reading cases from JSON (batch mode), running a
// JSON-lines batch, and the limits that keep one case from running for minutes or exhausting
// memory.
#pragma once

#include <c10/core/Device.h>

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "dtsim/layout/fault.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"
#include "dtsim/layout/spec.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim::cli {

// The options every tensor command takes; defaults in comments.
struct TensorOptions {
  std::string mesh;               // required: "2x4"
  std::string names;              // "" = unnamed mesh
  std::string shape;              // required: "5,10"
  std::string dtype = "float32";  // element type
};

// The options that pick where a run happens (redistribute, distribute, compare); defaults in
// comments.
struct BackendCliOptions {
  std::string backend =
      "local";  // local (simulated in this process), mpi or nccl (real ranks under mpirun)
  double timeout =
      60;             // real backends: seconds a rank waits at a collective before the job is ended
  std::string fault;  // real backends: "" = none, else wrong-offset:R, wrong-op:R, drop-rank:R,
                      // stall-rank:R:S
  std::string device = "cpu";  // where every rank's shards lie: cpu or cuda (AddDeviceOption)
};

// The range of --timeout, in seconds: below a millisecond no collective of a real run can arrive,
// so every run would end as stuck; above a day is a typo.
inline constexpr double kMinTimeoutSeconds = 0.001;
inline constexpr double kMaxTimeoutSeconds = 86400;
// InputError("timeout") unless kMinTimeoutSeconds <= seconds <= kMaxTimeoutSeconds (NaN refused):
// "timeout: must be a number of seconds from 0.001 to 86400, got 1e-09".
void CheckTimeout(double seconds);

// The warning rank 0 of a real run prints on stderr when the injected fault found no collective
// it can affect ("dtsim: warning: the fault wrong-op:1 did not strike: <why>"), and its test:
// `dtsim compare` reads the ranks' stderr for it and then does not call the runs' agreement a pass.
std::string FaultMissedWarning(const FaultSpec& fault, std::string_view why);
bool IsFaultMissedWarning(std::string_view line);

// Adds --backend, --timeout and --inject-fault to `desc`.
void AddBackendOptions(boost::program_options::options_description& desc, BackendCliOptions& o);

// Adds --device (cpu or cuda) to `desc`.
void AddDeviceOption(boost::program_options::options_description& desc, BackendCliOptions& o);
// The device of --device, checked for a run on `backend`: "cpu" or "cuda" (the current GPU, a
// real rank's own).
// InputError("device") for another name, for cuda where this dtsim's LibTorch has no CUDA or no GPU
// is visible, on the mpi backend (its ranks pass host memory to MPI), or with --meta or --memory.
c10::Device CheckDevice(const BackendCliOptions& o, const std::string& backend, bool meta,
                        bool memory);

// The backend of a run on `mesh`, checked: InputError("backend") for an unknown or unbuilt backend,
// InputError("timeout") for a timeout that is not positive, InputError("inject-fault") for a
// malformed fault, a fault on the simulated backend or one naming a rank outside the mesh,
// InputError("mesh") when a real world's size differs from the mesh's rank count ("launch with
// mpirun -np 8"). On a real backend, ranks other than 0 print nothing from here on (rank 0 reports;
// see Silenced).
std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, const DeviceMesh& mesh,
                                         FaultSpec* fault);
// The same without a mesh yet (batch mode: each line's mesh is checked with CheckMeshFitsWorld).
std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, FaultSpec* fault);
// InputError("mesh") when a real world's size differs from the mesh's rank count, or the mesh does
// not hold the world's ranks 0..N-1. Nothing for the simulated backend.
void CheckMeshFitsWorld(const Collectives& backend, const DeviceMesh& mesh);

// True while this process must not print (a real rank other than 0): main's error printer checks
// it.
bool Silenced();
// When a real run is on (MakeBackend made a real backend): ends the whole job with `message`
// printed by this rank (failures only this rank saw must not leave the others waiting until their
// timeout). Otherwise returns.
void EndRealJob(const std::string& message, int code);

// Adds --help, --mesh, --names, --shape and --dtype (described by `dtype_help`) to `desc`.
void AddTensorOptions(boost::program_options::options_description& desc, TensorOptions& o,
                      const char* dtype_help = "element type (sizes in bytes)");
// Parses `args` against `desc`. Unknown options are input errors (reported by main); so are
// positional arguments (InputError("arguments", "unexpected argument 'x' ...")), which no command
// without positionals takes.
boost::program_options::variables_map ParseOptions(
    const Args& args, const boost::program_options::options_description& desc);
// InputError("<name>", "missing: give --<name>") for the first option in `names` that was not
// given.
void RequireOptions(const boost::program_options::variables_map& vm,
                    std::initializer_list<const char*> names);
// In batch mode every case comes from its line: InputError("batch", "--mesh cannot be given with
// --batch ...") for any option given besides --batch and `allowed` (options that say where the
// lines run: --backend, --timeout). Also refuses an empty --batch path.
void RefuseOptionsWithBatch(const boost::program_options::variables_map& vm,
                            std::initializer_list<const char*> allowed = {});
// Checks, before any work, that `path` can be written by the output-path policy (CheckOutputFile in
// dtsim/trace/files.h: InputError(field) naming the path and the reason — empty, a directory, a
// device other than /dev/null or this process's stdout/stderr, a missing or unwritable parent
// directory), so a run is not wasted on an output that cannot be saved. Commands with inputs and
// several outputs use RunFiles (files.h), which also refuses an output that is an input.
void CheckOutputPath(const std::string& path, const std::string& field);
// Runs `check` (which throws InputError) where the run's outputs are written, before the run: in
// this process for a simulation (`backend` null or simulated: the InputError propagates); on rank 0
// alone for real ranks, where a refusal ends the whole job at once with rank 0's error and exit 2
// (Collectives::EndJob), not at the run's first collective after --timeout.
void CheckOnReportingRank(Collectives* backend, const std::function<void()>& check);
// The same for one --batch line, which must not end the job: rank 0 checks, every rank hears the
// answer (one broadcast), and on a refusal every rank throws InputError(field) (rank 0 with its
// reason), so all skip the line together. Every rank of a real run calls it at the same point.
void CheckLineOnReportingRank(Collectives* backend, const std::string& field,
                              const std::function<void()>& check);

// Bounds on what one case may cost. The command line uses the defaults; the fuzz targets
// (tests/fuzz/) smaller ones.
struct CaseLimits {
  int64_t max_ranks = kMaxMeshRanks;  // layout / plan: ranks in the mesh
  int64_t max_simulated_ranks =
      kMaxMeshRanks;  // redistribute / distribute: ranks simulated in this process
  std::optional<int64_t>
      max_simulation_bytes;  // nullopt: the memory available now (MemAvailable, rlimits, cgroup)
  bool write_files = true;   // false: output files a case names are checked, not written (fuzzing)
};

// A list of integers given as a JSON array or as text ("2x4", "5,10"); InputError(field) otherwise,
// naming the entry: "shape: [1]: integer 1e+20 is too large".
std::vector<int64_t> IntsFromJson(const nlohmann::json& value, const std::string& field);
// The string at `key` of a case; InputError(key) when missing or not a string.
std::string StringFromJson(const nlohmann::json& c, const char* key);
// The mesh of a case: "mesh" (list or text) and the optional "names" (list or "dp,tp").
DeviceMesh MeshFromJson(const nlohmann::json& c, const CaseLimits& limits = CaseLimits());
// Refuses keys of a batch case outside `allowed`: InputError("batch", "unknown key 'x' (expected
// one of: ...)"), and requires each of `required`: InputError(key, "missing").
void CheckCaseKeys(const nlohmann::json& c, std::initializer_list<const char*> allowed,
                   std::initializer_list<const char*> required);

// The spec a redistribution starts from, with errors in the placements reported against "from" (the
// option the user typed): "from: '[S(0)]' has 1 placement for mesh[2, 4] of 2 dims".
DTensorSpec SourceSpec(DeviceMesh mesh, Placements from, std::vector<int64_t> shape, DType dtype);

// Refuses a simulation of more than limits.max_simulated_ranks ranks (InputError("mesh")), and one
// whose estimated memory exceeds limits.max_simulation_bytes or, by default, the memory available
// now (the least of MemAvailable, the headroom under RLIMIT_AS / RLIMIT_DATA, and the cgroup's
// headroom), naming the estimate: about 8 KiB per simulated rank (tensor headers, per-rank tables)
// plus, in a data run (`meta` false), numel * itemsize * (ranks + 2) bytes (every rank may hold a
// whole replica, and a step holds its input and output). InputError("shape") when the data
// dominates, InputError("mesh") otherwise.
// `already`: the estimate of what the same run holds besides (an op's earlier tensor arguments,
// SimulationBytes of each), so that a run is bounded by its total, not by each tensor alone.
void CheckSimulationFits(const DTensorSpec& spec, int64_t world_size, bool meta = false,
                         const CaseLimits& limits = CaseLimits(), long double already = 0);
// That estimate for one tensor.
long double SimulationBytes(const DTensorSpec& spec, int64_t world_size, bool meta);
// Refuses (InputError(field)) placements that would cut one rank's shard into more than
// kMaxBlocksPerRank separate blocks (the product over tensor dims of the index ranges a rank owns;
// a _S(d,k) gives up to min(k, size of d) ranges): running and checking a redistribution works
// block by block, so such a case would run for minutes. Example: [_S(0,1000000)] on shape [2000000]
// gives each of 2 ranks 10^6 blocks.
void CheckSimulationBlocks(const DTensorSpec& spec, const std::string& field);
inline constexpr int64_t kMaxBlocksPerRank = int64_t{1} << 16;
// The memory this process may still allocate (see CheckSimulationFits), or nullopt where none of it
// can be read.
std::optional<int64_t> AvailableMemory();

// True for an allocation failure: std::bad_alloc, or LibTorch's CPU allocator refusing ("can't
// allocate memory").
bool IsOutOfMemory(const std::exception& e);

// One batch line's answer: the command's JSON, or {"error": "<field>: <message>", "field", "line"}.
struct BatchAnswer {
  nlohmann::json json;
  bool failed = false;
};
using BatchCase = std::function<nlohmann::json(const nlohmann::json&)>;
// Runs one batch line (numbered `line_no` from 1 in messages): parses it with the limits of every
// JSON dtsim reads (ParseJsonText: depth, duplicate keys, numbers out of range), requires a JSON
// object and calls `run`. Never throws: bad input (InputError) gives its field, running out of
// memory the field "memory", and anything else — a dtsim bug —
// {"error": "internal error: ...", "internal": true}.
BatchAnswer RunBatchLine(std::string_view line, int64_t line_no, const BatchCase& run);
// Reads JSON cases one per line from `path` ("-" = stdin; not a directory; lines longer than
// kMaxBatchLineBytes are answered with an error and skipped) and prints RunBatchLine's answer per
// non-blank line, flushed after each line. Returns the exit code: 0 when every line passed, 1 when
// any failed.
int RunJsonLines(const std::string& path, const BatchCase& run);
inline constexpr size_t kMaxBatchLineBytes = size_t{64} << 20;

// The batch cases of the commands that have --batch (defined in <command>_command.cc): one JSON
// case in, one JSON answer out, InputError for a bad case. The fuzz targets call them without a
// process.
nlohmann::json LayoutCase(const nlohmann::json& c, const CaseLimits& limits = CaseLimits());
nlohmann::json PlanCase(const nlohmann::json& c, const CaseLimits& limits = CaseLimits());
nlohmann::json RedistributeCase(const nlohmann::json& c, const CaseLimits& limits = CaseLimits());
// One `dtsim op --batch` line (op_command.cc).
nlohmann::json OpBatchCase(const nlohmann::json& c, const CaseLimits& limits = CaseLimits());

}  // namespace dtsim::cli
