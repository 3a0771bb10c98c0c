// LocalCollectives: the simulated backend (see include/dtsim/backends/local_collectives.h). The
// front (src/tensor/collectives.cc) has validated the call and accounts the bytes; this file only
// computes the results.
//
// Terms: "slot" i is the i-th rank the input LocalTensor holds (call.held[i]); a group's "members"
// are its slots in group order. Slots in no group keep a copy of their input.
//
// Replicas: where every member of a group gets the same result (all_gather, all_reduce, broadcast)
// the result is computed once per group and each member gets a copy-on-write replica of it
// (ShareReplica, local_tensor.h): one buffer for the group until a rank writes to its shard. Each
// member's replica is made in its RankScope, so a MemoryMeter charges every rank its full copy, as
// a real rank would hold; the group's buffer is charged to nobody.
#include "dtsim/backends/local_collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"
#include "dtsim/tensor/sim_world.h"
#include "tensor/local_tensor_impl.h"

namespace dtsim {
namespace {

// Members of each group: slots in group order (from the front's group and position of every slot).
std::vector<std::vector<size_t>> Members(const CallInfo& call) {
  std::vector<std::vector<size_t>> out(call.groups->groups.size());
  for (size_t g = 0; g < out.size(); ++g) out[g].resize(call.groups->groups[g].size());
  for (size_t slot = 0; slot < call.held.size(); ++slot) {
    if (call.group[slot] >= 0) out[call.group[slot]][call.position[slot]] = slot;
  }
  return out;
}

// Gives every member slot a replica of `value` (charged to the member's rank).
void GiveReplicas(const at::Tensor& value, const std::vector<size_t>& members, const CallInfo& call,
                  const SimWorld* world, std::vector<at::Tensor>& out) {
  for (size_t slot : members) {
    RankScope scope(call.held[slot]);
    out[slot] = ShareReplica(value, world);
  }
}

class LocalCollectives : public Collectives {
 public:
  explicit LocalCollectives(int64_t world_size)
      : Collectives("local", world_size, std::nullopt), world_(SimWorld::Create()) {}

  std::shared_ptr<SimWorld> sim_world() const override { return world_; }

 protected:
  at::Tensor DoAllGather(const at::Tensor& input, const CallInfo& call, int64_t dim) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      const at::Tensor& first = in[m[0]];
      const int64_t piece = first.size(dim);
      std::vector<int64_t> shape = first.sizes().vec();
      shape[dim] = piece * static_cast<int64_t>(m.size());
      // One buffer per group, each piece copied straight into its slice; the members share it.
      at::Tensor o = at::empty(shape, first.options().memory_format(at::MemoryFormat::Contiguous));
      for (size_t k = 0; k < m.size(); ++k) o.narrow(dim, k * piece, piece).copy_(in[m[k]]);
      GiveReplicas(o, m, call, impl->world().get(), out);
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoReduceScatter(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                             int64_t dim) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      const int64_t chunk = in[m[0]].size(dim) / static_cast<int64_t>(m.size());
      // The group's inputs reduced whole, once (element by element the same additions in the same
      // order as reducing each chunk apart: the same bits), then each rank keeps its chunk. The
      // whole reduction is scratch, charged to no rank; each rank is charged its chunk.
      std::vector<at::Tensor> xs;
      for (size_t s : m) xs.push_back(in[s]);
      at::Tensor whole;
      {
        RankScope scratch(-1);
        whole = ReduceInOrder(xs, op);
      }
      for (size_t i = 0; i < m.size(); ++i) {
        RankScope scope(call.held[m[i]]);
        out[m[i]] = whole.narrow(dim, static_cast<int64_t>(i) * chunk, chunk)
                        .clone(at::MemoryFormat::Contiguous);
      }
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoAllReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      std::vector<at::Tensor> xs;
      for (size_t s : m) xs.push_back(in[s]);
      GiveReplicas(ReduceInOrder(xs, op), m, call, impl->world().get(), out);
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                      int64_t dst) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      std::vector<at::Tensor> xs;
      for (size_t s : m) xs.push_back(in[s]);
      RankScope scope(call.held[m[dst]]);
      out[m[dst]] = ReduceInOrder(xs, op);
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoAllToAll(const at::Tensor& input, const CallInfo& call, int64_t split_dim,
                        int64_t concat_dim) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      const int64_t chunk = in[m[0]].size(split_dim) / static_cast<int64_t>(m.size());
      for (size_t j = 0; j < m.size(); ++j) {
        std::vector<at::Tensor> pieces;
        for (size_t s : m) pieces.push_back(in[s].narrow(split_dim, j * chunk, chunk));
        RankScope scope(call.held[m[j]]);
        out[m[j]] = at::cat(pieces, concat_dim);
      }
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoAllToAllSingle(const at::Tensor& input, const CallInfo& call,
                              const SplitSizes& splits, const SplitSizes&) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      for (size_t j = 0; j < m.size(); ++j) {
        std::vector<at::Tensor> pieces;
        for (size_t k = 0; k < m.size(); ++k) {
          const std::vector<int64_t>& s = splits.at(call.held[m[k]]);
          const int64_t offset = std::accumulate(s.begin(), s.begin() + j, int64_t{0});
          pieces.push_back(in[m[k]].narrow(0, offset, s[j]));
        }
        RankScope scope(call.held[m[j]]);
        out[m[j]] = at::cat(pieces, 0);
      }
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoBroadcast(const at::Tensor& input, const CallInfo& call, int64_t src) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) GiveReplicas(in[m[src]], m, call, impl->world().get(), out);
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoScatter(const at::Tensor& input, const CallInfo& call, int64_t src,
                       int64_t dim) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      const at::Tensor& x = in[m[src]];
      const int64_t chunk = x.size(dim) / static_cast<int64_t>(m.size());
      for (size_t k = 0; k < m.size(); ++k) {
        RankScope scope(call.held[m[k]]);
        out[m[k]] = x.narrow(dim, k * chunk, chunk).clone(at::MemoryFormat::Contiguous);
      }
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoGather(const at::Tensor& input, const CallInfo& call, int64_t dst,
                      int64_t dim) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    for (const auto& m : Members(call)) {
      std::vector<at::Tensor> xs;
      for (size_t s : m) xs.push_back(in[s]);
      RankScope scope(call.held[m[dst]]);
      out[m[dst]] = at::cat(xs, dim);
    }
    return Wrap(call, *impl, std::move(out));
  }

  at::Tensor DoSendRecv(const at::Tensor& input, const CallInfo& call,
                        const std::vector<std::pair<int64_t, int64_t>>& pairs) override {
    const internal::LocalTensorImpl* impl = internal::FindLocalImpl(input);
    const std::vector<at::Tensor>& in = impl->shards();
    std::vector<at::Tensor> out(in.size());
    auto slot = [&](int64_t rank) {
      return static_cast<size_t>(std::lower_bound(call.held.begin(), call.held.end(), rank) -
                                 call.held.begin());
    };
    for (const auto& [src, dst] : pairs) {
      RankScope scope(dst);
      out[slot(dst)] = ShareReplica(in[slot(src)], impl->world().get());
    }
    return Wrap(call, *impl, std::move(out));
  }

  void DoBarrier(const CallInfo&) override {}

 private:
  std::shared_ptr<SimWorld> world_;  // of the LocalTensors FromRankFn makes
  // Slots in no group keep a copy of their input; wraps the outputs into a LocalTensor.
  // The result belongs to the input's world.
  static at::Tensor Wrap(const CallInfo& call, const internal::LocalTensorImpl& input,
                         std::vector<at::Tensor> out) {
    for (size_t s = 0; s < out.size(); ++s) {
      if (!out[s].defined()) {
        RankScope scope(call.held[s]);
        out[s] = ShareReplica(input.shards()[s], input.world().get());
      }
    }
    return internal::WrapShards(call.held, std::move(out), input.world());
  }
};

}  // namespace

at::Tensor ReduceInOrder(const std::vector<at::Tensor>& xs, ReduceOp op) {
  DTSIM_CHECK(!xs.empty(), "ReduceInOrder of nothing");
  at::Tensor acc = xs[0].clone(at::MemoryFormat::Contiguous);  // the result: the caller's rank's
  RankScope scratch(
      -1);  // what the in-place ops allocate for a moment (a wrapped scalar) belongs to no rank
  for (size_t i = 1; i < xs.size(); ++i) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc.add_(xs[i]);
        break;
      case ReduceOp::kProduct:
        acc.mul_(xs[i]);
        break;
      case ReduceOp::kMin:
        at::minimum_out(acc, acc, xs[i]);
        break;
      case ReduceOp::kMax:
        at::maximum_out(acc, acc, xs[i]);
        break;
      case ReduceOp::kBand:
        acc.bitwise_and_(xs[i]);
        break;
      case ReduceOp::kBor:
        acc.bitwise_or_(xs[i]);
        break;
      case ReduceOp::kBxor:
        acc.bitwise_xor_(xs[i]);
        break;
    }
  }
  if (op == ReduceOp::kAvg) DivideByCount(acc, static_cast<int64_t>(xs.size()));
  return acc;
}

void DivideByCount(at::Tensor& sum, int64_t n) {
  if (sum.is_cpu() || sum.is_meta()) {
    sum.div_(static_cast<double>(n));
  } else {
    sum.div_(at::scalar_tensor(static_cast<double>(n), sum.options().dtype(at::kDouble)));
  }
}

std::unique_ptr<Collectives> MakeLocalCollectives(int64_t world_size) {
  return std::make_unique<LocalCollectives>(world_size);
}

}  // namespace dtsim
