// The trace format drivers (see include/dtsim/trace/formats.h).
#include "dtsim/trace/formats.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>
#include <utility>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/model_perfetto.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/perfetto.h"
#include "dtsim/trace/recording.h"
#include "dtsim/trace/run_events.h"
#include "dtsim/trace/trace_diff.h"

namespace dtsim {
namespace {

// f() and g() at once, g on a thread of its own (the two files of a diff are read in parallel).
// When both throw, f's error is the one thrown (the first file's, as when read one after the
// other).
template <typename F, typename G>
auto BothAtOnce(F&& f, G&& g) -> std::pair<decltype(f()), decltype(g())> {
  std::optional<decltype(g())> second;
  std::exception_ptr second_error;
  std::thread thread([&] {
    try {
      second.emplace(g());
    } catch (...) {
      second_error = std::current_exception();
    }
  });
  std::optional<decltype(f())> first;
  std::exception_ptr first_error;
  try {
    first.emplace(f());
  } catch (...) {
    first_error = std::current_exception();
  }
  thread.join();
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
  return {std::move(*first), std::move(*second)};
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

// A divergence's cause as trace-diff prints it ("computed"); `fr`: one side is a Flight Recorder
// import (a shorter rank is "missing" a collective).
const char* CauseText(EventDivergence::Cause c, bool fr) {
  using Cause = EventDivergence::Cause;
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
}

// Two recordings that both have events: the first op or collective where each rank's runs part
// (the cause named), what diverged after it, then the redistributions' differences (structure;
// their values are the events'). Exit 0 when nothing differs, else 1.
int PrintEventDiff(const Recording& a, const Recording& b, const EventDiff& ev,
                   const std::vector<TraceDifference>& diffs, size_t limit, std::ostream& out) {
  using Cause = EventDivergence::Cause;
  const bool fr = a.backend == "flight-recorder" || b.backend == "flight-recorder";
  const bool differ = !ev.first.empty() || !ev.ranks_only_in_a.empty() ||
                      !ev.ranks_only_in_b.empty() || !diffs.empty();
  // The same race in both runs: no divergence, but the program's bug, said after the verdict.
  auto races = [&ev, &out, limit] {
    size_t shown = 0;
    for (const EventDivergence& d : ev.races_in_both) {
      if (shown++ == limit) {
        out << "  … " << ev.races_in_both.size() - limit << " more races\n";
        break;
      }
      out << "  race in the program: rank " << d.rank << ", event " << d.index << ": " << d.where
          << ": " << d.what << "\n";
    }
  };
  if (!differ && fr) {
    out << "recordings agree: " << ev.compared
        << " collectives in the same order, with the same kinds, groups and input sizes on "
           "every rank, every one completed; values not checked (a Flight Recorder dump "
           "records none)\n";
    races();
    return 0;
  }
  if (!differ) {
    out << "recordings agree: " << ev.compared
        << " events (every rank's DTensor ops and collectives) in the same order with equal "
           "inputs and outputs";
    if (ev.rounded > 0) {
      out << " (" << ev.rounded
          << " equal within float rounding, not bit for bit: summed in another order)";
    }
    if (ev.not_checked > 0)
      out << "; " << ev.not_checked << " events' outputs not recorded, not checked";
    out << "; " << a.redistributions.size() << " redistributions agree in structure"
        << RunCollectivesNote(a, b) << "\n";
    races();
    return 0;
  }
  auto cause = [fr](Cause c) { return CauseText(c, fr); };
  if (!ev.first.empty()) {
    const EventDivergence& f = ev.first.front();
    out << "recordings differ; first at rank " << f.rank << ", event " << f.index << ": " << f.where
        << "\n";
    size_t shown = 0;
    for (const EventDivergence& d : ev.first) {
      if (shown++ == limit) {
        out << "  … " << ev.first.size() - limit << " more ranks\n";
        break;
      }
      out << "  rank " << d.rank << ", event " << d.index << " (" << cause(d.cause)
          << "): " << d.where << ": " << d.what << "\n";
    }
    std::string by_rank;
    for (const auto& [rank, n] : ev.differing_by_rank)
      by_rank += StrCat(by_rank.empty() ? "" : ", ", "rank ", rank, ": ", n);
    if (ev.differing > 0) {
      out << "  after it: " << ev.differing << " events differ (" << by_rank << "); ";
    } else {
      out << "  no event's values differ; ";
    }
    out << ev.compared << " compared";
    if (ev.rounded > 0) out << ", " << ev.rounded << " equal within float rounding";
    if (ev.not_checked > 0) out << ", " << ev.not_checked << " not checked (no output)";
    out << "\n";
  } else {
    out << "recordings differ:\n";
  }
  for (int64_t r : ev.ranks_only_in_a) out << "  rank " << r << ": events only in the first\n";
  for (int64_t r : ev.ranks_only_in_b) out << "  rank " << r << ": events only in the second\n";
  for (const TraceDifference& d : diffs) out << "  " << d.where << ": " << d.what << "\n";
  races();
  return 1;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// ---- dtsim-model-trace ----
ModelTrace ReadModelTrace(const TraceText& text) {
  return WithFileName(text.path, [&] { return ModelTraceFromJson(ParseTraceText(text)); });
}

void ValidateModelTrace(const TraceText& text, const OpArgumentCheck&) { ReadModelTrace(text); }
nlohmann::json RewriteModelTrace(const TraceText& text, const OpArgumentCheck&) {
  return ToJson(ReadModelTrace(text));
}

int DiffModelTraceFiles(TraceText& ta, TraceText& tb, const TraceDiffOptions& options,
                        std::ostream& out) {
  const ModelTrace a =
      WithFileName(ta.path, [&] { return ModelTraceFromJson(ParseTraceText(ta)); });
  const ModelTrace b =
      WithFileName(tb.path, [&] { return ModelTraceFromJson(ParseTraceText(tb)); });
  int64_t rounded = 0;
  const std::vector<TraceDifference> diffs = DiffModelTraces(a, b, options.limit, &rounded);
  if (diffs.empty()) {
    out << "model traces agree: " << a.events.size()
        << " events (modules, ops, collectives) in the same order, every rank's values at "
           "every module boundary equal";
    if (rounded > 0) {
      out << " (" << rounded << " tensor" << (rounded == 1 ? "" : "s")
          << " equal within float rounding, not bit for bit: reductions summed in another "
             "order)";
    }
    out << "\n";
    return 0;
  }
  out << "model traces differ; first at " << diffs[0].where << ":\n";
  for (const TraceDifference& d : diffs) out << "  " << d.where << ": " << d.what << "\n";
  return 1;
}

std::string ModelTraceToPerfettoText(TraceText& text, const TraceText* with) {
  const ModelTrace first = ReadModelTrace(text);
  std::vector<ModelPerfettoSource> sources = {{&first, ""}};
  ModelTrace second;
  if (with != nullptr) {
    if (with->format != kModelTraceFormat) {
      throw InputError(
          "with", StrCat("'", ExcerptText(with->path), "' is not a model trace (format ",
                         with->format.empty() ? "missing" : "\"" + ExcerptText(with->format) + "\"",
                         "): a model trace is exported beside another model trace"));
    }
    second = ReadModelTrace(*with);
    sources[0].label = StrCat(BackendLabel(first.meta), " ", BaseName(text.path));
    sources.push_back({&second, StrCat(BackendLabel(second.meta), " ", BaseName(with->path))});
  }
  return SafeDump(ModelTraceToPerfetto(sources)) + "\n";
}

// ---- dtsim-recording ----
void ValidateRecording(const TraceText& text, const OpArgumentCheck&) { RecordingFromText(text); }

nlohmann::json RewriteRecording(const TraceText& text, const OpArgumentCheck&) {
  return ToJson(RecordingFromText(text));
}

// Two recordings with events, neither a Flight Recorder import: their events compared one rank at a
// time (both files' events of a rank read at once when they are large), so what is held is the
// two texts and one rank's events of each. nullopt when a problem of either file was met: the
// caller reads both whole, which gives the problem RecordingFromText names first.
std::optional<int> DiffRecordingsByRank(const TraceText& ta, const TraceText& tb,
                                        const TraceDiffOptions& options, std::ostream& out) {
  constexpr size_t kParallelBytes = size_t{1} << 20;  // below it, a thread costs more than it saves
  try {
    std::pair<RecordingReader, RecordingReader> readers =
        BothAtOnce([&] { return RecordingReader(ta); }, [&] { return RecordingReader(tb); });
    const RecordingReader& ra = readers.first;
    const RecordingReader& rb = readers.second;
    if (!ra.has_events() || !rb.has_events() || ra.recording().backend == "flight-recorder" ||
        rb.recording().backend == "flight-recorder") {
      return std::nullopt;
    }
    const std::vector<int64_t> ranks_a = ra.EventRanks();
    const std::vector<int64_t> ranks_b = rb.EventRanks();
    auto has = [](const std::vector<int64_t>& ranks, int64_t rank) {
      return std::binary_search(ranks.begin(), ranks.end(), rank);
    };
    const EventDiff ev = DiffRunEventsByRank(ranks_a, ranks_b, [&](int64_t rank) {
      const bool in_a = has(ranks_a, rank), in_b = has(ranks_b, rank);
      if (in_a && in_b && ra.RankEventsBytes(rank) + rb.RankEventsBytes(rank) > kParallelBytes) {
        return BothAtOnce([&] { return ra.RankEvents(rank); }, [&] { return rb.RankEvents(rank); });
      }
      return RankEventsPair(in_a ? ra.RankEvents(rank) : std::vector<RunEvent>{},
                            in_b ? rb.RankEvents(rank) : std::vector<RunEvent>{});
    });
    // Present, as in a whole read (DiffRecordings compares the redistributions' hashes only
    // without events on both sides), but empty: the events were compared above.
    Recording a = std::move(readers.first).TakeRecording();
    Recording b = std::move(readers.second).TakeRecording();
    a.events.emplace();
    b.events.emplace();
    return PrintEventDiff(a, b, ev, DiffRecordings(a, b, options.limit), options.limit, out);
  } catch (const InputError&) {
    return std::nullopt;
  }
}

int DiffRecordingFiles(TraceText& ta, TraceText& tb, const TraceDiffOptions& options,
                       std::ostream& out) {
  std::ostringstream by_rank;
  if (const std::optional<int> code = DiffRecordingsByRank(ta, tb, options, by_rank)) {
    out << by_rank.str();
    return *code;
  }
  // Read from the text: events one at a time, not the whole recording as a DOM.
  const std::pair<Recording, Recording> both =
      BothAtOnce([&] { return RecordingFromText(ta); }, [&] { return RecordingFromText(tb); });
  const Recording& a = both.first;
  const Recording& b = both.second;
  const std::vector<TraceDifference> diffs = DiffRecordings(a, b, options.limit);
  if (a.events && b.events) {
    // A Flight Recorder import holds collectives only: no redistributions to compare.
    const bool fr = a.backend == "flight-recorder" || b.backend == "flight-recorder";
    return PrintEventDiff(a, b, DiffRunEvents(*a.events, *b.events, fr),
                          fr ? std::vector<TraceDifference>{} : diffs, options.limit, out);
  }
  if (diffs.empty()) {
    out << "recordings agree: " << a.redistributions.size() << " redistribution"
        << (a.redistributions.size() == 1 ? "" : "s")
        << ", their collectives and every rank's shard equal (hashes compared where both "
           "recordings have them)"
        << RunCollectivesNote(a, b) << "\n";
    return 0;
  }
  if (a.events || b.events) {
    out << "note: ops and collectives not compared: only the " << (a.events ? "first" : "second")
        << " recording has events\n";
  }
  out << "recordings differ; first at " << diffs[0].where << ":\n";
  for (const TraceDifference& d : diffs) out << "  " << d.where << ": " << d.what << "\n";
  return 1;
}

// One recording: consistency inside the run. Every redistribution's replicas before and after
// (ReplicaMismatches, as dtsim replay checks them) and every DTensor op's (CheckReplicas: the
// events' meshes). Exit 0 consistent, 1 an odd rank out, 3 nothing could be checked.
int CheckRecordingFile(TraceText& text, const TraceDiffOptions& options, std::ostream& out) {
  const Recording rec = RecordingFromText(std::exchange(text, {}));
  std::vector<std::string> redistributions;
  for (const RedistributionEvent& r : rec.redistributions) {
    for (const ReplicaMismatch& m : ReplicaMismatches(r)) {
      redistributions.push_back(
          StrCat("redistribution #", r.index, " (", r.call, r.op.empty() ? "" : " " + r.op, ") ",
                 m.before ? "before" : "after", ": rank ", m.rank, " holds ", m.hash,
                 ", its replicas (ranks ", IntListToString(m.replicas), ") hold ", m.replica_hash));
    }
  }
  std::optional<ReplicaCheck> ops;
  std::string why_not;  // why the ops' replicas are not checked
  if (!rec.events) {
    why_not = "no events recorded (record with ops: dtsim record, dtsim.record(ops=True))";
  } else if (rec.backend == "flight-recorder") {
    why_not = "a Flight Recorder dump records no values";
  } else if (rec.meshes.empty()) {
    why_not = "its events have no device meshes (recorded before dtsim recorded them)";
  } else {
    ops = CheckReplicas(*rec.events, rec.meshes);
  }
  const bool odd = !redistributions.empty() || (ops && !ops->first.empty());
  const bool checked = !rec.redistributions.empty() || (ops && ops->tensors > 0);
  std::string ops_text =
      why_not.empty() ? "" : StrCat("DTensor ops' replicas not checked: ", why_not);
  if (ops) {
    ops_text = StrCat(ops->ops, " DTensor ops on ", rec.meshes.size(), " mesh",
                      rec.meshes.size() == 1 ? "" : "es", ", ", ops->tensors,
                      " arguments and results with replicas compared");
    if (ops->not_checked > 0)
      ops_text += StrCat(" (", ops->not_checked, " not checked: no mesh or no hash)");
  }
  const std::string redistributions_text =
      StrCat(rec.redistributions.size(), " redistribution",
             rec.redistributions.size() == 1 ? "" : "s", " checked before and after");
  if (!odd) {
    if (!checked) {
      out << "recording: replicas not checked: " << (ops_text.empty() ? why_not : ops_text)
          << "; no redistribution recorded\n";
      return 3;
    }
    out << "recording consistent: every replica compared is equal; " << ops_text << "; "
        << redistributions_text << "\n";
    return 0;
  }
  if (ops && !ops->first.empty()) {
    const EventDivergence& f = ops->first.front();
    out << "recording inconsistent; first at rank " << f.rank << ", event " << f.index << ": "
        << f.where << "\n";
  } else {
    out << "recording inconsistent:\n";
  }
  if (ops) {
    size_t shown = 0;
    for (const EventDivergence& d : ops->first) {
      if (shown++ == options.limit) {
        out << "  … " << ops->first.size() - options.limit << " more ranks\n";
        break;
      }
      out << "  rank " << d.rank << ", event " << d.index << " (" << CauseText(d.cause, false)
          << "): " << d.where << ": " << d.what << "\n";
    }
    out << "  " << ops->odd << " of " << ops->tensors
        << " arguments and results with replicas have an odd rank out; " << ops_text << "\n";
  } else if (!why_not.empty()) {
    out << "  " << ops_text << "\n";
  }
  for (size_t i = 0; i < redistributions.size() && i < options.limit; ++i)
    out << "  " << redistributions[i] << "\n";
  return 1;
}

std::string RecordingToPerfettoText(TraceText& text, const TraceText* with) {
  if (with != nullptr) throw InputError("with", "not with a recording (export it alone)");
  return RecordingToPerfetto(RecordingFromText(std::exchange(text, {})));
}

// ---- dtsim-op-trace ----
void ValidateOpTrace(const TraceText& text, const OpArgumentCheck& check) {
  const nlohmann::json json = ParseTraceText(text);
  WithFileName(text.path, [&] { return OpTraceFromJson(json, check); });
}

nlohmann::json RewriteOpTrace(const TraceText& text, const OpArgumentCheck& check) {
  const nlohmann::json json = ParseTraceText(text);
  return ToJson(WithFileName(text.path, [&] { return OpTraceFromJson(json, check); }));
}

int DiffOpTraceFiles(TraceText& ta, TraceText& tb, const TraceDiffOptions& options,
                     std::ostream& out) {
  const nlohmann::json ja = ParseTraceText(ta);
  const nlohmann::json jb = ParseTraceText(tb);
  const OpTrace a =
      WithFileName(ta.path, [&] { return OpTraceFromJson(ja, options.op_argument_check); });
  const OpTrace b =
      WithFileName(tb.path, [&] { return OpTraceFromJson(jb, options.op_argument_check); });
  const std::vector<TraceDifference> diffs = DiffOpTraces(a, b, options.limit);
  if (diffs.empty()) {
    out << "op traces agree: " << a.op << ", " << a.redistributions.size()
        << " implicit redistribution" << (a.redistributions.size() == 1 ? "" : "s")
        << ", every collective and every rank's shard equal\n";
    return 0;
  }
  out << "op traces differ; first at " << diffs[0].where << ":\n";
  for (const TraceDifference& d : diffs) out << "  " << d.where << ": " << d.what << "\n";
  return 1;
}

// ---- dtsim-trace ----
void ValidateTrace(const TraceText& text, const OpArgumentCheck&) { TraceFromText(text); }
nlohmann::json RewriteTrace(const TraceText& text, const OpArgumentCheck&) {
  return ToJson(TraceFromText(text));
}

int DiffTraceFiles(TraceText& ta, TraceText& tb, const TraceDiffOptions& options,
                   std::ostream& out) {
  const Trace a = TraceFromText(std::exchange(ta, {}));
  const Trace b = TraceFromText(std::exchange(tb, {}));
  const std::vector<TraceDifference> diffs = DiffTraces(a, b, options.limit);
  if (diffs.empty()) {
    out << "traces agree: " << a.steps.size() << " step" << (a.steps.size() == 1 ? "" : "s")
        << ", every collective and every rank's shard equal\n";
    return 0;
  }
  out << "traces differ; first at " << diffs[0].where << ":\n";
  for (const TraceDifference& d : diffs) out << "  " << d.where << ": " << d.what << "\n";
  return 1;
}

std::string TraceToPerfettoText(TraceText& text, const TraceText* with) {
  const std::string path = text.path;
  const Trace first = TraceFromText(std::exchange(text, {}));
  std::vector<PerfettoSource> sources = {{&first, ""}};
  Trace second;
  if (with != nullptr) {
    second = TraceFromText(*with);
    sources[0].label = StrCat(BackendLabel(first), " ", BaseName(path));
    sources.push_back({&second, StrCat(BackendLabel(second), " ", BaseName(with->path))});
  }
  return SafeDump(ToPerfetto(sources)) + "\n";
}

}  // namespace

const std::vector<TraceFormatDriver>& TraceFormatDrivers() {
  // clang-format off
  static const std::vector<TraceFormatDriver> drivers = {
      {kModelTraceFormat, "a model run (dtsim model --trace)",
       ValidateModelTrace, RewriteModelTrace, DiffModelTraceFiles, nullptr, ModelTraceToPerfettoText},
      {kRecordingFormat, "a recorded or simulated PyTorch run (dtsim.record, dtsim record, dtsim run --trace, "
                         "dtsim import-fr)",
       ValidateRecording, RewriteRecording, DiffRecordingFiles, CheckRecordingFile, RecordingToPerfettoText},
      {kOpTraceFormat, "one op's implicit redistributions (dtsim op --trace)",
       ValidateOpTrace, RewriteOpTrace, DiffOpTraceFiles, nullptr, nullptr},
      {kTraceFormat, "one redistribution (dtsim redistribute --trace, dtsim compare --trace)",
       ValidateTrace, RewriteTrace, DiffTraceFiles, nullptr, TraceToPerfettoText},
  };
  // clang-format on
  return drivers;
}

const TraceFormatDriver& TraceFormatDriverFor(const TraceText& a, const TraceText& b) {
  const std::vector<TraceFormatDriver>& drivers = TraceFormatDrivers();
  for (const TraceFormatDriver& d : drivers)
    if (a.format == d.format || b.format == d.format) return d;
  return drivers.back();
}

std::pair<TraceText, TraceText> ReadTraceTexts(const std::string& a, const std::string& b) {
  return BothAtOnce([&] { return ReadTraceText(a); }, [&] { return ReadTraceText(b); });
}

}  // namespace dtsim
