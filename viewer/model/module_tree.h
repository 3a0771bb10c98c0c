// The viewer's model of a model trace (`dtsim model --trace`, dtsim/trace/model_trace.h): the
// modules of the run as a tree with what each communicated, the events each one owns, every rank's
// values at its boundaries, and — for two traces of the same model run — where they part, event by
// event and rank by rank. No GUI code: the module tree panel, `dtsim export` and the tests read it.
//
// Terms. A module's *calls* are its forward module_begin / module_end pairs (input, output); its
// *backward* events are its backward_begin events (the gradient of its output). An op or
// collective event *belongs* to the module its `module` field names (upstream CommDebugMode's
// attribution: in backward, the module of the last backward_begin). The tree's parent of a module
// is the module whose forward call was open when its first call began; a module that never ran
// forward hangs from the root. The root, "Global", owns the events of no module (parameters, loss,
// gradients) and counts everything, as CommDebugMode's "Global" does.
//
// Example (dtsim model --mesh 2x4 --names dp,tp --plan fsdp+tp --backward --layers 2 ...):
//   ModuleTree t = ModuleTree::Load("sim.json");
//   t.node(*t.FindNode("layers.0")).type == "TransformerBlock";
//   t.node(*t.FindNode("layers.0")).total[kForward].count == 5 (all_gather 3, reduce_scatter 2);
//   t.node(0).total[kBackward] counts every backward collective of the run.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dtsim/layout/mesh.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/trace.h"

namespace dtsim::viewer {

// The two passes a module's collectives are counted in (ModuleNode::own, ModuleNode::total).
inline constexpr int kForward = 0;
inline constexpr int kBackward = 1;

// Collectives counted as `dtsim model` reports them: per kind, how many, the bytes each rank sends
// (the largest over ranks, summed over the calls) and the cost model's time.

// One forward call of a module: the indices of its module_begin and module_end events.
struct ModuleCall {
  int64_t begin = -1;
  int64_t end = -1;
};

struct ModuleNode {
  std::string name;  // the fully qualified name ("layers.0.attention"); "Global" for the root
  std::string type;  // "Attention"; "" for the root
  int32_t parent = -1;
  int32_t depth = 0;              // the root is 0
  std::vector<int32_t> children;  // in the order of their first call
  std::vector<ModuleCall> calls;
  std::vector<int64_t> backward;  // its backward_begin events
  // The op and collective events that belong to it, per pass (kForward, kBackward), in run order.
  std::array<std::vector<int64_t>, 2> events;
  // Its collectives (ops' nested ones included) per pass, own and with every descendant's.
  std::array<CommCounts, 2> own, total;
};

class ModuleTree {
 public:
  // Reads a model trace file: ReadTraceText's limits and JSON checks, then ModelTraceFromJson's
  // validation, errors naming the file (InputError("trace", "'m.json': events[3].t_us: ...")).
  static ModuleTree Load(const std::string& path);
  // The same for a trace file's text already read (its format must be kModelTraceFormat).
  static ModuleTree FromText(const TraceText& text);
  static ModuleTree FromTrace(ModelTrace trace, std::string source = "model trace");

  const std::string& source() const { return source_; }
  const ModelTrace& trace() const { return trace_; }
  // The model trace's mesh (ranks 0..world_size-1 in row-major order, as model traces index them).
  const DeviceMesh& mesh() const { return mesh_; }
  int64_t world_size() const { return mesh_.size(); }
  bool has_hashes() const { return trace_.meta.data; }

  const std::vector<ModuleNode>& nodes() const { return nodes_; }
  const ModuleNode& node(int32_t index) const { return nodes_.at(index); }
  std::optional<int32_t> FindNode(const std::string& name) const;
  // The node an event belongs to: its module for ops, collectives and module events; the root for
  // parameters, the loss and gradients.
  int32_t NodeOfEvent(int64_t event) const { return node_of_event_.at(event); }
  // Parameter, loss and gradient events, in run order.
  const std::vector<int64_t>& parameters() const { return parameters_; }
  const std::vector<int64_t>& losses() const { return losses_; }
  const std::vector<int64_t>& gradients() const { return gradients_; }
  // True when `a` is `b` or one of its ancestors.
  bool IsAncestorOrSelf(int32_t a, int32_t b) const;

  // "[dp=0, tp=3]" for rank 3 of mesh[dp=2, tp=4].
  std::string CoordinateOf(int64_t rank) const;
  // "local (simulated), 8 ranks mesh[dp=2, tp=4], plan fsdp+tp, 480 events" (+ ", no hashes").
  std::string Describe() const;

 private:
  ModuleTree() = default;
  void Index();
  int32_t NodeFor(const std::string& name, int32_t parent, const std::string& type);

  std::string source_;
  ModelTrace trace_;
  DeviceMesh mesh_ = DeviceMesh::Create({1});
  std::vector<ModuleNode> nodes_;
  std::unordered_map<std::string, int32_t> by_name_;
  std::vector<int32_t> node_of_event_;
  std::vector<int64_t> parameters_, losses_, gradients_;
};

// The event (0-based) a difference of DiffModelTraces is at (TraceDifference::event); none for a
// difference of the whole run (the model, the mesh, the number of events).
std::optional<int64_t> EventOfDifference(const TraceDifference& difference);

// Two model traces of the same run compared (DiffModelTraces, every difference), laid onto the
// first trace's events and modules.
struct ModelComparison {
  std::vector<TraceDifference> differences;  // in run order; the first is where the runs part
  int64_t rounded = 0;  // tensors equal only within float rounding (DiffModelTraces' count)
  // [event]: the differences at the event (indices into `differences`), and the ranks they name;
  // `all_ranks`: one names no rank (another op, other collectives), so it concerns every rank.
  struct EventDiff {
    std::vector<size_t> differences;
    std::vector<int64_t> ranks;  // ascending
    bool all_ranks = false;
  };
  std::vector<EventDiff> events;
  // [node]: some event of the node's own (its boundaries and events) differs, on any rank.
  std::vector<uint8_t> node_differs;
  // [node]: the node or a descendant differs (collapsed rows show it).
  std::vector<uint8_t> subtree_differs;
  std::vector<int64_t> ranks;  // every rank any difference names, ascending
  std::optional<int64_t> first_event;
  // One line: "agree: 480 events in the same order, every rank's values at every module boundary
  // equal" or "differ: first at event 57: forward output of layers.0.attention.wq: values differ on
  // rank 2 (...); 2 of 8 ranks differ; 3 differences".
  std::string summary;

  // True when `event` differs on `rank` (or for every rank).
  bool Differs(int64_t event, int64_t rank) const;
};

// Refuses two model traces of different meshes: InputError("traces", "'a.json' and 'b.json' are
// not traces of the same model run: the meshes differ: mesh[dp=2, tp=4] vs mesh[8]").
void CheckSameModelRun(const ModuleTree& a, const ModuleTree& b);
ModelComparison CompareModelTraces(const ModuleTree& a, const ModuleTree& b);

// The boundary events of a node (its calls' begins and ends, its backward events), ascending.
std::vector<int64_t> BoundaryEvents(const ModuleNode& node);

// "xxh3:86b2d9b8" (the first 8 hex digits; the tree's columns), "-" when there is none.
std::string ShortHash(const std::optional<WorldTensor>& tensor, int64_t rank);

}  // namespace dtsim::viewer
