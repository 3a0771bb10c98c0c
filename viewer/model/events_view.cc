// The events window's state and layout (see events_view.h).
#include "events_view.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "colors.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/mesh.h"
#include "model_view.h"

namespace dtsim::viewer {
namespace {

bool IsFlightRecorder(const Recording& r) { return r.backend == "flight-recorder"; }

RunEvents ShownEvents(const Recording& r, bool collectives_only) {
  RunEvents out;
  if (!r.events) return out;
  if (!collectives_only) return *r.events;
  for (const auto& [rank, events] : *r.events) {
    std::vector<RunEvent>& kept = out[rank];
    for (const RunEvent& e : events)
      if (e.kind == RunEvent::Kind::kCollective) kept.push_back(e);
  }
  return out;
}

void RequireEvents(const Recording& r, const std::string& path) {
  if (r.events) return;
  throw InputError(
      "recording",
      StrCat("'", path,
             "' recorded no events (ops and collectives): record them with `dtsim record -- "
             "torchrun ...`, dtsim.record(path, ops=True) or `dtsim run --trace`"));
}

int64_t CountEvents(const RunEvents& events) {
  int64_t n = 0;
  for (const auto& [rank, list] : events) n += static_cast<int64_t>(list.size());
  return n;
}

const std::vector<RunEvent>* EventsOfRank(const RunEvents& events, int64_t rank) {
  auto found = events.find(rank);
  return found == events.end() ? nullptr : &found->second;
}

int64_t RowsOfRank(const EventsSession& s, int64_t rank) {
  const std::vector<RunEvent>* a = EventsOfRank(s.first_events, rank);
  const std::vector<RunEvent>* b = EventsOfRank(s.second_events, rank);
  return static_cast<int64_t>(std::max(a ? a->size() : 0, b ? b->size() : 0));
}

// "xxh3:0123abcd": a digest's hash shortened to 8 hex digits, "-" when there is none.
std::string ShortDigest(const std::optional<std::vector<TensorDigest>>& digests) {
  if (!digests || digests->empty() || !digests->front().hash) return "-";
  const std::string& h = *digests->front().hash;
  return h.size() > 13 ? h.substr(0, 13) : h;
}

std::string DigestText(const TensorDigest& d) {
  std::string text = StrCat(d.dtype, " ", IntListToString(d.shape), " ",
                            d.hash ? *d.hash : std::string("not hashed"));
  if (d.sketch) text += StrCat(" sketch ", *d.sketch, " (scale ", d.scale.value_or(0), ")");
  return text;
}

std::string JoinedPlacements(const RunEvent& e) {
  if (e.kind == RunEvent::Kind::kCollective) return e.state;
  return PlacementsText(e);
}

std::string OpText(const RunEvent& e) {
  if (e.kind == RunEvent::Kind::kOp) return e.op;
  std::string text = StrCat(e.op, " over ", IntListToString(e.group));
  if (e.seq) text += StrCat(" #", *e.seq);
  return text;
}

void Summarize(EventsSession& s) {
  const int64_t ranks = static_cast<int64_t>(s.first_events.size());
  const char* unit = s.collectives_only ? " collectives" : " events";
  if (!s.second) {
    s.summary = StrCat(ranks, " ranks, ", CountEvents(s.first_events), unit);
    if (!s.divergences.empty()) {
      const EventDivergence& d = s.divergences.front();
      s.summary += StrCat("; ", s.divergences.size(), " rank", s.divergences.size() == 1 ? "" : "s",
                          " stuck: first at rank ", d.rank, ", event ", d.index, ": ", d.where,
                          ": ", d.what);
    } else if (s.collectives_only) {
      s.summary += "; every collective completed";
    }
    return;
  }
  const EventDiff& ev = *s.diff;
  if (s.divergences.empty() && ev.ranks_only_in_a.empty() && ev.ranks_only_in_b.empty()) {
    s.summary = StrCat("recordings agree: ", ev.compared, unit, " in the same order");
    s.summary += s.collectives_only ? " with the same kinds, groups and input sizes; values not "
                                      "checked (a Flight Recorder dump records none)"
                                    : " with equal inputs and outputs";
    if (ev.rounded > 0) s.summary += StrCat(" (", ev.rounded, " within float rounding)");
    if (ev.not_checked > 0 && !s.collectives_only)
      s.summary += StrCat("; ", ev.not_checked, " outputs not recorded, not checked");
    return;
  }
  if (s.divergences.empty()) {
    s.summary =
        StrCat("recordings differ: ", !ev.ranks_only_in_a.empty()
                                          ? StrCat("ranks ", IntListToString(ev.ranks_only_in_a),
                                                   " have events only in the first")
                                          : StrCat("ranks ", IntListToString(ev.ranks_only_in_b),
                                                   " have events only in the second"));
    return;
  }
  const EventDivergence& f = s.divergences.front();
  s.summary =
      StrCat("recordings differ; first at rank ", f.rank, ", event ", f.index, ": ", f.where, ": ",
             f.what, "; ", s.divergences.size(), " of ", s.world_size(), " ranks diverge");
}

}  // namespace

EventsSession::EventsSession(Recording a, std::string a_path)
    : first_path(std::move(a_path)), first(std::move(a)) {
  RequireEvents(first, first_path);
  collectives_only = IsFlightRecorder(first);
  first_events = ShownEvents(first, collectives_only);
  if (collectives_only) {
    // A dump against itself: nothing differs, and each rank's first collective issued but never
    // completed is its divergence (kPending), with the reason the other ranks' dumps give.
    divergences = DiffRunEvents(first_events, first_events, true).first;
  }
  Summarize(*this);
  SelectFirstDivergence(*this);
}

EventsSession::EventsSession(Recording a, std::string a_path, Recording b, std::string b_path)
    : first_path(std::move(a_path)),
      second_path(std::move(b_path)),
      first(std::move(a)),
      second(std::move(b)) {
  RequireEvents(first, first_path);
  RequireEvents(*second, second_path);
  if (first.world_size != second->world_size) {
    throw InputError("traces", StrCat("'", first_path, "' and '", second_path,
                                      "' are not recordings of the same job: ", first.world_size,
                                      " ranks vs ", second->world_size));
  }
  collectives_only = IsFlightRecorder(first) || IsFlightRecorder(*second);
  first_events = ShownEvents(first, collectives_only);
  second_events = ShownEvents(*second, collectives_only);
  diff = DiffRunEvents(first_events, second_events, collectives_only);
  divergences = diff->first;
  Summarize(*this);
  SelectFirstDivergence(*this);
}

std::vector<int64_t> RanksThatDiverge(const EventsSession& s) {
  std::vector<int64_t> ranks;
  for (const EventDivergence& d : s.divergences) ranks.push_back(d.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

const EventDivergence* DivergenceOf(const EventsSession& s, int64_t rank) {
  for (const EventDivergence& d : s.divergences)
    if (d.rank == rank) return &d;
  return nullptr;
}

void SelectFirstDivergence(EventsSession& s) {
  if (!s.divergences.empty()) {
    s.view.rank = s.divergences.front().rank;
    s.view.event = s.divergences.front().index;
  } else {
    s.view.rank = s.first_events.empty() ? 0 : s.first_events.begin()->first;
    s.view.event = RowsOfRank(s, s.view.rank) > 0 ? 0 : -1;
  }
  s.view.scroll_to_selected = true;
}

bool SelectNextDivergence(EventsSession& s, int direction) {
  const std::vector<int64_t> ranks = RanksThatDiverge(s);
  if (ranks.empty()) return false;
  int64_t next = -1;
  if (direction >= 0) {
    auto it = std::upper_bound(ranks.begin(), ranks.end(), s.view.rank);
    next = it == ranks.end() ? ranks.front() : *it;
  } else {
    auto it = std::lower_bound(ranks.begin(), ranks.end(), s.view.rank);
    next = it == ranks.begin() ? ranks.back() : *std::prev(it);
  }
  s.view.rank = next;
  s.view.event = DivergenceOf(s, next)->index;
  s.view.scroll_to_selected = true;
  return true;
}

void SelectEventsRank(EventsSession& s, int64_t rank) {
  if (rank < 0 || rank >= s.world_size()) {
    throw InputError("rank", StrCat("rank ", rank, " is not in the recording's ", s.world_size(),
                                    " ranks (0..", s.world_size() - 1, ")"));
  }
  s.view.rank = rank;
  const int64_t rows = RowsOfRank(s, rank);
  if (s.view.event < 0 || s.view.event >= rows) {
    const EventDivergence* d = DivergenceOf(s, rank);
    s.view.event = d ? d->index : (rows > 0 ? 0 : -1);
  }
  s.view.scroll_to_selected = true;
}

void MoveEventSelection(EventsSession& s, int64_t delta) {
  const int64_t rows = RowsOfRank(s, s.view.rank);
  if (rows == 0) return;
  s.view.event = std::clamp<int64_t>(std::max<int64_t>(s.view.event, 0) + delta, 0, rows - 1);
  s.view.scroll_to_selected = true;
}

std::vector<EventRow> EventRows(const EventsSession& s) {
  std::vector<EventRow> rows;
  const std::vector<RunEvent>* a = EventsOfRank(s.first_events, s.view.rank);
  const std::vector<RunEvent>* b = s.second ? EventsOfRank(s.second_events, s.view.rank) : nullptr;
  const int64_t n = RowsOfRank(s, s.view.rank);
  const EventDivergence* d = DivergenceOf(s, s.view.rank);
  rows.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    EventRow row;
    row.index = i;
    const RunEvent* x = a && i < static_cast<int64_t>(a->size()) ? &(*a)[i] : nullptr;
    const RunEvent* y = b && i < static_cast<int64_t>(b->size()) ? &(*b)[i] : nullptr;
    const RunEvent& e = x ? *x : *y;
    row.in_first = x != nullptr;
    row.in_second = y != nullptr;
    row.op = OpText(e);
    row.where = e.module.empty() ? std::string() : StrCat(e.module, " (", e.pass, ")");
    row.placements = JoinedPlacements(e);
    row.first_hash = x ? ShortDigest(x->outputs) : "";
    row.second_hash = y ? ShortDigest(y->outputs) : "";
    row.differs = d != nullptr && d->index == i;
    row.after = d != nullptr && i > d->index;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<DetailLine> EventDetails(const EventsSession& s) {
  std::vector<DetailLine> out;
  const int64_t rank = s.view.rank;
  const std::vector<RunEvent>* a = EventsOfRank(s.first_events, rank);
  const std::vector<RunEvent>* b = s.second ? EventsOfRank(s.second_events, rank) : nullptr;
  const int64_t i = s.view.event;
  const RunEvent* x = a && i >= 0 && i < static_cast<int64_t>(a->size()) ? &(*a)[i] : nullptr;
  const RunEvent* y = b && i >= 0 && i < static_cast<int64_t>(b->size()) ? &(*b)[i] : nullptr;
  if (x == nullptr && y == nullptr) {
    out.push_back({StrCat("rank ", rank, ": no event selected"), false});
    return out;
  }
  const RunEvent& e = x ? *x : *y;
  out.push_back({StrCat("rank ", rank, ", event ", i, ": ", OpText(e)), false});
  if (!e.module.empty()) out.push_back({StrCat("module ", e.module, " (", e.pass, ")"), false});
  if (!e.line.empty()) out.push_back({StrCat("line ", e.line), false});
  if (e.kind == RunEvent::Kind::kOp) {
    out.push_back({StrCat("placements ", JoinedPlacements(e)), false});
  } else if (!e.state.empty()) {
    out.push_back({StrCat("state ", e.state, " (Flight Recorder)"), e.state != "completed"});
  }
  if (const EventDivergence* d = DivergenceOf(s, rank); d != nullptr && d->index == i)
    out.push_back({StrCat("diverges: ", d->what), true});
  const bool two = s.second.has_value();
  auto digests = [&](const RunEvent* ev, const char* run) {
    const std::string who = two ? StrCat(" (", run, ")") : std::string();
    if (ev == nullptr) {
      out.push_back({StrCat("not in the ", run, " run: its rank ended before"), true});
      return;
    }
    for (size_t k = 0; k < ev->inputs.size(); ++k)
      out.push_back({StrCat("input ", k, who, ": ", DigestText(ev->inputs[k])), false});
    if (!ev->outputs) {
      out.push_back({StrCat("output", who, ": not recorded"), false});
    } else {
      for (size_t k = 0; k < ev->outputs->size(); ++k)
        out.push_back({StrCat("output ", k, who, ": ", DigestText((*ev->outputs)[k])), false});
    }
    if (ev->written)
      out.push_back(
          {StrCat("output", who, " written in place before its digest: not checked"), false});
    if (ev->read_before_wait) {
      out.push_back({StrCat("read before wait", who, ": ", ev->read_before_wait->op, " at ",
                            ev->read_before_wait->line),
                     true});
    }
  };
  digests(x, "first");
  if (two) digests(y, "second");
  return out;
}

float RankStripHeight(const EventsSession& s, float width, float cell) {
  const int64_t per_row = std::max<int64_t>(1, static_cast<int64_t>(width / cell));
  const int64_t rows = (s.world_size() + per_row - 1) / per_row;
  return static_cast<float>(rows) * cell;
}

DrawList LayoutRankStrip(const EventsSession& s, float width, float cell,
                         const TextMetrics& metrics) {
  DrawList list;
  const int64_t per_row = std::max<int64_t>(1, static_cast<int64_t>(width / cell));
  const std::vector<int64_t> diverging = RanksThatDiverge(s);
  for (int64_t rank = 0; rank < s.world_size(); ++rank) {
    const float x = static_cast<float>(rank % per_row) * cell;
    const float y = static_cast<float>(rank / per_row) * cell;
    DrawRect r;
    r.rect = Rect{x + 1, y + 1, x + cell - 1, y + cell - 1};
    r.role = Role::kMeshCell;
    r.rank = rank;
    r.fill =
        std::binary_search(diverging.begin(), diverging.end(), rank) ? kDiffColor : RankColor(rank);
    r.border = rank == s.view.rank ? kHighlightColor : kCellBorderColor;
    r.border_width = rank == s.view.rank ? 3 : 1;
    const std::string label = std::to_string(rank);
    if (metrics.Width(label) + 4 <= cell && metrics.line_height + 2 <= cell) {
      const float tw = metrics.Width(label);
      list.texts.push_back(DrawText{
          std::round(x + (cell - tw) / 2), std::round(y + (cell - metrics.line_height) / 2), tw,
          metrics.line_height, label, TextColorOn(r.fill), Role::kMeshCell});
    }
    list.rects.push_back(std::move(r));
  }
  return list;
}

DrawList LayoutEventRows(const std::vector<EventRow>& rows, int64_t selected, bool two_runs,
                         float width, float row_height, float visible_y0, float visible_y1,
                         const TextMetrics& m) {
  DrawList list;
  // Columns: index, op, module (pass), placements or state, hashes.
  const float index_x = 6;
  const float op_x = index_x + m.Width("00000") + 8;
  const float hash_w = m.Width(two_runs ? "xxh3:0123abcd | xxh3:0123abcd" : "xxh3:0123abcd") + 8;
  const float rest = std::max(0.0f, width - op_x - hash_w);
  const float where_x = op_x + std::round(rest * 0.3f);
  const float placements_x = op_x + std::round(rest * 0.65f);
  const float hash_x = std::max(placements_x, width - hash_w);
  auto fit = [&m](const std::string& text, float w) {
    if (m.Width(text) <= w) return text;
    const size_t keep = static_cast<size_t>(std::max(0.0f, w / m.char_width - 3));
    return text.substr(0, std::min(text.size(), keep)) + "...";
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const float y = static_cast<float>(i) * row_height;
    if (y + row_height <= visible_y0 || y >= visible_y1) continue;
    const EventRow& row = rows[i];
    DrawRect rect;
    rect.rect = Rect{0, y, width, y + row_height};
    rect.role = Role::kTreeRow;
    rect.key = StrCat("e", row.index);
    rect.fill = row.differs             ? kDiffColor
                : row.index == selected ? kTreeSelectedColor
                : (i % 2 == 1)          ? kTreeStripeColor
                                        : Rgba{};
    if (row.differs && row.index == selected) {
      rect.border = kHighlightColor;
      rect.border_width = 2;
    }
    list.rects.push_back(std::move(rect));
    const Rgba color = row.differs ? TextColorOn(kDiffColor)
                       : row.after ? kDimTextColor
                                   : kTextColor;
    const float ty = std::round(y + (row_height - m.line_height) / 2);
    auto text = [&](float x, float w, const std::string& t) {
      const std::string fitted = fit(t, w);
      list.texts.push_back(
          DrawText{x, ty, m.Width(fitted), m.line_height, fitted, color, Role::kTreeRow});
    };
    text(index_x, op_x - index_x - 8, std::to_string(row.index));
    text(op_x, where_x - op_x - 8, row.op);
    text(where_x, placements_x - where_x - 8, row.where);
    text(placements_x, hash_x - placements_x - 8, row.placements);
    std::string hashes = row.in_first ? row.first_hash : "(absent)";
    if (two_runs) hashes += " | " + (row.in_second ? row.second_hash : std::string("(absent)"));
    text(hash_x, width - hash_x, hashes);
  }
  return list;
}

}  // namespace dtsim::viewer
