// dtsim redistribute: debugs one redistribution — the plan, the layouts before and after, every
// rank's shard, and a verdict against the global tensor; optionally a JSON trace of the run. The
// same code runs on the simulated world (every rank in this process) and on real ranks (`mpirun -np
// N dtsim redistribute --backend mpi ...`), where every rank holds only its own shard and rank 0
// gathers what the report and the trace need.
//
//   dtsim redistribute --mesh 2x4 [--names dp,tp] --shape 5,10 --from "S(0),R" --to "R,S(1)"
//   [--dtype float32]
//                      [--planner greedy|min-cost|graph] [--json] [--values] [--trace out.json]
//                      [--backend local|mpi|nccl] [--timeout 60] [--inject-fault SPEC]
//   dtsim redistribute --batch FILE|-    JSON cases in, one JSON result (with values) per line out
//
// The inputs are arange cases (include/dtsim/core/arange_case.h): the global tensor is
// arange(numel) in the dtype; a
// --from with Partial placements is built with from_local from scaled shards, as upstream's tests
// do.
#include "redistribute_command.h"

#include <ATen/ATen.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/arange_case.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/global_view.h"
#include "dtsim/core/meta.h"
#include "dtsim/core/real_run.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/layout_report.h"
#include "dtsim/layout/plan.h"
#include "dtsim/layout/planner.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/trace.h"
#include "tensor_report.h"

namespace po = boost::program_options;

namespace dtsim::cli {

nlohmann::json OutcomeToJson(const Case& c, const Outcome& o, bool values,
                             const RankSelection& selection, bool meta);

namespace {

// Options of `dtsim redistribute`; defaults in comments.
struct RedistributeCliOptions
    : TensorOptions,
      BackendCliOptions {          // --mesh, --names, --shape, --dtype, --backend...
  std::string from;                // required: "S(0),R"
  std::string to;                  // required: "R,S(1)"
  std::string planner = "greedy";  // greedy (upstream's sequence), min-cost or graph
  bool json = false;               // one JSON object instead of text
  bool values = false;             // include every rank's values
  std::string trace;               // "" = no trace; else the path of the JSON trace to write
  std::string batch;               // "" = single case; a path or "-" for stdin
  bool meta = false;               // metadata-only run: meta tensors, no data (simulated backend)
  bool memory = false;             // per-step peak memory of every rank (simulated backend)
  std::string ranks = "auto";      // which ranks the report lists: auto, all, summary or "0,5,8-15"
};

Case CaseFromJson(const nlohmann::json& j, const CaseLimits& limits) {
  CheckCaseKeys(j,
                {"mesh", "names", "shape", "from", "to", "dtype", "planner", "values", "trace",
                 "meta", "memory", "ranks"},
                {"mesh", "shape", "from", "to"});
  DType dtype = j.contains("dtype") ? ParseDType(StringFromJson(j, "dtype")) : DType::kFloat32;
  PlannerKind kind =
      j.contains("planner") ? ParsePlannerKind(StringFromJson(j, "planner")) : PlannerKind::kGreedy;
  DeviceMesh mesh = MeshFromJson(j, limits);
  DTensorSpec src = SourceSpec(std::move(mesh), ParsePlacements(StringFromJson(j, "from"), "from"),
                               IntsFromJson(j["shape"], "shape"), dtype);
  Placements to = ValidateRedistribute(src, ParsePlacements(StringFromJson(j, "to"), "to"));
  return Case{src, to, kind};
}

// One --batch line: on `real` ranks when given (its mesh must match the world), else on a fresh
// simulated world. "trace": a path rank 0 writes the line's trace to (checked before the run; only
// recorded when limits.write_files is false).
nlohmann::json BatchLine(const nlohmann::json& j, const CaseLimits& limits,
                         const std::shared_ptr<Collectives>& real, const std::string& batch_path) {
  Case c = CaseFromJson(j, limits);
  const bool values = !j.contains("values") || JsonReader(j["values"], "values").AsBool();
  RunCaseOptions options;
  options.limits = limits;
  options.meta = j.contains("meta") && JsonReader(j["meta"], "meta").AsBool();
  options.memory = j.contains("memory") && JsonReader(j["memory"], "memory").AsBool();
  const RankSelection selection =
      RankSelection::Parse(j.contains("ranks") ? StringFromJson(j, "ranks") : "auto");
  std::optional<std::string> trace_path;
  if (j.contains("trace")) {
    trace_path = JsonReader(j["trace"], "trace").AsString();
    if (limits.write_files) {
      CheckLineOnReportingRank(real.get(), "trace", [&] {  // every rank skips a refused line
        RunFiles files;  // a line's trace is never the batch file itself
        files.Input(batch_path, "batch");
        files.Output(*trace_path, "trace");
      });
    }
  }
  std::shared_ptr<Collectives> comm = real ? real : MakeLocalCollectives();
  CheckMeshFitsWorld(*comm, c.src.mesh());
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
  return IsReportingRank(*comm) ? OutcomeToJson(c, out, values, selection, options.meta)
                                : nlohmann::json();
}

}  // namespace

Outcome RunCase(const Case& c, const std::shared_ptr<Collectives>& collectives,
                const RunCaseOptions& options) {
  Collectives& comm = *collectives;
  if (!comm.simulated() && options.meta) {
    throw InputError(
        "meta",
        StrCat("--meta simulates every rank in this process (the local backend), not on the ",
               comm.backend(), " backend"));
  }
  if (!comm.simulated() && options.memory) {
    throw InputError("memory",
                     StrCat("--memory measures the simulated world (the local backend), not the ",
                            comm.backend(), " backend"));
  }
  if (comm.simulated())
    CheckSimulationFits(c.src, c.src.mesh().size(), options.meta, options.limits);
  CheckSimulationBlocks(c.src, "from");
  CheckSimulationBlocks(DTensorSpec::Create(c.src.mesh(), c.to, c.src.shape(), c.src.dtype()),
                        "to");
  // The meter exists before the source, so every rank's shards count from the start.
  std::optional<MemoryMeter> meter;
  if (options.memory) meter.emplace();
  DTensor source =
      options.meta ? MakeMetaDTensor(c.src, collectives)
      : options.device.is_cpu()
          ? MakeArangeSource(c.src, collectives)
          : MakeSourceFromGlobal(c.src, ArangeGlobal(c.src).to(options.device), collectives);
  std::optional<TraceRecorder> recorder;
  std::optional<CollectiveObservers::Scoped> observing;  // the traced redistribution only
  if (options.trace_meta) {
    TraceMeta meta = *options.trace_meta;
    recorder.emplace(meta, /*hashes=*/!options.meta);
    recorder->SetInitial(source.spec(), source.to_local(), comm);
    observing.emplace(comm.observers(), &*recorder);
  }
  RedistributeOptions redistribute;  // its on_step: memory rows and trace steps
  Outcome out;
  out.plan = PlanFor(source.spec(), c.to, c.planner);
  const std::vector<int64_t> world = MeshView(c.src.mesh()).ranks();
  if (meter) {
    MemoryRow start{"start", 0, world, {}};
    for (int64_t rank : world) start.bytes.push_back(meter->Live(rank));
    out.memory.push_back(std::move(start));
    meter->BeginWindow();
  }
  if (recorder || meter) {
    redistribute.on_step = [&](const PlanStep& step, const DTensorSpec& spec,
                               const at::Tensor& local) {
      if (meter) {
        const int64_t n = static_cast<int64_t>(out.memory.size());
        const std::string dim =
            spec.mesh().names().empty()
                ? StrCat("dim ", step.mesh_dim)
                : StrCat(spec.mesh().DimLabel(step.mesh_dim), "(", step.mesh_dim, ")");
        out.memory.push_back(
            {StrCat("step ", n, "  ", dim, ": ", step.from.ToString(), " → ", step.to.ToString(),
                    "  ", ToString(step.collective), step.then_local_split ? "+local_split" : ""),
             n, world, meter->Peaks(world)});
        meter->BeginWindow();
      }
      if (recorder) recorder->EndStep(step, spec, local, comm);
    };
  }
  // Faults strike the traced redistribution only (not the distribution of the source, nor the
  // gathers below).
  if (!comm.simulated()) comm.SetFault(options.fault);
  DTensor result = ExecutePlan(source, out.plan, redistribute.on_step);
  // The result keeps the placements as the user wrote them (the plan ends at their canonical form).
  result =
      MakeDTensor(DTensorSpec::Create(source.mesh(), c.to, source.shape(), source.spec().dtype()),
                  result.to_local(), result.collectives_ptr(), result.stride());
  observing.reset();
  if (!comm.simulated() && options.fault.active()) {
    const bool struck = AnyRank(comm, comm.fault_struck());
    comm.SetFault(FaultSpec{});
    if (!struck && IsReportingRank(comm)) {
      std::cerr << FaultMissedWarning(
                       options.fault,
                       StrCat("no collective of this redistribution on rank ", options.fault.rank,
                              " is one it can affect (wrong-offset needs one where the rank "
                              "sends data, wrong-op a reduction)"))
                << "\n";
    }
  }
  out.source_spec = source.spec();
  out.result_spec = result.spec();
  // The verdict: every rank's shard put back together (on rank 0 of a real run) against the
  // expected global tensor.
  // (On the host: the gather and the judge read the bytes.)
  auto on_host = [](const at::Tensor& t) { return t.is_cpu() || t.is_meta() ? t : t.cpu(); };
  out.result = GatherShards(comm, on_host(result.to_local()));
  if (options.gather_source) out.source = GatherShards(comm, on_host(source.to_local()));
  int64_t ok = 0;
  if (options.meta) {
    // No values: the verdict is that every rank holds exactly its target layout's shape.
    std::optional<std::string> mismatch = FindShapeMismatch(result.spec(), result.to_local(), comm);
    ok = !mismatch;
    out.problem = mismatch.value_or("");
  } else if (out.result) {
    // Every rank's shard against its part of the expected global tensor: a wrong rank is named
    // even when a correct replica of its block comes later in rank order.
    out.tolerance = ArangeTolerance(c.src);
    const Judgement judged =
        JudgeAgainstGlobal(result.spec(), *out.result, ExpectedArangeGlobal(c.src), out.tolerance);
    ok = judged.ok;
    out.problem = judged.problem;
  }
  out.ok = BroadcastFromRankZero(comm, ok) != 0;
  if (recorder) {
    recorder->SetFinal(result.spec(), result.to_local(), comm,
                       IsReportingRank(comm) ? std::optional<bool>(out.ok) : std::nullopt);
    out.trace = GatherTrace(comm, recorder->trace());
  }
  return out;
}

nlohmann::json OutcomeToJson(const Case& c, const Outcome& o, bool values,
                             const RankSelection& selection, bool meta) {
  nlohmann::json plan = ToJson(o.plan);
  nlohmann::json out = {
      {"ok", o.ok},
      {"plan", plan["plan"]},
      {"planner", ToString(o.plan.planner)},
      {"total_est_us", o.plan.total_est_us},
      {"mesh", {{"shape", c.src.mesh().shape()}, {"names", c.src.mesh().names()}}},
      {"shape", c.src.shape()},
      {"dtype", ToString(c.src.dtype())},
      {"from", ToString(c.src.placements())},
      {"to", ToString(o.result_spec.placements())}};
  AddRanksJson(out, o.result_spec, *o.result, values && !meta, selection);
  if (meta) out["meta"] = true;
  if (!o.memory.empty()) {
    out["memory"] =
        MemoryToJson(o.memory, selection.Lists(static_cast<int64_t>(o.memory[0].ranks.size())));
  }
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
  desc.add_options()("from", po::value(&o.from),
                     "source placements, one per mesh dim, e.g. S(0),R (Partial allowed)")(
      "to", po::value(&o.to), "target placements, e.g. R,S(1)")(
      "planner", po::value(&o.planner)->default_value(o.planner),
      "greedy (upstream's sequence), min-cost or graph")("json", po::bool_switch(&o.json),
                                                         "print one JSON object")(
      "values", po::bool_switch(&o.values), "include every rank's values (row-major)")(
      "trace", po::value(&o.trace), "write a JSON trace of the run to this path")(
      "batch", po::value(&o.batch),
      "JSON cases, one per line, from a file or - (stdin); JSON results out")(
      "meta", po::bool_switch(&o.meta),
      "metadata-only: shapes, collectives, bytes and memory, no data")(
      "memory", po::bool_switch(&o.memory),
      "print every rank's peak memory per step (min/median/max)")(
      "ranks", po::value(&o.ranks)->default_value(o.ranks),
      "ranks to list: auto (all up to 256 ranks, else a summary of shapes), all, summary, or e.g. "
      "0,5,8-15");
  AddBackendOptions(desc, o);
  AddDeviceOption(desc, o);
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout
        << "usage: dtsim redistribute --mesh 2x4 [--names dp,tp] --shape 5,10 --from \"S(0),R\" "
           "--to \"R,S(1)\" [--planner greedy|min-cost|graph] [--json] [--values] [--trace "
           "out.json] [--device cpu|cuda]\n"
           "       mpirun -np 8 dtsim redistribute --backend mpi <the same flags>   (real ranks)\n"
        << desc;
    return 0;
  }
  if (vm.count("batch")) {
    // One backend for every line; on real ranks each line's mesh must match the world, and each
    // line may name a trace file ("trace": path) that rank 0 writes.
    RefuseOptionsWithBatch(vm, {"backend", "timeout"});
    FaultSpec fault;
    std::shared_ptr<Collectives> real = o.backend == "local" ? nullptr : MakeBackend(o, &fault);
    if (real && o.batch == "-") {
      throw InputError(
          "batch",
          "under mpirun only rank 0 reads standard input: give --batch a file all ranks can read");
    }
    return RunJsonLines(o.batch, [&](const nlohmann::json& j) {
      return BatchLine(j, CaseLimits(), real, o.batch);
    });
  }
  RequireOptions(vm, {"mesh", "shape", "from", "to"});
  const PlannerKind kind = ParsePlannerKind(o.planner);
  DTensorSpec src = SourceSpec(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.from, "from"),
                               ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  Case c{src, ValidateRedistribute(src, ParsePlacements(o.to, "to")), kind};
  RunCaseOptions options;
  const RankSelection selection = RankSelection::Parse(o.ranks);
  selection.CheckAgainst(MeshView(src.mesh()).ranks(), src.mesh().ToString());
  if (o.meta && o.values)
    throw InputError("values", "--values needs data; a --meta run holds shapes only");
  options.meta = o.meta;
  options.memory = o.memory;
  const bool want_trace = vm.count("trace") > 0;
  // Checked before the run (on the simulated world; on real ranks rank 0 alone writes and reports a
  // failed write).
  if (want_trace && o.trace.empty()) throw InputError("trace", "the output path is empty");
  std::shared_ptr<Collectives> comm = MakeBackend(o, src.mesh(), &options.fault);
  if (want_trace) CheckOnReportingRank(comm.get(), [&] { CheckOutputPath(o.trace, "trace"); });
  options.device = CheckDevice(o, comm->backend(), o.meta, o.memory);
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
    std::cout << SafeDump(OutcomeToJson(c, out, o.values, selection, o.meta)) << "\n";
  } else {
    std::cout << Explain(out.plan) << "\n== before\n" << RenderLayout(c.src, selection);
    if (o.values) std::cout << "\nvalues before:\n" << RenderValues(out.source_spec, *out.source);
    std::cout << "\n== after\n" << RenderLayout(out.result_spec, selection);
    if (o.values) std::cout << "\nvalues after:\n" << RenderValues(out.result_spec, *out.result);
    if (!comm->simulated()) {
      std::cout << "\nran on " << comm->world_size() << " " << comm->backend() << " ranks";
      if (options.fault.active())
        std::cout << " with the fault " << options.fault.ToString() << " injected";
      std::cout << "\n";
    }
    if (!out.memory.empty()) std::cout << "\n" << RenderMemory(out.memory);
    std::string ok_text =
        o.meta ? "OK — every rank holds its target layout's shape (metadata only, no values)"
               : "OK — the global tensor after redistribution equals the expected one";
    if (!o.meta && out.tolerance > 0) {
      ok_text += StrCat(" within a relative ", out.tolerance,
                        " (floating-point reductions in another order round "
                        "differently)");
    }
    std::cout << "\nverdict: " << (out.ok ? ok_text : "MISMATCH — " + out.problem) << "\n";
    if (want_trace) std::cout << "trace written to " << o.trace << "\n";
  }
  return out.ok ? 0 : 1;
}

}  // namespace dtsim::cli
