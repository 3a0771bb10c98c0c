// LocalTensorImpl: the private TensorImpl subclass behind a LocalTensor, and LocalIntNode, the
// per-rank integer that answers sym_size() of an uneven dim. Only src/ includes this header.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/SymNodeImpl.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dtsim {

class SimWorld;

namespace internal {

// "[0, 1, 2]".
std::string JoinInts(const std::vector<int64_t>& v);

// One integer (or bool) per rank of a rank set: the value of a size, stride or numel that differs
// between ranks. Arithmetic runs per rank; comparisons give a per-rank bool; converting to a plain
// int/bool (guard_int, guard_bool, int_, bool_) succeeds only when every rank agrees and otherwise
// throws an InputError listing the per-rank values. Example: shards with rows 3,3,3,0 → sym_size(0)
// is LocalIntNode{3,3,3,0}; sym_size(0)*2+1 is {7,7,7,1}.
class LocalIntNode : public c10::SymNodeImpl {
 public:
  LocalIntNode(std::vector<int64_t> ranks, std::vector<int64_t> values, bool is_bool = false)
      : ranks_(std::move(ranks)), values_(std::move(values)), is_bool_(is_bool) {}

  const std::vector<int64_t>& ranks() const { return ranks_; }
  const std::vector<int64_t>& values() const { return values_; }
  // The value of `rank`; InputError if the node does not hold it.
  int64_t ValueOf(int64_t rank) const;
  // "{0: 3, 1: 3, 2: 3, 3: 0}".
  std::string PerRankString() const;

  bool is_int() override { return !is_bool_; }
  bool is_bool() override { return is_bool_; }
  bool is_float() override { return false; }
  bool is_symbolic() override { return true; }
  bool has_hint() override { return true; }

  c10::SymNode add(const c10::SymNode& other) override;
  c10::SymNode sub(const c10::SymNode& other) override;
  c10::SymNode mul(const c10::SymNode& other) override;
  c10::SymNode floordiv(const c10::SymNode& other) override;
  c10::SymNode int_floordiv(const c10::SymNode& other) override;
  c10::SymNode mod(const c10::SymNode& other) override;
  c10::SymNode eq(const c10::SymNode& other) override;
  c10::SymNode ne(const c10::SymNode& other) override;
  c10::SymNode gt(const c10::SymNode& other) override;
  c10::SymNode lt(const c10::SymNode& other) override;
  c10::SymNode le(const c10::SymNode& other) override;
  c10::SymNode ge(const c10::SymNode& other) override;
  c10::SymNode sym_min(const c10::SymNode& other) override;
  c10::SymNode sym_max(const c10::SymNode& other) override;
  c10::SymNode sym_and(const c10::SymNode& other) override;
  c10::SymNode sym_or(const c10::SymNode& other) override;
  c10::SymNode sym_not() override;
  c10::SymNode neg() override;
  c10::SymNode clone() override;
  c10::SymNode wrap_int(int64_t num) override;
  c10::SymNode wrap_bool(bool num) override;

  int64_t guard_int(const char* file, int64_t line) override;
  bool guard_bool(const char* file, int64_t line) override;
  bool guard_size_oblivious(const char* file, int64_t line) override;
  bool guard_or_false(const char* file, int64_t line) override;
  bool guard_or_true(const char* file, int64_t line) override;
  bool statically_known_true(const char* file, int64_t line) override;
  bool expect_true(const char* file, int64_t line) override;
  int64_t int_() override;
  bool bool_() override;
  std::optional<int64_t> maybe_as_int() override;
  std::optional<int64_t> constant_int() override { return std::nullopt; }
  std::optional<bool> constant_bool() override { return std::nullopt; }
  bool is_constant() override { return false; }
  std::string str() override;
  std::string _graph_repr() override { return str(); }

 private:
  template <typename F>
  c10::SymNode Binary(const c10::SymNode& other, bool result_is_bool, F f);
  // The common value, or nullopt when ranks differ.
  std::optional<int64_t> Common() const;
  int64_t Agreed(const char* what) const;

  std::vector<int64_t> ranks_;
  std::vector<int64_t> values_;
  bool is_bool_;
};

// The TensorImpl of a LocalTensor: one plain tensor per rank, no storage of its own.
// Even shards (all the same sizes and strides) use ordinary int sizes; uneven shards use the
// CustomSizes policy and answer sym_sizes()/sym_strides()/sym_numel() with LocalIntNode for the
// dims that differ, while sizes()/strides()/ numel() throw an InputError naming the per-rank sizes.
// A LocalTensor's ranks, immutable, so that an op's results share their inputs' list.
using RankList = std::shared_ptr<const std::vector<int64_t>>;

class LocalTensorImpl final : public c10::TensorImpl {
 public:
  // `ranks` ascending and distinct, one shard each; shards share dtype and device (checked by the
  // caller). `uneven`, when known (the caller compared the shards already), saves a pass over them.
  // `world` (not null) is the SimWorld the tensor belongs to.
  LocalTensorImpl(std::vector<int64_t> ranks, std::vector<at::Tensor> shards,
                  std::shared_ptr<SimWorld> world, std::optional<bool> uneven = std::nullopt);
  LocalTensorImpl(RankList ranks, std::vector<at::Tensor> shards, std::shared_ptr<SimWorld> world,
                  std::optional<bool> uneven = std::nullopt);
  // Stacked shards: `stacked` has one leading dim of ranks.size(), and rank ranks[i]'s shard is
  // stacked[i] (a view, made when shards() is first read). The batched kernel (rank_batch.h) makes
  // them; the shards are even.
  LocalTensorImpl(std::vector<int64_t> ranks, at::Tensor stacked, std::shared_ptr<SimWorld> world);
  LocalTensorImpl(RankList ranks, at::Tensor stacked, std::shared_ptr<SimWorld> world);

  const std::vector<int64_t>& ranks() const { return *ranks_; }
  // The same list, to share with another LocalTensor of these ranks.
  const RankList& rank_list() const { return ranks_; }
  // One shard per rank. For stacked shards the views are made on the first call (thread-safe).
  const std::vector<at::Tensor>& shards() const {
    if (!shards_ready_.load(std::memory_order_acquire)) MakeShardViews();
    handouts_.fetch_add(1, std::memory_order_acq_rel);  // StackedIsCurrent must look again
    return shards_;
  }
  // The tensor whose slice i is the shard of ranks()[i], for stacked shards; undefined otherwise
  // (and once a write changed a shard's shape). For reading and for functional ops: a caller never
  // changes its metadata (StackedIsCurrent trusts it unchanged between its checks).
  const at::Tensor& stacked() const { return stacked_; }
  // Moves the shards into `stacked` (a copy of them with a leading rank dim): each shard becomes
  // stacked[i], in place in shards(). For shards no other tensor can see (rank_batch.cc checks),
  // so no alias of the old storages is left to tell the difference.
  void AdoptStacked(at::Tensor stacked);
  // Whether stacked() is defined and each shard still is its slice i (same storage, offset, sizes
  // and strides). A write that gave a shard other storage or metadata (set_ on a shard,
  // as_strided_) makes it stale: then the stacked form is dropped and false returned.
  bool StackedIsCurrent();
  bool uneven() const { return uneven_; }
  const std::shared_ptr<SimWorld>& world() const { return world_; }
  // Index of `rank` in ranks(), or -1.
  int64_t IndexOf(int64_t rank) const;
  // "rank 0: [3, 4], rank 1: [3, 4], rank 2: [0, 4]".
  std::string PerRankSizes() const;

  c10::IntArrayRef sizes_custom() const override;
  c10::IntArrayRef strides_custom() const override;
  int64_t numel_custom() const override;
  int64_t dim_custom() const override;
  int64_t storage_offset_custom() const override;
  c10::SymIntArrayRef sym_sizes_custom() const override;
  c10::SymIntArrayRef sym_strides_custom() const override;
  c10::SymInt sym_numel_custom() const override;
  c10::SymInt sym_storage_offset_custom() const override;
  c10::SymBool sym_is_contiguous_custom(at::MemoryFormat memory_format) const override;
  bool is_strides_like_custom(at::MemoryFormat memory_format) const override;
  c10::SymBool sym_is_non_overlapping_and_dense_custom() const override;

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;
  // A new impl over the same shards (stacked ones stay stacked).
  c10::intrusive_ptr<LocalTensorImpl> Copy() const;

 private:
  const char* tensorimpl_type_name() const override { return "dtsim::LocalTensorImpl"; }
  [[noreturn]] void ThrowUneven(const char* what) const;
  // Sets shards, ranks and the size metadata (plain ints when even, CustomSizes with LocalIntNode
  // when uneven).
  void Init(RankList ranks, std::vector<at::Tensor> shards,
            std::optional<bool> uneven = std::nullopt);
  // `fresh`: called from a constructor, where no shard was handed out and no other thread can see
  // the impl yet (no lock needed).
  void InitStacked(RankList ranks, at::Tensor stacked, bool fresh = false);
  void MakeShardViews() const;

  RankList ranks_;                          // never null
  mutable std::vector<at::Tensor> shards_;  // filled from stacked_ on first read
  mutable std::atomic<bool> shards_ready_{false};
  mutable std::mutex shards_mutex_;
  // Calls of shards() so far, and their count when StackedIsCurrent last found every shard its
  // slice with no holder but this impl: while the two agree, no shard can have changed since.
  mutable std::atomic<uint64_t> handouts_{0};
  std::atomic<uint64_t> verified_handouts_{~uint64_t{0}};
  at::Tensor stacked_;
  bool uneven_ = false;
  std::shared_ptr<SimWorld> world_;
  int64_t dim_ = 0;
  std::vector<c10::SymInt> sym_sizes_;    // uneven only
  std::vector<c10::SymInt> sym_strides_;  // uneven only
  c10::SymInt sym_numel_;                 // uneven only
};

// The impl of `t` if it is a LocalTensor, else nullptr.
LocalTensorImpl* FindLocalImpl(const at::Tensor& t);
// Wraps shards without the public checks (ranks sorted and distinct, same dtype); used by the
// kernel and collectives.
at::Tensor WrapShards(std::vector<int64_t> ranks, std::vector<at::Tensor> shards,
                      std::shared_ptr<SimWorld> world, std::optional<bool> uneven = std::nullopt);

// True if `s` is backed by a LocalIntNode.
bool IsLocalSymInt(const c10::SymInt& s);
// The value of `s` for `rank` (a plain SymInt's value for every rank).
int64_t SymIntForRank(const c10::SymInt& s, int64_t rank);
// A plain SymInt when every rank's value agrees, else one backed by a LocalIntNode.
c10::SymInt PerRankSymInt(const std::vector<int64_t>& ranks, std::vector<int64_t> values);
// Whether per-rank work may run on several threads now (local_kernel.cc, "The ranks of one op on
// several threads"): parallel ranks on (SetParallelRanks), at least two ranks, LibTorch's OpenMP
// intra-op threads present (two or more, not inside a parallel region already), and no Python
// dispatch key or mode active (a worker thread would need the GIL the caller holds).
bool RanksMayRunInParallel(size_t n_ranks);
// Whether the machine is busy: other processes use more of the CPUs than LibTorch's configured
// intra-op threads leave over, less half a CPU (/proc/stat's CPU time less this process's own,
// read at most every 100 ms; the first reading decides from procs_running, and after it the
// answer changes when two readings in a row say so). Rank threads would then wait for each
// other's time slices, and an op's ranks run serially instead.
bool MachineBusy();
// Fits LibTorch's intra-op threads to the load: one while MachineBusy (spinning OpenMP threads that
// wait for descheduled ones slow a busy machine down many times over), the configured number
// (OMP_NUM_THREADS, else LibTorch's default) again once it is not. Called before each op's ranks
// run; does nothing on a worker thread or when one thread is configured.
void AdaptThreadsToLoad();
// Runs run_rank(i) for every i in [0, n) on LibTorch's intra-op threads, a contiguous block of i
// per thread (2 threads, 8 ranks: 0-3 and 4-7), each thread other than the caller's under the
// caller's at::ThreadLocalState. run_rank must set its rank's RankScope itself. An exception of any
// i is rethrown after every i ran (the lowest i's). Call only when RanksMayRunInParallel(n).
void RunRanksInParallel(size_t n, const std::function<void(size_t)>& run_rank);
// Registers the per-rank kernel with the dispatcher once; idempotent and thread-safe.
void EnsureLocalTensorDispatch();
// Registers the shape-only kernels metadata runs need and LibTorch lacks in C++ (meta_kernels.cc).
void EnsureMetaKernels();

}  // namespace internal
}  // namespace dtsim
