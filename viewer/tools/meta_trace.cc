// Metadata-only traces from the planner (see meta_trace.h).
#include "meta_trace.h"

#include <algorithm>

#include "dtsim/layout/planner.h"

namespace dtsim::viewer {
namespace {

std::vector<RankState> States(const DTensorSpec& spec) {
  std::vector<RankState> out;
  for (const RankLayout& l : spec.AllLayouts()) {
    out.push_back({l.rank, l.coordinate, l.local_shape, l.global_offset, {}});
  }
  std::sort(out.begin(), out.end(),
            [](const RankState& a, const RankState& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace

Trace MakeMetaTrace(const DTensorSpec& src, const Placements& dst,
                    const MetaTraceOptions& options) {
  const Plan plan = PlanRedistribute(src, dst, PlannerKind::kGreedy);
  const DeviceMesh& mesh = src.mesh();
  Trace t;
  t.meta.command = "example";
  t.meta.argv = options.argv;
  t.meta.backend = options.measured ? "nccl" : "local";
  t.meta.world_size = mesh.size();
  t.meta.planner = ToString(plan.planner);
  t.meta.data = false;
  t.initial.spec = src;
  t.initial.ranks = States(src);
  DTensorSpec before = src;
  for (const PlanStep& step : plan.steps) {
    TraceStep s;
    s.plan = step;
    s.mesh_dim_name = mesh.DimLabel(step.mesh_dim);
    s.placements_after = step.placements_after;
    const DTensorSpec after =
        DTensorSpec::Create(mesh, step.placements_after, src.shape(), src.dtype());
    if (MovesData(step.collective)) {
      const std::vector<RankLayout> in = before.AllLayouts(), out = after.AllLayouts();
      CollectiveEvent c;
      c.kind = step.collective;
      c.groups = step.groups;
      for (size_t p = 0; p < in.size(); ++p) {
        c.ranks.push_back(mesh.ranks()[p]);
        c.input_shapes.push_back(in[p].local_shape);
        c.output_shapes.push_back(out[p].local_shape);
        c.bytes_sent.push_back(step.bytes_sent_per_rank[p]);
        c.bytes_received.push_back(step.bytes_received_per_rank[p]);
        if (options.measured)
          c.time_us.push_back(step.est_us * (1.0 + static_cast<double>(mesh.ranks()[p] % 7) / 20));
      }
      s.collectives.push_back(std::move(c));
    }
    s.ranks_after = States(after);
    t.steps.push_back(std::move(s));
    before = after;
  }
  t.final_state.spec = before;
  t.final_state.ranks = States(before);
  return t;
}

}  // namespace dtsim::viewer
