// dtsim: entry point. Picks the subcommand and applies the error policy: InputError and option
// errors → exit 2 with "dtsim: error: <field>: <message>", internal errors → exit 3.
#include <boost/program_options/errors.hpp>
#include <iostream>
#include <map>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/tensor/caching_allocator.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DTSIM_HAS_ASAN 1
#endif
#endif
#ifndef DTSIM_HAS_ASAN
#define DTSIM_HAS_ASAN 0
#endif

namespace {

struct Command {
  int (*run)(const dtsim::cli::Args&);
  const char* summary;
};

const std::map<std::string, Command>& Commands() {
  static const std::map<std::string, Command> commands = {
      {"layout", {&dtsim::cli::RunLayout, "which part of the global tensor every rank holds"}},
      {"plan",
       {&dtsim::cli::RunPlan, "the steps (collectives, bytes, cost) that redistribute a tensor"}},
      {"redistribute",
       {&dtsim::cli::RunRedistribute, "run a redistribution on the simulated world and check it"}},
      {"trace-diff",
       {&dtsim::cli::RunTraceDiff,
        "where two traces of a run part (simulated vs real, two builds)"}},
      {"distribute",
       {&dtsim::cli::RunDistribute, "distribute a tensor step by step over submeshes (TP + FSDP)"}},
      {"compare",
       {&dtsim::cli::RunCompare,
        "run a redistribution simulated and on real ranks (mpirun), diff them"}},
      {"model",
       {&dtsim::cli::RunModel,
        "run a Llama-style model tensor-parallel: per-module collectives, memory, check"}},
      {"op",
       {&dtsim::cli::RunOp,
        "run one ATen op on DTensors: the strategy chosen, implicit redistributions"}},
      {"replay",
       {&dtsim::cli::RunReplay,
        "re-run a recorded PyTorch run (dtsim.record) in simulation: where it differs"}},
      {"export",
       {&dtsim::cli::RunExport, "a trace as Chrome / Perfetto trace-event JSON (ui.perfetto.dev)"}},
      {"run",
       {&dtsim::cli::RunRun,
        "run a torchrun script, unchanged, as N simulated ranks in one process"}},
      {"record",
       {&dtsim::cli::RunRecord,
        "record every rank of a real job (-- torchrun ...): ops, collectives, shards"}},
      {"import-fr",
       {&dtsim::cli::RunImportFr,
        "upstream Flight Recorder dumps as a recording: trace-diff it against dtsim run"}},
  };
  return commands;
}

void PrintUsage(std::ostream& out) {
  out << "usage: dtsim <command> [options]   (dtsim <command> --help for its "
         "options)\n\ncommands:\n";
  for (const auto& [name, command] : Commands())
    out << "  " << name << "  " << command.summary << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  // Large simulated tensors are allocated and freed per rank again and again: reuse freed large
  // blocks. Not under AddressSanitizer, which must see every allocation and free to find
  // use-after-free (docs/reliability.md).
#if !defined(__SANITIZE_ADDRESS__) && !DTSIM_HAS_ASAN
  dtsim::EnableCachingCpuAllocator();
#endif
  if (argc < 2) {
    std::cerr << "dtsim: error: command: missing; give one of the commands below\n";
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
    std::cerr << "dtsim: error: command: unknown command '" << dtsim::ExcerptText(name, 40)
              << "'\n";
    PrintUsage(std::cerr);
    return 2;
  }
  dtsim::cli::Args args(argv + 2, argv + argc);
  // On a real run every rank meets the same input errors: rank 0 reports them (the others are
  // Silenced()).
  auto report = [](const std::string& text) {
    if (!dtsim::cli::Silenced()) std::cerr << text << "\n";
  };
  try {
    return it->second.run(args);
  } catch (const dtsim::InputError& e) {
    report(std::string("dtsim: error: ") + e.what());
    return 2;
  } catch (const boost::program_options::error& e) {
    report(std::string("dtsim: error: options: ") + dtsim::ExcerptText(e.what(), 300));
    return 2;
  } catch (const dtsim::InternalError& e) {
    dtsim::cli::EndRealJob(std::string("internal error: ") + e.what(),
                           3);  // returns when no real run is on
    std::cerr << "dtsim: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));  // LibTorch appends a C++ stack trace
    if (dtsim::cli::IsOutOfMemory(e)) {
      // A resource limit, not a bug: the up-front estimates (CheckSimulationFits) let this through.
      dtsim::cli::EndRealJob("memory: out of memory", 2);
      std::cerr
          << "dtsim: error: memory: out of memory; simulate a smaller tensor or fewer ranks\n";
      return 2;
    }
    dtsim::cli::EndRealJob("internal error: " + what, 3);
    std::cerr << "dtsim: internal error: " << dtsim::ExcerptText(what, 2000) << "\n";
    return 3;
  }
}
