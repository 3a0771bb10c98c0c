// Helpers shared by the dtsim subcommands.
#include "cli_common.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <iostream>

#include "dtsim/backends/backends.h"
#include "dtsim/error.h"
#include "dtsim/json_reader.h"

namespace dtsim::cli {

namespace po = boost::program_options;

namespace {
bool g_silenced = false;
std::shared_ptr<Collectives> g_real_backend;  // the real backend of this process's run, for EndRealJob

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
  desc.add_options()
      ("backend", po::value(&o.backend)->default_value(o.backend),
       "local (simulate every rank here), mpi or nccl (real ranks: launch with mpirun -np <mesh size>)")
      ("timeout", po::value(&o.timeout)->default_value(o.timeout),
       "real backends: seconds a rank waits for the others at a collective before the whole job ends")
      ("inject-fault", po::value(&o.fault),
       "real backends: wrong-offset:R, wrong-op:R, drop-rank:R or stall-rank:R:SECONDS (optionally @K)");
}

std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, FaultSpec* fault) {
  if (!(o.timeout > 0) || o.timeout > 86400) {
    throw InputError("timeout", StrCat("must be a number of seconds above 0 and at most 86400, got ", o.timeout));
  }
  *fault = ParseFault(o.fault);
  if (fault->active() && o.backend == "local") {
    throw InputError("inject-fault", StrCat("'", ExcerptText(o.fault), "' needs a real backend (--backend mpi or nccl); "
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
    throw InputError("inject-fault", StrCat("'", ExcerptText(o.fault), "' names rank ", fault->rank, " but the ",
                                            o.backend, " world has ranks 0..", backend->world_size() - 1));
  }
  return backend;
}

void CheckMeshFitsWorld(const Collectives& backend, const DeviceMesh& mesh) {
  if (backend.simulated()) return;
  if (backend.world_size() != mesh.size()) {
    throw InputError("mesh", StrCat(mesh.ToString(), " has ", mesh.size(), " ranks but the ", backend.backend(),
                                    " world has ", backend.world_size(), ": launch with mpirun -np ", mesh.size()));
  }
  std::vector<int64_t> sorted = mesh.ranks();
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != static_cast<int64_t>(i)) {
      throw InputError("mesh", StrCat(mesh.ToString(), " must hold the world's ranks 0..", mesh.size() - 1,
                                      " on a real backend"));
    }
  }
}

std::shared_ptr<Collectives> MakeBackend(const BackendCliOptions& o, const DeviceMesh& mesh, FaultSpec* fault) {
  FaultSpec parsed = ParseFault(o.fault);
  if (parsed.active() && o.backend != "local" && parsed.rank >= mesh.size()) {
    throw InputError("inject-fault", StrCat("'", ExcerptText(o.fault), "' names rank ", parsed.rank, " but ",
                                            mesh.ToString(), " has ranks 0..", mesh.size() - 1));
  }
  std::shared_ptr<Collectives> backend = MakeBackend(o, fault);
  CheckMeshFitsWorld(*backend, mesh);
  return backend;
}

void AddTensorOptions(po::options_description& desc, TensorOptions& o, const char* dtype_help) {
  desc.add_options()
      ("help,h", "show this help")
      ("mesh", po::value(&o.mesh), "mesh shape, e.g. 2x4")
      ("names", po::value(&o.names), "mesh dim names, e.g. dp,tp")
      ("shape", po::value(&o.shape), "global tensor shape, e.g. 5,10")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), dtype_help);
}

po::variables_map ParseOptions(const Args& args, const po::options_description& desc) {
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  return vm;
}

void RequireOptions(const po::variables_map& vm, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!vm.count(name)) throw InputError(name, StrCat("missing: give --", name));
  }
}

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

DeviceMesh MeshFromJson(const nlohmann::json& c) {
  if (!c.is_object()) throw InputError("case", "expected a JSON object");
  if (!c.contains("mesh")) throw InputError("mesh", "missing");
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
  return DeviceMesh::Create(IntsFromJson(c["mesh"], "mesh"), names);
}

DTensorSpec SourceSpec(DeviceMesh mesh, Placements from, std::vector<int64_t> shape, DType dtype) {
  if (static_cast<int64_t>(from.size()) != mesh.ndim()) {
    throw InputError("from", StrCat("'", ToString(from), "' has ", from.size(), " placement",
                                    from.size() == 1 ? "" : "s", " for ", mesh.ToString(), " of ", mesh.ndim(),
                                    " dim", mesh.ndim() == 1 ? "" : "s"));
  }
  for (Placement& p : from) p = p.Normalized(static_cast<int64_t>(shape.size()), "from");
  return DTensorSpec::Create(std::move(mesh), std::move(from), std::move(shape), dtype);
}

namespace {

// MemAvailable from /proc/meminfo in bytes, or nullopt where it cannot be read.
std::optional<int64_t> AvailableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

void CheckSimulationFits(const DTensorSpec& spec, int64_t world_size) {
  constexpr int64_t kMaxSimulatedRanks = 65536;
  if (world_size > kMaxSimulatedRanks) {
    throw InputError("mesh", StrCat(spec.mesh().ToString(), " has ", world_size, " ranks; one process simulates at most ",
                                    kMaxSimulatedRanks, " (dtsim layout and dtsim plan take up to ", kMaxMeshRanks,
                                    ")"));
  }
  const auto available = AvailableMemory();
  if (!available) return;
  const long double need = static_cast<long double>(spec.numel()) * ItemSize(spec.dtype()) * (world_size + 2);
  if (need > *available) {
    throw InputError("shape", StrCat(IntListToString(spec.shape()), " ", ToString(spec.dtype()), " on ", world_size,
                                     " simulated ranks needs about ", static_cast<int64_t>(need / (1 << 20)),
                                     " MiB, but ", *available / (1 << 20), " MiB are available; simulate a smaller "
                                     "tensor"));
  }
}

int RunJsonLines(const std::string& path, const std::function<nlohmann::json(const nlohmann::json&)>& run) {
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
      result = run(nlohmann::json::parse(line));
    } catch (const nlohmann::json::parse_error& e) {
      result = {{"error", StrCat("batch: line ", line_no, " is not JSON: ", e.what())}, {"field", "batch"}};
    } catch (const InputError& e) {
      result = {{"error", e.what()}, {"field", e.field()}};
    } catch (const std::exception& e) {
      // A bug in dtsim, not bad input: reported on this line (marked "internal") so the batch goes on.
      std::string what = e.what();
      result = {{"error", "internal error: " + what.substr(0, what.find('\n'))}, {"internal", true}};
    }
    std::cout << result.dump() << "\n";
  }
  std::cout.flush();
  return 0;
}

}  // namespace dtsim::cli
