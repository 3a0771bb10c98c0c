// dtsim compare: runs one redistribution on the simulated world and on real ranks (it launches
// mpirun itself), diffs the two traces and prints a verdict — the one command for "does the real
// run do what the simulation says?".
//
// clang-format off
//   dtsim compare --np 8 [--backend mpi|nccl] --mesh 2x4 [--names dp,tp] --shape 5,10
//                 --from "S(0),R" --to "R,S(1)" [--dtype float32] [--planner greedy] [--timeout 60]
//                 [--inject-fault SPEC] [--keep DIR] [--mpirun mpirun]
//   dtsim compare --np 4 [--backend mpi] [--keep DIR] -- model --mesh 2x2 --names dp,tp
//                 --plan fsdp+tp --backward
//                 the same for a model: both runs write model traces, diffed
// clang-format on
// Exit codes: 0 the runs agree, 1 they differ (the first difference is where they part), 2 bad
// input, 4 the real run failed (stuck, diverged or crashed: its error is printed, a rank that died
// named with its signal), 5 the runs agree but the injected fault did not strike (nothing was
// tested). SIGINT, SIGTERM and SIGHUP end the real run's mpirun and ranks and remove the temporary
// folder before the command ends with that signal (real_job.h).
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "real_job.h"
#include "redistribute_command.h"

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

// mpirun and its options for `o.np` ranks of this executable (the subcommand follows).
std::vector<std::string> LauncherArgv(const CompareOptions& o) {
  std::vector<std::string> argv = {o.mpirun};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const char* a : {"--oversubscribe", "--bind-to", "none", "-np"}) argv.push_back(a);
  argv.push_back(std::to_string(o.np));
  // Each rank ends when mpirun does, even by SIGKILL (its parent-death signal).
  for (const std::string& a : ParentDeathPrefix()) argv.push_back(a);
  argv.push_back(SelfPath());
  return argv;
}

// True (after printing why, ranks that died named) when the real run ended without writing its
// trace: stuck, diverged, crashed or timed out.
bool RealRunFailed(const JobResult& real, const fs::path& trace, const std::string& timeout) {
  if (!real.timed_out && (real.exit_code == 0 || real.exit_code == 1) && fs::exists(trace)) {
    return false;
  }
  // "the real run failed: rank 2 killed by signal 9 (SIGKILL); mpirun exit code 137:"
  std::cout << "the real run failed: ";
  if (real.timed_out) {
    std::cout << "ended after " << timeout << " s x 2 + 60 s";
  } else {
    for (const std::string& failure : real.rank_failures) std::cout << failure << "; ";
    std::cout << "mpirun exit code " << real.exit_code;
    if (real.rank_failures.empty() && real.exit_code > 128 && real.exit_code < 128 + 65) {
      std::cout << " (128 + " << real.exit_code - 128 << ": a process ended by "
                << SignalName(real.exit_code - 128) << "; mpirun named no rank)";
    }
  }
  std::cout << ":\n";
  std::istringstream lines(real.stderr_text);
  int shown = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("dtsim:", 0) == 0 && shown++ < 20) std::cout << "  " << line << "\n";
  }
  if (shown == 0 && real.rank_failures.empty()) std::cout << real.stderr_text.substr(0, 4000);
  return true;
}

// Rank 0's warning that the fault found no collective to strike (FaultMissedWarning): then the
// runs' agreement tested nothing.
std::optional<std::string> FaultMissed(const JobResult& real) {
  std::optional<std::string> missed;
  std::istringstream lines(real.stderr_text);
  for (std::string line; std::getline(lines, line);) {
    if (IsFaultMissedWarning(line)) missed = line.substr(line.find("the fault "));
  }
  return missed;
}

// The options `dtsim compare -- model ...` sets on both runs itself.
constexpr const char* kSetByCompare[] = {"--backend", "--trace", "--inject-fault", "--timeout",
                                         "--json"};

// The checks both forms make before anything runs or is printed (nothing on stdout for bad input):
// the time limit, the launcher (looked up on PATH) and the fault's rank; returns the fault.
FaultSpec CheckRealRunOptions(const CompareOptions& o) {
  CheckTimeout(o.timeout);
  if (!IsExecutableOnPath(o.mpirun)) {
    throw InputError("mpirun",
                     StrCat("'", ExcerptText(o.mpirun),
                            "' is not an executable file nor a program on PATH (install "
                            "OpenMPI: apt-get install openmpi-bin, or give --mpirun PATH)"));
  }
  FaultSpec fault = ParseFault(o.fault);
  if (fault.active() && fault.rank >= o.np) {
    throw InputError("inject-fault", StrCat("'", ExcerptText(o.fault), "' names rank ", fault.rank,
                                            " but the run has ranks 0..", o.np - 1));
  }
  return fault;
}

// dtsim compare --np N [--backend mpi] [...] -- model <model options>: the model run simulated and
// on real ranks, each writing a model trace, then DiffModelTraces.
int RunCompareModel(const CompareOptions& o, const Args& model_args) {
  for (const std::string& a : model_args) {
    for (const char* option : kSetByCompare) {
      if (a == option || a.rfind(StrCat(option, "="), 0) == 0) {
        throw InputError("arguments", StrCat("compare sets ", option,
                                             " on both runs itself: leave it out after --"));
      }
    }
  }
  // Refused before anything is launched (the real run would refuse it only after the simulation).
  if (std::find(model_args.begin(), model_args.end(), "--meta") != model_args.end()) {
    throw InputError(
        "meta",
        "real ranks hold values, so a --meta model (shapes only) has nothing to compare "
        "with them: run dtsim model --meta alone");
  }
  const FaultSpec fault = CheckRealRunOptions(o);
  RealJob job(o.keep.empty() ? std::nullopt : std::optional<std::string>(o.keep));
  const fs::path& dir = job.dir();
  const fs::path sim_trace = dir / "sim.json", real_trace = dir / "real.json";
  char timeout[32];
  std::snprintf(timeout, sizeof(timeout), "%g", o.timeout);

  // 1. The simulation, in a child of its own (its bad input is this command's).
  std::vector<std::string> sim_argv = {SelfPath()};
  sim_argv.insert(sim_argv.end(), model_args.begin(), model_args.end());
  sim_argv.insert(sim_argv.end(), {"--trace", sim_trace.string(), "--json"});
  const JobResult sim = job.Run(sim_argv, o.timeout * 2 + 60);
  if (sim.exit_code == 2) {
    // The model's options are wrong: its message (one "dtsim: error: <field>: ..." line) is ours.
    std::istringstream lines(sim.stderr_text);
    for (std::string line; std::getline(lines, line);) {
      const std::string prefix = "dtsim: error: ";
      if (line.rfind(prefix, 0) != 0) continue;
      const std::string rest = line.substr(prefix.size());
      const size_t colon = rest.find(": ");
      if (colon == std::string::npos) throw InputError("arguments", rest);
      throw InputError(rest.substr(0, colon), rest.substr(colon + 2));
    }
    throw InputError("arguments", ExcerptText(sim.stderr_text, 400));
  }
  if (sim.timed_out || (sim.exit_code != 0 && sim.exit_code != 1) || !fs::exists(sim_trace)) {
    std::cout << "the simulated run failed (exit code " << sim.exit_code << "):\n"
              << sim.stderr_text.substr(0, 4000);
    return 4;
  }
  const int64_t np_of_mesh = [&] {
    const ModelTrace t = ModelTraceFromJson(ParseTraceText(ReadTraceText(sim_trace.string())));
    return t.meta.world_size;
  }();
  if (np_of_mesh != o.np) {
    throw InputError("np", StrCat(o.np, " ranks for a model mesh of ", np_of_mesh,
                                  " ranks: give --np ", np_of_mesh));
  }

  // 2. The real run.
  std::vector<std::string> argv = LauncherArgv(o);
  argv.insert(argv.end(), model_args.begin(), model_args.end());
  argv.insert(argv.end(), {"--backend", o.backend, "--timeout", timeout, "--trace",
                           real_trace.string(), "--json"});
  if (fault.active()) argv.insert(argv.end(), {"--inject-fault", fault.ToString()});
  std::cout << "compare: dtsim";
  for (const std::string& a : model_args) std::cout << " " << a;
  std::cout << ", simulated vs " << o.np << " " << o.backend << " ranks"
            << (fault.active() ? " with the fault " + fault.ToString() + " injected" : "") << "\n"
            << std::flush;
  const JobResult real = job.Run(argv, o.timeout * 2 + 60);
  if (RealRunFailed(real, real_trace, timeout)) return 4;
  const std::optional<std::string> missed = FaultMissed(real);
  const ModelTrace a = ModelTraceFromJson(ParseTraceText(ReadTraceText(sim_trace.string())));
  const ModelTrace b = ModelTraceFromJson(ParseTraceText(ReadTraceText(real_trace.string())));
  int64_t rounded = 0;
  const std::vector<TraceDifference> diffs = DiffModelTraces(a, b, 20, &rounded);
  const std::string kept =
      job.removes_dir() ? "" : " (traces: " + sim_trace.string() + ", " + real_trace.string() + ")";
  if (diffs.empty()) {
    const std::string summary =
        StrCat(b.events.size(),
               " events (modules, ops, collectives) in the same order, every rank's "
               "values at every module boundary equal",
               rounded > 0 ? StrCat(" (", rounded, " within float rounding)") : "");
    if (missed) {
      std::cout << "not struck: " << *missed << "\n  the runs agree (" << summary
                << ") only because nothing was injected" << kept << "\n";
      return 5;
    }
    std::cout << "agree: " << summary << kept << "\n";
    return 0;
  }
  std::cout << "differ: the " << o.backend << " run parts from the simulation at " << diffs[0].where
            << ":\n";
  for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
  if (missed) std::cout << "note: " << *missed << " (the difference is not the fault's)\n";
  std::cout << kept << (kept.empty() ? "" : "\n");
  return 1;
}
}  // namespace

int RunCompare(const Args& all_args) {
  // After "--": a dtsim command line to run both ways (model only).
  const auto dashes = std::find(all_args.begin(), all_args.end(), "--");
  const Args args(all_args.begin(), dashes);
  const Args model_args(dashes == all_args.end() ? dashes : dashes + 1, all_args.end());
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
  AddDeviceOption(desc, o);
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout
        << "usage: dtsim compare --np 8 [--backend mpi|nccl] --mesh 2x4 [--names dp,tp] --shape "
           "5,10 "
           "--from \"S(0),R\" --to \"R,S(1)\" [--inject-fault SPEC] [--timeout 60] [--keep DIR]\n"
        << desc;
    return 0;
  }
  if (o.backend == "local") {
    throw InputError(
        "backend",
        "compare runs the simulation itself; --backend names the real one (mpi or nccl)");
  }
  if (dashes != all_args.end()) {
    if (model_args.empty() || model_args[0] != "model") {
      throw InputError("arguments",
                       StrCat("after -- compare runs a model (-- model --mesh ...), got '",
                              ExcerptText(model_args.empty() ? "" : model_args[0], 40), "'"));
    }
    RequireOptions(vm, {"np"});
    if (o.device != "cpu") {
      throw InputError("device",
                       "compare -- model runs the model on the host; --device applies "
                       "to a redistribution");
    }
    for (const char* option : {"mesh", "names", "shape", "from", "to", "planner"}) {
      if (vm.count(option) && !vm[option].defaulted()) {
        throw InputError(
            option,
            StrCat("--", option, " is a redistribution's option: give the model's after --"));
      }
    }
    return RunCompareModel(o, model_args);
  }
  RequireOptions(vm, {"np", "mesh", "shape", "from", "to"});
  const PlannerKind kind = ParsePlannerKind(o.planner);
  DTensorSpec src = SourceSpec(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.from, "from"),
                               ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  Case c{src, ValidateRedistribute(src, ParsePlacements(o.to, "to")), kind};
  if (o.np != src.mesh().size()) {
    throw InputError("np", StrCat(o.np, " ranks for ", src.mesh().ToString(), ", which has ",
                                  src.mesh().size(), " ranks: give --np ", src.mesh().size()));
  }
  const FaultSpec fault = CheckRealRunOptions(o);
  // Where the traces go: --keep DIR, or a temporary folder that is removed at the end, also when
  // a signal ends the command.
  RealJob job(o.keep.empty() ? std::nullopt : std::optional<std::string>(o.keep));
  const fs::path& dir = job.dir();
  const bool remove_dir = job.removes_dir();

  // 1. The simulation, in this process.
  TraceMeta meta;
  meta.command = "redistribute";
  meta.backend = "local";
  meta.world_size = src.mesh().size();
  meta.planner = ToString(kind);
  meta.argv = "dtsim compare (simulated side)";
  RunCaseOptions sim_options;
  sim_options.trace_meta = meta;
  sim_options.device = CheckDevice(o, o.backend, false, false);  // both sides on the GPU
  const Outcome sim = RunCase(c, MakeLocalCollectives(), sim_options);
  {
    auto lock = job.Lock();
    WriteJsonFileAtomically((dir / "sim.json").string(), ToJson(*sim.trace));
  }

  // 2. The real run, launched with mpirun.
  std::vector<std::string> argv = LauncherArgv(o);
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
  if (o.device != "cpu") argv.insert(argv.end(), {"--device", o.device});
  std::cout << "compare: " << c.src.ToString() << " -> " << ToString(c.to) << ", simulated vs "
            << o.np << " " << o.backend << " ranks"
            << (fault.active() ? " with the fault " + fault.ToString() + " injected" : "") << "\n"
            << std::flush;
  const JobResult real = job.Run(argv, o.timeout * 2 + 60);
  const fs::path real_trace = dir / "real.json";
  if (RealRunFailed(real, real_trace, timeout)) return 4;
  const std::optional<std::string> missed = FaultMissed(real);
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
    const std::string summary = StrCat(
        measured.steps.size(), " step", measured.steps.size() == 1 ? "" : "s", ", ", collectives,
        " collective", collectives == 1 ? "" : "s", ", every rank's shard after every step equal");
    if (missed) {
      // Not a pass: the run the user asked for (with a fault) did not happen.
      std::cout << "not struck: " << *missed << "\n  the runs agree (" << summary
                << ") only because nothing was injected: give the fault a rank and a "
                   "redistribution it can affect"
                << kept << "\n";
      return 5;
    }
    std::cout << "agree: " << summary << kept << "\n";
    return 0;
  }
  std::cout << "differ: the " << o.backend << " run parts from the simulation at " << diffs[0].where
            << ":\n";
  for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
  if (missed) std::cout << "note: " << *missed << " (the difference is not the fault's)\n";
  std::cout << kept << (kept.empty() ? "" : "\n");
  return 1;
}

}  // namespace dtsim::cli
