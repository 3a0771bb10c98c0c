// dtsim redistribute: debugs one redistribution — the plan, the layouts before and after, every rank's shard, and a
// verdict against the global tensor; optionally a JSON trace of the run. The same code runs on the simulated world
// (every rank in this process) and on real ranks (`mpirun -np N dtsim redistribute --backend mpi ...`), where every
// rank holds only its own shard and rank 0 gathers what the report and the trace need.
//
//   dtsim redistribute --mesh 2x4 [--names dp,tp] --shape 5,10 --from "S(0),R" --to "R,S(1)" [--dtype float32]
//                      [--planner greedy|min-cost|graph] [--json] [--values] [--trace out.json]
//                      [--backend local|mpi|nccl] [--timeout 60] [--inject-fault SPEC]
//   dtsim redistribute --batch FILE|-    JSON cases in, one JSON result (with values) per line out
//
// The inputs are arange cases (include/dtsim/arange_case.h): the global tensor is arange(numel) in the dtype; a
// --from with Partial placements is built with from_local from scaled shards, as upstream's tests do.
#include "redistribute_command.h"

#include <ATen/ATen.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "tensor_report.h"
#include "dtsim/arange_case.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/dtensor.h"
#include "dtsim/error.h"
#include "dtsim/global_view.h"
#include "dtsim/json_reader.h"
#include "dtsim/layout_report.h"
#include "dtsim/local_tensor.h"
#include "dtsim/plan.h"
#include "dtsim/planner.h"
#include "dtsim/real_run.h"
#include "dtsim/trace.h"
#include "dtsim/trace_recorder.h"

namespace po = boost::program_options;

namespace dtsim::cli {

nlohmann::json OutcomeToJson(const Case& c, const Outcome& o, bool values);

namespace {

// Options of `dtsim redistribute`; defaults in comments.
struct RedistributeCliOptions : TensorOptions, BackendCliOptions {  // --mesh, --names, --shape, --dtype, --backend...
  std::string from;                // required: "S(0),R"
  std::string to;                  // required: "R,S(1)"
  std::string planner = "greedy";  // greedy (upstream's sequence), min-cost or graph
  bool json = false;               // one JSON object instead of text
  bool values = false;             // include every rank's values
  std::string trace;               // "" = no trace; else the path of the JSON trace to write
  std::string batch;               // "" = single case; a path or "-" for stdin
};

Case CaseFromJson(const nlohmann::json& j, const CaseLimits& limits) {
  CheckCaseKeys(j, {"mesh", "names", "shape", "from", "to", "dtype", "planner", "values", "trace"},
                {"mesh", "shape", "from", "to"});
  DType dtype = j.contains("dtype") ? ParseDType(StringFromJson(j, "dtype")) : DType::kFloat32;
  PlannerKind kind = j.contains("planner") ? ParsePlannerKind(StringFromJson(j, "planner")) : PlannerKind::kGreedy;
  DeviceMesh mesh = MeshFromJson(j, limits);
  DTensorSpec src = SourceSpec(std::move(mesh), ParsePlacements(StringFromJson(j, "from"), "from"),
                               IntsFromJson(j["shape"], "shape"), dtype);
  Placements to = ValidateRedistribute(src, ParsePlacements(StringFromJson(j, "to"), "to"));
  return Case{src, to, kind};
}

// One --batch line: on `real` ranks when given (its mesh must match the world), else on a fresh simulated world.
// "trace": a path rank 0 writes the line's trace to (checked before the run; only recorded when
// limits.write_files is false).
nlohmann::json BatchLine(const nlohmann::json& j, const CaseLimits& limits, const std::shared_ptr<Collectives>& real,
                         const std::string& batch_path) {
  Case c = CaseFromJson(j, limits);
  const bool values = !j.contains("values") || JsonReader(j["values"], "values").AsBool();
  std::optional<std::string> trace_path;
  if (j.contains("trace")) {
    trace_path = JsonReader(j["trace"], "trace").AsString();
    if (limits.write_files && (!real || IsReportingRank(*real))) CheckOutputPath(*trace_path, "trace");
  }
  std::shared_ptr<Collectives> comm = real ? real : MakeLocalCollectives();
  CheckMeshFitsWorld(*comm, c.src.mesh());
  RunCaseOptions options;
  options.limits = limits;
  if (trace_path) {
    TraceMeta meta;
    meta.command = "redistribute";
    meta.argv = "dtsim redistribute --batch " + batch_path;
    meta.backend = comm->backend();
    meta.world_size = c.src.mesh().size();
    meta.planner = ToString(c.planner);
    options.trace_meta = meta;
  }
  Outcome out = RunCase(c, comm, options);
  if (out.trace && limits.write_files) WriteJsonFileAtomically(*trace_path, ToJson(*out.trace));
  return IsReportingRank(*comm) ? OutcomeToJson(c, out, values) : nlohmann::json();
}

}  // namespace

Outcome RunCase(const Case& c, const std::shared_ptr<Collectives>& collectives, const RunCaseOptions& options) {
  Collectives& comm = *collectives;
  if (comm.simulated()) CheckSimulationFits(c.src, c.src.mesh().size(), options.limits);
  CheckSimulationBlocks(c.src, "from");
  CheckSimulationBlocks(DTensorSpec::Create(c.src.mesh(), c.to, c.src.shape(), c.src.dtype()), "to");
  DTensor source = MakeArangeSource(c.src, collectives);
  std::optional<TraceRecorder> recorder;
  if (options.trace_meta) {
    recorder.emplace(*options.trace_meta);
    recorder->SetInitial(source.spec(), source.to_local(), comm);
    comm.SetObserver(&*recorder);
  }
  RedistributeOptions redistribute;
  redistribute.planner = ToString(c.planner);
  Outcome out;
  redistribute.plan_out = &out.plan;
  if (recorder) {
    redistribute.on_step = [&](const PlanStep& step, const DTensorSpec& spec, const at::Tensor& local) {
      recorder->EndStep(step, spec, local, comm);
    };
  }
  // Faults strike the traced redistribution only (not the distribution of the source, nor the gathers below).
  if (!comm.simulated()) comm.SetFault(options.fault);
  DTensor result = source.Redistribute(source.mesh(), c.to, redistribute);
  comm.SetObserver(nullptr);
  if (!comm.simulated() && options.fault.active()) {
    const bool struck = AnyRank(comm, comm.fault_struck());
    comm.SetFault(FaultSpec{});
    if (!struck && IsReportingRank(comm)) {
      std::cerr << "dtsim: warning: the fault " << options.fault.ToString() << " did not strike: no collective of this "
                << "redistribution on rank " << options.fault.rank << " is one it can affect (wrong-offset needs one "
                << "where the rank sends data, wrong-op a reduction)\n";
    }
  }
  out.source_spec = source.spec();
  out.result_spec = result.spec();
  // The verdict: every rank's shard put back together (on rank 0 of a real run) against the expected global tensor.
  out.result = GatherShards(comm, result.to_local());
  if (options.gather_source) out.source = GatherShards(comm, source.to_local());
  int64_t ok = 0;
  if (out.result) {
    Assembled assembled = AssembleGlobal(result.spec(), *out.result);
    out.problem = assembled.problem;
    if (assembled.global) {
      ok = SameValues(*assembled.global, ExpectedArangeGlobal(c.src), ArangeNeedsTolerance(c.src));
      if (!ok) out.problem = "the global tensor after redistribution differs from the expected one";
    }
  }
  out.ok = BroadcastFromRankZero(comm, ok) != 0;
  if (recorder) {
    recorder->SetFinal(result.spec(), result.to_local(), comm,
                       IsReportingRank(comm) ? std::optional<bool>(out.ok) : std::nullopt);
    out.trace = GatherTrace(comm, recorder->trace());
  }
  return out;
}

nlohmann::json OutcomeToJson(const Case& c, const Outcome& o, bool values) {
  nlohmann::json plan = ToJson(o.plan);
  nlohmann::json out = {{"ok", o.ok},
                        {"plan", plan["plan"]},
                        {"planner", o.plan.planner},
                        {"total_est_us", o.plan.total_est_us},
                        {"mesh", {{"shape", c.src.mesh().shape()}, {"names", c.src.mesh().names()}}},
                        {"shape", c.src.shape()},
                        {"dtype", ToString(c.src.dtype())},
                        {"from", ToString(c.src.placements())},
                        {"to", ToString(o.result_spec.placements())},
                        {"ranks", RanksToJson(o.result_spec, *o.result, values)}};
  if (!o.ok) out["problem"] = o.problem;
  return out;
}

nlohmann::json RedistributeCase(const nlohmann::json& j, const CaseLimits& limits) {
  return BatchLine(j, limits, nullptr, "-");
}

int RunRedistribute(const Args& args) {
  RedistributeCliOptions o;
  po::options_description desc("dtsim redistribute options");
  AddTensorOptions(desc, o, "element type of the arange tensor");
  desc.add_options()
      ("from", po::value(&o.from), "source placements, one per mesh dim, e.g. S(0),R (Partial allowed)")
      ("to", po::value(&o.to), "target placements, e.g. R,S(1)")
      ("planner", po::value(&o.planner)->default_value(o.planner), "greedy (upstream's sequence), min-cost or graph")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("values", po::bool_switch(&o.values), "include every rank's values (row-major)")
      ("trace", po::value(&o.trace), "write a JSON trace of the run to this path")
      ("batch", po::value(&o.batch), "JSON cases, one per line, from a file or - (stdin); JSON results out");
  AddBackendOptions(desc, o);
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim redistribute --mesh 2x4 [--names dp,tp] --shape 5,10 --from \"S(0),R\" "
                 "--to \"R,S(1)\" [--planner greedy|min-cost|graph] [--json] [--values] [--trace out.json]\n"
                 "       mpirun -np 8 dtsim redistribute --backend mpi <the same flags>   (real ranks)\n"
              << desc;
    return 0;
  }
  if (vm.count("batch")) {
    // One backend for every line; on real ranks each line's mesh must match the world, and each line may name a
    // trace file ("trace": path) that rank 0 writes.
    RefuseOptionsWithBatch(vm, {"backend", "timeout"});
    FaultSpec fault;
    std::shared_ptr<Collectives> real = o.backend == "local" ? nullptr : MakeBackend(o, &fault);
    if (real && o.batch == "-") {
      throw InputError("batch", "under mpirun only rank 0 reads standard input: give --batch a file all ranks can read");
    }
    return RunJsonLines(o.batch, [&](const nlohmann::json& j) { return BatchLine(j, CaseLimits(), real, o.batch); });
  }
  RequireOptions(vm, {"mesh", "shape", "from", "to"});
  const PlannerKind kind = ParsePlannerKind(o.planner);
  DTensorSpec src = SourceSpec(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.from, "from"),
                               ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  Case c{src, ValidateRedistribute(src, ParsePlacements(o.to, "to")), kind};
  RunCaseOptions options;
  const bool want_trace = vm.count("trace") > 0;
  // Checked before the run (on the simulated world; on real ranks rank 0 alone writes and reports a failed write).
  if (want_trace && o.backend == "local") CheckOutputPath(o.trace, "trace");
  if (want_trace && o.trace.empty()) throw InputError("trace", "the output path is empty");
  std::shared_ptr<Collectives> comm = MakeBackend(o, src.mesh(), &options.fault);
  if (want_trace) {
    TraceMeta meta;
    meta.command = "redistribute";
    meta.argv = "dtsim redistribute";
    for (const std::string& a : args) meta.argv += " " + a;
    meta.backend = comm->backend();
    meta.world_size = src.mesh().size();
    meta.planner = ToString(kind);
    options.trace_meta = meta;
  }
  options.gather_source = o.values;
  Outcome out = RunCase(c, comm, options);
  if (!IsReportingRank(*comm)) return out.ok ? 0 : 1;
  if (out.trace) WriteJsonFileAtomically(o.trace, ToJson(*out.trace));
  if (o.json) {
    std::cout << SafeDump(OutcomeToJson(c, out, o.values)) << "\n";
  } else {
    std::cout << Explain(out.plan) << "\n== before\n" << RenderLayout(c.src);
    if (o.values) std::cout << "\nvalues before:\n" << RenderValues(out.source_spec, *out.source);
    std::cout << "\n== after\n" << RenderLayout(out.result_spec);
    if (o.values) std::cout << "\nvalues after:\n" << RenderValues(out.result_spec, *out.result);
    if (!comm->simulated()) {
      std::cout << "\nran on " << comm->world_size() << " " << comm->backend() << " ranks";
      if (options.fault.active()) std::cout << " with the fault " << options.fault.ToString() << " injected";
      std::cout << "\n";
    }
    std::cout << "\nverdict: "
              << (out.ok ? "OK — the global tensor after redistribution equals the expected one"
                         : "MISMATCH — " + out.problem)
              << "\n";
    if (want_trace) std::cout << "trace written to " << o.trace << "\n";
  }
  return out.ok ? 0 : 1;
}

}  // namespace dtsim::cli
