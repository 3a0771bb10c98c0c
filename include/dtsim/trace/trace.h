// Traces: the versioned JSON record of a run that simulated and real runs both write, so a diff can
// say exactly where they part, and that the viewer and `dtsim export` read. This header is the
// trace MODEL: typed structs with their JSON forms, validation, reading and writing — no LibTorch
// (library dtsim_trace). Recording a run and hashing shards live in the core (trace_recorder.h).
// The format is documented in docs/trace-format.md.
//
// A trace holds: meta (format, version, tool, backend, world size, the command), the spec before
// and after, every plan step with its collectives (op, groups, per-rank input/output shapes, bytes,
// measured time), and after each step every rank's local shape, global offset and a hash of its
// shard bytes (XXH3-64 of the contiguous row-major data, as "xxh3:<16 hex digits>"), so two runs
// compare shard by shard without storing data.
//
// Example: Trace t = ReadTrace("traces/uneven_2x4_S0R_to_RS1.json");
//          t.steps[1].collectives[0].kind == CollectiveKind::kAllGather;
//          t.final_state.ranks[3].local_shape == {5, 1}.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/plan.h"
#include "dtsim/layout/spec.h"
#include "dtsim/trace/collective_event.h"

namespace dtsim {

inline constexpr const char* kTraceFormat = "dtsim-trace";
inline constexpr int kTraceVersion = 1;

// meta: what produced the trace. Not compared by trace-diff.
struct TraceMeta {
  std::string tool = "dtsim";
  std::string command;            // "redistribute", "distribute", "example"
  std::string argv;               // the command line
  std::string backend = "local";  // "local" (simulated), "mpi", "nccl"
  int64_t world_size = 0;
  std::string planner;  // "greedy", "min-cost", "graph" ("" when none)
  bool data = true;     // false: metadata-only run (shapes, no values, no hashes)
  nlohmann::json extra = nlohmann::json::object();  // any further keys, kept as written
};

// What one rank holds at one point of the run.
struct RankState {
  int64_t rank = 0;
  std::vector<int64_t> coordinate;
  std::vector<int64_t> local_shape;
  std::vector<int64_t> global_offset;
  std::optional<std::string> hash;  // "xxh3:<16 hex>"; absent in metadata-only traces
};

// The spec and every rank's state at the start or the end.
struct TraceState {
  DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Create({1}), {Placement::Replicate()}, {});
  std::vector<RankState> ranks;  // ascending by rank
};

// One plan step with what ran and every rank's state after it.
struct TraceStep {
  PlanStep plan;              // the plan step (its JSON keys sit at the step's top level)
  std::string mesh_dim_name;  // "dp", or the index as text
  std::vector<CollectiveEvent> collectives;
  Placements placements_after;
  std::vector<RankState> ranks_after;
};

struct Trace {
  TraceMeta meta;
  TraceState initial;
  std::vector<TraceStep> steps;
  TraceState final_state;  // JSON key "final"
  std::optional<bool> ok;  // the verdict against the global tensor, when the run computed one
};

// JSON forms (exactly docs/trace-format.md). Output never throws on odd strings (invalid UTF-8 is
// replaced).
nlohmann::json ToJson(const Trace& trace);
nlohmann::json ToJson(const TraceMeta& meta);
// The meta object ToJson(TraceMeta) wrote (InputError naming the path of anything invalid).
TraceMeta TraceMetaFromJson(const JsonReader& r);
nlohmann::json ToJson(const RankState& state);
// A collective's trace form: op, groups, ranks, shapes, bytes sent and received, time_us.
nlohmann::json TraceCollectiveJson(const CollectiveEvent& collective);
nlohmann::json ToJson(const TraceStep& step);
// {"mesh": {"shape", "names", "ranks"}, "placements", "shape", "dtype"}.
nlohmann::json SpecToJson(const DTensorSpec& spec);

// Reads and validates a whole trace: the format and version, every field's type and range, hashes
// of the form "xxh3:<16 hex digits>" (required unless meta.data is false), shapes consistent with
// the spec (one entry per tensor dim, non-negative), coordinates inside the mesh, unique ranks,
// per-rank lists as long as `ranks`, known collectives and dtypes, parsable placements — and what a
// run can record (docs/trace-format.md): the same ranks in every state, offsets inside the tensor,
// a simulated run's layouts its specs', groups a partition of the mesh along the step's mesh dim,
// steps that chain and name the collective their transition runs, plan lists one entry per rank,
// times that add up to at most 1e15 us, meta.world_size the mesh's.
// InputError("trace", "<path>: <problem>") on the first problem, e.g. "trace:
// steps[1].ranks_after[5].hash: expected \"xxh3:\" and 16 hex digits, got 5".
Trace TraceFromJson(const nlohmann::json& json);
// A list of RANK_STATEs of `spec`'s mesh (ranks ascending, each once; local shapes with one entry
// per tensor dim, no larger than the global shape; hashes required when `need_hash`).
std::vector<RankState> RankStatesFromJson(const JsonReader& r, const DTensorSpec& spec,
                                          bool need_hash);
// The spec SpecToJson wrote; InputError(field, "<path>: ...") naming what is missing or invalid.
DTensorSpec SpecFromJson(const nlohmann::json& json, const std::string& field = "trace",
                         const std::string& path = "spec");

// True for a shard hash as traces write it: "xxh3:" and 16 lower-case hex digits.
bool IsShardHash(const std::string& text);

// Checks the format and version only (the rest is TraceFromJson's job).
void CheckTraceHeader(const nlohmann::json& json);

// Reads a trace file: InputError("trace") for unreadable files (with the reason), a directory,
// broken JSON (with the position), and anything TraceFromJson refuses. Files over 1 GiB are refused
// before reading. Memory: the file's text plus the Trace (about 2x the file for the traces dtsim
// writes; the JSON is never built whole: ReadTraceText + TraceFromText).
Trace ReadTrace(const std::string& path);

// A trace file's text as ReadTrace reads it (the same limits, bounded reads, and JSON checks as
// ParseJsonText: syntax with the byte position, nesting, duplicate keys, numbers in range), nothing
// built yet, and its top-level "format" — for commands that take more than one format (trace-diff:
// op traces; export: recordings).
// Build one with ReadTraceText or TraceTextOf (TraceFromText relies on their checks).
struct TraceText {
  std::string path;
  std::string text;
  std::string format;  // "dtsim-trace", "dtsim-op-trace", ...; "" when missing or not a string
};
TraceText ReadTraceText(const std::string& path);
// The same for text in memory, checked as JSON here (`path` names it in messages).
TraceText TraceTextOf(std::string path, std::string text);
// The trace in `text`, validated exactly as TraceFromJson validates (the same messages, naming the
// file as ReadTrace does), reading one rank state or collective at a time: the peak is the text,
// the Trace, and one step's plan keys or one collective as a DOM.
Trace TraceFromText(const TraceText& text);
// The text as a DOM (ParseJsonText), for the formats other than dtsim-trace.
nlohmann::json ParseTraceText(const TraceText& text);

// The JSON value of a trace file of either format (dtsim-trace, or dtsim-op-trace in op_trace.h),
// read with ReadTrace's limits and checks; the format is not checked here.
nlohmann::json ReadTraceJson(const std::string& path);

// Runs `read` (which parses what was read from `path`): an InputError it throws is thrown again
// naming the file, "trace: 't.json': steps[1].from: ...".
template <typename F>
auto WithFileName(const std::string& path, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const InputError& e) {
    const std::string what = e.what();
    const std::string prefix = e.field() + ": ";
    throw InputError(
        e.field(),
        StrCat("'", ExcerptText(path), "': ",
               what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what));
  }
}

// Parses JSON text read from `source` (a file name for messages) with the limits dtsim applies to
// every file it reads: nesting at most 512 deep; InputError(field) for syntax errors (with the byte
// position) and deep nesting.
nlohmann::json ParseJsonText(std::string_view text, const std::string& field,
                             const std::string& source);

// Writes `text` to `path` by the output-path policy of files.h (WriteOutputFile): a regular or new
// file through a temporary file in the same directory renamed into place (never a half-written
// file, no temporary left behind on error), /dev/null, this process's stdout/stderr or a read FIFO
// as a stream, a symlink through to its target; other special files refused. InputError(field)
// naming the path and the reason.
void WriteFileAtomically(const std::string& path, const std::string& text,
                         const std::string& field = "trace");
// The same for JSON (indented by one space, invalid UTF-8 replaced).
void WriteJsonFileAtomically(const std::string& path, const nlohmann::json& json,
                             const std::string& field = "trace");

// Merges traces of the same run written by different ranks (each holding its own rows: rank states
// and collective rows) into one with every rank's rows, ascending by rank — what rank 0 of a real
// run writes. The runs must agree on the spec and the steps (InputError("trace") naming the first
// disagreement otherwise); meta comes from the first.
Trace MergeRankTraces(const std::vector<Trace>& parts);

}  // namespace dtsim
