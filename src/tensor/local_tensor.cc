// The public helpers of dtsim/tensor/local_tensor.h: making LocalTensors, reading their shards,
// MapShards, per-rank integers, copy-on-write replicas, printing. The TensorImpl is in
// local_tensor_impl.cc, the per-rank kernel in local_kernel.cc, per-rank sizes in
// local_int_node.cc, the world's generators and settings in sim_world.cc.
#include "dtsim/tensor/local_tensor.h"

#include <ATen/ATen.h>
#include <c10/core/impl/COW.h>

#include <algorithm>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/tensor/memory_meter.h"
#include "dtsim/tensor/sim_world.h"
#include "tensor/local_tensor_impl.h"

namespace dtsim {

using internal::FindLocalImpl;
using internal::LocalTensorImpl;

namespace {
// The impl of `t`, or an InputError naming what was asked of a plain tensor.
LocalTensorImpl* GetLocalImpl(const at::Tensor& t, const char* what) {
  if (LocalTensorImpl* impl = FindLocalImpl(t)) return impl;
  throw InputError("tensor",
                   StrCat(what, " needs a LocalTensor, got a ",
                          t.defined() ? "plain tensor" : "undefined tensor",
                          " (on a real rank use the Collectives' HeldRanks/Shard/MapShards)"));
}

thread_local bool g_parallel_shard_fns = false;  // the innermost ParallelShardFnsScope's setting

// MapShards' loop over the ranks: on several threads inside a ParallelShardFnsScope where
// possible (not for meta shards: nothing to gain), else one rank after the other.
void RunShardFns(size_t n, bool meta, const std::function<void(size_t)>& run_rank) {
  if (g_parallel_shard_fns && !meta && internal::RanksMayRunInParallel(n)) {
    internal::RunRanksInParallel(n, run_rank);
  } else {
    for (size_t i = 0; i < n; ++i) run_rank(i);
  }
}
}  // namespace

ParallelShardFnsScope::ParallelShardFnsScope(bool enabled) : saved_(g_parallel_shard_fns) {
  g_parallel_shard_fns = enabled;
}
ParallelShardFnsScope::~ParallelShardFnsScope() { g_parallel_shard_fns = saved_; }

namespace {

// A LocalTensor's rank list: non-empty, every rank non-negative, distinct and ascending.
void CheckRanks(const std::vector<int64_t>& ranks) {
  if (ranks.empty()) throw InputError("ranks", "a LocalTensor needs at least one rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0) throw InputError("ranks", StrCat("rank ", ranks[i], " is negative"));
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      throw InputError(
          "ranks", StrCat("ranks must be distinct and ascending, got ", internal::JoinInts(ranks)));
    }
  }
}

}  // namespace

at::Tensor MakeLocalTensor(std::vector<int64_t> ranks, std::vector<at::Tensor> shards,
                           std::shared_ptr<SimWorld> world) {
  if (ranks.empty()) throw InputError("ranks", "a LocalTensor needs at least one rank");
  if (ranks.size() != shards.size()) {
    throw InputError("shards", StrCat("got ", shards.size(), " shards for ", ranks.size(),
                                      " ranks ", internal::JoinInts(ranks)));
  }
  CheckRanks(ranks);
  bool uneven = false;  // computed here, in the one pass over the shards
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!shards[i].defined())
      throw InputError("shards", StrCat("the shard of rank ", ranks[i], " is undefined"));
    if (FindLocalImpl(shards[i])) {
      throw InputError("shards",
                       StrCat("the shard of rank ", ranks[i], " is itself a LocalTensor"));
    }
    if (shards[i].scalar_type() != shards[0].scalar_type()) {
      throw InputError("shards",
                       StrCat("dtypes differ: rank ", ranks[0], " has ", shards[0].scalar_type(),
                              ", rank ", ranks[i], " has ", shards[i].scalar_type()));
    }
    if (shards[i].device() != shards[0].device()) {
      throw InputError("shards",
                       StrCat("devices differ: rank ", ranks[0], " is on ", shards[0].device(),
                              ", rank ", ranks[i], " on ", shards[i].device()));
    }
    if (shards[i].dim() != shards[0].dim()) {
      throw InputError("shards",
                       StrCat("number of dims differs: rank ", ranks[0], " has ", shards[0].dim(),
                              ", rank ", ranks[i], " has ", shards[i].dim()));
    }
    if (shards[i].requires_grad()) {
      throw InputError("shards", StrCat("the shard of rank ", ranks[i],
                                        " requires grad; call requires_grad_() on "
                                        "the LocalTensor instead"));
    }
    uneven = uneven || shards[i].sizes() != shards[0].sizes() ||
             shards[i].strides() != shards[0].strides();
  }
  if (!world) world = SimWorld::Create();
  return internal::WrapShards(std::move(ranks), std::move(shards), std::move(world), uneven);
}

at::Tensor MakeStackedLocalTensor(std::vector<int64_t> ranks, const at::Tensor& stacked,
                                  std::shared_ptr<SimWorld> world) {
  CheckRanks(ranks);
  if (!stacked.defined() || internal::FindLocalImpl(stacked) != nullptr) {
    throw InputError("stacked", "needs a plain tensor");
  }
  if (stacked.dim() < 1 || stacked.size(0) != static_cast<int64_t>(ranks.size())) {
    throw InputError("stacked", StrCat("sizes ", internal::JoinInts(stacked.sizes().vec()),
                                       " have no leading dim of ", ranks.size(), " ranks"));
  }
  if (stacked.requires_grad()) {
    throw InputError("stacked", "requires grad; call requires_grad_() on the LocalTensor instead");
  }
  if (!world) world = SimWorld::Create();
  internal::EnsureLocalTensorDispatch();
  return at::Tensor(
      c10::make_intrusive<internal::LocalTensorImpl>(std::move(ranks), stacked, std::move(world)));
}

at::Tensor MakeLocalTensor(const std::vector<int64_t>& ranks,
                           const std::function<at::Tensor(int64_t)>& fn,
                           std::shared_ptr<SimWorld> world) {
  std::vector<at::Tensor> shards;
  shards.reserve(ranks.size());
  for (int64_t r : ranks) {
    RankScope scope(r);
    shards.push_back(fn(r));
  }
  return MakeLocalTensor(ranks, std::move(shards), std::move(world));
}

std::shared_ptr<SimWorld> WorldOf(const at::Tensor& t) {
  return GetLocalImpl(t, "WorldOf")->world();
}

bool IsLocalTensor(const at::Tensor& t) { return FindLocalImpl(t) != nullptr; }

std::vector<int64_t> LocalRanks(const at::Tensor& t) {
  return GetLocalImpl(t, "LocalRanks")->ranks();
}

at::Tensor LocalShard(const at::Tensor& t, int64_t rank) {
  LocalTensorImpl* impl = GetLocalImpl(t, "LocalShard");
  int64_t i = impl->IndexOf(rank);
  if (i < 0) {
    throw InputError("rank", StrCat("rank ", rank, " is not held by the LocalTensor (ranks ",
                                    internal::JoinInts(impl->ranks()), ")"));
  }
  return impl->shards()[i];
}

std::vector<at::Tensor> LocalShards(const at::Tensor& t) {
  return GetLocalImpl(t, "LocalShards")->shards();
}

at::Tensor MapShards(const at::Tensor& t,
                     const std::function<at::Tensor(int64_t, const at::Tensor&)>& fn) {
  LocalTensorImpl* impl = GetLocalImpl(t, "MapShards");
  const size_t n = impl->ranks().size();
  std::vector<at::Tensor> out(n);
  RunShardFns(n, impl->shards()[0].is_meta(), [&](size_t i) {
    RankScope scope(impl->ranks()[i]);
    out[i] = fn(impl->ranks()[i], impl->shards()[i]);
  });
  bool same =
      true;  // fn returned every shard itself (a pad or unpad with nothing to do): the input as is
  for (size_t i = 0; i < n && same; ++i) same = out[i].is_same(impl->shards()[i]);
  if (same) return t;
  return MakeLocalTensor(impl->ranks(), std::move(out), impl->world());
}

at::Tensor MapShards(const std::vector<at::Tensor>& tensors,
                     const std::function<at::Tensor(int64_t, const std::vector<at::Tensor>&)>& fn) {
  const std::vector<int64_t>* ranks = nullptr;
  std::shared_ptr<SimWorld> world;  // the first LocalTensor's
  bool meta = false;                // its shards are meta tensors
  for (const at::Tensor& t : tensors) {
    if (LocalTensorImpl* impl = FindLocalImpl(t)) {
      if (!world) {
        world = impl->world();
        meta = impl->shards()[0].is_meta();
      }
      if (ranks && *ranks != impl->ranks()) {
        throw InputError("tensors",
                         StrCat("LocalTensors hold different ranks: ", internal::JoinInts(*ranks),
                                " and ", internal::JoinInts(impl->ranks())));
      }
      ranks = &impl->ranks();
    }
  }
  if (ranks == nullptr)
    throw InputError("tensors", "MapShards needs at least one LocalTensor among its tensors");
  std::vector<at::Tensor> out(ranks->size());
  RunShardFns(ranks->size(), meta, [&](size_t i) {
    std::vector<at::Tensor> args(tensors.size());
    for (size_t k = 0; k < tensors.size(); ++k) {
      LocalTensorImpl* impl = FindLocalImpl(tensors[k]);
      args[k] = impl ? impl->shards()[i] : tensors[k];
    }
    RankScope scope((*ranks)[i]);
    out[i] = fn((*ranks)[i], args);
  });
  return MakeLocalTensor(*ranks, std::move(out), std::move(world));
}

int64_t LocalInt(const c10::SymInt& value, int64_t rank) {
  return internal::SymIntForRank(value, rank);
}

c10::SymInt MakeLocalInt(const std::vector<int64_t>& ranks, std::vector<int64_t> values) {
  if (ranks.size() != values.size()) {
    throw InputError("values",
                     StrCat("got ", values.size(), " values for ", ranks.size(), " ranks"));
  }
  return internal::PerRankSymInt(ranks, std::move(values));
}

at::Tensor ShareReplica(const at::Tensor& shard, const SimWorld* world) {
  if (FindLocalImpl(shard))
    throw InputError("shard", "ShareReplica takes one rank's plain tensor, got a LocalTensor");
  if (shard.is_meta()) return at::empty_strided(shard.sizes(), shard.strides(), shard.options());
  const bool shareable =
      (world == nullptr || world->replica_sharing()) && shard.layout() == at::kStrided &&
      (shard.is_cpu() || shard.is_cuda()) && shard.has_storage() && shard.numel() > 0 &&
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
                                        ShardToString(shards[0]), " vs rank ", impl->ranks()[i],
                                        " ", ShardToString(shards[i])));
    }
  }
  return shards[0].clone();
}

namespace {
void PrintValues(std::ostream& out, const at::Tensor& t, int64_t dim, int64_t offset,
                 const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                 bool integral, const void* data, size_t limit, size_t* printed) {
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
    PrintValues(out, t, dim + 1, offset + i * strides[dim], sizes, strides, integral, data, limit,
                printed);
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

}  // namespace dtsim
