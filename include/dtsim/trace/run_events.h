// Run events: every rank's DTensor ops and collectives in the order the rank ran them, as a
// recording's "events" holds them (python/dtsim/events.py writes them: dtsim.record(ops=True),
// dtsim record -- torchrun, dtsim run --trace), and the rank-by-rank diff that names the first op
// or collective where two runs part. No LibTorch (library dtsim_trace).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/mesh.h"

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

struct RunEvent {
  enum class Kind { kOp, kCollective };
  Kind kind = Kind::kOp;
  std::string op;      // "aten.mm.default", or the collective's kind ("all_gather")
  std::string module;  // the module path it ran in ("Global" outside every module)
  std::string pass;    // "forward" or "backward"
  std::string line;    // the program's line ("train.py:42"), shown, not compared
  std::vector<std::string> args, results;  // an op's DTensor placements ("[S(0), R]")
  std::vector<int64_t> group;              // a collective's process group (its global ranks)
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
  // When the rank began it, in microseconds since its recording began (its own clock), and how long
  // it took: an op's run, a collective's issuing call (with its wait for a functional collective);
  // nullopt when not recorded. Shown (dtsim export), never compared.
  std::optional<double> t_us, dur_us;
};

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

// "aten.mm.default in layers.0.wo (backward) at train.py:42".
std::string EventLabel(const RunEvent& e);

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
