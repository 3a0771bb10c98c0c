// dtsim trace-diff: where two traces of a redistribution part (simulated vs real ranks, or two
// builds).
//
//   dtsim trace-diff A.json B.json [--limit 20]
// Both traces of a redistribution (dtsim-trace), of an op (dtsim-op-trace), of a model
// (dtsim-model-trace), or two recordings (dtsim-recording: dtsim.record, dtsim run --trace).
// Prints "traces agree" (exit 0) or the differences in run order, the first being where the runs
// part (exit 1). Unreadable or invalid traces are input errors (exit 2).
#include <boost/program_options.hpp>
#include <exception>
#include <iostream>
#include <thread>
#include <utility>

#include "commands.h"
#include "dtsim/core/op_schema.h"
#include "dtsim/layout/error.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/op_trace.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "file_arguments.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// f() and g() at once, g on a thread of its own (the two files of a diff are read in parallel).
// When both throw, f's error is the one thrown (the first file's, as when read one after the
// other).
template <typename F, typename G>
auto BothAtOnce(F&& f, G&& g) -> std::pair<decltype(f()), decltype(g())> {
  decltype(g()) second{};
  std::exception_ptr second_error;
  std::thread thread([&] {
    try {
      second = g();
    } catch (...) {
      second_error = std::current_exception();
    }
  });
  decltype(f()) first{};
  std::exception_ptr first_error;
  try {
    first = f();
  } catch (...) {
    first_error = std::current_exception();
  }
  thread.join();
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
  return {std::move(first), std::move(second)};
}

// What an agreeing verdict says of the run's collectives (`dtsim run --trace` lists them): equal
// where both recordings list them, else not compared.
std::string RunCollectivesNote(const Recording& a, const Recording& b) {
  if (a.collectives && b.collectives)
    return StrCat("; the run's ", a.collectives->size(), " collectives equal");
  if (a.collectives || b.collectives) {
    return StrCat("; the run's collectives not compared: only the ",
                  a.collectives ? "first" : "second", " recording lists them");
  }
  return "";
}

// Two recordings that both have events: the first op or collective where each rank's runs part
// (the cause named), what diverged after it, then the redistributions' differences (structure;
// their values are the events'). Exit 0 when nothing differs, else 1.
int PrintEventDiff(const Recording& a, const Recording& b,
                   const std::vector<TraceDifference>& diffs, size_t limit) {
  using Cause = EventDivergence::Cause;
  const bool fr = a.backend == "flight-recorder" || b.backend == "flight-recorder";
  const EventDiff ev = DiffRunEvents(*a.events, *b.events, fr);
  const bool differ = !ev.first.empty() || !ev.ranks_only_in_a.empty() ||
                      !ev.ranks_only_in_b.empty() || !diffs.empty();
  // The same race in both runs: no divergence, but the program's bug, said after the verdict.
  auto races = [&ev, limit] {
    size_t shown = 0;
    for (const EventDivergence& d : ev.races_in_both) {
      if (shown++ == limit) {
        std::cout << "  … " << ev.races_in_both.size() - limit << " more races\n";
        break;
      }
      std::cout << "  race in the program: rank " << d.rank << ", event " << d.index << ": "
                << d.where << ": " << d.what << "\n";
    }
  };
  if (!differ && fr) {
    std::cout << "recordings agree: " << ev.compared
              << " collectives in the same order, with the same kinds, groups and input sizes on "
                 "every rank, every one completed; values not checked (a Flight Recorder dump "
                 "records none)\n";
    races();
    return 0;
  }
  if (!differ) {
    std::cout << "recordings agree: " << ev.compared
              << " events (every rank's DTensor ops and collectives) in the same order with equal "
                 "inputs and outputs";
    if (ev.rounded > 0) {
      std::cout << " (" << ev.rounded
                << " equal within float rounding, not bit for bit: summed in another order)";
    }
    if (ev.not_checked > 0)
      std::cout << "; " << ev.not_checked << " events' outputs not recorded, not checked";
    std::cout << "; " << a.redistributions.size() << " redistributions agree in structure"
              << RunCollectivesNote(a, b) << "\n";
    races();
    return 0;
  }
  auto cause = [fr](Cause c) {
    switch (c) {
      case Cause::kStructure:
        return "structure";
      case Cause::kComputed:
        return "computed";
      case Cause::kInput:
        return "input";
      case Cause::kLength:
        return fr ? "missing" : "length";
      case Cause::kPending:
        return "never completed";
      case Cause::kRace:
        return "read before wait";
    }
    return "";
  };
  if (!ev.first.empty()) {
    const EventDivergence& f = ev.first.front();
    std::cout << "recordings differ; first at rank " << f.rank << ", event " << f.index << ": "
              << f.where << "\n";
    size_t shown = 0;
    for (const EventDivergence& d : ev.first) {
      if (shown++ == limit) {
        std::cout << "  … " << ev.first.size() - limit << " more ranks\n";
        break;
      }
      std::cout << "  rank " << d.rank << ", event " << d.index << " (" << cause(d.cause)
                << "): " << d.where << ": " << d.what << "\n";
    }
    std::string by_rank;
    for (const auto& [rank, n] : ev.differing_by_rank)
      by_rank += StrCat(by_rank.empty() ? "" : ", ", "rank ", rank, ": ", n);
    if (ev.differing > 0) {
      std::cout << "  after it: " << ev.differing << " events differ (" << by_rank << "); ";
    } else {
      std::cout << "  no event's values differ; ";
    }
    std::cout << ev.compared << " compared";
    if (ev.rounded > 0) std::cout << ", " << ev.rounded << " equal within float rounding";
    if (ev.not_checked > 0) std::cout << ", " << ev.not_checked << " not checked (no output)";
    std::cout << "\n";
  } else {
    std::cout << "recordings differ:\n";
  }
  for (int64_t r : ev.ranks_only_in_a)
    std::cout << "  rank " << r << ": events only in the first\n";
  for (int64_t r : ev.ranks_only_in_b)
    std::cout << "  rank " << r << ": events only in the second\n";
  for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
  races();
  return 1;
}

}  // namespace

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
  // Not structured bindings: lambdas below capture them (C++17).
  std::pair<TraceText, TraceText> texts =
      BothAtOnce([&] { return ReadTraceText(files[0]); }, [&] { return ReadTraceText(files[1]); });
  TraceText& ta = texts.first;
  TraceText& tb = texts.second;
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
    // Read from the text: events one at a time, not the whole recording as a DOM.
    const std::pair<Recording, Recording> both =
        BothAtOnce([&] { return RecordingFromText(ta); }, [&] { return RecordingFromText(tb); });
    const Recording& a = both.first;
    const Recording& b = both.second;
    const std::vector<TraceDifference> diffs = DiffRecordings(a, b, static_cast<size_t>(limit));
    if (a.events && b.events) {
      // A Flight Recorder import holds collectives only: no redistributions to compare.
      const bool fr = a.backend == "flight-recorder" || b.backend == "flight-recorder";
      return PrintEventDiff(a, b, fr ? std::vector<TraceDifference>{} : diffs,
                            static_cast<size_t>(limit));
    }
    if (diffs.empty()) {
      std::cout << "recordings agree: " << a.redistributions.size() << " redistribution"
                << (a.redistributions.size() == 1 ? "" : "s")
                << ", their collectives and every rank's shard equal (hashes compared where both "
                   "recordings have them)"
                << RunCollectivesNote(a, b) << "\n";
      return 0;
    }
    if (a.events || b.events) {
      std::cout << "note: ops and collectives not compared: only the "
                << (a.events ? "first" : "second") << " recording has events\n";
    }
    std::cout << "recordings differ; first at " << diffs[0].where << ":\n";
    for (const TraceDifference& d : diffs) std::cout << "  " << d.where << ": " << d.what << "\n";
    return 1;
  }
  if (ta.format == kOpTraceFormat || tb.format == kOpTraceFormat) {
    const nlohmann::json ja = ParseTraceText(ta);
    const nlohmann::json jb = ParseTraceText(tb);
    const OpTrace a =
        WithFileName(files[0], [&] { return OpTraceFromJson(ja, TensorArgumentProblem); });
    const OpTrace b =
        WithFileName(files[1], [&] { return OpTraceFromJson(jb, TensorArgumentProblem); });
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
