// Run events (see include/dtsim/trace/run_events.h).
#include "dtsim/trace/run_events.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
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
constexpr int64_t kMaxMeshes = int64_t{1} << 20;  // a recording's "meshes"
constexpr size_t kMaxDigests = 4096;
constexpr double kMaxEventMicros = 1e15;  // an event's t_us and dur_us (about 31 years)

constexpr std::array<std::pair<RunEvent::Kind, std::string_view>, 8> kKinds = {{
    {RunEvent::Kind::kOp, "op"},
    {RunEvent::Kind::kCollective, "collective"},
    {RunEvent::Kind::kModuleBegin, "module_begin"},
    {RunEvent::Kind::kModuleEnd, "module_end"},
    {RunEvent::Kind::kBackwardBegin, "backward_begin"},
    {RunEvent::Kind::kParameter, "parameter"},
    {RunEvent::Kind::kLoss, "loss"},
    {RunEvent::Kind::kGradient, "gradient"},
}};

// A recording's events are ops and collectives.
std::optional<RunEvent::Kind> RecordingKind(std::string_view name) {
  const std::optional<RunEvent::Kind> k = FindRunEventKind(name);
  if (k != RunEvent::Kind::kOp && k != RunEvent::Kind::kCollective) return std::nullopt;
  return k;
}

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
  if (r.Has("unavailable")) {
    d.unavailable = r.String("unavailable");
    if (d.unavailable.empty() || d.unavailable.size() > 4096)
      r.At("unavailable").Fail("expected why the tensor was not hashed");
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

// Reads an event's "from" (after its inputs): one entry per input, each null, an earlier event's
// index, or {"event", "op", "line"}.
std::vector<std::optional<RunEvent::Source>> SourcesFromJson(const JsonReader& r, size_t inputs,
                                                             int64_t index) {
  const size_t n = r.ArraySize(kMaxDigests);
  if (n != inputs) r.Fail(StrCat("has ", n, " entries for ", inputs, " inputs"));
  std::vector<std::optional<RunEvent::Source>> out(n);
  for (size_t i = 0; i < n; ++i) {
    const JsonReader item = r.At(i);
    if (item.json().is_null()) continue;
    if (index == 0) item.Fail("names an earlier event, but this is the rank's first");
    if (item.json().is_object()) {
      item.OnlyKeys({"event", "op", "line"});
      out[i] = RunEvent::Source{item.Int("event", 0, index - 1), item.String("op"),
                                item.Has("line") ? item.String("line") : ""};
      if (out[i]->op.empty() || out[i]->op.size() > 256) item.At("op").Fail("expected an op name");
    } else {
      out[i] = RunEvent::Source{item.AsInt(0, index - 1), "", ""};
    }
  }
  return out;
}

RunEvent EventFromJson(const JsonReader& r, int64_t rank, int64_t world_size, int64_t index) {
  r.ExpectObject();
  RunEvent e;
  const std::string& kind = r.String("kind");
  const std::optional<RunEvent::Kind> k = RecordingKind(kind);
  if (!k)
    r.At("kind").Fail(StrCat("unknown event kind '", ExcerptText(kind), "' (op or collective)"));
  e.kind = *k;
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
  if (r.Has("mesh")) {
    if (e.kind != RunEvent::Kind::kOp) r.At("mesh").Fail("only an op has a device mesh");
    e.mesh = r.Int("mesh", 0, kMaxMeshes - 1);
  }
  e.inputs = DigestsFromJson(r.At("inputs"));
  if (r.Has("outputs") && !r.At("outputs").json().is_null())
    e.outputs = DigestsFromJson(r.At("outputs"));
  if (r.Has("unavailable")) {
    e.unavailable = r.String("unavailable");
    if (e.unavailable.empty() || e.unavailable.size() > 4096)
      r.At("unavailable").Fail("expected why the outputs were not digested");
  }
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
  if (r.Has("from")) e.from = SourcesFromJson(r.At("from"), e.inputs.size(), index);
  if (r.Has("first_read")) {
    const JsonReader read = r.At("first_read");
    read.ExpectObject();
    read.OnlyKeys({"op", "line", "outputs"});
    e.first_read =
        RunEvent::FirstRead{read.String("op"), read.Has("line") ? read.String("line") : "",
                            DigestsFromJson(read.At("outputs"))};
    if (e.first_read->op.empty() || e.first_read->op.size() > 256)
      read.At("op").Fail("expected an op name");
    if (e.kind != RunEvent::Kind::kCollective) read.Fail("only a collective has a first read");
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

// Whether `key` is `word`: a comparison of known length (inlined), as every event's keys are read.
template <size_t N>
bool Is(std::string_view key, const char (&word)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), word, N - 1) == 0;
}

// The fast path of RunEventsFromNode: one event's checked text parsed straight into a RunEvent, for
// the plain form dtsim writes (no escapes in strings, integers as digits, known keys). It returns
// false on anything else, or on a value EventFromJson would refuse; the caller then reads that
// event through EventFromJson, which gives the value or the error with its JSON path. The checks
// below are EventFromJson's, as booleans.
class FastEvent {
 public:
  // `text` starts with the event; what follows it is not read.
  FastEvent(std::string_view text, std::unordered_set<std::string>* placements)
      : t_(text), placements_(placements) {}

  // After a successful Parse: the length of the event's text.
  size_t length() const { return p_; }

  bool Parse(RunEvent* e, int64_t rank, int64_t world_size, int64_t index) {
    bool has_kind = false, has_op = false, has_module = false, has_pass = false, has_inputs = false,
         has_args = false, has_results = false, has_group = false, has_from = false;
    if (!Lit('{')) return false;
    if (Peek('}')) return false;
    do {
      std::string_view key;
      if (!String(&key) || !Lit(':')) return false;
      if (Is(key, "kind")) {
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
      } else if (Is(key, "op")) {
        if (!Text(&e->op) || e->op.empty() || e->op.size() > 256) return false;
        has_op = true;
      } else if (Is(key, "module")) {
        if (!Text(&e->module)) return false;
        has_module = true;
      } else if (Is(key, "pass")) {
        if (!Text(&e->pass) || (e->pass != "forward" && e->pass != "backward")) return false;
        has_pass = true;
      } else if (Is(key, "line")) {
        if (!Text(&e->line)) return false;
      } else if (Is(key, "args") || Is(key, "results")) {
        std::vector<std::string>& list = Is(key, "args") ? e->args : e->results;
        if (!Placements(&list)) return false;
        (Is(key, "args") ? has_args : has_results) = true;
      } else if (Is(key, "group")) {
        if (!Ints(&e->group, 0, world_size - 1, SIZE_MAX)) return false;
        has_group = true;
      } else if (Is(key, "inputs")) {
        if (!Digests(&e->inputs)) return false;
        has_inputs = true;
      } else if (Is(key, "outputs")) {
        if (Null()) {
          e->outputs.reset();
        } else {
          e->outputs.emplace();
          if (!Digests(&*e->outputs)) return false;
        }
      } else if (Is(key, "mesh")) {
        int64_t mesh = 0;
        if (!Int(&mesh, 0, kMaxMeshes - 1)) return false;
        e->mesh = mesh;
      } else if (Is(key, "seq")) {
        int64_t seq = 0;
        if (!Int(&seq, 0, INT64_MAX)) return false;
        e->seq = seq;
      } else if (Is(key, "state")) {
        if (!Text(&e->state) || (e->state != "scheduled" && e->state != "started" &&
                                 e->state != "completed" && !e->state.empty()))
          return false;
      } else if (Is(key, "at")) {
        std::string_view v;
        if (!String(&v) || v != "end") return false;
        e->at_end = true;
      } else if (Is(key, "unavailable")) {
        if (!Text(&e->unavailable) || e->unavailable.empty() || e->unavailable.size() > 4096)
          return false;
      } else if (Is(key, "t_us") || Is(key, "dur_us")) {
        double t = 0;
        if (!Number(&t) || !(t >= 0) || t > kMaxEventMicros) return false;
        (Is(key, "t_us") ? e->t_us : e->dur_us) = t;
      } else if (Is(key, "from")) {
        // Indices and nulls; an entry with the op that wrote it since is the DOM path's.
        if (!Lit('[')) return false;
        e->from.clear();
        if (!Lit(']')) {
          do {
            if (Null()) {
              e->from.emplace_back();
            } else {
              int64_t source = 0;
              if (index == 0 || !Int(&source, 0, index - 1) || e->from.size() >= kMaxDigests)
                return false;
              e->from.emplace_back(RunEvent::Source{source, "", ""});
            }
          } while (Lit(','));
          if (!Lit(']')) return false;
        }
        has_from = true;
      } else if (Is(key, "written")) {
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
    if (has_from && e->from.size() != e->inputs.size()) return false;
    if (e->kind == RunEvent::Kind::kOp) return has_args && has_results;
    if (e->mesh) return false;  // only an op has a mesh: the DOM path names the problem
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
    // Correctly rounded, as nlohmann's strtod; out of range (either way) is the DOM path's case.
    const char* end = t_.data() + q;
    const auto [next, ec] = std::from_chars(t_.data() + p_, end, *out);
    if (ec != std::errc() || next != end) return false;
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
      if (Is(key, "shape")) {
        if (!Ints(&d->shape, 0, int64_t{1} << 62, 64)) return false;
        has_shape = true;
      } else if (Is(key, "dtype")) {
        if (!Text(&d->dtype) || d->dtype.empty() || d->dtype.size() > 64) return false;
        has_dtype = true;
      } else if (Is(key, "hash")) {
        if (Null()) {
          d->hash.reset();
        } else {
          std::string hash;
          if (!Text(&hash) || !IsShardHash(hash)) return false;
          d->hash = std::move(hash);
        }
      } else if (Is(key, "sketch") || Is(key, "scale")) {
        double v = 0;
        if (!Number(&v) || !std::isfinite(v)) return false;
        (Is(key, "sketch") ? d->sketch : d->scale) = v;
        (Is(key, "sketch") ? has_sketch : has_scale) = true;
      } else if (Is(key, "unavailable")) {
        if (!Text(&d->unavailable) || d->unavailable.empty() || d->unavailable.size() > 4096)
          return false;
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
// `at`: where they differ, the index of the first that does (the count's difference: none).
Same CompareAll(const std::vector<TensorDigest>& x, const std::vector<TensorDigest>& y,
                const char* what, std::string* text, std::optional<size_t>* at = nullptr) {
  if (x.size() != y.size()) {
    *text = StrCat(x.size(), " ", what, " vs ", y.size());
    return Same::kDiffers;
  }
  Same worst = Same::kExact;
  for (size_t i = 0; i < x.size(); ++i) {
    const Same s = Compare(x[i], y[i]);
    if (s == Same::kDiffers) {
      *text = StrCat(what, " ", i, ": ", DigestText(x[i]), " vs ", DigestText(y[i]));
      if (at != nullptr) *at = i;
      return s;
    }
    if (s > worst) worst = s;
  }
  return worst;
}

// The event that last wrote a storage, and the plain op that wrote it since, as a "from" entry
// names them: "event 41, all_gather over [0, 1] in layers.1 (forward) at train.py:60, then
// fsdp.split_with_sizes_copy.default at train.py:60".
std::string ProducerText(const std::vector<RunEvent>& events, const RunEvent::Source& source) {
  std::string text =
      StrCat("event ", source.event, ", ", EventLabel(events[static_cast<size_t>(source.event)]));
  if (!source.op.empty())
    text += StrCat(", then ", source.op, source.line.empty() ? "" : StrCat(" at ", source.line));
  return text;
}

// Whether a producing event's output changed after it completed: a collective's digest at
// completion against its first read ("first_read"); an op's results are not digested again.
struct AfterCompletion {
  enum class State { kOp, kNotChecked, kUnchanged, kChanged };
  State state = State::kNotChecked;
  std::string completed, read;  // kChanged: the two hashes
  std::string by, at;           // the first read's op and line (kUnchanged, kChanged)
};

AfterCompletion AfterCompletionOf(const RunEvent& p) {
  using State = AfterCompletion::State;
  AfterCompletion out;
  if (p.kind != RunEvent::Kind::kCollective) {
    out.state = State::kOp;
    return out;
  }
  if (!p.outputs || p.outputs->size() != 1 || !p.first_read || p.first_read->outputs.size() != 1 ||
      !(*p.outputs)[0].hash || !p.first_read->outputs[0].hash) {
    return out;
  }
  const TensorDigest& done = (*p.outputs)[0];
  const TensorDigest& read = p.first_read->outputs[0];
  out.by = p.first_read->op;
  out.at = p.first_read->line;
  const bool same =
      *done.hash == *read.hash && done.shape == read.shape && done.dtype == read.dtype;
  out.state = same ? State::kUnchanged : State::kChanged;
  if (!same) {
    out.completed = *done.hash;
    out.read = *read.hash;
  }
  return out;
}

// One run's AfterCompletion in words; `lines`: with the first read's line.
std::string AfterCompletionText(const AfterCompletion& a, bool lines = true) {
  using State = AfterCompletion::State;
  const std::string by = StrCat(a.by, lines && !a.at.empty() ? StrCat(" at ", a.at) : "");
  switch (a.state) {
    case State::kOp:
      return "whether its results changed after the op is not checked (an op's results are not "
             "digested again)";
    case State::kNotChecked:
      return "whether its output changed after it completed is not checked (no digest at a first "
             "read)";
    case State::kUnchanged:
      return StrCat("its output was unchanged at its first read, by ", by);
    case State::kChanged:
      break;
  }
  return StrCat("its output changed after it completed: ", a.completed, " at completion, ", a.read,
                " at its first read, by ", by,
                " (written outside the recorded ops: a faulty transport or a stray write)");
}

const RunEvent::Source* SourceOf(const std::vector<RunEvent>& events, size_t index, size_t k) {
  if (index >= events.size() || k >= events[index].from.size() || !events[index].from[k])
    return nullptr;
  const RunEvent::Source& source = *events[index].from[k];
  if (source.event < 0 || static_cast<size_t>(source.event) >= index) return nullptr;
  return &source;
}

// The provenance of input `k` of event `index` in both runs, in one line ("" where neither run
// recorded one). Lines are shown as the first run has them, not compared.
std::string SourcesText(const std::vector<RunEvent>& xs, const std::vector<RunEvent>& ys,
                        size_t index, size_t k) {
  const RunEvent::Source* x = SourceOf(xs, index, k);
  const RunEvent::Source* y = SourceOf(ys, index, k);
  if (x == nullptr && y == nullptr) return "";
  auto producer = [](const std::vector<RunEvent>& events, const RunEvent::Source* s) {
    return s == nullptr ? std::string("no recorded event") : ProducerText(events, *s);
  };
  const bool same = x != nullptr && y != nullptr && x->event == y->event && x->op == y->op;
  std::string text =
      same ? StrCat("its storage was last written by ", producer(xs, x), " (in both runs)")
           : StrCat("its storage was last written by ", producer(xs, x), " in the first run, by ",
                    producer(ys, y), " in the second");
  if (same) {
    const RunEvent& p = xs[static_cast<size_t>(x->event)];
    const RunEvent& q = ys[static_cast<size_t>(y->event)];
    std::string ignored;
    if (p.outputs && q.outputs &&
        CompareAll(*p.outputs, *q.outputs, "output", &ignored) == Same::kDiffers) {
      text += StrCat("; that event's outputs differ between the runs",
                     p.written || q.written
                         ? " (written in place before their digest: not counted as its divergence)"
                         : "");
    }
  }
  using State = AfterCompletion::State;
  const std::optional<AfterCompletion> ax =
      x ? std::optional(AfterCompletionOf(xs[static_cast<size_t>(x->event)])) : std::nullopt;
  const std::optional<AfterCompletion> ay =
      y ? std::optional(AfterCompletionOf(ys[static_cast<size_t>(y->event)])) : std::nullopt;
  if (ax && ay && ax->state == ay->state && ax->state != State::kChanged) {
    text += StrCat("; in both runs, ", AfterCompletionText(*ax, /*lines=*/false));
  } else {
    if (ax) text += StrCat("; in the first run, ", AfterCompletionText(*ax));
    if (ay) text += StrCat("; in the second, ", AfterCompletionText(*ay));
  }
  return text;
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

std::string_view ToString(RunEvent::Kind kind) {
  for (const auto& [k, name] : kKinds) {
    if (k == kind) return name;
  }
  return "?";
}

std::optional<RunEvent::Kind> FindRunEventKind(std::string_view name) {
  for (const auto& [k, text] : kKinds) {
    if (text == name) return k;
  }
  return std::nullopt;
}

std::string PlacementsText(const std::vector<std::string>& args,
                           const std::vector<std::string>& results) {
  std::string text;
  for (size_t i = 0; i < args.size(); ++i) text += StrCat(i ? ", " : "", args[i]);
  text += " -> ";
  for (size_t i = 0; i < results.size(); ++i) text += StrCat(i ? ", " : "", results[i]);
  return text;
}

std::string PlacementsText(const RunEvent& e) { return PlacementsText(e.args, e.results); }

std::string EventLabel(const RunEvent& e) {
  switch (e.kind) {
    case RunEvent::Kind::kModuleBegin:
      return StrCat(e.pass, " input of ", e.module);
    case RunEvent::Kind::kModuleEnd:
      return StrCat(e.pass, " output of ", e.module);
    case RunEvent::Kind::kBackwardBegin:
      return StrCat("output gradient of ", e.module);
    case RunEvent::Kind::kParameter:
      return StrCat("parameter ", e.name);
    case RunEvent::Kind::kLoss:
      return "loss";
    case RunEvent::Kind::kGradient:
      return StrCat("gradient of ", e.name);
    case RunEvent::Kind::kOp:
    case RunEvent::Kind::kCollective:
      break;
  }
  std::string text = e.op;
  if (text.empty() && !e.collectives.empty()) text = std::string(ToString(e.collectives[0].kind));
  if (text.empty()) text = std::string(ToString(e.kind));
  if (!e.group.empty()) text += StrCat(" over ", IntListToString(e.group));
  text += StrCat(" in ", e.module, " (", e.pass, ")");
  if (!e.line.empty()) text += StrCat(" at ", e.line);
  return text;
}

nlohmann::json ToJson(const TensorDigest& d) {
  nlohmann::json out = {{"shape", d.shape}, {"dtype", d.dtype}};
  out["hash"] = d.hash ? nlohmann::json(*d.hash) : nlohmann::json(nullptr);
  if (d.sketch) {
    out["sketch"] = *d.sketch;
    out["scale"] = d.scale.value_or(0);
  }
  if (!d.unavailable.empty()) out["unavailable"] = d.unavailable;
  return out;
}

nlohmann::json ToJson(const RunEvent& e) {
  auto digests = [](const std::vector<TensorDigest>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const TensorDigest& d : list) out.push_back(ToJson(d));
    return out;
  };
  const bool op = e.kind == RunEvent::Kind::kOp;
  nlohmann::json out = {{"kind", ToString(e.kind)}, {"op", e.op},
                        {"module", e.module},       {"pass", e.pass},
                        {"line", e.line},           {"inputs", digests(e.inputs)}};
  if (op) {
    out["args"] = e.args;
    out["results"] = e.results;
    if (e.mesh) out["mesh"] = *e.mesh;
  } else {
    out["group"] = e.group;
  }
  out["outputs"] = e.outputs ? digests(*e.outputs) : nlohmann::json(nullptr);
  if (!e.unavailable.empty()) out["unavailable"] = e.unavailable;
  if (e.at_end) out["at"] = "end";
  if (e.written) out["written"] = true;
  if (e.seq) out["seq"] = *e.seq;
  if (!e.state.empty()) out["state"] = e.state;
  if (e.read_before_wait) {
    out["read_before_wait"] = {{"op", e.read_before_wait->op}};
    if (!e.read_before_wait->line.empty())
      out["read_before_wait"]["line"] = e.read_before_wait->line;
  }
  if (!e.from.empty()) {
    nlohmann::json& from = out["from"] = nlohmann::json::array();
    for (const std::optional<RunEvent::Source>& source : e.from) {
      if (!source) {
        from.push_back(nullptr);
      } else if (source->op.empty()) {
        from.push_back(source->event);
      } else {
        nlohmann::json entry = {{"event", source->event}, {"op", source->op}};
        if (!source->line.empty()) entry["line"] = source->line;
        from.push_back(std::move(entry));
      }
    }
  }
  if (e.first_read) {
    out["first_read"] = {{"op", e.first_read->op}, {"outputs", digests(e.first_read->outputs)}};
    if (!e.first_read->line.empty()) out["first_read"]["line"] = e.first_read->line;
  }
  if (e.t_us) out["t_us"] = *e.t_us;
  if (e.dur_us) out["dur_us"] = *e.dur_us;
  return out;
}

nlohmann::json RunEventsToJson(const RunEvents& events) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [rank, list] : events) {
    nlohmann::json& rows = out[std::to_string(rank)] = nlohmann::json::array();
    for (const RunEvent& e : list) rows.push_back(ToJson(e));
  }
  return out;
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
    std::vector<RunEvent> list = RankEventsFromNode(node.At(key.c_str()), rank, world_size);
    std::vector<RunEvent>& events = out[rank];  // "0" and "00" are one rank: its events, in order
    if (events.empty()) {
      events = std::move(list);
    } else {
      events.insert(events.end(), std::make_move_iterator(list.begin()),
                    std::make_move_iterator(list.end()));
    }
  }
  return out;
}

std::vector<RunEvent> RankEventsFromNode(const internal::JsonNode& list, int64_t rank,
                                         int64_t world_size) {
  auto check_count = [&] {
    const size_t n = list.ArraySize();
    if (n > kMaxEventsPerRank) {
      list.Fail(StrCat("has ", n, " events; at most ", kMaxEventsPerRank, " per rank are read"));
    }
    return n;
  };
  std::vector<RunEvent> events;
  auto read_dom = [&](const internal::JsonNode& item) {
    return item.Read([&](const JsonReader& r) {
      return EventFromJson(r, rank, world_size, static_cast<int64_t>(events.size()));
    });
  };
  if (list.is_dom() || list.text()[0] != '[') {
    const size_t n = check_count();
    events.reserve(n);
    for (size_t i = 0; i < n; ++i) events.push_back(read_dom(list.At(i)));
    return events;
  }
  // From text: the elements in order, each through the fast path first, which finds where the
  // event ends (no pass over the list to index it); an event it does not take is read as one DOM.
  // The count is checked first, as before any event is read, when an event is refused.
  const std::string_view t = list.text();
  std::unordered_set<std::string> placements;
  try {
    size_t p = internal::SkipJsonSpace(t, 1);
    for (size_t i = 0; t[p] != ']'; ++i) {
      if (i == kMaxEventsPerRank) check_count();
      RunEvent e;
      FastEvent fast(t.substr(p), &placements);
      if (fast.Parse(&e, rank, world_size, static_cast<int64_t>(i))) {
        p += fast.length();
      } else {
        const size_t end = internal::JsonValueEnd(t, p);
        e = read_dom(internal::JsonNode::OfText(t.substr(p, end - p), list.field(),
                                                StrCat(list.path(), "[", i, "]")));
        p = end;
      }
      events.push_back(std::move(e));
      if (events.size() == 64) {
        // Room for as many more events as the rest of the text holds at the first ones' length.
        const size_t estimate = 64 * t.size() / std::max<size_t>(p, 1) + 64;
        events.reserve(std::min(estimate, kMaxEventsPerRank));
      }
      p = internal::SkipJsonSpace(t, p);
      if (t[p] == ',') p = internal::SkipJsonSpace(t, p + 1);
    }
  } catch (const InputError&) {
    check_count();
    throw;
  }
  return events;
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

// DiffRunEvents' comparison of one rank's events in the two runs, added to `diff`; `a` and `b` are
// the whole runs (a Flight Recorder divergence names the members that never issued a collective).
void DiffRank(int64_t rank, const std::vector<RunEvent>& xs, const std::vector<RunEvent>& ys,
              bool collectives_only, const RunEvents& a, const RunEvents& b, EventDiff* diff_out) {
  using Cause = EventDivergence::Cause;
  EventDiff& diff = *diff_out;
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
    std::optional<size_t> differing_input;
    const Same in = CompareAll(x.inputs, y.inputs, "input", &in_text, &differing_input);
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
          const std::string sources =
              differing_input ? SourcesText(xs, ys, i, *differing_input) : std::string();
          d.what = StrCat(in_text,
                          ", while every earlier event of this rank agreed: its bytes were "
                          "written outside the recorded ops and collectives, or read before "
                          "a collective completed",
                          sources.empty() ? "" : StrCat("; ", sources));
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
    d.what = collectives_only
                 ? StrCat(xs.size(), " collectives vs ", ys.size(), ": the ",
                          xs.size() > n ? "second" : "first",
                          " run's rank never issued this one (the next of the other run)")
                 : StrCat(xs.size(), " events vs ", ys.size(), ": the ",
                          xs.size() > n ? "second" : "first", " run's rank ended before this one");
    diff.first.push_back(std::move(d));
  }
}

void SortFirstDivergences(EventDiff* diff) {
  std::sort(diff->first.begin(), diff->first.end(),
            [](const EventDivergence& x, const EventDivergence& y) {
              return x.index != y.index ? x.index < y.index : x.rank < y.rank;
            });
}

}  // namespace

EventDiff DiffRunEvents(const RunEvents& a_all, const RunEvents& b_all, bool collectives_only) {
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
    if (found != b.end()) DiffRank(rank, xs, found->second, collectives_only, a, b, &diff);
  }
  SortFirstDivergences(&diff);
  return diff;
}

EventDiff DiffRunEventsByRank(const std::vector<int64_t>& ranks_a,
                              const std::vector<int64_t>& ranks_b,
                              const std::function<RankEventsPair(int64_t rank)>& read) {
  EventDiff diff;
  std::set_difference(ranks_a.begin(), ranks_a.end(), ranks_b.begin(), ranks_b.end(),
                      std::back_inserter(diff.ranks_only_in_a));
  std::set_difference(ranks_b.begin(), ranks_b.end(), ranks_a.begin(), ranks_a.end(),
                      std::back_inserter(diff.ranks_only_in_b));
  std::vector<int64_t> all;
  std::set_union(ranks_a.begin(), ranks_a.end(), ranks_b.begin(), ranks_b.end(),
                 std::back_inserter(all));
  const RunEvents none;
  for (int64_t rank : all) {
    const RankEventsPair events = read(rank);
    if (std::binary_search(ranks_a.begin(), ranks_a.end(), rank) &&
        std::binary_search(ranks_b.begin(), ranks_b.end(), rank)) {
      DiffRank(rank, events.first, events.second, /*collectives_only=*/false, none, none, &diff);
    }
  }
  SortFirstDivergences(&diff);
  return diff;
}

}  // namespace dtsim

namespace dtsim {
namespace {

// "[S(0), R]" -> which mesh dims are Replicate; nullopt when the text does not parse.
std::optional<std::vector<bool>> ReplicateDims(const std::string& text) {
  if (text.size() < 2) return std::nullopt;
  try {
    std::vector<bool> out;
    for (const Placement& p : ParsePlacements(text.substr(1, text.size() - 2)))
      out.push_back(p.is_replicate());
    return out;
  } catch (const InputError&) {
    return std::nullopt;
  }
}

}  // namespace

std::string SourceText(const std::vector<RunEvent>& events, size_t index, size_t k) {
  const RunEvent::Source* source = SourceOf(events, index, k);
  if (source == nullptr) return "";
  return StrCat("its storage was last written by ", ProducerText(events, *source), "; ",
                AfterCompletionText(AfterCompletionOf(events[static_cast<size_t>(source->event)])));
}

namespace {

struct Member {
  int64_t rank = 0;
  const RunEvent* event = nullptr;
  int64_t index = 0;
};

// An odd rank out's argument `k`: what last wrote its storage, and where a replica's storage was
// last written by another event (or only the replica's was: a reduction this rank skipped), that
// too ("" where neither is recorded).
std::string ReplicaSourceText(const RunEvents& events, const Member& odd, const Member* replica,
                              size_t k) {
  const std::vector<RunEvent>& mine = events.at(odd.rank);
  std::string text = SourceText(mine, static_cast<size_t>(odd.index), k);
  if (replica == nullptr) return text;
  const std::vector<RunEvent>& theirs = events.at(replica->rank);
  const RunEvent::Source* a = SourceOf(mine, static_cast<size_t>(odd.index), k);
  const RunEvent::Source* b = SourceOf(theirs, static_cast<size_t>(replica->index), k);
  if (b == nullptr) return text;
  if (a != nullptr && a->op == b->op &&
      EventLabel(mine[static_cast<size_t>(a->event)]) ==
          EventLabel(theirs[static_cast<size_t>(b->event)]))
    return text;
  return StrCat(text.empty() ? "no recorded event wrote its storage on this rank" : text,
                "; on rank ", replica->rank, " (a replica) its storage was last written by ",
                ProducerText(theirs, *b));
}

}  // namespace

ReplicaCheck CheckReplicas(const RunEvents& events, const std::vector<DeviceMesh>& meshes) {
  using Cause = EventDivergence::Cause;
  ReplicaCheck out;
  // (mesh, n) -> the n-th op of each of the mesh's ranks, in rank order.
  std::map<std::pair<int64_t, int64_t>, std::vector<Member>> ops;
  for (const auto& [rank, list] : events) {
    std::map<int64_t, int64_t> seen;  // mesh -> its ops so far on this rank
    for (size_t i = 0; i < list.size(); ++i) {
      const RunEvent& e = list[i];
      if (e.kind != RunEvent::Kind::kOp) continue;
      if (!e.mesh || *e.mesh >= static_cast<int64_t>(meshes.size())) {
        ++out.not_checked;
        continue;
      }
      ops[{*e.mesh, seen[*e.mesh]++}].push_back({rank, &e, static_cast<int64_t>(i)});
    }
  }
  std::map<int64_t, EventDivergence> first;  // rank -> its first divergence
  auto diverge = [&first, &out](const Member& m, Cause cause, std::string what) {
    auto found = first.find(m.rank);
    if (found != first.end() && found->second.index <= m.index) return;
    EventDivergence d;
    d.cause = cause;
    d.rank = m.rank;
    d.index = m.index;
    d.where = EventLabel(*m.event);
    d.what = std::move(what);
    first[m.rank] = std::move(d);
  };
  for (const auto& [key, members] : ops) {
    ++out.ops;
    const DeviceMesh& mesh = meshes[static_cast<size_t>(key.first)];
    // Every rank of the mesh op ran the same op, with as many arguments and results.
    const RunEvent& head = *members.front().event;
    bool same = true;
    for (const Member& m : members) {
      if (m.event->op != head.op || m.event->args.size() != head.args.size() ||
          m.event->results.size() != head.results.size()) {
        same = false;
        diverge(
            m, Cause::kStructure,
            StrCat("op ", key.second, " of mesh ", IntListToString(mesh.ranks()), ": rank ", m.rank,
                   " ran ", m.event->op, " where rank ", members.front().rank, " ran ", head.op));
      }
    }
    if (!same) continue;
    // Each argument (inputs) then each result (outputs): replica sets by masked coordinate.
    bool argument_odd = false;
    for (int pass = 0; pass < 2; ++pass) {
      const bool results = pass == 1;
      const size_t slots = results ? head.results.size() : head.args.size();
      for (size_t k = 0; k < slots; ++k) {
        const std::string& placements = results ? head.results[k] : head.args[k];
        const std::optional<std::vector<bool>> replicate = ReplicateDims(placements);
        if (!replicate || static_cast<int64_t>(replicate->size()) != mesh.ndim()) {
          ++out.not_checked;
          continue;
        }
        bool any = false;
        for (bool r : *replicate) any |= r;
        if (!any) continue;  // no replicas
        // masked coordinate -> hash -> members
        std::map<std::vector<int64_t>, std::map<std::string, std::vector<const Member*>>> sets;
        for (const Member& m : members) {
          const std::vector<TensorDigest>* digests =
              results ? (m.event->outputs ? &*m.event->outputs : nullptr) : &m.event->inputs;
          const std::string& mine = results ? m.event->results[k] : m.event->args[k];
          std::optional<std::vector<int64_t>> at = mesh.FindCoordinate(m.rank);
          if (digests == nullptr || k >= digests->size() || !(*digests)[k].hash || !at ||
              mine != placements) {
            ++out.not_checked;
            continue;
          }
          for (size_t d = 0; d < at->size(); ++d)
            if ((*replicate)[d]) (*at)[d] = -1;
          sets[*at][*(*digests)[k].hash].push_back(&m);
        }
        for (const auto& [coordinate, by_hash] : sets) {
          size_t holders = 0;
          for (const auto& [hash, holding] : by_hash) holders += holding.size();
          if (holders < 2) continue;
          ++out.tensors;
          if (by_hash.size() < 2) continue;
          ++out.odd;
          const auto majority = std::max_element(
              by_hash.begin(), by_hash.end(),
              [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
          // No hash held by more ranks than every other: each rank is an odd one out.
          size_t at_most = 0;
          for (const auto& [hash, holding] : by_hash)
            at_most += holding.size() == majority->second.size();
          const bool tie = at_most > 1;
          std::vector<int64_t> replicas;
          for (const Member* m : majority->second) replicas.push_back(m->rank);
          for (const auto& [hash, holding] : by_hash) {
            if (!tie && &hash == &majority->first) continue;
            for (const Member* m : holding) {
              std::string others;
              for (const auto& [other, with] : by_hash) {
                if (&other == &hash) continue;
                std::vector<int64_t> ranks;
                for (const Member* o : with) ranks.push_back(o->rank);
                others += StrCat(others.empty() ? "" : ", ", "ranks ", IntListToString(ranks),
                                 " hold ", other);
              }
              const std::string what =
                  tie ? StrCat(results ? "result " : "argument ", k, " (", placements, "): rank ",
                               m->rank, " holds ", hash,
                               "; its replicas disagree, no hash held by most: ", others)
                      : StrCat(results ? "result " : "argument ", k, " (", placements, "): rank ",
                               m->rank, " holds ", hash, ", its replicas (ranks ",
                               IntListToString(replicas), ") hold ", majority->first);
              if (!results) argument_odd = true;
              const std::string source =
                  results
                      ? std::string()
                      : ReplicaSourceText(events, *m, tie ? nullptr : majority->second.front(), k);
              diverge(*m, results && !argument_odd ? Cause::kComputed : Cause::kInput,
                      results && !argument_odd
                          ? StrCat(what, ", from arguments its replicas share: the op computed it")
                          : StrCat(what,
                                   ": written outside the recorded ops, or computed "
                                   "from replicas that already differed",
                                   source.empty() ? "" : StrCat("; ", source)));
            }
          }
        }
      }
    }
  }
  for (auto& [rank, d] : first) out.first.push_back(std::move(d));
  std::sort(out.first.begin(), out.first.end(),
            [](const EventDivergence& x, const EventDivergence& y) {
              return x.index != y.index ? x.index < y.index : x.rank < y.rank;
            });
  return out;
}

}  // namespace dtsim
