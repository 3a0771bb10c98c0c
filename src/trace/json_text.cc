// JSON text with dtsim's limits: ParseJsonText (trace.h), CheckJsonText and JsonNode (json_text.h).
#include "trace/json_text.h"

#include <array>
#include <cstring>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/trace/trace.h"

namespace dtsim {
namespace {

constexpr size_t kMaxJsonDepth = 512;

// The limits ParseJsonText checks while parsing, one event at a time: nesting depth (`depth`: the
// containers open around the event, as nlohmann's parser callback counts them) and duplicate keys.
class JsonLimits {
 public:
  JsonLimits(const std::string& field, const std::string& source)
      : field_(field), source_(source) {}

  void Depth(size_t depth) const {
    if (depth > kMaxJsonDepth) {
      throw InputError(field_,
                       StrCat(source_, " nests JSON deeper than ", kMaxJsonDepth, " levels"));
    }
  }
  void ObjectStart() { keys_.emplace_back(); }
  void ObjectEnd() {
    if (!keys_.empty()) keys_.pop_back();
  }
  void Key(const std::string& key) {
    if (!keys_.empty() && !keys_.back().insert(key).second) {
      throw InputError(
          field_, StrCat(source_, " has the key '", ExcerptText(key, 40), "' twice in one object"));
    }
  }

 private:
  const std::string& field_;
  const std::string& source_;
  std::vector<std::set<std::string>> keys_;
};

// Builds the DOM as nlohmann's own parser does, with JsonLimits' depth and duplicate-key checks at
// each event. Not nlohmann's callback parser: at the end of every object it scans the enclosing
// container for discarded values, which is quadratic in an array's length (a recording's
// per-rank lists at 2^18 ranks spent 80% of replay there).
class LimitedDomSax {
 public:
  LimitedDomSax(nlohmann::json& out, const std::string& field, const std::string& source)
      : dom_(out, /*allow_exceptions=*/true), limits_(field, source) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(nlohmann::json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(nlohmann::json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(nlohmann::json::number_float_t v, const std::string& s) {
    return dom_.number_float(v, s);
  }
  bool string(std::string& v) { return dom_.string(v); }
  bool binary(nlohmann::json::binary_t& v) { return dom_.binary(v); }
  bool start_object(size_t n) {
    limits_.Depth(open_);
    limits_.ObjectStart();
    ++open_;
    return dom_.start_object(n);
  }
  bool key(std::string& k) {
    limits_.Depth(open_);
    limits_.Key(k);
    return dom_.key(k);
  }
  bool end_object() {
    --open_;
    limits_.ObjectEnd();
    return dom_.end_object();
  }
  bool start_array(size_t n) {
    limits_.Depth(open_);
    ++open_;
    return dom_.start_array(n);
  }
  bool end_array() {
    --open_;
    return dom_.end_array();
  }
  template <typename Exception>
  bool parse_error(size_t position, const std::string& token, const Exception& ex) {
    return dom_.parse_error(position, token, ex);
  }

 private:
  nlohmann::detail::json_sax_dom_parser<nlohmann::json> dom_;
  JsonLimits limits_;
  size_t open_ = 0;
};

// JSON text holds no NUL byte (strings escape it); the parser would stop there and accept what came
// before.
void CheckNoNul(std::string_view text, const std::string& field, const std::string& source) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw InputError(field, StrCat(source, " is not valid JSON: a NUL byte at offset ", nul));
  }
}

std::string WithoutExceptionId(const std::string& what) {
  // drop nlohmann's "[json.exception.parse_error.101] "
  if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos) {
    return what.substr(what.find("] ") + 2);
  }
  return what;
}

// Runs `parse`, turning nlohmann's exceptions into InputError(field): a syntax error with its
// position, or a number out of double range (out_of_range 406, "1e400").
template <typename F>
auto ParseWithMessages(const std::string& field, const std::string& source, F&& parse) {
  try {
    return parse();
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(
        field,
        StrCat(source, " is not valid JSON: ", ExcerptText(WithoutExceptionId(e.what()), 200)));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(field, StrCat(source, " holds a number out of range: ",
                                   ExcerptText(WithoutExceptionId(e.what()), 200)));
  }
}

// A SAX handler that checks JsonLimits at the events where ParseJsonText's callback does, builds
// nothing, and notes the top-level "format" string.
class CheckingSax {
 public:
  CheckingSax(const std::string& field, const std::string& source) : limits_(field, source) {}

  const std::string& format() const { return format_; }

  bool null() { return Scalar(); }
  bool boolean(bool) { return Scalar(); }
  bool number_integer(nlohmann::json::number_integer_t) { return Scalar(); }
  bool number_unsigned(nlohmann::json::number_unsigned_t) { return Scalar(); }
  bool number_float(nlohmann::json::number_float_t, const std::string&) { return Scalar(); }
  bool string(std::string& value) {
    Scalar();
    if (open_ == 1 && top_key_ == "format") format_ = value;
    return true;
  }
  bool binary(nlohmann::json::binary_t&) { return Scalar(); }
  bool start_object(size_t) {
    limits_.Depth(open_);
    limits_.ObjectStart();
    ++open_;
    return true;
  }
  bool key(std::string& key) {
    limits_.Depth(open_);
    limits_.Key(key);
    if (open_ == 1) top_key_ = key;
    return true;
  }
  bool end_object() {
    --open_;
    limits_.Depth(open_);
    limits_.ObjectEnd();
    return true;
  }
  bool start_array(size_t) {
    limits_.Depth(open_);
    ++open_;
    return true;
  }
  bool end_array() {
    --open_;
    limits_.Depth(open_);
    return true;
  }
  template <typename Exception>
  bool parse_error(size_t, const std::string&, const Exception& e) {
    throw e;  // the same exception the DOM parser throws, so the same message
  }

 private:
  bool Scalar() {
    limits_.Depth(open_);
    return true;
  }

  JsonLimits limits_;
  size_t open_ = 0;  // containers open
  std::string top_key_;
  std::string format_;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// ---- the quick check: CheckJsonText's common case without nlohmann's lexer ----

// A validating pass over JSON text that accepts only what the SAX check above certainly accepts
// (the conditions below are each as strict as nlohmann's or stricter), building nothing and
// copying no string. Anything else (a syntax error, a key or "format" value with escapes, a
// surrogate escape, a number near the double range, nesting near the limit, a duplicate key, a
// byte order mark) makes it give up, and the SAX check then accepts or refuses with its message.
class QuickJsonCheck {
 public:
  explicit QuickJsonCheck(std::string_view text) : t_(text) {}

  bool Run(std::string* format) {
    Ws();
    if (!Value(0)) return false;
    Ws();
    if (p_ != t_.size()) return false;
    *format = std::string(format_);
    return true;
  }

 private:
  // Below the SAX check's limit (kMaxJsonDepth), so nothing it would refuse is accepted here.
  static constexpr size_t kMaxDepth = kMaxJsonDepth - 8;
  // An object with more keys than this checks duplicates with a hash set, not a scan.
  static constexpr size_t kScannedKeys = 32;

  void Ws() {
    while (p_ < t_.size() && IsSpace(t_[p_])) ++p_;
  }
  bool At(char c) const { return p_ < t_.size() && t_[p_] == c; }

  bool Value(size_t depth) {
    if (p_ >= t_.size()) return false;
    switch (t_[p_]) {
      case '{':
        return Object(depth + 1);
      case '[':
        return Array(depth + 1);
      case '"': {
        std::string_view unused;
        bool escaped = false;
        return String(&unused, &escaped);
      }
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }

  bool Literal(std::string_view word) {
    if (t_.substr(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }

  // `p_` at a container's opening bracket: moves past it and the blanks after it, and past the
  // closing bracket when it closes at once (`*empty`). False when it nests too deep.
  bool Open(size_t depth, char close, bool* empty) {
    if (depth > kMaxDepth) return false;
    ++p_;
    Ws();
    *empty = At(close);
    if (*empty) ++p_;
    return true;
  }

  bool Object(size_t depth) {
    bool empty = false;
    if (!Open(depth, '}', &empty)) return false;
    if (empty) return true;
    const size_t first_key = keys_.size();
    std::unique_ptr<std::unordered_set<std::string_view>> many;
    bool ok = true;
    while (ok) {
      std::string_view key;
      bool escaped = false;
      // A key with escapes would need decoding to compare: left to the SAX check.
      if (!At('"') || !String(&key, &escaped) || escaped) {
        ok = false;
        break;
      }
      if (!many) {
        for (size_t k = first_key; k < keys_.size() && ok; ++k) ok = !SameKey(keys_[k], key);
        keys_.push_back(key);
        if (keys_.size() - first_key > kScannedKeys) {
          many = std::make_unique<std::unordered_set<std::string_view>>(
              keys_.begin() + static_cast<std::ptrdiff_t>(first_key), keys_.end());
        }
      } else {
        ok = many->insert(key).second;
      }
      if (!ok) break;
      Ws();
      if (!At(':')) {
        ok = false;
        break;
      }
      ++p_;
      Ws();
      if (depth == 1 && key == "format" && At('"')) {
        std::string_view value;
        bool value_escaped = false;
        ok = String(&value, &value_escaped) && !value_escaped;
        format_ = value;
      } else {
        ok = Value(depth);
      }
      if (!ok) break;
      Ws();
      if (At('}')) {
        ++p_;
        break;
      }
      if (!At(',')) {
        ok = false;
        break;
      }
      ++p_;
      Ws();
    }
    keys_.resize(first_key);
    return ok;
  }

  bool Array(size_t depth) {
    bool empty = false;
    if (!Open(depth, ']', &empty)) return false;
    if (empty) return true;
    while (true) {
      if (!Value(depth)) return false;
      Ws();
      if (At(']')) {
        ++p_;
        return true;
      }
      if (!At(',')) return false;
      ++p_;
      Ws();
    }
  }

  // `p_` at the opening quote. `out`: the text between the quotes; `escaped`: whether it holds an
  // escape (its text is then not its value).
  bool String(std::string_view* out, bool* escaped) {
    const size_t start = ++p_;
    while (true) {
      while (p_ < t_.size() && kPlain[static_cast<unsigned char>(t_[p_])]) ++p_;
      if (p_ >= t_.size()) return false;
      const unsigned char c = static_cast<unsigned char>(t_[p_]);
      if (c == '"') break;
      if (c == '\\') {
        *escaped = true;
        if (!Escape()) return false;
      } else if (c >= 0x80) {
        if (!Utf8()) return false;
      } else {
        return false;  // a control character
      }
    }
    *out = t_.substr(start, p_ - start);
    ++p_;
    return true;
  }

  // `p_` at a backslash. A \u escape of a surrogate (which must pair) is left to the SAX check.
  bool Escape() {
    if (p_ + 1 >= t_.size()) return false;
    const char e = t_[p_ + 1];
    if (std::strchr("\"\\/bfnrt", e) != nullptr && e != '\0') {
      p_ += 2;
      return true;
    }
    if (e != 'u' || p_ + 6 > t_.size()) return false;
    unsigned code = 0;
    for (size_t i = p_ + 2; i < p_ + 6; ++i) {
      const char h = t_[i];
      unsigned digit = 0;
      if (h >= '0' && h <= '9') {
        digit = static_cast<unsigned>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        digit = static_cast<unsigned>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        digit = static_cast<unsigned>(h - 'A' + 10);
      } else {
        return false;
      }
      code = code * 16 + digit;
    }
    if (code >= 0xD800 && code <= 0xDFFF) return false;
    p_ += 6;
    return true;
  }

  // `p_` at a byte >= 0x80: one well-formed UTF-8 sequence (RFC 3629: no overlong form, no
  // surrogate, nothing above U+10FFFF).
  bool Utf8() {
    const auto byte = [&](size_t i) {
      return p_ + i < t_.size() ? static_cast<unsigned char>(t_[p_ + i]) : 0u;
    };
    const unsigned c = byte(0);
    const auto in = [](unsigned b, unsigned lo, unsigned hi) { return b >= lo && b <= hi; };
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
    if (in(c, 0xC2, 0xDF)) {
      n = 2;
    } else if (in(c, 0xE0, 0xEF)) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (in(c, 0xF0, 0xF4)) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (!in(byte(1), lo, hi)) return false;
    for (size_t i = 2; i < n; ++i)
      if (!in(byte(i), 0x80, 0xBF)) return false;
    p_ += n;
    return true;
  }

  // JSON's number grammar, and only magnitudes well inside double's range (a number the SAX check
  // would find out of range, or one near it, is left to it).
  bool Number() {
    if (At('-')) ++p_;
    const size_t int_start = p_;
    if (At('0')) {
      ++p_;
    } else {
      if (p_ >= t_.size() || t_[p_] < '1' || t_[p_] > '9') return false;
      while (p_ < t_.size() && IsDigit(t_[p_])) ++p_;
    }
    const size_t int_digits = p_ - int_start;
    if (At('.')) {
      ++p_;
      if (p_ >= t_.size() || !IsDigit(t_[p_])) return false;
      while (p_ < t_.size() && IsDigit(t_[p_])) ++p_;
    }
    int64_t exponent = 0;
    if (At('e') || At('E')) {
      ++p_;
      bool negative = false;
      if (At('+') || At('-')) negative = t_[p_++] == '-';
      const size_t exp_start = p_;
      while (p_ < t_.size() && IsDigit(t_[p_])) {
        if (p_ - exp_start >= 4) return false;
        exponent = exponent * 10 + (t_[p_] - '0');
        ++p_;
      }
      if (p_ == exp_start) return false;
      if (negative) exponent = -exponent;
    }
    constexpr int64_t kSafeDecimalDigits = 300;  // 1e300 is far below the largest double
    return exponent >= -kSafeDecimalDigits &&
           static_cast<int64_t>(int_digits) + exponent <= kSafeDecimalDigits;
  }
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }
  // Equal keys, comparing the cheap bytes first (an event's keys mostly differ in them).
  static bool SameKey(std::string_view a, std::string_view b) {
    return a.size() == b.size() && (a.empty() || (a[0] == b[0] && a.back() == b.back() && a == b));
  }

  // The bytes a string holds as themselves: not a quote, backslash, control character or the start
  // of a multi-byte UTF-8 sequence.
  static constexpr std::array<bool, 256> kPlain = [] {
    std::array<bool, 256> plain{};
    for (int c = 0x20; c < 0x80; ++c) plain[static_cast<size_t>(c)] = c != '"' && c != '\\';
    return plain;
  }();

  std::string_view t_;
  size_t p_ = 0;
  std::vector<std::string_view> keys_;  // the keys of the objects open, innermost last
  std::string_view format_;
};

// ---- scanning text that CheckJsonText accepted ----

size_t SkipSpace(std::string_view t, size_t p) {
  while (p < t.size() && IsSpace(t[p])) ++p;
  return p;
}

// `p` at the opening quote of a string: the position after its closing quote.
size_t StringEnd(std::string_view t, size_t p) {
  for (++p; p < t.size(); ++p) {
    if (t[p] == '\\') {
      ++p;
    } else if (t[p] == '"') {
      return p + 1;
    }
  }
  return t.size();
}

// `p` at a container's opening bracket: the position after its closing one. With `children`, notes
// where each of its direct children that is a container ends (start -> length), unless it has more
// than kMaxNotedChildren of them (then `children` is left empty: a list of a million ranks is
// scanned again where it is read).
constexpr size_t kMaxNotedChildren = 4096;
size_t ContainerEnd(std::string_view t, size_t p,
                    std::unordered_map<const char*, size_t>* children = nullptr) {
  size_t depth = 0;
  size_t child_start = 0;
  bool too_many = children == nullptr;
  while (p < t.size()) {
    const char d = t[p];
    if (d == '"') {
      p = StringEnd(t, p);
      continue;
    }
    if (d == '{' || d == '[') {
      if (++depth == 2) child_start = p;
    } else if (d == '}' || d == ']') {
      if (--depth == 0) return p + 1;
      if (depth == 1 && !too_many) {
        if (children->size() == kMaxNotedChildren) {
          too_many = true;
          children->clear();
        } else {
          children->emplace(t.data() + child_start, p + 1 - child_start);
        }
      }
    }
    ++p;
  }
  return p;
}

// `p` at the first character of a value: the position after its last.
size_t ValueEnd(std::string_view t, size_t p) {
  if (p >= t.size()) return p;
  const char c = t[p];
  if (c == '"') return StringEnd(t, p);
  if (c == '{' || c == '[') return ContainerEnd(t, p);
  while (p < t.size() && t[p] != ',' && t[p] != ']' && t[p] != '}' && !IsSpace(t[p])) ++p;
  return p;
}

std::string_view Trimmed(std::string_view t) {
  size_t b = 0, e = t.size();
  while (b < e && IsSpace(t[b])) ++b;
  while (e > b && IsSpace(t[e - 1])) --e;
  return t.substr(b, e - b);
}

}  // namespace

nlohmann::json ParseJsonText(std::string_view text, const std::string& field,
                             const std::string& source) {
  // Depth and duplicate keys are checked while parsing (LimitedDomSax), so hostile input is refused
  // before it is built.
  CheckNoNul(text, field, source);
  return ParseWithMessages(field, source, [&] {
    nlohmann::json out;
    LimitedDomSax sax(out, field, source);
    nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
    return out;
  });
}

namespace internal {

size_t SkipJsonSpace(std::string_view text, size_t p) { return SkipSpace(text, p); }
size_t JsonValueEnd(std::string_view text, size_t p) { return ValueEnd(text, p); }

bool QuickCheckJson(std::string_view text, std::string* format) {
  return QuickJsonCheck(text).Run(format);
}

int64_t RankOfKey(const std::string& key, int64_t world_size) {
  if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  const int64_t rank = std::stoll(key);
  return rank < world_size ? rank : -1;
}

std::string CheckJsonText(std::string_view text, const std::string& field,
                          const std::string& source) {
  CheckNoNul(text, field, source);
  std::string format;
  if (QuickCheckJson(text, &format)) return format;
  CheckingSax sax(field, source);
  ParseWithMessages(field, source,
                    [&] { return nlohmann::json::sax_parse(text.begin(), text.end(), &sax); });
  return sax.format();
}

struct JsonNode::Index {
  std::vector<std::pair<std::string, std::string_view>> members;  // an object's
  std::vector<std::string_view> elements;                         // an array's
  // Members or elements (by position) that are containers whose own container children's ends were
  // noted while they were scanned here: a node made of one starts with them, so its index is built
  // without scanning its text again. Only those noted are held (a list of a million states adds
  // nothing).
  std::unordered_map<size_t, std::shared_ptr<const ChildSpans>> spans;
};

JsonNode JsonNode::OfDom(const nlohmann::json& json, std::string field, std::string path) {
  JsonNode n;
  n.dom_ = &json;
  n.field_ = std::move(field);
  n.path_ = std::move(path);
  return n;
}

JsonNode JsonNode::OfText(std::string_view text, std::string field, std::string path) {
  JsonNode n;
  n.text_ = Trimmed(text);
  DTSIM_CHECK(!n.text_.empty(), "JsonNode of empty text");
  n.field_ = std::move(field);
  n.path_ = std::move(path);
  return n;
}

const char* JsonNode::TypeName() const {
  if (dom_) return dom_->type_name();
  switch (text_[0]) {
    case '{':
      return "object";
    case '[':
      return "array";
    case '"':
      return "string";
    case 't':
    case 'f':
      return "boolean";
    case 'n':
      return "null";
    default:
      return "number";
  }
}

nlohmann::json JsonNode::Parse() const { return nlohmann::json::parse(text_.begin(), text_.end()); }

nlohmann::json JsonNode::ParseWithout(std::initializer_list<const char*> skip) const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : GetIndex().members) {
    bool skipped = false;
    for (const char* s : skip) skipped = skipped || key == s;
    if (!skipped) out[key] = nlohmann::json::parse(value.begin(), value.end());
  }
  return out;
}

const JsonNode::Index& JsonNode::GetIndex() const {
  if (index_) return *index_;
  auto index = std::make_shared<Index>();
  const std::string_view t = text_;
  const char open = t[0];
  DTSIM_CHECK(open == '{' || open == '[', "JsonNode index of a scalar");
  const char close = open == '{' ? '}' : ']';
  size_t p = SkipSpace(t, 1);
  while (p < t.size() && t[p] != close) {
    std::string key;
    if (open == '{') {
      const size_t key_end = StringEnd(t, p);
      const std::string_view raw = t.substr(p + 1, key_end - p - 2);
      // A key with escapes is decoded by the parser; others are their text (valid UTF-8, checked).
      key = raw.find('\\') == std::string_view::npos
                ? std::string(raw)
                : nlohmann::json::parse(t.begin() + p, t.begin() + key_end).get<std::string>();
      p = SkipSpace(t, key_end);
      DTSIM_CHECK(p < t.size() && t[p] == ':', "JsonNode: unchecked text at ", path_);
      p = SkipSpace(t, p + 1);
    }
    size_t end = 0;
    std::shared_ptr<ChildSpans> noted;
    const auto known = spans_ ? spans_->find(t.data() + p) : ChildSpans::const_iterator();
    if (spans_ && known != spans_->end()) {
      end = p + known->second;  // this node's scan was done by its parent's
    } else if (t[p] == '{' || t[p] == '[') {
      noted = std::make_shared<ChildSpans>();
      end = ContainerEnd(t, p, noted.get());
      if (noted->empty()) noted.reset();
    } else {
      end = ValueEnd(t, p);
    }
    if (noted) {
      index->spans.emplace(open == '{' ? index->members.size() : index->elements.size(),
                           std::move(noted));
    }
    if (open == '{') {
      index->members.emplace_back(std::move(key), t.substr(p, end - p));
    } else {
      index->elements.push_back(t.substr(p, end - p));
    }
    p = SkipSpace(t, end);
    if (p < t.size() && t[p] == ',') p = SkipSpace(t, p + 1);
  }
  index_ = std::move(index);
  return *index_;
}

bool JsonNode::Has(const char* key) const {
  if (dom_) return JsonReader(*dom_, field_, path_).Has(key);
  if (text_[0] != '{') return false;
  for (const auto& member : GetIndex().members) {
    if (member.first == key) return true;
  }
  return false;
}

JsonNode JsonNode::At(const char* key) const {
  if (dom_) {
    const JsonReader child = JsonReader(*dom_, field_, path_).At(key);
    return OfDom(child.json(), field_, child.path());
  }
  ExpectObject();
  const Index& index = GetIndex();
  for (size_t m = 0; m < index.members.size(); ++m) {
    if (index.members[m].first != key) continue;
    JsonNode child =
        OfText(index.members[m].second, field_, path_.empty() ? key : path_ + "." + key);
    if (const auto noted = index.spans.find(m); noted != index.spans.end())
      child.spans_ = noted->second;
    return child;
  }
  // JsonReader's message for a missing key.
  const nlohmann::json empty = nlohmann::json::object();
  JsonReader(empty, field_, path_).At(key);
  ThrowInternal(__FILE__, __LINE__, "missing key", "JsonReader::At found a key of an empty object");
}

std::vector<std::string> JsonNode::Keys() const {
  ExpectObject();
  std::vector<std::string> keys;
  if (dom_) {
    for (const auto& item : dom_->items()) keys.push_back(item.key());
    return keys;
  }
  for (const auto& member : GetIndex().members) keys.push_back(member.first);
  return keys;
}

void JsonNode::ExpectObject() const {
  if (dom_ || text_[0] != '{') Read([](const JsonReader& r) { r.ExpectObject(); });
}

size_t JsonNode::ArraySize() const {
  if (dom_ || text_[0] != '[') return Read([](const JsonReader& r) { return r.ArraySize(); });
  return GetIndex().elements.size();
}

JsonNode JsonNode::At(size_t i) const {
  if (dom_) {
    const JsonReader child = JsonReader(*dom_, field_, path_).At(i);
    return OfDom(child.json(), field_, child.path());
  }
  DTSIM_CHECK(text_[0] == '[' && i < GetIndex().elements.size(), "JsonNode::At(", i, ") at ",
              path_);
  JsonNode child = OfText(GetIndex().elements[i], field_, path_ + "[" + std::to_string(i) + "]");
  if (const auto noted = GetIndex().spans.find(i); noted != GetIndex().spans.end())
    child.spans_ = noted->second;
  return child;
}

void JsonNode::Fail(const std::string& message) const {
  const nlohmann::json none;
  JsonReader(none, field_, path_).Fail(message);
}

}  // namespace internal
}  // namespace dtsim
