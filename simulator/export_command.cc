// dtsim export: a trace in another tool's format.
//
//   dtsim export --format perfetto trace.json out.json [--with other.json]
// Writes Chrome / Perfetto trace-event JSON (include/dtsim/trace/perfetto.h): one process per rank,
// one slice per step and per collective (estimated time for simulated runs, measured time for real
// ones), flow arrows between the ranks of each group. --with adds a second trace's ranks as further
// processes, so a simulated and a real run sit side by side in one Perfetto view. A model trace
// (`dtsim model --trace`) is exported as nested slices per rank — modules, their ops, the ops'
// collectives (include/dtsim/trace/model_perfetto.h) — beside a second model trace with --with; a
// recording as its redistributions per rank; an op trace has no export. The first file's format
// driver exports it (include/dtsim/trace/formats.h). The output is written atomically; bad input
// is exit 2 with no file written.
#include <boost/program_options.hpp>
#include <iostream>
#include <optional>
#include <utility>

#include "commands.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/formats.h"
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
  // The driver of the first file's format exports it (include/dtsim/trace/formats.h).
  TraceText first = ReadTraceText(o.files[0]);
  const TraceFormatDriver& driver = TraceFormatDriverFor(first, first);
  if (driver.to_perfetto == nullptr) {
    throw InputError("trace", StrCat("'", ExcerptText(o.files[0]), "' is ", driver.what,
                                     ": it has no Perfetto export (export the redistribution "
                                     "traces of its steps, or a recording of the run)"));
  }
  std::optional<TraceText> with;
  if (!o.with.empty()) with = ReadTraceText(o.with);
  WriteFileAtomically(out, driver.to_perfetto(first, with ? &*with : nullptr), "file");
  return 0;
}

}  // namespace dtsim::cli
