// Fuzz target: the recording reader of `dtsim replay` (recordings of upstream runs written by
// dtsim.record): ParseJsonText with dtsim's limits, then RecordingFromJson's validation against a
// data file of 4096 bytes. Property: any input is either a Recording whose every data entry lies
// inside the data file and whose states cover the mesh, whose events' ranks are the world's and
// whose events agree with themselves (DiffRunEvents), and which the writer (ToJson) writes as JSON
// that reads back to the same recording; or an InputError("recording") with a capped message —
// never a crash or another exception.
#include <algorithm>
#include <cstdint>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/run_events.h"
#include "dtsim/trace/trace.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  constexpr int64_t kDataBytes = 4096;
  Recording rec;
  try {
    const nlohmann::json json = ParseJsonText(fuzz::AsText(data, size), "recording", "input");
    rec = RecordingFromJson(json, kDataBytes);
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "recording", e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 4096,
                      "capped message: ", std::string(e.what()).size());
    return 0;
  }
  const nlohmann::json written = ToJson(rec);
  try {
    DTSIM_FUZZ_EXPECT(ToJson(RecordingFromJson(written, kDataBytes)) == written,
                      "a recording written back reads as another");
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(false, "a recording written back is refused: ", e.what());
  }
  for (const RedistributionEvent& r : rec.redistributions) {
    DTSIM_FUZZ_EXPECT(static_cast<int64_t>(r.ranks_before().size()) == r.src().mesh().size(),
                      "states cover the mesh");
    DTSIM_FUZZ_EXPECT(static_cast<int64_t>(r.ranks_after().size()) == r.dst().mesh().size(),
                      "states cover the mesh");
    for (const auto* section : {&r.data, &r.data_after}) {
      if (!*section) continue;
      for (const RecordedData& d : **section) {
        DTSIM_FUZZ_EXPECT(d.offset >= 0 && d.nbytes >= 0 && d.offset + d.nbytes <= kDataBytes,
                          "data entry inside the file: ", d.offset, "+", d.nbytes);
      }
    }
  }
  if (rec.events) {
    for (const auto& [rank, events] : *rec.events) {
      DTSIM_FUZZ_EXPECT(rank >= 0 && rank < rec.world_size, "event rank in the world: ", rank);
      for (const RunEvent& e : events) {
        if (e.kind == RunEvent::Kind::kCollective) {
          DTSIM_FUZZ_EXPECT(std::find(e.group.begin(), e.group.end(), rank) != e.group.end(),
                            "a collective's group holds its rank");
        }
      }
    }
    // Self-diff: a recording's events agree with themselves.
    const EventDiff self = DiffRunEvents(*rec.events, *rec.events);
    DTSIM_FUZZ_EXPECT(self.first.empty() && self.differing == 0, "events differ from themselves");
    // Every op's mesh holds its rank (the reader checked it); the replica check names only ranks
    // of the run, at events it has.
    for (const auto& [rank, events] : *rec.events) {
      for (const RunEvent& e : events) {
        if (!e.mesh) continue;
        DTSIM_FUZZ_EXPECT(*e.mesh < static_cast<int64_t>(rec.meshes.size()) &&
                              rec.meshes[*e.mesh].PositionOf(rank) >= 0,
                          "an op's mesh holds its rank");
      }
    }
    const ReplicaCheck replicas = CheckReplicas(*rec.events, rec.meshes);
    DTSIM_FUZZ_EXPECT(replicas.odd <= replicas.tensors, "odd replica sets are compared ones");
    for (const EventDivergence& d : replicas.first) {
      auto found = rec.events->find(d.rank);
      DTSIM_FUZZ_EXPECT(found != rec.events->end() && d.index >= 0 &&
                            d.index < static_cast<int64_t>(found->second.size()),
                        "a replica divergence names an event of the run: rank ", d.rank);
    }
  }
  return 0;
}
