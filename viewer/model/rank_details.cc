// Rank details (see rank_details.h).
#include "rank_details.h"

#include <algorithm>
#include <cstdio>

#include "dtsim/layout/error.h"
#include "dtsim/trace/model_trace.h"
#include "timeline_layout.h"

namespace dtsim::viewer {

std::string IntervalsText(const std::vector<Interval>& intervals) {
  if (intervals.empty()) return "-";
  std::string out;
  const size_t shown = std::min<size_t>(intervals.size(), 6);
  for (size_t i = 0; i < shown; ++i)
    out += StrCat(i ? ", " : "", intervals[i].lo, ":", intervals[i].hi);
  if (shown < intervals.size()) out += StrCat(", ... (", intervals.size(), " intervals)");
  return out;
}

std::vector<std::string> RankDetails(const TraceModel& model, int64_t frame_index, int64_t position,
                                     const TraceModel* other, const TraceDiff* diff) {
  std::vector<std::string> out;
  const Frame& f = model.frame(frame_index);
  const int64_t rank = model.RankAt(position);
  const RankLayout& l = f.layouts[position];
  out.push_back(StrCat("rank ", rank, "  coordinate ",
                       CoordinateText(model.mesh(), model.CoordinateAt(position))));
  const RankState* row = model.RowAt(frame_index, position);
  if (row != nullptr) {
    out.push_back(StrCat("local shape ", IntListToString(row->local_shape), "  global offset ",
                         row->global_offset.empty() ? "-" : IntListToString(row->global_offset)));
  } else {
    out.push_back(StrCat("no row for this rank in the trace; the layout rule gives local shape ",
                         IntListToString(l.local_shape), "  global offset ",
                         IntListToString(l.global_offset)));
  }
  std::string owns = "owns";
  for (size_t d = 0; d < l.intervals.size(); ++d)
    owns += StrCat(" dim ", d, ": ", IntervalsText(l.intervals[d]), " ");
  if (l.intervals.empty()) owns += " the whole 0-d tensor";
  if (f.spec.numel() > 0 && l.numel() == 0) owns = "owns nothing (an empty shard)";
  while (!owns.empty() && owns.back() == ' ') owns.pop_back();
  out.push_back(owns);
  if (f.anomalies[position] && row != nullptr) {
    out.push_back(StrCat("! the trace disagrees with the layout rule: it says local shape ",
                         IntListToString(row->local_shape), " offset ",
                         IntListToString(row->global_offset), ", the rule gives ",
                         IntListToString(l.local_shape), " offset ",
                         IntListToString(l.global_offset)));
  }
  if (row != nullptr) {
    out.push_back(row->hash ? StrCat("hash ", *row->hash) : "hash: none (metadata-only trace)");
  }
  if (f.kind == Frame::Kind::kAfterStep) {
    const TraceStep& step = model.trace().steps[f.step];
    std::string line =
        StrCat("step ", f.step + 1, " ", ToString(step.plan.collective), ": sent ",
               BytesText(f.bytes_sent[position]), ", received ",
               BytesText(f.bytes_received[position]), f.bytes_observed ? "" : " (planned)");
    if (f.group_of[position] >= 0)
      line += StrCat("  group ", IntListToString(f.groups[f.group_of[position]]));
    out.push_back(line);
    if (!f.time_us.empty()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f us measured (estimate %.1f us)", f.time_us[position],
                    f.est_us);
      out.push_back(buf);
    }
  }
  if (other != nullptr && other->FindPosition(rank)) {
    const int64_t op = *other->FindPosition(rank);
    const int64_t of = std::min(frame_index, other->num_frames() - 1);
    const RankState* orow = other->RowAt(of, op);
    if (orow != nullptr) {
      out.push_back(StrCat("other trace (", other->frame(of).label, "): local shape ",
                           IntListToString(orow->local_shape), "  offset ",
                           IntListToString(orow->global_offset),
                           orow->hash ? "  hash " + *orow->hash : std::string()));
    }
  }
  if (diff != nullptr) {
    for (const TraceDifference* d : diff->At(frame_index, model.num_frames())) {
      if (std::find(d->ranks.begin(), d->ranks.end(), rank) != d->ranks.end()) {
        out.push_back(StrCat("differs: ", Where(model, *d), ": ", d->what));
      }
    }
  }
  return out;
}

}  // namespace dtsim::viewer
