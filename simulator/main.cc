// dtsim: entry point. Picks the subcommand and applies the error policy: InputError and option errors → exit 2 with
// "dtsim: error: <field>: <message>", internal errors → exit 3.
#include <boost/program_options/errors.hpp>
#include <iostream>
#include <map>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/caching_allocator.h"
#include "dtsim/error.h"

namespace {

struct Command {
  int (*run)(const dtsim::cli::Args&);
  const char* summary;
};

const std::map<std::string, Command>& Commands() {
  static const std::map<std::string, Command> commands = {
      {"layout", {&dtsim::cli::RunLayout, "which part of the global tensor every rank holds"}},
      {"plan", {&dtsim::cli::RunPlan, "the steps (collectives, bytes, cost) that redistribute a tensor"}},
      {"redistribute", {&dtsim::cli::RunRedistribute, "run a redistribution on the simulated world and check it"}},
      {"trace-diff", {&dtsim::cli::RunTraceDiff, "where two traces of a run part (simulated vs real, two builds)"}},
      {"distribute", {&dtsim::cli::RunDistribute, "distribute a tensor step by step over submeshes (TP + FSDP)"}},
      {"compare", {&dtsim::cli::RunCompare, "run a redistribution simulated and on real ranks (mpirun), diff them"}},
      {"export", {&dtsim::cli::RunExport, "a trace as Chrome / Perfetto trace-event JSON (ui.perfetto.dev)"}},
  };
  return commands;
}

void PrintUsage(std::ostream& out) {
  out << "usage: dtsim <command> [options]   (dtsim <command> --help for its options)\n\ncommands:\n";
  for (const auto& [name, command] : Commands()) out << "  " << name << "  " << command.summary << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  // Large simulated tensors are allocated and freed per rank again and again: reuse freed large blocks.
  dtsim::EnableCachingCpuAllocator();
  if (argc < 2) {
    PrintUsage(std::cerr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintUsage(std::cout);
    return 0;
  }
  auto it = Commands().find(name);
  if (it == Commands().end()) {
    std::cerr << "dtsim: error: command: unknown command '" << name << "'\n";
    PrintUsage(std::cerr);
    return 2;
  }
  dtsim::cli::Args args(argv + 2, argv + argc);
  // On a real run every rank meets the same input errors: rank 0 reports them (the others are Silenced()).
  auto report = [](const std::string& text) {
    if (!dtsim::cli::Silenced()) std::cerr << text << "\n";
  };
  try {
    return it->second.run(args);
  } catch (const dtsim::InputError& e) {
    report(std::string("dtsim: error: ") + e.what());
    return 2;
  } catch (const boost::program_options::error& e) {
    report(std::string("dtsim: error: options: ") + e.what());
    return 2;
  } catch (const dtsim::InternalError& e) {
    dtsim::cli::EndRealJob(std::string("internal error: ") + e.what(), 3);  // returns when no real run is on
    std::cerr << "dtsim: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));  // LibTorch appends a C++ stack trace
    dtsim::cli::EndRealJob("internal error: " + what, 3);
    std::cerr << "dtsim: internal error: " << what << "\n";
    return 3;
  }
}
