// Placement: factories, text forms and normalisation.
#include "dtsim/layout/placement.h"

#include <cctype>
#include <limits>
#include <set>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

struct ReduceOpName {
  ReduceOp op;
  const char* name;
};
constexpr ReduceOpName kReduceOpNames[] = {
    {ReduceOp::kSum, "sum"}, {ReduceOp::kAvg, "avg"},         {ReduceOp::kMin, "min"},
    {ReduceOp::kMax, "max"}, {ReduceOp::kProduct, "product"}, {ReduceOp::kBand, "band"},
    {ReduceOp::kBor, "bor"}, {ReduceOp::kBxor, "bxor"},
};

std::string Trimmed(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  return std::string(text.substr(b, e - b));
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// An integer argument, optionally written "key=value": its value, or why it is not one.
struct IntArg {
  std::optional<int64_t> value;
  std::string problem;  // "is not an integer", "is too large (at most ...)"
};

IntArg ParseIntArg(std::string arg, const char* key) {
  arg = Trimmed(arg);
  std::string prefix = std::string(key) + "=";
  if (arg.rfind(prefix, 0) == 0) arg = Trimmed(arg.substr(prefix.size()));
  size_t pos = (!arg.empty() && (arg[0] == '-' || arg[0] == '+')) ? 1 : 0;
  if (pos == arg.size()) return {std::nullopt, "is not an integer"};
  const bool negative = arg[0] == '-';
  int64_t value = 0;
  bool too_large = false;
  for (size_t i = pos; i < arg.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(arg[i])))
      return {std::nullopt, "is not an integer"};
    const int digit = arg[i] - '0';
    if (too_large || value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
      too_large = true;  // keep scanning: "99999999999999999999x" is still not an integer
    } else {
      value = value * 10 + digit;
    }
  }
  if (too_large) {
    return {std::nullopt, StrCat("is too large (at most ", std::numeric_limits<int64_t>::max(),
                                 " in magnitude)")};
  }
  return {negative ? -value : value, ""};
}

// The index of the ')' that closes the '(' at `open`, or npos.
size_t MatchingParen(const std::string& text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0) return i;
  }
  return std::string::npos;
}

}  // namespace

std::string ToString(ReduceOp op) {
  for (const auto& entry : kReduceOpNames) {
    if (entry.op == op) return entry.name;
  }
  DTSIM_CHECK(false, "unknown ReduceOp ", static_cast<int>(op));
  return "";
}

std::optional<ReduceOp> FindReduceOp(std::string_view name) {
  std::string key = Lower(Trimmed(name));
  if (key.size() >= 2 && (key.front() == '\'' || key.front() == '"') && key.back() == key.front()) {
    key = key.substr(1, key.size() - 2);
  }
  if (key.rfind("reduce_op=", 0) == 0) key = Trimmed(key.substr(10));
  for (const auto& entry : kReduceOpNames) {
    if (key == entry.name) return entry.op;
  }
  return std::nullopt;
}

Placement Placement::Shard(int64_t dim) { return Placement(Kind::kShard, dim, 1, ReduceOp::kSum); }

Placement Placement::StridedShard(int64_t dim, int64_t split_factor) {
  if (split_factor < 1) {
    throw InputError("placements", StrCat("'_S(", dim, ",", split_factor, ")' has split factor ",
                                          split_factor, "; it must be >= 1"));
  }
  return Placement(Kind::kStridedShard, dim, split_factor, ReduceOp::kSum);
}

Placement Placement::Replicate() { return Placement(Kind::kReplicate, 0, 1, ReduceOp::kSum); }

Placement Placement::Partial(ReduceOp op) { return Placement(Kind::kPartial, 0, 1, op); }

Placement Placement::Parse(std::string_view text, const std::string& field) {
  const std::string t = Trimmed(text);
  auto bad = [&](const std::string& why) -> InputError {
    return InputError(
        field, StrCat("'", ExcerptText(t), "' is not a placement: ", why,
                      " (expected S(d), _S(d,k), R or P(op) with op in sum, avg, min, max, product,"
                      " band, bor, bxor)"));
  };
  if (t.empty()) throw bad("it is empty");
  // Placements are plain ASCII: name an invisible or foreign character (a no-break space pasted
  // from a document) rather than calling it an unknown kind or asking for commas.
  if (const std::optional<std::string> odd = DescribeFirstNonAscii(t)) {
    throw bad(StrCat("it holds ", *odd, "; placements are plain ASCII"));
  }
  std::string head = t, args;
  bool has_args = false;
  const size_t open = t.find('(');
  if (open != std::string::npos) {
    const size_t close = MatchingParen(t, open);
    if (close == std::string::npos) throw bad("'(' without a closing ')'");
    if (close + 1 != t.size()) {
      throw bad(StrCat("unexpected '", ExcerptText(Trimmed(t.substr(close + 1)), 40), "' after '",
                       ExcerptText(t.substr(0, close + 1), 40),
                       "' (separate placements with commas)"));
    }
    head = Trimmed(t.substr(0, open));
    args = t.substr(open + 1, close - open - 1);
    has_args = true;
  } else if (t.find(')') != std::string::npos) {
    throw bad("')' without an opening '('");
  }
  for (char c : head) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      throw bad("it holds a blank (separate placements with commas, as in S(0),R)");
    }
  }
  if (head == "S" || head == "Shard") {
    if (!has_args) throw bad("a shard needs a dim, as in S(0)");
    const IntArg dim = ParseIntArg(args, "dim");
    if (!dim.value)
      throw bad(StrCat("shard dim '", ExcerptText(Trimmed(args), 40), "' ", dim.problem));
    return Shard(*dim.value);
  }
  if (head == "_S" || head == "_StridedShard" || head == "StridedShard") {
    if (!has_args) throw bad("a strided shard needs a dim and a split factor, as in _S(0,2)");
    size_t comma = args.find(',');
    if (comma == std::string::npos)
      throw bad("a strided shard needs a dim and a split factor, as in _S(0,2)");
    const IntArg dim = ParseIntArg(args.substr(0, comma), "dim");
    std::string sf_text = Trimmed(args.substr(comma + 1));
    if (sf_text.rfind("sf=", 0) == 0) sf_text = sf_text.substr(3);
    const IntArg sf = ParseIntArg(sf_text, "split_factor");
    if (!dim.value) {
      throw bad(StrCat("shard dim '", ExcerptText(Trimmed(args.substr(0, comma)), 40), "' ",
                       dim.problem));
    }
    if (!sf.value) {
      throw bad(StrCat("split factor '", ExcerptText(Trimmed(args.substr(comma + 1)), 40), "' ",
                       sf.problem));
    }
    if (*sf.value < 1) throw bad(StrCat("split factor ", *sf.value, " must be >= 1"));
    return StridedShard(*dim.value, *sf.value);
  }
  if (head == "R" || head == "Replicate") {
    if (has_args && !Trimmed(args).empty()) throw bad("Replicate takes no argument");
    return Replicate();
  }
  if (head == "P" || head == "Partial") {
    if (!has_args || Trimmed(args).empty()) return Partial(ReduceOp::kSum);
    auto op = FindReduceOp(args);
    if (!op) throw bad(StrCat("unknown reduce op '", ExcerptText(Trimmed(args), 40), "'"));
    return Partial(*op);
  }
  throw bad(StrCat("unknown kind '", ExcerptText(head, 40), "'"));
}

Placement Placement::Normalized(int64_t ndim, const std::string& field) const {
  if (!is_shard_like()) return *this;
  if (dim_ < -ndim || dim_ >= ndim) {
    throw InputError(field, StrCat("'", ToString(), "' shards dim ", dim_, " but the tensor has ",
                                   ndim, " dim", ndim == 1 ? "" : "s"));
  }
  Placement p = *this;
  if (p.dim_ < 0) p.dim_ += ndim;
  return p;
}

Placement Placement::Canonical() const {
  if (is_strided_shard() && split_factor_ == 1) return Shard(dim_);
  return *this;
}

std::string Placement::ToString() const {
  switch (kind_) {
    case Kind::kShard:
      return StrCat("S(", dim_, ")");
    case Kind::kStridedShard:
      return StrCat("_S(", dim_, ",", split_factor_, ")");
    case Kind::kReplicate:
      return "R";
    case Kind::kPartial:
      return "P(" + dtsim::ToString(op_) + ")";
  }
  return "?";
}

bool Placement::operator==(const Placement& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kShard:
      return dim_ == other.dim_;
    case Kind::kStridedShard:
      return dim_ == other.dim_ && split_factor_ == other.split_factor_;
    case Kind::kReplicate:
      return true;
    case Kind::kPartial:
      return op_ == other.op_;
  }
  return false;
}

std::string ToString(const Placements& placements) {
  std::string out = "[";
  for (size_t i = 0; i < placements.size(); ++i) out += (i ? ", " : "") + placements[i].ToString();
  return out + "]";
}

Placements ParsePlacements(std::string_view text, const std::string& field) {
  std::string body = Trimmed(text);
  const std::string shown = ExcerptText(body);
  if (!body.empty() && body.front() == '[') {
    if (body.back() != ']')
      throw InputError(field, StrCat("'", shown, "' has '[' without a closing ']'"));
    body = Trimmed(body.substr(1, body.size() - 2));
  }
  Placements result;
  if (body.empty()) return result;
  if (body.size() > kMaxPlacementTextBytes) {
    throw InputError(field, StrCat("'", shown, "' is ", body.size(),
                                   " characters long; placement lists of at most ",
                                   kMaxPlacementTextBytes, " characters are read"));
  }
  // Split on commas at parenthesis depth 0.
  int depth = 0;
  std::string piece;
  auto flush = [&]() {
    std::string p = Trimmed(piece);
    if (p.empty()) throw InputError(field, StrCat("'", shown, "' has an empty placement"));
    result.push_back(Placement::Parse(p, field));
    piece.clear();
  };
  for (char c : body) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth < 0) throw InputError(field, StrCat("'", shown, "' has an unmatched ')'"));
    if (depth == 0 && c == ',') {
      flush();
    } else {
      piece += c;
    }
  }
  if (depth != 0) throw InputError(field, StrCat("'", shown, "' has an unmatched '('"));
  flush();
  return result;
}

bool HasMixedPartials(const Placements& placements) {
  std::set<ReduceOp> ops;
  for (const Placement& p : placements) {
    if (p.is_partial()) ops.insert(p.reduce_op());
  }
  return ops.size() > 1 && ops != std::set<ReduceOp>{ReduceOp::kSum, ReduceOp::kAvg};
}

void CheckNoMixedPartials(const Placements& placements, const std::string& field) {
  if (!HasMixedPartials(placements)) return;
  std::set<std::string> ops;  // sorted by name for the message: {max, sum}
  for (const Placement& p : placements) {
    if (p.is_partial()) ops.insert(ToString(p.reduce_op()));
  }
  std::string names;
  for (const std::string& op : ops) names += (names.empty() ? "" : ", ") + op;
  throw InputError(
      field, StrCat("'", ExcerptText(ToString(placements)), "' mixes Partial reduce ops {", names,
                    "}; only sum with avg may be mixed (upstream refuses the rest)"));
}

}  // namespace dtsim
