// LocalTensorImpl (see src/tensor/local_tensor_impl.h): the TensorImpl behind a LocalTensor, its
// per-rank size metadata, and the wrapping helpers of the kernel and the collectives.
#include "tensor/local_tensor_impl.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>
#include <typeinfo>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace internal {
namespace {

std::vector<int64_t> ToVector(c10::IntArrayRef a) {
  return std::vector<int64_t>(a.begin(), a.end());
}

}  // namespace

namespace {
constexpr c10::DispatchKeySet kLocalKeys = c10::DispatchKeySet(
    {c10::DispatchKey::PrivateUse1, c10::DispatchKey::ADInplaceOrView,
     c10::DispatchKey::AutogradPrivateUse1, c10::DispatchKey::AutocastPrivateUse1});
}  // namespace

LocalTensorImpl::LocalTensorImpl(std::vector<int64_t> ranks, std::vector<at::Tensor> shards,
                                 std::shared_ptr<SimWorld> world, std::optional<bool> uneven)
    : LocalTensorImpl(std::make_shared<const std::vector<int64_t>>(std::move(ranks)),
                      std::move(shards), std::move(world), uneven) {}

LocalTensorImpl::LocalTensorImpl(RankList ranks, std::vector<at::Tensor> shards,
                                 std::shared_ptr<SimWorld> world, std::optional<bool> uneven)
    : c10::TensorImpl(kLocalKeys, shards.at(0).dtype(), shards.at(0).device()),
      world_(std::move(world)) {
  DTSIM_CHECK(world_ != nullptr, "a LocalTensor needs its SimWorld");
  Init(std::move(ranks), std::move(shards), uneven);
}

LocalTensorImpl::LocalTensorImpl(std::vector<int64_t> ranks, at::Tensor stacked,
                                 std::shared_ptr<SimWorld> world)
    : LocalTensorImpl(std::make_shared<const std::vector<int64_t>>(std::move(ranks)),
                      std::move(stacked), std::move(world)) {}

LocalTensorImpl::LocalTensorImpl(RankList ranks, at::Tensor stacked,
                                 std::shared_ptr<SimWorld> world)
    : c10::TensorImpl(kLocalKeys, stacked.dtype(), stacked.device()), world_(std::move(world)) {
  DTSIM_CHECK(world_ != nullptr, "a LocalTensor needs its SimWorld");
  InitStacked(std::move(ranks), std::move(stacked), /*fresh=*/true);
}

void LocalTensorImpl::InitStacked(RankList ranks, at::Tensor stacked, bool fresh) {
  DTSIM_CHECK(ranks != nullptr, "a LocalTensor needs its ranks");
  DTSIM_CHECK(stacked.dim() >= 1 && stacked.size(0) == static_cast<int64_t>(ranks->size()),
              "stacked shards need a leading dim of one slice per rank");
  ranks_ = std::move(ranks);
  if (!fresh) {
    std::lock_guard<std::mutex> lock(shards_mutex_);
    shards_.clear();
    handouts_.fetch_add(1, std::memory_order_acq_rel);  // new shards: not verified
    shards_ready_.store(false, std::memory_order_release);
  }
  stacked_ = std::move(stacked);
  dim_ = stacked_.dim() - 1;
  uneven_ = false;
  bool allow = allow_tensor_metadata_change();
  set_allow_tensor_metadata_change(true);
  set_custom_sizes_strides(SizesStridesPolicy::Default);
  set_sizes_and_strides(stacked_.sizes().slice(1), stacked_.strides().slice(1));
  set_allow_tensor_metadata_change(allow);
  sym_sizes_.clear();
  sym_strides_.clear();
}

void LocalTensorImpl::MakeShardViews() const {
  std::lock_guard<std::mutex> lock(shards_mutex_);
  if (shards_ready_.load(std::memory_order_relaxed)) return;
  std::vector<at::Tensor> views;
  views.reserve(ranks_->size());
  for (int64_t i = 0; i < static_cast<int64_t>(ranks_->size()); ++i) views.push_back(stacked_[i]);
  shards_ = std::move(views);
  handouts_.fetch_add(1, std::memory_order_acq_rel);  // new shards: not verified
  shards_ready_.store(true, std::memory_order_release);
}

void LocalTensorImpl::AdoptStacked(at::Tensor stacked) {
  DTSIM_CHECK(!uneven_ && stacked.dim() == dim_ + 1 &&
                  stacked.size(0) == static_cast<int64_t>(ranks_->size()),
              "AdoptStacked needs one slice per rank of the shards' shape");
  const std::vector<at::Tensor>& current = shards();
  std::lock_guard<std::mutex> lock(shards_mutex_);
  for (size_t i = 0; i < current.size(); ++i) shards_[i] = stacked[static_cast<int64_t>(i)];
  stacked_ = std::move(stacked);
  handouts_.fetch_add(1, std::memory_order_acq_rel);  // new shards: not verified
}

bool LocalTensorImpl::StackedIsCurrent() {
  if (!stacked_.defined()) return false;
  if (!shards_ready_.load(std::memory_order_acquire)) return true;  // no shard was handed out
  // Shards unchanged since the last full check: no shard handed out since, and none had another
  // holder then. Nor the stacked tensor: its holders leave its metadata alone (stacked()'s
  // contract), and this impl's own changes to it count as handouts.
  const uint64_t handouts = handouts_.load(std::memory_order_acquire);
  if (verified_handouts_.load(std::memory_order_acquire) == handouts) return true;
  const c10::StorageImpl* storage = stacked_.storage().unsafeGetStorageImpl();
  const c10::IntArrayRef sizes = stacked_.sizes().slice(1), strides = stacked_.strides().slice(1);
  const size_t n = shards_.size();
  bool alone = true;  // no tensor but shards_ refers to a shard's impl
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& s = shards_[i];
    const bool same = s.has_storage() && s.storage().unsafeGetStorageImpl() == storage &&
                      s.storage_offset() == stacked_.storage_offset() +
                                                static_cast<int64_t>(i) * stacked_.stride(0) &&
                      s.sizes() == sizes && s.strides() == strides;
    if (!same) {
      stacked_ = at::Tensor();
      return false;
    }
    alone = alone && s.use_count() == 1 && s.weak_use_count() == 1;
  }
  if (alone) verified_handouts_.store(handouts, std::memory_order_release);
  return true;
}

void LocalTensorImpl::Init(RankList ranks, std::vector<at::Tensor> shards,
                           std::optional<bool> uneven) {
  DTSIM_CHECK(ranks != nullptr, "a LocalTensor needs its ranks");
  ranks_ = std::move(ranks);
  {
    std::lock_guard<std::mutex> lock(shards_mutex_);
    shards_ = std::move(shards);
    handouts_.fetch_add(1, std::memory_order_acq_rel);  // new shards: not verified
    shards_ready_.store(true, std::memory_order_release);
  }
  stacked_ = at::Tensor();
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
    sym_sizes_.push_back(PerRankSymInt(*ranks_, per_rank));
    for (size_t i = 0; i < shards_.size(); ++i) per_rank[i] = shards_[i].stride(d);
    sym_strides_.push_back(PerRankSymInt(*ranks_, per_rank));
  }
  for (size_t i = 0; i < shards_.size(); ++i) per_rank[i] = shards_[i].numel();
  sym_numel_ = PerRankSymInt(*ranks_, per_rank);
  set_custom_sizes_strides(SizesStridesPolicy::CustomSizes);
}

int64_t LocalTensorImpl::IndexOf(int64_t rank) const {
  auto it = std::lower_bound(ranks_->begin(), ranks_->end(), rank);
  if (it == ranks_->end() || *it != rank) return -1;
  return it - ranks_->begin();
}

std::string LocalTensorImpl::PerRankSizes() const {
  std::ostringstream out;
  for (size_t i = 0; i < ranks_->size(); ++i) {
    out << (i ? ", " : "") << "rank " << (*ranks_)[i] << ": "
        << JoinInts(ToVector(shards()[i].sizes()));
  }
  return out.str();
}

void LocalTensorImpl::ThrowUneven(const char* what) const {
  throw InputError("sizes",
                   StrCat(what,
                          " is not defined for uneven shards (a LocalTensor whose shards differ in "
                          "shape), sizes per rank: ",
                          PerRankSizes(), "; use sym_sizes()/sym_size(d) or LocalShard(t, rank)"));
}

c10::IntArrayRef LocalTensorImpl::sizes_custom() const { ThrowUneven("sizes()"); }
c10::IntArrayRef LocalTensorImpl::strides_custom() const { ThrowUneven("strides()"); }
int64_t LocalTensorImpl::numel_custom() const { ThrowUneven("numel()"); }
int64_t LocalTensorImpl::dim_custom() const { return dim_; }
int64_t LocalTensorImpl::storage_offset_custom() const {
  int64_t off = shards()[0].storage_offset();
  for (const auto& s : shards()) {
    if (s.storage_offset() != off) ThrowUneven("storage_offset()");
  }
  return off;
}
c10::SymIntArrayRef LocalTensorImpl::sym_sizes_custom() const { return sym_sizes_; }
c10::SymIntArrayRef LocalTensorImpl::sym_strides_custom() const { return sym_strides_; }
c10::SymInt LocalTensorImpl::sym_numel_custom() const { return sym_numel_; }
c10::SymInt LocalTensorImpl::sym_storage_offset_custom() const {
  std::vector<int64_t> v;
  for (const auto& s : shards()) v.push_back(s.storage_offset());
  return PerRankSymInt(*ranks_, v);
}
c10::SymBool LocalTensorImpl::sym_is_contiguous_custom(at::MemoryFormat memory_format) const {
  return c10::SymBool(std::all_of(shards().begin(), shards().end(), [&](const at::Tensor& s) {
    return s.is_contiguous(memory_format);
  }));
}
bool LocalTensorImpl::is_strides_like_custom(at::MemoryFormat memory_format) const {
  return std::all_of(shards().begin(), shards().end(), [&](const at::Tensor& s) {
    return s.unsafeGetTensorImpl()->is_strides_like(memory_format);
  });
}
c10::SymBool LocalTensorImpl::sym_is_non_overlapping_and_dense_custom() const {
  return c10::SymBool(std::all_of(shards().begin(), shards().end(), [](const at::Tensor& s) {
    return s.unsafeGetTensorImpl()->is_non_overlapping_and_dense();
  }));
}

c10::intrusive_ptr<c10::TensorImpl> LocalTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = Copy();
  impl->set_version_counter(version_counter);
  impl->set_allow_tensor_metadata_change(allow_tensor_metadata_change);
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> LocalTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = Copy();
  impl->set_version_counter(std::move(version_counter));
  impl->set_allow_tensor_metadata_change(allow_tensor_metadata_change);
  return impl;
}

void LocalTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<LocalTensorImpl*>(impl.get());
  if (other == nullptr) {
    throw InputError("tensor",
                     "set_data: a LocalTensor can only take the data of another LocalTensor");
  }
  world_ = other->world_;
  if (other->StackedIsCurrent()) {
    InitStacked(other->ranks_, other->stacked_);
  } else {
    Init(other->ranks_, other->shards());
  }
}

c10::intrusive_ptr<LocalTensorImpl> LocalTensorImpl::Copy() const {
  if (const_cast<LocalTensorImpl*>(this)->StackedIsCurrent())
    return c10::make_intrusive<LocalTensorImpl>(ranks_, stacked_, world_);
  return c10::make_intrusive<LocalTensorImpl>(ranks_, shards(), world_);
}

LocalTensorImpl* FindLocalImpl(const at::Tensor& t) {
  if (!t.defined()) return nullptr;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->key_set().has(c10::DispatchKey::PrivateUse1)) return nullptr;
  // LocalTensorImpl is final: an exact type check is enough and cheaper than dynamic_cast on the
  // hot path.
  return typeid(*impl) == typeid(LocalTensorImpl) ? static_cast<LocalTensorImpl*>(impl) : nullptr;
}

at::Tensor WrapShards(std::vector<int64_t> ranks, std::vector<at::Tensor> shards,
                      std::shared_ptr<SimWorld> world, std::optional<bool> uneven) {
  EnsureLocalTensorDispatch();
  return at::Tensor(c10::make_intrusive<LocalTensorImpl>(std::move(ranks), std::move(shards),
                                                         std::move(world), uneven));
}

}  // namespace internal
}  // namespace dtsim
