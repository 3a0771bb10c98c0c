// Recordings as traces (see recording_view.h).
#include "recording_view.h"

#include <algorithm>

#include "dtsim/layout/error.h"
#include "dtsim/layout/plan_for.h"

namespace dtsim::viewer {
namespace {

// `spec` (on a submesh over root dims `submesh_dims`) as the spec on the root mesh: its placements
// on those dims, Replicate on the others.
DTensorSpec OnRoot(const DTensorSpec& spec, const std::vector<std::string>& submesh_dims) {
  if (submesh_dims.empty()) return spec;
  const DeviceMesh& root = spec.mesh().root();
  Placements placements(root.ndim(), Placement::Replicate());
  for (size_t i = 0; i < submesh_dims.size() && i < spec.placements().size(); ++i) {
    placements[root.GetDim(submesh_dims[i], "submesh")] = spec.placements()[i];
  }
  return DTensorSpec::Create(root, placements, spec.shape(), spec.dtype());
}

// The recorded rows, with coordinate and offset from the layout rule where the recorder left them
// out (it records local shapes and hashes).
std::vector<RankState> Rows(const DTensorSpec& spec, const std::vector<RankState>& recorded) {
  std::vector<RankState> rows = recorded;
  for (RankState& r : rows) {
    if (r.coordinate.empty() || r.global_offset.empty()) {
      const RankLayout l = spec.LayoutOfRank(r.rank);
      if (r.coordinate.empty()) r.coordinate = l.coordinate;
      if (r.global_offset.empty()) r.global_offset = l.global_offset;
    }
  }
  std::sort(rows.begin(), rows.end(),
            [](const RankState& a, const RankState& b) { return a.rank < b.rank; });
  return rows;
}

// A recorded collective as a trace step shows it: a recording holds the buffers each rank handed
// in and got back, not the wire bytes, so the bytes columns show those.
CollectiveEvent FromRecorded(CollectiveEvent c) {
  if (c.bytes_sent.empty()) c.bytes_sent = c.input_bytes;
  if (c.bytes_received.empty()) c.bytes_received = c.output_bytes;
  return c;
}

}  // namespace

std::vector<RecordedView> ViewsOfRecording(const Recording& rec) {
  std::vector<RecordedView> out;
  for (const RedistributionEvent& r : rec.redistributions) {
    RecordedView v;
    const DTensorSpec src = OnRoot(r.src(), r.submesh_dims);
    const DTensorSpec dst = OnRoot(r.dst(), r.submesh_dims);
    Plan plan;
    try {
      plan = PlanFor(src, WithoutNewPartials(src.placements(), dst.placements()));
    } catch (const InputError& e) {
      v.collectives_note = StrCat("dtsim has no plan for it: ", e.what());
    }
    Trace& t = v.trace;
    t.meta.tool = "dtsim.record";
    t.meta.command = "record";
    t.meta.backend = rec.backend;
    t.meta.world_size = src.mesh().size();
    t.meta.planner = ToString(PlannerKind::kGreedy);
    t.meta.data = !r.ranks_before().empty() && r.ranks_before().front().hash.has_value();
    const std::string what = StrCat("#", r.index, " ", CallText(r));
    t.meta.argv = StrCat(rec.argv, "  (redistribution ", what, ")");
    t.initial.spec = src;
    t.initial.ranks = Rows(src, r.ranks_before());
    t.final_state.spec = dst;
    t.final_state.ranks = Rows(dst, r.ranks_after());
    // The recorded collectives go on the steps that communicate, in order, when there are as many.
    size_t moving = 0;
    for (const PlanStep& s : plan.steps) moving += s.communicates() ? 1 : 0;
    const bool matched = moving == r.collectives.size();
    if (!matched && v.collectives_note.empty()) {
      v.collectives_note = StrCat("the run issued ", r.collectives.size(), " collective",
                                  r.collectives.size() == 1 ? "" : "s", ", dtsim plans ", moving,
                                  ": the steps show dtsim's plan (dtsim replay compares them)");
    }
    size_t k = 0;
    std::string kinds;
    for (const PlanStep& s : plan.steps) {
      TraceStep step;
      step.plan = s;
      step.mesh_dim_name = src.mesh().DimLabel(s.mesh_dim);
      step.placements_after = s.placements_after;
      if (s.communicates() && matched) step.collectives.push_back(FromRecorded(r.collectives[k++]));
      if (s.communicates())
        kinds += (kinds.empty() ? "" : ", ") + std::string(ToString(s.collective));
      t.steps.push_back(std::move(step));
    }
    v.replica_mismatches = ReplicaMismatches(r);
    v.title = StrCat(what, ": ", ToString(src.placements()), " -> ", ToString(dst.placements()),
                     kinds.empty() ? "" : " (" + kinds + ")");
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace dtsim::viewer
