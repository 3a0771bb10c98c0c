// One redistribution case of `dtsim redistribute`, shared with `dtsim compare` (which runs it on
// the simulated world and compares with a real run).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>

#include "cli_common.h"
#include "dtsim/layout/fault.h"
#include "dtsim/layout/plan.h"
#include "dtsim/layout/planner.h"
#include "dtsim/layout/spec.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/trace/trace.h"
#include "memory_report.h"

namespace dtsim::cli {

// An arange case: the source spec, the target placements, the planner.
struct Case {
  DTensorSpec src;
  Placements to;
  PlannerKind planner;
};

// How RunCase runs; defaults in comments.
struct RunCaseOptions {
  std::optional<TraceMeta> trace_meta;  // record a trace with this meta (none: no trace)
  FaultSpec fault;                      // real backends: armed for the redistribution only
  bool gather_source =
      false;            // also gather the source's shards to the reporting rank (for --values)
  bool meta = false;    // metadata-only: meta tensors (shapes, no data; simulated backend only)
  bool memory = false;  // measure every rank's peak memory per step (simulated backend only)
  c10::Device device = c10::kCPU;  // where every rank's shards lie (CheckDevice)
  CaseLimits limits;               // the simulation's bounds (CheckSimulationFits)
};

// What a run gives; the tensors and the trace are on the reporting rank (rank 0 of a real run)
// only.
struct Outcome {
  Plan plan;
  DTensorSpec source_spec =
      DTensorSpec::Create(DeviceMesh::Create({1}), {Placement::Replicate()}, {});
  DTensorSpec result_spec = source_spec;
  std::optional<at::Tensor> source;  // every rank's source shard (a LocalTensor), when gathered
  std::optional<at::Tensor> result;  // every rank's result shard (a LocalTensor)
  bool ok = false;                   // the verdict, on every rank
  double tolerance = 0;  // the relative tolerance of the verdict (ArangeTolerance), 0 when exact
  std::string problem;
  std::optional<Trace> trace;
  std::vector<MemoryRow> memory;  // with RunCaseOptions::memory: the start, then one row per step
};

// Runs `c` on `collectives` (simulated or real): the arange source, the redistribution, the verdict
// against the global tensor, and the trace when asked for. Metadata-only (options.meta): the
// source's shards are meta tensors of the layout's shapes (meta.h), the verdict checks every rank's
// shape against the target layout, the trace has no hashes (meta.data false). InputError("meta" /
// "memory") for those options on a real backend. On a GPU (options.device) the source's shards and
// every collective's results lie there; the verdict and the trace read them on the host.
Outcome RunCase(const Case& c, const std::shared_ptr<Collectives>& collectives,
                const RunCaseOptions& options);

}  // namespace dtsim::cli
