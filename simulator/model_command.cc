// dtsim model: runs the built-in Llama-style model parallelized on the simulated mesh and prints a
// per-module report of collectives, ops, placements and memory (model_run.h), with a check against
// the unsharded model.
//
//   dtsim model --mesh 4 --names tp --dim 256 --heads 8 --layers 2 --vocab 1000 --seq 64 --batch 4
//   mpirun -np 4 dtsim model --backend mpi <the same flags>      the same model on real ranks
//               [--ffn N] [--plan tp|tp+sp|fsdp|fsdp+tp] [--backward] [--meta] [--json] [--ops]
//               [--no-check] [--trace FILE]
// --trace writes a model trace (model_trace.h): every module boundary with every rank's shard hash,
// every op and collective; rank 0 writes it on real ranks, and `dtsim trace-diff` compares two.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/core/real_run.h"
#include "dtsim/layout/error.h"
#include "dtsim/model/model_run.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/trace.h"

namespace dtsim::cli {

namespace po = boost::program_options;

int RunModel(const Args& args) {
  model::ModelRunOptions o;
  BackendCliOptions b;
  std::string mesh = "1", names = "tp", trace_path;
  bool json_out = false, no_check = false, with_ops = false;
  po::options_description desc("dtsim model options");
  desc.add_options()("help", "show this help")("mesh", po::value(&mesh)->default_value(mesh),
                                               "mesh shape, e.g. 8 or 1x8")(
      "names", po::value(&names)->default_value(names), "mesh dim names; the plan uses 'tp'")(
      "dim", po::value(&o.args.dim)->default_value(o.args.dim), "model width")(
      "heads", po::value(&o.args.heads)->default_value(o.args.heads), "attention heads")(
      "layers", po::value(&o.args.layers)->default_value(o.args.layers), "transformer blocks")(
      "vocab", po::value(&o.args.vocab)->default_value(o.args.vocab), "vocabulary size")(
      "ffn", po::value(&o.args.ffn)->default_value(0), "feed-forward hidden size (0: 4 x dim)")(
      "seq", po::value(&o.args.seq)->default_value(o.args.seq), "sequence length")(
      "batch", po::value(&o.args.batch)->default_value(o.args.batch), "batch size")(
      "plan", po::value(&o.plan)->default_value(o.plan),
      "tp+sp (torchtitan's Llama plan), tp (no sequence parallelism), fsdp (fully_shard over dp), "
      "fsdp+tp (torchtitan's 2-D: tp+sp on tp, fully_shard on dp)")(
      "loss-parallel", po::bool_switch(&o.loss_parallel),
      "keep the logits vocab-sharded and compute a loss-parallel cross entropy")(
      "backward", po::bool_switch(&o.backward), "run the backward pass too")(
      "meta", po::bool_switch(&o.meta),
      "metadata-only: shapes, collectives and memory on meta tensors, no values")(
      "no-check", po::bool_switch(&no_check), "skip the comparison with the unsharded model")(
      "ops", po::bool_switch(&with_ops), "list every DTensor op per module with its placements")(
      "json", po::bool_switch(&json_out), "print the report as JSON (CommDebugMode's tree shape)")(
      "trace", po::value(&trace_path),
      "write a model trace: module, op and collective events, every rank's shard hashes at "
      "module boundaries (dtsim trace-diff compares two)");
  AddBackendOptions(desc, b);
  po::variables_map vm;
  try {
    vm = ParseOptions(args, desc);  // a stray argument is refused, as in every command
  } catch (const po::error& e) {
    throw InputError("options", e.what());
  }
  CheckTimeout(b.timeout);  // on every backend, as redistribute checks it
  if (vm.count("help")) {
    std::cout
        << "usage: dtsim model --mesh 4 --names tp [--dim 256 --heads 8 --layers 2 --vocab "
           "1000 --seq 64 --batch 4] [--plan tp+sp|tp|fsdp|fsdp+tp] [--backward] [--meta] [--json] "
           "[--ops]\n"
        << desc;
    return 0;
  }
  o.mesh = DeviceMesh::Parse(mesh, names);
  FaultSpec fault;
  if (b.backend != "local" || vm.count("inject-fault")) {
    o.backend = MakeBackend(b, o.mesh, &fault);
    o.fault = fault;
  }
  o.check = !no_check && !o.meta;
  o.trace = vm.count("trace") > 0;
  const bool reporting = !o.backend || IsReportingRank(*o.backend);
  if (o.trace) {
    if (trace_path.empty()) throw InputError("trace", "give a file name");
    // Before the run, not after; on real ranks rank 0 checks and every rank hears the answer.
    CheckOnReportingRank(o.backend.get(), [&] { CheckOutputFile(trace_path, "trace"); });
  }
  if (!o.backend) {
    // Every simulated rank holds every layer's modules, hooks and rows (kModelBytesPerRankLayer):
    // refused up front when that exceeds the memory this process may still allocate.
    model::ValidateModelRun(o);
    const long double need = static_cast<long double>(o.mesh.size()) *
                             static_cast<long double>(o.args.layers + 2) *
                             model::kModelBytesPerRankLayer;
    const std::optional<int64_t> available = AvailableMemory();
    if (available && need > *available) {
      throw InputError(
          "layers", StrCat(o.args.layers, " transformer blocks on ", o.mesh.size(),
                           " simulated ranks need about ", static_cast<int64_t>(need / (1 << 20)),
                           " MiB (about 24 KiB per rank and layer), but ", *available / (1 << 20),
                           " MiB are available: simulate fewer layers or ranks"));
    }
  }
  model::ModelReport report = model::RunModel(o);
  if (o.fault.active() && !report.fault_struck && reporting) {
    std::cerr << FaultMissedWarning(
                     o.fault, StrCat("no collective of this model's forward and backward on "
                                     "rank ",
                                     o.fault.rank,
                                     " is one it can affect (wrong-offset needs one where the "
                                     "rank sends data, wrong-op a reduction)"))
              << "\n";
  }
  if (report.trace && reporting) {
    report.trace->meta.argv = "dtsim model";
    for (const std::string& a : args) report.trace->meta.argv += " " + a;
    WriteJsonFileAtomically(trace_path, ToJson(*report.trace));
  }
  // On real ranks rank 0 reports (the others print nothing: MakeBackend silenced them).
  if (!reporting) return report.ok() ? 0 : 1;
  if (json_out) {
    std::cout << model::ReportToJson(report).dump() << "\n";
  } else {
    std::cout << model::ReportToText(report, with_ops);
  }
  return report.ok() ? 0 : 1;
}

}  // namespace dtsim::cli
