// Run events: RunEvent, the one type for "a run did this" (an op, a collective, a module boundary,
// a parameter, the loss, a gradient), which both event formats hold:
// - a recording's "events" (python/dtsim/events.py writes them: dtsim.record(ops=True), dtsim
//   record -- torchrun, dtsim run --trace) are every rank's ops and collectives in the order the
//   rank ran them, each with that rank's digests of its inputs and outputs (RunEvents);
// - a model trace's events (model_trace.h, `dtsim model --trace`) are the whole world's, run in
//   lockstep: one event stands for every rank, with each rank's hash of a module boundary's tensor
//   (WorldTensor) and the collectives an op's implicit redistributions ran.
// Each producer fills the fields it knows and leaves the rest empty; each format writes the keys
// its documented JSON form has (docs/recording.md, docs/model.md), as CollectiveEvent and
// RedistributionEvent do. Here too: the rank-by-rank diff of recordings that names the first op or
// collective where two runs part, and the replica check. No LibTorch (library dtsim_trace).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/trace/collective_event.h"

namespace dtsim {

// One local tensor as an event saw it: shape, dtype, XXH3 hash of its bytes, and for floating
// point a sketch (its elements' sum weighted by a fixed sequence) with its scale (the same sum of
// absolute values).
struct TensorDigest {
  std::vector<int64_t> shape;
  std::string dtype;
  std::optional<std::string> hash;  // nullopt: not hashed (a meta tensor)
  std::optional<double> sketch;
  std::optional<double> scale;
  std::string unavailable;  // why it was not hashed, where the recorder said ("meta tensor"; "")
};

// A tensor as the whole world holds it, at a module boundary of a model trace: its placements and
// global shape, and each rank's hash and sketch of its shard.
struct WorldTensor {
  std::string placements;           // "[S(1), R]"; "local" for a plain per-rank tensor
  std::vector<int64_t> shape;       // the global shape (a local tensor's: rank 0's)
  std::vector<std::string> hashes;  // per rank, "xxh3:<16 hex>"; empty in metadata-only traces
  // Per rank (with hashes): a sketch of the values that survives float rounding — two projections
  // on fixed pseudo-random weights in [-1, 1] and the L2 norm — so that a real run whose
  // reductions summed in another order (MPI's or NCCL's algorithms) is told apart from one with
  // wrong values.
  std::vector<std::array<double, 3>> sketches;
};

struct RunEvent {
  // Recordings hold ops and collectives; model traces hold every kind.
  enum class Kind {
    kOp,             // a DTensor op (`op`, `args`, `results`)
    kCollective,     // a collective (a recording: `op` and `group`; a model trace: `collectives`,
                     // one, that no op caused)
    kModuleBegin,    // forward of `module` begins (`type`; `tensor`: its input)
    kModuleEnd,      // forward of `module` ends (`tensor`: its output)
    kBackwardBegin,  // the gradient of `module`'s output arrived (`tensor`: that gradient)
    kParameter,      // a parameter as parallelized, before the run (`name`, `tensor`)
    kLoss,           // the loss (`tensor`)
    kGradient,       // a parameter's gradient after backward (`name`, `tensor`)
  };
  Kind kind = Kind::kOp;
  std::string op;      // "aten.mm.default", or the collective's kind ("all_gather")
  std::string module;  // the module path it ran in ("Global" outside every module)
  // "forward" or "backward"; a model trace's parameters are "setup" and its gradients "end".
  std::string pass;
  std::string line;  // the program's line ("train.py:42"), shown, not compared
  std::string type;  // kModuleBegin: the module's type ("TransformerBlock")
  std::string name;  // kParameter, kGradient: the parameter's fully qualified name
  // An op's DTensor placements ("[S(0), R]"), one per DTensor argument and result ("none" for a
  // model trace's result that is no tensor).
  std::vector<std::string> args, results;
  std::vector<int64_t> group;  // a recording's collective: its process group (its global ranks)
  // A model trace's planned collectives: those of an op's implicit redistributions, or the one of
  // a kCollective event, each in every group along its mesh dim.
  std::vector<CollectiveEvent> collectives;
  // A model trace's tensor of a module boundary, parameter, loss or gradient, on every rank.
  std::optional<WorldTensor> tensor;
  // An op's device mesh: its index in the recording's "meshes" (nullopt: not recorded, as by
  // recorders before meshes were).
  std::optional<int64_t> mesh;
  std::vector<TensorDigest> inputs;
  std::optional<std::vector<TensorDigest>> outputs;  // nullopt: not digested (its work failed)
  std::string unavailable;  // why the outputs were not digested, where the recorder said ("")
  bool at_end = false;      // a collective's output digested at the end (never waited for)
  // Its output buffer was written in place between the collective and its digest (DDP's division of
  // its buckets): a differing output is not checked rather than a divergence.
  bool written = false;
  // Flight Recorder imports (dtsim import-fr): the group's sequence number and the state the dump
  // gives ("scheduled", "started", "completed"; "" elsewhere).
  std::optional<int64_t> seq;
  std::string state;
  // A collective whose output an op touched before its work completed (dtsim record: a race in the
  // program, which may have read bytes that had not arrived): that op and its program line.
  struct Read {
    std::string op, line;
  };
  std::optional<Read> read_before_wait;
  // Provenance (a recording's "from"), one per input: the index in the rank's events of the last
  // event that wrote the input's storage (always an earlier one), with the plain-tensor op that
  // wrote it since, not an event (FSDP2's copy-out: `op` and `line`; empty where none did);
  // nullopt where no event wrote it. Empty: not recorded.
  struct Source {
    int64_t event = 0;
    std::string op, line;
  };
  std::vector<std::optional<Source>> from;
  // A collective's received bytes digested again when an op first touched them after their digest
  // at completion ("first_read"): that op, its line and the digest. nullopt: not recorded (no op
  // touched them, or a recorder before this).
  struct FirstRead {
    std::string op, line;
    std::vector<TensorDigest> outputs;
  };
  std::optional<FirstRead> first_read;
  // When the rank began it, in microseconds since its recording began (its own clock), and how long
  // it took: an op's run, a collective's issuing call (with its wait for a functional collective);
  // nullopt when not recorded. Shown (dtsim export), never compared.
  std::optional<double> t_us, dur_us;
};

// "op", "collective", "module_begin", "module_end", "backward_begin", "parameter", "loss",
// "gradient": the names both formats write.
std::string_view ToString(RunEvent::Kind kind);
std::optional<RunEvent::Kind> FindRunEventKind(std::string_view name);

// An op's placements in one line: "[S(0)], [R] -> [S(0)]".
std::string PlacementsText(const std::vector<std::string>& args,
                           const std::vector<std::string>& results);
std::string PlacementsText(const RunEvent& e);  // of its args and results

// rank -> that rank's events, in its order.
using RunEvents = std::map<int64_t, std::vector<RunEvent>>;

// The JSON forms a recording's "events" holds (docs/recording.md, "Events"), key for key as
// python/dtsim/events.py writes them: what RunEventsFromJson reads back to the same events.
nlohmann::json ToJson(const TensorDigest& digest);
nlohmann::json ToJson(const RunEvent& event);
nlohmann::json RunEventsToJson(const RunEvents& events);

// Reads and validates a recording's "events": ranks of the world as keys, known kinds, groups of
// world ranks that hold the rank, digests with shapes, hashes of the form "xxh3:" + 16 hex digits
// and finite sketches. InputError naming the JSON path on the first problem.
RunEvents RunEventsFromJson(const JsonReader& r, int64_t world_size);
namespace internal {
class JsonNode;
}
// The same over a node of a DOM or of checked text (src/trace/json_text.h): from text, one event's
// DOM at a time.
RunEvents RunEventsFromNode(const internal::JsonNode& node, int64_t world_size);
// One rank's list of them (the node of "events"[rank]), as RunEventsFromNode reads it.
std::vector<RunEvent> RankEventsFromNode(const internal::JsonNode& list, int64_t rank,
                                         int64_t world_size);

// Where two runs' events part, rank by rank.
struct EventDivergence {
  enum class Cause {
    kStructure,  // the ranks ran another op or collective (or in another group, module, layout)
    kComputed,   // the event's output differs while its inputs were equal: the bug is in it
    kInput,      // an input differs while every earlier event of the rank agreed: its bytes were
                 // written outside the recorded events, or read before a collective completed
    kLength,     // one run's rank ran more events than the other's
    kPending,    // a collective a Flight Recorder dump shows as issued but never completed
    kRace,       // one run's program touched a collective's output before its work completed
  };
  Cause cause = Cause::kStructure;
  int64_t rank = 0;
  int64_t index = 0;  // the event's index in the rank's events (0-based)
  std::string where;  // "aten.mm.default in layers.0.wo (backward) at train.py:42"
  std::string what;   // what differs, with both values
};

struct EventDiff {
  // Each rank's first divergence, by event index then rank: the first is where the runs part.
  std::vector<EventDivergence> first;
  int64_t compared = 0;     // events compared (all ranks)
  int64_t rounded = 0;      // of them, equal within float rounding but not bit for bit
  int64_t not_checked = 0;  // events without an output digest on one side
  int64_t differing = 0;    // events whose outputs differ, first divergences included
  std::map<int64_t, int64_t> differing_by_rank;
  std::vector<int64_t> ranks_only_in_a, ranks_only_in_b;
  // Collectives whose output the program touched before the work completed in both runs (the same
  // race in each: not a divergence, but a bug of the program), each with cause kRace.
  std::vector<EventDivergence> races_in_both;
};

// Aligns `a` and `b` rank by rank, event by event: kind, op, group, module, pass and placements
// must agree; digests are equal when their hashes are, or (floating point) when their sketches
// differ by at most the dtype's tolerance times the scale (float64 1e-9, float32 1e-4, bfloat16
// and float16 2e-2).
//
// `collectives_only` (one side is a Flight Recorder import, whose dumps hold no ops, modules or
// values): only collectives are aligned, by kind, group and input shape and dtype (Gloo runs a
// reduce-scatter as an all-reduce and its dumps name it so: the two match), each divergence is
// labelled with the other side's module, pass and line, and the first collective of each rank that
// the dump shows as never completed is reported (kPending): where a job hangs.
//
// A collective that one run's program touched before its work completed (read_before_wait) is that
// rank's divergence (kRace); one that both did is listed in races_in_both.
EventDiff DiffRunEvents(const RunEvents& a, const RunEvents& b, bool collectives_only = false);

// The same (not collectives_only) over runs read one rank at a time, for runs too large to hold
// whole: `ranks_a` and `ranks_b` are the ranks each run has events for (ascending); read(rank) is
// called once for every rank of either, in ascending order, and gives that rank's events in each
// run (an empty list for the run without it).
using RankEventsPair = std::pair<std::vector<RunEvent>, std::vector<RunEvent>>;
EventDiff DiffRunEventsByRank(const std::vector<int64_t>& ranks_a,
                              const std::vector<int64_t>& ranks_b,
                              const std::function<RankEventsPair(int64_t rank)>& read);

// What an event is, in one line, for every kind: "aten.mm.default in layers.0.wo (backward) at
// train.py:42", "all_gather over [0, 1] in layers.0 (forward)", "forward output of layers.0",
// "output gradient of layers.0", "parameter layers.0.wq.weight", "loss",
// "gradient of layers.0.wq.weight".
std::string EventLabel(const RunEvent& e);

// What wrote input `k` of `events[index]` last, as its "from" says, in one line: the producing
// event's label, the plain op that wrote it since, and whether a collective's output changed after
// it completed (its digest at completion against its first read). "" where not recorded.
std::string SourceText(const std::vector<RunEvent>& events, size_t index, size_t k);

// Consistency inside one run: ranks that must hold the same replica hold equal bytes. The n-th op
// of every rank on a device mesh is one op of the mesh (as `dtsim run --check-ops` meets them);
// for each of its DTensor arguments and results, ranks whose mesh coordinates differ only on the
// placements' Replicate dims hold one replica (Shard and Partial dims are not masked: their
// pieces differ by design), so their hashes must be equal. The hash most of them hold is the
// replica's; the others are odd ranks out. Ranks of one mesh op that ran different ops are a
// divergence of their own (kStructure).
struct ReplicaCheck {
  // Each odd rank out's first divergence, by event index then rank: cause kComputed when an op's
  // result differs from its replicas while every argument agreed (the op computed it), kInput when
  // an argument already differed (written outside the recorded ops, or its replicas differed
  // before), kStructure for another op.
  std::vector<EventDivergence> first;
  int64_t ops = 0;          // mesh ops met (op events with a mesh, grouped across ranks)
  int64_t tensors = 0;      // arguments and results with replicas, compared
  int64_t odd = 0;          // of them, those with an odd rank out (first divergences included)
  int64_t not_checked = 0;  // op events without a mesh, or tensors without a hash
};
ReplicaCheck CheckReplicas(const RunEvents& events, const std::vector<DeviceMesh>& meshes);

}  // namespace dtsim
