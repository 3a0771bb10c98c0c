// The module tree of a model trace (see module_tree.h).
#include "module_tree.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/perfetto.h"
#include "timeline_layout.h"

namespace dtsim::viewer {
namespace {

std::string RankListText(const std::vector<int64_t>& ranks, size_t max = 16) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < max; ++i) s += StrCat(i == 0 ? "" : ", ", ranks[i]);
  if (ranks.size() > max) s += StrCat(" and ", ranks.size() - max, " more");
  return s;
}

}  // namespace

ModuleTree ModuleTree::Load(const std::string& path) { return FromText(ReadTraceText(path)); }

ModuleTree ModuleTree::FromText(const TraceText& text) {
  ModelTrace trace =
      WithFileName(text.path, [&] { return ModelTraceFromJson(ParseTraceText(text)); });
  return FromTrace(std::move(trace), text.path);
}

ModuleTree ModuleTree::FromTrace(ModelTrace trace, std::string source) {
  ModuleTree t;
  t.source_ = std::move(source);
  t.trace_ = std::move(trace);
  try {
    t.mesh_ = DeviceMesh::Create(t.trace_.mesh_shape, t.trace_.mesh_names);
  } catch (const InputError&) {
    t.mesh_ = DeviceMesh::Create(t.trace_.mesh_shape);  // names the mesh cannot take: unnamed
  }
  t.Index();
  return t;
}

int32_t ModuleTree::NodeFor(const std::string& name, int32_t parent, const std::string& type) {
  const auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    if (nodes_[it->second].type.empty()) nodes_[it->second].type = type;
    return it->second;
  }
  ModuleNode n;
  n.name = name;
  n.type = type;
  n.parent = parent;
  n.depth = nodes_[parent].depth + 1;
  const auto index = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(std::move(n));
  nodes_[parent].children.push_back(index);
  by_name_.emplace(name, index);
  return index;
}

void ModuleTree::Index() {
  nodes_.clear();
  by_name_.clear();
  ModuleNode root;
  root.name = "Global";
  nodes_.push_back(root);
  const std::vector<RunEvent>& events = trace_.events;
  node_of_event_.assign(events.size(), 0);
  std::vector<std::pair<int32_t, size_t>> open;  // forward calls open: node, index into calls
  for (size_t i = 0; i < events.size(); ++i) {
    const RunEvent& e = events[i];
    const auto index = static_cast<int64_t>(i);
    const int32_t parent = open.empty() ? 0 : open.back().first;
    switch (e.kind) {
      case RunEvent::Kind::kModuleBegin: {
        const int32_t n = NodeFor(e.module, parent, e.type);
        nodes_[n].calls.push_back(ModuleCall{index, -1});
        open.emplace_back(n, nodes_[n].calls.size() - 1);
        node_of_event_[i] = n;
        break;
      }
      case RunEvent::Kind::kModuleEnd: {
        // The reader checked that ends close the innermost open call.
        const int32_t n = NodeFor(e.module, parent, "");
        if (!open.empty() && open.back().first == n) {
          nodes_[n].calls[open.back().second].end = index;
          open.pop_back();
        }
        node_of_event_[i] = n;
        break;
      }
      case RunEvent::Kind::kBackwardBegin: {
        const int32_t n = NodeFor(e.module, 0, "");
        nodes_[n].backward.push_back(index);
        node_of_event_[i] = n;
        break;
      }
      case RunEvent::Kind::kOp:
      case RunEvent::Kind::kCollective: {
        const int32_t n = NodeFor(e.module, parent, "");
        const int pass = e.pass == "backward" ? kBackward : kForward;
        nodes_[n].events[pass].push_back(index);
        for (const CollectiveEvent& c : e.collectives) nodes_[n].own[pass].Add(c);
        node_of_event_[i] = n;
        break;
      }
      case RunEvent::Kind::kParameter:
        parameters_.push_back(index);
        break;
      case RunEvent::Kind::kLoss:
        losses_.push_back(index);
        break;
      case RunEvent::Kind::kGradient:
        gradients_.push_back(index);
        break;
    }
  }
  // Totals: children come after their parents, so one pass from the back adds each subtree up.
  for (ModuleNode& n : nodes_) n.total = n.own;
  for (size_t i = nodes_.size(); i-- > 1;) {
    const ModuleNode& n = nodes_[i];
    for (int pass : {kForward, kBackward}) nodes_[n.parent].total[pass].Add(n.total[pass]);
  }
}

std::optional<int32_t> ModuleTree::FindNode(const std::string& name) const {
  if (name == nodes_[0].name) return 0;
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

bool ModuleTree::IsAncestorOrSelf(int32_t a, int32_t b) const {
  for (int32_t n = b; n >= 0; n = nodes_[n].parent) {
    if (n == a) return true;
  }
  return false;
}

std::string ModuleTree::CoordinateOf(int64_t rank) const {
  const auto c = mesh_.FindCoordinate(rank);
  if (!c) return "(not in the mesh)";
  if (mesh_.names().empty()) return IntListToString(*c);
  std::string out = "[";
  for (size_t d = 0; d < c->size(); ++d)
    out += StrCat(d ? ", " : "", mesh_.DimLabel(static_cast<int64_t>(d)), "=", (*c)[d]);
  return out + "]";
}

std::string ModuleTree::Describe() const {
  const auto plan = trace_.model.find("plan");
  const std::string plan_text =
      plan != trace_.model.end() && plan->is_string() ? ", plan " + plan->get<std::string>() : "";
  return StrCat(BackendLabel(trace_.meta), ", ", world_size(), " ranks ", mesh_.ToString(),
                plan_text, ", ", trace_.events.size(), " events",
                has_hashes() ? "" : ", no hashes (metadata only)");
}

std::optional<int64_t> EventOfDifference(const TraceDifference& d) {
  if (d.event < 0) return std::nullopt;
  return d.event;
}

bool ModelComparison::Differs(int64_t event, int64_t rank) const {
  if (event < 0 || event >= static_cast<int64_t>(events.size())) return false;
  const EventDiff& d = events[event];
  return d.all_ranks || std::binary_search(d.ranks.begin(), d.ranks.end(), rank);
}

void CheckSameModelRun(const ModuleTree& a, const ModuleTree& b) {
  if (a.trace().mesh_shape != b.trace().mesh_shape ||
      a.trace().mesh_names != b.trace().mesh_names) {
    throw InputError("traces", StrCat("'", a.source(), "' and '", b.source(),
                                      "' are not traces of the same model run: the meshes differ: ",
                                      a.mesh().ToString(), " vs ", b.mesh().ToString()));
  }
}

ModelComparison CompareModelTraces(const ModuleTree& a, const ModuleTree& b) {
  CheckSameModelRun(a, b);
  ModelComparison c;
  // Every difference: a few per event at most (kind, placements, each collective, the tensor).
  const size_t limit = 8 * (a.trace().events.size() + 1) + 16;
  c.differences = DiffModelTraces(a.trace(), b.trace(), limit, &c.rounded);
  c.events.resize(a.trace().events.size());
  c.node_differs.assign(a.nodes().size(), 0);
  c.subtree_differs.assign(a.nodes().size(), 0);
  std::set<int64_t> ranks;
  for (size_t i = 0; i < c.differences.size(); ++i) {
    const TraceDifference& d = c.differences[i];
    ranks.insert(d.ranks.begin(), d.ranks.end());
    const std::optional<int64_t> event = EventOfDifference(d);
    if (!event || *event >= static_cast<int64_t>(c.events.size())) continue;
    if (!c.first_event) c.first_event = *event;
    ModelComparison::EventDiff& e = c.events[*event];
    e.differences.push_back(i);
    if (d.ranks.empty()) e.all_ranks = true;
    e.ranks.insert(e.ranks.end(), d.ranks.begin(), d.ranks.end());
    std::sort(e.ranks.begin(), e.ranks.end());
    e.ranks.erase(std::unique(e.ranks.begin(), e.ranks.end()), e.ranks.end());
    const int32_t n = a.NodeOfEvent(*event);
    c.node_differs[n] = 1;
    for (int32_t p = n; p >= 0; p = a.node(p).parent) c.subtree_differs[p] = 1;
  }
  c.ranks.assign(ranks.begin(), ranks.end());
  if (c.differences.empty()) {
    c.summary = StrCat(
        "agree: ", a.trace().events.size(), " events (modules, ops, collectives) in the same order",
        a.has_hashes() && b.has_hashes() ? ", every rank's values at every module boundary equal"
                                         : "; values not compared (a trace without hashes)");
    if (c.rounded > 0) {
      c.summary += StrCat(" (", c.rounded, " tensor", c.rounded == 1 ? "" : "s",
                          " equal within float rounding)");
    }
  } else {
    const TraceDifference& first = c.differences.front();
    c.summary = StrCat("differ: first at ", first.where, ": ", first.what);
    if (!c.ranks.empty()) {
      c.summary += StrCat("; ", c.ranks.size(), " of ", a.world_size(), " ranks differ (",
                          RankListText(c.ranks, 8), ")");
    }
    c.summary +=
        StrCat("; ", c.differences.size(), " difference", c.differences.size() == 1 ? "" : "s");
  }
  return c;
}

std::vector<int64_t> BoundaryEvents(const ModuleNode& node) {
  std::vector<int64_t> out;
  for (const ModuleCall& call : node.calls) {
    out.push_back(call.begin);
    if (call.end >= 0) out.push_back(call.end);
  }
  out.insert(out.end(), node.backward.begin(), node.backward.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::string ShortHash(const std::optional<WorldTensor>& tensor, int64_t rank) {
  if (!tensor || rank < 0 || rank >= static_cast<int64_t>(tensor->hashes.size())) return "-";
  const std::string& h = tensor->hashes[rank];
  return h.substr(0, std::min<size_t>(h.size(), 13));  // "xxh3:" + 8 hex digits
}

}  // namespace dtsim::viewer
