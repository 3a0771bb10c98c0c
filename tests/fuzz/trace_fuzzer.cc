// Fuzz target: the trace reader (what `dtsim trace-diff`, the viewer and `dtsim export` read):
// ParseJsonText with dtsim's limits, then TraceFromJson's validation (OpTraceFromJson's for an op
// trace, whose redistributions are whole traces; ModelTraceFromJson's for a model trace).
// Properties: any input is
// either a Trace or an InputError("trace") with a capped message; an accepted trace writes (ToJson)
// JSON that reads back to a trace writing the same JSON (round trip), and diffs as equal to itself;
// the file reader (TraceTextOf + TraceFromText) agrees with the DOM reader on every input.
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/formats.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/op_trace.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "fuzz_common.h"

namespace {

// An op or model trace: a clear refusal, or a round trip to the same JSON and no difference from
// its copy (for a model trace, not even one within rounding). `read` is the trace's reader, `diff`
// its DiffXTraces giving the differences and the count of values equal only within rounding.
template <typename TraceT, typename Read, typename Diff>
int TypedTraceCase(const nlohmann::json& json, const char* what, Read read, Diff diff) {
  using namespace dtsim;
  TraceT trace;
  try {
    trace = read(json);
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "trace", e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 4096,
                      "capped message: ", std::string(e.what()).size());
    return 0;
  }
  const nlohmann::json written = ToJson(trace);
  TraceT again;
  try {
    again = read(ParseJsonText(SafeDump(written), "trace", "written"));
  } catch (const InputError& e) {
    fuzz::Fail(StrCat(what, " dtsim accepted does not read back after writing: ", e.what()));
  }
  DTSIM_FUZZ_EXPECT(ToJson(again) == written, what, " round trip");
  int64_t rounded = -1;  // the diff must set it
  const auto diffs = diff(trace, again, &rounded);
  DTSIM_FUZZ_EXPECT(diffs.empty(), what, " differs from its own copy: ", diffs[0].where, ": ",
                    diffs[0].what);
  DTSIM_FUZZ_EXPECT(rounded == 0, what, " equals its copy only within rounding");
  return 0;
}

int OpTraceCase(const nlohmann::json& json) {
  using namespace dtsim;
  return TypedTraceCase<OpTrace>(
      json, "an op trace", [](const nlohmann::json& j) { return OpTraceFromJson(j); },
      [](const OpTrace& a, const OpTrace& b, int64_t* rounded) {
        *rounded = 0;  // op traces compare bits only
        return DiffOpTraces(a, b);
      });
}

int ModelTraceCase(const nlohmann::json& json) {
  using namespace dtsim;
  return TypedTraceCase<ModelTrace>(
      json, "a model trace", [](const nlohmann::json& j) { return ModelTraceFromJson(j); },
      [](const ModelTrace& a, const ModelTrace& b, int64_t* rounded) {
        return DiffModelTraces(a, b, 20, rounded);
      });
}

// The reader of files (TraceTextOf + TraceFromText: JSON checked without a DOM, the trace read one
// element at a time) and the DOM reader (ParseJsonText + TraceFromJson) accept the same inputs,
// build the same traces and refuse the others with the same message.
void CheckReadersAgree(std::string_view input) {
  using namespace dtsim;
  std::string dom_error, text_error;
  bool dom_op = false, text_op = false;
  std::optional<Trace> dom_trace, text_trace;
  try {
    const nlohmann::json json = ParseJsonText(input, "trace", "'input'");
    dom_op = IsOpTrace(json) || IsModelTrace(json);
    if (!dom_op) dom_trace = WithFileName("input", [&] { return TraceFromJson(json); });
  } catch (const InputError& e) {
    dom_error = e.what();
  }
  try {
    const TraceText text = TraceTextOf("input", std::string(input));
    text_op = text.format == kOpTraceFormat || text.format == kModelTraceFormat;
    if (!text_op) text_trace = TraceFromText(text);
  } catch (const InputError& e) {
    text_error = e.what();
  }
  DTSIM_FUZZ_EXPECT(dom_error == text_error, "DOM reader: ", dom_error,
                    " / text reader: ", text_error);
  DTSIM_FUZZ_EXPECT(dom_op == text_op, "op trace or not");
  DTSIM_FUZZ_EXPECT(dom_trace.has_value() == text_trace.has_value(), "accepted by one reader");
  if (dom_trace) DTSIM_FUZZ_EXPECT(ToJson(*dom_trace) == ToJson(*text_trace), "different traces");
}

// The format drivers' conformance properties (include/dtsim/trace/formats.h) on any input: a file
// its driver validates agrees with itself (a recording may report a Flight Recorder hang against
// itself, so recordings are left to the recording fuzzer), it reads back as itself once its writer
// wrote it and compares with that as with itself, and its Perfetto export, where the format has
// one, is JSON or an input error.
void CheckDriver(std::string_view input) {
  using namespace dtsim;
  TraceText text;
  try {
    text = TraceTextOf("input", std::string(input));
    TraceFormatDriverFor(text, text).validate(text, nullptr);
  } catch (const InputError&) {
    return;
  }
  const TraceFormatDriver& driver = TraceFormatDriverFor(text, text);
  TraceText self_a = text, self_b = text;
  std::ostringstream self_out;
  const int self_diff = driver.diff(self_a, self_b, TraceDiffOptions{}, self_out);
  if (std::string_view(driver.format) != kRecordingFormat) {
    DTSIM_FUZZ_EXPECT(self_diff == 0, "a ", driver.format,
                      " file differs from itself: ", self_out.str());
  }
  // What the reader accepted, the writer writes, the reader reads back to the same model, and it
  // compares with the input as the input compares with itself.
  const nlohmann::json written = driver.rewrite(text, nullptr);
  TraceText again;
  try {
    again = TraceTextOf("input (written back)", written.dump());
    DTSIM_FUZZ_EXPECT(driver.rewrite(again, nullptr) == written, "a ", driver.format,
                      " file written back reads as another");
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(false, "a ", driver.format, " file written back is refused: ", e.what());
    return;
  }
  TraceText a = text;
  std::ostringstream out;
  DTSIM_FUZZ_EXPECT(driver.diff(a, again, TraceDiffOptions{}, out) == self_diff, "a ",
                    driver.format, " file compares otherwise with itself written back: ", out.str(),
                    " / with itself: ", self_out.str());
  if (driver.to_perfetto != nullptr) {
    TraceText c = text;
    try {
      const nlohmann::json exported = nlohmann::json::parse(driver.to_perfetto(c, nullptr));
      DTSIM_FUZZ_EXPECT(exported.contains("traceEvents"), "an export without traceEvents");
    } catch (const InputError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  CheckReadersAgree(fuzz::AsText(data, size));
  CheckDriver(fuzz::AsText(data, size));
  Trace trace;
  try {
    const nlohmann::json json = ParseJsonText(fuzz::AsText(data, size), "trace", "input");
    if (IsOpTrace(json)) return OpTraceCase(json);
    if (IsModelTrace(json)) return ModelTraceCase(json);
    trace = TraceFromJson(json);
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "trace", e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 2048,
                      "capped message: ", std::string(e.what()).size());
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
  DTSIM_FUZZ_EXPECT(diffs.empty(), "a trace differs from its own copy: ", diffs[0].where, ": ",
                    diffs[0].what);
  return 0;
}
