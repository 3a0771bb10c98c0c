// Run events (see include/dtsim/trace/run_events.h).
#include "dtsim/trace/run_events.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "dtsim/layout/error.h"
#include "dtsim/layout/placement.h"
#include "dtsim/trace/trace.h"
#include "json_text.h"

namespace dtsim {
namespace {

constexpr size_t kMaxEventsPerRank = size_t{1} << 24;
constexpr size_t kMaxDigests = 4096;
constexpr double kMaxEventMicros = 1e15;  // an event's t_us and dur_us (about 31 years)

TensorDigest DigestFromJson(const JsonReader& r) {
  r.ExpectObject();
  TensorDigest d;
  d.shape = r.At("shape").AsInts(0, int64_t{1} << 62, 64);
  d.dtype = r.String("dtype");
  if (d.dtype.empty() || d.dtype.size() > 64) r.At("dtype").Fail("expected a dtype name");
  if (r.Has("hash") && !r.At("hash").json().is_null()) {
    d.hash = r.String("hash");
    if (!IsShardHash(*d.hash)) {
      r.At("hash").Fail(
          StrCat("expected \"xxh3:\" and 16 hex digits, got ", Excerpt(r.At("hash").json())));
    }
  }
  if (r.Has("sketch") != r.Has("scale"))
    r.Fail("has a sketch without a scale, or a scale without one");
  if (r.Has("sketch")) {
    d.sketch = r.Number("sketch");
    d.scale = r.Number("scale");
    if (!std::isfinite(*d.sketch)) r.At("sketch").Fail("expected a finite number");
    if (!std::isfinite(*d.scale) || *d.scale < 0)
      r.At("scale").Fail("expected a finite number >= 0");
    if (std::fabs(*d.sketch) > *d.scale * (1 + 1e-6) + 1e-300)
      r.At("sketch").Fail(StrCat(*d.sketch, " exceeds its scale ", *d.scale));
  }
  return d;
}

std::vector<TensorDigest> DigestsFromJson(const JsonReader& r) {
  const size_t n = r.ArraySize(kMaxDigests);
  std::vector<TensorDigest> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(DigestFromJson(r.At(i)));
  return out;
}

RunEvent EventFromJson(const JsonReader& r, int64_t rank, int64_t world_size) {
  r.ExpectObject();
  RunEvent e;
  const std::string& kind = r.String("kind");
  if (kind == "op") {
    e.kind = RunEvent::Kind::kOp;
  } else if (kind == "collective") {
    e.kind = RunEvent::Kind::kCollective;
  } else {
    r.At("kind").Fail(StrCat("unknown event kind '", ExcerptText(kind), "' (op or collective)"));
  }
  e.op = r.String("op");
  if (e.op.empty() || e.op.size() > 256) r.At("op").Fail("expected an op name");
  e.module = r.String("module");
  e.pass = r.String("pass");
  if (e.pass != "forward" && e.pass != "backward")
    r.At("pass").Fail(StrCat("expected forward or backward, got '", ExcerptText(e.pass), "'"));
  if (r.Has("line")) e.line = r.String("line");
  if (e.kind == RunEvent::Kind::kOp) {
    for (const char* key : {"args", "results"}) {
      std::vector<std::string> list = r.At(key).AsStrings();
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string& text = list[i];
        if (text.size() < 2 || text.front() != '[' || text.back() != ']')
          r.At(key).At(i).Fail("expected placements in brackets ([S(0), R])");
        try {
          ParsePlacements(text.substr(1, text.size() - 2));
        } catch (const InputError& err) {
          r.At(key).At(i).Fail(err.what());
        }
      }
      (key[0] == 'a' ? e.args : e.results) = std::move(list);
    }
  } else {
    e.group = r.Ints("group", 0, world_size - 1);
    if (e.group.empty()) r.At("group").Fail("expected the group's ranks");
    std::vector<int64_t> sorted = e.group;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      r.At("group").Fail("lists a rank twice");
    if (!std::binary_search(sorted.begin(), sorted.end(), rank))
      r.At("group").Fail(StrCat("does not hold rank ", rank, ", whose event it is"));
  }
  e.inputs = DigestsFromJson(r.At("inputs"));
  if (r.Has("outputs") && !r.At("outputs").json().is_null())
    e.outputs = DigestsFromJson(r.At("outputs"));
  if (r.Has("seq")) e.seq = r.Int("seq", 0);
  if (r.Has("state")) {
    e.state = r.String("state");
    if (e.state != "scheduled" && e.state != "started" && e.state != "completed" &&
        !e.state.empty()) {
      r.At("state").Fail(
          StrCat("expected scheduled, started or completed, got '", ExcerptText(e.state), "'"));
    }
  }
  if (r.Has("at")) {
    if (r.String("at") != "end") r.At("at").Fail("expected \"end\"");
    e.at_end = true;
  }
  if (r.Has("written")) e.written = r.Bool("written");
  if (r.Has("read_before_wait")) {
    const JsonReader read = r.At("read_before_wait");
    read.ExpectObject();
    read.OnlyKeys({"op", "line"});
    e.read_before_wait =
        RunEvent::Read{read.String("op"), read.Has("line") ? read.String("line") : ""};
    if (e.read_before_wait->op.empty() || e.read_before_wait->op.size() > 256)
      read.At("op").Fail("expected an op name");
  }
  for (const char* key : {"t_us", "dur_us"}) {
    if (!r.Has(key)) continue;
    const double t = r.Number(key);
    if (!(t >= 0) || t > kMaxEventMicros)
      r.At(key).Fail("expected a finite time >= 0 (microseconds)");
    (key[0] == 't' ? e.t_us : e.dur_us) = t;
  }
  return e;
}

// The fast path of RunEventsFromNode: one event's checked text parsed straight into a RunEvent, for
// the plain form dtsim writes (no escapes in strings, integers as digits, known keys). It returns
// false on anything else, or on a value EventFromJson would refuse; the caller then reads that
// event through EventFromJson, which gives the value or the error with its JSON path. The checks
// below are EventFromJson's, as booleans.
class FastEvent {
 public:
  FastEvent(std::string_view text, std::unordered_set<std::string>* placements)
      : t_(text), placements_(placements) {}

  bool Parse(RunEvent* e, int64_t rank, int64_t world_size) {
    bool has_kind = false, has_op = false, has_module = false, has_pass = false, has_inputs = false,
         has_args = false, has_results = false, has_group = false;
    if (!Lit('{')) return false;
    if (Peek('}')) return false;
    do {
      std::string_view key;
      if (!String(&key) || !Lit(':')) return false;
      if (key == "kind") {
        std::string_view v;
        if (!String(&v)) return false;
        if (v == "op") {
          e->kind = RunEvent::Kind::kOp;
        } else if (v == "collective") {
          e->kind = RunEvent::Kind::kCollective;
        } else {
          return false;
        }
        has_kind = true;
      } else if (key == "op") {
        if (!Text(&e->op) || e->op.empty() || e->op.size() > 256) return false;
        has_op = true;
      } else if (key == "module") {
        if (!Text(&e->module)) return false;
        has_module = true;
      } else if (key == "pass") {
        if (!Text(&e->pass) || (e->pass != "forward" && e->pass != "backward")) return false;
        has_pass = true;
      } else if (key == "line") {
        if (!Text(&e->line)) return false;
      } else if (key == "args" || key == "results") {
        std::vector<std::string>& list = key == "args" ? e->args : e->results;
        if (!Placements(&list)) return false;
        (key == "args" ? has_args : has_results) = true;
      } else if (key == "group") {
        if (!Ints(&e->group, 0, world_size - 1, SIZE_MAX)) return false;
        has_group = true;
      } else if (key == "inputs") {
        if (!Digests(&e->inputs)) return false;
        has_inputs = true;
      } else if (key == "outputs") {
        if (Null()) {
          e->outputs.reset();
        } else {
          e->outputs.emplace();
          if (!Digests(&*e->outputs)) return false;
        }
      } else if (key == "seq") {
        int64_t seq = 0;
        if (!Int(&seq, 0, INT64_MAX)) return false;
        e->seq = seq;
      } else if (key == "state") {
        if (!Text(&e->state) || (e->state != "scheduled" && e->state != "started" &&
                                 e->state != "completed" && !e->state.empty()))
          return false;
      } else if (key == "at") {
        std::string_view v;
        if (!String(&v) || v != "end") return false;
        e->at_end = true;
      } else if (key == "unavailable") {
        std::string_view why;  // why the outputs were not digested (outputs null): shown by readers
        if (!String(&why)) return false;
      } else if (key == "t_us" || key == "dur_us") {
        double t = 0;
        if (!Number(&t) || !(t >= 0) || t > kMaxEventMicros) return false;
        (key == "t_us" ? e->t_us : e->dur_us) = t;
      } else if (key == "written") {
        Ws();
        if (t_.substr(p_, 4) == "true") {
          e->written = true;
          p_ += 4;
        } else if (t_.substr(p_, 5) == "false") {
          p_ += 5;
        } else {
          return false;
        }
      } else {
        return false;  // a key dtsim does not write: the DOM path reads (and ignores) it
      }
    } while (Lit(','));
    if (!Lit('}') || !has_kind || !has_op || !has_module || !has_pass || !has_inputs) return false;
    if (e->kind == RunEvent::Kind::kOp) return has_args && has_results;
    if (!has_group || e->group.empty()) return false;
    std::vector<int64_t> sorted = e->group;
    std::sort(sorted.begin(), sorted.end());
    return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
           std::binary_search(sorted.begin(), sorted.end(), rank);
  }

 private:
  void Ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\t' || t_[p_] == '\r'))
      ++p_;
  }
  bool Peek(char c) {
    Ws();
    return p_ < t_.size() && t_[p_] == c;
  }
  bool Lit(char c) {
    if (!Peek(c)) return false;
    ++p_;
    return true;
  }
  bool Null() {
    Ws();
    if (t_.substr(p_, 4) != "null") return false;
    p_ += 4;
    return true;
  }
  // A string without escapes (or false).
  bool String(std::string_view* out) {
    if (!Lit('"')) return false;
    const size_t start = p_;
    while (p_ < t_.size() && t_[p_] != '"') {
      if (t_[p_] == '\\' || static_cast<unsigned char>(t_[p_]) < 0x20) return false;
      ++p_;
    }
    if (p_ >= t_.size()) return false;
    *out = t_.substr(start, p_ - start);
    ++p_;
    return true;
  }
  bool Text(std::string* out) {
    std::string_view v;
    if (!String(&v)) return false;
    out->assign(v);
    return true;
  }
  bool Int(int64_t* out, int64_t min, int64_t max) {
    Ws();
    const char* begin = t_.data() + p_;
    const char* end = t_.data() + t_.size();
    int64_t v = 0;
    const auto [next, ec] = std::from_chars(begin, end, v);
    if (ec != std::errc() || next == begin) return false;
    if (next < end && (*next == '.' || *next == 'e' || *next == 'E')) return false;
    if (v < min || v > max) return false;
    p_ += static_cast<size_t>(next - begin);
    *out = v;
    return true;
  }
  bool Number(double* out) {
    Ws();
    size_t q = p_;
    while (q < t_.size() && std::strchr("+-0123456789.eE", t_[q]) != nullptr) ++q;
    if (q == p_ || q - p_ > 64) return false;
    char buffer[72];
    std::memcpy(buffer, t_.data() + p_, q - p_);
    buffer[q - p_] = '\0';
    char* end = nullptr;
    *out = std::strtod(buffer, &end);
    if (end != buffer + (q - p_)) return false;
    p_ = q;
    return true;
  }
  bool Ints(std::vector<int64_t>* out, int64_t min, int64_t max, size_t max_size) {
    out->clear();
    if (!Lit('[')) return false;
    if (Lit(']')) return true;
    do {
      int64_t v = 0;
      if (!Int(&v, min, max) || out->size() >= max_size) return false;
      out->push_back(v);
    } while (Lit(','));
    return Lit(']');
  }
  bool Placements(std::vector<std::string>* out) {
    out->clear();
    if (!Lit('[')) return false;
    if (Lit(']')) return true;
    do {
      std::string text;
      if (!Text(&text) || text.size() < 2 || text.front() != '[' || text.back() != ']')
        return false;
      if (!placements_->count(text)) {
        try {
          ParsePlacements(text.substr(1, text.size() - 2));
        } catch (const InputError&) {
          return false;
        }
        placements_->insert(text);
      }
      out->push_back(std::move(text));
    } while (Lit(','));
    return Lit(']');
  }
  bool Digest(TensorDigest* d) {
    if (!Lit('{') || Peek('}')) return false;
    bool has_shape = false, has_dtype = false, has_sketch = false, has_scale = false;
    do {
      std::string_view key;
      if (!String(&key) || !Lit(':')) return false;
      if (key == "shape") {
        if (!Ints(&d->shape, 0, int64_t{1} << 62, 64)) return false;
        has_shape = true;
      } else if (key == "dtype") {
        if (!Text(&d->dtype) || d->dtype.empty() || d->dtype.size() > 64) return false;
        has_dtype = true;
      } else if (key == "hash") {
        if (Null()) {
          d->hash.reset();
        } else {
          std::string hash;
          if (!Text(&hash) || !IsShardHash(hash)) return false;
          d->hash = std::move(hash);
        }
      } else if (key == "sketch" || key == "scale") {
        double v = 0;
        if (!Number(&v) || !std::isfinite(v)) return false;
        (key == "sketch" ? d->sketch : d->scale) = v;
        (key == "sketch" ? has_sketch : has_scale) = true;
      } else if (key == "unavailable") {
        std::string_view why;
        if (!String(&why)) return false;
      } else {
        return false;
      }
    } while (Lit(','));
    if (!Lit('}') || !has_shape || !has_dtype || has_sketch != has_scale) return false;
    return !has_sketch ||
           (*d->scale >= 0 && std::fabs(*d->sketch) <= *d->scale * (1 + 1e-6) + 1e-300);
  }
  bool Digests(std::vector<TensorDigest>* out) {
    out->clear();
    if (!Lit('[')) return false;
    if (Lit(']')) return true;
    do {
      if (out->size() >= kMaxDigests) return false;
      out->emplace_back();
      if (!Digest(&out->back())) return false;
    } while (Lit(','));
    return Lit(']');
  }

  std::string_view t_;
  size_t p_ = 0;
  std::unordered_set<std::string>* placements_;  // placement texts already parsed
};

double Tolerance(const std::string& dtype) {
  if (dtype == "float64") return 1e-9;
  if (dtype == "float32") return 1e-4;
  if (dtype == "bfloat16" || dtype == "float16") return 2e-2;
  return 0;
}

// kUnknown: a side without a hash (a meta tensor, data not readable): not checked, never equal.
enum class Same { kExact, kRounded, kUnknown, kDiffers };

Same Compare(const TensorDigest& x, const TensorDigest& y) {
  if (x.shape != y.shape || x.dtype != y.dtype) return Same::kDiffers;
  if (!x.hash || !y.hash) return Same::kUnknown;
  if (*x.hash == *y.hash) return Same::kExact;
  const double tol = Tolerance(x.dtype);
  if (tol == 0 || !x.sketch || !y.sketch) return Same::kDiffers;
  const double scale = std::max(*x.scale, *y.scale);
  return std::fabs(*x.sketch - *y.sketch) <= tol * scale ? Same::kRounded : Same::kDiffers;
}

std::string DigestText(const TensorDigest& d) {
  std::string text = StrCat(d.dtype, IntListToString(d.shape), " ", d.hash ? *d.hash : "unhashed");
  if (d.sketch) text += StrCat(" sketch ", *d.sketch, " (scale ", *d.scale, ")");
  return text;
}

// Compares digest lists: the worst of them, and the text of the first that differs.
Same CompareAll(const std::vector<TensorDigest>& x, const std::vector<TensorDigest>& y,
                const char* what, std::string* text) {
  if (x.size() != y.size()) {
    *text = StrCat(x.size(), " ", what, " vs ", y.size());
    return Same::kDiffers;
  }
  Same worst = Same::kExact;
  for (size_t i = 0; i < x.size(); ++i) {
    const Same s = Compare(x[i], y[i]);
    if (s == Same::kDiffers) {
      *text = StrCat(what, " ", i, ": ", DigestText(x[i]), " vs ", DigestText(y[i]));
      return s;
    }
    if (s > worst) worst = s;
  }
  return worst;
}

// Gloo runs a reduce-scatter as an all-reduce, and its Flight Recorder names it so.
bool SameKind(const RunEvent& x, const RunEvent& y, bool collectives_only) {
  if (x.op == y.op) return true;
  if (!collectives_only) return false;
  auto either = [&](const char* p, const char* q) {
    return (x.op == p && y.op == q) || (x.op == q && y.op == p);
  };
  return either("all_reduce", "reduce_scatter");
}

std::string CollectiveStructure(const RunEvent& x, const RunEvent& y) {
  if (!SameKind(x, y, true)) return StrCat(EventLabel(x), " vs ", EventLabel(y));
  if (x.group != y.group)
    return StrCat("group ", IntListToString(x.group), " vs ", IntListToString(y.group));
  // Input sizes where both sides mean the same buffer by them (a scatter's or gather's non-root
  // members hand no input in one record and a placeholder in the other).
  const bool sized =
      x.op == "all_reduce" || x.op == "all_gather" || x.op == "broadcast" || x.op == "all_to_all";
  if (sized && x.inputs.size() == 1 && y.inputs.size() == 1 &&
      (x.inputs[0].shape != y.inputs[0].shape || x.inputs[0].dtype != y.inputs[0].dtype) &&
      x.op == y.op) {
    return StrCat("input ", x.inputs[0].dtype, IntListToString(x.inputs[0].shape), " vs ",
                  y.inputs[0].dtype, IntListToString(y.inputs[0].shape));
  }
  return "";
}

std::string Structure(const RunEvent& x, const RunEvent& y) {
  if (x.kind != y.kind || x.op != y.op) return StrCat(EventLabel(x), " vs ", EventLabel(y));
  if (x.group != y.group)
    return StrCat("group ", IntListToString(x.group), " vs ", IntListToString(y.group));
  if (x.module != y.module || x.pass != y.pass)
    return StrCat("module ", x.module, " (", x.pass, ") vs ", y.module, " (", y.pass, ")");
  auto joined = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  if (x.args != y.args)
    return StrCat("argument placements ", joined(x.args), " vs ", joined(y.args));
  if (x.results != y.results)
    return StrCat("result placements ", joined(x.results), " vs ", joined(y.results));
  return "";
}

}  // namespace

std::string EventLabel(const RunEvent& e) {
  std::string text = e.op;
  if (e.kind == RunEvent::Kind::kCollective) text += StrCat(" over ", IntListToString(e.group));
  text += StrCat(" in ", e.module, " (", e.pass, ")");
  if (!e.line.empty()) text += StrCat(" at ", e.line);
  return text;
}

RunEvents RunEventsFromJson(const JsonReader& r, int64_t world_size) {
  return RunEventsFromNode(internal::JsonNode::OfDom(r.json(), r.field(), r.path()), world_size);
}

RunEvents RunEventsFromNode(const internal::JsonNode& node, int64_t world_size) {
  node.ExpectObject();
  RunEvents out;
  for (const std::string& key : node.Keys()) {
    const int64_t rank = internal::RankOfKey(key, world_size);
    if (rank < 0) {
      node.Fail(StrCat("has events for '", ExcerptText(key), "', which is no rank of a world of ",
                       world_size));
    }
    const internal::JsonNode list = node.At(key.c_str());
    const size_t n = list.ArraySize();
    if (n > kMaxEventsPerRank) {
      list.Fail(StrCat("has ", n, " events; at most ", kMaxEventsPerRank, " per rank are read"));
    }
    std::vector<RunEvent>& events = out[rank];
    events.reserve(n);
    // From text, the fast path first; else (and from a DOM) one event's DOM at a time.
    std::unordered_set<std::string> placements;
    for (size_t i = 0; i < n; ++i) {
      const internal::JsonNode item = list.At(i);
      if (!item.is_dom()) {
        RunEvent e;
        if (FastEvent(item.text(), &placements).Parse(&e, rank, world_size)) {
          events.push_back(std::move(e));
          continue;
        }
      }
      events.push_back(
          item.Read([&](const JsonReader& r) { return EventFromJson(r, rank, world_size); }));
    }
  }
  return out;
}

namespace {

// Why a collective that `e` (a rank's Flight Recorder entry) shows issued never completed: the
// group's members whose dumps lack it (no entry of that group with its sequence number), or, when
// every member issued it, the work queued before it on the ranks' devices or the transport.
std::string PendingReason(const RunEvents& run, const RunEvent& e) {
  std::vector<int64_t> absent;
  for (int64_t member : e.group) {
    auto found = run.find(member);
    if (found == run.end()) continue;  // no dump of that rank: not known
    bool issued = false;
    for (const RunEvent& other : found->second)
      if (other.kind == RunEvent::Kind::kCollective && other.group == e.group &&
          other.seq == e.seq) {
        issued = true;
        break;
      }
    if (!issued) absent.push_back(member);
  }
  if (!absent.empty())
    return StrCat(
        "this rank waits here for the group's other members: never issued by ",
        absent.size() > 1 ? StrCat("ranks ", IntListToString(absent)) : StrCat("rank ", absent[0]));
  return "every member of the group issued it: it waits for work queued before it on the ranks' "
         "devices, or for the transport";
}

}  // namespace

EventDiff DiffRunEvents(const RunEvents& a_all, const RunEvents& b_all, bool collectives_only) {
  using Cause = EventDivergence::Cause;
  EventDiff diff;
  RunEvents a_kept, b_kept;
  if (collectives_only) {
    // By position, not address: `a_all` and `b_all` may be one object (a dump against itself).
    const std::pair<const RunEvents*, RunEvents*> sides[] = {{&a_all, &a_kept}, {&b_all, &b_kept}};
    for (const auto& [all, kept_ptr] : sides) {
      RunEvents& kept = *kept_ptr;
      for (const auto& [rank, events] : *all) {
        std::vector<RunEvent>& out = kept[rank];
        for (const RunEvent& e : events)
          if (e.kind == RunEvent::Kind::kCollective) out.push_back(e);
      }
    }
  }
  const RunEvents& a = collectives_only ? a_kept : a_all;
  const RunEvents& b = collectives_only ? b_kept : b_all;
  for (const auto& [rank, unused] : a)
    if (!b.count(rank)) diff.ranks_only_in_a.push_back(rank);
  for (const auto& [rank, unused] : b)
    if (!a.count(rank)) diff.ranks_only_in_b.push_back(rank);
  for (const auto& [rank, xs] : a) {
    auto found = b.find(rank);
    if (found == b.end()) continue;
    const std::vector<RunEvent>& ys = found->second;
    const size_t n = std::min(xs.size(), ys.size());
    bool diverged = false;
    bool stopped = false;
    for (size_t i = 0; i < n; ++i) {
      const RunEvent& x = xs[i];
      const RunEvent& y = ys[i];
      EventDivergence d;
      d.rank = rank;
      d.index = static_cast<int64_t>(i);
      d.where = EventLabel(x.module.empty() && !y.module.empty() ? y : x);
      const std::string structure = collectives_only ? CollectiveStructure(x, y) : Structure(x, y);
      if (!structure.empty()) {
        if (!diverged) {
          d.cause = Cause::kStructure;
          d.what = StrCat("the runs part: ", structure);
          diff.first.push_back(std::move(d));
        }
        ++diff.differing;
        ++diff.differing_by_rank[rank];
        stopped = true;
        break;
      }
      if (x.read_before_wait || y.read_before_wait) {
        const RunEvent& raced = x.read_before_wait ? x : y;
        d.cause = Cause::kRace;
        d.what = StrCat(
            raced.read_before_wait->op,
            raced.read_before_wait->line.empty() ? std::string()
                                                 : StrCat(" at ", raced.read_before_wait->line),
            " touched this collective's output before its work completed",
            x.read_before_wait && y.read_before_wait
                ? " (in both runs)"
                : (&raced == &x ? " (in the first run only)" : " (in the second run only)"),
            ": the program may have read bytes that had not arrived");
        if (x.read_before_wait && y.read_before_wait) {
          diff.races_in_both.push_back(std::move(d));
        } else {
          if (!diverged) {
            diverged = true;
            diff.first.push_back(std::move(d));
          }
          ++diff.differing;
          ++diff.differing_by_rank[rank];
          ++diff.compared;
          continue;
        }
      }
      ++diff.compared;
      const std::string& state = !x.state.empty() ? x.state : y.state;
      if (collectives_only && !state.empty() && state != "completed") {
        if (!diverged) {
          diverged = true;
          d.cause = Cause::kPending;
          d.what = StrCat("issued but never completed (", state, " in the Flight Recorder dump): ",
                          PendingReason(x.state.empty() ? b : a, x.state.empty() ? y : x));
          diff.first.push_back(std::move(d));
        }
        continue;
      }
      if (collectives_only) {
        ++diff.not_checked;  // a Flight Recorder dump holds no values: sizes were compared above
        continue;
      }
      std::string in_text, out_text;
      const Same in = CompareAll(x.inputs, y.inputs, "input", &in_text);
      Same out = Same::kExact;
      if (!x.outputs || !y.outputs) {
        ++diff.not_checked;  // its inputs are still compared
      } else {
        out = CompareAll(*x.outputs, *y.outputs, "output", &out_text);
        if (out == Same::kDiffers && (x.written || y.written)) {
          ++diff.not_checked;  // written in place before its digest: not what the collective gave
          out = Same::kExact;
        } else if (out == Same::kUnknown) {
          ++diff.not_checked;  // an output without a hash
          out = Same::kExact;
        }
      }
      if (out == Same::kDiffers || in == Same::kDiffers) {
        if (!diverged) {
          diverged = true;
          if (in != Same::kDiffers) {
            d.cause = Cause::kComputed;
            d.what = x.kind == RunEvent::Kind::kOp
                         ? StrCat("the op computed another result from equal inputs: ", out_text)
                         : StrCat(
                               "the collective delivered another result to this rank while "
                               "this rank's input was equal: ",
                               out_text);
          } else {
            d.cause = Cause::kInput;
            d.what = StrCat(in_text,
                            ", while every earlier event of this rank agreed: its bytes were "
                            "written outside the recorded ops and collectives, or read before "
                            "a collective completed");
          }
          diff.first.push_back(std::move(d));
        }
        if (out == Same::kDiffers) {
          ++diff.differing;
          ++diff.differing_by_rank[rank];
        }
      } else if (out == Same::kRounded || in == Same::kRounded) {
        ++diff.rounded;
      }
    }
    if (!stopped && xs.size() != ys.size() && !diverged) {
      EventDivergence d;
      d.cause = Cause::kLength;
      d.rank = rank;
      d.index = static_cast<int64_t>(n);
      const RunEvent& extra = xs.size() > n ? xs[n] : ys[n];
      d.where = EventLabel(extra);
      d.what =
          collectives_only
              ? StrCat(xs.size(), " collectives vs ", ys.size(), ": the ",
                       xs.size() > n ? "second" : "first",
                       " run's rank never issued this one (the next of the other run)")
              : StrCat(xs.size(), " events vs ", ys.size(), ": the ",
                       xs.size() > n ? "second" : "first", " run's rank ended before this one");
      diff.first.push_back(std::move(d));
    }
  }
  std::sort(diff.first.begin(), diff.first.end(),
            [](const EventDivergence& x, const EventDivergence& y) {
              return x.index != y.index ? x.index < y.index : x.rank < y.rank;
            });
  return diff;
}

}  // namespace dtsim
