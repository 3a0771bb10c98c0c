// Recordings: what `dtsim.record` (python/dtsim/recorder.py) writes from a run of an upstream
// PyTorch DTensor program, and `dtsim replay` re-runs in simulation. The trace MODEL only (typed
// structs, reading, validation; no LibTorch): the replay itself is simulator/replay_command.cc.
//
// A recording lists every redistribution upstream ran (explicit, implicit from op dispatch, or in
// backward) with its source and target specs, the collectives upstream issued as the ranks saw
// them, every rank's local shape and shard hash before and after, and where the sidecar file
// (meta.data_file, beside the recording) holds every rank's source shard bytes. The format is
// docs/python.md's "dtsim-recording".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/layout/spec.h"
#include "dtsim/trace/redistribution_event.h"
#include "dtsim/trace/run_events.h"
#include "dtsim/trace/trace.h"

namespace dtsim {

inline constexpr const char* kRecordingFormat = "dtsim-recording";
inline constexpr int kRecordingVersion = 1;

// One rank's memory at one module boundary ("memory" in the file): the bytes of the tensors its
// program held then, and at a module's end the most it held while the module ran (dtsim run's
// meter; a real CUDA rank records torch.cuda.memory_allocated() and no peak). Shown, never
// compared.
struct MemorySample {
  std::string module;  // its path ("MLP.fc1"; "Global" for the whole backward pass)
  std::string pass;    // "forward" or "backward"
  bool end = false;    // "at": "end" (else "begin")
  int64_t bytes = 0;
  std::optional<int64_t> peak;  // at an end, where measured
  std::optional<double> t_us;   // the rank's clock, as its events' t_us
};

struct Recording {
  std::string tool;     // the writer: "dtsim.record" (dtsim record, dtsim run --trace too),
                        // "dtsim import-fr"; "" when not said
  std::string backend;  // "torch-gloo", "torch-nccl", "torch-local" (upstream's LocalTensorMode),
                        // "dtsim-run" (dtsim run --trace), "flight-recorder" (dtsim import-fr)
  std::string torch_version;
  int64_t world_size = 0;
  std::string argv;
  std::optional<bool> data;  // meta.data: whether shard values were recorded at all
  std::string data_file;     // "" when no redistribution kept its data
  bool data_complete = true;
  std::optional<int64_t> max_data_bytes;  // the recorder's cap on the data file
  // Flight Recorder imports: the dumps' format version, the ranks without a dump, and the ranks
  // whose ring buffer had wrapped (their first collectives are missing).
  std::string fr_version;
  std::optional<std::vector<int64_t>> missing_ranks, truncated_ranks;
  // Every redistribution upstream ran, in order (redistribution_event.h: no plan steps, the
  // collectives as issued).
  std::vector<RedistributionEvent> redistributions;
  // Every collective of the run in the order each group completed it (c10d, functional, FSDP2,
  // DDP and direct calls alike; point-to-point excluded), with its group and every member's input
  // and output hash: "collectives" in the file, which `dtsim run --trace` writes (dtsim.record on
  // real ranks does not: nullopt).
  std::optional<std::vector<CollectiveEvent>> collectives;
  // Every rank's DTensor ops and collectives in its order ("events" in the file: dtsim.record with
  // ops=True, dtsim record -- COMMAND, dtsim run --trace); nullopt when not recorded.
  std::optional<RunEvents> events;
  // Every rank's memory at its module boundaries, in its order, and where the bytes come from
  // (meta.memory_source: "dtsim run", "torch.cuda.memory_allocated"); nullopt when not recorded
  // (a real rank on the CPU has no allocator statistics).
  std::optional<std::map<int64_t, std::vector<MemorySample>>> memory;
  std::string memory_source;
  // The device meshes of the op events ("meshes": each as nested lists of ranks, upstream's
  // DeviceMesh.mesh.tolist()); an op event names its own by index (RunEvent::mesh). Empty when
  // not recorded.
  std::vector<DeviceMesh> meshes;
};

// A rank whose recorded hash differs from its replicas': ranks whose coordinates differ only on
// Replicate mesh dims (of the same (sub)mesh) hold one replica, so their hashes must be equal,
// before and after. The hash most of them hold is the replica's; the others are the odd ranks out.
// Partial mesh dims are not masked (partial values differ by design).
struct ReplicaMismatch {
  bool before = true;  // in ranks_before (else ranks_after)
  int64_t rank = 0;
  std::string hash;
  std::vector<int64_t> replicas;  // the ranks holding the majority's hash
  std::string replica_hash;
};

// Every mismatch of `r`, before then after, ranks ascending within each replica set. Ranks without
// a hash, and the (before, rank) pairs in `skip`, are left out.
std::vector<ReplicaMismatch> ReplicaMismatches(const RedistributionEvent& r,
                                               const std::set<std::pair<bool, int64_t>>& skip = {});

// True when `json` says it is a recording (its "format"); the rest is RecordingFromJson's job.
bool IsRecording(const nlohmann::json& json);

// Reads and validates a whole recording: format and version, every field's type and range, specs
// (meshes, placements, shapes, dtypes), hashes, one state per mesh rank before and after with a
// local shape of the tensor's rank, collectives of known kinds with per-rank lists as long as
// `ranks`, data entries inside the sidecar (`data_file_bytes`: its size, checked when given).
// InputError("recording", "<path>: <problem>") on the first problem.
Recording RecordingFromJson(const nlohmann::json& json,
                            std::optional<int64_t> data_file_bytes = std::nullopt);

// The recording in `text` (ReadTraceText's: checked JSON), validated as RecordingFromJson validates
// it, naming the file; its events are read one event's DOM at a time, everything else as a DOM.
Recording RecordingFromText(const TraceText& text,
                            std::optional<int64_t> data_file_bytes = std::nullopt);

// RecordingFromText in two parts, for a reader that holds one rank's events at a time (trace-diff
// of two large runs): the recording without its events, then each rank's events when asked.
// ReadAll() is RecordingFromText itself (the same checks in the same order, so the same first
// error); the per-rank reads check what they read as it does, but the first problem they meet may
// be another one than ReadAll's.
class RecordingReader {
 public:
  // Reads and checks everything but "events". `text` outlives the reader.
  explicit RecordingReader(const TraceText& text,
                           std::optional<int64_t> data_file_bytes = std::nullopt);

  // The recording without events (its `events` is nullopt even when the file has some).
  const Recording& recording() const { return rec_; }
  bool has_events() const { return events_ != nullptr; }
  // The ranks that have events, ascending (requires has_events()).
  std::vector<int64_t> EventRanks() const;
  // One of them: its events, checked (meshes included), and the size of their text.
  std::vector<RunEvent> RankEvents(int64_t rank) const;
  size_t RankEventsBytes(int64_t rank) const;
  // The whole recording: RecordingFromText(text, data_file_bytes).
  Recording ReadAll() &&;
  // recording(), moved out (the reader reads nothing after).
  Recording TakeRecording() && { return std::move(rec_); }

 private:
  std::string path_;
  Recording rec_;
  std::shared_ptr<const internal::JsonNode> events_;  // null: no "events"
};

// The recording as its JSON form (docs/python.md, "dtsim-recording"), key for key as dtsim's Python
// writers write it (python/dtsim/recorder.py, fr_import.py): what RecordingFromJson reads back to
// the same recording. The data file is not touched.
nlohmann::json ToJson(const Recording& recording);

// The largest recording (its JSON, not the data file) dtsim reads.
inline constexpr int64_t kMaxRecordingBytes = int64_t{1} << 30;

// Reads a recording file (bounded by kMaxRecordingBytes, as every input: files.h) and validates it
// with RecordingFromJson, without the data file. InputError("recording") naming the path.
Recording ReadRecording(const std::string& path);

}  // namespace dtsim
