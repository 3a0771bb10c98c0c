// dtsim compare: runs one redistribution on the simulated world and on real ranks (it launches
// mpirun itself), diffs the two traces and prints a verdict — the one command for "does the real
// run do what the simulation says?".
//
//   dtsim compare --np 8 [--backend mpi|nccl] --mesh 2x4 [--names dp,tp] --shape 5,10 --from
//   "S(0),R" --to "R,S(1)"
//                 [--dtype float32] [--planner greedy] [--timeout 60] [--inject-fault SPEC] [--keep
//                 DIR]
//                 [--mpirun mpirun]
// Exit codes: 0 the runs agree, 1 they differ (the first difference is where they part), 2 bad
// input, 4 the real run failed (stuck, diverged or crashed: its error is printed).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "redistribute_command.h"

extern char** environ;

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace dtsim::cli {
namespace {

// Options of `dtsim compare`; defaults in comments.
struct CompareOptions : TensorOptions, BackendCliOptions {
  int64_t np = 0;                  // required: ranks of the real run (the mesh's size)
  std::string from;                // required
  std::string to;                  // required
  std::string planner = "greedy";  // as for redistribute
  std::string
      keep;  // "" = remove the traces afterwards; else a directory to keep sim.json/real.json in
  std::string mpirun = "mpirun";  // the launcher
};

// The path of this executable.
std::string SelfPath() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw InputError("compare", StrCat("cannot find the dtsim executable: ", ec.message()));
  return p.string();
}

struct Launched {
  int exit_code = -1;  // -1: killed by the watchdog
  std::string stderr_text;
};

// Runs `argv` with stdout and stderr into files under `dir`; kills it after `limit_s` seconds.
Launched Launch(const std::vector<std::string>& argv, const fs::path& dir, double limit_s) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string out = (dir / "real.stdout").string(), err = (dir / "real.stderr").string();
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(
      &attr, POSIX_SPAWN_SETPGROUP);  // its own process group: the watchdog kills all of it
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw InputError(
        "mpirun", StrCat("cannot start '", ExcerptText(argv[0]), "': ", std::strerror(rc),
                         " (install OpenMPI: apt-get install openmpi-bin, or give --mpirun PATH)"));
  }
  Launched result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.exit_code = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (result.exit_code != -1 || !WIFSIGNALED(status)) {
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  result.stderr_text = text.str();
  return result;
}

}  // namespace

int RunCompare(const Args& args) {
  CompareOptions o;
  po::options_description desc("dtsim compare options");
  AddTensorOptions(desc, o, "element type of the arange tensor");
  desc.add_options()("np", po::value(&o.np), "ranks of the real run (= the mesh's size)")(
      "from", po::value(&o.from), "source placements, one per mesh dim")("to", po::value(&o.to),
                                                                         "target placements")(
      "planner", po::value(&o.planner)->default_value(o.planner), "greedy, min-cost or graph")(
      "keep", po::value(&o.keep), "keep both traces in this directory (sim.json, real.json)")(
      "mpirun", po::value(&o.mpirun)->default_value(o.mpirun), "the MPI launcher");
  o.backend = "mpi";
  AddBackendOptions(desc, o);
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout
        << "usage: dtsim compare --np 8 [--backend mpi|nccl] --mesh 2x4 [--names dp,tp] --shape "
           "5,10 "
           "--from \"S(0),R\" --to \"R,S(1)\" [--inject-fault SPEC] [--timeout 60] [--keep DIR]\n"
        << desc;
    return 0;
  }
  RequireOptions(vm, {"np", "mesh", "shape", "from", "to"});
  if (o.backend == "local") {
    throw InputError(
        "backend",
        "compare runs the simulation itself; --backend names the real one (mpi or nccl)");
  }
  const PlannerKind kind = ParsePlannerKind(o.planner);
  DTensorSpec src = SourceSpec(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.from, "from"),
                               ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  Case c{src, ValidateRedistribute(src, ParsePlacements(o.to, "to")), kind};
  if (o.np != src.mesh().size()) {
    throw InputError("np", StrCat(o.np, " ranks for ", src.mesh().ToString(), ", which has ",
                                  src.mesh().size(), " ranks: give --np ", src.mesh().size()));
  }
  if (!(o.timeout > 0) || o.timeout > 86400) {
    throw InputError(
        "timeout",
        StrCat("must be a number of seconds above 0 and at most 86400, got ", o.timeout));
  }
  const FaultSpec fault = ParseFault(o.fault);
  if (fault.active() && fault.rank >= o.np) {
    throw InputError("inject-fault", StrCat("'", ExcerptText(o.fault), "' names rank ", fault.rank,
                                            " but the run has ranks 0..", o.np - 1));
  }
  // Where the traces go.
  fs::path dir;
  bool remove_dir = false;
  if (!o.keep.empty()) {
    dir = o.keep;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir)) {
      throw InputError("keep", StrCat("cannot use '", ExcerptText(o.keep),
                                      "' as a directory: ", ec ? ec.message() : "not a directory"));
    }
  } else {
    std::string templ = (fs::temp_directory_path() / "dtsim-compare-XXXXXX").string();
    if (!mkdtemp(templ.data()))
      throw InputError("compare",
                       StrCat("cannot make a temporary directory: ", std::strerror(errno)));
    dir = templ;
    remove_dir = true;
  }
  struct Cleanup {
    fs::path dir;
    bool active;
    ~Cleanup() {
      std::error_code ec;
      if (active) fs::remove_all(dir, ec);
    }
  } cleanup{dir, remove_dir};

  // 1. The simulation, in this process.
  TraceMeta meta;
  meta.command = "redistribute";
  meta.backend = "local";
  meta.world_size = src.mesh().size();
  meta.planner = ToString(kind);
  meta.argv = "dtsim compare (simulated side)";
  RunCaseOptions sim_options;
  sim_options.trace_meta = meta;
  const Outcome sim = RunCase(c, MakeLocalCollectives(), sim_options);
  WriteJsonFileAtomically((dir / "sim.json").string(), ToJson(*sim.trace));

  // 2. The real run, launched with mpirun.
  std::vector<std::string> argv = {o.mpirun};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const char* a : {"--oversubscribe", "--bind-to", "none", "-np"}) argv.push_back(a);
  argv.push_back(std::to_string(o.np));
  argv.push_back(SelfPath());
  for (const std::string& a :
       {std::string("redistribute"), std::string("--backend"), o.backend, std::string("--mesh"),
        o.mesh, std::string("--shape"), o.shape, std::string("--from"), o.from, std::string("--to"),
        o.to, std::string("--dtype"), o.dtype, std::string("--planner"), o.planner}) {
    argv.push_back(a);
  }
  if (!o.names.empty()) {
    argv.push_back("--names");
    argv.push_back(o.names);
  }
  char timeout[32];
  std::snprintf(timeout, sizeof(timeout), "%g", o.timeout);
  argv.insert(argv.end(),
              {"--timeout", timeout, "--trace", (dir / "real.json").string(), "--json"});
  if (fault.active()) argv.insert(argv.end(), {"--inject-fault", fault.ToString()});
  std::cout << "compare: " << c.src.ToString() << " -> " << ToString(c.to) << ", simulated vs "
            << o.np << " " << o.backend << " ranks"
            << (fault.active() ? " with the fault " + fault.ToString() + " injected" : "") << "\n"
            << std::flush;
  const Launched real = Launch(argv, dir, o.timeout * 2 + 60);
  const fs::path real_trace = dir / "real.json";
  if ((real.exit_code != 0 && real.exit_code != 1) || !fs::exists(real_trace)) {
    std::cout << "the real run failed ("
              << (real.exit_code < 0 ? std::string("killed after ") + timeout + " s x 2 + 60 s"
                                     : "exit code " + std::to_string(real.exit_code))
              << "):\n";
    std::istringstream lines(real.stderr_text);
    int shown = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("dtsim:", 0) == 0 && shown++ < 20) std::cout << "  " << line << "\n";
    }
    if (shown == 0) std::cout << real.stderr_text.substr(0, 4000);
    return 4;
  }
  const Trace simulated = ReadTrace((dir / "sim.json").string());
  const Trace measured = ReadTrace(real_trace.string());
  const std::vector<TraceDifference> diffs = DiffTraces(simulated, measured, 20);
  const std::string kept =
      remove_dir ? ""
                 : " (traces: " + (dir / "sim.json").string() + ", " + real_trace.string() + ")";
  if (diffs.empty()) {
    int64_t collectives = 0;
    for (const TraceStep& s : measured.steps)
      collectives += static_cast<int64_t>(s.collectives.size());
    std::cout << "agree: " << measured.steps.size() << " step"
              << (measured.steps.size() == 1 ? "" : "s") << ", " << collectives << " collective"
              << (collectives == 1 ? "" : "s") << ", every rank's shard "
              << "after every step equal" << kept << "\n";
    return 0;
  }
  std::cout << "differ: the " << o.backend << " run parts from the simulation at " << diffs[0].where
            << ":\n";
  for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
  std::cout << kept << (kept.empty() ? "" : "\n");
  return 1;
}

}  // namespace dtsim::cli
