// CheckJsonText's quick pass (src/trace/json_text.h: QuickCheckJson) against nlohmann's parser as
// ParseJsonText runs it: the quick pass may leave a text to the full check, but it must never
// accept a text that the parser refuses, and it must name the same top-level "format".
#include "trace/json_text.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/trace/trace.h"

namespace dtsim {
namespace {

// What ParseJsonText (nlohmann's parser with dtsim's limits) says of `text`: accepted, and the
// top-level "format" string as CheckJsonText returns it.
bool ParserAccepts(const std::string& text, std::string* format) {
  try {
    const nlohmann::json json = ParseJsonText(text, "trace", "'t'");
    *format = json.is_object() && json.contains("format") && json["format"].is_string()
                  ? json["format"].get<std::string>()
                  : "";
    return true;
  } catch (const InputError&) {
    return false;
  }
}

TEST(QuickJsonCheckTest, AcceptsWhatDtsimWritesWithTheParsersFormat) {
  const std::vector<std::string> valid = {
      R"({"format": "dtsim-recording", "version": 1, "events": {"0": [{"kind": "op"}]}})",
      R"({"a": [], "b": {}, "c": [[], [{}]], "format": "x"})",
      R"(  [1, -0, 0.5, -12.25e-3, 1E+5, 3e299, 123456789012345678901234567890]  )",
      "{\"s\": \"tab\\t quote\\\" slash\\/ back\\\\ \\b\\f\\n\\r \\u00e9 \\u20AC\"}",
      "{\"utf8\": \"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xef\xbf\xbf\"}",
      R"({"format": "dtsim-trace", "nested": {"format": "not the top one"}})",
      R"(["format", {"format": 1}])",
      "true",
      "null",
      "\"just a string\"",
      "\t\r\n{\"format\"\n:\n\"spaced\"\n}\n",
  };
  for (const std::string& text : valid) {
    std::string parser_format, quick_format = "unset";
    ASSERT_TRUE(ParserAccepts(text, &parser_format)) << text;
    EXPECT_TRUE(internal::QuickCheckJson(text, &quick_format)) << text;
    EXPECT_EQ(quick_format, parser_format) << text;
    EXPECT_EQ(internal::CheckJsonText(text, "trace", "'t'"), parser_format) << text;
  }
  // An object with more keys than are scanned for duplicates (a recording's per-rank keys).
  std::string many = "{";
  for (int i = 0; i < 200; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + "[]";
  many += "}";
  std::string format;
  EXPECT_TRUE(internal::QuickCheckJson(many, &format));
}

TEST(QuickJsonCheckTest, RefusesEveryKindOfBadText) {
  const std::vector<std::string> invalid = {
      "",
      "   ",
      "[1,]",
      "{\"a\": 1,}",
      "[01]",
      "[1.]",
      "[.5]",
      "[-]",
      "[1e]",
      "[1e+]",
      "[+1]",
      "[1e400]",
      "[-1e400]",
      "[" + std::string(400, '9') + "]",
      "[tru]",
      "[nul]",
      "[True]",
      "1 2",
      "{\"a\" 1}",
      "{\"a\": 1 \"b\": 2}",
      "{1: 2}",
      "[\"unterminated]",
      "[\"bad escape \\x\"]",
      "[\"short \\u12\"]",
      "[\"control \x01 char\"]",
      "[\"nul \0 byte\"]",
      "[\"overlong \xc0\x80\"]",
      "[\"overlong \xe0\x80\x80\"]",
      "[\"surrogate \xed\xa0\x80\"]",
      "[\"beyond \xf4\x90\x80\x80\"]",
      "[\"lead \xf5\x80\x80\x80\"]",
      "[\"lone continuation \x80\"]",
      "[\"truncated \xe2\x82\"]",
      "[\"lone surrogate escape \\ud800\"]",
      "{\"format\": \"a\", \"format\": \"b\"}",
      "{\"k\": {\"x\": 1, \"x\": 2}}",
      std::string(600, '[') + std::string(600, ']'),
      "[1] // comment",
      "[NaN]",
      "[Infinity]",
      "[1]\x01",
  };
  for (const std::string& text : invalid) {
    std::string format;
    EXPECT_FALSE(internal::QuickCheckJson(text, &format)) << text;
    EXPECT_FALSE(ParserAccepts(text, &format)) << text;
    EXPECT_THROW(internal::CheckJsonText(text, "trace", "'t'"), InputError) << text;
  }
  // Duplicates among more keys than are scanned.
  std::string many = "{";
  for (int i = 0; i < 200; ++i) many += (i ? ",\"" : "\"") + std::to_string(i % 150) + "\":1";
  many += "}";
  std::string format;
  EXPECT_FALSE(internal::QuickCheckJson(many, &format));
}

TEST(QuickJsonCheckTest, LeavesWhatItDoesNotDecodeToTheFullCheck) {
  // Valid JSON that the quick pass declines: the full check accepts it, with the parser's format.
  const std::vector<std::string> declined = {
      R"(["pair \ud83d\ude00"])",
      R"({"esc\u0061ped key": 1})",
      R"({"format": "esc\u0061ped"})",
      "\xef\xbb\xbf{\"format\": \"after a byte order mark\"}",
      "[1e301]",
      std::string(505, '[') + std::string(505, ']'),
  };
  for (const std::string& text : declined) {
    std::string parser_format, format;
    ASSERT_TRUE(ParserAccepts(text, &parser_format)) << text;
    EXPECT_FALSE(internal::QuickCheckJson(text, &format)) << text;
    EXPECT_EQ(internal::CheckJsonText(text, "trace", "'t'"), parser_format) << text;
  }
}

TEST(QuickJsonCheckTest, NeverAcceptsAMutantTheParserRefuses) {
  // Byte mutations of a document with every construct: whatever the quick pass accepts, the parser
  // accepts, with the same format.
  const std::string seed =
      "{\"format\": \"dtsim-recording\", \"v\": [1, -2.5e-3, 0, true, false, null], "
      "\"s\": \"a\\\"b\\\\c\\u00e9 \xc3\xa9\xe2\x82\xac\", \"o\": {\"k\": {\"l\": []}, \"m\": {}}}";
  const std::string alphabet = "{}[]\":,.-+eE0123456789 \\utrfaln\x80\xc3\xe2\xed\xf4\x01";
  std::mt19937 rng(33);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = seed;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (text.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          if (at < text.size()) text[at] = c;
          break;
        case 1:
          text.insert(at, 1, c);
          break;
        default:
          if (at < text.size()) text.erase(at, 1);
      }
    }
    std::string quick_format, parser_format;
    if (!internal::QuickCheckJson(text, &quick_format)) continue;
    ++accepted;
    ASSERT_TRUE(ParserAccepts(text, &parser_format)) << text;
    ASSERT_EQ(quick_format, parser_format) << text;
  }
  EXPECT_GT(accepted, 1000);  // the property was exercised, not only refusals
}

}  // namespace
}  // namespace dtsim
