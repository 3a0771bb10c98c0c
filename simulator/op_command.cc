// dtsim op: runs one ATen op on DTensors of the simulated world and explains what sharding
// propagation did.
//
//   dtsim op mm --mesh 2x4 --names dp,tp --arg 8x16:S(0),R --arg 16x12:R,S(1) [--dtype float32]
//            [--json] [--values] [--meta]
//   dtsim op --batch FILE|-          one JSON case per line in, one JSON answer per line out
//   mpirun -np 8 dtsim op mm --backend mpi <the same flags>       the op on real ranks
//
// On real ranks (--backend mpi|nccl) every rank distributes its arguments, runs the op through the
// same op layer (propagation, implicit redistributions over the backend's collectives, the local
// op on its own shard), and rank 0 gathers every rank's output shards for the same answer; the
// simulated answer and the real one are equal when the backend is right.
//
// Tensor argument k holds the global values ((arange(numel) + 3k) mod 7) - 3 in the case's dtype,
// distributed with its placements (Partial placements as the arange cases of `dtsim redistribute`
// build them: each rank's part of the global tensor times the product of (1 + its coordinate) over
// the Partial mesh dims). The answer names the chosen strategy and why, every implicit
// redistribution with its plan, the collectives that ran, the outputs' placements and shards, and a
// verdict: the outputs against the same op on the global (unsharded) tensors.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <boost/program_options.hpp>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/arange_case.h"
#include "dtsim/core/meta.h"
#include "dtsim/core/real_run.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/op_trace.h"
#include "tensor_report.h"

namespace dtsim::cli {
namespace {

namespace po = boost::program_options;
using nlohmann::json;

// The values of tensor argument k: ((arange(numel) + 3k) mod 7) - 3 (bool: odd of that).
at::Tensor OpArgGlobal(const DTensorSpec& spec, int64_t k) {
  at::Tensor t = at::arange(spec.numel(), at::kLong).add(3 * k).remainder(7).sub(3);
  if (spec.dtype() == DType::kBool) return t.remainder(2).to(at::kBool).reshape(spec.shape());
  return t.to(ToScalarType(spec.dtype())).reshape(spec.shape());
}

const c10::OperatorHandle& FindOp(const std::string& text) {
  const size_t dot = text.find('.');
  std::string name = text.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : text.substr(dot + 1);
  if (overload == "default") overload = "";
  if (name.find("::") == std::string::npos) name = "aten::" + name;
  static std::map<std::string, c10::OperatorHandle> found;
  auto key = name + "." + overload;
  auto it = found.find(key);
  if (it != found.end()) return it->second;
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) {
    throw InputError(
        "op",
        StrCat("'", text, "' is no ATen operator (give a name with an optional overload, e.g. mm, ",
               "add.Tensor, sum.dim_IntList)"));
  }
  return found.emplace(key, *handle).first->second;
}

struct TensorArg {
  DTensorSpec spec;
  at::Tensor global;  // the values the DTensor stands for (Partials reduced)
};

// Builds the IValue of one argument from JSON, by the schema's type. Tensor arguments are DTensors
// on `coll`.
c10::IValue ArgValue(const json& j, const c10::Argument& arg, const DeviceMesh& mesh, DType dtype,
                     const std::shared_ptr<Collectives>& coll, std::vector<TensorArg>& tensors,
                     bool meta, const CaseLimits& limits, const std::string& field) {
  const c10::TypePtr& type = arg.real_type();
  auto tensor = [&](const json& t) -> at::Tensor {
    if (!t.is_object() || !t.contains("shape") || !t.contains("placements")) {
      throw InputError(field,
                       StrCat("argument '", arg.name(), "' is a tensor: give {\"shape\": [...], ",
                              "\"placements\": \"...\"}"));
    }
    for (const auto& [key, value] : t.items()) {
      if (key != "shape" && key != "placements") {
        throw InputError(field, StrCat("unknown key '", ExcerptText(key),
                                       "' in a tensor argument (expected shape, ", "placements)"));
      }
    }
    const std::vector<int64_t> shape = IntsFromJson(t.at("shape"), field + ".shape");
    if (!t.at("placements").is_string())
      throw InputError(field, "placements must be a string such as \"S(0),R\"");
    std::optional<DTensorSpec> made;
    try {
      made = DTensorSpec::Create(
          mesh, ParsePlacements(t.at("placements").get<std::string>(), "placements"), shape, dtype);
    } catch (const InputError& e) {
      throw InputError(field, StrCat("tensor argument '", arg.name(), "': ", e.what()));
    }
    const DTensorSpec& spec = *made;
    // Every tensor argument is simulated on every rank, and the check computes the op on the global
    // tensors too: the arguments together must fit, not each alone.
    long double already = 0;
    for (const auto& earlier : tensors) already += SimulationBytes(earlier.spec, mesh.size(), meta);
    CheckSimulationFits(spec, mesh.size(), meta, limits, already);
    if (meta) {
      tensors.push_back(
          {spec, at::empty(spec.shape(),
                           at::TensorOptions().dtype(ToScalarType(dtype)).device(at::kMeta))});
      return ops::AsTensor(MakeMetaDTensor(spec, coll));
    }
    const at::Tensor global = OpArgGlobal(spec, static_cast<int64_t>(tensors.size()));
    try {
      DTensor dt = MakeSourceFromGlobal(spec, global, coll);
      tensors.push_back({spec, ExpectedGlobalOf(spec, global)});
      return ops::AsTensor(dt);
    } catch (const InputError& e) {
      // A placement the spec accepts but the tensor's making refuses (Partial reduce ops that may
      // not mix): named under the argument, as the spec's own refusals are.
      if (e.field() != "placements") throw;
      throw InputError(field, StrCat("tensor argument '", arg.name(), "': ", e.what()));
    }
  };
  const c10::TypeKind kind = type->kind();
  if (j.is_null()) {
    if (kind != c10::TypeKind::OptionalType) {
      throw InputError(
          field, StrCat("argument '", arg.name(), "' of type ", type->str(), " cannot be null"));
    }
    return c10::IValue();
  }
  c10::TypePtr inner = type;
  if (kind == c10::TypeKind::OptionalType)
    inner = type->castRaw<c10::OptionalType>()->getElementType();
  switch (inner->kind()) {
    case c10::TypeKind::TensorType:
      return tensor(j);
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      if (!j.is_number_integer())
        throw InputError(field, StrCat("argument '", arg.name(), "' must be an int"));
      return j.get<int64_t>();
    case c10::TypeKind::FloatType:
      if (!j.is_number())
        throw InputError(field, StrCat("argument '", arg.name(), "' must be a number"));
      return j.get<double>();
    case c10::TypeKind::BoolType:
      if (!j.is_boolean())
        throw InputError(field, StrCat("argument '", arg.name(), "' must be true or false"));
      return j.get<bool>();
    case c10::TypeKind::NumberType:
      if (j.is_boolean()) return c10::Scalar(j.get<bool>());
      if (j.is_number_integer()) return c10::Scalar(j.get<int64_t>());
      if (j.is_number()) return c10::Scalar(j.get<double>());
      throw InputError(field, StrCat("argument '", arg.name(), "' must be a number"));
    case c10::TypeKind::StringType:
      if (!j.is_string())
        throw InputError(field, StrCat("argument '", arg.name(), "' must be a string"));
      return j.get<std::string>();
    case c10::TypeKind::ListType: {
      const c10::TypePtr elem = inner->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::TensorType) {
        if (!j.is_array())
          throw InputError(field, StrCat("argument '", arg.name(), "' must be a list of tensors"));
        std::vector<at::Tensor> list;
        for (const json& t : j) list.push_back(tensor(t));
        return list;
      }
      if (elem->kind() == c10::TypeKind::IntType || elem->kind() == c10::TypeKind::SymIntType) {
        if (j.is_number_integer()) return std::vector<int64_t>{j.get<int64_t>()};
        return IntsFromJson(j, field);
      }
      if (elem->kind() == c10::TypeKind::BoolType && j.is_array()) {
        c10::List<bool> list;
        for (const json& b : j) {
          if (!b.is_boolean())
            throw InputError(field, StrCat("argument '", arg.name(), "' must be a list of bools"));
          list.push_back(b.get<bool>());
        }
        return list;
      }
      break;
    }
    default:
      break;
  }
  throw InputError(field, StrCat("argument '", arg.name(), "' of type ", type->str(),
                                 " cannot be given on the command line (only null)"));
}

// Counts the collectives.
struct Counter : CollectiveObserver {
  std::map<std::string, int64_t> counts;
  void OnCollective(const CollectiveEvent& r) override { ++counts[std::string(ToString(r.kind))]; }
};

// The op events; with `record`, each implicit redistribution's trace (this rank's part on real
// ranks: rank 0 merges them afterwards).
struct Recorder : ops::OpObserver {
  std::vector<ops::OpEvent> events;
  bool record = false;
  TraceMeta meta;
  Collectives* comm = nullptr;
  std::optional<TraceRecorder> current;
  std::optional<CollectiveObservers::Scoped> observing;  // `current` hears the collectives
  std::vector<RedistributionEvent> traces;

  void OnOp(const ops::OpEvent& e) override { events.push_back(e); }
  void OnRedistributeBegin(const std::string& op, size_t input, const DTensor& source,
                           const Plan& plan) override {
    if (!record) return;
    TraceMeta m = meta;
    m.planner = ToString(plan.planner);
    current.emplace(m, /*hashes=*/meta.data);
    current->SetInitial(source.spec(), source.to_local(), *comm);
    observing.emplace(comm->observers(), &*current);
    RedistributionEvent r;
    r.index = static_cast<int64_t>(traces.size());
    r.call = "implicit";
    r.op = op;
    r.arg = static_cast<int64_t>(input);
    traces.push_back(std::move(r));
  }
  void OnRedistributeStep(const PlanStep& step, const DTensorSpec& spec,
                          const at::Tensor& local) override {
    if (current) current->EndStep(step, spec, local, *comm);
  }
  void OnRedistributeEnd(const DTensor& result) override {
    if (!current) return;
    observing.reset();
    current->SetFinal(result.spec(), result.to_local(), *comm, std::nullopt);
    traces.back().trace = std::move(current->trace());
    current.reset();
  }
};

struct OpCase {
  std::string op;
  DeviceMesh mesh = DeviceMesh::Create({1});
  DType dtype = DType::kFloat32;
  json args = json::array();
  bool values = false;
  bool meta = false;  // metadata-only: meta-tensor shards, shapes and collectives, no values
  CaseLimits limits;  // simulation limits (the fuzz targets lower them)
  // Real ranks (MakeBackend) or nullptr: a fresh simulated world for the case.
  std::shared_ptr<Collectives> backend;
  FaultSpec fault;  // real backends: strikes the op's own collectives only
  // Set: record an op trace (op_trace.h) of the implicit redistributions; its meta.
  std::optional<TraceMeta> trace_meta;
  std::optional<std::string> trace_path;  // batch key "trace": where the line's op trace goes
};

// The answer, and the op trace on the reporting rank when the case asked for one.
struct OpOutcome {
  json answer;
  std::optional<OpTrace> trace;
};

// Refuses a data run whose outputs would not fit beside its arguments, before the run makes them
// (InputError("op"), naming the outputs and the estimate). The op on metadata-only arguments (the
// same specs, meta shards, a simulated world of its own) gives every output's layout; each output
// counts as an argument does (SimulationBytes: every rank may hold a whole copy, and the verdict
// holds the unsharded result and the gathered one), a floating one also its two double-precision
// copies in the verdict. Where the op refuses, or cannot run on
// metadata (shapes that depend on values), nothing is refused here: the run itself answers.
void CheckOutputsFit(const OpCase& c, const c10::OperatorHandle& handle, const CaseLimits& limits,
                     const std::vector<TensorArg>& arguments) {
  if (!limits.max_simulation_bytes) return;
  const int64_t ranks = c.mesh.size();
  const auto& schema_args = handle.schema().arguments();
  std::shared_ptr<Collectives> meta_world = MakeLocalCollectives();
  std::vector<TensorArg> meta_tensors;
  torch::jit::Stack stack;
  try {
    for (size_t i = 0; i < schema_args.size(); ++i) {
      if (i < c.args.size()) {
        stack.push_back(ArgValue(c.args[i], schema_args[i], c.mesh, c.dtype, meta_world,
                                 meta_tensors, /*meta=*/true, limits, StrCat("args[", i, "]")));
      } else if (schema_args[i].default_value()) {
        stack.push_back(*schema_args[i].default_value());
      } else {
        return;
      }
    }
    handle.callBoxed(&stack);
  } catch (const std::exception&) {
    return;
  }
  long double outputs = 0;
  std::vector<std::string> shapes;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (const std::optional<DTensor> dt = ops::FindDTensor(t)) {
      outputs += SimulationBytes(dt->spec(), ranks, /*meta=*/false);
      // The verdict compares a floating output with the unsharded one in double precision.
      if (at::isFloatingType(t.scalar_type()))
        outputs += 2.0L * static_cast<long double>(dt->spec().numel()) * sizeof(double);
      shapes.push_back(StrCat(IntListToString(dt->shape()), " ", ToString(dt->spec().dtype())));
    } else {
      outputs += 2.0L * static_cast<long double>(t.numel()) * t.element_size();
    }
  };
  for (const c10::IValue& v : stack) {
    if (v.isTensor()) add(v.toTensor());
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec()) add(t);
  }
  long double total = outputs;
  for (const TensorArg& a : arguments) total += SimulationBytes(a.spec, ranks, /*meta=*/false);
  if (total <= *limits.max_simulation_bytes) return;
  std::string listed;
  for (size_t i = 0; i < shapes.size() && i < 4; ++i) listed += (i ? ", " : "") + shapes[i];
  if (shapes.size() > 4) listed += StrCat(", ... (", shapes.size(), " outputs)");
  throw InputError(
      "op", StrCat("aten.", c.op, ": its outputs (", listed, ") on ", ranks,
                   " simulated ranks need about ", static_cast<int64_t>(total / (1 << 20)),
                   " MiB with its arguments, but ", *limits.max_simulation_bytes / (1 << 20),
                   " MiB are available; simulate smaller tensors (or use --meta: shapes only, "
                   "no data)"));
}

// Runs one case; the answer in the batch format plus the text explanation.
OpOutcome RunOpCase(const OpCase& c, std::string* text) {
  const c10::OperatorHandle& handle = FindOp(c.op);
  const c10::FunctionSchema& schema = handle.schema();
  std::shared_ptr<Collectives> coll = c.backend ? c.backend : MakeLocalCollectives();
  if (c.meta && !coll->simulated()) {
    throw InputError("meta", StrCat("--meta simulates every rank in this process (the local "
                                    "backend), not on the ",
                                    coll->backend(), " backend"));
  }
  std::vector<TensorArg> tensors;
  torch::jit::Stack stack;
  const auto& schema_args = schema.arguments();
  // The memory the arguments may use together, read once before any is made (each argument's
  // check adds the earlier ones' estimates; reading it again would count them twice).
  CaseLimits limits = c.limits;
  if (!limits.max_simulation_bytes) limits.max_simulation_bytes = AvailableMemory();
  if (c.args.size() > schema_args.size()) {
    throw InputError("args", StrCat(c.args.size(), " arguments for ", schema, " which takes ",
                                    schema_args.size()));
  }
  for (size_t i = 0; i < schema_args.size(); ++i) {
    if (i < c.args.size()) {
      stack.push_back(ArgValue(c.args[i], schema_args[i], c.mesh, c.dtype, coll, tensors, c.meta,
                               limits, StrCat("args[", i, "]")));
    } else if (schema_args[i].default_value()) {
      stack.push_back(*schema_args[i].default_value());
    } else {
      throw InputError(
          "args", StrCat("argument '", schema_args[i].name(), "' of ", schema, " is required"));
    }
  }
  if (tensors.empty()) throw InputError("args", "give at least one tensor argument");
  if (!c.meta && coll->simulated()) CheckOutputsFit(c, handle, limits, tensors);
  // The expected outputs: the op on the global tensors.
  torch::jit::Stack global_stack = stack;
  {
    size_t k = 0;
    for (c10::IValue& v : global_stack) {
      if (v.isTensor() && ops::IsDTensor(v.toTensor())) {
        v = tensors[k++].global.clone();
      } else if (v.isTensorList()) {
        std::vector<at::Tensor> list;
        for (size_t e = 0; e < v.toTensorList().size(); ++e)
          list.push_back(tensors[k++].global.clone());
        v = list;
      }
    }
  }
  Counter counter;
  Recorder recorder;
  if (c.trace_meta) {
    recorder.record = true;
    recorder.meta = *c.trace_meta;
    recorder.meta.backend = coll->backend();
    recorder.meta.world_size = c.mesh.size();
    recorder.meta.data = !c.meta;
    recorder.comm = coll.get();
  }
  std::optional<CollectiveObservers::Scoped> count;  // the op's own collectives only
  count.emplace(coll->observers(), &counter);
  std::optional<ops::OpObservers::Scoped> observe;
  observe.emplace(ops::ThreadOpObservers(), &recorder);
  if (!coll->simulated()) coll->SetFault(c.fault);
  try {
    handle.callBoxed(&stack);
  } catch (const c10::Error& e) {
    // The op itself refuses these inputs (as it would on plain tensors): bad input, not a dtsim
    // bug.
    observe.reset();
    recorder.observing.reset();
    if (!coll->simulated()) coll->SetFault(FaultSpec{});
    std::string what = e.what_without_backtrace();
    throw InputError("op", StrCat("aten.", c.op, ": ", what.substr(0, what.find('\n'))));
  } catch (...) {
    observe.reset();
    recorder.observing.reset();
    if (!coll->simulated()) coll->SetFault(FaultSpec{});
    throw;
  }
  observe.reset();
  count.reset();
  if (!coll->simulated() && c.fault.active()) {
    const bool struck = AnyRank(*coll, coll->fault_struck());
    coll->SetFault(FaultSpec{});
    if (!struck && IsReportingRank(*coll)) {
      std::cerr << FaultMissedWarning(c.fault, StrCat("no collective this op ran on rank ",
                                                      c.fault.rank, " is one it can affect"))
                << "\n";
    }
  }
  try {
    handle.callBoxed(&global_stack);
  } catch (const c10::Error& e) {
    // The sharded op accepted inputs the op itself refuses on the global tensors (a vocabulary-
    // sharded embedding masks the indices outside each rank's rows, as upstream's _MaskPartial
    // does): bad input, as on a replicated weight.
    std::string what = e.what_without_backtrace();
    throw InputError("op",
                     StrCat("aten.", c.op, ": ", what.substr(0, what.find('\n')),
                            " (the op on the global tensors, which the verdict compares with)"));
  }
  // An op may return without reaching the DTensor kernel (contiguous of a contiguous tensor returns
  // it): no strategy, no redistribution; the outputs are still reported and checked.
  ops::OpEvent none_ran;
  none_ran.op = c.op;
  none_ran.decision.reason = "no DTensor op ran (the op returned its input's view or itself)";
  const ops::OpEvent& ev = recorder.events.empty() ? none_ran : recorder.events.back();

  json answer;
  answer["op"] = c.op;
  answer["strategy"] = ev.decision.ToString();
  answer["reason"] = ev.decision.reason;
  answer["cost_us"] = ev.decision.cost;
  // A composite op (matmul, linear, softmax.int, ...) decomposes before the DTensor kernel, as
  // before upstream's
  // __torch_dispatch__: every op it ran is listed, and the implicit redistributions of all of them.
  const bool composite = recorder.events.size() > 1;
  json redistributes = json::array();
  json op_list = json::array();
  for (const ops::OpEvent& e : recorder.events) {
    json own = json::array();
    for (const ops::OpRedistribution& r : e.redistributions) {
      json steps = json::array();
      for (const PlanStep& s : r.plan.steps) steps.push_back(ToJson(s, r.plan.mesh_dim_labels));
      json entry = {
          {"arg", r.input}, {"from", ToString(r.from)}, {"to", ToString(r.to)}, {"plan", steps}};
      own.push_back(entry);
      if (composite) entry["op"] = e.op;
      redistributes.push_back(entry);
    }
    json op_entry = {{"op", e.op},
                     {"strategy", e.decision.ToString()},
                     {"reason", e.decision.reason},
                     {"redistributes", own}};
    if (!e.local_execution.empty()) op_entry["local_execution"] = e.local_execution;
    op_list.push_back(std::move(op_entry));
  }
  answer["redistributes"] = redistributes;
  if (composite) answer["ops"] = op_list;
  // How the local op ran over the simulated ranks (docs/local-tensor.md, "Batched ranks").
  if (!ev.local_execution.empty()) answer["local_execution"] = ev.local_execution;
  json counts = json::object();
  for (const char* k : {"all_gather", "all_reduce", "reduce_scatter", "all_to_all"}) counts[k] = 0;
  for (const auto& [k, n] : counter.counts) counts[k] = n;
  answer["collective_counts"] = counts;
  json outputs = json::array();
  bool ok = true;
  std::vector<std::string> mismatches;
  size_t out_index = 0;
  // Ops whose outputs hold uninitialised memory: only shapes are checked (replicas need not agree).
  const bool uninitialized = c.op.rfind("empty", 0) == 0 || c.op.rfind("new_empty", 0) == 0 ||
                             c.op.rfind("_empty", 0) == 0;
  auto add_output = [&](const at::Tensor& t, const at::Tensor& expected) {
    if (!t.defined()) {
      outputs.push_back(nullptr);
      return;
    }
    const DTensor dt = ops::GetDTensor(t);
    json o;
    o["shape"] = dt.shape();
    o["placements"] = ToString(dt.placements());
    json ranks = json::array();
    // Every rank's shard on the reporting rank (real ranks: gathered to rank 0).
    if (const std::optional<at::Tensor> all = GatherShards(*coll, dt.to_local())) {
      for (int64_t r : LocalRanks(*all)) {
        const at::Tensor shard = LocalShard(*all, r);
        json jr = {{"rank", r}, {"local_shape", shard.sizes().vec()}};
        if (c.values && !c.meta && !uninitialized) jr["values"] = ValuesToJson(shard);
        ranks.push_back(jr);
      }
    }
    o["ranks"] = ranks;
    outputs.push_back(o);
    // Verdict: the gathered output against the unsharded result (metadata-only: every rank's local
    // shape against its layout, and the global shape against the op on meta tensors).
    bool same;
    if (c.meta || uninitialized) {
      same = dt.shape() == expected.sizes().vec() &&
             !FindShapeMismatch(dt.spec(), dt.to_local(), *coll);
      if (!same) {
        ok = false;
        mismatches.push_back(StrCat("output ", out_index));
      }
      ++out_index;
      return;
    }
    at::Tensor full = dt.FullTensor();
    if (at::isFloatingType(full.scalar_type())) {
      const double tol =
          full.scalar_type() == at::kFloat || full.scalar_type() == at::kDouble ? 1e-4 : 2e-2;
      same = full.sizes() == expected.sizes() &&
             at::allclose(full.to(at::kDouble), expected.to(at::kDouble), tol, tol,
                          /*equal_nan=*/true);
    } else {
      same = full.sizes() == expected.sizes() && at::equal(full, expected);
    }
    if (!same) {
      ok = false;
      mismatches.push_back(StrCat("output ", out_index));
    }
    ++out_index;
  };
  for (size_t r = 0; r < stack.size(); ++r) {
    const c10::IValue& v = stack[r];
    if (v.isTensor()) {
      add_output(v.toTensor(), global_stack[r].toTensor());
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      const auto expected = global_stack[r].toTensorList();
      for (size_t e = 0; e < list.size(); ++e) add_output(list[e], expected[e]);
    }
  }
  answer["outputs"] = outputs;
  // Real ranks: the verdict is every rank's (one differing rank fails the run).
  if (!coll->simulated()) ok = !AnyRank(*coll, !ok);
  answer["verdict"] = ok ? "OK" : "MISMATCH";
  OpOutcome outcome;
  if (c.trace_meta) {
    // Every rank takes part in each gather; rank 0 keeps the merged traces.
    OpTrace t;
    t.meta = recorder.meta;
    t.meta.planner = "";
    t.op = c.op;
    t.strategy = ev.decision.ToString();
    t.ok = ok;
    for (RedistributionEvent& r : recorder.traces) {
      std::optional<Trace> merged = GatherTrace(*coll, r.trace);
      if (!merged) continue;
      r.trace = std::move(*merged);
      t.redistributions.push_back(std::move(r));
    }
    if (IsReportingRank(*coll)) outcome.trace = std::move(t);
  }

  if (text != nullptr) {
    std::ostringstream out;
    out << "aten." << c.op << " on " << c.mesh.ToString() << " " << ToString(c.dtype) << "\n";
    for (size_t i = 0; i < ev.inputs.size(); ++i) {
      out << "  input " << i << "  shape " << IntListToString(ev.inputs[i].shape) << "  "
          << ToString(ev.input_placements[i]) << "\n";
    }
    out << "strategy: " << ev.decision.ToString() << "  (" << ev.decision.reason << ", cost "
        << std::fixed << std::setprecision(2) << ev.decision.cost << " us)\n";
    if (!ev.local_execution.empty()) out << "local op: " << ev.local_execution << "\n";
    out << "candidates (" << ev.decision.candidates.size() << ", upstream's order; * = chosen):\n";
    for (size_t s = 0; s < ev.decision.candidates.size(); ++s) {
      const auto& cand = ev.decision.candidates[s];
      std::ostringstream ins;
      for (size_t i = 0; i < cand.candidate.inputs.size(); ++i)
        ins << (i ? ", " : "") << ToString(cand.candidate.inputs[i]);
      std::ostringstream outs;
      for (size_t i = 0; i < cand.candidate.outputs.size(); ++i) {
        outs << (i ? ", " : "")
             << (cand.candidate.outputs[i] ? ToString(*cand.candidate.outputs[i]) : "None");
      }
      out << (s == ev.decision.chosen ? "  * " : "    ") << std::setw(10) << cand.cost << " us  "
          << ins.str() << " -> " << outs.str() << "\n";
    }
    if (composite) {
      out << "aten." << c.op << " decomposed into " << recorder.events.size()
          << " ops before the DTensor dispatch (as upstream's); the last one is shown above:\n";
      for (const ops::OpEvent& e : recorder.events) {
        out << "  " << e.op.substr(e.op.find("::") + 2) << ": " << e.decision.ToString() << "  ("
            << e.decision.reason
            << (e.redistributions.empty()
                    ? ""
                    : StrCat(", ", e.redistributions.size(), " implicit redistribution",
                             e.redistributions.size() == 1 ? "" : "s"))
            << ")\n";
      }
    }
    size_t total = 0;
    for (const ops::OpEvent& e : recorder.events) total += e.redistributions.size();
    if (total == 0) out << "implicit redistributions: none\n";
    for (const ops::OpEvent& e : recorder.events)
      for (const ops::OpRedistribution& r : e.redistributions) {
        out << "implicit redistribution of input " << r.input
            << (composite ? " of " + e.op.substr(e.op.find("::") + 2) : std::string()) << ": "
            << ToString(r.from) << " -> " << ToString(r.to) << "\n";
        for (const PlanStep& s : r.plan.steps) {
          out << "    mesh dim " << c.mesh.DimLabel(s.mesh_dim) << ": " << s.from.ToString()
              << " -> " << s.to.ToString() << "  " << ToString(s.collective);
          if (s.communicates()) {
            int64_t max_bytes = 0;
            for (int64_t b : s.bytes_sent_per_rank) max_bytes = std::max(max_bytes, b);
            out << "  groups " << s.groups.size() << " x "
                << (s.groups.empty() ? 0 : s.groups[0].size()) << "  bytes/rank <= " << max_bytes;
          }
          out << "\n";
        }
      }
    out << "collectives:";
    for (const auto& [k, n] : counts.items()) out << " " << k << " " << n.get<int64_t>();
    out << "\n";
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (outputs[o].is_null()) continue;
      out << "output " << o << ": shape " << outputs[o]["shape"].dump() << "  "
          << outputs[o]["placements"].get<std::string>() << "\n";
      const json& ranks = outputs[o]["ranks"];
      if (ranks.size() >
          256) {  // big worlds: the distinct local shapes and how many ranks hold each
        std::map<std::string, int64_t> shapes;
        for (const json& r : ranks) ++shapes[r["local_shape"].dump()];
        out << "  " << ranks.size() << " ranks; local shapes:";
        for (const auto& [shape, n] : shapes) out << " " << shape << " x " << n;
        out << "\n";
        continue;
      }
      for (const json& r : ranks) {
        out << "  rank " << std::setw(3) << r["rank"].get<int64_t>() << "  local_shape "
            << r["local_shape"].dump();
        if (r.contains("values")) out << "  " << r["values"].dump();
        out << "\n";
      }
    }
    if (!coll->simulated()) {
      out << "ran on " << coll->world_size() << " " << coll->backend() << " ranks";
      if (c.fault.active()) out << " with the fault " << c.fault.ToString() << " injected";
      out << "\n";
    }
    out << "verdict: "
        << (ok ? (c.meta ? "OK — every rank's output shape is its layout's (metadata only)"
                         : "OK — every output equals the op on the global tensors")
               : "MISMATCH — differs from the op on the global tensors: ")
        << (ok                   ? ""
            : mismatches.empty() ? "on another rank"
                                 : mismatches.front())
        << "\n";
    *text = out.str();
  }
  outcome.answer = std::move(answer);
  return outcome;
}

OpCase CaseFromJson(const json& j, const CaseLimits& limits) {
  CheckCaseKeys(j, {"mesh", "names", "op", "args", "dtype", "values", "meta", "trace"},
                {"mesh", "op"});
  OpCase c;
  c.mesh = MeshFromJson(j, limits);
  c.limits = limits;
  c.op = StringFromJson(j, "op");
  if (j.contains("args")) {
    if (!j.at("args").is_array())
      throw InputError("args", "must be a list of arguments in schema order");
    c.args = j.at("args");
  }
  if (j.contains("dtype")) c.dtype = ParseDType(StringFromJson(j, "dtype"));
  if (j.contains("values")) {
    if (!j.at("values").is_boolean()) throw InputError("values", "must be true or false");
    c.values = j.at("values").get<bool>();
  }
  if (j.contains("meta")) {
    if (!j.at("meta").is_boolean()) throw InputError("meta", "expected true or false");
    c.meta = j.at("meta").get<bool>();
  }
  if (j.contains("trace")) {
    c.trace_path = JsonReader(j["trace"], "trace").AsString();
    TraceMeta meta;
    meta.command = "op";
    meta.argv = "dtsim op --batch";
    c.trace_meta = meta;
  }
  if (c.meta && c.values)
    throw InputError("values", "--values needs data: metadata-only runs have no values");
  return c;
}

// "8x16:S(0),R" is a tensor; anything else is JSON (3, 1.5, true, [0, 1], null, "tanh").
json ArgFromText(const std::string& text, size_t index) {
  const size_t colon = text.find(':');
  if (colon != std::string::npos && text.find('{') == std::string::npos) {
    // ParseIntList reads "8x16" and "8,16" alike, and quotes the text as typed in its errors.
    const std::string shape = text.substr(0, colon);
    return {{"shape",
             shape.empty() ? std::vector<int64_t>{} : ParseIntList(shape, StrCat("arg ", index))},
            {"placements", text.substr(colon + 1)}};
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    throw InputError(
        "arg",
        StrCat("'", text, "' is neither a tensor (SHAPE:PLACEMENTS, e.g. 8x16:S(0),R) nor a ",
               "JSON value (3, 1.5, true, [0, 1], null, \"tanh\")"));
  }
  return j;
}

}  // namespace

namespace {
// One batch line on `backend` (nullptr: the simulated world): the answer on the reporting rank
// (null elsewhere); the line's op trace written to its "trace" path (checked first; written only
// when limits.write_files).
json RunOpLine(const json& j, const CaseLimits& limits, const std::shared_ptr<Collectives>& backend,
               const std::string& batch_path) {
  OpCase c = CaseFromJson(j, limits);
  if (backend) {
    CheckMeshFitsWorld(*backend, c.mesh);
    c.backend = backend;
  }
  const bool reporting = !backend || IsReportingRank(*backend);
  if (c.trace_path && limits.write_files) {
    CheckLineOnReportingRank(backend.get(), "trace", [&] {  // every rank skips a refused line
      RunFiles files;  // a line's trace is never the batch file itself
      files.Input(batch_path, "batch");
      files.Output(*c.trace_path, "trace");
    });
  }
  OpOutcome out = RunOpCase(c, nullptr);
  if (out.trace && c.trace_path && limits.write_files) {
    WriteJsonFileAtomically(*c.trace_path, ToJson(*out.trace));
  }
  return reporting ? out.answer : json();
}
}  // namespace

json OpBatchCase(const json& j, const CaseLimits& limits) {
  return RunOpLine(j, limits, nullptr, "-");
}

namespace {
struct OpCliOptions : TensorOptions, BackendCliOptions {};
}  // namespace

int RunOp(const Args& args) {
  OpCliOptions o;
  std::string op, batch;
  std::vector<std::string> arg_texts;
  bool json_out = false, values = false, list = false, meta = false;
  std::string trace;
  po::options_description desc("dtsim op options");
  desc.add_options()("help", "show this help")(
      "op", po::value(&op),
      "ATen op with optional overload: mm, add.Tensor, sum.dim_IntList, _softmax")(
      "mesh", po::value(&o.mesh), "mesh shape, e.g. 2x4")("names", po::value(&o.names),
                                                          "mesh dim names, e.g. dp,tp")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), "element type of the tensor arguments")(
      "arg", po::value(&arg_texts)->composing(),
      "an argument in schema order (repeat): a tensor SHAPE:PLACEMENTS (8x16:S(0),R; 0-d: :R) or a "
      "JSON value")("json", po::bool_switch(&json_out),
                    "print one JSON object (the batch answer format)")(
      "values", po::bool_switch(&values), "include every rank's output values (row-major)")(
      "batch", po::value(&batch),
      "JSON cases, one per line, from a file or - (stdin); JSON answers out")(
      "meta", po::bool_switch(&meta),
      "metadata-only: shapes, placements and collectives on meta tensors, no data")(
      "list", po::bool_switch(&list), "list the ops that have a sharding strategy")(
      "trace", po::value(&trace),
      "write an op trace (every implicit redistribution, as trace-diff compares) to this path");
  AddBackendOptions(desc, o);
  po::positional_options_description pos;
  pos.add("op", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError("options", e.what());
  }
  if (vm.count("help")) {
    std::cout << "usage: dtsim op OP --mesh 2x4 [--names dp,tp] --arg 8x16:S(0),R --arg "
                 "16x12:R,S(1) [--dtype D] "
                 "[--json] [--values] [--meta] [--trace out.json]\n       dtsim op --batch "
                 "FILE|-\n       dtsim op --list\n"
                 "       mpirun -np 8 dtsim op OP --backend mpi <the same flags>   (real ranks)\n"
              << desc;
    return 0;
  }
  if (list) {
    if (!op.empty()) {
      throw InputError("list", StrCat("lists every registered op, so it takes none (got the op '",
                                      ExcerptText(op, 40), "'): give --list alone"));
    }
    for (const std::string& name : ops::RegisteredOps()) std::cout << name << "\n";
    return 0;
  }
  CheckTimeout(o.timeout);  // on every backend, as redistribute checks it
  if (vm.count("batch")) {
    // One backend for every line; on real ranks each line's mesh must match the world.
    RefuseOptionsWithBatch(vm, {"backend", "timeout"});
    FaultSpec fault;
    std::shared_ptr<Collectives> real = o.backend == "local" ? nullptr : MakeBackend(o, &fault);
    if (real && batch == "-") {
      throw InputError(
          "batch",
          "under mpirun only rank 0 reads standard input: give --batch a file all ranks can read");
    }
    return RunJsonLines(batch,
                        [&](const json& j) { return RunOpLine(j, CaseLimits(), real, batch); });
  }
  if (op.empty()) throw InputError("op", "missing: give an ATen op such as mm or add.Tensor");
  RequireOptions(vm, {"mesh"});
  OpCase c;
  c.mesh = DeviceMesh::Parse(o.mesh, o.names);
  c.op = op;
  c.dtype = ParseDType(o.dtype);
  c.values = values;
  c.meta = meta;
  if (o.backend != "local" || vm.count("inject-fault"))
    c.backend = MakeBackend(o, c.mesh, &c.fault);
  if (c.meta && c.values)
    throw InputError("values", "--values needs data: metadata-only runs have no values");
  for (size_t i = 0; i < arg_texts.size(); ++i) c.args.push_back(ArgFromText(arg_texts[i], i));
  const bool want_trace = vm.count("trace") > 0;
  if (want_trace) {
    if (trace.empty()) throw InputError("trace", "the output path is empty");
    // Checked before the run (on real ranks rank 0 alone writes; every rank hears the answer).
    CheckOnReportingRank(c.backend.get(), [&] { CheckOutputPath(trace, "trace"); });
    TraceMeta tm;
    tm.command = "op";
    tm.argv = "dtsim op";
    for (const std::string& a : args) tm.argv += " " + a;
    c.trace_meta = tm;
  }
  std::string text;
  OpOutcome outcome = RunOpCase(c, json_out ? nullptr : &text);
  const json& answer = outcome.answer;
  if (c.backend && !IsReportingRank(*c.backend)) return answer["verdict"] == "OK" ? 0 : 1;
  if (outcome.trace) WriteJsonFileAtomically(trace, ToJson(*outcome.trace));
  if (json_out) {
    std::cout << answer.dump() << "\n";
  } else {
    std::cout << text;
    if (want_trace) std::cout << "trace written to " << trace << "\n";
  }
  return answer["verdict"] == "OK" ? 0 : 1;
}

}  // namespace dtsim::cli
