// LocalIntNode (see src/tensor/local_tensor_impl.h): the per-rank integer behind sym_size() of an
// uneven LocalTensor's dims, and PerRankSymInt, which makes one only when the ranks differ.
#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>

#include "dtsim/layout/error.h"
#include "tensor/local_tensor_impl.h"

namespace dtsim {
namespace internal {

std::string JoinInts(const std::vector<int64_t>& v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

int64_t LocalIntNode::ValueOf(int64_t rank) const {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i] == rank) return values_[i];
  }
  throw InputError("rank",
                   StrCat("per-rank integer ", PerRankString(), " does not hold rank ", rank));
}

std::string LocalIntNode::PerRankString() const {
  std::ostringstream out;
  out << "{";
  for (size_t i = 0; i < ranks_.size(); ++i) {
    out << (i ? ", " : "") << ranks_[i] << ": ";
    if (is_bool_) {
      out << (values_[i] ? "true" : "false");
    } else {
      out << values_[i];
    }
  }
  out << "}";
  return out.str();
}

template <typename F>
c10::SymNode LocalIntNode::Binary(const c10::SymNode& other, bool result_is_bool, F f) {
  std::vector<int64_t> out(values_.size());
  if (auto* o = dynamic_cast<LocalIntNode*>(other.get())) {
    if (o->ranks_ != ranks_) {
      throw InputError("rank", StrCat("per-rank integers over different rank sets: ",
                                      JoinInts(ranks_), " and ", JoinInts(o->ranks_)));
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(values_[i], o->values_[i]);
  } else {
    std::optional<int64_t> c = other->constant_int();
    if (!c) c = other->maybe_as_int();
    if (!c && other->is_bool()) {
      auto b = other->constant_bool();
      if (b) c = *b ? 1 : 0;
    }
    DTSIM_CHECK(
        c.has_value(),
        "LocalIntNode combined with a symbolic node that is not a LocalIntNode: ", other->str());
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(values_[i], *c);
  }
  return c10::make_intrusive<LocalIntNode>(ranks_, std::move(out), result_is_bool);
}

namespace {
int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == 0) throw InputError("divisor", "integer division by zero in a per-rank size");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
}  // namespace

c10::SymNode LocalIntNode::add(const c10::SymNode& o) {
  return Binary(o, false, [](int64_t a, int64_t b) { return a + b; });
}
c10::SymNode LocalIntNode::sub(const c10::SymNode& o) {
  return Binary(o, false, [](int64_t a, int64_t b) { return a - b; });
}
c10::SymNode LocalIntNode::mul(const c10::SymNode& o) {
  return Binary(o, false, [](int64_t a, int64_t b) { return a * b; });
}
c10::SymNode LocalIntNode::floordiv(const c10::SymNode& o) { return Binary(o, false, FloorDiv); }
c10::SymNode LocalIntNode::int_floordiv(const c10::SymNode& o) {
  return Binary(o, false, FloorDiv);
}
c10::SymNode LocalIntNode::mod(const c10::SymNode& o) {
  return Binary(o, false, [](int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; });
}
c10::SymNode LocalIntNode::eq(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a == b; });
}
c10::SymNode LocalIntNode::ne(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a != b; });
}
c10::SymNode LocalIntNode::gt(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a > b; });
}
c10::SymNode LocalIntNode::lt(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a < b; });
}
c10::SymNode LocalIntNode::le(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a <= b; });
}
c10::SymNode LocalIntNode::ge(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a >= b; });
}
c10::SymNode LocalIntNode::sym_min(const c10::SymNode& o) {
  return Binary(o, false, [](int64_t a, int64_t b) { return std::min(a, b); });
}
c10::SymNode LocalIntNode::sym_max(const c10::SymNode& o) {
  return Binary(o, false, [](int64_t a, int64_t b) { return std::max(a, b); });
}
c10::SymNode LocalIntNode::sym_and(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a && b; });
}
c10::SymNode LocalIntNode::sym_or(const c10::SymNode& o) {
  return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a || b; });
}
c10::SymNode LocalIntNode::sym_not() {
  std::vector<int64_t> out(values_.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = !values_[i];
  return c10::make_intrusive<LocalIntNode>(ranks_, std::move(out), true);
}
c10::SymNode LocalIntNode::neg() {
  std::vector<int64_t> out(values_.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = -values_[i];
  return c10::make_intrusive<LocalIntNode>(ranks_, std::move(out), false);
}
c10::SymNode LocalIntNode::clone() {
  return c10::make_intrusive<LocalIntNode>(ranks_, values_, is_bool_);
}
c10::SymNode LocalIntNode::wrap_int(int64_t num) {
  return c10::make_intrusive<LocalIntNode>(ranks_, std::vector<int64_t>(ranks_.size(), num), false);
}
c10::SymNode LocalIntNode::wrap_bool(bool num) {
  return c10::make_intrusive<LocalIntNode>(ranks_, std::vector<int64_t>(ranks_.size(), num ? 1 : 0),
                                           true);
}

std::optional<int64_t> LocalIntNode::Common() const {
  if (values_.empty()) return std::nullopt;
  for (int64_t v : values_) {
    if (v != values_[0]) return std::nullopt;
  }
  return values_[0];
}

int64_t LocalIntNode::Agreed(const char* what) const {
  auto c = Common();
  if (!c) {
    throw InputError("ranks", StrCat(what, " differs per rank ", PerRankString(),
                                     ": a single value is needed here but the ranks disagree"));
  }
  return *c;
}

int64_t LocalIntNode::guard_int(const char*, int64_t) { return Agreed("integer"); }
bool LocalIntNode::guard_bool(const char*, int64_t) { return Agreed("condition") != 0; }
bool LocalIntNode::guard_size_oblivious(const char*, int64_t) { return Agreed("condition") != 0; }
bool LocalIntNode::guard_or_false(const char*, int64_t) {
  auto c = Common();
  return c && *c != 0;
}
bool LocalIntNode::guard_or_true(const char*, int64_t) {
  auto c = Common();
  return !c || *c != 0;
}
bool LocalIntNode::statically_known_true(const char*, int64_t) {
  auto c = Common();
  return c && *c != 0;
}
bool LocalIntNode::expect_true(const char*, int64_t) { return Agreed("condition") != 0; }
int64_t LocalIntNode::int_() { return Agreed("integer"); }
bool LocalIntNode::bool_() { return Agreed("condition") != 0; }
std::optional<int64_t> LocalIntNode::maybe_as_int() { return Common(); }
std::string LocalIntNode::str() { return "LocalInt" + PerRankString(); }

bool IsLocalSymInt(const c10::SymInt& s) {
  return s.is_heap_allocated() && dynamic_cast<LocalIntNode*>(s.toSymNodeImplUnowned()) != nullptr;
}

int64_t SymIntForRank(const c10::SymInt& s, int64_t rank) {
  if (IsLocalSymInt(s)) return static_cast<LocalIntNode*>(s.toSymNodeImplUnowned())->ValueOf(rank);
  return s.expect_int();
}

c10::SymInt PerRankSymInt(const std::vector<int64_t>& ranks, std::vector<int64_t> values) {
  bool same = std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values[0]; });
  if (same && !values.empty()) return c10::SymInt(values[0]);
  return c10::SymInt(c10::SymNode(c10::make_intrusive<LocalIntNode>(ranks, std::move(values))));
}

}  // namespace internal
}  // namespace dtsim
