// Runs the Llama model (llama.h) parallelized on a simulated mesh and reports, per module, what
// upstream's CommDebugMode reports and what it cannot: every collective with its kind, mesh dim,
// groups, bytes per rank, estimated time and cause (the op and argument of an implicit
// redistribution, or the parallel style that asked for it), every DTensor op with its input and
// output placements, parameter and gradient placements, every rank's peak memory per module — and
// a check of the loss, logits and gradients against the same model run unsharded.
//
// Attribution follows CommDebugMode exactly: in forward an event belongs to the innermost module
// running; in backward to the last module whose output gradient arrived (upstream's full backward
// pre-hook); counts of a module include its descendants'; "Global" holds everything, including the
// loss outside the model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/layout/fault.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/model/llama.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/trace/model_trace.h"

namespace dtsim {
namespace model {

struct ModelRunOptions {
  LlamaArgs args;
  DeviceMesh mesh = DeviceMesh::Create({1}, {"tp"});
  std::string plan = "tp+sp";  // tp | tp+sp | fsdp | fsdp+tp
  bool loss_parallel = false;
  bool backward = false;
  bool meta = false;   // meta tensors: shapes, collectives and memory, no values, no check
  bool check = true;   // compare with the unsharded model (data runs)
  bool trace = false;  // record a model trace (model_trace.h) into ModelReport::trace
  at::ScalarType dtype = at::kFloat;
  // The world: nullptr for the simulated one (every rank in this process); a real backend's
  // Collectives (MPI, NCCL) to run this process's rank — every rank runs RunModel, rank 0's report
  // holds the whole world's figures (collectives as planned on every rank, losses and checks
  // gathered, every rank's peak memory).
  std::shared_ptr<Collectives> backend;
  // Real backends: a fault armed for the sharded forward and backward only (not the gathers of the
  // report); ModelReport::fault_struck says whether it struck on any rank.
  FaultSpec fault;
  // Called on the parallelized model before it runs (tests corrupt a shard with it).
  std::function<void(Transformer&)> tamper;
};

// Limits of a run: world size (a metadata run is linear in ranks: 4,096 ranks take ~2.5 s on a 70B
// layer), the largest tensor, and the bytes a data run may allocate (RunModel estimates them
// before it starts; bigger models run with `meta`).
inline constexpr int64_t kMaxModelRanks = 16384;
inline constexpr int64_t kMaxModelTensorElements = int64_t{1} << 50;
inline constexpr int64_t kMaxModelDataBytes = int64_t{8} << 30;
// Transformer blocks: the largest Llama has 126; a metadata run's time grows faster than linearly
// in layers (256 layers ~1.7 s, 1,024 layers ~31 s on one rank), and --layers 10^14 never ended.
inline constexpr int64_t kMaxModelLayers = 256;
// A simulated run's total work: every rank runs every layer, so time and memory grow with ranks x
// (layers + 2) (the embedding and output count as one layer each). A metadata-only forward and
// backward costs about 0.34 ms and 24 KiB per rank-layer on the 2-core reference machine (4,096
// ranks x 16 layers: 22 s, 1.4 GB); the cap keeps one run within a few minutes. Real backends
// simulate one rank per process and are not bound by it.
inline constexpr int64_t kMaxModelRankLayers = int64_t{1} << 19;
inline constexpr int64_t kModelBytesPerRankLayer = int64_t{24} << 10;

// The plan names `dtsim model --plan` accepts, and a check of an options set (InputError naming the
// field: plan, mesh, names, ...).
const std::vector<std::string>& ModelPlanNames();
void ValidateModelRun(const ModelRunOptions& options);

struct OpRecord {
  std::string op;          // "aten::mm"
  std::string placements;  // "[S(1)], [R] -> [S(1)]"
  int64_t count = 0;
};

struct ModuleNode {
  std::string fqn;   // "layers.0.attention.wq"; "Global"; the root model "Transformer"
  std::string type;  // "Linear"
  int depth = 0;
  std::vector<std::pair<std::string, std::string>> parameters;  // name → placements
  std::vector<std::string> children;
  std::vector<CollectiveEvent> collectives[2];  // [forward, backward], this module's own
  std::vector<OpRecord> operations[2];          // this module's own
  std::vector<int64_t> forward_peak_bytes;      // per rank, while the module's forward ran
};

struct TensorCheck {
  std::string name;  // "loss", "logits", "grad layers.0.attention.wq.weight"
  double max_abs_diff = 0;
  double tolerance = 0;
  bool ok = false;
};

struct ModelReport {
  ModelRunOptions options;
  std::vector<ModuleNode> modules;  // Global first, then modules in the order first called
  std::vector<std::pair<std::string, std::string>> grad_placements;  // param fqn → placements
  std::vector<int64_t> peak_bytes;                                   // per rank, whole run
  std::vector<int64_t> param_bytes;  // per rank: the bytes of its parameter shards
  double seconds = 0;                // wall time of the sharded run
  std::optional<double> loss;        // data runs
  std::vector<TensorCheck> checks;   // data runs with check
  // With ModelRunOptions::trace: the run's model trace (on a real backend every rank's hashes,
  // gathered; meta.argv is the caller's to set).
  std::optional<ModelTrace> trace;
  bool fault_struck = false;  // ModelRunOptions::fault struck on some rank
  // Real backends: the collective-order check's cost during the forward and backward (the calls it
  // checked; per rank, the seconds it held that rank up: Collectives::agreement_seconds).
  int64_t agreement_rounds = 0;
  std::vector<double> agreement_seconds;
  bool ok() const;
};

ModelReport RunModel(const ModelRunOptions& options);

// The report as upstream CommDebugMode's JSON dump (nested nodes {fqn, module_type, parameters,
// children, collectives_forward, collectives_backward, operations_forward, operations_backward},
// counts inclusive of descendants) plus dtsim's fields.
nlohmann::json ReportToJson(const ModelReport& report);
// The same as a readable tree: per module its parameters' placements, forward and backward
// collective counts with bytes per rank and estimated time (inclusive), peak memory, then each of
// its own collectives with its cause; with `with_ops` every DTensor op with its placements too.
std::string ReportToText(const ModelReport& report, bool with_ops = false);

}  // namespace model
}  // namespace dtsim
