// Model traces: what `dtsim model --trace` writes — one run of a parallelized model as a sequence
// of events in run order: module calls (forward begin and end, backward begin), every DTensor op
// with its placements and the collectives of the implicit redistributions it caused nested in it,
// the collectives the parallel styles and fully_shard ran, and every rank's shard hash of the
// parameters before the run, each module's input and output (forward) and output gradient
// (backward), the
// loss and every parameter's gradient. Real ranks (MPI) and the simulation write the same model
// trace; `dtsim trace-diff` says where two part (the first module boundary whose hash differs names
// the module and the ranks); `dtsim export` shows it in Perfetto. No LibTorch.
//
//   {"format": "dtsim-model-trace", "version": 1, "meta": {...as in a trace...},
//    "model": {"dim": 256, ..., "plan": "fsdp+tp"}, "mesh": {"shape": [2, 4], "names": [...]},
//    "events": [
//      {"event": "module_begin", "phase": "forward", "module": "layers.0", "type":
//      "TransformerBlock",
//       "tensor": {...its input...}, "t_us": 120.5},
//      {"event": "op", "phase": "forward", "module": "layers.0.attention.wq", "op": "aten::mm",
//       "placements": "[S(0)], [S(1)] -> [S(1)]", "t_us": 130.0,
//       "collectives": [{"kind": "all_gather", "mesh_dim": "tp", "groups": [[0, 1], [2, 3]],
//       ...}]},
//      {"event": "module_end", "phase": "forward", "module": "layers.0", "t_us": 400.0,
//       "tensor": {"placements": "[S(1)]", "shape": [4, 64, 256], "hashes": ["xxh3:…", ...]}},
//      ...]}
//
// Hashes are indexed by rank (0 .. world_size - 1) and absent from metadata-only runs (meta.data
// false). Times are microseconds since the run began, on rank 0; trace-diff ignores them.
//
// In memory each event is a RunEvent (run_events.h) standing for every rank: "event" is its kind,
// "phase" its pass, and an op's "placements" its arguments' and results' (PlacementsText).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/trace/run_events.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"

namespace dtsim {

inline constexpr const char* kModelTraceFormat = "dtsim-model-trace";
inline constexpr int kModelTraceVersion = 1;

// Collectives summed by kind: what a module (or a Perfetto slice) issued.
struct CommCounts {
  static constexpr size_t kKinds = static_cast<size_t>(CollectiveKind::kBarrier) + 1;
  std::array<int64_t, kKinds> by_kind{};
  int64_t count = 0;
  int64_t bytes = 0;
  double est_us = 0;

  void Add(const CollectiveEvent& c);
  void Add(const CommCounts& other);
  // "all_gather 3, reduce_scatter 2 | 833 KiB/rank, 50.6 us" ("none" without collectives);
  // `short_names`: "AG 3, RS 2 | 833 KiB" (the tree's columns). Bytes as BytesText prints them.
  std::string Text(bool short_names = false) const;
};

// "AG" for all_gather, "RS", "AR", "A2A"; the full name for the rarer kinds.
std::string ShortName(CollectiveKind kind);

// A byte count in binary units with three significant digits: "512 B", "1.50 KiB", "833 KiB".
std::string BytesText(int64_t bytes);

// Two sketches are equal within float rounding when each projection and the norm differ by at
// most this times the larger norm: the tolerance of `dtsim model`'s check against the unsharded
// model (model_run.h), as a reduction order changes values by a few ulps each (relative 1e-7 to
// 1e-6 after a few layers), while a wrong shard moves them by O(1).
inline constexpr double kSketchTolerance = 1e-4;
bool SketchesAgree(const std::array<double, 3>& a, const std::array<double, 3>& b);

struct ModelTrace {
  TraceMeta meta;
  nlohmann::json model = nlohmann::json::object();  // the model's sizes and plan, as given
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> mesh_names;
  // The run's events in run order, each standing for every rank (run_events.h): module begins and
  // ends, ops, collectives, parameters, the loss and gradients.
  std::vector<RunEvent> events;
  std::vector<int64_t> peak_bytes;  // per rank, whole run
};

nlohmann::json ToJson(const ModelTrace& trace);
// Reads and validates a model trace: format, version, every field's type and range, event kinds
// and the fields each needs, hashes "xxh3:<16 hex>" one per rank (required unless meta.data is
// false), groups of ranks inside the world, module begins and ends that nest; and what can be true
// of a run: mesh dim names unique, the model's sizes whole numbers of at least 1, a collective's
// mesh dim one of the mesh's with groups of that dim's size, a tensor's placements at most one per
// mesh dim and valid for its shape, an op's placements "ARGS -> RESULTS" with each side a list of
// bracketed placements (or "none"). InputError("trace", "<path>: <problem>") on the first problem.
ModelTrace ModelTraceFromJson(const nlohmann::json& json);
// True when `json` says it is a model trace.
bool IsModelTrace(const nlohmann::json& json);

// Where two model traces part, in run order: the model and mesh, then event by event the kind,
// phase, module, op, placements, collectives (kind, mesh dim, groups, bytes, placements, cause),
// tensor placements and shapes, and every rank's hash ("hash differs on ranks 2, 3"). `where`
// names the event ("event 57: forward output of layers.0.attention.wq"). Once the sequences part
// (another kind, module or op) the rest is not aligned: one difference says so and the diff ends.
// A tensor whose hashes differ on a rank but whose sketches agree there is equal within float
// rounding: not a difference, counted in `*rounded` (when given) instead. Times are not compared.
// At most `limit` differences.
std::vector<TraceDifference> DiffModelTraces(const ModelTrace& a, const ModelTrace& b,
                                             size_t limit = 20, int64_t* rounded = nullptr);

}  // namespace dtsim
