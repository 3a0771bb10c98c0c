// Helpers shared by the dtsim subcommands.
#include "cli_common.h"

#include <ATen/Context.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ext/stdio_filebuf.h>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <sstream>

#include "dtsim/backends/backends.h"
#include "dtsim/core/real_run.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/trace.h"

namespace dtsim::cli {

namespace po = boost::program_options;

namespace {
bool g_silenced = false;
std::shared_ptr<Collectives>
    g_real_backend;  // the real backend of this process's run, for EndRealJob

// A stream buffer that drops everything: stdout of the ranks that do not report.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};
}  // namespace

bool Silenced() { return g_silenced; }

void EndRealJob(const std::string& message, int code) {
  if (g_real_backend) g_real_backend->EndJob(message, code);
}

void AddBackendOptions(po::options_description& desc, BackendCliOptions& o) {
  desc.add_options()("backend", po::value(&o.backend)->default_value(o.backend),
                     "local (simulate every rank here), mpi or nccl (real ranks: launch with "
                     "mpirun -np <mesh size>)")(
      "timeout", po::value(&o.timeout)->default_value(o.timeout),
      "real backends: seconds a rank waits for the others at a collective before the whole job "
      "ends")("inject-fault", po::value(&o.fault),
              "real backends: wrong-offset:R, wrong-op:R, drop-rank:R or stall-rank:R:SECONDS "
              "(optionally @K)");
}

void AddDeviceOption(po::options_description& desc, BackendCliOptions& o) {
  desc.add_options()("device", po::value(&o.device)->default_value(o.device),
                     "where every rank's shards lie: cpu, or cuda (a GPU; needs a dtsim built on a "
                     "LibTorch with CUDA, scripts/gpu_build.sh; the local and nccl backends)");
}

c10::Device CheckDevice(const BackendCliOptions& o, const std::string& backend, bool meta,
                        bool memory) {
  if (o.device == "cpu") return c10::Device(c10::kCPU);
  if (o.device != "cuda") {
    throw InputError("device",
                     StrCat("must be cpu or cuda, got '", ExcerptText(o.device, 40), "'"));
  }
  if (!at::hasCUDA()) {
    throw InputError("device",
                     "cuda: this dtsim's LibTorch has no CUDA or no GPU is visible (the project "
                     "venv's torch is the CPU build; scripts/gpu_build.sh builds dtsim on one with "
                     "CUDA)");
  }
  if (backend == "mpi") {
    throw InputError("device",
                     "cuda: the mpi backend passes host memory to MPI; use --backend nccl for GPU "
                     "ranks or the local backend to simulate on the GPU");
  }
  if (meta) throw InputError("device", "cuda: a --meta run holds shapes only, on no device");
  if (memory) {
    throw InputError("device", "cuda: --memory meters host memory; leave --device at cpu");
  }
  return c10::Device(c10::kCUDA);  // the current GPU (a real rank's own)
}

void CheckTimeout(double seconds) {
  if (!(seconds >= kMinTimeoutSeconds && seconds <= kMaxTimeoutSeconds)) {
    throw InputError("timeout", StrCat("must be a number of seconds from ", kMinTimeoutSeconds,
                                       " to ", kMaxTimeoutSeconds, ", got ", seconds));
  }
}

namespace {
constexpr std::string_view kFaultMissedStart = "dtsim: warning: the fault ";
constexpr std::string_view kFaultMissedMiddle = " did not strike: ";
}  // namespace

std::string FaultMissedWarning(const FaultSpec& fault, std::string_view why) {
  return StrCat(kFaultMissedStart, fault.ToString(), kFaultMissedMiddle, why);
}

bool IsFaultMissedWarning(std::string_view line) {
  return line.rfind(kFaultMissedStart, 0) == 0 && line.find(kFaultMissedMiddle) != line.npos;
}

std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, FaultSpec* fault) {
  CheckTimeout(o.timeout);
  *fault = ParseFault(o.fault);
  if (fault->active() && o.backend == "local") {
    throw InputError("inject-fault", StrCat("'", ExcerptText(o.fault),
                                            "' needs a real backend (--backend mpi or nccl); "
                                            "the simulated world computes every rank at once"));
  }
  BackendOptions options;
  options.name = o.backend;
  options.real.timeout_s = o.timeout;
  std::shared_ptr<Collectives> backend = MakeCollectives(options);
  if (backend->simulated()) return backend;
  g_real_backend = backend;
  if (backend->rank() != 0) {
    static NullBuffer null;
    std::cout.rdbuf(&null);
    g_silenced = true;
  }
  if (fault->active() && fault->rank >= backend->world_size()) {
    throw InputError("inject-fault",
                     StrCat("'", ExcerptText(o.fault), "' names rank ", fault->rank, " but the ",
                            o.backend, " world has ranks 0..", backend->world_size() - 1));
  }
  return backend;
}

void CheckMeshFitsWorld(const Collectives& backend, const DeviceMesh& mesh) {
  if (backend.simulated()) return;
  if (backend.world_size() != mesh.size()) {
    throw InputError("mesh", StrCat(mesh.ToString(), " has ", mesh.size(), " ranks but the ",
                                    backend.backend(), " world has ", backend.world_size(),
                                    ": launch with mpirun -np ", mesh.size()));
  }
  std::vector<int64_t> sorted = mesh.ranks();
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != static_cast<int64_t>(i)) {
      throw InputError("mesh", StrCat(mesh.ToString(), " must hold the world's ranks 0..",
                                      mesh.size() - 1, " on a real backend"));
    }
  }
}

std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, const DeviceMesh& mesh,
                                         FaultSpec* fault) {
  FaultSpec parsed = ParseFault(o.fault);
  if (parsed.active() && o.backend != "local" && parsed.rank >= mesh.size()) {
    throw InputError("inject-fault",
                     StrCat("'", ExcerptText(o.fault), "' names rank ", parsed.rank, " but ",
                            mesh.ToString(), " has ranks 0..", mesh.size() - 1));
  }
  std::shared_ptr<Collectives> backend = MakeBackend(o, fault);
  CheckMeshFitsWorld(*backend, mesh);
  return backend;
}

void AddTensorOptions(po::options_description& desc, TensorOptions& o, const char* dtype_help) {
  desc.add_options()("help,h", "show this help")("mesh", po::value(&o.mesh),
                                                 "mesh shape, e.g. 2x4")(
      "names", po::value(&o.names), "mesh dim names, e.g. dp,tp")("shape", po::value(&o.shape),
                                                                  "global tensor shape, e.g. 5,10")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), dtype_help);
}

po::variables_map ParseOptions(const Args& args, const po::options_description& desc) {
  po::variables_map vm;
  const po::parsed_options parsed = po::command_line_parser(args).options(desc).run();
  for (const std::string& extra :
       po::collect_unrecognized(parsed.options, po::include_positional)) {
    throw InputError("arguments", StrCat("unexpected argument '", ExcerptText(extra, 40),
                                         "' (options are written --name value; see --help)"));
  }
  po::store(parsed, vm);
  po::notify(vm);
  return vm;
}

void RequireOptions(const po::variables_map& vm, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!vm.count(name)) throw InputError(name, StrCat("missing: give --", name));
  }
}

void RefuseOptionsWithBatch(const po::variables_map& vm,
                            std::initializer_list<const char*> allowed) {
  if (vm["batch"].as<std::string>().empty()) {
    throw InputError("batch", "the path is empty (give a file, or - for stdin)");
  }
  for (const auto& [name, value] : vm) {
    if (name == "batch" || value.defaulted()) continue;
    if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
    // Options of one run that no batch line carries: say so, instead of pointing at a key.
    static const std::set<std::string> kOneRunOnly = {"inject-fault", "device"};
    if (kOneRunOnly.count(name)) {
      throw InputError("batch", StrCat("--", name,
                                       " cannot be given with --batch: it applies to one run; run "
                                       "that case alone, without --batch"));
    }
    throw InputError("batch",
                     StrCat("--", name,
                            " cannot be given with --batch (every line of the batch gives its own "
                            "case; put \"",
                            name, "\" in the lines)"));
  }
}

void CheckOutputPath(const std::string& path, const std::string& field) {
  CheckOutputFile(path, field);
}

void CheckOnReportingRank(Collectives* backend, const std::function<void()>& check) {
  if (backend == nullptr || backend->simulated()) {
    check();
    return;
  }
  if (!IsReportingRank(*backend)) return;
  try {
    check();
  } catch (const InputError& e) {
    backend->EndJob(e.what(), 2);
  }
}

void CheckLineOnReportingRank(Collectives* backend, const std::string& field,
                              const std::function<void()>& check) {
  if (backend == nullptr || backend->simulated()) {
    check();
    return;
  }
  std::optional<InputError> refused;
  if (IsReportingRank(*backend)) {
    try {
      check();
    } catch (const InputError& e) {
      refused = e;
    }
  }
  if (BroadcastFromRankZero(*backend, refused ? 1 : 0) == 0) return;
  if (refused) throw *refused;
  throw InputError(field, "refused by rank 0, which reports why");  // answered by rank 0 alone
}

std::vector<int64_t> IntsFromJson(const nlohmann::json& value, const std::string& field) {
  if (value.is_string()) return ParseIntList(value.get_ref<const std::string&>(), field);
  JsonReader r(value, field);
  if (!value.is_array())
    r.Fail(StrCat("expected a list of integers or a text like \"2x4\", got ", Excerpt(value)));
  return r.AsInts(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 1024);
}

std::string StringFromJson(const nlohmann::json& c, const char* key) {
  JsonReader r(c, "batch");
  if (!r.Has(key)) throw InputError(key, "missing");
  return JsonReader(c[key], key).AsString();
}

DeviceMesh MeshFromJson(const nlohmann::json& c, const CaseLimits& limits) {
  JsonReader r(c, "batch");
  r.ExpectObject();
  if (!r.Has("mesh")) throw InputError("mesh", "missing");
  std::vector<std::string> names;
  if (r.Has("names")) {
    const nlohmann::json& n = c["names"];
    if (n.is_string()) {
      names = ParseNameList(n.get_ref<const std::string&>());
    } else if (n.is_array()) {
      names = JsonReader(n, "names").AsStrings();
    } else {
      throw InputError(
          "names", StrCat("expected a list of names or a text like \"dp,tp\", got ", Excerpt(n)));
    }
  }
  DeviceMesh mesh = DeviceMesh::Create(IntsFromJson(c["mesh"], "mesh"), names);
  if (mesh.size() > limits.max_ranks) {
    throw InputError("mesh", StrCat(mesh.ToString(), " has ", mesh.size(), " ranks; at most ",
                                    limits.max_ranks, " are allowed here"));
  }
  return mesh;
}

void CheckCaseKeys(const nlohmann::json& c, std::initializer_list<const char*> allowed,
                   std::initializer_list<const char*> required) {
  JsonReader r(c, "batch");
  r.OnlyKeys(allowed);
  for (const char* key : required) {
    if (!r.Has(key)) throw InputError(key, "missing");
  }
}

DTensorSpec SourceSpec(DeviceMesh mesh, Placements from, std::vector<int64_t> shape, DType dtype) {
  if (static_cast<int64_t>(from.size()) != mesh.ndim()) {
    throw InputError(
        "from", StrCat("'", ExcerptText(ToString(from)), "' has ", from.size(), " placement",
                       from.size() == 1 ? "" : "s", " for ", mesh.ToString(), " of ", mesh.ndim(),
                       " dim", mesh.ndim() == 1 ? "" : "s"));
  }
  for (Placement& p : from) p = p.Normalized(static_cast<int64_t>(shape.size()), "from");
  try {
    return DTensorSpec::Create(std::move(mesh), std::move(from), std::move(shape), dtype);
  } catch (const InputError& e) {
    if (e.field() != "placements") throw;
    const std::string what = e.what();
    throw InputError("from", what.substr(e.field().size() + 2));  // the option the user typed
  }
}

namespace {

// A number from a "Key: value" file such as /proc/meminfo ("MemAvailable:" in kB) or
// /proc/self/status, line by line (lines whose value is not a number, as status's "Name:", are
// skipped, not the end of the file); nullopt if absent.
std::optional<int64_t> ReadKeyedNumber(const char* path, const std::string& wanted_key,
                                       int64_t scale) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t value = 0;
    if (fields >> key && key == wanted_key && fields >> value) return value * scale;
  }
  return std::nullopt;
}

std::optional<int64_t> ReadNumber(const char* path) {
  std::ifstream in(path);
  int64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

// Memory a simulated rank needs beyond its tensor data (tensor headers, per-rank tables of the plan
// and the reports): 1.5 KiB measured for S(0) -> R on 2^20 ranks, in data and metadata-only runs
// alike (docs/performance.md); with a margin for longer plans and traces.
constexpr int64_t kBytesPerSimulatedRank = 8 << 10;

}  // namespace

std::optional<int64_t> AvailableMemory() {
  std::optional<int64_t> out = ReadKeyedNumber("/proc/meminfo", "MemAvailable:", 1024);
  auto take = [&](int64_t v) { out = out ? std::min(*out, v) : v; };
  // Address-space and data limits (ulimit -v / -d, prlimit): what is left under them.
  const std::optional<int64_t> vm_size = ReadKeyedNumber("/proc/self/status", "VmSize:", 1024);
  const std::optional<int64_t> vm_data = ReadKeyedNumber("/proc/self/status", "VmData:", 1024);
  struct rlimit lim;
  if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && vm_size) {
    take(std::max<int64_t>(0, static_cast<int64_t>(lim.rlim_cur) - *vm_size));
  }
  if (::getrlimit(RLIMIT_DATA, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && vm_data) {
    take(std::max<int64_t>(0, static_cast<int64_t>(lim.rlim_cur) - *vm_data));
  }
  // cgroup v2 memory limit of this process's group ("max" reads as no number).
  const std::optional<int64_t> cg_max = ReadNumber("/sys/fs/cgroup/memory.max");
  const std::optional<int64_t> cg_now = ReadNumber("/sys/fs/cgroup/memory.current");
  if (cg_max && cg_now) take(std::max<int64_t>(0, *cg_max - *cg_now));
  return out;
}

long double SimulationBytes(const DTensorSpec& spec, int64_t world_size, bool meta) {
  const long double overhead = static_cast<long double>(world_size) * kBytesPerSimulatedRank;
  const long double data =
      meta ? 0 : static_cast<long double>(spec.numel()) * ItemSize(spec.dtype()) * (world_size + 2);
  return overhead + data;
}

void CheckSimulationFits(const DTensorSpec& spec, int64_t world_size, bool meta,
                         const CaseLimits& limits, long double already) {
  // The mesh caps the rank count at kMaxMeshRanks (the fuzz targets ask for fewer); what remains is
  // memory: every rank's tensor headers and tables, and in a data run its tensors (every rank may
  // hold a whole copy: a Partial source or a local split of replicas gives each rank its own; a
  // step holds its input and output).
  if (world_size > limits.max_simulated_ranks) {
    throw InputError("mesh",
                     StrCat(spec.mesh().ToString(), " has ", world_size,
                            " ranks; this run simulates at most ", limits.max_simulated_ranks));
  }
  const std::optional<int64_t> available =
      limits.max_simulation_bytes ? limits.max_simulation_bytes : AvailableMemory();
  if (!available) return;
  const long double overhead = static_cast<long double>(world_size) * kBytesPerSimulatedRank;
  const long double data =
      meta ? 0 : static_cast<long double>(spec.numel()) * ItemSize(spec.dtype()) * (world_size + 2);
  if (already + overhead + data <= *available) return;
  const std::string estimate =
      StrCat("about ", static_cast<int64_t>((already + overhead + data) / (1 << 20)), " MiB",
             already > 0 ? " with the tensors before it" : "", ", but ", *available / (1 << 20),
             " MiB are available");
  if (data >= overhead) {
    throw InputError("shape", StrCat(IntListToString(spec.shape()), " ", ToString(spec.dtype()),
                                     " on ", world_size, " simulated ranks needs ", estimate,
                                     "; simulate a smaller tensor (or use --meta: "
                                     "shapes only, no data)"));
  }
  throw InputError(
      "mesh", StrCat(spec.mesh().ToString(), ": ", meta ? "a metadata-only run of " : "a run of ",
                     world_size, " simulated ranks needs ", estimate));
}

bool IsOutOfMemory(const std::exception& e) {
  const std::string_view what = e.what();
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
         what.find("can't allocate memory") !=
             std::string_view::npos ||  // c10's DefaultCPUAllocator
         what.find("caching allocator: cannot allocate") !=
             std::string_view::npos;  // dtsim's (caching_allocator.h)
}

void CheckSimulationBlocks(const DTensorSpec& spec, const std::string& field) {
  // An upper bound per tensor dim: the ranges of every _S on it add up (a later shard of the same
  // dim splits what the earlier ones left, so their ranges compose into at most the sum); a plain
  // shard keeps one range.
  std::vector<long double> ranges(spec.ndim(), 0);
  for (const Placement& p : spec.placements()) {
    if (!p.is_strided_shard()) continue;
    ranges[p.dim()] += std::min<long double>(p.split_factor(), spec.shape()[p.dim()]);
  }
  long double blocks = 1;
  for (long double r : ranges) blocks *= std::max<long double>(1, r);
  if (blocks > kMaxBlocksPerRank) {
    throw InputError(
        field,
        StrCat("'", ExcerptText(ToString(spec.placements())), "' on shape ",
               ExcerptText(IntListToString(spec.shape())), " may cut a rank's shard into ",
               static_cast<double>(blocks), " separate blocks; a simulation handles at most ",
               kMaxBlocksPerRank, " per rank (dtsim layout and dtsim plan take more)"));
  }
}

BatchAnswer RunBatchLine(std::string_view line, int64_t line_no, const BatchCase& run) {
  auto error = [&](const std::string& what, const std::string& field) {
    return BatchAnswer{{{"error", what}, {"field", field}, {"line", line_no}}, true};
  };
  try {
    const nlohmann::json c = ParseJsonText(line, "batch", StrCat("line ", line_no));
    if (!c.is_object()) {
      throw InputError(
          "batch", StrCat("line ", line_no, " is not a JSON object (it holds ", c.type_name(), " ",
                          Excerpt(c, 40), "); give one case object per line"));
    }
    return BatchAnswer{run(c), false};
  } catch (const InputError& e) {
    return error(e.what(), e.field());
  } catch (const std::exception& e) {
    if (IsOutOfMemory(e)) {
      return error("memory: out of memory while running this case; simulate a smaller tensor",
                   "memory");
    }
    // A bug in dtsim, not bad input: reported on this line (marked "internal") so the batch goes
    // on.
    const std::string what = e.what();
    return BatchAnswer{
        {{"error", "internal error: " + ExcerptText(what.substr(0, what.find('\n')), 500)},
         {"internal", true},
         {"line", line_no}},
        true};
  }
}

namespace {

// A line longer than the limit is skipped to its end, but not forever: input with no newline for
// this long (/dev/zero on stdin) ends the batch.
constexpr size_t kMaxBatchSkipBytes = size_t{1} << 30;

// Reads one line (without its '\n') of at most `max` bytes; a longer line is consumed to its end
// (at most kMaxBatchSkipBytes, then InputError) and `too_long` set. False at the end of input.
bool ReadBoundedLine(std::istream& in, std::string& line, size_t max, bool& too_long,
                     int64_t line_no) {
  line.clear();
  too_long = false;
  std::streambuf* buf = in.rdbuf();
  bool any = false;
  size_t skipped = 0;
  while (true) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      if (!any) in.setstate(std::ios::eofbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (line.size() < max) {
      line.push_back(static_cast<char>(c));
    } else {
      too_long = true;
      if (++skipped > kMaxBatchSkipBytes) {
        throw InputError("batch",
                         StrCat("line ", line_no, " has no end within ", kMaxBatchSkipBytes + max,
                                " bytes; the rest of the input is not read"));
      }
    }
  }
}

}  // namespace

int RunJsonLines(const std::string& path, const BatchCase& run) {
  std::ifstream file;
  std::unique_ptr<__gnu_cxx::stdio_filebuf<char>> fifo_buf;  // a FIFO: read through its descriptor
  std::unique_ptr<std::istream> fifo_in;
  std::istream* in = &std::cin;
  if (path.empty()) throw InputError("batch", "the path is empty (give a file, or - for stdin)");
  if (path != "-") {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      throw InputError("batch",
                       StrCat("cannot open '", ExcerptText(path), "': ", std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode))
      throw InputError("batch", StrCat("'", ExcerptText(path), "' is a directory, not a file"));
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
      throw InputError("batch", StrCat("'", ExcerptText(path), "' is a ",
                                       S_ISSOCK(st.st_mode) ? "socket" : "device",
                                       ", not a file (give - to read stdin)"));
    }
    if (S_ISFIFO(st.st_mode)) {
      fifo_buf = std::make_unique<__gnu_cxx::stdio_filebuf<char>>(OpenFifoForReading(path, "batch"),
                                                                  std::ios::in | std::ios::binary);
      fifo_in = std::make_unique<std::istream>(fifo_buf.get());
      in = fifo_in.get();
    } else {
      file.open(path, std::ios::binary);
      if (!file)
        throw InputError("batch",
                         StrCat("cannot open '", ExcerptText(path), "': ", std::strerror(errno)));
      in = &file;
    }
  }
  std::string line;
  bool too_long = false;
  int64_t line_no = 0;
  bool any_failed = false;
  while (ReadBoundedLine(*in, line, kMaxBatchLineBytes, too_long, line_no + 1)) {
    ++line_no;
    if (!too_long && line.find_first_not_of(" \t\r") == std::string::npos) continue;
    BatchAnswer answer;
    if (too_long) {
      answer = {{{"error", StrCat("batch: line ", line_no, " is longer than ", kMaxBatchLineBytes,
                                  " bytes")},
                 {"field", "batch"},
                 {"line", line_no}},
                true};
    } else {
      answer = RunBatchLine(line, line_no, run);
    }
    any_failed = any_failed || answer.failed;
    // Flushed per line: a slow later case never holds back the answers before it.
    std::cout << SafeDump(answer.json) << std::endl;
  }
  if (in->bad()) throw InputError("batch", StrCat("reading '", ExcerptText(path), "' failed"));
  return any_failed ? 1 : 0;
}

}  // namespace dtsim::cli
