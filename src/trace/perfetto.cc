// Trace-event JSON for Perfetto / chrome://tracing (see include/dtsim/trace/perfetto.h).
#include "dtsim/trace/perfetto.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

constexpr const char* kCategory = "dtsim";
constexpr int64_t kStepsTid = 1;        // the thread of step slices
constexpr int64_t kCollectivesTid = 2;  // the thread of collective slices
constexpr int64_t kEventsTid = 3;       // a recording's run events (ops and collectives)

}  // namespace

std::string BackendLabel(const Trace& trace) { return BackendLabel(trace.meta); }

std::string BackendLabel(const TraceMeta& meta) {
  return meta.backend == "local" ? "simulated (local)" : StrCat("real (", meta.backend, ")");
}

nlohmann::json PerfettoGroups::Ref(const std::vector<int64_t>& group) {
  if (group.size() <= kInlineGroupRanks) return group;
  return StrCat(Id(group), " (", group.size(), " ranks)");
}

std::string PerfettoGroups::Name(const std::vector<int64_t>& group) {
  return group.size() <= kInlineGroupRanks ? IntListToString(group) : Id(group);
}

std::string PerfettoGroups::Id(const std::vector<int64_t>& group) {
  auto [it, added] = ids_.try_emplace(group);
  if (added) {
    it->second = StrCat("g", ids_.size() - 1);
    table_[it->second] = group;
  }
  return it->second;
}

nlohmann::json ToPerfetto(const std::vector<PerfettoSource>& sources) {
  PerfettoGroups groups;
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json sources_json = nlohmann::json::array();
  int64_t flow_id = 1;
  // Times are kept in whole nanoseconds and written in microseconds with at most 3 decimals, so a
  // reader converts them back exactly; consecutive slices on one track are 1 ns apart, so no reader
  // sees them overlap.
  auto ns = [](double us) {
    return static_cast<int64_t>(std::llround(std::max(0.0, us) * 1000.0));
  };
  auto us = [](int64_t t) { return static_cast<double>(t) / 1000.0; };
  for (size_t t = 0; t < sources.size(); ++t) {
    const Trace& trace = *sources[t].trace;
    const std::string& label = sources[t].label;
    const DeviceMesh& mesh = trace.initial.spec.mesh();
    const int64_t base = static_cast<int64_t>(t) * kPerfettoPidStride;
    auto pid_of = [&](int64_t rank) { return base + rank + 1; };
    sources_json.push_back({{"label", label},
                            {"backend", trace.meta.backend},
                            {"argv", trace.meta.argv},
                            {"from", trace.initial.spec.ToString()},
                            {"to", ToString(trace.final_state.spec.placements())}});

    // Processes and threads: every rank of the mesh; collective rows of ranks outside it get a
    // process too.
    std::vector<int64_t> ranks = mesh.ranks();
    for (const TraceStep& step : trace.steps) {
      for (const CollectiveEvent& c : step.collectives)
        ranks.insert(ranks.end(), c.ranks.begin(), c.ranks.end());
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    for (int64_t rank : ranks) {
      const auto coordinate = mesh.FindCoordinate(rank);
      const std::string name =
          StrCat(label.empty() ? "" : label + ": ", "rank ", rank,
                 coordinate ? " " + CoordinateText(mesh, *coordinate) : " (not in the mesh)");
      events.push_back({{"ph", "M"},
                        {"name", "process_name"},
                        {"pid", pid_of(rank)},
                        {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"},
                        {"name", "process_sort_index"},
                        {"pid", pid_of(rank)},
                        {"args", {{"sort_index", base + rank}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid_of(rank)},
                        {"tid", kStepsTid},
                        {"args", {{"name", "steps"}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid_of(rank)},
                        {"tid", kCollectivesTid},
                        {"args", {{"name", "collectives"}}}});
    }

    int64_t step_start = 0;
    for (size_t s = 0; s < trace.steps.size(); ++s) {
      const TraceStep& step = trace.steps[s];
      const std::string dim =
          step.mesh_dim_name.empty() ? mesh.DimLabel(step.plan.mesh_dim) : step.mesh_dim_name;
      const std::string mesh_dim = StrCat(dim, "(", step.plan.mesh_dim, ")");
      const std::string transition =
          StrCat(step.plan.from.ToString(), " -> ", step.plan.to.ToString());
      const std::string step_name = StrCat("step ", s + 1, ": ", mesh_dim, " ", transition);
      const size_t nc = step.collectives.size();
      // Each rank's collectives one after another from the step's start: measured time, or the
      // estimate's share.
      struct Slice {
        int64_t ts, dur;
      };
      std::map<int64_t, int64_t> rank_end;  // rank -> end of its last collective in this step
      std::vector<std::map<int64_t, Slice>> slices(nc);  // [collective] rank -> slice
      for (size_t k = 0; k < nc; ++k) {
        const CollectiveEvent& c = step.collectives[k];
        const bool measured = c.time_us.size() == c.ranks.size() && !c.ranks.empty();
        for (size_t i = 0; i < c.ranks.size(); ++i) {
          const int64_t rank = c.ranks[i];
          const int64_t dur =
              ns(measured ? c.time_us[i] : step.plan.est_us / static_cast<double>(nc));
          auto it = rank_end.find(rank);
          const int64_t ts = it == rank_end.end() ? step_start : it->second + 1;
          slices[k][rank] = Slice{ts, dur};
          rank_end[rank] = ts + dur;
        }
      }
      int64_t step_end = step_start + (nc == 0 ? ns(step.plan.est_us) : 0);
      for (const auto& [rank, end] : rank_end) step_end = std::max(step_end, end);

      // The step slice on every rank.
      for (int64_t rank : ranks) {
        events.push_back({{"ph", "X"},
                          {"name", step_name},
                          {"cat", kCategory},
                          {"pid", pid_of(rank)},
                          {"tid", kStepsTid},
                          {"ts", us(step_start)},
                          {"dur", us(step_end - step_start)},
                          {"args",
                           {{"step", s + 1},
                            {"mesh_dim", mesh_dim},
                            {"transition", transition},
                            {"collective", std::string(ToString(step.plan.collective))},
                            {"placements_after", ToString(step.placements_after)},
                            {"est_us", step.plan.est_us}}}});
      }
      // The collective slices and their flows.
      for (size_t k = 0; k < nc; ++k) {
        const CollectiveEvent& c = step.collectives[k];
        const bool measured = c.time_us.size() == c.ranks.size() && !c.ranks.empty();
        const std::string op(ToString(c.kind));
        std::map<int64_t, size_t> group_of;
        std::vector<nlohmann::json> group_refs;
        for (size_t g = 0; g < c.groups.size(); ++g) {
          for (int64_t r : c.groups[g]) group_of[r] = g;
          group_refs.push_back(groups.Ref(c.groups[g]));
        }
        for (size_t i = 0; i < c.ranks.size(); ++i) {
          const int64_t rank = c.ranks[i];
          const Slice& sl = slices[k].at(rank);
          auto g = group_of.find(rank);
          nlohmann::json args = {
              {"step", s + 1},
              {"mesh_dim", mesh_dim},
              {"transition", transition},
              {"group", g == group_of.end() ? nlohmann::json::array() : group_refs[g->second]},
              {"bytes_sent", c.bytes_sent[i]},
              {"bytes_received", c.bytes_received[i]},
              {"input_shape", c.input_shapes[i]},
              {"output_shape", c.output_shapes[i]},
              {"time_us", us(sl.dur)},
              {"time_source", measured ? "measured" : "estimated (cost model)"}};
          events.push_back({{"ph", "X"},
                            {"name", op},
                            {"cat", kCategory},
                            {"pid", pid_of(rank)},
                            {"tid", kCollectivesTid},
                            {"ts", us(sl.ts)},
                            {"dur", us(sl.dur)},
                            {"args", std::move(args)}});
        }
        // Flows: one chain per group through its ranks (in group order), each point inside its
        // collective slice.
        for (const auto& group : c.groups) {
          std::vector<int64_t> members;
          for (int64_t r : group) {
            if (slices[k].count(r)) members.push_back(r);
          }
          if (members.size() < 2) continue;
          const std::string flow_name = StrCat(op, " group ", groups.Name(group));
          for (size_t m = 0; m < members.size(); ++m) {
            const Slice& sl = slices[k].at(members[m]);
            const char* ph = m == 0 ? "s" : (m + 1 == members.size() ? "f" : "t");
            nlohmann::json e = {{"ph", ph},
                                {"name", flow_name},
                                {"cat", kCategory},
                                {"id", flow_id},
                                {"pid", pid_of(members[m])},
                                {"tid", kCollectivesTid},
                                {"ts", us(sl.ts + sl.dur / 2)}};
            if (m + 1 == members.size()) e["bp"] = "e";
            events.push_back(std::move(e));
          }
          ++flow_id;
        }
      }
      step_start = step_end + 1;
    }
  }
  return {{"traceEvents", std::move(events)},
          {"otherData",
           {{"generator", "dtsim export --format perfetto"},
            {"traces", std::move(sources_json)},
            {"groups", groups.Table()}}}};
}

std::string RecordingToPerfetto(const Recording& recording) {
  PerfettoGroups groups;
  // Each event is written as soon as it is made: a DOM of every rank's events would cost far more
  // than their text.
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const nlohmann::json& event) {
    if (!first) out += ',';
    first = false;
    out += SafeDump(event);
  };
  auto ns = [](double us) {
    return static_cast<int64_t>(std::llround(std::min(1e15, std::max(0.0, us)) * 1000.0));
  };
  auto us = [](int64_t t) { return static_cast<double>(t) / 1000.0; };
  std::map<int64_t, int64_t> next_free;  // rank -> first free nanosecond on its track
  std::set<int64_t> named;               // ranks whose process is named
  auto name_rank = [&](int64_t rank) {
    if (!named.insert(rank).second) return;
    emit({{"ph", "M"},
          {"name", "process_name"},
          {"pid", rank + 1},
          {"args", {{"name", StrCat("rank ", rank, " (", recording.backend, ")")}}}});
    emit({{"ph", "M"},
          {"name", "process_sort_index"},
          {"pid", rank + 1},
          {"args", {{"sort_index", rank}}}});
  };
  for (const RedistributionEvent& r : recording.redistributions) {
    // Per collective: each rank's position in its lists and its group's ref, found once (linear
    // in ranks) rather than by a search per rank.
    struct Member {
      size_t position;
      const nlohmann::json* group;
    };
    std::vector<std::map<int64_t, Member>> members(r.collectives.size());
    std::vector<std::vector<nlohmann::json>> refs(r.collectives.size());
    for (size_t k = 0; k < r.collectives.size(); ++k) {
      const CollectiveEvent& c = r.collectives[k];
      for (const auto& g : c.groups) refs[k].push_back(groups.Ref(g));
      std::map<int64_t, size_t> group_of;
      for (size_t g = 0; g < c.groups.size(); ++g) {
        for (int64_t rank : c.groups[g]) group_of[rank] = g;
      }
      for (size_t i = 0; i < c.ranks.size(); ++i) {
        const auto g = group_of.find(c.ranks[i]);
        members[k][c.ranks[i]] = {i, g == group_of.end() ? nullptr : &refs[k][g->second]};
      }
    }
    for (size_t i = 0; i < r.ranks_before().size(); ++i) {
      const int64_t rank = r.ranks_before()[i].rank;
      if (!next_free.count(rank)) {
        next_free[rank] = 0;
        name_rank(rank);
        emit({{"ph", "M"},
              {"name", "thread_name"},
              {"pid", rank + 1},
              {"tid", kStepsTid},
              {"args", {{"name", "redistributions"}}}});
      }
      // Measured start when recorded, never before the end of the previous slice of the track.
      const int64_t start =
          std::max(next_free[rank], r.start_us.empty() ? int64_t{0} : ns(r.start_us[i]));
      const int64_t dur = std::max<int64_t>(1, ns(r.time_us[i]));
      next_free[rank] = start + dur + 1;
      nlohmann::json collectives = nlohmann::json::array();
      for (size_t j = 0; j < r.collectives.size(); ++j) {
        const CollectiveEvent& c = r.collectives[j];
        const auto at = members[j].find(rank);
        if (at == members[j].end()) continue;
        const size_t k = at->second.position;
        collectives.push_back(
            {{"op", ToString(c.kind)},
             {"group", at->second.group ? *at->second.group : nlohmann::json(nullptr)},
             {"input_bytes", c.input_bytes[k]},
             {"output_bytes", c.output_bytes[k]}});
      }
      const std::string what = r.call == "implicit" ? r.op : r.call;
      emit({{"ph", "X"},
            {"cat", kCategory},
            {"name", StrCat("#", r.index, " ", what, " ", ToString(r.src().placements()), " -> ",
                            ToString(r.dst().placements()))},
            {"pid", rank + 1},
            {"tid", kStepsTid},
            {"ts", us(start)},
            {"dur", us(dur)},
            {"args",
             {{"index", r.index},
              {"call", r.call},
              {"op", r.op},
              {"arg", r.arg ? nlohmann::json(*r.arg) : nlohmann::json(nullptr)},
              {"mesh", r.src().mesh().ToString()},
              {"shape", r.src().shape()},
              {"dtype", ToString(r.src().dtype())},
              {"from", ToString(r.src().placements())},
              {"to", ToString(r.dst().placements())},
              {"collectives", collectives},
              {"time_us", r.time_us[i]}}}});
    }
  }
  // Every rank's run events on a track of their own: at their recorded time where the recorder
  // measured one (each rank's own clock since its recording began), else right after the previous
  // event; never overlapping the previous one.
  if (recording.events) {
    for (const auto& [rank, events] : *recording.events) {
      name_rank(rank);
      emit({{"ph", "M"},
            {"name", "thread_name"},
            {"pid", rank + 1},
            {"tid", kEventsTid},
            {"args", {{"name", "ops and collectives"}}}});
      int64_t free = 0;
      for (size_t i = 0; i < events.size(); ++i) {
        const RunEvent& e = events[i];
        const int64_t start = std::max(free, e.t_us ? ns(*e.t_us) : free);
        const int64_t dur = std::max<int64_t>(1, e.dur_us ? ns(*e.dur_us) : 1);
        free = start + dur + 1;
        nlohmann::json args = {
            {"index", i},
            {"module", e.module},
            {"pass", e.pass},
            {"line", e.line},
            {"t_us", e.t_us ? nlohmann::json(*e.t_us) : nlohmann::json(nullptr)},
            {"dur_us", e.dur_us ? nlohmann::json(*e.dur_us) : nlohmann::json(nullptr)}};
        if (e.kind == RunEvent::Kind::kOp) {
          args["args"] = e.args;
          args["results"] = e.results;
        } else {
          args["group"] = groups.Ref(e.group);
          if (!e.state.empty()) args["state"] = e.state;
        }
        emit({{"ph", "X"},
              {"cat", kCategory},
              {"name", e.kind == RunEvent::Kind::kOp ? e.op : StrCat("collective ", e.op)},
              {"pid", rank + 1},
              {"tid", kEventsTid},
              {"ts", us(start)},
              {"dur", us(dur)},
              {"args", std::move(args)}});
      }
    }
  }
  // Every rank's memory at its module boundaries as a counter of its own, at the samples' times (a
  // sample without one at the previous sample's).
  if (recording.memory) {
    for (const auto& [rank, samples] : *recording.memory) {
      name_rank(rank);
      double t = 0;
      for (const MemorySample& m : samples) {
        if (m.t_us) t = *m.t_us;
        emit({{"ph", "C"},
              {"name", "memory (bytes)"},
              {"pid", rank + 1},
              {"ts", us(ns(t))},
              {"args", {{"bytes", m.bytes}}}});
      }
    }
  }
  out += "],\"otherData\":";
  out += SafeDump({{"generator", "dtsim export --format perfetto"},
                   {"recording",
                    {{"backend", recording.backend},
                     {"torch_version", recording.torch_version},
                     {"argv", recording.argv}}},
                   {"groups", groups.Table()}});
  out += "}\n";
  return out;
}

}  // namespace dtsim
