// dtsim export: a trace in another tool's format.
//
//   dtsim export --format perfetto trace.json out.json [--with other.json]
// Writes Chrome / Perfetto trace-event JSON (include/dtsim/trace/perfetto.h): one process per rank,
// one slice per step and per collective (estimated time for simulated runs, measured time for real
// ones), flow arrows between the ranks of each group. --with adds a second trace's ranks as further
// processes, so a simulated and a real run sit side by side in one Perfetto view. A model trace
// (`dtsim model --trace`) is exported as nested slices per rank — modules, their ops, the ops'
// collectives (include/dtsim/trace/model_perfetto.h) — beside a second model trace with --with; a
// recording as its redistributions per rank. The output is written atomically; bad input is exit 2
// with no file written.
#include <boost/program_options.hpp>
#include <iostream>
#include <utility>

#include "commands.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/model_perfetto.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/perfetto.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"
#include "file_arguments.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim export`; defaults in comments.
struct ExportOptions {
  std::string format;              // required: "perfetto"
  std::vector<std::string> files;  // the trace and the output path
  std::string with;                // "": one trace; else a second trace exported beside the first
};

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int RunExport(const Args& args) {
  ExportOptions o;
  po::options_description desc("dtsim export options");
  desc.add_options()("help,h", "show this help")(
      "format", po::value(&o.format),
      "output format: perfetto (Chrome / Perfetto trace-event JSON)")(
      "with", po::value(&o.with), "a second trace (e.g. the real run) to export beside the first");
  const po::variables_map vm = ParseOptionsWithFiles(args, desc, &o.files);
  if (vm.count("help")) {
    std::cout << "usage: dtsim export --format perfetto trace.json out.json [--with other.json]\n"
                 "  trace.json: a redistribution trace, a model trace (dtsim model --trace: "
                 "modules, ops\n"
                 "  and their collectives nested per rank) or a recording (dtsim.record)\n"
              << desc;
    return 0;
  }
  if (o.format.empty()) throw InputError("format", "missing: give --format perfetto");
  if (o.format != "perfetto") {
    throw InputError(
        "format", StrCat("'", ExcerptText(o.format), "' is not supported (supported: perfetto)"));
  }
  if (o.files.size() != 2) {
    throw InputError(
        "file",
        StrCat("give the trace and the output file (dtsim export --format perfetto trace.json "
               "out.json), got ",
               o.files.size(), " file", o.files.size() == 1 ? "" : "s"));
  }
  const std::string& out = o.files[1];
  RunFiles files;  // the output may be no input, however spelled
  files.Input(o.files[0], "file");
  if (!o.with.empty()) files.Input(o.with, "with");
  files.Output(out, "file");
  // A recording of an upstream run (dtsim.record): its redistributions per rank, as measured.
  TraceText first_text = ReadTraceText(o.files[0]);
  if (first_text.format == kRecordingFormat) {
    if (!o.with.empty()) throw InputError("with", "not with a recording (export it alone)");
    const Recording rec = RecordingFromText(std::exchange(first_text, {}));
    WriteFileAtomically(out, RecordingToPerfetto(rec), "file");
    return 0;
  }
  // A model trace (dtsim model --trace): modules, ops and collectives nested per rank; a second
  // model trace (--with) beside it.
  if (first_text.format == kModelTraceFormat) {
    const ModelTrace first = WithFileName(o.files[0], [&] {
      return ModelTraceFromJson(ParseTraceText(std::exchange(first_text, {})));
    });
    std::vector<ModelPerfettoSource> sources = {{&first, ""}};
    ModelTrace second;
    if (!o.with.empty()) {
      const TraceText second_text = ReadTraceText(o.with);
      if (second_text.format != kModelTraceFormat) {
        throw InputError("with", StrCat("'", ExcerptText(o.with), "' is not a model trace (format ",
                                        second_text.format.empty()
                                            ? "missing"
                                            : "\"" + ExcerptText(second_text.format) + "\"",
                                        "): a model trace is exported beside another model trace"));
      }
      second =
          WithFileName(o.with, [&] { return ModelTraceFromJson(ParseTraceText(second_text)); });
      sources[0].label = StrCat(BackendLabel(first.meta), " ", BaseName(o.files[0]));
      sources.push_back({&second, StrCat(BackendLabel(second.meta), " ", BaseName(o.with))});
    }
    WriteFileAtomically(out, SafeDump(ModelTraceToPerfetto(sources)) + "\n", "file");
    return 0;
  }
  const Trace first = TraceFromText(std::exchange(first_text, {}));
  std::vector<PerfettoSource> sources = {{&first, ""}};
  Trace second;
  if (!o.with.empty()) {
    second = ReadTrace(o.with);
    sources[0].label = StrCat(BackendLabel(first), " ", BaseName(o.files[0]));
    sources.push_back({&second, StrCat(BackendLabel(second), " ", BaseName(o.with))});
  }
  WriteFileAtomically(out, SafeDump(ToPerfetto(sources)) + "\n", "file");
  return 0;
}

}  // namespace dtsim::cli
