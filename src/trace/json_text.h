// JSON text read without building it whole (internal to dtsim_trace): CheckJsonText checks a file's
// text with ParseJsonText's rules and messages but builds nothing, and JsonNode walks a value
// either as a node of a parsed DOM or as a span of such checked text, whose objects' members and
// arrays' elements are found by scanning and parsed into a DOM only where a reader asks for one. A
// DOM of nlohmann::json costs 5 to 20 times its text (every value 16 bytes, every object a
// std::map, every list a heap block); reading a trace through JsonNode holds the text, one
// element's DOM at a time and what is built from them.
//
// Example: const std::string text = R"({"ranks": [{"rank": 0}, {"rank": 1}]})";
//          CheckJsonText(text, "trace", "'t.json'");
//          JsonNode root = JsonNode::OfText(text, "trace");
//          root.At("ranks").ArraySize() == 2;
//          root.At("ranks").At(1).Read([](const JsonReader& r) { return r.Int("rank"); }) == 1;
//          root.At("steps") throws InputError("trace", "steps: missing"), as JsonReader::At does.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtsim/layout/json_reader.h"

namespace dtsim::internal {

// Checks `text` as ParseJsonText(text, field, source) does — syntax (with the byte position), no
// NUL byte, nesting at most 512 deep, no key twice in one object, numbers within double range —
// with the same InputError messages, but builds nothing (memory: the nesting depth). Returns the
// top-level "format" when the text is an object whose "format" is a string, else "".
std::string CheckJsonText(std::string_view text, const std::string& field,
                          const std::string& source);

// CheckJsonText's fast path: true (and the top-level "format" as CheckJsonText returns it) only for
// text that CheckJsonText accepts; false for everything it refuses and for what this pass leaves to
// it (escaped keys, surrogate escapes, numbers near the double range, nesting near the limit, a
// byte order mark). Exposed for tests.
bool QuickCheckJson(std::string_view text, std::string* format);

// In text that CheckJsonText accepted: the position of the first non-space byte at or after `p`,
// and, `p` at the first byte of a value, the position after its last.
size_t SkipJsonSpace(std::string_view text, size_t p);
size_t JsonValueEnd(std::string_view text, size_t p);

// A per-rank object's key ("3": a recording's "events" and "memory" are keyed by rank) as a rank
// of a world of `world_size`: the decimal number, or -1 when the key is none (not digits only, too
// long, or outside 0..world_size-1).
int64_t RankOfKey(const std::string& key, int64_t world_size);

class JsonNode {
 public:
  // The root of a DOM (which outlives the node and every node made from it).
  static JsonNode OfDom(const nlohmann::json& json, std::string field, std::string path = "");
  // The root of text that CheckJsonText accepted (which outlives the node and every node made from
  // it). Precondition: CheckJsonText(text, ...) returned (anything else is an internal error).
  static JsonNode OfText(std::string_view text, std::string field, std::string path = "");

  const std::string& field() const { return field_; }
  const std::string& path() const { return path_; }
  bool is_dom() const { return dom_ != nullptr; }
  // A text node's text (checked JSON, no surrounding whitespace); empty for a DOM node.
  std::string_view text() const { return text_; }

  // JsonReader's rules and messages (json_reader.h): Has is false on a non-object; At(key) requires
  // an object holding `key`; ArraySize a list. At(i) requires i < ArraySize().
  bool Has(const char* key) const;
  JsonNode At(const char* key) const;
  void ExpectObject() const;
  size_t ArraySize() const;
  JsonNode At(size_t i) const;
  // Throws InputError(field, "<path>: <message>").
  [[noreturn]] void Fail(const std::string& message) const;

  // nlohmann's type_name() of this value: "object", "array", "string", "number", "boolean", "null".
  const char* TypeName() const;
  // An object's keys, in the order of the text (of a DOM: its order). Requires an object.
  std::vector<std::string> Keys() const;

  // Returns f(reader) for a JsonReader over this value as a DOM: for text, parsed now and freed
  // when f returns (f must not return references into it).
  template <typename F>
  auto Read(F&& f) const -> decltype(f(std::declval<const JsonReader&>())) {
    if (dom_) return f(JsonReader(*dom_, field_, path_));
    const nlohmann::json json = Parse();
    return f(JsonReader(json, field_, path_));
  }
  // The same on an object without its members `skip` (for text they are never parsed; a DOM is
  // read whole). A value that is not an object is read whole (f's ExpectObject then fails).
  template <typename F>
  auto ReadWithout(std::initializer_list<const char*> skip, F&& f) const
      -> decltype(f(std::declval<const JsonReader&>())) {
    if (dom_ || TypeName() != std::string_view("object")) return Read(std::forward<F>(f));
    const nlohmann::json json = ParseWithout(skip);
    return f(JsonReader(json, field_, path_));
  }

 private:
  struct Index;  // an object's members or an array's elements, by their spans of text
  // Where the direct children of a value that are containers end: start -> length.
  using ChildSpans = std::unordered_map<const char*, size_t>;
  JsonNode() = default;
  nlohmann::json Parse() const;
  nlohmann::json ParseWithout(std::initializer_list<const char*> skip) const;
  const Index& GetIndex() const;

  const nlohmann::json* dom_ = nullptr;  // a DOM node, or
  std::string_view text_;                // the value's text (no surrounding whitespace)
  std::string field_;
  std::string path_;
  mutable std::shared_ptr<const Index> index_;  // text only: built on first use, shared by copies
  std::shared_ptr<const ChildSpans> spans_;     // text only: noted by the parent's scan, or null
};

}  // namespace dtsim::internal
