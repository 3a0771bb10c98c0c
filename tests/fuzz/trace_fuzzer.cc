// Fuzz target: the trace reader (what `dtsim trace-diff`, the viewer and `dtsim export` read): ParseJsonText with
// dtsim's limits, then TraceFromJson's validation. Properties: any input is either a Trace or an InputError("trace")
// with a capped message; an accepted trace writes (ToJson) JSON that reads back to a trace writing the same JSON
// (round trip), and diffs as equal to itself.
#include <cstdint>

#include "dtsim/error.h"
#include "dtsim/json_reader.h"
#include "dtsim/trace.h"
#include "dtsim/trace_diff.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  Trace trace;
  try {
    trace = TraceFromJson(ParseJsonText(fuzz::AsText(data, size), "trace", "input"));
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "trace", e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 2048, "capped message: ", std::string(e.what()).size());
    return 0;
  }
  const nlohmann::json written = ToJson(trace);
  Trace again;
  try {
    again = TraceFromJson(ParseJsonText(SafeDump(written), "trace", "written"));
  } catch (const InputError& e) {
    fuzz::Fail(StrCat("a trace dtsim accepted does not read back after writing: ", e.what()));
  }
  DTSIM_FUZZ_EXPECT(ToJson(again) == written, "round trip");
  const auto diffs = DiffTraces(trace, again);
  DTSIM_FUZZ_EXPECT(diffs.empty(), "a trace differs from its own copy: ", diffs[0].where, ": ", diffs[0].what);
  return 0;
}
