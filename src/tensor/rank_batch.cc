// Batched ranks: the table of ops that may run once for all ranks, the stacked view of a
// LocalTensor's shards, and the batched path of the LocalTensor kernel (see rank_batch.h).
#include "tensor/rank_batch.h"

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <c10/core/impl/COW.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>

#include "dtsim/layout/error.h"
#include "dtsim/tensor/ivalue_kinds.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"
#include "dtsim/tensor/sim_world.h"
#include "tensor/local_tensor_impl.h"

namespace dtsim {
namespace internal {
namespace {

// clang-format off
// Ops whose vector and scalar kernels give the same bits for every element, wherever the element
// lies: IEEE-exact arithmetic (one rounding), comparisons, selection, integer and bool ops.
constexpr const char* kElementwiseOps[] = {
  "aten::add.Tensor", "aten::sub.Tensor",  // alpha 1 on floating dtypes (a fused multiply-add else)
  "aten::add.Scalar", "aten::sub.Scalar",
  "aten::mul.Tensor", "aten::div.Tensor", "aten::mul.Scalar", "aten::div.Scalar",
  "aten::neg", "aten::abs", "aten::relu", "aten::maximum", "aten::minimum",
  "aten::clamp", "aten::clamp_min", "aten::clamp_max", "aten::reciprocal",
  "aten::eq.Tensor", "aten::ne.Tensor", "aten::lt.Tensor", "aten::le.Tensor", "aten::gt.Tensor",
  "aten::ge.Tensor", "aten::eq.Scalar", "aten::ne.Scalar", "aten::lt.Scalar", "aten::le.Scalar",
  "aten::gt.Scalar", "aten::ge.Scalar",
  "aten::where.self", "aten::logical_not", "aten::logical_and", "aten::logical_or",
  "aten::bitwise_and.Tensor", "aten::bitwise_or.Tensor", "aten::bitwise_xor.Tensor",
  "aten::bitwise_not", "aten::sign", "aten::floor", "aten::ceil", "aten::trunc",
};
// Ops whose vectorized kernel may round differently from the scalar one the per-rank call uses for
// a shard's last elements (tests/rank_batch_test.cc finds sigmoid and log1p do on this machine).
constexpr const char* kElementwiseAlignedOps[] = {
  "aten::sigmoid", "aten::exp", "aten::tanh", "aten::log", "aten::sqrt", "aten::rsqrt",
  "aten::silu", "aten::gelu", "aten::log1p", "aten::expm1", "aten::erf", "aten::sin",
  "aten::cos", "aten::pow.Tensor_Scalar",
};
// Reductions over some of a shard's dims (their `dim` argument moves one dim out, past the rank
// dim). Batched only where neither the stacked call nor a rank's own splits over threads, so each
// output element is reduced in the same order both ways.
constexpr const char* kReductionOps[] = {
  "aten::sum.dim_IntList", "aten::mean.dim", "aten::amax", "aten::amin",
  "aten::_softmax", "aten::_log_softmax",
};
// clang-format on

// Elements a per-rank shard of an aligned op must count a multiple of: twice the widest vector of
// any dtype's lanes (64 bytes of 1-byte elements), so that every rank's elements start a vector
// loop's block in the stacked call as in its own.
constexpr int64_t kLaneAlignment = 64;

const std::unordered_map<std::string, BatchRule>& RuleTable() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, BatchRule>();
    for (const char* name : kElementwiseOps) t->emplace(name, BatchRule::kElementwise);
    for (const char* name : kElementwiseAlignedOps)
      t->emplace(name, BatchRule::kElementwiseAligned);
    for (const char* name : kReductionOps) t->emplace(name, BatchRule::kReduction);
    return t;
  }();
  return *table;
}

std::atomic<bool>& BatchedRanksFlag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("DTSIM_BATCHED_RANKS");
    return !(env != nullptr && std::strcmp(env, "0") == 0);
  }()};
  return flag;
}

enum class How : uint8_t { kNone, kBatched, kOnce, kPerRank };

struct Decision {
  const c10::FunctionSchema* schema = nullptr;
  How how = How::kNone;
  const char* why = "";  // for kPerRank
  size_t n_ranks = 0;
};
thread_local Decision last_decision;

std::atomic<int64_t> g_batched{0}, g_once{0}, g_per_rank{0};

bool PerRank(const char* why) {
  last_decision.how = How::kPerRank;
  last_decision.why = why;
  g_per_rank.fetch_add(1, std::memory_order_relaxed);
  return false;
}

// Pushes `stacked` (one slice per rank) as the call's result, a LocalTensor that keeps it as its
// storage, and records the batched decision.
bool PushStacked(const BatchCall& call, at::Tensor stacked) {
  call.stack->emplace_back(
      at::Tensor(c10::make_intrusive<LocalTensorImpl>(call.ranks, std::move(stacked), call.world)));
  last_decision.how = How::kBatched;
  g_batched.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// One LocalTensor argument seen as stacked shards: either the stacked tensor of an impl that has
// one (`stacked`, whose slice i is rank i's shard), or the first rank's shard, the others lying
// rank_stride elements apart in its storage.
struct StackedArg {
  at::Tensor t;
  bool stacked = false;
  int64_t rank_stride = 0;  // 0: every rank holds one replica

  c10::IntArrayRef ShardSizes() const { return stacked ? t.sizes().slice(1) : t.sizes(); }
  c10::IntArrayRef ShardStrides() const { return stacked ? t.strides().slice(1) : t.strides(); }
  int64_t ShardDim() const { return stacked ? t.dim() - 1 : t.dim(); }
};

// The number of elements of a layout that is non-overlapping and dense (strides a permutation of
// a contiguous layout's), or -1.
int64_t DenseExtent(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  // Contiguous (the common case): no list to sort.
  int64_t expected_stride = 1;
  bool contiguous = true;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected_stride) {
      contiguous = false;
      break;
    }
    expected_stride *= sizes[d];
  }
  if (contiguous) return expected_stride;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
  int64_t numel = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    numel *= sizes[d];
    if (sizes[d] > 1) dims.emplace_back(strides[d], sizes[d]);
  }
  if (numel == 0) return 0;
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return -1;
    expected *= size;
  }
  return numel;
}

// Whether the shards may move into one stacked buffer unseen: no MemoryMeter (which charges each
// rank's own buffer), and no tensor but the LocalTensor's own shard refers to any shard's storage
// (no view, no replica, no autograd record, no caller's handle).
bool MayRestack(const std::vector<at::Tensor>& shards) {
  if (MemoryMeter::Current() != nullptr) return false;
  for (const at::Tensor& s : shards) {
    if (s.use_count() != 1 || !s.has_storage() || s.storage().use_count() != 1 ||
        !c10::impl::cow::has_simple_data_ptr(*s.storage().unsafeGetStorageImpl()) ||
        s.is_inference())
      return false;
  }
  return true;
}

// The stacked form of `impl`'s shards, or nullopt with the reason in *why. The shards must be even,
// contiguous, on the CPU, non-empty, and lie in the first shard's storage at a constant distance of
// 0 (one replica) or at least a shard's size (a leading rank dim whose slices do not overlap).
std::optional<StackedArg> StackedForm(LocalTensorImpl& impl, const char** why) {
  if (impl.uneven()) {
    *why = "uneven shards";
    return std::nullopt;
  }
  if (impl.StackedIsCurrent()) {
    const at::Tensor& stacked = impl.stacked();
    if (stacked.numel() == 0) {
      *why = "zero-size shards";
      return std::nullopt;
    }
    // Each shard dense (a permutation of a contiguous layout, as a transposing view leaves it) and
    // the rank dim outermost: then the elementwise kernel lays out each rank's result as the rank's
    // own call does.
    const int64_t extent = DenseExtent(stacked.sizes().slice(1), stacked.strides().slice(1));
    if (extent < 0 || stacked.stride(0) < extent) {
      *why = "non-contiguous shards";
      return std::nullopt;
    }
    return StackedArg{stacked, true, stacked.stride(0)};
  }
  const std::vector<at::Tensor>& shards = impl.shards();
  const at::Tensor& s0 = shards[0];
  if (s0.is_meta()) {
    *why = "meta tensors";
    return std::nullopt;
  }
  if (!s0.is_cpu() || s0.layout() != at::kStrided || !s0.has_storage()) {
    *why = "shards not on the CPU";
    return std::nullopt;
  }
  if (s0.numel() == 0) {
    *why = "zero-size shards";
    return std::nullopt;
  }
  if (!s0.is_contiguous()) {
    *why = "non-contiguous shards";
    return std::nullopt;
  }
  const int64_t elem = static_cast<int64_t>(s0.element_size());
  const int64_t bytes = s0.numel() * elem;
  const char* p0 = static_cast<const char*>(s0.const_data_ptr());
  const int64_t n = static_cast<int64_t>(shards.size());
  const int64_t delta = static_cast<const char*>(shards[1].const_data_ptr()) - p0;
  bool regular = delta % elem == 0 && (delta == 0 || delta >= bytes);
  for (int64_t i = 2; i < n && regular; ++i) {
    regular = static_cast<const char*>(shards[i].const_data_ptr()) == p0 + i * delta;
  }
  // Every rank's shard must lie in the first shard's storage, through which the view reads.
  const c10::Storage& storage = s0.storage();
  const char* begin = static_cast<const char*>(storage.data());
  regular = regular && p0 >= begin &&
            p0 + (n - 1) * delta + bytes <= begin + static_cast<int64_t>(storage.nbytes());
  if (regular) return StackedArg{s0, false, delta / elem};
  // Shards in buffers of their own that nothing else refers to (what a redistribution or an op run
  // per rank leaves) move into one stacked buffer: one copy now, batched calls from then on.
  if (MayRestack(shards)) {
    impl.AdoptStacked(at::stack(shards));
    return StackedArg{impl.stacked(), true, impl.stacked().stride(0)};
  }
  *why = "shards not stacked in one buffer";
  return std::nullopt;
}

// `a` as a tensor of `dims` + 1 dims: the rank dim (stride rank_stride), ones up to `dims`, then
// the shard's own dims.
at::Tensor StackedView(const StackedArg& a, int64_t n_ranks, int64_t dims) {
  if (a.stacked && a.ShardDim() == dims) return a.t;
  std::vector<int64_t> sizes{n_ranks}, strides{a.rank_stride};
  for (int64_t d = a.ShardDim(); d < dims; ++d) {
    sizes.push_back(1);
    strides.push_back(1);
  }
  for (int64_t d = 0; d < a.ShardDim(); ++d) {
    sizes.push_back(a.ShardSizes()[d]);
    strides.push_back(a.ShardStrides()[d]);
  }
  return a.t.as_strided(sizes, strides, a.t.storage_offset());
}

bool PythonDispatchActive() {
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  const c10::DispatchKeySet python({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot});
  return !(tls.included_ & python).empty() || c10::impl::TorchDispatchModeTLS::any_modes_set();
}

}  // namespace

BatchRule BatchRuleOf(const c10::FunctionSchema& schema) {
  const auto& table = RuleTable();
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  auto it = table.find(name);
  return it == table.end() ? BatchRule::kNone : it->second;
}

BatchInfo BatchInfoOf(const c10::FunctionSchema& schema) {
  BatchInfo info;
  info.rule = BatchRuleOf(schema);
  const auto& args = schema.arguments();
  for (size_t a = 0; a < args.size(); ++a) {
    if (args[a].name() == "alpha") info.alpha_arg = static_cast<int>(a);
    if (args[a].name() == "dim") info.dim_arg = static_cast<int>(a);
    // Written or aliased arguments (in-place and out= overloads) never batch.
    if (args[a].alias_info() != nullptr) info.rule = BatchRule::kNone;
  }
  if (schema.returns().size() != 1 ||
      !schema.returns()[0].type()->isSubtypeOf(*c10::TensorType::get()))
    info.rule = BatchRule::kNone;
  // A view of its first argument: its result is the same metadata function of every rank's shard,
  // so rank i's view lies a rank's distance from rank 0's (not for views placed at an absolute
  // storage offset).
  const auto* ret_alias = schema.returns().empty() ? nullptr : schema.returns()[0].alias_info();
  const bool aten = schema.name().rfind("aten::", 0) == 0;
  bool absolute_offset = schema.name() == "aten::as_strided";
  for (const auto& arg : args) absolute_offset = absolute_offset || arg.name() == "storage_offset";
  if (aten && schema.returns().size() == 1 && ret_alias != nullptr && !ret_alias->isWrite() &&
      !args.empty() && args[0].alias_info() != nullptr && !args[0].alias_info()->isWrite() &&
      args[0].alias_info()->beforeSets() == ret_alias->beforeSets() && !absolute_offset &&
      schema.returns()[0].type()->kind() == c10::TypeKind::TensorType)
    info.rule = BatchRule::kView;
  return info;
}

// A view op (BatchRule::kView) on a LocalTensor whose shards share one storage a constant distance
// apart: run on rank 0's shard alone, and the result laid over every rank at that distance.
bool RunView(const BatchCall& call) {
  torch::jit::Stack& stack = *call.stack;
  for (size_t a = 1; a < call.n_args; ++a) {
    const c10::IValue& v = stack[call.base + a];
    if (call.kinds[a] != ArgKind::kPass) return PerRank("a per-rank argument of a view");
    if (v.isTensor() && v.toTensor().defined()) return PerRank("a view with a tensor argument");
  }
  if (call.kinds[0] != ArgKind::kLocal) return PerRank("a view of no LocalTensor");
  LocalTensorImpl& impl = *FindLocalImpl(stack[call.base].toTensor());
  if (impl.uneven()) return PerRank("uneven shards");
  const int64_t n = static_cast<int64_t>(call.ranks->size());
  at::Tensor base, first;  // what the result is laid over; rank 0's shard
  int64_t rank_stride = 0;
  if (impl.StackedIsCurrent()) {
    base = impl.stacked();
    rank_stride = base.stride(0);
    first = base.select(0, 0);
  } else {
    const std::vector<at::Tensor>& shards = impl.shards();
    const at::Tensor& s0 = shards[0];  // a reference: a copy would count as another holder
    if (!s0.is_cpu() || s0.layout() != at::kStrided || !s0.has_storage() || s0.is_meta())
      return PerRank("shards not on the CPU");
    const c10::StorageImpl* storage = s0.storage().unsafeGetStorageImpl();
    rank_stride = shards[1].storage_offset() - s0.storage_offset();
    bool one_storage = rank_stride > 0;
    for (int64_t i = 1; i < n && one_storage; ++i) {
      const at::Tensor& s = shards[i];
      one_storage = s.has_storage() && s.storage().unsafeGetStorageImpl() == storage &&
                    s.storage_offset() == s0.storage_offset() + i * rank_stride;
    }
    if (one_storage) {
      first = s0;
      base = s0;
    } else if (s0.is_contiguous() && s0.numel() > 0 && MayRestack(shards)) {
      // As for elementwise ops: shards nothing else refers to move into one stacked buffer.
      impl.AdoptStacked(at::stack(shards));
      base = impl.stacked();
      rank_stride = base.stride(0);
      first = base.select(0, 0);
    } else {
      return PerRank("shards not views of one storage a constant distance apart");
    }
  }
  torch::jit::Stack s(stack.begin() + call.base, stack.end());
  s[0] = first;
  call.op.callBoxed(s);
  const at::Tensor view = s[0].toTensor();
  if (!view.defined() || !view.has_storage() ||
      view.storage().unsafeGetStorageImpl() != first.storage().unsafeGetStorageImpl() ||
      view.scalar_type() != first.scalar_type())
    return PerRank("the view changes dtype or storage");
  std::vector<int64_t> sizes{n}, strides{rank_stride};
  sizes.insert(sizes.end(), view.sizes().begin(), view.sizes().end());
  strides.insert(strides.end(), view.strides().begin(), view.strides().end());
  at::Tensor out = base.as_strided(sizes, strides, view.storage_offset());
  torch::jit::drop(stack, call.n_args);
  return PushStacked(call, std::move(out));
}

// Rewrites the `dim` argument of a reduction over a shard of `dims` dims into the stacked call's:
// each dim one further out; none or an empty list (every dim) spelled out. False for a dim out of
// range (the per-rank call then raises ATen's own error), `dim` then unchanged.
bool StackDims(c10::IValue& dim, int64_t dims) {
  auto moved = [&](int64_t d) -> std::optional<int64_t> {
    if (d < -dims || d >= dims) return std::nullopt;
    return (d < 0 ? d + dims : d) + 1;
  };
  if (dim.isInt()) {
    std::optional<int64_t> d = moved(dim.toInt());
    if (!d) return false;
    dim = *d;
    return true;
  }
  const bool every_dim = dim.isNone() || dim.toListRef().empty();
  if (!every_dim) {
    for (const c10::IValue& d : dim.toListRef()) {
      if (!moved(d.toInt())) return false;
    }
  }
  // A list only the stack holds (the boxed call pops its arguments) is rewritten in place;
  // otherwise one reused from call to call while nothing else holds it: no allocation per call.
  if (!every_dim && IsIntList(dim)) {
    c10::List<int64_t> given = std::move(dim).toIntList();
    if (given.use_count() == 1) {
      for (size_t i = 0; i < given.size(); ++i) given.set(i, *moved(given.get(i)));
      dim = std::move(given);
      return true;
    }
    dim = std::move(given);
  }
  thread_local c10::List<int64_t> reused;
  c10::List<int64_t> out = reused.use_count() == 1 ? reused : c10::List<int64_t>();
  out.clear();
  if (every_dim) {
    out.reserve(dims);
    for (int64_t d = 1; d <= dims; ++d) out.push_back(d);
  } else {
    c10::ArrayRef<c10::IValue> given = dim.toListRef();
    out.reserve(given.size());
    for (const c10::IValue& d : given) out.push_back(*moved(d.toInt()));
  }
  dim = std::move(out);
  return true;
}

// A reduction (BatchRule::kReduction) of one LocalTensor over some of its shard dims.
bool RunReduction(const BatchCall& call, const BatchInfo& info) {
  torch::jit::Stack& stack = *call.stack;
  for (size_t a = 1; a < call.n_args; ++a) {
    const c10::IValue& v = stack[call.base + a];
    if (call.kinds[a] != ArgKind::kPass) return PerRank("a per-rank argument of a reduction");
    if (v.isTensor() && v.toTensor().defined())
      return PerRank("a reduction with a tensor argument");
  }
  if (call.kinds[0] != ArgKind::kLocal || info.dim_arg < 0)
    return PerRank("no LocalTensor to reduce");
  const char* why = "";
  std::optional<StackedArg> in = StackedForm(*FindLocalImpl(stack[call.base].toTensor()), &why);
  if (!in) return PerRank(why);
  if (in->rank_stride == 0) return PerRank("replicas (computed per rank, as reductions are)");
  const int64_t n = static_cast<int64_t>(call.ranks->size());
  const int64_t dims = in->ShardDim();
  int64_t numel = 1;
  for (int64_t d : in->ShardSizes()) numel *= d;
  if (dims == 0) return PerRank("0-dim shards");
  if (numel * n > at::internal::GRAIN_SIZE)
    return PerRank("shards too large for one thread (the reduction order would differ)");
  if (MemoryMeter::Current() != nullptr)
    return PerRank("a memory meter is on (one stacked allocation is no rank's own)");
  if (!StackDims(stack[call.base + info.dim_arg], dims)) return PerRank("a dim out of range");
  // The stacked tensor itself goes on the stack when it is the view (no reference taken twice).
  stack[call.base] =
      in->stacked && in->ShardDim() == dims ? std::move(in->t) : StackedView(*in, n, dims);
  call.op.callBoxed(stack);
  at::Tensor out = std::move(stack.back()).toTensor();
  stack.pop_back();
  DTSIM_CHECK(out.dim() >= 1 && out.size(0) == n, call.op.schema().name(),
              ": the batched reduction's result has no leading rank dim");
  return PushStacked(call, std::move(out));
}

bool RunBatched(const BatchCall& call) {
  const c10::FunctionSchema& schema = call.op.schema();
  last_decision.schema = &schema;
  last_decision.n_ranks = call.ranks->size();
  if (!BatchedRanksFlag().load(std::memory_order_relaxed)) return PerRank("batched ranks are off");
  const BatchInfo& info = call.info;
  if (info.rule == BatchRule::kNone) return PerRank("no batch rule for this op");
  const int64_t n = static_cast<int64_t>(call.ranks->size());
  if (n < 2) return PerRank("one rank");
  if (PythonDispatchActive()) return PerRank("a Python dispatch mode or key is active");
  if (info.rule == BatchRule::kView) return RunView(call);
  if (info.rule == BatchRule::kReduction) return RunReduction(call, info);
  torch::jit::Stack& stack = *call.stack;

  // The arguments: every LocalTensor in its stacked form; plain tensors as they are.
  c10::SmallVector<std::optional<StackedArg>, 8> local(call.n_args);
  bool all_replicas = true;
  bool zero_dim_shard = false;
  std::optional<at::ScalarType> dtype;
  bool mixed_dtypes = false;
  int64_t dims = 0;
  auto note_dtype = [&](at::ScalarType t) {
    mixed_dtypes = mixed_dtypes || (dtype && *dtype != t);
    dtype = t;
  };
  for (size_t a = 0; a < call.n_args; ++a) {
    const c10::IValue& v = stack[call.base + a];
    switch (call.kinds[a]) {
      case ArgKind::kList:
        return PerRank("a tensor list argument");
      case ArgKind::kSymInt:
      case ArgKind::kSymIntList:
        return PerRank("a per-rank integer argument");
      case ArgKind::kLocal: {
        const char* why = "";
        local[a] = StackedForm(*FindLocalImpl(v.toTensor()), &why);
        if (!local[a]) return PerRank(why);
        all_replicas = all_replicas && local[a]->rank_stride == 0;
        zero_dim_shard = zero_dim_shard || local[a]->ShardDim() == 0;
        dims = std::max<int64_t>(dims, local[a]->ShardDim());
        note_dtype(local[a]->t.scalar_type());
        break;
      }
      case ArgKind::kPass:
        if (v.isTensor() && v.toTensor().defined()) {
          const at::Tensor& t = v.toTensor();
          if (t.unsafeGetTensorImpl()->is_wrapped_number()) break;  // a Python scalar
          if (!t.is_cpu() || t.layout() != at::kStrided)
            return PerRank("a plain tensor not on the CPU");
          dims = std::max<int64_t>(dims, t.dim());
          note_dtype(t.scalar_type());
        }
        break;
    }
  }
  // A 0-dim shard would take part in type promotion as a dimensioned tensor once stacked.
  if (zero_dim_shard && mixed_dtypes) return PerRank("a 0-dim shard among tensors of mixed dtypes");
  if (info.alpha_arg >= 0 && dtype && at::isFloatingType(*dtype)) {
    const c10::IValue& alpha = stack[call.base + info.alpha_arg];
    if (!(alpha.isInt() && alpha.toInt() == 1) && !(alpha.isDouble() && alpha.toDouble() == 1.0))
      return PerRank("alpha other than 1 (a fused multiply-add in the vector kernel)");
  }
  if (info.rule == BatchRule::kElementwiseAligned) {
    // Every tensor argument of one shape (no broadcasting), its elements a multiple of the lanes,
    // and few enough that neither the stacked nor a rank's own call splits over threads.
    std::optional<std::vector<int64_t>> shape;
    bool same = true;
    for (size_t a = 0; a < call.n_args && same; ++a) {
      const c10::IValue& v = stack[call.base + a];
      std::vector<int64_t> sizes;
      if (local[a]) {
        sizes = local[a]->ShardSizes().vec();
      } else if (v.isTensor() && v.toTensor().defined() &&
                 !v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
        sizes = v.toTensor().sizes().vec();
      } else {
        continue;
      }
      if (shape && *shape != sizes) same = false;
      shape = std::move(sizes);
    }
    int64_t numel = 1;
    for (int64_t d : shape.value_or(std::vector<int64_t>{})) numel *= d;
    if (!same || numel % kLaneAlignment != 0 || numel * n > at::internal::GRAIN_SIZE)
      return PerRank(
          "shards not lane-aligned for an op whose vector and scalar kernels may round apart");
  }

  // Computed once: every rank holds one replica of every LocalTensor argument.
  if (all_replicas) {
    torch::jit::Stack s(stack.begin() + call.base, stack.end());
    for (size_t a = 0; a < call.n_args; ++a) {
      if (local[a]) s[a] = local[a]->t;
    }
    std::vector<at::Tensor> shards(n);
    {
      RankScope scope((*call.ranks)[0]);
      OpBoundaryScope boundary((*call.ranks)[0]);
      call.op.callBoxed(s);
    }
    shards[0] = s[0].toTensor();
    for (int64_t i = 1; i < n; ++i) {
      RankScope scope((*call.ranks)[i]);
      shards[i] = ShareReplica(shards[0], call.world.get());
    }
    torch::jit::drop(stack, call.n_args);
    stack.emplace_back(at::Tensor(c10::make_intrusive<LocalTensorImpl>(
        call.ranks, std::move(shards), call.world, /*uneven=*/false)));
    last_decision.how = How::kOnce;
    g_once.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // Stacked: one call over views with a leading rank dim. Its result is one allocation, which a
  // MemoryMeter could not charge to each rank as their own calls' results.
  if (MemoryMeter::Current() != nullptr)
    return PerRank("a memory meter is on (one stacked allocation is no rank's own)");
  // The arguments are replaced on the stack itself, which the call then turns into its result.
  for (size_t a = 0; a < call.n_args; ++a) {
    if (local[a]) stack[call.base + a] = StackedView(*local[a], n, dims);
  }
  call.op.callBoxed(stack);
  at::Tensor out = std::move(stack.back()).toTensor();
  stack.pop_back();
  DTSIM_CHECK(out.dim() == dims + 1 && out.size(0) == n, schema.name(),
              ": the batched call's result has no leading rank dim");
  return PushStacked(call, std::move(out));
}

}  // namespace internal

void SetBatchedRanks(bool enabled) { internal::BatchedRanksFlag().store(enabled); }
bool BatchedRanks() { return internal::BatchedRanksFlag().load(); }

std::string LastRankExecution() {
  const internal::Decision& d = internal::last_decision;
  if (d.schema == nullptr || d.how == internal::How::kNone) return "";
  std::string name = d.schema->name();
  if (!d.schema->overload_name().empty()) name += "." + d.schema->overload_name();
  switch (d.how) {
    case internal::How::kBatched:
      return StrCat(name, ": batched (one call over ", d.n_ranks, " stacked shards)");
    case internal::How::kOnce:
      return StrCat(name, ": computed once (every rank holds the same replica)");
    default:
      return StrCat(name, ": per rank (", d.why, ")");
  }
}

RankExecutionCounts GetRankExecutionCounts() {
  RankExecutionCounts c;
  c.batched = internal::g_batched.load();
  c.computed_once = internal::g_once.load();
  c.per_rank = internal::g_per_rank.load();
  return c;
}

}  // namespace dtsim
