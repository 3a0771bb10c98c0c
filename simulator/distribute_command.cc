// dtsim distribute: distributes the arange tensor step by step, each step a submesh and its
// placements — the way TP + FSDP code shards a TP DTensor further over the data-parallel dim
// (beyond upstream: pytorch#116101).
//
//   dtsim distribute --mesh 2x4 --names dp,tp --shape 8,6 --step "tp:S(0)" --step "dp:S(0)"
//   [--dtype float32]
//                    [--json] [--values] [--backend local|mpi|nccl] [--timeout 60] [--inject-fault
//                    SPEC]
//                    [--meta] [--ranks auto|all|summary|0,5,8-15]
//
// --meta distributes a meta tensor (shapes, no data) through the same code on the simulated world;
// the verdict then checks every rank's shard shape against the result's layout.
//
// A step is "<dims>:<placements>": mesh dim names (comma-separated, or indices for an unnamed mesh)
// and one placement per named dim. The first step distributes the global tensor over its submesh;
// each later step shards the result further over another submesh of the same root. The result's
// mesh, placements (with _StridedShard where the sharding order needs it) and per-rank shards are
// printed; the verdict checks them against the global tensor.
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
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/layout_report.h"
#include "dtsim/layout/rank_selection.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"
#include "tensor_report.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim distribute`; defaults in comments.
struct DistributeOptions : TensorOptions,
                           BackendCliOptions {  // --mesh, --names, --shape, --dtype, --backend...
  std::vector<std::string> steps;               // required, in order: "tp:S(0)"
  bool json = false;                            // one JSON object instead of text
  bool values = false;                          // include every rank's values
  bool meta = false;  // metadata-only: a meta tensor, no data (simulated backend)
  std::string ranks =
      "auto";  // which ranks to list: auto (all up to 256 ranks, else a summary), all, ...
};

struct Step {
  DeviceMesh mesh;
  Placements placements;
  std::string label;  // mesh[dp=2, tp=4]["tp"]
  std::string text;   // as typed: "tp:S(0)"
};

// Runs `f`, which validates or performs the step typed as `text`; an InputError the layers below
// raise under their own name for the value ("placements: 'S(5)' shards dim 5 ...", "mesh: mesh dim
// tp ... is already used", "submesh: ... has no dim 'x'") is reported under the option the user
// typed: "step: 'tp:S(5)': 'S(5)' shards dim 5 but the tensor has 2 dims".
template <typename F>
auto AsStep(const std::string& text, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const InputError& e) {
    if (e.field() == "step") throw;
    const std::string what = e.what();
    throw InputError("step",
                     StrCat("'", ExcerptText(text), "': ", what.substr(e.field().size() + 2)));
  }
}

Step ParseStep(const DeviceMesh& root, const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    throw InputError("step",
                     StrCat("'", ExcerptText(text), "' is not <dims>:<placements>, as in tp:S(0)"));
  }
  const std::string shown = ExcerptText(text);
  std::vector<std::string> dims = ParseNameList(text.substr(0, colon));
  if (dims.empty()) throw InputError("step", StrCat("'", shown, "' names no mesh dim"));
  Placements placements = ParsePlacements(text.substr(colon + 1), "step");
  if (placements.size() != dims.size()) {
    throw InputError("step", StrCat("'", shown, "' gives ", placements.size(), " placements for ",
                                    dims.size(), " mesh dim", dims.size() == 1 ? "" : "s"));
  }
  std::string label = root.ToString() + "[";
  for (size_t i = 0; i < dims.size(); ++i) label += (i ? ", \"" : "\"") + dims[i] + "\"";
  return AsStep(text, [&] {
    return Step{root.Submesh(dims, root.ranks().front()), placements, label + "]", text};
  });
}

}  // namespace

int RunDistribute(const Args& args) {
  DistributeOptions o;
  po::options_description desc("dtsim distribute options");
  AddTensorOptions(desc, o, "element type of the arange tensor");
  desc.add_options()("step", po::value(&o.steps)->composing(),
                     "a step <dims>:<placements>, e.g. tp:S(0); repeat, in order")(
      "json", po::bool_switch(&o.json), "print one JSON object")(
      "values", po::bool_switch(&o.values), "include every rank's values (row-major)")(
      "meta", po::bool_switch(&o.meta),
      "metadata-only: distribute a meta tensor (shapes, no data)")(
      "ranks", po::value(&o.ranks)->default_value(o.ranks),
      "ranks to list: auto (all up to 256 ranks, else a summary of shapes), all, summary, or e.g. "
      "0,5,8-15");
  AddBackendOptions(desc, o);
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim distribute --mesh 2x4 --names dp,tp --shape 8,6 --step \"tp:S(0)\" "
                 "--step \"dp:S(0)\" "
                 "[--json] [--values]\n"
              << desc;
    return 0;
  }
  RequireOptions(vm, {"mesh", "shape", "step"});
  const DeviceMesh root = DeviceMesh::Parse(o.mesh, o.names);
  std::vector<Step> steps;
  for (const std::string& text : o.steps) steps.push_back(ParseStep(root, text));
  const DTensorSpec global_spec =
      DTensorSpec::Create(root, Placements(root.ndim(), Placement::Replicate()),
                          ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  const RankSelection selection = RankSelection::Parse(o.ranks);
  selection.CheckAgainst(root.ranks(), root.ToString());
  if (o.meta && o.values)
    throw InputError("values", "--values needs data; a --meta run holds shapes only");
  FaultSpec fault;
  std::shared_ptr<Collectives> collectives = MakeBackend(o, root, &fault);
  if (o.meta && !collectives->simulated()) {
    throw InputError(
        "meta",
        StrCat("--meta simulates every rank in this process (the local backend), not on the ",
               collectives->backend(), " backend"));
  }
  if (collectives->simulated()) CheckSimulationFits(global_spec, root.size(), o.meta);
  for (const Step& step : steps) {
    AsStep(step.text, [&] {
      CheckSimulationBlocks(
          DTensorSpec::Create(step.mesh, step.placements, global_spec.shape(), global_spec.dtype()),
          "step");
    });
  }
  const at::Tensor global =
      o.meta ? at::empty(
                   global_spec.shape(),
                   at::TensorOptions().dtype(ToScalarType(global_spec.dtype())).device(at::kMeta))
             : ArangeGlobal(global_spec);
  collectives->SetFault(fault);
  DTensor dt = AsStep(steps[0].text, [&] {
    return DistributeTensor(global, steps[0].mesh, steps[0].placements, 0, collectives);
  });
  nlohmann::json step_json = nlohmann::json::array();
  step_json.push_back({{"mesh", steps[0].label},
                       {"placements", ToString(steps[0].placements)},
                       {"result_mesh", dt.mesh().ToString()},
                       {"result_placements", ToString(dt.placements())}});
  for (size_t i = 1; i < steps.size(); ++i) {
    dt = AsStep(steps[i].text,
                [&] { return DistributeTensor(dt, steps[i].mesh, steps[i].placements); });
    step_json.push_back({{"mesh", steps[i].label},
                         {"placements", ToString(steps[i].placements)},
                         {"result_mesh", dt.mesh().ToString()},
                         {"result_placements", ToString(dt.placements())}});
  }
  // Verdict: the shards put back together (on rank 0 of a real run) give the global tensor, and
  // each rank holds exactly its layout's part. (Metadata only: each rank holds exactly its layout's
  // shape.)
  const std::optional<at::Tensor> all = GatherShards(*collectives, dt.to_local());
  int64_t verdict = 0;
  std::string problem;
  if (o.meta) {
    std::optional<std::string> mismatch = FindShapeMismatch(dt.spec(), dt.to_local(), *collectives);
    verdict = !mismatch;
    problem = mismatch.value_or("");
  } else if (all) {
    const Judgement judged = JudgeAgainstGlobal(dt.spec(), *all, global);
    verdict = judged.ok;
    problem = judged.problem;
  }
  const bool ok = BroadcastFromRankZero(*collectives, verdict) != 0;
  if (!IsReportingRank(*collectives)) return ok ? 0 : 1;
  const bool list_mesh_ranks =
      selection.Lists(static_cast<int64_t>(MeshView(dt.mesh()).ranks().size())) ||
      !dt.mesh().root().default_order();
  if (o.json) {
    nlohmann::json mesh = {{"shape", dt.mesh().shape()}, {"names", dt.mesh().names()}};
    if (list_mesh_ranks) mesh["ranks"] = MeshView(dt.mesh()).ranks();
    nlohmann::json out = {{"ok", ok},
                          {"mesh", mesh},
                          {"placements", ToString(dt.placements())},
                          {"shape", dt.shape()},
                          {"dtype", ToString(dt.spec().dtype())},
                          {"steps", step_json}};
    AddRanksJson(out, dt.spec(), *all, o.values, selection);
    if (o.meta) out["meta"] = true;
    if (!ok) out["problem"] = problem;
    std::cout << SafeDump(out) << "\n";
  } else {
    for (const auto& s : step_json) {
      std::cout << "step: " << s["placements"].get<std::string>() << " on "
                << s["mesh"].get<std::string>() << "  →  DTensor on "
                << s["result_mesh"].get<std::string>() << " with "
                << s["result_placements"].get<std::string>() << "\n";
    }
    std::cout << "\n" << RenderLayout(dt.spec(), selection);
    if (o.values) std::cout << "\nvalues:\n" << RenderValues(dt.spec(), *all);
    if (!collectives->simulated())
      std::cout << "\nran on " << collectives->world_size() << " " << o.backend << " ranks\n";
    const std::string ok_text =
        o.meta ? "OK — every rank's shard has its layout's shape (metadata only, no values)"
               : "OK — every rank's shard is its part of the global tensor";
    std::cout << "\nverdict: " << (ok ? ok_text : "MISMATCH — " + problem) << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace dtsim::cli
