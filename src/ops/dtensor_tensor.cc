// The DTensor wrapper tensor and its dispatcher kernel: unwrap, propagate, redistribute, run
// locally, wrap.
#include "dtsim/ops/dtensor_tensor.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <charconv>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <unordered_map>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "dtsim/core/redistribute.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/transition.h"
#include "dtsim/ops/custom_handlers.h"
#include "dtsim/ops/loss_parallel.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/tensor/ivalue_kinds.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"

namespace dtsim {
namespace ops {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// The wrapper TensorImpl: global sizes and strides, no storage, the DTensor inside.

constexpr c10::DispatchKeySet kDTensorKeys =
    c10::DispatchKeySet({c10::DispatchKey::PrivateUse2, c10::DispatchKey::ADInplaceOrView,
                         c10::DispatchKey::AutogradPrivateUse2});

// A LocalTensor's own device is its shards' (local_tensor_impl.h).
c10::Device DeviceOf(const at::Tensor& local) { return local.device(); }

class DTensorImpl final : public c10::TensorImpl {
 public:
  explicit DTensorImpl(DTensor dt)
      : c10::TensorImpl(kDTensorKeys, at::scalarTypeToTypeMeta(ToScalarType(dt.spec().dtype())),
                        DeviceOf(dt.to_local())),
        dt_(std::move(dt)) {
    set_storage_access_should_throw();
    set_sizes_and_strides(dt_.shape(), dt_.stride());
  }
  const DTensor& dtensor() const { return dt_; }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override {
    auto impl = c10::make_intrusive<DTensorImpl>(dt_);
    copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
    return impl;
  }
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override {
    auto impl = c10::make_intrusive<DTensorImpl>(dt_);
    copy_tensor_metadata(this, impl.get(), std::move(version_counter),
                         allow_tensor_metadata_change);
    return impl;
  }
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override {
    auto* other = dynamic_cast<DTensorImpl*>(impl.get());
    DTSIM_CHECK(other != nullptr, "shallow_copy_from a non-DTensor into a DTensor");
    copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
    dt_ = other->dt_;
  }

 private:
  const char* tensorimpl_type_name() const override { return "dtsim::DTensorImpl"; }
  DTensor dt_;
};

DTensorImpl* FindImpl(const at::Tensor& t) {
  if (!t.defined() || !t.key_set().has(c10::DispatchKey::PrivateUse2)) return nullptr;
  // DTensorImpl is final: an exact type check is enough and cheaper than dynamic_cast.
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return typeid(*impl) == typeid(DTensorImpl) ? static_cast<DTensorImpl*>(impl) : nullptr;
}

thread_local OpObservers g_observers;

// ---------------------------------------------------------------------------------------------------------------
// The decision cache: (op, input specs, other arguments) → decision and output metadata, as
// upstream caches propagation per OpSchema.

struct CachedCall {
  ShardingDecision decision;
  std::vector<std::optional<TensorMeta>> outputs;
  // The spec of each output (validated once), where the decision and the metadata give one; null
  // otherwise. The outputs' DTensors share it.
  std::vector<std::shared_ptr<const DTensorSpec>> out_specs;
  // The global stride of each output with a spec (from the metadata), shared the same way.
  std::vector<std::shared_ptr<const std::vector<int64_t>>> out_strides;
};
// The cache's hash: XXH3 over the key's bytes.
struct KeyHash {
  size_t operator()(const std::string& key) const {
    return static_cast<size_t>(XXH3_64bits(key.data(), key.size()));
  }
};
using CacheEntries = std::unordered_map<std::string, std::shared_ptr<const CachedCall>, KeyHash>;
struct Cache {
  std::mutex mu;
  CacheEntries entries;
  std::atomic<uint64_t> generation{0};  // one more at every clear
};
Cache& GetCache() {
  static Cache* c = new Cache();
  return *c;
}
// Each thread's copy of the entries it has used, looked up without the lock; emptied when the
// shared cache's generation moves on (a clear).
struct FrontCache {
  uint64_t generation = 0;
  CacheEntries entries;
};
FrontCache& GetFrontCache() {
  thread_local FrontCache front;
  return front;
}

TensorMeta MetaOf(const at::Tensor& t) {
  return TensorMeta{t.sizes().vec(), t.strides().vec(), t.scalar_type()};
}

// One tensor input of the call: a DTensor, or a 0-d plain tensor standing for a replicated scalar.
struct Input {
  const at::Tensor* arg = nullptr;  // the argument as passed, on the call's stack (alive until the
                                    // results replace the arguments); null for a list's element
  at::Tensor element;               // a tensor list's element, held here (a list yields copies)
  const DTensor* dt = nullptr;      // inside the wrapper's impl (alive while the argument is on
                                    // the stack); null for a plain scalar tensor
  const at::Tensor& wrapper() const { return arg != nullptr ? *arg : element; }
};

// The decision cache's key is bytes, not text: each field self-delimiting (a count before every
// list, one tag byte before every argument), so two different calls never give the same key.
// An integer in [0, kWideInt) is one byte; any other is kWideInt and its eight bytes.
constexpr unsigned char kWideInt = 0xF0;

void AppendInt(std::string& key, int64_t x) {
  if (x >= 0 && x < kWideInt) {
    key += static_cast<char>(x);
    return;
  }
  char buf[1 + sizeof(x)];
  buf[0] = static_cast<char>(kWideInt);
  std::memcpy(buf + 1, &x, sizeof(x));
  key.append(buf, sizeof(buf));
}

void AppendInts(std::string& key, c10::IntArrayRef v) {
  AppendInt(key, static_cast<int64_t>(v.size()));
  for (int64_t x : v) AppendInt(key, x);
}
// The same for an int list argument, read in place (no vector made of it).
void AppendInts(std::string& key, c10::ArrayRef<c10::IValue> v) {
  AppendInt(key, static_cast<int64_t>(v.size()));
  for (const c10::IValue& x : v) AppendInt(key, x.toInt());
}

// The placements in the decision cache's key, a tag byte and their integers each.
void AppendPlacements(std::string& key, const Placements& placements) {
  AppendInt(key, static_cast<int64_t>(placements.size()));
  for (const Placement& p : placements) {
    switch (p.kind()) {
      case Placement::Kind::kShard:
        key += 'S';
        AppendInt(key, p.dim());
        break;
      case Placement::Kind::kStridedShard:
        key += 's';
        AppendInt(key, p.dim());
        AppendInt(key, p.split_factor());
        break;
      case Placement::Kind::kReplicate:
        key += 'R';
        break;
      case Placement::Kind::kPartial:
        key += 'P';
        AppendInt(key, static_cast<int64_t>(p.reduce_op()));
        break;
    }
  }
}

std::string OpName(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Per-rank (simulated) or this rank's (real) integers as a SymInt.
c10::SymInt PerRank(const DTensor& ref, const std::function<int64_t(int64_t)>& fn) {
  Collectives& coll = ref.collectives();
  const std::vector<int64_t> ranks = coll.HeldRanks(ref.to_local());
  if (!coll.simulated()) return c10::SymInt(fn(ranks.front()));
  std::vector<int64_t> values;
  values.reserve(ranks.size());
  for (int64_t r : ranks) values.push_back(fn(r));
  return MakeLocalInt(ranks, std::move(values));
}

// The local sizes of a tensor of `shape` with `placements` on every held rank, as SymInts.
std::vector<c10::SymInt> LocalSizes(const DTensor& ref, const std::vector<int64_t>& shape,
                                    const Placements& placements) {
  const DeviceMesh& mesh = ref.mesh();
  MeshView view(mesh);
  std::vector<std::vector<int64_t>> per_rank;
  const std::vector<int64_t> ranks = ref.collectives().HeldRanks(ref.to_local());
  for (int64_t r : ranks)
    per_rank.push_back(LocalShapeAt(shape, mesh.shape(), view.Coordinate(r), placements));
  std::unordered_map<int64_t, size_t> index;  // rank -> its row of per_rank
  for (size_t k = 0; k < ranks.size(); ++k) index[ranks[k]] = k;
  std::vector<c10::SymInt> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    out.push_back(PerRank(ref, [&](int64_t r) { return per_rank[index.at(r)][d]; }));
  }
  return out;
}

// Upstream's _MaskPartial lookup for a vocabulary-sharded embedding weight (placements with S(0)
// where the output is P(sum)): every rank looks up the indices inside its rows [lo, hi) (shifted by
// lo), the others read row 0 and their output rows are zeroed; the sum over the ranks is the
// embedding. nullopt when the weight is not sharded so.
std::optional<at::Tensor> MaskedEmbedding(const DeviceMesh& mesh, Collectives& coll,
                                          const std::vector<int64_t>& shape,
                                          const Placements& weight, const Placements& output,
                                          const at::Tensor& weight_local,
                                          const at::Tensor& indices_local) {
  bool masked = false;
  for (size_t m = 0; m < weight.size(); ++m) {
    masked =
        masked || (weight[m].is_shard_like() && weight[m].dim() == 0 && output[m].is_partial());
  }
  if (!masked) return std::nullopt;
  const DTensorSpec spec = DTensorSpec::Create(mesh, weight, shape);
  MeshView view(mesh);
  return coll.MapShards(std::vector<at::Tensor>{weight_local, indices_local},
                        [&](int64_t rank, const std::vector<at::Tensor>& s) {
                          // One operator on this rank: its masks are workspace, its output is
                          // what counts (as a metadata run, which computes the shape only).
                          OpBoundaryScope boundary(rank);
                          const RankLayout layout = spec.LayoutAt(view.Coordinate(rank));
                          const int64_t lo = layout.global_offset[0];
                          const int64_t hi = lo + layout.local_shape[0];
                          if (hi == lo || s[0].is_meta()) {
                            // An empty shard of the vocabulary (uneven) contributes nothing;
                            // metadata-only shards need only the shape (index_select has no meta
                            // kernel).
                            std::vector<int64_t> sizes = s[1].sizes().vec();
                            sizes.push_back(s[0].size(1));
                            return s[0].is_meta() ? at::empty(sizes, s[0].options())
                                                  : at::zeros(sizes, s[0].options());
                          }
                          const at::Tensor outside = s[1].lt(lo).logical_or(s[1].ge(hi));
                          const at::Tensor local_idx = (s[1] - lo).masked_fill(outside, 0);
                          at::Tensor out = at::embedding(s[0], local_idx);
                          return out.masked_fill(outside.unsqueeze(-1), 0);
                        });
}

// Upstream's argminmax_handler (torch/distributed/tensor/_nonlinear_redux.py) for argmax /
// argmin(self, dim?, keepdim): a Partial input is made Replicate first; every rank reduces its own
// shard (the extreme value and its index, made global with the shard's offset); over each mesh dim
// that shards the reduced dim (every sharded mesh dim when dim is None) the values and the indices
// are all-gathered along the reduced dim; the rank holding the extreme value wins. Returns the
// local result, laid out as the registered strategy's output placements say.
at::Tensor ArgMinMax(const DTensor& input, bool is_max, std::optional<int64_t> dim, bool keepdim,
                     std::vector<OpRedistribution>* redistributions) {
  DTensor dt = input;
  const DeviceMesh& mesh = dt.mesh();
  Placements no_partial = dt.placements();
  for (Placement& p : no_partial) {
    if (p.is_partial()) p = Placement::Replicate();
  }
  if (no_partial != dt.placements()) {
    OpRedistribution r;
    r.from = dt.placements();
    r.to = no_partial;
    r.plan = PlanFor(dt.spec(), no_partial);
    dt = ExecutePlanObserved(is_max ? "aten::argmax" : "aten::argmin", 0, dt, r.plan);
    if (redistributions != nullptr) redistributions->push_back(std::move(r));
  }
  const int64_t ndim = static_cast<int64_t>(dt.shape().size());
  if (dim) dim = NormalizeDim(*dim, ndim);
  std::vector<int64_t> shard_mesh_dims;
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    const Placement& p = dt.placements()[m];
    if (p.is_strided_shard()) {
      throw InputError(
          "op", StrCat(is_max ? "aten.argmax" : "aten.argmin", " does not support _StridedShard!"));
    }
    if (p.is_shard() && (!dim || p.dim() == *dim)) shard_mesh_dims.push_back(m);
  }
  Collectives& coll = dt.collectives();
  const DTensorSpec& spec = dt.spec();
  MeshView view(mesh);
  auto reduce = [&](const at::Tensor& s) -> std::pair<at::Tensor, at::Tensor> {
    if (!dim) {
      return {(is_max ? s.max() : s.min()).unsqueeze(0),
              (is_max ? s.argmax() : s.argmin()).unsqueeze(0)};
    }
    auto [values, indices] = is_max ? at::max(s, *dim, true) : at::min(s, *dim, true);
    return {values, indices};
  };
  auto expected_shape = [&](const at::Tensor& s) {
    if (!dim) return keepdim ? std::vector<int64_t>(s.dim(), 1) : std::vector<int64_t>{};
    std::vector<int64_t> shape = s.sizes().vec();
    if (keepdim) {
      if (!shape.empty()) shape[*dim] = 1;
    } else if (!shape.empty()) {
      shape.erase(shape.begin() + *dim);
    }
    return shape;
  };
  const at::Tensor local = dt.to_local();
  if (shard_mesh_dims.empty()) {
    return coll.MapShards(local, [&](int64_t, const at::Tensor& s) {
      return reduce(s).second.reshape(expected_shape(s));
    });
  }
  at::Tensor values =
      coll.MapShards(local, [&](int64_t, const at::Tensor& s) { return reduce(s).first; });
  at::Tensor indices = coll.MapShards(local, [&](int64_t rank, const at::Tensor& s) {
    const at::Tensor li = reduce(s).second;
    const RankLayout layout = spec.LayoutAt(view.Coordinate(rank));
    if (dim) return li + layout.global_offset[*dim];
    // A flat index of the shard -> a flat index of the global tensor.
    at::Tensor global = at::zeros_like(li);
    at::Tensor remaining = li;
    for (int64_t i = 0; i < ndim; ++i) {
      int64_t local_stride = 1, global_stride = 1;
      for (int64_t k = i + 1; k < ndim; ++k) {
        local_stride *= layout.local_shape[k];
        global_stride *= spec.shape()[k];
      }
      const at::Tensor coord = remaining.div(local_stride, "floor");
      remaining = remaining.remainder(local_stride);
      global = global + (coord + layout.global_offset[i]) * global_stride;
    }
    return global;
  });
  const int64_t gather_dim = dim ? *dim : 0;
  for (int64_t m : shard_mesh_dims) {
    values = coll.AllGather(values, view.Groups(m), gather_dim);
    indices = coll.AllGather(indices, view.Groups(m), gather_dim);
  }
  return coll.MapShards(std::vector<at::Tensor>{values, indices, local},
                        [&](int64_t, const std::vector<at::Tensor>& s) {
                          const at::Tensor winner = is_max ? s[0].argmax(gather_dim, true)
                                                           : s[0].argmin(gather_dim, true);
                          return s[1].gather(gather_dim, winner).reshape(expected_shape(s[2]));
                        });
}

bool IsShapeArgOp(const std::string& name) {
  static const char* kOps[] = {"aten::new_empty",        "aten::new_full",
                               "aten::new_ones",         "aten::new_zeros",
                               "aten::expand",           "aten::expand_copy",
                               "aten::reshape",          "aten::view",
                               "aten::view_copy",        "aten::_unsafe_view",
                               "aten::select_backward",  "aten::slice_backward",
                               "aten::new_empty_strided"};
  for (const char* k : kOps) {
    if (name == k) return true;
  }
  return false;
}

// The op's names and custom handlers, found once per operator.
struct OpNames {
  std::string name;                               // "aten::add.Tensor"
  std::string short_name;                         // "add.Tensor"
  CustomHandler handler = nullptr;                // set kAlways
  CustomHandler loss_parallel_handler = nullptr;  // set kLossParallel
  // How RunLocal runs it (besides calling it on the local data).
  bool shape_args = false;  // IsShapeArgOp: its shape arguments made local first
  bool embedding = false;   // aten::embedding: masked where the table is vocab-sharded
  bool squeeze = false;     // aten::squeeze*: squeezes global size-1 dims only
};

const OpNames& NamesOf(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const void*, OpNames> names;
  const void* key = &op.schema();
  auto it = names.find(key);
  if (it == names.end()) {
    OpNames n;
    n.name = OpName(op);
    n.short_name = n.name.substr(n.name.find("::") + 2);
    n.handler = FindCustomHandler(HandlerSet::kAlways, n.name);
    n.loss_parallel_handler = FindCustomHandler(HandlerSet::kLossParallel, n.name);
    n.shape_args = IsShapeArgOp(n.name);
    n.embedding = n.name == "aten::embedding";
    n.squeeze = n.name.rfind("aten::squeeze", 0) == 0;
    it = names.emplace(key, std::move(n)).first;
  }
  return it->second;
}

// The local call's stack of the KernelCall at nesting depth `depth` on this thread (no other call
// in progress has that depth), from a per-thread pool so that a call allocates none once the pool
// is warm. Its call empties it when done, so no tensor outlives the call.
torch::jit::Stack& LocalStackAt(size_t depth) {
  thread_local std::deque<torch::jit::Stack> pool;  // a deque: references survive growth
  while (pool.size() <= depth) pool.emplace_back();
  return pool[depth];
}

// One call of an op on DTensors through the kernel's stages, each a member function run after the
// one before: Unwrap (the arguments: DTensor inputs and their placements) -> Propagate (the
// sharding decision and output metadata, from the cache or propagated) -> Redistribute (the inputs
// that need it, to the decision's placements) -> RunLocal (the op on the local data) -> Wrap (the
// results as DTensors) -> Finish (the results replace the arguments on the stack; the observer
// hears of the call). Custom handlers (custom_handlers.h) run some stages and do the rest their own
// way.
class KernelCall {
 public:
  KernelCall(const c10::OperatorHandle& op, const OpNames& names, torch::jit::Stack* stack)
      : op(op),
        schema(op.schema()),
        stack(stack),
        n_args(schema.arguments().size()),
        base(stack->size() - n_args),
        names(names),
        name(names.name),
        short_name(names.short_name),
        observe(g_observers.observed()),
        depth(static_cast<size_t>(Depth()++)) {
    call.schema = &schema;  // call.name: set when needed (fill_call, inplace)
    if (observe) event.emplace();
  }
  ~KernelCall() { --Depth(); }
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;
  // The KernelCalls in progress on this thread (this one's `depth` is their number before it).
  static int& Depth() {
    thread_local int depth = 0;
    return depth;
  }

  // 1. Classify the arguments.
  void Unwrap();
  // 2. The decision: from the cache, or propagated (output metadata from the op on meta tensors).
  void Propagate();
  // 3. Redistribute the inputs that need it (fills `locals`).
  void Redistribute();
  // 4. Run the op on the local data: `local_stack` (empty) ends holding its results.
  void RunLocal(torch::jit::Stack& local_stack);
  // 5. Wrap the local results as DTensors with the decision's specs.
  using Results = c10::SmallVector<c10::IValue, 2>;  // most ops return one or two values
  Results Wrap(const torch::jit::Stack& local_stack);
  // Whether the op writes its first argument (call.inplace()).
  bool inplace() {
    if (call.name.empty()) call.name = name;
    return call.inplace();
  }
  // Replaces the arguments by the results; the observer hears of the call first (the arguments,
  // and the DTensors `ref` and `inputs` point into, are alive until the drop).
  void Finish(Results results);
  // Stages 3 to the end, for a call that has been unwrapped and propagated.
  void RunGeneric() {
    Redistribute();
    struct Emptied {
      torch::jit::Stack& stack;
      ~Emptied() { stack.clear(); }
    } local{LocalStackAt(depth)};
    RunLocal(local.stack);
    Finish(Wrap(local.stack));
  }

  const c10::OperatorHandle& op;
  const c10::FunctionSchema& schema;
  torch::jit::Stack* stack;
  const size_t n_args;
  const size_t base;
  const OpNames& names;
  const std::string& name;
  const std::string& short_name;
  // The OpCallInfo: name and schema always; the rest only when needed (fill_call).
  OpCallInfo call;
  bool call_filled = false;
  // Inline storage for the usual few arguments: no allocation per call.
  c10::SmallVector<Input, 4> inputs;
  c10::SmallVector<size_t, 4> input_arg;  // the argument each input comes from
  const DTensor* ref = nullptr;           // the first DTensor argument
  // The first DTensor argument's Collectives (its DTensor is alive while the call runs).
  const std::shared_ptr<Collectives>& collectives() const { return ref->collectives_ptr(); }
  // Each input's placements before any redistribution: its DTensor's own (alive while the argument
  // is on the stack), or `replicate` for a plain scalar tensor. CurrentPlacements() copies them.
  c10::SmallVector<const Placements*, 4> current;
  Placements replicate;
  // The decision: an entry of this thread's front cache, which only an outermost call (none in
  // progress on the thread) may empty; or one `cached_owner` holds.
  const CachedCall* cached = nullptr;
  std::shared_ptr<const CachedCall> cached_owner;
  bool cache_hit = false;
  // Each input's local data: its DTensor's own, or its redistributed one in `redistributed`
  // (reserved for every input first, so that pointers into it stay valid).
  c10::SmallVector<const at::Tensor*, 4> locals;
  c10::SmallVector<at::Tensor, 4> redistributed;
  std::optional<OpEvent> event;  // only while observed (observe)
  const bool observe;
  const size_t depth;  // Depth() before this call began

 private:
  void fill_call();
  std::vector<Placements> CurrentPlacements() const;
  const DeviceMesh& mesh() const { return ref->mesh(); }
  void FixMetaOutputs();
  void LocalShapeArguments(torch::jit::Stack& local_stack);
  at::Tensor SqueezeGlobalOnes();
};

void KernelCall::Unwrap() {
  auto add_tensor = [&](const at::Tensor& t, size_t a, bool in_list) {
    if (DTensorImpl* impl = FindImpl(t)) {
      if (ref && impl->dtensor().mesh() != ref->mesh()) {
        throw InputError(schema.arguments()[a].name(),
                         StrCat("aten.", short_name,
                                ": DTensor arguments on different meshes: ", ref->mesh().ToString(),
                                " and ", impl->dtensor().mesh().ToString()));
      }
      inputs.push_back(in_list ? Input{nullptr, t, &impl->dtensor()}
                               : Input{&t, at::Tensor(), &impl->dtensor()});
      if (!ref) ref = &impl->dtensor();
    } else if (t.dim() == 0 && !in_list) {
      inputs.push_back(Input{&t, at::Tensor(), nullptr});
    } else {
      throw InputError(
          schema.arguments()[a].name(),
          StrCat("aten.", short_name, ": got mixed torch.Tensor and DTensor, need to convert all ",
                 "torch.Tensor to DTensor before calling distributed operators! (argument '",
                 schema.arguments()[a].name(), "' is a plain tensor of shape ",
                 IntListToString(t.sizes().vec()), ")"));
    }
    input_arg.push_back(a);
  };
  for (size_t a = 0; a < n_args; ++a) {
    const c10::IValue& v = (*stack)[base + a];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) continue;
      add_tensor(t, a, false);
    } else if (IsTensorList(v)) {
      for (const at::Tensor& t : v.toTensorList()) add_tensor(t, a, true);
    } else if (v.isList() && schema.arguments()[a].real_type()->kind() == c10::TypeKind::ListType) {
      // Tensor?[] (index): not supported by any strategy yet; refuse clearly if it holds DTensors.
      for (const c10::IValue& e : v.toList()) {
        if (e.isTensor() && FindImpl(e.toTensor())) {
          throw InputError(
              schema.arguments()[a].name(),
              StrCat("aten.", short_name, ": optional-tensor list arguments are not supported"));
        }
      }
    }
  }
  DTSIM_CHECK(ref != nullptr, "DTensor kernel reached without a DTensor argument: ", name);
  for (const Input& in : inputs) {
    if (!in.dt && replicate.empty()) replicate.assign(mesh().ndim(), Placement::Replicate());
    current.push_back(in.dt ? &in.dt->placements() : &replicate);
  }
}

std::vector<Placements> KernelCall::CurrentPlacements() const {
  std::vector<Placements> out;
  out.reserve(current.size());
  for (const Placements* p : current) out.push_back(*p);
  return out;
}

void KernelCall::fill_call() {
  if (call_filled) return;
  call_filled = true;
  call.name = name;
  call.meta.assign(n_args, std::nullopt);
  call.list_meta.assign(n_args, {});
  for (size_t a = 0; a < n_args; ++a) {
    const c10::IValue& v = (*stack)[base + a];
    if (v.isTensor() && v.toTensor().defined()) {
      call.meta[a] = MetaOf(v.toTensor());
    } else if (IsTensorList(v)) {
      for (const at::Tensor& t : v.toTensorList()) call.list_meta[a].push_back(MetaOf(t));
    }
  }
  call.mesh_shape = mesh().shape();
  for (const Input& in : inputs) call.inputs.push_back(MetaOf(in.wrapper()));
  call.args.assign(stack->begin() + base, stack->end());
  call.current = CurrentPlacements();
}

// Output metadata where LibTorch's C++ meta kernels disagree with its CPU kernels and upstream's
// fake tensors.
void KernelCall::FixMetaOutputs() {
  // LibTorch's C++ meta kernel of native_layer_norm gives mean/rstd the input's sizes for an
  // empty input; the CPU kernel and upstream's fake tensors give the normalised dims size 1.
  if (name == "aten::native_layer_norm" && call.outputs.size() == 3 && call.outputs[1] &&
      call.outputs[2]) {
    const std::vector<int64_t>& in_shape = call.inputs[0].shape;
    const int64_t axis =
        static_cast<int64_t>(in_shape.size()) - static_cast<int64_t>(call.IntList(1).size());
    std::vector<int64_t> stats(in_shape.begin(), in_shape.begin() + std::max<int64_t>(axis, 0));
    stats.resize(in_shape.size(), 1);
    for (size_t o : {size_t{1}, size_t{2}}) {
      TensorMeta& m = *call.outputs[o];
      m.shape = stats;
      m.stride.assign(stats.size(), 1);
      for (int64_t d = static_cast<int64_t>(stats.size()) - 2; d >= 0; --d) {
        m.stride[d] = m.stride[d + 1] * std::max<int64_t>(stats[d + 1], 1);
      }
    }
  }
}

void KernelCall::Propagate() {
  const DeviceMesh& mesh = this->mesh();
  thread_local std::string key;  // reused: keeps its capacity from call to call
  key.assign(name);
  key += '\0';                    // no operator name holds one
  AppendInts(key, mesh.shape());  // the decision depends on the mesh's sizes (costs, shardability)
  for (size_t a = 0; a < n_args; ++a) {
    const c10::IValue& v = (*stack)[base + a];
    if (v.isTensor() || IsTensorList(v)) {
      auto add = [&](const at::Tensor& t) {
        if (!t.defined()) {
          key += 'u';
          return;
        }
        key += 't';
        AppendInt(key, static_cast<int64_t>(t.scalar_type()));
        AppendInts(key, t.sizes());
        AppendInts(key, t.strides());
        if (DTensorImpl* impl = FindImpl(t)) {
          AppendPlacements(key, impl->dtensor().placements());
        } else {
          key += 'p';  // a plain tensor
        }
      };
      if (v.isTensor()) {
        add(v.toTensor());
      } else {
        const c10::List<at::Tensor> list = v.toTensorList();
        key += 'L';
        AppendInt(key, static_cast<int64_t>(list.size()));
        for (const at::Tensor& t : list) add(t);
      }
    } else if (v.isInt()) {
      key += 'i';
      AppendInt(key, v.toInt());
    } else if (v.isDouble()) {  // a Scalar such as add's alpha: its bits
      const double d = v.toDouble();
      int64_t bits = 0;
      std::memcpy(&bits, &d, sizeof(bits));
      key += 'd';
      AppendInt(key, bits);
    } else if (v.isBool()) {
      key += v.toBool() ? 'T' : 'F';
    } else if (v.isNone()) {
      key += 'N';
    } else if (IsIntList(v)) {
      key += 'l';
      AppendInts(key, v.toListRef());
    } else {
      std::ostringstream s;
      s << v.tagKind() << ':' << v;
      const std::string text = s.str();
      key += 'o';
      AppendInt(key, static_cast<int64_t>(text.size()));
      key += text;
    }
  }
  Cache& cache = GetCache();
  FrontCache& front = GetFrontCache();
  const uint64_t generation = cache.generation.load(std::memory_order_acquire);
  if (front.generation != generation && depth == 0) {
    front.entries.clear();
    front.generation = generation;
  }
  const bool use_front = front.generation == generation;
  auto it = use_front ? front.entries.find(key) : front.entries.end();
  if (it != front.entries.end()) {
    cached = it->second.get();
    cache_hit = true;
  } else {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto shared = cache.entries.find(key); shared != cache.entries.end()) {
      cached_owner = shared->second;
      cached = cached_owner.get();
      cache_hit = true;
      if (use_front) front.entries.emplace(key, cached_owner);
    }
  }
  if (cached == nullptr) {
    if (FindStrategy(name) == nullptr) ThrowNoStrategy(name, CurrentPlacements());
    fill_call();
    // Output metadata: the op on meta tensors of the global shapes.
    torch::jit::Stack meta_stack(stack->begin() + base, stack->end());
    auto to_meta = [](const at::Tensor& t) {
      return at::empty_strided(t.sizes(), t.strides(),
                               at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
    };
    for (size_t a = 0; a < n_args; ++a) {
      c10::IValue& v = meta_stack[a];
      if (v.isTensor() && v.toTensor().defined()) {
        v = to_meta(v.toTensor());
      } else if (IsTensorList(v)) {
        std::vector<at::Tensor> list;
        for (const at::Tensor& t : v.toTensorList()) list.push_back(to_meta(t));
        v = c10::IValue(list);
      }
    }
    torch::jit::Stack saved = meta_stack;
    try {
      op.callBoxed(&meta_stack);
    } catch (const c10::Error& e) {
      // No meta kernel (flip, roll, ...): the op on uninitialised CPU tensors of the global shapes
      // instead, when they are small; upstream's fake tensors use Python meta functions that
      // LibTorch does not have.
      int64_t numel = 0;
      for (const TensorMeta& m : call.inputs) {
        int64_t n = 1;
        for (int64_t d : m.shape) n *= d;
        numel += n;
      }
      const bool meta_data = DeviceOf(ref->to_local()).is_meta();
      if (meta_data || numel > (int64_t{1} << 24)) {
        throw InputError("op", StrCat("aten.", short_name, ": ", e.what_without_backtrace()));
      }
      meta_stack = saved;
      for (c10::IValue& v : meta_stack) {
        if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_meta()) {
          const at::Tensor& t = v.toTensor();
          v = at::zeros_like(t, at::TensorOptions().device(at::kCPU));
        } else if (IsTensorList(v)) {
          std::vector<at::Tensor> list;
          for (const at::Tensor& t : v.toTensorList())
            list.push_back(at::zeros_like(t, at::TensorOptions().device(at::kCPU)));
          v = c10::IValue(list);
        }
      }
      try {
        op.callBoxed(&meta_stack);
      } catch (const c10::Error& e2) {
        throw InputError("op", StrCat("aten.", short_name, ": ", e2.what_without_backtrace()));
      }
    }
    for (const c10::IValue& r : meta_stack) {
      if (r.isTensor()) {
        const at::Tensor& t = r.toTensor();
        call.outputs.push_back(t.defined() ? std::optional<TensorMeta>(MetaOf(t)) : std::nullopt);
      } else if (IsTensorList(r)) {
        for (const at::Tensor& t : r.toTensorList()) call.outputs.push_back(MetaOf(t));
      }
    }
    FixMetaOutputs();
    auto entry = std::make_shared<CachedCall>();
    entry->decision = PropagateSharding(call, mesh, CurrentPlacements());
    entry->outputs = call.outputs;
    // One output placement for several tensor outputs: every output gets it (upstream does the
    // same).
    if (entry->decision.output_placements.size() == 1 && entry->outputs.size() > 1) {
      entry->decision.output_placements.resize(entry->outputs.size(),
                                               entry->decision.output_placements[0]);
    }
    for (size_t o = 0; o < entry->outputs.size(); ++o) {
      const bool has = entry->outputs[o] && o < entry->decision.output_placements.size() &&
                       entry->decision.output_placements[o];
      entry->out_specs.push_back(
          has ? std::make_shared<const DTensorSpec>(DTensorSpec::Create(
                    mesh, *entry->decision.output_placements[o], entry->outputs[o]->shape,
                    FromScalarType(entry->outputs[o]->dtype)))
              : nullptr);
      entry->out_strides.push_back(
          has ? std::make_shared<const std::vector<int64_t>>(entry->outputs[o]->stride) : nullptr);
    }
    cached_owner = entry;
    cached = entry.get();
    {
      std::lock_guard<std::mutex> lock(cache.mu);
      cache.entries.emplace(key, cached_owner);
    }
    // Only while no clear came in between: a front entry never outlives its generation.
    if (use_front && front.generation == cache.generation.load(std::memory_order_acquire))
      front.entries.emplace(key, cached_owner);
  }
}

void KernelCall::Redistribute() {
  const ShardingDecision& decision = cached->decision;
  locals.resize(inputs.size());
  redistributed.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    const Placements& target = decision.input_placements[i];
    if (!in.dt) {
      if (target != *current[i]) {
        throw InputError(
            "op", StrCat("aten.", short_name, ": a scalar tensor argument would need placements ",
                         ToString(target), "; make it a DTensor first"));
      }
      locals[i] = &in.wrapper();
      continue;
    }
    if (target == *current[i]) {
      locals[i] = &in.dt->to_local();
      continue;
    }
    if (inplace() && i == 0) {
      throw InputError(
          "op", StrCat("aten.", short_name, ": in-place operations that require placement changes ",
                       "are not supported (self is ", ToString(*current[i]), ", the op needs ",
                       ToString(target), "); use the out-of-place op"));
    }
    // Everything but R -> P through the planner and the collectives, then R -> P locally
    // (upstream's internal Replicate -> Partial: sum divides by the group size), which touches no
    // other mesh dim.
    DTensor dt = *in.dt;
    const Placements planned = WithoutNewPartials(*current[i], target);
    OpRedistribution r;
    r.input = i;
    r.from = *current[i];
    r.to = target;
    if (dt.placements() != planned) {
      r.plan = PlanFor(dt.spec(), planned);
      dt = ExecutePlanObserved(name, i, dt, r.plan);
    }
    dt = PartitionReplicas(dt, target);
    redistributed.push_back(dt.to_local());
    locals[i] = &redistributed.back();
    if (observe) event->redistributions.push_back(std::move(r));
  }
}

// Shape arguments are global: each rank gets its local output shape (upstream's
// op_to_shape_and_stride_idx).
void KernelCall::LocalShapeArguments(torch::jit::Stack& local_stack) {
  const ShardingDecision& decision = cached->decision;
  const std::vector<std::optional<TensorMeta>>& out_meta = cached->outputs;
  if (!decision.output_placements.empty() && decision.output_placements[0] && out_meta[0]) {
    const Placements& p = *decision.output_placements[0];
    if (std::any_of(p.begin(), p.end(), [](const Placement& x) { return x.is_shard_like(); })) {
      const DTensor& any = *ref;
      local_stack[1] = c10::IValue(LocalSizes(any, out_meta[0]->shape, p));
      if (name == "aten::new_empty_strided") {
        throw InputError("op", "aten.new_empty_strided on a sharded output is not supported yet");
      }
    }
  }
}

// Squeeze only the dims that are 1 globally: a sharded dim may be 1 locally (upstream's squeeze
// rewrite).
at::Tensor KernelCall::SqueezeGlobalOnes() {
  const auto& shape = inputs[0].dt->shape();
  std::vector<int64_t> dims;
  std::vector<int64_t> asked;
  if (n_args == 1) {
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) asked.push_back(d);
  } else {
    fill_call();
    asked = call.IntList(1);
  }
  for (int64_t d : asked) {
    const int64_t nd = NormalizeDim(d, static_cast<int64_t>(shape.size()));
    if (nd < static_cast<int64_t>(shape.size()) && shape[nd] == 1) dims.push_back(nd);
  }
  at::Tensor local = *locals[0];  // the same impl: squeeze_ changes the input's local data
  return inplace() ? at::_ops::squeeze__dims::call(local, dims)
                   : at::_ops::squeeze_dims::call(local, dims);
}

void KernelCall::RunLocal(torch::jit::Stack& local_stack) {
  const ShardingDecision& decision = cached->decision;
  // The arguments with each tensor input's local data in its place (one reference taken each).
  // The others move over where nothing reads them from the call's stack after this: not when an
  // observer will (Finish's fill_call), nor for the ops run their own way below (squeeze reads its
  // dims there).
  const bool move_args = !observe && !names.squeeze && !names.embedding && !names.shape_args;
  local_stack.reserve(n_args);
  {
    size_t i = 0;
    for (size_t a = 0; a < n_args; ++a) {
      c10::IValue& v = (*stack)[base + a];
      if (v.isTensor() && v.toTensor().defined()) {
        local_stack.emplace_back(*locals[i++]);
      } else if (IsTensorList(v)) {
        std::vector<at::Tensor> list;
        for (size_t k = 0; k < v.toTensorList().size(); ++k) list.push_back(*locals[i++]);
        local_stack.emplace_back(std::move(list));
      } else if (move_args) {
        local_stack.push_back(std::move(v));
      } else {
        local_stack.push_back(v);
      }
    }
  }
  if (names.shape_args) LocalShapeArguments(local_stack);
  std::optional<at::Tensor> masked;
  if (names.embedding && !decision.output_placements.empty() && decision.output_placements[0]) {
    masked =
        MaskedEmbedding(mesh(), *collectives(), inputs[0].dt->shape(), decision.input_placements[0],
                        *decision.output_placements[0], *locals[0], *locals[1]);
  }
  if (masked) {
    local_stack.clear();
    local_stack.emplace_back(*masked);
  } else if (names.squeeze && inputs[0].dt) {
    at::Tensor out = SqueezeGlobalOnes();
    local_stack.clear();
    local_stack.emplace_back(std::move(out));
  } else {
    op.callBoxed(&local_stack);
    if (observe && collectives()->simulated()) event->local_execution = LastRankExecution();
  }
}

KernelCall::Results KernelCall::Wrap(const torch::jit::Stack& local_stack) {
  const ShardingDecision& decision = cached->decision;
  const std::vector<std::optional<TensorMeta>>& out_meta = cached->outputs;
  const DeviceMesh& mesh = this->mesh();
  Results results;
  size_t k = 0;
  auto wrap = [&](const at::Tensor& local, size_t out_index) -> at::Tensor {
    if (!local.defined()) return local;
    DTSIM_CHECK(out_index < out_meta.size() && out_meta[out_index] &&
                    out_index < decision.output_placements.size() &&
                    decision.output_placements[out_index],
                name, ": output ", out_index, " has no spec");
    std::shared_ptr<const DTensorSpec> spec = cached->out_specs.at(out_index);
    // The decision is keyed by the mesh's shape: a cached spec made on another mesh of that shape
    // (a submesh of another root, other ranks) is remade on this call's.
    if (!spec->mesh().SameMesh(mesh)) {
      spec = std::make_shared<const DTensorSpec>(
          DTensorSpec::Create(mesh, spec->placements(), spec->shape(), spec->dtype()));
    }
    if (observe) event->outputs.push_back(*spec);
    return AsTensor(
        MakeDTensor(std::move(spec), local, collectives(), cached->out_strides[out_index]));
  };
  // In-place and out= ops return the mutated argument itself.
  std::vector<size_t> mutated;
  for (size_t a = 0; a < n_args; ++a) {
    const auto* alias = schema.arguments()[a].alias_info();
    if (alias != nullptr && alias->isWrite() && (*stack)[base + a].isTensor()) mutated.push_back(a);
  }
  for (size_t r = 0; r < local_stack.size(); ++r) {
    const c10::IValue& v = local_stack[r];
    if (v.isTensor()) {
      const auto* alias = r < schema.returns().size() ? schema.returns()[r].alias_info() : nullptr;
      if (alias != nullptr && alias->isWrite() && !mutated.empty()) {
        // The returned tensor is the mutated argument: hand back its wrapper.
        size_t which = std::min(r, mutated.size() - 1);
        results.push_back((*stack)[base + mutated[which]]);
        if (observe && FindImpl((*stack)[base + mutated[which]].toTensor())) {
          event->outputs.push_back(GetDTensor((*stack)[base + mutated[which]].toTensor()).spec());
        }
        ++k;
      } else {
        results.push_back(wrap(v.toTensor(), k++));
      }
    } else if (IsTensorList(v)) {
      std::vector<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(wrap(t, k++));
      results.emplace_back(list);
    } else {
      results.push_back(v);
    }
  }
  return results;
}

void KernelCall::Finish(Results results) {
  if (observe) {
    fill_call();
    event->op = name;
    event->inputs = call.inputs;
    event->input_placements = CurrentPlacements();
    event->decision = cached->decision;
    event->cache_hit = cache_hit;
    g_observers.Notify([this](OpObserver& o) { o.OnOp(*event); });
  }
  torch::jit::drop(*stack, n_args);
  for (auto& r : results) stack->push_back(std::move(r));
}

// Upstream's argminmax_handler, a custom handler (custom_handlers.h): the strategy gives the
// output placements, ArgMinMax the values. Calls with other than one DTensor input take the
// generic stages.
void ArgMinMaxHandler(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  KernelCall k(op, NamesOf(op), stack);
  k.Unwrap();
  k.Propagate();
  if (k.inputs.size() != 1 || !k.inputs[0].dt) return k.RunGeneric();
  const ShardingDecision& decision = k.cached->decision;
  const c10::IValue& dim = (*stack)[k.base + 1];
  at::Tensor local =
      ArgMinMax(*k.inputs[0].dt, k.name == "aten::argmax",
                dim.isNone() ? std::nullopt : std::optional<int64_t>(dim.toInt()),
                (*stack)[k.base + 2].toBool(), k.observe ? &k.event->redistributions : nullptr);
  const TensorMeta& m = *k.cached->outputs.at(0);
  DTensorSpec spec = DTensorSpec::Create(k.ref->mesh(), *decision.output_placements.at(0), m.shape,
                                         FromScalarType(m.dtype));
  if (k.observe) k.event->outputs.push_back(spec);
  k.Finish({c10::IValue(AsTensor(MakeDTensor(std::move(spec), local, k.collectives(), m.stride)))});
}

// The kernel every ATen op with a DTensor argument reaches: the op's custom handler where one is
// enabled (upstream's dispatcher consults _custom_op_handlers first), else the stages.
void DTensorKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const OpNames& names = NamesOf(op);
  if (names.loss_parallel_handler != nullptr && LossParallelEnabled()) {
    return names.loss_parallel_handler(op, stack);
  }
  if (names.handler != nullptr) return names.handler(op, stack);
  KernelCall k(op, names, stack);
  k.Unwrap();
  k.Propagate();
  k.RunGeneric();
}

struct Registration {
  std::vector<c10::RegistrationHandleRAII> handles;
};

// reshape decomposes to _reshape_alias(size, stride) on a tensor that is no Python subclass;
// upstream's DTensor (a subclass) gets view(size) instead. Both are the same view of a
// contiguous-enough tensor: run view.
at::Tensor ReshapeAliasAsView(c10::DispatchKeySet, const at::Tensor& self, c10::SymIntArrayRef size,
                              c10::SymIntArrayRef /*stride*/) {
  return at::_ops::view::call(self, size);
}

// scaled_dot_product_attention on DTensors takes the math path (matmul, softmax, ...: every piece
// has a strategy and autograd runs through it); the fused CPU kernel it would pick has no strategy
// (upstream decomposes it too).
at::Tensor SdpaMath(c10::DispatchKeySet, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, const std::optional<at::Tensor>& attn_mask,
                    double dropout_p, bool is_causal, std::optional<double> scale,
                    bool enable_gqa) {
  return std::get<0>(at::_scaled_dot_product_attention_math(
      q, k, v, attn_mask, dropout_p, is_causal, std::nullopt, scale, enable_gqa));
}

}  // namespace

const std::vector<CustomHandlerEntry>& CustomHandlers() {
  static const std::vector<CustomHandlerEntry>* table = [] {
    auto* t = new std::vector<CustomHandlerEntry>{
        {HandlerSet::kAlways, "aten::argmax", &ArgMinMaxHandler},
        {HandlerSet::kAlways, "aten::argmin", &ArgMinMaxHandler},
    };
    for (const CustomHandlerEntry& e : LossParallelHandlers()) t->push_back(e);
    return t;
  }();
  return *table;
}

CustomHandler FindCustomHandler(HandlerSet set, const std::string& op) {
  for (const CustomHandlerEntry& e : CustomHandlers()) {
    if (e.set == set && op == e.op) return e.handler;
  }
  return nullptr;
}

void EnsureDTensorDispatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    static Registration* reg = new Registration();
    auto& d = c10::Dispatcher::singleton();
    reg->handles.push_back(d.registerFallback(
        c10::DispatchKey::PrivateUse2, c10::KernelFunction::makeFromBoxedFunction<&DTensorKernel>(),
        "dtsim DTensor fallback"));
    // Every op that does not decompose (no CompositeImplicitAutograd kernel) gets the kernel
    // directly, so that CompositeExplicitAutograd kernels do not run on the wrapper; composite ops
    // decompose first, as upstream's. Redirects for DTensors only: autograd-level kernels, so the
    // replacement decomposes and records autograd.
    for (c10::DispatchKey key : {c10::DispatchKey::AutogradPrivateUse2}) {
      reg->handles.push_back(
          d.registerImpl(c10::OperatorName("aten::_reshape_alias", ""), key,
                         c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(ReshapeAliasAsView)),
                         std::nullopt, nullptr, "dtsim DTensor: _reshape_alias as view"));
      reg->handles.push_back(d.registerImpl(
          c10::OperatorName("aten::scaled_dot_product_attention", ""), key,
          c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(SdpaMath)), std::nullopt, nullptr,
          "dtsim DTensor: scaled_dot_product_attention by its math path"));
    }
    for (const c10::OperatorName& name : d.getAllOpNames()) {
      auto handle = d.findOp(name);
      if (!handle || !handle->hasSchema()) continue;
      // Upstream's DTensor is a CPU wrapper tensor: an op decomposes at AutogradCPU by its
      // CompositeImplicitAutograd kernel unless it has a CPU or CompositeExplicitAutograd kernel
      // (then its autograd kernel runs and the op reaches __torch_dispatch__ whole: silu_backward).
      // The same rule here: ops that decompose for a CPU tensor get no kernel at PrivateUse2, so
      // they decompose for a DTensor too (matmul, linear, reshape, softmax.int, ...).
      const bool cpu_kernel =
          handle->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
          handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
      if (handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
          !cpu_kernel)
        continue;
      if (handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse2)) continue;
      if (name.name.rfind("aten::", 0) != 0 && name.name.rfind("prims::", 0) != 0) continue;
      reg->handles.push_back(
          d.registerImpl(name, c10::DispatchKey::PrivateUse2,
                         c10::KernelFunction::makeFromBoxedFunction<&DTensorKernel>(), std::nullopt,
                         nullptr, "dtsim DTensor kernel"));
    }
  });
}

DTensor ExecutePlanObserved(const std::string& op, size_t input, const DTensor& source,
                            const Plan& plan) {
  // The executor's functions per rank (pads, unpads, local splits: ATen copies of the shards)
  // may run several ranks at once (local_tensor.h); the observer's callbacks may not.
  // The calling thread's list: the step callback may run on another thread.
  OpObservers& observers = g_observers;
  if (!observers.observed()) {
    ParallelShardFnsScope parallel;
    return ExecutePlan(source, plan);
  }
  observers.Notify([&](OpObserver& o) { o.OnRedistributeBegin(op, input, source, plan); });
  ParallelShardFnsScope parallel;
  DTensor out = ExecutePlan(
      source, plan,
      [&observers](const PlanStep& step, const DTensorSpec& spec, const at::Tensor& local) {
        ParallelShardFnsScope serial(false);
        observers.Notify([&](OpObserver& o) { o.OnRedistributeStep(step, spec, local); });
      });
  observers.Notify([&out](OpObserver& o) { o.OnRedistributeEnd(out); });
  return out;
}

OpObservers& ThreadOpObservers() { return g_observers; }

at::Tensor AsTensor(DTensor dt) {
  EnsureDTensorDispatch();
  return at::Tensor(c10::make_intrusive<DTensorImpl>(std::move(dt)));
}

bool IsDTensor(const at::Tensor& t) { return FindImpl(t) != nullptr; }

std::optional<DTensor> FindDTensor(const at::Tensor& t) {
  if (DTensorImpl* impl = FindImpl(t)) return impl->dtensor();
  return std::nullopt;
}

DTensor GetDTensor(const at::Tensor& t, const std::string& field) {
  if (DTensorImpl* impl = FindImpl(t)) return impl->dtensor();
  throw InputError(field, t.defined() ? "expected a DTensor, got a plain tensor"
                                      : "expected a DTensor, got none");
}

void ClearShardingCache() {
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.entries.clear();
  cache.generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace ops
}  // namespace dtsim
