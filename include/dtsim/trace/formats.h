// The trace formats dtsim reads, as one table of drivers (as upstream keeps its op tables): each
// names its "format" value, reads and validates a file of it, writes its typed model back (the
// writer dtsim's own commands use), compares two files of it (what `dtsim trace-diff` prints),
// checks one file alone where the format can (a recording's replicas: `dtsim trace-diff RECORDING`)
// and exports it to Perfetto (`dtsim export`). The commands, `dtsim.load_trace` and the trace
// fuzzer dispatch through this table; a new format is one more driver, and
// tests/trace_formats_test.cc runs every driver through the same conformance checks.
//
// clang-format off
//   format              what                                                      write   export --with
//   dtsim-model-trace   a model run (dtsim model --trace)                          C++     another model trace
//   dtsim-recording     a recorded or simulated PyTorch run (dtsim.record, dtsim    Python  no
//                       record, dtsim run --trace, dtsim import-fr)
//   dtsim-op-trace      one op's implicit redistributions (dtsim op --trace)       C++     (no export)
//   dtsim-trace         one redistribution (dtsim redistribute / compare --trace)  C++     another trace
// clang-format on
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "dtsim/trace/op_trace.h"
#include "dtsim/trace/trace.h"

namespace dtsim {

struct TraceDiffOptions {
  size_t limit = 20;  // differences printed at most
  // Op traces: the check of each redistribution's op and argument against the running LibTorch's
  // schema (dtsim_core's TensorArgumentProblem; the trace library has no LibTorch).
  OpArgumentCheck op_argument_check;
};

struct TraceFormatDriver {
  const char* format;  // the files' "format" value
  const char* what;    // "a model run (dtsim model --trace)"
  // Reads and validates a file's text (ReadTraceText's) of this format: InputError naming the file
  // and the JSON path of the first problem.
  void (*validate)(const TraceText& text, const OpArgumentCheck& op_argument_check);
  // Reads `text` into this format's typed model and writes that back as the JSON dtsim's own
  // commands write: a file dtsim wrote comes back equal, so reader and writer agree on every field
  // (recordings: as the Python package writes them). Every format has one.
  nlohmann::json (*rewrite)(const TraceText& text, const OpArgumentCheck& op_argument_check);
  // Compares two files (at least one of this format: the other is read as this format too, and
  // refused naming its own format when it is not): prints the verdict and the differences in run
  // order to `out`; returns 0 when they agree, 1 when they differ.
  int (*diff)(TraceText& a, TraceText& b, const TraceDiffOptions& options, std::ostream& out);
  // Checks one file on its own (`dtsim trace-diff` with one file): consistency inside the run it
  // records. Prints the verdict; returns 0 consistent, 1 not, 3 when nothing could be checked.
  // nullptr: the format has no such check (a file alone says nothing of itself).
  int (*check)(TraceText& text, const TraceDiffOptions& options, std::ostream& out);
  // Perfetto / Chrome trace-event JSON of `text`, with `with` (nullptr: none) beside it;
  // InputError("with") where the format exports alone. nullptr: not exportable.
  std::string (*to_perfetto)(TraceText& text, const TraceText* with);
};

// Every driver, in the order a diff picks them (the first whose format either file has; a file
// without a known format is read as dtsim-trace, the last, whose reader names the problem).
const std::vector<TraceFormatDriver>& TraceFormatDrivers();

// The driver for a pair of files (one file: the same text twice), by the order above.
const TraceFormatDriver& TraceFormatDriverFor(const TraceText& a, const TraceText& b);

// ReadTraceText of two files at once (the second on a thread of its own); when both fail, the
// first file's error is the one thrown, as when read one after the other.
std::pair<TraceText, TraceText> ReadTraceTexts(const std::string& a, const std::string& b);

}  // namespace dtsim
