// dtsim._C: the Python binding of dtsim's simulated DTensor. python/dtsim/__init__.py wraps it in
// upstream's names (init_device_mesh, Shard, distribute_tensor, DTensor.redistribute, ...); this
// file only converts: placements cross as their text form ("[S(0), R]"), JSON reports as Python
// dicts, tensors through torch's own caster (torch/csrc/utils/pybind.h), so a torch.Tensor in or
// out shares its storage with the at::Tensor — no copies.
//
// Errors: dtsim::InputError becomes ValueError (its message names the field), any other dtsim
// error RuntimeError; the GIL is released while a redistribution or gather runs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/core/dtensor.h"
#include "dtsim/core/op_schema.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/collective_kind.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/layout_report.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"
#include "dtsim/layout/plan.h"
#include "dtsim/layout/planner.h"
#include "dtsim/layout/rank_selection.h"
#include "dtsim/layout/spec.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/trace/formats.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/op_trace.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"
#include "errors.h"

namespace py = pybind11;

namespace dtsim {
namespace {

// nlohmann::json -> the Python value json.loads would give.
py::object ToPython(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return py::none();
    case nlohmann::json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(j.get<double>());
    case nlohmann::json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list out;
      for (const auto& item : j) out.append(ToPython(item));
      return std::move(out);
    }
    case nlohmann::json::value_t::object: {
      py::dict out;
      for (auto it = j.begin(); it != j.end(); ++it) out[py::str(it.key())] = ToPython(it.value());
      return std::move(out);
    }
    default:
      return py::none();
  }
}

// Python value -> nlohmann::json via the json module (plans edited in Python come back this way).
nlohmann::json FromPython(const py::handle& value, const std::string& field) {
  const std::string text = py::module_::import("json").attr("dumps")(value).cast<std::string>();
  return ParseJsonText(text, field, "<python>");
}

DTensorSpec MakeSpec(const DeviceMesh& mesh, const std::string& placements,
                     const std::vector<int64_t>& shape, const std::string& dtype) {
  return DTensorSpec::Create(mesh, ParsePlacements(placements), shape, ParseDType(dtype));
}

// Per-rank shards in ascending rank order (the LocalTensor's order), or this DTensor's one tensor.
std::vector<at::Tensor> Shards(const DTensor& dt) {
  const at::Tensor& local = dt.to_local();
  if (IsLocalTensor(local)) return LocalShards(local);
  return {local};
}

// The ranks a simulated DTensor on `mesh` holds, ascending: a submesh stands for its whole family,
// so its DTensors hold every rank of the root mesh.
std::vector<int64_t> SortedRanks(const DeviceMesh& mesh) {
  std::vector<int64_t> ranks = mesh.root().ranks();
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

DTensor FromLocalShards(const std::vector<at::Tensor>& shards, const DeviceMesh& mesh,
                        const std::string& placements, std::optional<std::vector<int64_t>> shape,
                        std::optional<std::vector<int64_t>> stride) {
  std::vector<int64_t> ranks = SortedRanks(mesh);
  if (shards.size() != ranks.size()) {
    throw InputError("local_tensor",
                     StrCat("expected one tensor per rank of ", mesh.root().ToString(), " (",
                            ranks.size(), "), got ", shards.size()));
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].defined()) throw InputError("local_tensor", StrCat("rank ", ranks[i], ": None"));
  }
  at::Tensor local = MakeLocalTensor(std::move(ranks), shards);
  return DTensor::FromLocal(local, mesh, ParsePlacements(placements), std::move(shape),
                            std::move(stride));
}

// A shard written in place keeps its layout; one resized or transposed in place (resize_, t_)
// no longer fits it, and no redistribution can run on it: refused before one starts, naming the
// rank (InputError "shards").
void CheckShardsIntact(const DTensor& d) {
  if (!IsLocalTensor(d.to_local())) return;
  try {
    (void)DTensor::FromLocal(d.to_local(), d.mesh(), d.placements(), d.shape(), d.stride());
  } catch (const InputError& e) {
    throw InputError("shards", StrCat("a shard no longer fits the DTensor's layout ",
                                      ToString(d.placements()), " of ", IntListToString(d.shape()),
                                      ": it was changed in place after the DTensor was made "
                                      "(resize_, t_, ...): ",
                                      e.what()));
  }
}

// Runs `fn`, renaming the command line's field names in its InputError to the Python argument
// names ("to" is `placements`, "from" is `src`).
template <typename F>
auto PythonFields(F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const InputError& e) {
    static const std::map<std::string, std::string> kNames = {{"to", "placements"},
                                                              {"from", "src"}};
    auto it = kNames.find(e.field());
    if (it == kNames.end()) throw;
    const std::string what = e.what();
    throw InputError(it->second, what.substr(std::min(what.size(), e.field().size() + 2)));
  }
}

}  // namespace
}  // namespace dtsim

PYBIND11_MODULE(_C, m) {
  using namespace dtsim;
  m.doc() = "dtsim's simulated DTensor (use the dtsim package, not this module)";
  py::register_exception_translator(&TranslateError);

  py::class_<DeviceMesh>(m, "DeviceMesh")
      .def(py::init([](std::vector<int64_t> shape, std::vector<std::string> names,
                       std::vector<int64_t> ranks) {
             return DeviceMesh::Create(std::move(shape), std::move(names), std::move(ranks));
           }),
           py::arg("shape"), py::arg("names") = std::vector<std::string>{},
           py::arg("ranks") = std::vector<int64_t>{})
      .def_property_readonly("shape", &DeviceMesh::shape)
      .def_property_readonly("names", &DeviceMesh::names)
      .def_property_readonly("ranks", &DeviceMesh::ranks)
      .def_property_readonly("ndim", &DeviceMesh::ndim)
      .def("size", py::overload_cast<>(&DeviceMesh::size, py::const_))
      .def("dim_label", &DeviceMesh::DimLabel)
      .def("get_dim", [](const DeviceMesh& m, const std::string& name) { return m.GetDim(name); })
      .def("coordinate", &DeviceMesh::GetCoordinate)
      .def("groups_along", &DeviceMesh::GroupsAlong)
      // mesh["tp"] in simulation: the family of tp submeshes (dtensor.h), cut at the first rank.
      .def("submesh",
           [](const DeviceMesh& m, const std::vector<std::string>& names) {
             return m.Submesh(names, m.ranks().front());
           })
      .def_property_readonly("is_root", &DeviceMesh::is_root)
      .def_property_readonly("root", [](const DeviceMesh& m) { return m.root(); })
      .def("__repr__", &DeviceMesh::ToString)
      .def("__eq__", [](const DeviceMesh& a, const DeviceMesh& b) { return a == b; });

  py::class_<DTensor>(m, "DTensor")
      .def_property_readonly("mesh", &DTensor::mesh)
      .def_property_readonly("placements",
                             [](const DTensor& d) { return ToString(d.placements()); })
      .def_property_readonly("shape", &DTensor::shape)
      .def_property_readonly("stride", &DTensor::stride)
      .def_property_readonly("dtype", [](const DTensor& d) { return ToString(d.spec().dtype()); })
      .def_property_readonly("spec", [](const DTensor& d) { return d.spec().ToString(); })
      .def("ranks",
           [](const DTensor& d) {
             return IsLocalTensor(d.to_local()) ? LocalRanks(d.to_local()) : SortedRanks(d.mesh());
           })
      .def("shards", &Shards)
      .def("redistribute",
           [](const DTensor& d, const std::string& placements, const std::string& planner) {
             RedistributeOptions options;
             options.planner = ParsePlannerKind(planner);
             Placements dst = ParsePlacements(placements);
             CheckShardsIntact(d);
             py::gil_scoped_release release;
             return PythonFields([&] { return d.Redistribute(d.mesh(), dst, options); });
           })
      .def("full_tensor", [](const DTensor& d) {
        CheckShardsIntact(d);
        py::gil_scoped_release release;
        return d.FullTensor();
      });

  m.def("distribute_tensor",
        [](const at::Tensor& tensor, const DeviceMesh& mesh, const std::string& placements,
           std::optional<int64_t> src_data_rank) {
          Placements p = ParsePlacements(placements);
          py::gil_scoped_release release;
          return DistributeTensor(tensor, mesh, p, src_data_rank);
        });
  m.def("from_local", &FromLocalShards);
  m.def("plan", [](const DeviceMesh& mesh, const std::string& src, const std::string& dst,
                   const std::vector<int64_t>& shape, const std::string& dtype,
                   const std::string& planner) {
    Plan plan = PythonFields([&] {
      DTensorSpec spec =
          DTensorSpec::Create(mesh, ParsePlacements(src, "src"), shape, ParseDType(dtype));
      // The plan `dtsim plan` prints for the same case: upstream's (greedy, graph) or the search's,
      // also where dtsim's executor would run another order (runs_left_to_right false: then
      // DTensor.redistribute without plan= runs the executable plan to the same placements).
      return PlanRedistribute(spec, ParsePlacements(dst), ParsePlannerKind(planner));
    });
    return py::make_tuple(ToPython(ToJson(plan)), Explain(plan));
  });
  m.def("explain_plan", [](const py::handle& plan) {
    return Explain(PlanFromJson(FromPython(plan, "plan"), "plan"));
  });
  m.def("execute_plan", [](const DTensor& d, const py::handle& plan_json) {
    Plan plan = PlanFromJson(FromPython(plan_json, "plan"), "plan");
    CheckShardsIntact(d);
    py::gil_scoped_release release;
    return ExecutePlan(d, plan);
  });
  m.def("layout", [](const DeviceMesh& mesh, const std::string& placements,
                     const std::vector<int64_t>& shape, const std::string& dtype,
                     const std::string& ranks) {
    DTensorSpec spec = MakeSpec(mesh, placements, shape, dtype);
    RankSelection selection = RankSelection::Parse(ranks);
    return py::make_tuple(ToPython(LayoutToJson(spec, selection)), RenderLayout(spec, selection));
  });
  m.def("normalize_placements",
        [](const std::string& text) { return ToString(ParsePlacements(text)); });
  m.def("load_trace", [](const std::string& path) {
    // Validated by its format's driver (include/dtsim/trace/formats.h), then handed over as JSON.
    const TraceText text = ReadTraceText(path);
    TraceFormatDriverFor(text, text).validate(text, TensorArgumentProblem);
    return ToPython(ParseTraceText(text));
  });
  // The planner's alpha-beta estimate of one collective (CostModel::EstimateUs with its defaults),
  // in microseconds; None for a kind the cost model does not estimate. ValueError for an unknown
  // kind, a group size below 1 or negative bytes.
  m.def("estimate_collective_us",
        [](const std::string& kind, int64_t group_size,
           int64_t message_bytes) -> std::optional<double> {
          std::optional<CollectiveKind> k = FindCollectiveKind(kind);
          if (!k) throw InputError("kind", "'" + kind + "' is not a collective kind");
          if (group_size < 1)
            throw InputError("group_size", std::to_string(group_size) + " is below 1");
          if (message_bytes < 0)
            throw InputError("message_bytes", std::to_string(message_bytes) + " is negative");
          if (*k != CollectiveKind::kAllGather && *k != CollectiveKind::kReduceScatter &&
              *k != CollectiveKind::kAllReduce && *k != CollectiveKind::kAllToAll)
            return std::nullopt;
          return CostModel().EstimateUs(*k, group_size, message_bytes);
        });
  m.def("shard_hash", [](const at::Tensor& t) { return ShardHash(t); });
  // (hash, sketch, scale) of a tensor for run events (ShardDigest; sketch and scale None unless
  // floating point), computed without the GIL.
  m.def("shard_digest", [](const at::Tensor& t) {
    ShardDigestValues d;
    {
      py::gil_scoped_release release;
      d = ShardDigest(t);
    }
    return py::make_tuple(d.hash, d.sketch ? py::object(py::float_(*d.sketch)) : py::none(),
                          d.scale ? py::object(py::float_(*d.scale)) : py::none());
  });
  m.def("dtype_name",
        [](const at::Tensor& t) { return ToString(FromScalarType(t.scalar_type())); });
}
