// The model trace window's rows, selection, layout and details (see model_view.h).
#include "model_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "colors.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/trace/model_trace.h"
#include "timeline_layout.h"

namespace dtsim::viewer {
namespace {

std::string Key(char kind, int64_t index) { return StrCat(std::string(1, kind), index); }

// A parsed row key: its kind letter, first index and (collectives) second index.
struct ParsedKey {
  char kind = 0;
  int64_t a = -1, b = -1;
};

ParsedKey ParseKey(const std::string& key) {
  ParsedKey k;
  if (key.empty()) return k;
  k.kind = key[0];
  int64_t* target = &k.a;
  for (size_t i = 1; i < key.size(); ++i) {
    const char c = key[i];
    if (c == '.') {
      target = &k.b;
      continue;
    }
    if (c < '0' || c > '9') return ParsedKey{};
    if (*target < 0) *target = 0;
    if (*target > (int64_t{1} << 50)) return ParsedKey{};
    *target = *target * 10 + (c - '0');
  }
  return k;
}

// The 8 hex digits after "xxh3:" (the tree's columns).
std::string Hex8(const std::optional<WorldTensor>& tensor, int64_t rank) {
  if (!tensor || rank < 0 || rank >= static_cast<int64_t>(tensor->hashes.size())) return "";
  const std::string& h = tensor->hashes[rank];
  return h.size() >= 13 ? h.substr(5, 8) : h;
}

// "6 ops, 1 collective".
std::string EventCounts(const ModuleTree& tree, const std::vector<int64_t>& events) {
  int64_t ops = 0, collectives = 0;
  for (int64_t e : events) {
    if (tree.trace().events[e].kind == RunEvent::Kind::kOp) {
      ++ops;
    } else {
      ++collectives;
    }
  }
  std::string out;
  if (ops > 0) out = StrCat(ops, " op", ops == 1 ? "" : "s");
  if (collectives > 0) {
    out += StrCat(out.empty() ? "" : ", ", collectives, " collective", collectives == 1 ? "" : "s");
  }
  return out;
}

std::string CollectiveLabel(const CollectiveEvent& c) {
  std::string out = StrCat(ToString(c.kind), " on ", c.mesh_dim);
  if (!c.from.empty() || !c.to.empty()) out += StrCat("  ", c.from, " -> ", c.to);
  if (c.implicit) out += "  implicit";
  if (!c.cause.empty()) out += StrCat("  ", c.cause);
  return out;
}

std::string CollectiveColumn(const std::vector<CollectiveEvent>& cs) {
  if (cs.empty()) return "";
  CommCounts counts;
  for (const CollectiveEvent& c : cs) counts.Add(c);
  return counts.Text(true);
}

// True when a difference at `event` names collective k (DiffModelTraces: "..., collective k+1").
bool CollectiveDiffers(const ModelSession& s, int64_t event, int k) {
  if (!s.diff || event >= static_cast<int64_t>(s.diff->events.size())) return false;
  const std::string suffix = StrCat(", collective ", k + 1);
  for (size_t d : s.diff->events[event].differences) {
    const std::string& where = s.diff->differences[d].where;
    if (where.size() >= suffix.size() &&
        where.compare(where.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

bool AnyDiffers(const ModelSession& s, const std::vector<int64_t>& events, int64_t rank) {
  if (!s.diff) return false;
  for (int64_t e : events) {
    if (rank >= 0 ? s.diff->Differs(e, rank) : !s.diff->events[e].differences.empty()) return true;
  }
  return false;
}

class RowBuilder {
 public:
  RowBuilder(const ModelSession& s, std::vector<TreeRow>& rows)
      : s_(s), tree_(s.first), rows_(rows) {}

  void Module(int32_t n, int depth) {
    const ModuleNode& node = tree_.node(n);
    TreeRow r;
    r.kind = TreeRow::Kind::kModule;
    r.key = Key('m', n);
    r.depth = depth;
    r.node = n;
    r.label = n == 0 ? node.name : StrCat(node.name, " (", node.type, ")");
    r.forward = node.total[kForward].count ? node.total[kForward].Text(true) : "";
    r.backward = node.total[kBackward].count ? node.total[kBackward].Text(true) : "";
    if (tree_.has_hashes() && n != 0) {
      const auto& events = tree_.trace().events;
      const int64_t rank = s_.view.rank;
      std::string in, out;
      if (!node.calls.empty()) {
        in = Hex8(events[node.calls[0].begin].tensor, rank);
        if (node.calls[0].end >= 0) out = Hex8(events[node.calls[0].end].tensor, rank);
      }
      if (!in.empty()) r.values += "in " + in;
      if (!out.empty()) r.values += StrCat(r.values.empty() ? "" : "  ", "out ", out);
    }
    r.expandable = !node.children.empty() || !node.events[kForward].empty() ||
                   !node.events[kBackward].empty() ||
                   (n == 0 && (!tree_.parameters().empty() || !tree_.losses().empty() ||
                               !tree_.gradients().empty()));
    r.expanded = r.expandable && s_.view.expanded.count(r.key) > 0;
    if (s_.diff) {
      r.differs = AnyDiffers(s_, BoundaryEvents(node), s_.view.rank);
      r.inside_differs = s_.diff->subtree_differs[n] != 0;
    }
    rows_.push_back(r);
    if (!r.expanded) return;
    if (n == 0 && !tree_.parameters().empty())
      Group('p', n, StrCat("parameters (", tree_.parameters().size(), ")"), tree_.parameters(),
            depth + 1);
    for (int32_t child : node.children) Module(child, depth + 1);
    if (!node.events[kForward].empty())
      Group('f', n, "forward: " + EventCounts(tree_, node.events[kForward]), node.events[kForward],
            depth + 1);
    if (!node.events[kBackward].empty())
      Group('b', n, "backward: " + EventCounts(tree_, node.events[kBackward]),
            node.events[kBackward], depth + 1);
    if (n == 0) {
      for (int64_t e : tree_.losses()) Event(e, depth + 1);
      if (!tree_.gradients().empty())
        Group('g', n, StrCat("gradients (", tree_.gradients().size(), ")"), tree_.gradients(),
              depth + 1);
    }
  }

 private:
  void Group(char kind, int32_t n, std::string label, const std::vector<int64_t>& events,
             int depth) {
    TreeRow r;
    r.kind = TreeRow::Kind::kGroup;
    r.key = kind == 'p' || kind == 'g' ? std::string(1, kind) : Key(kind, n);
    r.depth = depth;
    r.node = n;
    r.label = std::move(label);
    const ModuleNode& node = tree_.node(n);
    if (kind == 'f' && node.own[kForward].count) r.forward = node.own[kForward].Text(true);
    if (kind == 'b' && node.own[kBackward].count) r.backward = node.own[kBackward].Text(true);
    r.expandable = true;
    r.expanded = s_.view.expanded.count(r.key) > 0;
    r.differs = AnyDiffers(s_, events, s_.view.rank);
    r.inside_differs = AnyDiffers(s_, events, -1);
    rows_.push_back(r);
    if (!r.expanded) return;
    for (int64_t e : events) Event(e, depth + 1);
  }

  void Event(int64_t i, int depth) {
    const RunEvent& e = tree_.trace().events[i];
    TreeRow r;
    r.kind = TreeRow::Kind::kEvent;
    r.key = Key('e', i);
    r.depth = depth;
    r.event = i;
    r.node = tree_.NodeOfEvent(i);
    const bool backward = e.pass == "backward";
    switch (e.kind) {
      case RunEvent::Kind::kOp:
        r.label = StrCat(e.op, "  ", PlacementsText(e));
        if (!e.collectives.empty()) {
          r.label += StrCat("  (", e.collectives.size(), " collective",
                            e.collectives.size() == 1 ? "" : "s", ")");
        }
        (backward ? r.backward : r.forward) = CollectiveColumn(e.collectives);
        r.expandable = !e.collectives.empty();
        break;
      case RunEvent::Kind::kCollective:
        r.label = CollectiveLabel(e.collectives.at(0));
        (backward ? r.backward : r.forward) = CollectiveColumn(e.collectives);
        break;
      case RunEvent::Kind::kParameter:
      case RunEvent::Kind::kGradient:
      case RunEvent::Kind::kLoss:
        r.label = e.kind == RunEvent::Kind::kLoss ? std::string("loss") : e.name;
        if (e.tensor)
          r.label += StrCat("  ", e.tensor->placements, " ", IntListToString(e.tensor->shape));
        r.values = Hex8(e.tensor, s_.view.rank);
        break;
      default:
        r.label = EventLabel(e);
        break;
    }
    r.expanded = r.expandable && s_.view.expanded.count(r.key) > 0;
    if (s_.diff) {
      r.differs = s_.diff->Differs(i, s_.view.rank);
      r.inside_differs = !s_.diff->events[i].differences.empty();
    }
    rows_.push_back(r);
    if (!r.expanded) return;
    for (size_t k = 0; k < e.collectives.size(); ++k) {
      TreeRow c;
      c.kind = TreeRow::Kind::kCollective;
      c.key = StrCat("c", i, ".", k);
      c.depth = depth + 1;
      c.event = i;
      c.node = r.node;
      c.collective = static_cast<int>(k);
      c.label = CollectiveLabel(e.collectives[k]);
      (backward ? c.backward : c.forward) = CollectiveColumn({e.collectives[k]});
      c.differs = CollectiveDiffers(s_, i, static_cast<int>(k));
      rows_.push_back(c);
    }
  }

  const ModelSession& s_;
  const ModuleTree& tree_;
  std::vector<TreeRow>& rows_;
};

// The selected row's event, for stepping through differences (-1 before every event).
int64_t SelectedEvent(const ModelSession& s) {
  if (s.view.event >= 0 && s.view.event < static_cast<int64_t>(s.first.trace().events.size()) &&
      RowKeyOfEvent(s.first, s.view.event, nullptr) == s.view.selected)
    return s.view.event;
  const ParsedKey k = ParseKey(s.view.selected);
  if (k.kind == 'e' || k.kind == 'c') return k.a;
  if (k.kind == 'm' && k.a >= 0 && k.a < static_cast<int64_t>(s.first.nodes().size())) {
    const std::vector<int64_t> b = BoundaryEvents(s.first.node(static_cast<int32_t>(k.a)));
    return b.empty() ? -1 : b.front();
  }
  return -1;
}

std::string Fit(const std::string& text, float width, const TextMetrics& m) {
  if (m.Width(text) <= width) return text;
  const auto chars = static_cast<int64_t>(std::floor(width / m.char_width)) - 3;
  if (chars <= 0) return "";
  // Cut at a UTF-8 code point boundary.
  size_t bytes = 0;
  int64_t seen = 0;
  while (bytes < text.size() && seen < chars) {
    ++bytes;
    while (bytes < text.size() && (static_cast<unsigned char>(text[bytes]) & 0xC0) == 0x80) ++bytes;
    ++seen;
  }
  return text.substr(0, bytes) + "...";
}

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

ModelSession::ModelSession(ModuleTree tree) : first(std::move(tree)) {
  for (size_t n = 0; n < first.nodes().size(); ++n) view.expanded.insert(Key('m', n));
  view.selected = "m0";
}

ModelSession::ModelSession(ModuleTree tree, ModuleTree other) : ModelSession(std::move(tree)) {
  CheckSameModelRun(first, other);
  diff = CompareModelTraces(first, other);
  second = std::move(other);
  SelectFirstDifference(*this);
}

std::vector<TreeRow> ModelTreeRows(const ModelSession& session) {
  std::vector<TreeRow> rows;
  RowBuilder(session, rows).Module(0, 0);
  return rows;
}

std::string RowKeyOfEvent(const ModuleTree& tree, int64_t event, std::vector<std::string>* expand) {
  const RunEvent& e = tree.trace().events.at(event);
  const int32_t n = tree.NodeOfEvent(event);
  std::vector<std::string> keys;
  auto ancestors = [&](int32_t from) {
    for (int32_t p = from; p >= 0; p = tree.node(p).parent) keys.push_back(Key('m', p));
  };
  std::string key = Key('e', event);
  switch (e.kind) {
    case RunEvent::Kind::kModuleBegin:
    case RunEvent::Kind::kModuleEnd:
    case RunEvent::Kind::kBackwardBegin:
      key = Key('m', n);
      ancestors(tree.node(n).parent);
      break;
    case RunEvent::Kind::kOp:
    case RunEvent::Kind::kCollective:
      ancestors(n);
      keys.push_back(Key(e.pass == "backward" ? 'b' : 'f', n));
      break;
    case RunEvent::Kind::kParameter:
      keys = {"m0", "p"};
      break;
    case RunEvent::Kind::kGradient:
      keys = {"m0", "g"};
      break;
    case RunEvent::Kind::kLoss:
      keys = {"m0"};
      break;
  }
  if (expand != nullptr) *expand = std::move(keys);
  return key;
}

void SelectEvent(ModelSession& s, int64_t event) {
  std::vector<std::string> expand;
  s.view.selected = RowKeyOfEvent(s.first, event, &expand);
  s.view.event = event;
  s.view.expanded.insert(expand.begin(), expand.end());
  s.view.scroll_to_selected = true;
}

void SelectModule(ModelSession& s, const std::string& name) {
  const std::optional<int32_t> n = s.first.FindNode(name);
  if (!n) {
    std::string names;
    const size_t shown = std::min<size_t>(s.first.nodes().size(), 12);
    for (size_t i = 0; i < shown; ++i) names += StrCat(i ? ", " : "", s.first.nodes()[i].name);
    if (shown < s.first.nodes().size())
      names += StrCat(" and ", s.first.nodes().size() - shown, " more");
    throw InputError(
        "module", StrCat("no module '", ExcerptText(name), "' in the trace; its modules: ", names));
  }
  for (int32_t p = s.first.node(*n).parent; p >= 0; p = s.first.node(p).parent)
    s.view.expanded.insert(Key('m', p));
  s.view.selected = Key('m', *n);
  s.view.scroll_to_selected = true;
}

void SelectFirstDifference(ModelSession& s) {
  if (!s.diff || !s.diff->first_event) return;
  const int64_t event = *s.diff->first_event;
  const ModelComparison::EventDiff& d = s.diff->events[event];
  if (!d.ranks.empty() && !std::binary_search(d.ranks.begin(), d.ranks.end(), s.view.rank))
    s.view.rank = d.ranks.front();
  SelectEvent(s, event);
}

bool SelectNextDifference(ModelSession& s, int direction) {
  if (!s.diff) return false;
  std::vector<int64_t> events;
  for (size_t e = 0; e < s.diff->events.size(); ++e) {
    if (!s.diff->events[e].differences.empty()) events.push_back(static_cast<int64_t>(e));
  }
  if (events.empty()) return false;
  // The differing events after (before) the current one in run order, wrapping; those shown by
  // the selected row itself (a module's input and output) are skipped.
  const int64_t current = SelectedEvent(s);
  const auto n = static_cast<int64_t>(events.size());
  int64_t at = direction >= 0
                   ? std::upper_bound(events.begin(), events.end(), current) - events.begin()
                   : (std::lower_bound(events.begin(), events.end(), current) - events.begin()) - 1;
  int64_t target = -1;
  for (int64_t step = 0; step < n; ++step, at += direction >= 0 ? 1 : -1) {
    const int64_t e = events[((at % n) + n) % n];
    if (RowKeyOfEvent(s.first, e, nullptr) != s.view.selected) {
      target = e;
      break;
    }
  }
  if (target < 0) return false;  // every difference is on the selected row
  const ModelComparison::EventDiff& d = s.diff->events[target];
  if (!d.all_ranks && !d.ranks.empty() &&
      !std::binary_search(d.ranks.begin(), d.ranks.end(), s.view.rank))
    s.view.rank = d.ranks.front();
  SelectEvent(s, target);
  return true;
}

void SelectRank(ModelSession& s, int64_t rank) {
  if (rank < 0 || rank >= s.first.world_size()) {
    throw InputError("rank", StrCat("rank ", rank, " is not in ", s.first.mesh().ToString(), " (",
                                    s.first.world_size(), " ranks)"));
  }
  s.view.rank = rank;
}

void MoveSelection(ModelSession& s, int delta) {
  const std::vector<TreeRow> rows = ModelTreeRows(s);
  if (rows.empty()) return;
  int64_t at = -1;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].key == s.view.selected) at = static_cast<int64_t>(i);
  }
  const int64_t to =
      at < 0 ? 0 : std::clamp<int64_t>(at + delta, 0, static_cast<int64_t>(rows.size()) - 1);
  s.view.selected = rows[to].key;
  s.view.scroll_to_selected = true;
}

void CollapseOrParent(ModelSession& s) {
  const std::vector<TreeRow> rows = ModelTreeRows(s);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].key != s.view.selected) continue;
    if (rows[i].expanded) {
      s.view.expanded.erase(rows[i].key);
      return;
    }
    for (size_t j = i; j-- > 0;) {
      if (rows[j].depth < rows[i].depth) {
        s.view.selected = rows[j].key;
        s.view.scroll_to_selected = true;
        return;
      }
    }
    return;
  }
}

void Expand(ModelSession& s) {
  for (const TreeRow& r : ModelTreeRows(s)) {
    if (r.key == s.view.selected && r.expandable) s.view.expanded.insert(r.key);
  }
}

void ToggleExpanded(ModelSession& s, const std::string& key) {
  if (!s.view.expanded.erase(key)) s.view.expanded.insert(key);
}

TreeColumns ModelTreeColumns(float width, bool has_values, const TextMetrics& m) {
  TreeColumns c;
  c.width = width;
  // The label keeps at least max(320 px, 30%) of the width; the forward and backward columns give
  // up room first, then the values.
  float values_w = has_values ? m.Width("in 00000000  out 00000000") + 16 : 0;
  float pass_w = m.Width("AG 99, AR 99, RS 99 | 999 KiB") + 12;
  const float label_min = std::min(width, std::max(320.0f, width * 0.3f));
  const float room = std::max(0.0f, width - label_min);
  values_w = std::min(values_w, room);
  pass_w = std::min(pass_w, (room - values_w) / 2);
  c.values_x = std::round(width - values_w);
  c.backward_x = std::round(c.values_x - pass_w);
  c.forward_x = std::round(c.backward_x - pass_w);
  return c;
}

DrawList LayoutModelTreeHeader(float width, float row_height, const TextMetrics& m, bool has_values,
                               int64_t rank) {
  DrawList list;
  const TreeColumns c = ModelTreeColumns(width, has_values, m);
  const float y = std::round((row_height - m.line_height) / 2);
  auto text = [&](float x, float w, const std::string& t) {
    const std::string fitted = Fit(t, w - 8, m);
    list.texts.push_back(DrawText{x + 6, y, m.Width(fitted), m.line_height, fitted, kDimTextColor,
                                  Role::kDecoration});
  };
  text(0, c.forward_x, "module (type) / op  placements / collective");
  text(c.forward_x, c.backward_x - c.forward_x, "forward");
  text(c.backward_x, c.values_x - c.backward_x, "backward");
  if (has_values) text(c.values_x, width - c.values_x, StrCat("rank ", rank, " values"));
  list.lines.push_back(
      DrawLine{0, row_height - 1, width, row_height - 1, kGridColor, 1, Role::kDecoration});
  return list;
}

DrawList LayoutModelTree(const std::vector<TreeRow>& rows, const std::string& selected, float width,
                         float row_height, float visible_y0, float visible_y1, const TextMetrics& m,
                         bool has_values, int64_t /*rank*/) {
  DrawList list;
  const TreeColumns c = ModelTreeColumns(width, has_values, m);
  if (rows.empty() || row_height <= 0) return list;
  const auto first =
      std::max<int64_t>(0, static_cast<int64_t>(std::floor(visible_y0 / row_height)));
  const auto last = std::min<int64_t>(static_cast<int64_t>(rows.size()),
                                      static_cast<int64_t>(std::ceil(visible_y1 / row_height)));
  std::vector<DrawText> texts;
  for (int64_t i = first; i < last; ++i) {
    const TreeRow& r = rows[i];
    const float y0 = static_cast<float>(i) * row_height;
    const bool is_selected = r.key == selected;
    DrawRect rect;
    rect.rect = Rect{0, y0, width, y0 + row_height};
    rect.role = Role::kTreeRow;
    rect.key = r.key;
    rect.fill = r.differs ? kDiffColor
                          : (is_selected ? kTreeSelectedColor
                                         : (i % 2 ? kTreeStripeColor : kBackgroundColor));
    if (is_selected && r.differs) {
      rect.border = kHighlightColor;
      rect.border_width = 2;
    }
    list.rects.push_back(rect);
    if (r.inside_differs && !r.differs) {
      DrawRect bar;
      bar.rect = Rect{0, y0 + 2, 4, y0 + row_height - 2};
      bar.fill = kDiffColor;
      bar.role = Role::kHighlight;
      bar.key = r.key;
      list.rects.push_back(bar);
    }
    const Rgba color = r.differs ? kHighlightColor
                                 : (r.kind == TreeRow::Kind::kGroup ? kDimTextColor : kTextColor);
    const float ty = y0 + std::round((row_height - m.line_height) / 2);
    auto text = [&](float x, float w, const std::string& t, Rgba col) {
      if (t.empty() || w <= 0) return;
      const std::string fitted = Fit(t, w, m);
      if (fitted.empty()) return;
      texts.push_back(DrawText{x, ty, m.Width(fitted), m.line_height, fitted, col, Role::kTreeRow});
    };
    const float indent = 8 + 16 * static_cast<float>(r.depth);
    if (r.expandable) text(indent, m.char_width * 2, r.expanded ? "-" : "+", color);
    // The label runs on over the columns the row leaves empty (an op's placements).
    const float label_x = indent + 14;
    const float label_end = !r.forward.empty()                ? c.forward_x
                            : !r.backward.empty()             ? c.backward_x
                            : has_values && !r.values.empty() ? c.values_x
                                                              : width;
    text(label_x, label_end - label_x - 8, r.label, color);
    text(c.forward_x + 6, c.backward_x - c.forward_x - 10, r.forward, color);
    text(c.backward_x + 6, c.values_x - c.backward_x - 10, r.backward, color);
    if (has_values) text(c.values_x + 6, width - c.values_x - 10, r.values, color);
  }
  list.texts = std::move(texts);
  return list;
}

int64_t RowAt(const std::vector<TreeRow>& rows, float y, float row_height) {
  if (y < 0 || row_height <= 0) return -1;
  const auto i = static_cast<int64_t>(std::floor(y / row_height));
  return i < static_cast<int64_t>(rows.size()) ? i : -1;
}

std::vector<DetailLine> RowDetails(const ModelSession& s) {
  std::vector<DetailLine> out;
  const ModuleTree& tree = s.first;
  const auto& events = tree.trace().events;
  const int64_t rank = s.view.rank;
  auto line = [&](std::string text, bool differs = false) {
    out.push_back(DetailLine{std::move(text), differs});
  };
  // A tensor's line for the rank: placements, shape, hash; the other trace's hash beside it.
  auto tensor = [&](const std::string& what, int64_t event) {
    const std::optional<WorldTensor>& t = events[event].tensor;
    if (!t) return;
    std::string text = StrCat(what, ": ", t->placements, " ", IntListToString(t->shape));
    if (rank < static_cast<int64_t>(t->hashes.size())) text += StrCat("  ", t->hashes[rank]);
    const bool differs = s.diff && s.diff->Differs(event, rank);
    line(text, differs);
    if (s.second && event < static_cast<int64_t>(s.second->trace().events.size())) {
      const std::optional<WorldTensor>& o = s.second->trace().events[event].tensor;
      if (o && rank < static_cast<int64_t>(o->hashes.size())) {
        std::string other = StrCat("    other trace: ", o->hashes[rank]);
        if (t->hashes.size() == o->hashes.size() && t->hashes[rank] != o->hashes[rank] && !differs)
          other += "  (equal within float rounding)";
        line(other, differs);
      }
    }
  };
  auto collective = [&](const CollectiveEvent& c, bool differs) {
    size_t largest = 0;
    for (const auto& g : c.groups) largest = std::max(largest, g.size());
    line(StrCat(ToString(c.kind), " on ", c.mesh_dim, ": ", c.groups.size(), " group",
                c.groups.size() == 1 ? "" : "s", " of up to ", largest, " ranks",
                c.from.empty() && c.to.empty() ? "" : StrCat(", ", c.from, " -> ", c.to)),
         differs);
    line(StrCat("    sends ", BytesText(c.max_bytes_sent), ", receives ",
                BytesText(c.max_bytes_received), " per rank (the largest), est ",
                Fixed(c.est_us, 1), " us"),
         differs);
    line(StrCat("    ", c.implicit ? "implicit redistribution: " : "cause: ", c.cause), differs);
    for (const auto& g : c.groups) {
      if (std::find(g.begin(), g.end(), rank) != g.end()) {
        line(StrCat("    rank ", rank, "'s group: ", IntListToString(g)), differs);
        break;
      }
    }
  };
  auto differences = [&](int64_t event) {
    if (!s.diff || event >= static_cast<int64_t>(s.diff->events.size())) return;
    for (size_t d : s.diff->events[event].differences) {
      const TraceDifference& diff = s.diff->differences[d];
      line(StrCat(diff.where, ": ", diff.what), true);
    }
  };
  const ParsedKey k = ParseKey(s.view.selected);
  line(StrCat("rank ", rank, " ", tree.CoordinateOf(rank)));
  if (k.kind == 'm' && k.a >= 0 && k.a < static_cast<int64_t>(tree.nodes().size())) {
    const ModuleNode& n = tree.node(static_cast<int32_t>(k.a));
    line(k.a == 0 ? "Global: the whole run" : StrCat(n.name, " (", n.type, ")"));
    for (int pass : {kForward, kBackward}) {
      const char* name = pass == kForward ? "forward" : "backward";
      line(StrCat(name, ": ", n.own[pass].Text()));
      if (n.total[pass].count != n.own[pass].count)
        line(StrCat("    with its children: ", n.total[pass].Text()));
    }
    for (size_t c = 0; c < n.calls.size(); ++c) {
      const std::string call = n.calls.size() == 1 ? "" : StrCat("call ", c + 1, " ");
      tensor(call + "input", n.calls[c].begin);
      if (n.calls[c].end >= 0) tensor(call + "output", n.calls[c].end);
    }
    for (size_t b = 0; b < n.backward.size(); ++b)
      tensor(n.backward.size() == 1 ? "output gradient" : StrCat("output gradient ", b + 1),
             n.backward[b]);
    if (k.a == 0) {
      line(StrCat(tree.parameters().size(), " parameters, ", tree.losses().size(), " loss, ",
                  tree.gradients().size(), " gradients"));
      for (int64_t e : tree.losses()) tensor("loss", e);
    }
    for (int64_t e : BoundaryEvents(n)) differences(e);
  } else if ((k.kind == 'f' || k.kind == 'b') && k.a >= 0 &&
             k.a < static_cast<int64_t>(tree.nodes().size())) {
    const ModuleNode& n = tree.node(static_cast<int32_t>(k.a));
    const int pass = k.kind == 'f' ? kForward : kBackward;
    line(StrCat(pass == kForward ? "forward" : "backward", " of ", n.name, ": ",
                EventCounts(tree, n.events[pass])));
    line(StrCat("collectives: ", n.own[pass].Text()));
  } else if (k.kind == 'p' || k.kind == 'g') {
    const auto& list = k.kind == 'p' ? tree.parameters() : tree.gradients();
    line(StrCat(list.size(), k.kind == 'p' ? " parameters as parallelized, before the run"
                                           : " parameter gradients after backward"));
  } else if ((k.kind == 'e' || k.kind == 'c') && k.a >= 0 &&
             k.a < static_cast<int64_t>(events.size())) {
    const RunEvent& e = events[k.a];
    line(StrCat("event ", k.a + 1, ": ", EventLabel(e), "  (t = ", Fixed(e.t_us.value_or(0), 1),
                " us)"));
    if (e.kind == RunEvent::Kind::kOp) line(StrCat("placements ", PlacementsText(e)));
    if (k.kind == 'c' && k.b >= 0 && k.b < static_cast<int64_t>(e.collectives.size())) {
      collective(e.collectives[k.b], CollectiveDiffers(s, k.a, static_cast<int>(k.b)));
    } else {
      for (size_t c = 0; c < e.collectives.size(); ++c)
        collective(e.collectives[c], CollectiveDiffers(s, k.a, static_cast<int>(c)));
    }
    if (e.kind == RunEvent::Kind::kParameter || e.kind == RunEvent::Kind::kGradient ||
        e.kind == RunEvent::Kind::kLoss)
      tensor(e.kind == RunEvent::Kind::kLoss ? "loss" : e.name, k.a);
    differences(k.a);
  }
  return out;
}

}  // namespace dtsim::viewer
