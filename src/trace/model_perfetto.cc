// Model traces as trace-event JSON for Perfetto / chrome://tracing (see
// include/dtsim/trace/model_perfetto.h).
#include "dtsim/trace/model_perfetto.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "dtsim/layout/error.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/trace/perfetto.h"

namespace dtsim {
namespace {

constexpr int64_t kModelTid = 1;

// One slice of the layout, the same on every rank; per-rank args are filled in when written.
struct Slice {
  int64_t ts = 0, end = -1;  // nanoseconds
  int depth = 0;
  std::string name;
  const char* cat = "";
  nlohmann::json args = nlohmann::json::object();
  int64_t event = -1;   // -1: a phase slice
  int collective = -1;  // a collective: its index in the event's collectives
  // Tensors whose placements, shape and this rank's hash go into the args: (key, event).
  std::vector<std::pair<std::string, int64_t>> tensors;
  bool counts = false;  // a module: `own` and `total` are its collectives
  CommCounts own, total;
};

int64_t Ns(double us) {
  return static_cast<int64_t>(std::llround(std::min(1e15, std::max(0.0, us)) * 1000.0));
}
double Us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// The slices of one trace (module_perfetto.h's mapping) with slices at most `depth_bound` deep;
// `*max_depth` is the deepest one laid out.
std::vector<Slice> Layout(const ModelTrace& trace, int depth_bound, int* max_depth) {
  const std::vector<RunEvent>& events = trace.events;
  // The forward tree: each module's parent (the call open when its first call began).
  std::unordered_map<std::string, std::string> parent_of;
  {
    std::vector<std::string> open;
    for (const RunEvent& e : events) {
      if (e.kind == RunEvent::Kind::kModuleBegin) {
        parent_of.emplace(e.module, open.empty() ? std::string() : open.back());
        open.push_back(e.module);
      } else if (e.kind == RunEvent::Kind::kModuleEnd && !open.empty()) {
        open.pop_back();
      }
    }
  }
  auto is_ancestor = [&](const std::string& a, const std::string& of) {
    std::string m = of;
    for (size_t hops = 0; hops < parent_of.size() + 1; ++hops) {
      const auto it = parent_of.find(m);
      if (it == parent_of.end() || it->second.empty()) return false;
      if (it->second == a) return true;
      m = it->second;
    }
    return false;
  };
  auto inset = [](int depth) { return static_cast<int64_t>(depth) + 1; };
  const int64_t base_stride = 2 * (static_cast<int64_t>(depth_bound) + 2);

  std::vector<Slice> slices;
  struct Open {
    size_t slice;
    std::string module;
    bool forward;
  };
  std::vector<Open> stack;
  int64_t last = 0;  // the latest boundary
  *max_depth = 0;
  auto boundary = [&](double t_us, int64_t stride) {
    last = std::max(Ns(t_us), last + stride);
    return last;
  };
  auto depth_of = [&](int d) {
    *max_depth = std::max(*max_depth, d);
    return d;
  };
  auto close = [&](size_t slice, int64_t at) {
    slices[slice].end = at - inset(slices[slice].depth);
  };
  // Leaves add their collectives to every open module: own to the innermost, total to all.
  auto count = [&](const CollectiveEvent& c) {
    for (size_t k = 0; k < stack.size(); ++k) {
      Slice& s = slices[stack[k].slice];
      s.total.Add(c);
      if (k + 1 == stack.size()) s.own.Add(c);
    }
  };
  auto tensor_args = [&](Slice& s, const std::string& key, int64_t event) {
    if (events[event].tensor) s.tensors.emplace_back(key, event);
  };
  auto collective_args = [](const CollectiveEvent& c) {
    return nlohmann::json{{"kind", std::string(ToString(c.kind))},
                          {"mesh_dim", c.mesh_dim},
                          {"groups", c.groups.size()},
                          {"bytes_sent", c.max_bytes_sent},
                          {"bytes_received", c.max_bytes_received},
                          {"est_us", c.est_us},
                          {"from", c.from},
                          {"to", c.to},
                          {"cause", c.cause},
                          {"implicit", c.implicit}};
  };

  std::optional<size_t> phase;  // the open phase slice
  auto close_phase = [&] {
    if (!phase) return;
    // A call opened at the latest boundary needs room before it closes: a boundary of its own.
    if (!stack.empty() && slices[stack.back().slice].ts > last) last += base_stride;
    while (!stack.empty()) {
      close(stack.back().slice, last);
      stack.pop_back();
    }
    close(*phase, last);
    phase.reset();
  };

  for (size_t i = 0; i < events.size(); ++i) {
    const RunEvent& e = events[i];
    const auto index = static_cast<int64_t>(i);
    if (phase && slices[*phase].name != e.pass) close_phase();
    if (!phase) {
      Slice s;
      s.ts = last + inset(0);
      s.name = e.pass;
      s.cat = "phase";
      phase = slices.size();
      slices.push_back(std::move(s));
    }
    const int64_t stride = base_stride + 2 * (static_cast<int64_t>(e.collectives.size()) + 1);
    switch (e.kind) {
      case RunEvent::Kind::kModuleBegin:
      case RunEvent::Kind::kBackwardBegin: {
        const int64_t b = boundary(e.t_us.value_or(0), stride);
        const bool forward = e.kind == RunEvent::Kind::kModuleBegin;
        if (!forward) {
          // The backward of the modules outside this one's ancestry ends here.
          while (!stack.empty() && !stack.back().forward &&
                 !is_ancestor(stack.back().module, e.module)) {
            close(stack.back().slice, b);
            stack.pop_back();
          }
        }
        Slice s;
        s.depth = depth_of(static_cast<int>(stack.size()) + 1);
        s.ts = b + inset(s.depth);
        s.name = e.module;
        s.cat = "module";
        s.event = index;
        s.counts = true;
        s.args = {{"module", e.module}, {"pass", forward ? "forward" : "backward"}};
        if (forward) {
          s.args["type"] = e.type;
          tensor_args(s, "input", index);
        } else {
          tensor_args(s, "output_gradient", index);
        }
        stack.push_back({slices.size(), e.module, forward});
        slices.push_back(std::move(s));
        break;
      }
      case RunEvent::Kind::kModuleEnd: {
        const int64_t b = boundary(e.t_us.value_or(0), stride);
        const auto it = std::find_if(stack.rbegin(), stack.rend(), [&](const Open& o) {
          return o.forward && o.module == e.module;
        });
        if (it == stack.rend()) break;  // its call was closed with its phase
        const size_t keep = static_cast<size_t>(stack.rend() - it) - 1;
        while (stack.size() > keep + 1) {
          close(stack.back().slice, b);
          stack.pop_back();
        }
        tensor_args(slices[stack.back().slice], "output", index);
        slices[stack.back().slice].args["end_event"] = index;
        close(stack.back().slice, b);
        stack.pop_back();
        break;
      }
      case RunEvent::Kind::kOp:
      case RunEvent::Kind::kCollective:
      case RunEvent::Kind::kParameter:
      case RunEvent::Kind::kLoss:
      case RunEvent::Kind::kGradient: {
        const int64_t prev = last;
        const int64_t b = boundary(e.t_us.value_or(0), stride);
        Slice s;
        s.depth = depth_of(static_cast<int>(stack.size()) + 1);
        s.ts = prev + inset(s.depth);
        s.end = b - inset(s.depth);
        s.event = index;
        s.args = {{"phase", e.pass}};
        if (!e.module.empty()) s.args["module"] = e.module;
        if (e.kind == RunEvent::Kind::kCollective) {
          const CollectiveEvent& c = e.collectives.at(0);
          s.name = StrCat(ToString(c.kind), " ", c.mesh_dim);
          s.cat = "collective";
          s.collective = 0;
          s.args.update(collective_args(c));
          count(c);
          slices.push_back(std::move(s));
          break;
        }
        if (e.kind == RunEvent::Kind::kOp) {
          s.name = e.op;
          s.cat = "op";
          s.args["op"] = e.op;
          s.args["placements"] = PlacementsText(e);
          s.args["collectives"] = e.collectives.size();
        } else if (e.kind == RunEvent::Kind::kParameter) {
          s.name = StrCat("parameter ", e.name);
          s.cat = "parameter";
          s.args["name"] = e.name;
        } else if (e.kind == RunEvent::Kind::kGradient) {
          s.name = StrCat("gradient ", e.name);
          s.cat = "gradient";
          s.args["name"] = e.name;
        } else {
          s.name = "loss";
          s.cat = "loss";
        }
        tensor_args(s, "tensor", index);
        const int64_t op_ts = s.ts, op_end = s.end;
        const int child_depth = s.depth + 1;
        slices.push_back(std::move(s));
        // The op's collectives inside it, from its start, est_us long, scaled to fit.
        const size_t n = e.collectives.size();
        if (n == 0) break;
        depth_of(child_depth);
        int64_t wanted = 0;
        for (const CollectiveEvent& c : e.collectives) wanted += Ns(c.est_us);
        const int64_t room = (op_end - op_ts) - static_cast<int64_t>(n + 1);
        const bool scaled = wanted > room;
        const double scale =
            scaled ? static_cast<double>(std::max<int64_t>(room, 0)) / static_cast<double>(wanted)
                   : 1.0;
        int64_t cursor = op_ts;
        for (size_t k = 0; k < n; ++k) {
          const CollectiveEvent& c = e.collectives[k];
          Slice cs;
          cs.depth = child_depth;
          cs.ts = cursor + 1;
          const auto dur =
              static_cast<int64_t>(std::floor(static_cast<double>(Ns(c.est_us)) * scale));
          cs.end = cs.ts + dur;
          cursor = cs.end;
          cs.name = StrCat(ToString(c.kind), " ", c.mesh_dim);
          cs.cat = "collective";
          cs.event = index;
          cs.collective = static_cast<int>(k);
          cs.args = {{"phase", e.pass}, {"module", e.module}, {"op", e.op}};
          cs.args.update(collective_args(c));
          if (scaled) cs.args["drawn_us"] = Us(dur);
          cs.args["scaled_to_fit"] = scaled;
          count(c);
          slices.push_back(std::move(cs));
        }
        break;
      }
    }
  }
  close_phase();
  return slices;
}

}  // namespace

std::vector<int64_t> ExportedRanks(const std::vector<int64_t>& mesh_shape,
                                   const std::vector<int64_t>& differing, std::string* why) {
  int64_t world = 1;
  for (int64_t s : mesh_shape) world *= s;
  std::vector<int64_t> out;
  if (world <= kMaxExportedRanks) {
    for (int64_t r = 0; r < world; ++r) out.push_back(r);
    if (why != nullptr) *why = StrCat("all ", world, " ranks");
    return out;
  }
  std::set<int64_t> ranks = {0, world - 1};
  int64_t stride = world;
  for (int64_t size : mesh_shape) {
    stride /= size;
    if (size > 1) {
      ranks.insert(stride);
      ranks.insert((size - 1) * stride);
    }
  }
  const size_t sample = ranks.size();
  size_t added = 0;
  for (int64_t r : differing) {
    if (static_cast<int64_t>(ranks.size()) >= kMaxExportedRanks) break;
    if (r >= 0 && r < world && ranks.insert(r).second) ++added;
  }
  out.assign(ranks.begin(), ranks.end());
  if (why != nullptr) {
    *why = StrCat(out.size(), " of ", world, " ranks (more than ", kMaxExportedRanks,
                  "): a sample of ", sample,
                  " (rank 0, the last rank, and per mesh dim the ranks at index 1 and at its last "
                  "index, 0 on the other dims)");
    if (!differing.empty()) {
      *why += StrCat(" and ", added, " of the ", differing.size(),
                     " ranks whose values differ between the traces");
    }
  }
  return out;
}

nlohmann::json ModelTraceToPerfetto(const std::vector<ModelPerfettoSource>& sources) {
  // Ranks whose values differ between the two traces are exported in large worlds too.
  std::vector<int64_t> differing;
  if (sources.size() == 2 && sources[0].trace->mesh_shape == sources[1].trace->mesh_shape) {
    for (const TraceDifference& d : DiffModelTraces(*sources[0].trace, *sources[1].trace,
                                                    8 * (sources[0].trace->events.size() + 1) + 16))
      differing.insert(differing.end(), d.ranks.begin(), d.ranks.end());
    std::sort(differing.begin(), differing.end());
    differing.erase(std::unique(differing.begin(), differing.end()), differing.end());
  }
  PerfettoGroups groups;
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json sources_json = nlohmann::json::array();
  for (size_t t = 0; t < sources.size(); ++t) {
    const ModelTrace& trace = *sources[t].trace;
    const std::string& label = sources[t].label;
    const int64_t base = static_cast<int64_t>(t) * kPerfettoPidStride;
    DeviceMesh mesh = DeviceMesh::Create({1});
    try {
      mesh = DeviceMesh::Create(trace.mesh_shape, trace.mesh_names);
    } catch (const InputError&) {
      mesh = DeviceMesh::Create(trace.mesh_shape);
    }
    std::string why;
    const std::vector<int64_t> ranks = ExportedRanks(trace.mesh_shape, differing, &why);
    // Lay out with a depth bound that holds (a second pass when the first went deeper).
    int depth = 0;
    std::vector<Slice> slices = Layout(trace, 8, &depth);
    if (depth > 8) slices = Layout(trace, depth, &depth);
    sources_json.push_back({{"label", label},
                            {"backend", trace.meta.backend},
                            {"command", trace.meta.command},
                            {"argv", trace.meta.argv},
                            {"world_size", trace.meta.world_size},
                            {"events", trace.events.size()},
                            {"ranks_exported", ranks},
                            {"rank_selection", why},
                            {"times",
                             "t_us of the trace (rank 0's clock) for every rank; "
                             "collectives inside an op est_us long (the cost model)"}});
    std::map<std::pair<size_t, int64_t>, std::map<int64_t, nlohmann::json>> group_refs;
    for (int64_t rank : ranks) {
      const int64_t pid = base + rank + 1;
      const auto coordinate = mesh.FindCoordinate(rank);
      events.push_back({{"ph", "M"},
                        {"name", "process_name"},
                        {"pid", pid},
                        {"args",
                         {{"name", StrCat(label.empty() ? "" : label + ": ", "rank ", rank, " ",
                                          coordinate ? CoordinateText(mesh, *coordinate) : "")}}}});
      events.push_back({{"ph", "M"},
                        {"name", "process_sort_index"},
                        {"pid", pid},
                        {"args", {{"sort_index", base + rank}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", kModelTid},
                        {"args", {{"name", "model"}}}});
      for (const Slice& s : slices) {
        nlohmann::json args = s.args;
        if (s.event >= 0) args["event"] = s.event;
        for (const auto& [key, event] : s.tensors) {
          const WorldTensor& tensor = *trace.events[event].tensor;
          nlohmann::json t = {{"placements", tensor.placements}, {"shape", tensor.shape}};
          if (rank < static_cast<int64_t>(tensor.hashes.size())) t["hash"] = tensor.hashes[rank];
          args[key] = std::move(t);
        }
        if (s.counts) {
          args["collectives"] = s.own.Text();
          args["collectives_with_children"] = s.total.Text();
        }
        if (s.collective >= 0) {
          const CollectiveEvent& c = trace.events[s.event].collectives[s.collective];
          // Each collective's rank -> group ref, made once (linear in ranks), not searched per
          // rank.
          auto [entry, added] = group_refs.try_emplace({s.event, s.collective});
          if (added) {
            for (const auto& g : c.groups) {
              const nlohmann::json ref = groups.Ref(g);
              for (int64_t r : g) entry->second[r] = ref;
            }
          }
          const auto member = entry->second.find(rank);
          // A rank in none of the groups takes no part: no slice on its track.
          if (!c.groups.empty() && member == entry->second.end()) continue;
          args["group"] = member == entry->second.end() ? nlohmann::json::array() : member->second;
        }
        events.push_back({{"ph", "X"},
                          {"name", s.name},
                          {"cat", s.cat},
                          {"pid", pid},
                          {"tid", kModelTid},
                          {"ts", Us(s.ts)},
                          {"dur", Us(s.end - s.ts)},
                          {"args", std::move(args)}});
      }
    }
  }
  return {{"traceEvents", std::move(events)},
          {"otherData",
           {{"generator", "dtsim export --format perfetto"},
            {"format", kModelTraceFormat},
            {"traces", std::move(sources_json)},
            {"groups", groups.Table()}}}};
}

}  // namespace dtsim
