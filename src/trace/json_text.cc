// JSON text with dtsim's limits: ParseJsonText (trace.h), CheckJsonText and JsonNode (json_text.h).
#include "trace/json_text.h"

#include <set>
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

// ---- scanning text that CheckJsonText accepted ----

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

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

// `p` at the first character of a value: the position after its last.
size_t ValueEnd(std::string_view t, size_t p) {
  if (p >= t.size()) return p;
  const char c = t[p];
  if (c == '"') return StringEnd(t, p);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    while (p < t.size()) {
      const char d = t[p];
      if (d == '"') {
        p = StringEnd(t, p);
        continue;
      }
      if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) return p + 1;
      }
      ++p;
    }
    return p;
  }
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

int64_t RankOfKey(const std::string& key, int64_t world_size) {
  if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  const int64_t rank = std::stoll(key);
  return rank < world_size ? rank : -1;
}

std::string CheckJsonText(std::string_view text, const std::string& field,
                          const std::string& source) {
  CheckNoNul(text, field, source);
  CheckingSax sax(field, source);
  ParseWithMessages(field, source,
                    [&] { return nlohmann::json::sax_parse(text.begin(), text.end(), &sax); });
  return sax.format();
}

struct JsonNode::Index {
  std::vector<std::pair<std::string, std::string_view>> members;  // an object's
  std::vector<std::string_view> elements;                         // an array's
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
    const size_t end = ValueEnd(t, p);
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
  for (const auto& [name, value] : GetIndex().members) {
    if (name == key) return OfText(value, field_, path_.empty() ? key : path_ + "." + key);
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
  return OfText(GetIndex().elements[i], field_, path_ + "[" + std::to_string(i) + "]");
}

void JsonNode::Fail(const std::string& message) const {
  const nlohmann::json none;
  JsonReader(none, field_, path_).Fail(message);
}

}  // namespace internal
}  // namespace dtsim
