// JsonReader (see include/dtsim/layout/json_reader.h).
#include "dtsim/layout/json_reader.h"

#include <cmath>
#include <cstdio>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace {

const char* TypeName(const nlohmann::json& j) {
  if (j.is_number_float()) return "a number with a fraction or exponent";
  return j.type_name();
}

// Decodes the UTF-8 character at text[i] into *cp; returns its length in bytes, or 0 when the bytes
// there are not valid UTF-8 (overlong forms, surrogates and values above U+10FFFF refused).
size_t DecodeUtf8(std::string_view text, size_t i, uint32_t* cp) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  size_t n = 0;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 1;
    *cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2;
    *cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 3;
    *cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n >= text.size()) return 0;
  for (size_t k = 1; k <= n; ++k) {
    const unsigned char d = static_cast<unsigned char>(text[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (d & 0x3F);
  }
  const uint32_t min = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return n + 1;
}

std::string HexByte(unsigned char c) {
  char out[8];
  std::snprintf(out, sizeof(out), "0x%02x", c);
  return out;
}

// "U+00A0", "U+1D173": the code point as Unicode writes it.
std::string CodePointName(uint32_t cp) {
  char out[16];
  std::snprintf(out, sizeof(out), "U+%04X", static_cast<unsigned>(cp));
  return out;
}

// The escape ExcerptText shows for an invisible code point: "\u00a0" (JSON's form), or
// "\U000e0001" beyond U+FFFF.
std::string EscapedCodePoint(uint32_t cp) {
  char out[16];
  if (cp <= 0xFFFF) {
    std::snprintf(out, sizeof(out), "\\u%04x", static_cast<unsigned>(cp));
  } else {
    std::snprintf(out, sizeof(out), "\\U%08x", static_cast<unsigned>(cp));
  }
  return out;
}

// "the invisible character U+00A0 (no-break space)", "the character 'é' (U+00E9)".
std::string DescribeCodePoint(uint32_t cp, std::string_view bytes) {
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
    return StrCat("the control character ", CodePointName(cp));
  }
  if (IsInvisibleCodePoint(cp)) {
    static const std::pair<uint32_t, const char*> kNames[] = {
        {0xA0, "no-break space"},
        {0xAD, "soft hyphen"},
        {0x2002, "en space"},
        {0x2003, "em space"},
        {0x2009, "thin space"},
        {0x200B, "zero-width space"},
        {0x200C, "zero-width non-joiner"},
        {0x200D, "zero-width joiner"},
        {0x200E, "left-to-right mark"},
        {0x200F, "right-to-left mark"},
        {0x202F, "narrow no-break space"},
        {0x2060, "word joiner"},
        {0x3000, "ideographic space"},
        {0xFEFF, "zero-width no-break space (byte order mark)"}};
    for (const auto& [code, name] : kNames) {
      if (code == cp) return StrCat("the invisible character ", CodePointName(cp), " (", name, ")");
    }
    return StrCat("the invisible character ", CodePointName(cp));
  }
  return StrCat("the character '", bytes, "' (", CodePointName(cp), ")");
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(text, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool IsInvisibleCodePoint(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return true;
  if (cp == 0x034F || cp == 0x061C || cp == 0x115F || cp == 0x1160 || cp == 0x1680 ||
      cp == 0x17B4 || cp == 0x17B5 || cp == 0x3000 || cp == 0x3164 || cp == 0xFEFF ||
      cp == 0xFFA0) {
    return true;
  }
  return (cp >= 0x180B && cp <= 0x180F) || (cp >= 0x2000 && cp <= 0x200F) ||
         (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) ||
         (cp >= 0xFE00 && cp <= 0xFE0F) || (cp >= 0xFFF0 && cp <= 0xFFFB) ||
         (cp >= 0x1D173 && cp <= 0x1D17A) || (cp >= 0xE0000 && cp <= 0xE0FFF);
}

std::optional<std::string> DescribeFirstNonAscii(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7F) || (c >= '\t' && c <= '\r')) {  // printable ASCII or a blank
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(text, i, &cp);
    if (n == 0) return StrCat("the byte ", HexByte(c), ", which is not UTF-8");
    return DescribeCodePoint(cp, text.substr(i, n));
  }
  return std::nullopt;
}

std::optional<std::string> DescribeFirstInvisible(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(text, i, &cp);
    if (n == 0)
      return StrCat("the byte ", HexByte(static_cast<unsigned char>(text[i])),
                    ", which is not UTF-8");
    if (IsInvisibleCodePoint(cp)) return DescribeCodePoint(cp, text.substr(i, n));
    i += n;
  }
  return std::nullopt;
}

std::string SafeDump(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ExcerptText(std::string_view text, size_t max_chars) {
  // Through JSON's replacing dump so invalid UTF-8 never reaches the terminal raw.
  std::string safe = nlohmann::json(std::string(text))
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  safe = safe.substr(1, safe.size() - 2);  // drop the quotes
  // Escape what JSON leaves raw but a terminal shows as nothing or a blank (DEL, C1 controls, the
  // no-break and other Unicode spaces, zero-width characters): the dump above is valid UTF-8.
  std::string shown;
  for (size_t i = 0; i < safe.size();) {
    uint32_t cp = 0;
    size_t n = DecodeUtf8(safe, i, &cp);
    if (n == 0) n = 1;  // not reached: the dump replaced invalid UTF-8
    if (n > 0 && cp >= 0x7F && IsInvisibleCodePoint(cp)) {
      shown += EscapedCodePoint(cp);
    } else {
      shown.append(safe, i, n);
    }
    i += n;
  }
  safe = std::move(shown);
  if (safe.size() <= max_chars) return safe;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(safe[cut]) & 0xC0) == 0x80)
    --cut;  // UTF-8 boundary
  return safe.substr(0, cut) + StrCat("… (", safe.size(), " characters)");
}

std::string Excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string text = SafeDump(value);
  if (text.size() <= max_chars) return text;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + StrCat("… (", text.size(), " characters)");
}

JsonReader::JsonReader(const nlohmann::json& json, std::string field, std::string path)
    : json_(json), field_(std::move(field)), path_(std::move(path)) {}

void JsonReader::Fail(const std::string& message) const {
  throw InputError(field_, path_.empty() ? message : path_ + ": " + message);
}

bool JsonReader::Has(const char* key) const { return json_.is_object() && json_.contains(key); }

JsonReader JsonReader::At(const char* key) const {
  ExpectObject();
  auto it = json_.find(key);
  std::string path = path_.empty() ? std::string(key) : path_ + "." + key;
  if (it == json_.end()) throw InputError(field_, StrCat(path, ": missing"));
  return JsonReader(*it, field_, std::move(path));
}

JsonReader JsonReader::At(size_t i) const {
  return JsonReader(json_.at(i), field_, StrCat(path_, "[", i, "]"));
}

void JsonReader::ExpectObject() const {
  if (!json_.is_object()) Fail(StrCat("expected an object, got ", Excerpt(json_)));
}

size_t JsonReader::ArraySize(size_t max_size) const {
  if (!json_.is_array()) Fail(StrCat("expected a list, got ", Excerpt(json_)));
  if (json_.size() > max_size)
    Fail(StrCat("has ", json_.size(), " entries, at most ", max_size, " are allowed"));
  return json_.size();
}

void JsonReader::OnlyKeys(std::initializer_list<const char*> allowed) const {
  ExpectObject();
  for (const auto& [key, value] : json_.items()) {
    bool known = false;
    for (const char* a : allowed) known = known || key == a;
    if (known) continue;
    std::string list;
    for (const char* a : allowed) list += StrCat(list.empty() ? "" : ", ", a);
    std::string where = path_.empty() ? "" : path_ + ": ";
    throw InputError(field_, StrCat(where, "unknown key '", ExcerptText(key, 40),
                                    "' (expected one of: ", list, ")"));
  }
}

int64_t JsonReader::AsInt(int64_t min, int64_t max) const {
  int64_t v = 0;
  if (json_.is_number_integer()) {
    if (json_.is_number_unsigned() && json_.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      Fail(StrCat("integer ", Excerpt(json_), " is too large (at most ", max, ")"));
    }
    v = json_.get<int64_t>();
  } else if (json_.is_number_float()) {
    const double d = json_.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) >= 9.2e18) {
      Fail(StrCat("integer ", Excerpt(json_), " is too large (at most ", max, ")"));
    }
    Fail(StrCat("expected an integer, got ", Excerpt(json_)));
  } else {
    Fail(StrCat("expected an integer, got ", TypeName(json_), " ", Excerpt(json_)));
  }
  if (v < min || v > max) Fail(StrCat(v, " is out of range [", min, ", ", max, "]"));
  return v;
}

double JsonReader::AsNumber() const {
  if (!json_.is_number()) Fail(StrCat("expected a number, got ", Excerpt(json_)));
  const double d = json_.get<double>();
  if (!std::isfinite(d)) Fail(StrCat("expected a finite number, got ", Excerpt(json_)));
  return d;
}

bool JsonReader::AsBool() const {
  if (!json_.is_boolean()) Fail(StrCat("expected true or false, got ", Excerpt(json_)));
  return json_.get<bool>();
}

const std::string& JsonReader::AsString() const {
  if (!json_.is_string()) Fail(StrCat("expected a string, got ", Excerpt(json_)));
  return json_.get_ref<const std::string&>();
}

std::vector<int64_t> JsonReader::AsInts(int64_t min, int64_t max, size_t max_size) const {
  const size_t n = ArraySize(max_size);
  std::vector<int64_t> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(At(i).AsInt(min, max));
  return out;
}

std::vector<std::vector<int64_t>> JsonReader::AsIntLists(int64_t min, int64_t max) const {
  const size_t n = ArraySize();
  std::vector<std::vector<int64_t>> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(At(i).AsInts(min, max));
  return out;
}

std::vector<std::string> JsonReader::AsStrings() const {
  const size_t n = ArraySize();
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(At(i).AsString());
  return out;
}

}  // namespace dtsim
