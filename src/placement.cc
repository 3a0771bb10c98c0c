// Placement: factories, text forms and normalisation.
#include "dtsim/placement.h"

#include <cctype>

#include "dtsim/error.h"

namespace dtsim {
namespace {

struct ReduceOpName {
  ReduceOp op;
  const char* name;
};
constexpr ReduceOpName kReduceOpNames[] = {
    {ReduceOp::kSum, "sum"},         {ReduceOp::kAvg, "avg"},   {ReduceOp::kMin, "min"},
    {ReduceOp::kMax, "max"},         {ReduceOp::kProduct, "product"}, {ReduceOp::kBand, "band"},
    {ReduceOp::kBor, "bor"},         {ReduceOp::kBxor, "bxor"},
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

// Parses an integer argument, optionally written "key=value".
std::optional<int64_t> ParseIntArg(std::string arg, const char* key) {
  arg = Trimmed(arg);
  std::string prefix = std::string(key) + "=";
  if (arg.rfind(prefix, 0) == 0) arg = Trimmed(arg.substr(prefix.size()));
  if (arg.empty()) return std::nullopt;
  size_t pos = (arg[0] == '-' || arg[0] == '+') ? 1 : 0;
  if (pos == arg.size() || arg.size() > 18) return std::nullopt;
  for (size_t i = pos; i < arg.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(arg[i]))) return std::nullopt;
  }
  return std::stoll(arg);
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
    throw InputError("placements", StrCat("'_S(", dim, ",", split_factor, ")' has split factor ", split_factor,
                                          "; it must be >= 1"));
  }
  return Placement(Kind::kStridedShard, dim, split_factor, ReduceOp::kSum);
}

Placement Placement::Replicate() { return Placement(Kind::kReplicate, 0, 1, ReduceOp::kSum); }

Placement Placement::Partial(ReduceOp op) { return Placement(Kind::kPartial, 0, 1, op); }

Placement Placement::Parse(std::string_view text, const std::string& field) {
  const std::string t = Trimmed(text);
  auto bad = [&](const std::string& why) -> InputError {
    return InputError(field, StrCat("'", t, "' is not a placement: ", why,
                                    " (expected S(d), _S(d,k), R or P(op) with op in sum, avg, min, max, product,"
                                    " band, bor, bxor)"));
  };
  if (t.empty()) throw bad("it is empty");
  std::string head = t, args;
  bool has_args = false;
  size_t open = t.find('(');
  if (open != std::string::npos) {
    if (t.back() != ')') throw bad("'(' without a closing ')'");
    head = Trimmed(t.substr(0, open));
    args = t.substr(open + 1, t.size() - open - 2);
    has_args = true;
  }
  if (head == "S" || head == "Shard") {
    if (!has_args) throw bad("a shard needs a dim, as in S(0)");
    auto dim = ParseIntArg(args, "dim");
    if (!dim) throw bad(StrCat("shard dim '", Trimmed(args), "' is not an integer"));
    return Shard(*dim);
  }
  if (head == "_S" || head == "_StridedShard" || head == "StridedShard") {
    if (!has_args) throw bad("a strided shard needs a dim and a split factor, as in _S(0,2)");
    size_t comma = args.find(',');
    if (comma == std::string::npos) throw bad("a strided shard needs a dim and a split factor, as in _S(0,2)");
    auto dim = ParseIntArg(args.substr(0, comma), "dim");
    std::string sf_text = Trimmed(args.substr(comma + 1));
    if (sf_text.rfind("sf=", 0) == 0) sf_text = sf_text.substr(3);
    auto sf = ParseIntArg(sf_text, "split_factor");
    if (!dim) throw bad(StrCat("shard dim '", Trimmed(args.substr(0, comma)), "' is not an integer"));
    if (!sf) throw bad(StrCat("split factor '", Trimmed(args.substr(comma + 1)), "' is not an integer"));
    if (*sf < 1) throw bad(StrCat("split factor ", *sf, " must be >= 1"));
    return StridedShard(*dim, *sf);
  }
  if (head == "R" || head == "Replicate") {
    if (has_args && !Trimmed(args).empty()) throw bad("Replicate takes no argument");
    return Replicate();
  }
  if (head == "P" || head == "Partial") {
    if (!has_args || Trimmed(args).empty()) return Partial(ReduceOp::kSum);
    auto op = FindReduceOp(args);
    if (!op) throw bad(StrCat("unknown reduce op '", Trimmed(args), "'"));
    return Partial(*op);
  }
  throw bad(StrCat("unknown kind '", head, "'"));
}

Placement Placement::Normalized(int64_t ndim, const std::string& field) const {
  if (!is_shard_like()) return *this;
  if (dim_ < -ndim || dim_ >= ndim) {
    throw InputError(field, StrCat("'", ToString(), "' shards dim ", dim_, " but the tensor has ", ndim, " dim",
                                   ndim == 1 ? "" : "s"));
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
  if (!body.empty() && body.front() == '[') {
    if (body.back() != ']') throw InputError(field, StrCat("'", body, "' has '[' without a closing ']'"));
    body = Trimmed(body.substr(1, body.size() - 2));
  }
  Placements result;
  if (body.empty()) return result;
  // Split on commas at parenthesis depth 0.
  int depth = 0;
  std::string piece;
  auto flush = [&]() {
    std::string p = Trimmed(piece);
    if (p.empty()) throw InputError(field, StrCat("'", Trimmed(text), "' has an empty placement"));
    result.push_back(Placement::Parse(p, field));
    piece.clear();
  };
  for (char c : body) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth < 0) throw InputError(field, StrCat("'", Trimmed(text), "' has an unmatched ')'"));
    if (depth == 0 && c == ',') {
      flush();
    } else {
      piece += c;
    }
  }
  if (depth != 0) throw InputError(field, StrCat("'", Trimmed(text), "' has an unmatched '('"));
  flush();
  return result;
}

}  // namespace dtsim
