// JsonReader: typed, path-aware reading of JSON that other tools or people wrote (traces, batch
// lines), so that every problem becomes an InputError naming the field, its path and the offending
// value — never a crash, never a silent default. No LibTorch.
//
// Example: JsonReader r(j, "trace", "steps[2]");  r.Int("mesh_dim", 0, 64) reads j["mesh_dim"], and
// a string there throws InputError("trace", "steps[2].mesh_dim: expected an integer, got \"x\"").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim {

// Shortens a value for an error message: at most `max_chars` characters of its JSON text (invalid
// UTF-8 replaced).
std::string Excerpt(const nlohmann::json& value, size_t max_chars = 80);
// Shortens text for an error message (invalid UTF-8 replaced, at most `max_chars` characters, then
// "…"). Characters a terminal would not show are escaped as JSON writes them: control characters
// ("\u0001", "\u007f") and the invisible ones of IsInvisibleCodePoint ("S(0)\u00a0" for a
// no-break space after S(0)), so a message always shows what was typed.
std::string ExcerptText(std::string_view text, size_t max_chars = 80);
// True when `text` is valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool IsValidUtf8(std::string_view text);
// True for code points that print as nothing or as a blank: C0/C1 controls, DEL, the Unicode
// spaces other than ' ' (U+00A0 no-break space, U+2000..U+200A, U+202F, U+3000), zero-width and
// bidi marks (U+200B..U+200F, U+2028..U+202E, U+2060..U+206F), U+00AD soft hyphen, U+FEFF, the
// variation selectors and tags. Example: IsInvisibleCodePoint(0xA0) is true, (0xE9) ('é') false.
bool IsInvisibleCodePoint(uint32_t code_point);
// Describes the first character of `text` outside printable ASCII (' ' to '~') and the ASCII blanks
// ('\t', '\n', '\v', '\f', '\r'), for messages about text that must be plain ASCII (placements,
// integers); nullopt when there is none. Examples: "S(0)\xc2\xa0" → "the invisible character
// U+00A0 (no-break space)", "S(é)" → "the character 'é' (U+00E9)", "S\x01" → "the control
// character U+0001", "\xff" → "the byte 0xff, which is not UTF-8".
std::optional<std::string> DescribeFirstNonAscii(std::string_view text);
// Describes the first invisible character (IsInvisibleCodePoint) of valid UTF-8 `text` as above;
// nullopt when every character is visible. For names, which may be non-ASCII but not invisible.
std::optional<std::string> DescribeFirstInvisible(std::string_view text);
// JSON text with invalid UTF-8 replaced (never throws): what dtsim prints.
std::string SafeDump(const nlohmann::json& value, int indent = -1);

class JsonReader {
 public:
  // `field` is the InputError field ("trace", "batch"); `path` the location of `json` ("" for the
  // root).
  JsonReader(const nlohmann::json& json, std::string field, std::string path = "");

  const nlohmann::json& json() const { return json_; }
  const std::string& path() const { return path_; }
  const std::string& field() const { return field_; }
  bool Has(const char* key) const;

  // The member `key` (which must exist), as a reader.
  JsonReader At(const char* key) const;
  // Element i of an array.
  JsonReader At(size_t i) const;
  // Requires an object / an array (of at most `max_size` entries).
  void ExpectObject() const;
  size_t ArraySize(size_t max_size = std::numeric_limits<size_t>::max()) const;
  // Refuses keys of this object outside `allowed` ("unknown key 'x' (expected one of ...)").
  void OnlyKeys(std::initializer_list<const char*> allowed) const;

  // Scalars of this value.
  int64_t AsInt(int64_t min = std::numeric_limits<int64_t>::min(),
                int64_t max = std::numeric_limits<int64_t>::max()) const;
  double AsNumber() const;
  bool AsBool() const;
  const std::string& AsString() const;
  std::vector<int64_t> AsInts(int64_t min = std::numeric_limits<int64_t>::min(),
                              int64_t max = std::numeric_limits<int64_t>::max(),
                              size_t max_size = std::numeric_limits<size_t>::max()) const;
  std::vector<std::vector<int64_t>> AsIntLists(
      int64_t min = std::numeric_limits<int64_t>::min(),
      int64_t max = std::numeric_limits<int64_t>::max()) const;
  std::vector<std::string> AsStrings() const;

  // Members: the same, for json[key] (which must exist).
  int64_t Int(const char* key, int64_t min = std::numeric_limits<int64_t>::min(),
              int64_t max = std::numeric_limits<int64_t>::max()) const {
    return At(key).AsInt(min, max);
  }
  double Number(const char* key) const { return At(key).AsNumber(); }
  bool Bool(const char* key) const { return At(key).AsBool(); }
  const std::string& String(const char* key) const { return At(key).AsString(); }
  std::vector<int64_t> Ints(const char* key, int64_t min = std::numeric_limits<int64_t>::min(),
                            int64_t max = std::numeric_limits<int64_t>::max()) const {
    return At(key).AsInts(min, max);
  }

  // Throws InputError(field, "<path>: <message>").
  [[noreturn]] void Fail(const std::string& message) const;

 private:
  const nlohmann::json& json_;
  std::string field_;
  std::string path_;
};

}  // namespace dtsim
