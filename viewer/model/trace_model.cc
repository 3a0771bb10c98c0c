// The viewer's trace model (see trace_model.h).
#include "trace_model.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "dtsim/layout/error.h"

namespace dtsim::viewer {
namespace {

// Ranks up to this many times the world size are indexed densely; others through a search.
constexpr int64_t kDenseRankFactor = 4;

std::string PlacementText(const Placements& p) { return ToString(p); }

// "dp(0) S(0) -> R  all_gather"
std::string StepText(const TraceStep& step, const DeviceMesh& mesh) {
  // Named meshes: "dp(0)"; unnamed ones: "dim 0".
  const std::string dim =
      mesh.names().empty() ? StrCat("dim ", step.plan.mesh_dim)
                           : StrCat(step.mesh_dim_name.empty() ? mesh.DimLabel(step.plan.mesh_dim)
                                                               : step.mesh_dim_name,
                                    "(", step.plan.mesh_dim, ")");
  return StrCat(dim, " ", step.plan.from.ToString(), " -> ", step.plan.to.ToString(), "  ",
                ToString(step.plan.collective));
}

std::string StepTitle(const TraceStep& step, size_t index, const DeviceMesh& mesh) {
  return StrCat("step ", index + 1, ": ", StepText(step, mesh));
}

}  // namespace

TraceModel TraceModel::Load(const std::string& path) { return FromTrace(ReadTrace(path), path); }

TraceModel TraceModel::FromTrace(Trace trace, std::string source) {
  TraceModel m;
  m.source_ = std::move(source);
  m.trace_ = std::move(trace);
  const DeviceMesh& mesh = m.trace_.initial.spec.mesh();
  const DeviceMesh& final_mesh = m.trace_.final_state.spec.mesh();
  if (final_mesh != mesh) {
    throw InputError("trace", StrCat("final.spec: mesh ", final_mesh.ToString(),
                                     " differs from the initial mesh ", mesh.ToString(),
                                     " (a redistribution keeps its mesh)"));
  }
  m.Index();
  return m;
}

TraceModel TraceModel::FromSpec(const DTensorSpec& spec) {
  Trace t;
  t.meta.command = "layout";
  t.meta.world_size = spec.mesh().size();
  t.meta.data = false;
  t.initial.spec = spec;
  t.final_state.spec = spec;
  const std::vector<RankLayout> layouts = spec.AllLayouts();
  for (const RankLayout& l : layouts) {
    RankState s{l.rank, l.coordinate, l.local_shape, l.global_offset, std::nullopt};
    t.initial.ranks.push_back(s);
  }
  std::sort(t.initial.ranks.begin(), t.initial.ranks.end(),
            [](const RankState& a, const RankState& b) { return a.rank < b.rank; });
  TraceModel m;
  m.source_ = "layout";
  m.trace_ = std::move(t);
  m.Index();
  // A single frame: the layout.
  m.frames_.resize(1);
  m.frames_[0].label = "layout";
  m.frames_[0].title = StrCat("layout: ", spec.ToString());
  return m;
}

void TraceModel::Index() {
  const DeviceMesh& mesh = trace_.initial.spec.mesh();
  const int64_t n = mesh.size();
  // rank → position: dense when ranks are small (the usual 0..N-1), else a sorted table searched by
  // FindPosition.
  int64_t max_rank = 0;
  for (int64_t r : mesh.ranks()) max_rank = std::max(max_rank, r);
  if (max_rank < kDenseRankFactor * n + 64) {
    rank_to_position_.assign(max_rank + 1, -1);
    for (int64_t p = 0; p < n; ++p) rank_to_position_[mesh.ranks()[p]] = p;
  }

  auto make_frame = [&](Frame::Kind kind, int64_t step, std::string label, std::string title,
                        const DTensorSpec& spec, const std::vector<RankState>& rows) {
    Frame f;
    f.kind = kind;
    f.step = step;
    f.label = std::move(label);
    f.title = std::move(title);
    f.spec = spec;
    f.layouts = spec.AllLayouts();
    f.rows.assign(n, -1);
    f.anomalies.assign(n, 0);
    for (size_t i = 0; i < rows.size(); ++i) {
      auto pos = FindPosition(rows[i].rank);
      if (!pos) continue;  // a row for a rank outside the mesh: nothing to draw it on
      f.rows[*pos] = static_cast<int32_t>(i);
      const RankLayout& l = f.layouts[*pos];
      bool anomaly = rows[i].local_shape != l.local_shape;
      if (!rows[i].global_offset.empty() && rows[i].global_offset != l.global_offset)
        anomaly = true;
      if (anomaly) {
        f.anomalies[*pos] = 1;
        ++f.num_anomalies;
      }
    }
    f.bytes_sent.assign(n, 0);
    f.bytes_received.assign(n, 0);
    f.group_of.assign(n, -1);
    return f;
  };

  frames_.clear();
  frames_.push_back(make_frame(Frame::Kind::kInitial, -1, "initial",
                               StrCat("initial: ", PlacementText(trace_.initial.spec.placements())),
                               trace_.initial.spec, trace_.initial.ranks));
  measured_ = false;
  for (size_t s = 0; s < trace_.steps.size(); ++s) {
    const TraceStep& step = trace_.steps[s];
    const DTensorSpec spec = DTensorSpec::Create(
        mesh, step.placements_after, trace_.initial.spec.shape(), trace_.initial.spec.dtype());
    Frame f = make_frame(Frame::Kind::kAfterStep, static_cast<int64_t>(s), StrCat("step ", s + 1),
                         StepTitle(step, s, mesh), spec, step.ranks_after);
    f.est_us = step.plan.est_us;
    if (!step.collectives.empty()) {
      f.bytes_observed = true;
      bool timed = true;
      std::vector<double> time(n, 0.0);
      for (const CollectiveEvent& c : step.collectives) {
        if (c.time_us.size() != c.ranks.size()) timed = false;
        for (size_t i = 0; i < c.ranks.size(); ++i) {
          auto pos = FindPosition(c.ranks[i]);
          if (!pos) continue;
          f.bytes_sent[*pos] += c.bytes_sent[i];
          f.bytes_received[*pos] += c.bytes_received[i];
          if (i < c.time_us.size()) time[*pos] += c.time_us[i];
        }
        if (!c.time_us.empty()) measured_ = true;
      }
      if (timed) f.time_us = std::move(time);
      f.groups = step.collectives.front().groups;
    } else {
      // No collective rows (a local step, or a trace written without them): the plan's numbers.
      for (int64_t p = 0; p < n; ++p) {
        if (p < static_cast<int64_t>(step.plan.bytes_sent_per_rank.size())) {
          f.bytes_sent[p] = step.plan.bytes_sent_per_rank[p];
        }
        if (p < static_cast<int64_t>(step.plan.bytes_received_per_rank.size())) {
          f.bytes_received[p] = step.plan.bytes_received_per_rank[p];
        }
      }
      f.groups = step.plan.groups;
    }
    for (size_t g = 0; g < f.groups.size(); ++g) {
      for (int64_t r : f.groups[g]) {
        if (auto pos = FindPosition(r)) f.group_of[*pos] = static_cast<int32_t>(g);
      }
    }
    frames_.push_back(std::move(f));
  }
  frames_.push_back(
      make_frame(Frame::Kind::kFinal, -1, "final",
                 StrCat("final: ", PlacementText(trace_.final_state.spec.placements()),
                        trace_.ok ? (*trace_.ok ? "  (verdict OK)" : "  (verdict MISMATCH)") : ""),
                 trace_.final_state.spec, trace_.final_state.ranks));
}

const Frame& TraceModel::frame(int64_t index) const {
  DTSIM_CHECK(index >= 0 && index < num_frames(), "frame ", index, " of ", num_frames());
  return frames_[index];
}

std::optional<int64_t> TraceModel::FindPosition(int64_t rank) const {
  if (!rank_to_position_.empty()) {
    if (rank < 0 || rank >= static_cast<int64_t>(rank_to_position_.size())) return std::nullopt;
    const int64_t p = rank_to_position_[rank];
    return p < 0 ? std::nullopt : std::optional<int64_t>(p);
  }
  const auto& ranks = mesh().ranks();
  for (size_t p = 0; p < ranks.size(); ++p) {
    if (ranks[p] == rank) return static_cast<int64_t>(p);
  }
  return std::nullopt;
}

int64_t TraceModel::GetPosition(int64_t rank, const std::string& field) const {
  auto p = FindPosition(rank);
  if (!p) {
    throw InputError(field, StrCat("rank ", rank, " is not in ", mesh().ToString(), " (",
                                   world_size(), " ranks)"));
  }
  return *p;
}

std::vector<int64_t> TraceModel::CoordinateAt(int64_t position) const {
  const auto& shape = mesh().shape();
  std::vector<int64_t> c(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    c[d] = position % shape[d];
    position /= shape[d];
  }
  return c;
}

const RankState* TraceModel::RowAt(int64_t frame_index, int64_t position) const {
  const Frame& f = frame(frame_index);
  const int32_t row = f.rows[position];
  if (row < 0) return nullptr;
  switch (f.kind) {
    case Frame::Kind::kInitial:
      return &trace_.initial.ranks[row];
    case Frame::Kind::kAfterStep:
      return &trace_.steps[f.step].ranks_after[row];
    case Frame::Kind::kFinal:
      return &trace_.final_state.ranks[row];
  }
  return nullptr;
}

int64_t TraceModel::ParseFrame(const std::string& text, const std::string& field) const {
  const int64_t steps = num_frames() - 2;
  const std::string range =
      StrCat("0 = initial, 1..", steps, " = after that step, ", steps + 1, " = final");
  if (text == "initial") return 0;
  if (text == "final" || text == "last") return num_frames() - 1;
  int64_t k = -1;
  size_t used = 0;
  try {
    k = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw InputError(field,
                     StrCat("'", text, "' is not a step number (", range, ", or initial / final)"));
  }
  if (k < 0 || k >= num_frames()) {
    throw InputError(field, StrCat("step ", k, " does not exist: the trace has ", steps, " step",
                                   steps == 1 ? "" : "s", " (", range, ")"));
  }
  return k;
}

// ---- two traces ----

void CheckSameRedistribution(const TraceModel& a, const TraceModel& b) {
  const DTensorSpec& x = a.trace().initial.spec;
  const DTensorSpec& y = b.trace().initial.spec;
  std::string why;
  if (x.mesh() != y.mesh()) {
    why = StrCat("the meshes differ: ", x.mesh().ToString(), " vs ", y.mesh().ToString());
  } else if (x.shape() != y.shape() || x.dtype() != y.dtype()) {
    why = StrCat("the tensors differ: shape ", IntListToString(x.shape()), " ", ToString(x.dtype()),
                 " vs ", IntListToString(y.shape()), " ", ToString(y.dtype()));
  } else if (x.placements() != y.placements()) {
    why = StrCat("they start from different placements: ", ToString(x.placements()), " vs ",
                 ToString(y.placements()));
  } else if (a.trace().final_state.spec.placements() != b.trace().final_state.spec.placements()) {
    why = StrCat(
        "they end in different placements: ", ToString(a.trace().final_state.spec.placements()),
        " vs ", ToString(b.trace().final_state.spec.placements()));
  }
  if (!why.empty()) {
    throw InputError("traces", StrCat("'", a.source(), "' and '", b.source(),
                                      "' are not traces of the same redistribution: ", why));
  }
}

int64_t FrameOf(const TraceDifference& d, int64_t num_frames) {
  switch (d.phase) {
    case TraceDifference::Phase::kInitial:
      return 0;
    case TraceDifference::Phase::kStep:
      return std::clamp<int64_t>(d.step + 1, 0, num_frames - 1);
    case TraceDifference::Phase::kFinal:
      return num_frames - 1;
  }
  return 0;
}

std::string Where(const TraceModel& model, const TraceDifference& d) {
  switch (d.phase) {
    case TraceDifference::Phase::kInitial:
      return "initial";
    case TraceDifference::Phase::kFinal:
      return "final";
    case TraceDifference::Phase::kStep:
      break;
  }
  const auto& steps = model.trace().steps;
  if (d.step < 0 || d.step >= static_cast<int64_t>(steps.size()))
    return StrCat("after step ", d.step);
  const TraceStep& step = steps[d.step];
  std::string out = StrCat("step ", d.step + 1, " (", StepText(step, model.mesh()), ")");
  if (d.collective >= 0 && d.collective < static_cast<int64_t>(step.collectives.size())) {
    out += StrCat(", collective ", d.collective, " (",
                  ToString(step.collectives[d.collective].kind), ")");
  }
  return out;
}

std::vector<const TraceDifference*> TraceDiff::At(int64_t frame, int64_t num_frames) const {
  std::vector<const TraceDifference*> out;
  for (const TraceDifference& d : differences) {
    if (FrameOf(d, num_frames) == frame) out.push_back(&d);
  }
  return out;
}

namespace {

// Lays out.differences onto `a`'s frames and positions.
void LayOnFrames(const TraceModel& a, TraceDiff& out) {
  const int64_t frames = a.num_frames();
  const int64_t n = a.world_size();
  out.differs.assign(frames, std::vector<uint8_t>(n, 0));
  out.frame_differs.assign(frames, 0);
  out.differs_anywhere.assign(n, 0);
  for (const TraceDifference& d : out.differences) {
    const int64_t f = FrameOf(d, frames);
    out.frame_differs[f] = 1;
    if (!out.first_frame) out.first_frame = f;
    for (int64_t r : d.ranks) {
      if (auto p = a.FindPosition(r)) {
        out.differs[f][*p] = 1;
        out.differs_anywhere[*p] = 1;
      }
    }
  }
  out.num_ranks_differing = std::count(out.differs_anywhere.begin(), out.differs_anywhere.end(), 1);
}

}  // namespace

TraceDiff DiffOfOne(const TraceModel& model, std::vector<TraceDifference> differences) {
  TraceDiff out;
  out.differences = std::move(differences);
  LayOnFrames(model, out);
  out.hashes_compared = model.has_hashes();
  if (out.differences.empty()) {
    out.summary = "consistent: every replica's hash agrees with its replicas'";
  } else {
    const TraceDifference& first = out.differences.front();
    out.summary = StrCat("inconsistent: first at ", Where(model, first), ": ", first.what, "; ",
                         out.num_ranks_differing, " of ", model.world_size(), " ranks differ");
  }
  return out;
}

TraceDiff DiffModels(const TraceModel& a, const TraceModel& b) {
  CheckSameRedistribution(a, b);
  TraceDiff out;
  // Every difference: DiffTraces groups ranks per place and field, so the count is bounded by
  // places x fields.
  out.differences = DiffTraces(a.trace(), b.trace(), static_cast<size_t>(-1));
  LayOnFrames(a, out);
  const int64_t n = a.world_size();
  out.hashes_compared = a.has_hashes() && b.has_hashes();
  const std::string hashes = out.hashes_compared
                                 ? "shard hashes"
                                 : "shapes (no hashes compared: a metadata-only trace has none)";
  if (out.differences.empty()) {
    out.summary =
        StrCat("agree: same plan, collectives and ", hashes, " on all ", n,
               " ranks at every step (initial, ", a.trace().steps.size(), " steps, final)");
  } else {
    const TraceDifference& first = out.differences.front();
    out.summary =
        StrCat("differ: first at ", Where(a, first), ": ", first.what, "; ",
               out.num_ranks_differing, " of ", n, " ranks differ; ", out.differences.size(),
               " difference", out.differences.size() == 1 ? "" : "s", " in all",
               out.hashes_compared ? "" : " (no hashes compared: a metadata-only trace has none)");
  }
  return out;
}

}  // namespace dtsim::viewer
