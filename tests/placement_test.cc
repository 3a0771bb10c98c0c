// Placement: the canonical text form, the accepted spellings, normalisation and parse errors.
#include "dtsim/layout/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

using ::testing::HasSubstr;

TEST(PlacementTest, CanonicalTextRoundTrips) {
  const Placement all[] = {
      Placement::Shard(0),
      Placement::Shard(-1),
      Placement::StridedShard(0, 2),
      Placement::Replicate(),
      Placement::Partial(),
      Placement::Partial(ReduceOp::kAvg),
      Placement::Partial(ReduceOp::kMin),
      Placement::Partial(ReduceOp::kMax),
      Placement::Partial(ReduceOp::kProduct),
      Placement::Partial(ReduceOp::kBand),
      Placement::Partial(ReduceOp::kBor),
      Placement::Partial(ReduceOp::kBxor),
  };
  for (const Placement& p : all) EXPECT_EQ(Placement::Parse(p.ToString()), p) << p.ToString();
  EXPECT_EQ(Placement::Shard(0).ToString(), "S(0)");
  EXPECT_EQ(Placement::StridedShard(1, 4).ToString(), "_S(1,4)");
  EXPECT_EQ(Placement::Replicate().ToString(), "R");
  EXPECT_EQ(Placement::Partial().ToString(), "P(sum)");
}

TEST(PlacementTest, AcceptsUpstreamSpellings) {
  EXPECT_EQ(Placement::Parse("P"), Placement::Partial(ReduceOp::kSum));
  EXPECT_EQ(Placement::Parse("Shard(dim=2)"), Placement::Shard(2));
  EXPECT_EQ(Placement::Parse("_StridedShard(dim=0, sf=2)"), Placement::StridedShard(0, 2));
  EXPECT_EQ(Placement::Parse("_S(0, 2)"), Placement::StridedShard(0, 2));
  EXPECT_EQ(Placement::Parse("Replicate()"), Placement::Replicate());
  EXPECT_EQ(Placement::Parse("Partial(avg)"), Placement::Partial(ReduceOp::kAvg));
  EXPECT_EQ(Placement::Parse("P('max')"), Placement::Partial(ReduceOp::kMax));
}

TEST(PlacementTest, ListsPrintAndParse) {
  Placements ps = ParsePlacements("S(0),R");
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ToString(ps), "[S(0), R]");
  EXPECT_EQ(ParsePlacements("[S(0), R]"), ps);
  EXPECT_EQ(ToString(ParsePlacements(" [ _S(0,2) , S(0), P(avg) ] ")), "[_S(0,2), S(0), P(avg)]");
}

TEST(PlacementTest, NormalisesNegativeDims) {
  EXPECT_EQ(Placement::Shard(-1).Normalized(2), Placement::Shard(1));
  EXPECT_EQ(Placement::StridedShard(-2, 3).Normalized(2), Placement::StridedShard(0, 3));
  try {
    Placement::Shard(3).Normalized(2);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "placements: 'S(3)' shards dim 3 but the tensor has 2 dims");
  }
  EXPECT_THROW(Placement::Shard(-3).Normalized(2), InputError);
}

TEST(PlacementTest, ParseErrorsNameTheText) {
  const std::pair<const char*, const char*> cases[] = {
      {"X(0)", "unknown kind 'X'"},
      {"S", "needs a dim"},
      {"S(a)", "shard dim 'a' is not an integer"},
      {"S(0", "'(' without a closing ')'"},
      {"_S(0)", "needs a dim and a split factor"},
      {"_S(0,0)", "split factor 0 must be >= 1"},
      {"P(mean)", "unknown reduce op 'mean'"},
      {"R(1)", "Replicate takes no argument"},
      {"S(0) R", "unexpected 'R' after 'S(0)' (separate placements with commas)"},
      {"R R", "it holds a blank"},
      {"S(0))", "unexpected ')' after 'S(0)'"},
      {"S(99999999999999999999)", "shard dim '99999999999999999999' is too large"},
      {"S(99999999999999999999x)", "shard dim '99999999999999999999x' is not an integer"},
      {"_S(0,99999999999999999999)", "split factor '99999999999999999999' is too large"},
  };
  for (const auto& [text, message] : cases) {
    try {
      Placement::Parse(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "placements");
      EXPECT_THAT(e.what(), HasSubstr(message)) << text;
      EXPECT_THAT(e.what(), HasSubstr(text)) << text;
    }
  }
  EXPECT_THROW(ParsePlacements("S(0),,R"), InputError);
  EXPECT_THROW(ParsePlacements("[S(0), R"), InputError);
  EXPECT_THROW(ParsePlacements("S(0))"), InputError);
}

TEST(PlacementTest, LargestIntegersParse) {
  // Every int64 parses (range checks come later, against the tensor): no "not an integer" for a
  // valid number.
  EXPECT_EQ(Placement::Parse("S(-9223372036854775807)").dim(), -9223372036854775807);
  EXPECT_EQ(Placement::Parse("_S(0,9223372036854775807)").split_factor(), 9223372036854775807);
}

TEST(PlacementTest, EchoedTextIsCapped) {
  std::string huge;
  for (int i = 0; i < 20000; ++i) huge += "S(0),";
  huge += "Q";
  try {
    ParsePlacements(huge);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
    EXPECT_THAT(e.what(), HasSubstr("characters"));
  }
  try {
    Placement::Parse(std::string(5000, 'S'));
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_LT(std::string(e.what()).size(), 600u);
  }
}

// What a terminal does not show is escaped in messages (a no-break space pasted from a document, a
// zero-width space, DEL) and named in the placement error; visible non-ASCII stays as typed.
TEST(PlacementTest, InvisibleCharactersAreEscapedAndNamed) {
  EXPECT_EQ(ExcerptText("S(0)\xc2\xa0"), "S(0)\\u00a0");
  EXPECT_EQ(ExcerptText("a\xe2\x80\x8b"
                        "b\x7f"),
            "a\\u200bb\\u007f");
  EXPECT_EQ(ExcerptText("\x01"), "\\u0001");
  EXPECT_EQ(ExcerptText("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(ExcerptText("\xf3\xa0\x80\x81"), "\\U000e0001");  // a tag character
  EXPECT_TRUE(IsInvisibleCodePoint(0xA0));
  EXPECT_TRUE(IsInvisibleCodePoint(0xFEFF));
  EXPECT_FALSE(IsInvisibleCodePoint(' '));
  EXPECT_FALSE(IsInvisibleCodePoint(0xE9));
  EXPECT_EQ(DescribeFirstNonAscii("S(0),\tR"), std::nullopt);
  EXPECT_EQ(*DescribeFirstNonAscii("S(0)\xc2\xa0"),
            "the invisible character U+00A0 (no-break space)");
  EXPECT_EQ(*DescribeFirstNonAscii("S(\xc3\xa9)"), "the character '\xc3\xa9' (U+00E9)");
  EXPECT_EQ(*DescribeFirstNonAscii("S\x01"), "the control character U+0001");
  EXPECT_EQ(*DescribeFirstNonAscii("S\xff"), "the byte 0xff, which is not UTF-8");
  EXPECT_EQ(DescribeFirstInvisible("\xe6\x95\xb0"), std::nullopt);  // a visible CJK name
  for (const char* text : {"S(0)\xc2\xa0", "S\xc2\xa0(0)", "\xc2\xa0R",
                           "S(\xef\xbb\xbf"
                           "0)"}) {
    try {
      ParsePlacements(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is not a placement: it holds the invisible character U+"));
      EXPECT_THAT(e.what(), HasSubstr("\\u")) << e.what();
      EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("\xc2\xa0"))) << e.what();
    }
  }
}

}  // namespace
}  // namespace dtsim
