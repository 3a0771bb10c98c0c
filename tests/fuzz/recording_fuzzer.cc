// Fuzz target: the recording reader of `dtsim replay` (recordings of upstream runs written by
// dtsim.record): ParseJsonText with dtsim's limits, then RecordingFromJson's validation against a
// data file of 4096 bytes. Property: any input is either a Recording whose every data entry lies
// inside the data file and whose states cover the mesh, or an InputError("recording") with a
// capped message — never a crash or another exception.
#include <cstdint>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/recording.h"
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
  for (const RecordedRedistribution& r : rec.redistributions) {
    DTSIM_FUZZ_EXPECT(static_cast<int64_t>(r.ranks_before.size()) == r.src.mesh().size(),
                      "states cover the mesh");
    DTSIM_FUZZ_EXPECT(static_cast<int64_t>(r.ranks_after.size()) == r.dst.mesh().size(),
                      "states cover the mesh");
    for (const auto* section : {&r.data, &r.data_after}) {
      if (!*section) continue;
      for (const RecordedData& d : **section) {
        DTSIM_FUZZ_EXPECT(d.offset >= 0 && d.nbytes >= 0 && d.offset + d.nbytes <= kDataBytes,
                          "data entry inside the file: ", d.offset, "+", d.nbytes);
      }
    }
  }
  return 0;
}
