// LocalTensor: the TensorImpl subclass, the per-rank boxed kernel registered at PrivateUse1, per-rank sizes
// (LocalIntNode), per-rank RNG, and the public helpers of dtsim/local_tensor.h. See docs/local-tensor.md.
#include "dtsim/local_tensor.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/COW.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <typeinfo>
#include <unordered_map>

#include "dtsim/error.h"
#include "dtsim/memory_meter.h"
#include "local_tensor_impl.h"

namespace dtsim {
namespace internal {
namespace {

std::string JoinInts(const std::vector<int64_t>& v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

std::vector<int64_t> ToVector(c10::IntArrayRef a) { return std::vector<int64_t>(a.begin(), a.end()); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// LocalIntNode

int64_t LocalIntNode::ValueOf(int64_t rank) const {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i] == rank) return values_[i];
  }
  throw InputError("rank", StrCat("per-rank integer ", PerRankString(), " does not hold rank ", rank));
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
      throw InputError("rank", StrCat("per-rank integers over different rank sets: ", JoinInts(ranks_), " and ",
                                      JoinInts(o->ranks_)));
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(values_[i], o->values_[i]);
  } else {
    std::optional<int64_t> c = other->constant_int();
    if (!c) c = other->maybe_as_int();
    if (!c && other->is_bool()) {
      auto b = other->constant_bool();
      if (b) c = *b ? 1 : 0;
    }
    DTSIM_CHECK(c.has_value(), "LocalIntNode combined with a symbolic node that is not a LocalIntNode: ", other->str());
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

c10::SymNode LocalIntNode::add(const c10::SymNode& o) { return Binary(o, false, [](int64_t a, int64_t b) { return a + b; }); }
c10::SymNode LocalIntNode::sub(const c10::SymNode& o) { return Binary(o, false, [](int64_t a, int64_t b) { return a - b; }); }
c10::SymNode LocalIntNode::mul(const c10::SymNode& o) { return Binary(o, false, [](int64_t a, int64_t b) { return a * b; }); }
c10::SymNode LocalIntNode::floordiv(const c10::SymNode& o) { return Binary(o, false, FloorDiv); }
c10::SymNode LocalIntNode::int_floordiv(const c10::SymNode& o) { return Binary(o, false, FloorDiv); }
c10::SymNode LocalIntNode::mod(const c10::SymNode& o) {
  return Binary(o, false, [](int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; });
}
c10::SymNode LocalIntNode::eq(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a == b; }); }
c10::SymNode LocalIntNode::ne(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a != b; }); }
c10::SymNode LocalIntNode::gt(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a > b; }); }
c10::SymNode LocalIntNode::lt(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a < b; }); }
c10::SymNode LocalIntNode::le(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a <= b; }); }
c10::SymNode LocalIntNode::ge(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a >= b; }); }
c10::SymNode LocalIntNode::sym_min(const c10::SymNode& o) { return Binary(o, false, [](int64_t a, int64_t b) { return std::min(a, b); }); }
c10::SymNode LocalIntNode::sym_max(const c10::SymNode& o) { return Binary(o, false, [](int64_t a, int64_t b) { return std::max(a, b); }); }
c10::SymNode LocalIntNode::sym_and(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a && b; }); }
c10::SymNode LocalIntNode::sym_or(const c10::SymNode& o) { return Binary(o, true, [](int64_t a, int64_t b) -> int64_t { return a || b; }); }
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
c10::SymNode LocalIntNode::clone() { return c10::make_intrusive<LocalIntNode>(ranks_, values_, is_bool_); }
c10::SymNode LocalIntNode::wrap_int(int64_t num) {
  return c10::make_intrusive<LocalIntNode>(ranks_, std::vector<int64_t>(ranks_.size(), num), false);
}
c10::SymNode LocalIntNode::wrap_bool(bool num) {
  return c10::make_intrusive<LocalIntNode>(ranks_, std::vector<int64_t>(ranks_.size(), num ? 1 : 0), true);
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

namespace {
c10::SymInt PerRankSymInt(const std::vector<int64_t>& ranks, std::vector<int64_t> values) {
  bool same = std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values[0]; });
  if (same && !values.empty()) return c10::SymInt(values[0]);
  return c10::SymInt(c10::SymNode(c10::make_intrusive<LocalIntNode>(ranks, std::move(values))));
}
}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// LocalTensorImpl

namespace {
constexpr c10::DispatchKeySet kLocalKeys = c10::DispatchKeySet({c10::DispatchKey::PrivateUse1,
                                                                c10::DispatchKey::ADInplaceOrView,
                                                                c10::DispatchKey::AutogradPrivateUse1,
                                                                c10::DispatchKey::AutocastPrivateUse1});
}  // namespace

LocalTensorImpl::LocalTensorImpl(std::vector<int64_t> ranks, std::vector<at::Tensor> shards,
                                 std::optional<bool> uneven)
    : c10::TensorImpl(kLocalKeys, shards.at(0).dtype(), shards.at(0).device()) {
  Init(std::move(ranks), std::move(shards), uneven);
}

void LocalTensorImpl::Init(std::vector<int64_t> ranks, std::vector<at::Tensor> shards, std::optional<bool> uneven) {
  ranks_ = std::move(ranks);
  shards_ = std::move(shards);
  const at::Tensor& first = shards_[0];
  dim_ = first.dim();
  uneven_ = false;
  if (uneven) {
    uneven_ = *uneven;
  } else {
    for (size_t i = 1; i < shards_.size() && !uneven_; ++i) {
      const at::Tensor& s = shards_[i];
      uneven_ = s.dim() != dim_ || s.sizes() != first.sizes() || s.strides() != first.strides();
    }
  }
  bool allow = allow_tensor_metadata_change();
  set_allow_tensor_metadata_change(true);
  set_custom_sizes_strides(SizesStridesPolicy::Default);
  set_sizes_and_strides(first.sizes(), first.strides());
  set_allow_tensor_metadata_change(allow);
  sym_sizes_.clear();
  sym_strides_.clear();
  if (!uneven_) return;
  for (const at::Tensor& s : shards_) {
    if (s.dim() != dim_) {
      throw InputError("shards", StrCat("shards differ in their number of dims: ", PerRankSizes()));
    }
  }
  std::vector<int64_t> per_rank(shards_.size());
  for (int64_t d = 0; d < dim_; ++d) {
    for (size_t i = 0; i < shards_.size(); ++i) per_rank[i] = shards_[i].size(d);
    sym_sizes_.push_back(PerRankSymInt(ranks_, per_rank));
    for (size_t i = 0; i < shards_.size(); ++i) per_rank[i] = shards_[i].stride(d);
    sym_strides_.push_back(PerRankSymInt(ranks_, per_rank));
  }
  for (size_t i = 0; i < shards_.size(); ++i) per_rank[i] = shards_[i].numel();
  sym_numel_ = PerRankSymInt(ranks_, per_rank);
  set_custom_sizes_strides(SizesStridesPolicy::CustomSizes);
}

int64_t LocalTensorImpl::IndexOf(int64_t rank) const {
  auto it = std::lower_bound(ranks_.begin(), ranks_.end(), rank);
  if (it == ranks_.end() || *it != rank) return -1;
  return it - ranks_.begin();
}

std::string LocalTensorImpl::PerRankSizes() const {
  std::ostringstream out;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    out << (i ? ", " : "") << "rank " << ranks_[i] << ": " << JoinInts(ToVector(shards_[i].sizes()));
  }
  return out.str();
}

void LocalTensorImpl::ThrowUneven(const char* what) const {
  throw InputError("sizes", StrCat(what, " is not defined for uneven shards (a LocalTensor whose shards differ in "
                                         "shape), sizes per rank: ",
                                   PerRankSizes(), "; use sym_sizes()/sym_size(d) or LocalShard(t, rank)"));
}

c10::IntArrayRef LocalTensorImpl::sizes_custom() const { ThrowUneven("sizes()"); }
c10::IntArrayRef LocalTensorImpl::strides_custom() const { ThrowUneven("strides()"); }
int64_t LocalTensorImpl::numel_custom() const { ThrowUneven("numel()"); }
int64_t LocalTensorImpl::dim_custom() const { return dim_; }
int64_t LocalTensorImpl::storage_offset_custom() const {
  int64_t off = shards_[0].storage_offset();
  for (const auto& s : shards_) {
    if (s.storage_offset() != off) ThrowUneven("storage_offset()");
  }
  return off;
}
c10::SymIntArrayRef LocalTensorImpl::sym_sizes_custom() const { return sym_sizes_; }
c10::SymIntArrayRef LocalTensorImpl::sym_strides_custom() const { return sym_strides_; }
c10::SymInt LocalTensorImpl::sym_numel_custom() const { return sym_numel_; }
c10::SymInt LocalTensorImpl::sym_storage_offset_custom() const {
  std::vector<int64_t> v;
  for (const auto& s : shards_) v.push_back(s.storage_offset());
  return PerRankSymInt(ranks_, v);
}
c10::SymBool LocalTensorImpl::sym_is_contiguous_custom(at::MemoryFormat memory_format) const {
  return c10::SymBool(std::all_of(shards_.begin(), shards_.end(),
                                  [&](const at::Tensor& s) { return s.is_contiguous(memory_format); }));
}
bool LocalTensorImpl::is_strides_like_custom(at::MemoryFormat memory_format) const {
  return std::all_of(shards_.begin(), shards_.end(), [&](const at::Tensor& s) {
    return s.unsafeGetTensorImpl()->is_strides_like(memory_format);
  });
}
c10::SymBool LocalTensorImpl::sym_is_non_overlapping_and_dense_custom() const {
  return c10::SymBool(std::all_of(shards_.begin(), shards_.end(), [](const at::Tensor& s) {
    return s.unsafeGetTensorImpl()->is_non_overlapping_and_dense();
  }));
}

c10::intrusive_ptr<c10::TensorImpl> LocalTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LocalTensorImpl>(ranks_, shards_);
  impl->set_version_counter(version_counter);
  impl->set_allow_tensor_metadata_change(allow_tensor_metadata_change);
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> LocalTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LocalTensorImpl>(ranks_, shards_);
  impl->set_version_counter(std::move(version_counter));
  impl->set_allow_tensor_metadata_change(allow_tensor_metadata_change);
  return impl;
}

void LocalTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<LocalTensorImpl*>(impl.get());
  if (other == nullptr) {
    throw InputError("tensor", "set_data: a LocalTensor can only take the data of another LocalTensor");
  }
  Init(other->ranks_, other->shards_);
}

LocalTensorImpl* FindLocalImpl(const at::Tensor& t) {
  if (!t.defined()) return nullptr;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->key_set().has(c10::DispatchKey::PrivateUse1)) return nullptr;
  // LocalTensorImpl is final: an exact type check is enough and cheaper than dynamic_cast on the hot path.
  return typeid(*impl) == typeid(LocalTensorImpl) ? static_cast<LocalTensorImpl*>(impl) : nullptr;
}

at::Tensor WrapShards(std::vector<int64_t> ranks, std::vector<at::Tensor> shards, std::optional<bool> uneven) {
  EnsureLocalTensorDispatch();
  return at::Tensor(c10::make_intrusive<LocalTensorImpl>(std::move(ranks), std::move(shards), uneven));
}

// ---------------------------------------------------------------------------------------------------------------
// Per-rank RNG: rank r draws from its own CPU generator seeded base + r. While an op tagged nondeterministic_seeded
// runs for rank r, the default CPU generator's state is swapped for rank r's (and swapped back afterwards), so
// rand_like/randn_like/dropout/... use rank r's stream without a Generator argument.

namespace {
struct RngState {
  std::mutex mu;
  uint64_t base_seed = 0;
  std::map<int64_t, at::Generator> generators;
};
RngState& Rng() {
  static RngState* state = new RngState();
  return *state;
}
at::Generator& GeneratorLocked(RngState& s, int64_t rank) {
  auto it = s.generators.find(rank);
  if (it == s.generators.end()) {
    at::Generator g = at::detail::createCPUGenerator(s.base_seed + static_cast<uint64_t>(rank));
    it = s.generators.emplace(rank, std::move(g)).first;
  }
  return it->second;
}
}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// The kernel

namespace {

// What the kernel needs to know about one operator schema, computed once.
struct OpInfo {
  bool seeded = false;
  std::vector<int> write_args;        // arguments marked (a!)
  std::vector<int> return_alias_arg;  // per return: the written argument it returns, or -1
  std::vector<bool> return_symint;    // per return: declared SymInt
};

const OpInfo& GetOpInfo(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const c10::FunctionSchema*, OpInfo> cache;
  const c10::FunctionSchema* key = &op.schema();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  OpInfo info;
  info.seeded = op.hasTag(at::Tag::nondeterministic_seeded);
  const auto& args = key->arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].alias_info() && args[i].alias_info()->isWrite()) info.write_args.push_back(static_cast<int>(i));
  }
  for (const auto& ret : key->returns()) {
    int alias = -1;
    if (ret.alias_info() && ret.alias_info()->isWrite()) {
      for (int a : info.write_args) {
        if (args[a].alias_info()->beforeSets() == ret.alias_info()->beforeSets()) {
          alias = a;
          break;
        }
      }
    }
    info.return_alias_arg.push_back(alias);
    info.return_symint.push_back(ret.real_type()->kind() == c10::TypeKind::SymIntType);
  }
  return cache.emplace(key, std::move(info)).first->second;
}

// How an argument is unwrapped per rank.
enum class ArgKind : uint8_t { kPass, kLocal, kList, kSymInt, kSymIntList };

bool IsLocalSymInt(const c10::SymInt& s) {
  return s.is_heap_allocated() && dynamic_cast<LocalIntNode*>(s.toSymNodeImplUnowned()) != nullptr;
}

int64_t SymIntForRank(const c10::SymInt& s, int64_t rank) {
  if (IsLocalSymInt(s)) return static_cast<LocalIntNode*>(s.toSymNodeImplUnowned())->ValueOf(rank);
  return s.expect_int();
}

c10::IValue UnwrapList(const c10::IValue& v, size_t idx) {
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    auto in = v.toTensorList();
    out.reserve(in.size());
    for (const at::Tensor& t : in) {
      LocalTensorImpl* impl = FindLocalImpl(t);
      out.push_back(impl ? impl->shards()[idx] : t);
    }
    return out;
  }
  auto in = v.toList();
  c10::impl::GenericList out(in.elementType());
  out.reserve(in.size());
  for (const c10::IValue& e : in) {
    if (e.isTensor()) {
      LocalTensorImpl* impl = FindLocalImpl(e.toTensor());
      out.push_back(impl ? c10::IValue(impl->shards()[idx]) : e);
    } else {
      out.push_back(e);
    }
  }
  return out;
}

std::string IValueText(const c10::IValue& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

[[noreturn]] void ThrowDisagree(const c10::OperatorHandle& op, const std::vector<int64_t>& ranks,
                                const std::vector<torch::jit::Stack>& outs, size_t j, const std::string& what) {
  std::ostringstream per_rank;
  for (size_t i = 0; i < ranks.size(); ++i) {
    per_rank << (i ? ", " : "") << "rank " << ranks[i] << ": ";
    const c10::IValue& v = outs[i][j];
    if (v.isTensorList()) {
      per_rank << v.toTensorList().size();
    } else {
      per_rank << IValueText(v);
    }
  }
  throw InputError(op.schema().name(), StrCat(what, " differs per rank (", per_rank.str(),
                                              "); a LocalTensor op can only return it when every rank agrees"));
}

void FlushPending();

// Gives a copy-on-write storage its own data (a copy if still shared; nothing to copy for the last holder).
void MakeOwnStorage(const at::Tensor& shard) {
  if (shard.defined() && shard.has_storage() && c10::impl::cow::is_cow_data_ptr(shard.storage().data_ptr())) {
    shard.storage().mutable_data();
  }
}

void LocalKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  FlushPending();
  const c10::FunctionSchema& schema = op.schema();
  const OpInfo& info = GetOpInfo(op);
  const size_t n_args = schema.arguments().size();
  const size_t base = stack->size() - n_args;

  // 1. Classify the arguments and find the rank set.
  const std::vector<int64_t>* ranks = nullptr;
  auto note_ranks = [&](const LocalTensorImpl* impl) {
    if (ranks == nullptr) {
      ranks = &impl->ranks();
    } else if (*ranks != impl->ranks()) {
      throw InputError(schema.name(), StrCat("LocalTensor arguments hold different ranks: ", JoinInts(*ranks),
                                             " and ", JoinInts(impl->ranks())));
    }
  };
  ArgKind kinds_small[16];
  std::vector<ArgKind> kinds_big;
  ArgKind* kinds = kinds_small;
  if (n_args > 16) {
    kinds_big.resize(n_args);
    kinds = kinds_big.data();
  }
  for (size_t a = 0; a < n_args; ++a) {
    const c10::IValue& v = (*stack)[base + a];
    kinds[a] = ArgKind::kPass;
    if (v.isTensor()) {
      if (LocalTensorImpl* impl = FindLocalImpl(v.toTensor())) {
        note_ranks(impl);
        kinds[a] = ArgKind::kLocal;
      }
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (LocalTensorImpl* impl = FindLocalImpl(t)) {
          note_ranks(impl);
          kinds[a] = ArgKind::kList;
        }
      }
    } else if (v.isSymIntList()) {
      for (const c10::SymInt& s : v.toSymIntList()) {
        if (IsLocalSymInt(s)) kinds[a] = ArgKind::kSymIntList;
      }
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toList()) {
        if (e.isTensor()) {
          if (LocalTensorImpl* impl = FindLocalImpl(e.toTensor())) {
            note_ranks(impl);
            kinds[a] = ArgKind::kList;
          }
        }
      }
    } else if (v.isSymInt()) {
      if (IsLocalSymInt(v.toSymInt())) kinds[a] = ArgKind::kSymInt;
    }
  }
  DTSIM_CHECK(ranks != nullptr, "LocalTensor kernel reached without a LocalTensor argument: ", schema.name());

  // 2. A plain tensor must not be the mutated argument: every rank would write into the same tensor.
  for (int a : info.write_args) {
    const c10::IValue& v = (*stack)[base + a];
    bool plain = (v.isTensor() && v.toTensor().defined() && kinds[a] != ArgKind::kLocal) ||
                 (v.isTensorList() && kinds[a] != ArgKind::kList && v.toTensorList().size() > 0);
    if (plain) {
      throw InputError(schema.arguments()[a].name(),
                       StrCat(schema.name(), " would mutate a plain tensor with LocalTensor inputs (every rank "
                                             "would write into the same tensor); make it a LocalTensor first, e.g. "
                                             "MakeLocalTensor(ranks, [&](int64_t) { return t.clone(); })"));
    }
  }

  // 3. Run the op once per rank.
  const size_t n_ranks = ranks->size();
  // Per-rank stacks come from a thread-local pool (one level per nesting depth) to avoid allocating them per call;
  // they are cleared on exit so no shard outlives the call.
  thread_local std::deque<std::vector<torch::jit::Stack>> pool;  // deque: references stay valid when it grows
  thread_local size_t depth = 0;
  if (pool.size() <= depth) pool.emplace_back();
  std::vector<torch::jit::Stack>& outs = pool[depth];
  if (outs.size() < n_ranks) outs.resize(n_ranks);
  struct DepthGuard {
    std::vector<torch::jit::Stack>& outs;
    size_t& depth;
    ~DepthGuard() {
      for (auto& s : outs) s.clear();
      --depth;
    }
  } depth_guard{outs, ++depth};
  RngState* rng = info.seeded ? &Rng() : nullptr;
  std::unique_lock<std::mutex> rng_lock;
  at::Tensor saved_state;
  at::Generator default_gen;
  if (rng) {
    rng_lock = std::unique_lock<std::mutex>(rng->mu);
    default_gen = at::detail::getDefaultCPUGenerator();
    saved_state = default_gen.get_state();
  }
  for (size_t i = 0; i < n_ranks; ++i) {
    torch::jit::Stack& s = outs[i];
    s.reserve(std::max(n_args, schema.returns().size()));
    const int64_t rank = (*ranks)[i];
    for (size_t a = 0; a < n_args; ++a) {
      const c10::IValue& v = (*stack)[base + a];
      switch (kinds[a]) {
        case ArgKind::kPass:
          s.push_back(v);
          break;
        case ArgKind::kLocal:
          s.push_back(static_cast<LocalTensorImpl*>(v.toTensor().unsafeGetTensorImpl())->shards()[i]);
          break;
        case ArgKind::kList:
          s.push_back(UnwrapList(v, i));
          break;
        case ArgKind::kSymInt:
          s.push_back(SymIntForRank(v.toSymInt(), rank));
          break;
        case ArgKind::kSymIntList: {
          std::vector<int64_t> ints;
          for (const c10::SymInt& x : v.toSymIntList()) ints.push_back(SymIntForRank(x, rank));
          s.push_back(c10::IValue(ints));
          break;
        }
      }
    }
    if (rng) {
      at::Generator& g = GeneratorLocked(*rng, rank);
      std::lock_guard<std::mutex> lock(default_gen.mutex());
      default_gen.set_state(g.get_state());
    }
    {
      RankScope scope(rank);  // what the op allocates is this rank's (MemoryMeter)
      // Copy-on-write: a written shard that shares its storage with other ranks' replicas gets its own copy first
      // (the other ranks keep theirs). c10 would copy on the first write too, but not on every path (an out= op that
      // resizes a shared storage trips an internal assert), so the kernel does it before the op runs.
      for (int a : info.write_args) {
        if (kinds[a] == ArgKind::kLocal) {
          MakeOwnStorage(s[a].toTensor());
        } else if (kinds[a] == ArgKind::kList && s[a].isTensorList()) {
          for (const at::Tensor& t : s[a].toTensorList()) MakeOwnStorage(t);
        }
      }
      op.callBoxed(s);
    }
    if (rng) {
      std::lock_guard<std::mutex> lock(default_gen.mutex());
      GeneratorLocked(*rng, rank).set_state(default_gen.get_state());
    }
  }
  if (rng) {
    std::lock_guard<std::mutex> lock(default_gen.mutex());
    default_gen.set_state(saved_state);
  }

  // 4. Mutated wrappers: shards may have changed shape (resize_, out=, transpose_): refresh the wrapper.
  for (int a : info.write_args) {
    if (kinds[a] == ArgKind::kLocal) {
      auto* impl = static_cast<LocalTensorImpl*>((*stack)[base + a].toTensor().unsafeGetTensorImpl());
      bool changed = false;
      for (const at::Tensor& sh : impl->shards()) {
        if (impl->uneven() || sh.dim() != impl->dim() ||
            (!impl->uneven() && (sh.sizes() != impl->sizes() || sh.strides() != impl->strides()))) {
          changed = true;
          break;
        }
      }
      if (changed) {
        std::vector<at::Tensor> shards = impl->shards();
        std::vector<int64_t> r = impl->ranks();
        impl->shallow_copy_from(c10::make_intrusive<LocalTensorImpl>(std::move(r), std::move(shards)));
      }
    }
  }

  // 5. Wrap the results.
  const size_t n_rets = schema.returns().size();
  std::vector<c10::IValue> results;
  results.reserve(n_rets);
  for (size_t j = 0; j < n_rets; ++j) {
    int alias = info.return_alias_arg[j];
    if (alias >= 0 && kinds[alias] == ArgKind::kLocal) {
      results.push_back((*stack)[base + alias]);
      continue;
    }
    const c10::IValue& r0 = outs[0][j];
    if (r0.isTensor()) {
      std::vector<at::Tensor> shards;
      shards.reserve(n_ranks);
      bool any_defined = false;
      for (size_t i = 0; i < n_ranks; ++i) {
        DTSIM_CHECK(outs[i][j].isTensor(), schema.name(), " returned a tensor on one rank only");
        shards.push_back(outs[i][j].toTensor());
        any_defined = any_defined || shards.back().defined();
      }
      if (!any_defined) {
        results.emplace_back(at::Tensor());
        continue;
      }
      for (size_t i = 0; i < n_ranks; ++i) {
        if (!shards[i].defined()) ThrowDisagree(op, *ranks, outs, j, "whether the result is defined");
      }
      results.emplace_back(at::Tensor(c10::make_intrusive<LocalTensorImpl>(*ranks, std::move(shards))));
    } else if (r0.isTensorList()) {
      size_t len = r0.toTensorList().size();
      for (size_t i = 1; i < n_ranks; ++i) {
        if (outs[i][j].toTensorList().size() != len) {
          ThrowDisagree(op, *ranks, outs, j, "the length of the returned tensor list");
        }
      }
      c10::List<at::Tensor> list;
      list.reserve(len);
      for (size_t k = 0; k < len; ++k) {
        std::vector<at::Tensor> shards;
        shards.reserve(n_ranks);
        for (size_t i = 0; i < n_ranks; ++i) shards.push_back(outs[i][j].toTensorList().get(k));
        list.push_back(at::Tensor(c10::make_intrusive<LocalTensorImpl>(*ranks, std::move(shards))));
      }
      results.emplace_back(std::move(list));
    } else if (info.return_symint[j] && (r0.isInt() || r0.isSymInt())) {
      std::vector<int64_t> values;
      for (size_t i = 0; i < n_ranks; ++i) values.push_back(outs[i][j].toSymInt().expect_int());
      results.emplace_back(PerRankSymInt(*ranks, std::move(values)));
    } else {
      for (size_t i = 1; i < n_ranks; ++i) {
        if (!(outs[i][j] == r0)) ThrowDisagree(op, *ranks, outs, j, "the returned value");
      }
      results.push_back(r0);
    }
  }
  torch::jit::drop(*stack, n_args);
  for (auto& r : results) stack->push_back(std::move(r));
}

}  // namespace

// Registration of the per-rank kernel. Operators defined after the first registration (a library loaded later, a
// custom op) are seen by a registration listener, which only records their names: it runs under the dispatcher's
// lock, so they are registered at the next EnsureLocalTensorDispatch() (every MakeLocalTensor / wrap) or kernel call.
namespace {

struct Registry {
  std::mutex mu;
  std::vector<c10::RegistrationHandleRAII> handles;  // kept for the life of the process
  std::vector<c10::OperatorName> pending;
  std::atomic<bool> has_pending{false};
};
Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

void RegisterOp(Registry& reg, const c10::OperatorName& name) {
  auto& d = c10::Dispatcher::singleton();
  auto handle = d.findOp(name);
  if (!handle || !handle->hasSchema()) return;
  if (handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return;  // c10d::* and our own
  reg.handles.push_back(d.registerImpl(name, c10::DispatchKey::PrivateUse1,
                                       c10::KernelFunction::makeFromBoxedFunction<&LocalKernel>(), std::nullopt,
                                       nullptr, "dtsim LocalTensor per-rank kernel"));
}

class LateOpListener : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle& op) override {
    Registry& reg = GetRegistry();
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.pending.push_back(op.operator_name());
    reg.has_pending.store(true);
  }
  void onOperatorDeregistered(const c10::OperatorHandle&) override {}
};

void FlushPending() {
  Registry& reg = GetRegistry();
  if (!reg.has_pending.load(std::memory_order_acquire)) return;
  std::vector<c10::OperatorName> names;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    names.swap(reg.pending);
    reg.has_pending.store(false);
  }
  for (const auto& name : names) RegisterOp(reg, name);
}

}  // namespace

void EnsureLocalTensorDispatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& d = c10::Dispatcher::singleton();
    Registry& reg = GetRegistry();
    reg.handles.push_back(d.registerFallback(c10::DispatchKey::PrivateUse1,
                                             c10::KernelFunction::makeFromBoxedFunction<&LocalKernel>(),
                                             "dtsim LocalTensor fallback"));
    for (const c10::OperatorName& name : d.getAllOpNames()) RegisterOp(reg, name);
    // The listener is first called for every existing op (already registered above: skipped as having a
    // PrivateUse1 kernel), then for every op defined later.
    reg.handles.push_back(d.addRegistrationListener(std::make_unique<LateOpListener>()));
  });
  FlushPending();
}

}  // namespace internal

// -----------------------------------------------------------------------------------------------------------------
// Public API

using internal::FindLocalImpl;
using internal::LocalTensorImpl;

namespace {
// The impl of `t`, or an InputError naming what was asked of a plain tensor.
LocalTensorImpl* GetLocalImpl(const at::Tensor& t, const char* what) {
  if (LocalTensorImpl* impl = FindLocalImpl(t)) return impl;
  throw InputError("tensor", StrCat(what, " needs a LocalTensor, got a ", t.defined() ? "plain tensor" : "undefined tensor",
                                    " (on a real rank use the Collectives' HeldRanks/Shard/MapShards)"));
}
}  // namespace

at::Tensor MakeLocalTensor(std::vector<int64_t> ranks, std::vector<at::Tensor> shards) {
  if (ranks.empty()) throw InputError("ranks", "a LocalTensor needs at least one rank");
  if (ranks.size() != shards.size()) {
    throw InputError("shards", StrCat("got ", shards.size(), " shards for ", ranks.size(), " ranks ",
                                      internal::JoinInts(ranks)));
  }
  bool uneven = false;  // computed here, in the one pass over the shards
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0) throw InputError("ranks", StrCat("rank ", ranks[i], " is negative"));
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      throw InputError("ranks", StrCat("ranks must be distinct and ascending, got ", internal::JoinInts(ranks)));
    }
    if (!shards[i].defined()) throw InputError("shards", StrCat("the shard of rank ", ranks[i], " is undefined"));
    if (FindLocalImpl(shards[i])) {
      throw InputError("shards", StrCat("the shard of rank ", ranks[i], " is itself a LocalTensor"));
    }
    if (shards[i].scalar_type() != shards[0].scalar_type()) {
      throw InputError("shards", StrCat("dtypes differ: rank ", ranks[0], " has ", shards[0].scalar_type(),
                                        ", rank ", ranks[i], " has ", shards[i].scalar_type()));
    }
    if (shards[i].device() != shards[0].device()) {
      throw InputError("shards", StrCat("devices differ: rank ", ranks[0], " is on ", shards[0].device(), ", rank ",
                                        ranks[i], " on ", shards[i].device()));
    }
    if (shards[i].dim() != shards[0].dim()) {
      throw InputError("shards", StrCat("number of dims differs: rank ", ranks[0], " has ", shards[0].dim(),
                                        ", rank ", ranks[i], " has ", shards[i].dim()));
    }
    if (shards[i].requires_grad()) {
      throw InputError("shards", StrCat("the shard of rank ", ranks[i], " requires grad; call requires_grad_() on "
                                        "the LocalTensor instead"));
    }
    uneven = uneven || shards[i].sizes() != shards[0].sizes() || shards[i].strides() != shards[0].strides();
  }
  return internal::WrapShards(std::move(ranks), std::move(shards), uneven);
}

at::Tensor MakeLocalTensor(const std::vector<int64_t>& ranks, const std::function<at::Tensor(int64_t)>& fn) {
  std::vector<at::Tensor> shards;
  shards.reserve(ranks.size());
  for (int64_t r : ranks) {
    RankScope scope(r);
    shards.push_back(fn(r));
  }
  return MakeLocalTensor(ranks, std::move(shards));
}

bool IsLocalTensor(const at::Tensor& t) { return FindLocalImpl(t) != nullptr; }

std::vector<int64_t> LocalRanks(const at::Tensor& t) { return GetLocalImpl(t, "LocalRanks")->ranks(); }

at::Tensor LocalShard(const at::Tensor& t, int64_t rank) {
  LocalTensorImpl* impl = GetLocalImpl(t, "LocalShard");
  int64_t i = impl->IndexOf(rank);
  if (i < 0) {
    throw InputError("rank", StrCat("rank ", rank, " is not held by the LocalTensor (ranks ",
                                    internal::JoinInts(impl->ranks()), ")"));
  }
  return impl->shards()[i];
}

std::vector<at::Tensor> LocalShards(const at::Tensor& t) { return GetLocalImpl(t, "LocalShards")->shards(); }

at::Tensor MapShards(const at::Tensor& t, const std::function<at::Tensor(int64_t, const at::Tensor&)>& fn) {
  LocalTensorImpl* impl = GetLocalImpl(t, "MapShards");
  std::vector<at::Tensor> out;
  out.reserve(impl->ranks().size());
  bool same = true;  // fn returned every shard itself (a pad or unpad with nothing to do): the input as is
  for (size_t i = 0; i < impl->ranks().size(); ++i) {
    RankScope scope(impl->ranks()[i]);
    out.push_back(fn(impl->ranks()[i], impl->shards()[i]));
    same = same && out.back().is_same(impl->shards()[i]);
  }
  if (same) return t;
  return MakeLocalTensor(impl->ranks(), std::move(out));
}

at::Tensor MapShards(const std::vector<at::Tensor>& tensors,
                     const std::function<at::Tensor(int64_t, const std::vector<at::Tensor>&)>& fn) {
  const std::vector<int64_t>* ranks = nullptr;
  for (const at::Tensor& t : tensors) {
    if (LocalTensorImpl* impl = FindLocalImpl(t)) {
      if (ranks && *ranks != impl->ranks()) {
        throw InputError("tensors", StrCat("LocalTensors hold different ranks: ", internal::JoinInts(*ranks), " and ",
                                           internal::JoinInts(impl->ranks())));
      }
      ranks = &impl->ranks();
    }
  }
  if (ranks == nullptr) throw InputError("tensors", "MapShards needs at least one LocalTensor among its tensors");
  std::vector<at::Tensor> out;
  std::vector<at::Tensor> args(tensors.size());
  for (size_t i = 0; i < ranks->size(); ++i) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      LocalTensorImpl* impl = FindLocalImpl(tensors[k]);
      args[k] = impl ? impl->shards()[i] : tensors[k];
    }
    RankScope scope((*ranks)[i]);
    out.push_back(fn((*ranks)[i], args));
  }
  return MakeLocalTensor(*ranks, std::move(out));
}

int64_t LocalInt(const c10::SymInt& value, int64_t rank) { return internal::SymIntForRank(value, rank); }

c10::SymInt MakeLocalInt(const std::vector<int64_t>& ranks, std::vector<int64_t> values) {
  if (ranks.size() != values.size()) {
    throw InputError("values", StrCat("got ", values.size(), " values for ", ranks.size(), " ranks"));
  }
  return internal::PerRankSymInt(ranks, std::move(values));
}

namespace {
std::atomic<bool> g_replica_sharing{true};
}  // namespace

void SetReplicaSharing(bool enabled) { g_replica_sharing.store(enabled); }
bool ReplicaSharingEnabled() { return g_replica_sharing.load(); }

at::Tensor ShareReplica(const at::Tensor& shard) {
  if (FindLocalImpl(shard)) throw InputError("shard", "ShareReplica takes one rank's plain tensor, got a LocalTensor");
  if (shard.is_meta()) return at::empty_strided(shard.sizes(), shard.strides(), shard.options());
  const bool shareable = g_replica_sharing.load(std::memory_order_relaxed) && shard.layout() == at::kStrided &&
                         shard.is_cpu() && shard.has_storage() && shard.numel() > 0 &&
                         (c10::impl::cow::has_simple_data_ptr(*shard.storage().unsafeGetStorageImpl()) ||
                          c10::impl::cow::is_cow_data_ptr(shard.storage().data_ptr()));
  if (!shareable) return shard.clone(at::MemoryFormat::Preserve);
  MemoryMeter* meter = MemoryMeter::Current();
  if (meter) meter->ChargeAsShared(shard);
  at::Tensor replica = at::_lazy_clone(shard);
  if (meter) meter->ChargeReplica(CurrentRankScope(), replica);
  return replica;
}

bool IsSharedReplica(const at::Tensor& shard) {
  return shard.defined() && shard.has_storage() && !FindLocalImpl(shard) &&
         c10::impl::cow::is_cow_data_ptr(shard.storage().data_ptr());
}

at::Tensor Reconcile(const at::Tensor& t) {
  LocalTensorImpl* impl = FindLocalImpl(t);
  if (impl == nullptr) return t;
  const auto& shards = impl->shards();
  for (size_t i = 1; i < shards.size(); ++i) {
    bool same = shards[i].sizes() == shards[0].sizes() && at::equal(shards[i], shards[0]);
    if (!same) {
      throw InputError("tensor", StrCat("Reconcile: shards differ: rank ", impl->ranks()[0], " ",
                                        ShardToString(shards[0]), " vs rank ", impl->ranks()[i], " ",
                                        ShardToString(shards[i])));
    }
  }
  return shards[0].clone();
}

namespace {
void PrintValues(std::ostream& out, const at::Tensor& t, int64_t dim, int64_t offset, const std::vector<int64_t>& sizes,
                 const std::vector<int64_t>& strides, bool integral, const void* data, size_t limit, size_t* printed) {
  if (dim == static_cast<int64_t>(sizes.size())) {
    if (integral) {
      out << static_cast<const int64_t*>(data)[offset];
    } else {
      out << static_cast<const double*>(data)[offset];
    }
    ++*printed;
    return;
  }
  out << "[";
  for (int64_t i = 0; i < sizes[dim]; ++i) {
    if (i) out << ", ";
    if (*printed >= limit) {
      out << "...";
      break;
    }
    PrintValues(out, t, dim + 1, offset + i * strides[dim], sizes, strides, integral, data, limit, printed);
  }
  out << "]";
}
}  // namespace

std::string ShardToString(const at::Tensor& shard) {
  bool integral = at::isIntegralType(shard.scalar_type(), /*includeBool=*/true);
  at::Tensor c = shard.detach().to(at::kCPU, integral ? at::kLong : at::kDouble).contiguous();
  std::ostringstream out;
  out.precision(8);
  std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  std::vector<int64_t> strides(c.strides().begin(), c.strides().end());
  size_t printed = 0;
  PrintValues(out, c, 0, 0, sizes, strides, integral, c.const_data_ptr(), 1000, &printed);
  return out.str();
}

std::string ToString(const at::Tensor& t) {
  LocalTensorImpl* impl = FindLocalImpl(t);
  if (impl == nullptr) return ShardToString(t);
  std::ostringstream out;
  out << "LocalTensor(";
  for (size_t i = 0; i < impl->ranks().size(); ++i) {
    out << (i ? ", " : "") << impl->ranks()[i] << ": " << ShardToString(impl->shards()[i]);
  }
  out << ")";
  return out.str();
}

void SetLocalSeed(uint64_t base_seed) {
  auto& rng = internal::Rng();
  std::lock_guard<std::mutex> lock(rng.mu);
  rng.base_seed = base_seed;
  rng.generators.clear();
}

}  // namespace dtsim
