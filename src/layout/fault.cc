// FaultSpec text forms (see include/dtsim/layout/fault.h).
#include "dtsim/layout/fault.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

struct KindName {
  FaultSpec::Kind kind;
  std::string_view name;
};
constexpr KindName kKinds[] = {{FaultSpec::Kind::kWrongOffset, "wrong-offset"},
                               {FaultSpec::Kind::kWrongOp, "wrong-op"},
                               {FaultSpec::Kind::kDropRank, "drop-rank"},
                               {FaultSpec::Kind::kStallRank, "stall-rank"}};

constexpr const char kForms[] =
    "wrong-offset:R, wrong-op:R, drop-rank:R or stall-rank:R:SECONDS, optionally @K";

int64_t ParseCount(std::string_view text, std::string_view whole, const std::string& field,
                   const char* what) {
  if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    throw InputError(field, StrCat("'", ExcerptText(whole), "': ", what, " '", ExcerptText(text),
                                   "' is not a non-negative integer (expected ", kForms, ")"));
  }
  return std::stoll(std::string(text));
}

}  // namespace

std::string FaultSpec::ToString() const {
  for (const KindName& k : kKinds) {
    if (k.kind != kind) continue;
    std::string out = StrCat(k.name, ":", rank);
    if (kind == Kind::kStallRank) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", seconds);
      out += StrCat(":", buf);
    }
    if (occurrence > 0) out += StrCat("@", occurrence);
    return out;
  }
  return "none";
}

FaultSpec ParseFault(std::string_view text, const std::string& field) {
  FaultSpec f;
  if (text.empty() || text == "none") return f;
  std::string_view body = text;
  const size_t at = body.find('@');
  if (at != std::string_view::npos) {
    f.occurrence = ParseCount(body.substr(at + 1), text, field, "occurrence");
    body = body.substr(0, at);
  }
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t colon = body.find(':', start);
    parts.push_back(body.substr(
        start, colon == std::string_view::npos ? std::string_view::npos : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  bool known = false;
  for (const KindName& k : kKinds) {
    if (parts[0] == k.name) {
      f.kind = k.kind;
      known = true;
    }
  }
  if (!known) {
    throw InputError(field,
                     StrCat("unknown fault '", ExcerptText(text), "' (expected ", kForms, ")"));
  }
  const size_t want = f.kind == FaultSpec::Kind::kStallRank ? 3 : 2;
  if (parts.size() != want) {
    throw InputError(
        field, StrCat("'", ExcerptText(text), "' needs ", want - 1, " value", want == 2 ? "" : "s",
                      " after the fault name (expected ", kForms, ")"));
  }
  f.rank = ParseCount(parts[1], text, field, "rank");
  if (f.kind == FaultSpec::Kind::kStallRank) {
    const std::string s(parts[2]);
    char* end = nullptr;
    const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0 || v > 86400) {
      throw InputError(field, StrCat("'", ExcerptText(text), "': seconds '", ExcerptText(s),
                                     "' must be a number from 0 to 86400"));
    }
    f.seconds = v;
  }
  return f;
}

}  // namespace dtsim
