// dtsim trace-diff: where two traces of a redistribution part (simulated vs real ranks, or two
// builds).
//
//   dtsim trace-diff A.json B.json [--limit 20]
// Both traces of a redistribution (dtsim-trace), of an op (dtsim-op-trace), of a model
// (dtsim-model-trace), or two recordings (dtsim-recording: dtsim.record, dtsim run --trace).
// Prints "traces agree" (exit 0) or the differences in run order, the first being where the runs
// part (exit 1). Unreadable or invalid traces are input errors (exit 2).
#include <boost/program_options.hpp>
#include <iostream>
#include <utility>

#include "commands.h"
#include "dtsim/layout/error.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/op_trace.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "file_arguments.h"

namespace po = boost::program_options;

namespace dtsim::cli {

int RunTraceDiff(const Args& args) {
  std::vector<std::string> files;
  int64_t limit = 20;
  po::options_description desc("dtsim trace-diff options");
  desc.add_options()("help,h", "show this help")("limit", po::value(&limit)->default_value(limit),
                                                 "print at most this many differences");
  const po::variables_map vm = ParseOptionsWithFiles(args, desc, &files);
  if (vm.count("help")) {
    std::cout << "usage: dtsim trace-diff A.json B.json [--limit 20]\n" << desc;
    return 0;
  }
  if (files.size() != 2)
    throw InputError("file", StrCat("give two trace files, got ", files.size()));
  if (limit < 1 || limit > 1000000) {
    throw InputError("limit", StrCat(limit, " is out of range: print 1 to 1000000 differences"));
  }
  // Two op traces (dtsim op --trace) or two traces of a redistribution. Both files are read and
  // checked as JSON first; a trace is then validated without building its JSON (about its size
  // again in memory), the first text freed before the second is read.
  TraceText ta = ReadTraceText(files[0]);
  TraceText tb = ReadTraceText(files[1]);
  if (ta.format == kModelTraceFormat || tb.format == kModelTraceFormat) {
    const ModelTrace a =
        WithFileName(files[0], [&] { return ModelTraceFromJson(ParseTraceText(ta)); });
    const ModelTrace b =
        WithFileName(files[1], [&] { return ModelTraceFromJson(ParseTraceText(tb)); });
    int64_t rounded = 0;
    const std::vector<TraceDifference> diffs =
        DiffModelTraces(a, b, static_cast<size_t>(limit), &rounded);
    if (diffs.empty()) {
      std::cout << "model traces agree: " << a.events.size()
                << " events (modules, ops, collectives) in the same order, every rank's values at "
                   "every module boundary equal";
      if (rounded > 0) {
        std::cout << " (" << rounded << " tensor" << (rounded == 1 ? "" : "s")
                  << " equal within float rounding, not bit for bit: reductions summed in another "
                     "order)";
      }
      std::cout << "\n";
      return 0;
    }
    std::cout << "model traces differ; first at " << diffs[0].where << ":\n";
    for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
    return 1;
  }
  if (ta.format == kRecordingFormat || tb.format == kRecordingFormat) {
    const nlohmann::json ja = ParseTraceText(ta);
    const nlohmann::json jb = ParseTraceText(tb);
    const Recording a = WithFileName(files[0], [&] { return RecordingFromJson(ja); });
    const Recording b = WithFileName(files[1], [&] { return RecordingFromJson(jb); });
    const std::vector<TraceDifference> diffs = DiffRecordings(a, b, static_cast<size_t>(limit));
    if (diffs.empty()) {
      std::cout << "recordings agree: " << a.redistributions.size() << " redistribution"
                << (a.redistributions.size() == 1 ? "" : "s")
                << ", their collectives and every rank's shard equal (hashes compared where both "
                   "recordings have them)";
      if (a.collectives && b.collectives) {
        std::cout << "; the run's " << a.collectives->size() << " collectives equal";
      } else if (a.collectives || b.collectives) {
        std::cout << "; the run's collectives not compared: only the "
                  << (a.collectives ? "first" : "second") << " recording lists them";
      }
      std::cout << "\n";
      return 0;
    }
    std::cout << "recordings differ; first at " << diffs[0].where << ":\n";
    for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
    return 1;
  }
  if (ta.format == kOpTraceFormat || tb.format == kOpTraceFormat) {
    const nlohmann::json ja = ParseTraceText(ta);
    const nlohmann::json jb = ParseTraceText(tb);
    const OpTrace a = WithFileName(files[0], [&] { return OpTraceFromJson(ja); });
    const OpTrace b = WithFileName(files[1], [&] { return OpTraceFromJson(jb); });
    const std::vector<TraceDifference> diffs = DiffOpTraces(a, b, static_cast<size_t>(limit));
    if (diffs.empty()) {
      std::cout << "op traces agree: " << a.op << ", " << a.redistributions.size()
                << " implicit redistribution" << (a.redistributions.size() == 1 ? "" : "s")
                << ", every collective and every rank's shard equal\n";
      return 0;
    }
    std::cout << "op traces differ; first at " << diffs[0].where << ":\n";
    for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
    return 1;
  }
  const Trace a = TraceFromText(std::exchange(ta, {}));
  const Trace b = TraceFromText(std::exchange(tb, {}));
  const std::vector<TraceDifference> diffs = DiffTraces(a, b, static_cast<size_t>(limit));
  if (diffs.empty()) {
    std::cout << "traces agree: " << a.steps.size() << " step" << (a.steps.size() == 1 ? "" : "s")
              << ", every collective and every rank's shard equal\n";
    return 0;
  }
  std::cout << "traces differ; first at " << diffs[0].where << ":\n";
  for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
  return 1;
}

}  // namespace dtsim::cli
