// Model traces as Chrome / Perfetto trace-event JSON (`dtsim export --format perfetto model.json
// out.json [--with other.json]`): every exported rank's run as nested slices on one track, so
// ui.perfetto.dev shows the module tree over time with each op inside its module and each
// collective inside the op that caused it.
//
// Mapping (JSON Object Format of the Trace Event Format, complete events "ph": "X"):
//   * one process per exported rank, pid = source * kPerfettoPidStride + rank + 1, named "rank 3
//     [dp=0, tp=3]" ("<label>: rank 3 ..." with --with), one thread "model" (tid 1);
//   * depth 0: one slice per phase run of events ("setup", "forward", "backward", "end");
//     modules below it: a forward call from its module_begin to its module_end; in backward, from
//     its backward_begin to the next backward_begin of a module outside its subtree (or the end of
//     backward) — so a block's backward holds its children's, as CommDebugMode attributes them;
//   * an op from the previous event's time to its own t_us (when it finished), inside its module;
//     its collectives (implicit redistributions) inside it, one after another from its start, each
//     est_us long, scaled down together when they do not fit (args say so); a standalone collective
//     event, a parameter, the loss and a gradient are slices like an op;
//   * times: t_us (microseconds since the run began, on rank 0) on a whole-nanosecond grid. So
//     that slices nest strictly — a child starts after and ends before its parent, siblings never
//     touch, whatever the times (equal times happen) — boundaries are kept a few nanoseconds
//     apart (at least 2 x (depth + 3) + 2 x (collectives + 1) ns) and a slice at depth d starts
//     d + 1 ns after its boundary and ends d + 1 ns before its closing one. Every rank's track has
//     the same times (a trace records rank 0's clock); args differ per rank (hashes, groups);
//   * args: modules: type, pass, input / output / output gradient (placements, shape, this rank's
//     hash), the collectives of the pass (own and with the module's children); ops: module,
//     placements, collectives; collectives: mesh_dim, groups (count), group (this rank's),
//     bytes_sent / bytes_received (per rank), est_us, from, to, cause, implicit; parameters, loss,
//     gradients: placements, shape, hash. Every slice has "event" (its index in the trace, from 0).
//   * "otherData": generator, and per trace: label, backend, argv, world_size, ranks_exported and
//     rank_selection (which ranks, and why).
//
// Large worlds: every rank is exported up to kMaxExportedRanks (64); beyond, a sample — rank 0,
// the last rank, and for each mesh dim the ranks at coordinate 1 and at the dim's last index on it
// (0 elsewhere) — plus, with --with, the ranks whose values differ (DiffModelTraces), up to 64 in
// all. A 4,096-rank 512 x 8 run exports ranks 0, 1, 7, 8, 4088, 4095.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtsim/trace/model_trace.h"

namespace dtsim {

inline constexpr int64_t kMaxExportedRanks = 64;

struct ModelPerfettoSource {
  const ModelTrace* trace = nullptr;
  std::string label;  // "" for one trace; otherwise prefixes process names
};

// The ranks exported from a world of `mesh_shape`: all up to kMaxExportedRanks, else the sample
// above plus `differing` (ascending, capped). `why` (optional) says which in words.
std::vector<int64_t> ExportedRanks(const std::vector<int64_t>& mesh_shape,
                                   const std::vector<int64_t>& differing,
                                   std::string* why = nullptr);

// {"traceEvents": [...], "otherData": {...}}. With two sources of the same mesh, the ranks whose
// values differ between them are exported too (large worlds).
nlohmann::json ModelTraceToPerfetto(const std::vector<ModelPerfettoSource>& sources);

}  // namespace dtsim
