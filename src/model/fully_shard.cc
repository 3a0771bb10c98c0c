#include "dtsim/model/fully_shard.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <map>
#include <optional>
#include <set>

#include "dtsim/core/dtensor.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/planner.h"
#include "dtsim/ops/dtensor_autograd.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {
namespace model {
namespace {

constexpr const char* kUnitKey = "fully_shard";

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One parameter of a unit.
struct ManagedParam {
  Module* owner = nullptr;
  std::string name;
  std::string fqn;
  at::Tensor sharded;  // the leaf: a DTensor sharded S(0) over dp (and its tp placements)
  // The unsharded form the module computes with: a DTensor on the tp mesh, or a plain tensor.
  std::optional<DeviceMesh> tp_mesh;
  Placements tp_placements;
  std::vector<int64_t> tp_shape;  // global shape of the tp DTensor (or of the plain tensor)
  // Per held rank: dim-0 rows of the unsharded (tp-local) tensor, and the other dims.
  std::map<int64_t, std::vector<int64_t>> unsharded_shape;
};

struct Unit;

// What the units of one model share (upstream's comm context).
struct Context {
  std::vector<Unit*> post_forward_order;
  Unit* root = nullptr;
};

struct Unit {
  Module* module = nullptr;
  std::string fqn;
  DeviceMesh dp_mesh = DeviceMesh::Create({1});
  int64_t dp = 1;
  int64_t dp_root_dim = 0;
  GroupSet groups;
  std::shared_ptr<Collectives> coll;
  std::optional<bool> reshard_option;
  std::vector<ManagedParam> params;
  std::shared_ptr<Context> ctx;
  bool unsharded = false;    // the group's unsharded parameters are (logically) present
  bool in_backward = false;  // pre-backward ran since the last forward
  // The unsharded local data of the last forward (per parameter), which autograd saved, and whether
  // their buffers were freed after it: FSDP2 frees the unsharded parameters' storage when it
  // reshards after forward (resize to 0) and all-gathers into the same storage before backward.
  std::vector<at::Tensor> unsharded_locals;
  // Every rank's shard of unsharded_locals, held so that batched ranks never moves them into one
  // stacked buffer (docs/local-tensor.md, "Batched ranks"): the freeing and re-gathering below find
  // each rank's buffer by its storage.
  std::vector<at::Tensor> pinned_shards;
  bool buffers_freed = false;
  std::vector<size_t> post_forward_indices;

  bool is_root() const { return ctx->root == this; }
  bool reshard_after_forward() const { return reshard_option.value_or(!is_root()); }
  std::string label() const { return fqn.empty() ? module->name() : fqn; }
};

// The dp coordinate of a global rank.
int64_t DpCoordinate(const Unit& u, int64_t rank) {
  return u.dp_mesh.root().GetCoordinate(rank).at(u.dp_root_dim);
}

// Rows of chunk `c` of `rows` split over `n` as torch.chunk does.
int64_t ChunkRows(int64_t rows, int64_t n, int64_t c) {
  const int64_t full = CeilDiv(rows, n);
  return std::max<int64_t>(0, std::min(rows, (c + 1) * full) - c * full);
}

int64_t RestNumel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

void Tell(const Unit& u, CollectiveKind kind, int64_t bytes_sent, int64_t bytes_received,
          const std::string& cause) {
  if (!ops::ThreadOpObservers().observed() || u.dp <= 1) return;
  CollectiveEvent call;
  call.kind = kind;
  call.mesh_dim = u.dp_mesh.DimLabel(0);
  call.groups = u.groups.groups;
  call.max_bytes_sent = bytes_sent;
  call.max_bytes_received = bytes_received;
  call.est_us = CostModel().EstimateUs(kind, u.dp, std::max(bytes_sent, bytes_received));
  call.cause = cause;
  ops::ThreadOpObservers().Notify([&call](ops::OpObserver& o) { o.OnCollective(call); });
}

// `t` contiguous, its dim-0 rows padded with zeros up to `rows` (FSDP2 pads every parameter to a
// multiple of the dp size for its all-gather and reduce-scatter).
at::Tensor PadRows(const at::Tensor& t, int64_t rows) {
  const int64_t pad = rows - t.size(0);
  if (pad <= 0) return t.contiguous();
  std::vector<int64_t> pad_shape = t.sizes().vec();
  pad_shape[0] = pad;
  return at::cat({t, at::zeros(pad_shape, t.options())}, 0);
}

// Each rank's flat all-gather input: every parameter's chunk padded to the chunk rows, flattened,
// concatenated.
at::Tensor FlatShards(const Unit& u, const std::vector<at::Tensor>& locals) {
  ParallelShardFnsScope parallel;  // the function below only reads u and copies
  return u.coll->MapShards(locals, [&u](int64_t rank, const std::vector<at::Tensor>& shards) {
    std::vector<at::Tensor> pieces;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::vector<int64_t>& full = u.params[i].unsharded_shape.at(rank);
      pieces.push_back(PadRows(shards[i], CeilDiv(full[0], u.dp)).reshape({-1}));
    }
    return at::cat(pieces, 0);
  });
}

int64_t MaxBytes(const Unit& u, const at::Tensor& local) {
  int64_t most = 0;
  for (int64_t r : u.coll->HeldRanks(local)) {
    const at::Tensor s = u.coll->Shard(local, r);
    most = std::max<int64_t>(most, s.numel() * static_cast<int64_t>(s.element_size()));
  }
  return most;
}

// Length in the flat buffer of parameter `i`'s padded chunk on `rank`, and its offset.
int64_t ChunkLen(const Unit& u, size_t i, int64_t rank) {
  const std::vector<int64_t>& full = u.params[i].unsharded_shape.at(rank);
  return CeilDiv(full[0], u.dp) * RestNumel(full);
}
int64_t ChunkOffset(const Unit& u, size_t i, int64_t rank) {
  int64_t off = 0;
  for (size_t j = 0; j < i; ++j) off += ChunkLen(u, j, rank);
  return off;
}

// The all-gather of the whole group (no autograd): each parameter's unsharded local data.
std::vector<at::Tensor> GatherGroup(const Unit& u, const std::vector<at::Tensor>& sharded_locals,
                                    const std::string& cause) {
  at::Tensor flat = FlatShards(u, sharded_locals);
  at::Tensor gathered = u.dp > 1 ? u.coll->AllGather(flat, u.groups, 0) : flat;
  Tell(u, CollectiveKind::kAllGather, MaxBytes(u, flat), MaxBytes(u, gathered), cause);
  std::vector<at::Tensor> out;
  ParallelShardFnsScope parallel;  // the functions below only read u and copy
  for (size_t i = 0; i < u.params.size(); ++i) {
    out.push_back(u.coll->MapShards(gathered, [&u, i](int64_t rank, const at::Tensor& g) {
      const std::vector<int64_t>& full = u.params[i].unsharded_shape.at(rank);
      // Copied out into a buffer of its own (FSDP2's copy-out), even where the data is contiguous
      // already: each unsharded parameter's storage is freed and refilled on its own. Row c of
      // `chunks` is dp rank c's padded chunk; the chunks filled whole go in one copy, the part of
      // the last one that is not padding in a second (two copies at most, whatever the dp size).
      const int64_t rows = CeilDiv(full[0], u.dp);
      const int64_t len = ChunkLen(u, i, rank);
      const at::Tensor chunks = g.view({u.dp, -1}).narrow(1, ChunkOffset(u, i, rank), len);
      at::Tensor out = at::empty(full, g.options());
      const int64_t whole = rows == 0 ? 0 : full[0] / rows;
      if (whole > 0)
        out.narrow(0, 0, whole * rows).view({whole, len}).copy_(chunks.narrow(0, 0, whole));
      const int64_t left = full[0] - whole * rows;
      if (left > 0) {
        const int64_t left_len = left * RestNumel(full);
        out.narrow(0, whole * rows, left)
            .view({1, left_len})
            .copy_(chunks.narrow(0, whole, 1).narrow(1, 0, left_len));
      }
      return out;
    }));
  }
  return out;
}

// The reduce-scatter (avg) of the group's unsharded gradients (local data per parameter; undefined
// for none): each rank's chunk of each averaged gradient.
std::vector<at::Tensor> ReduceScatterGroup(const Unit& u, const std::vector<at::Tensor>& grads,
                                           const std::string& cause) {
  // The functions given to MapShards here only read u, fill zeros and copy: several ranks at once
  // (not around the collective, whose observers are not for several threads).
  std::optional<ParallelShardFnsScope> parallel(std::in_place);
  std::vector<at::Tensor> locals;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) {
      locals.push_back(grads[i]);
    } else {
      locals.push_back(u.coll->MapShards(ops::GetDTensor(u.params[i].sharded).to_local(),
                                         [&u, i](int64_t rank, const at::Tensor& s) {
                                           return at::zeros(u.params[i].unsharded_shape.at(rank),
                                                            s.options());
                                         }));
    }
  }
  at::Tensor flat =
      u.coll->MapShards(locals, [&u](int64_t rank, const std::vector<at::Tensor>& gs) {
        std::vector<at::Tensor> pieces;
        for (size_t i = 0; i < gs.size(); ++i) {
          const std::vector<int64_t>& full = u.params[i].unsharded_shape.at(rank);
          pieces.push_back(PadRows(gs[i], CeilDiv(full[0], u.dp) * u.dp).reshape({u.dp, -1}));
        }
        return at::cat(pieces, 1).reshape({-1});
      });
  parallel.reset();
  at::Tensor reduced = u.dp > 1 ? u.coll->ReduceScatter(flat, u.groups, ReduceOp::kAvg, 0) : flat;
  Tell(u, CollectiveKind::kReduceScatter, MaxBytes(u, flat), MaxBytes(u, reduced), cause);
  std::vector<at::Tensor> out;
  parallel.emplace();
  for (size_t i = 0; i < u.params.size(); ++i) {
    out.push_back(u.coll->MapShards(reduced, [&u, i](int64_t rank, const at::Tensor& r) {
      const std::vector<int64_t>& full = u.params[i].unsharded_shape.at(rank);
      std::vector<int64_t> chunk = full;
      chunk[0] = CeilDiv(full[0], u.dp);
      const int64_t rows = ChunkRows(full[0], u.dp, DpCoordinate(u, rank));
      return r.narrow(0, ChunkOffset(u, i, rank), ChunkLen(u, i, rank))
          .reshape(chunk)
          .narrow(0, 0, rows)
          .contiguous();
    }));
  }
  return out;
}

// Wraps unsharded local data as the module sees it: a DTensor on the tp mesh, or plain.
at::Tensor Unsharded(const Unit& u, const ManagedParam& p, const at::Tensor& local) {
  if (!p.tp_mesh) return local;
  return ops::AsTensor(
      DTensor::FromLocal(local, *p.tp_mesh, p.tp_placements, p.tp_shape, std::nullopt, u.coll));
}

// Each held rank's buffer of every unsharded parameter of the last forward, once each.
template <typename F>
void ForEachUnshardedBuffer(Unit& u, F&& f) {
  std::set<c10::StorageImpl*> seen;
  for (size_t i = 0; i < u.unsharded_locals.size(); ++i) {
    const at::Tensor& local = u.unsharded_locals[i];
    for (int64_t r : u.coll->HeldRanks(local)) {
      const at::Tensor shard = u.coll->Shard(local, r);
      if (!shard.has_storage() || !seen.insert(shard.storage().unsafeGetStorageImpl()).second)
        continue;
      f(i, r, *shard.storage().unsafeGetStorageImpl());
    }
  }
}

// FSDP2's reshard after forward: the unsharded parameters' buffers are freed (their storage kept,
// empty, for the tensors autograd saved), so a rank's memory drops back to its shards.
void FreeUnshardedBuffers(Unit& u) {
  ForEachUnshardedBuffer(u, [](size_t, int64_t, c10::StorageImpl& storage) {
    storage.set_data_ptr_noswap(c10::DataPtr(nullptr, storage.device()));
    storage.set_nbytes(0);
  });
  u.buffers_freed = true;
}

// Unshard as an autograd function: sharded leaves in, unsharded parameters out; backward
// reduce-scatters the gradients.
struct UnshardFn : torch::autograd::Function<UnshardFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList sharded, Unit* unit) {
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    ctx->set_materialize_grads(false);
    std::vector<at::Tensor> locals;
    for (const at::Tensor& s : sharded) locals.push_back(ops::GetDTensor(s).to_local());
    std::vector<at::Tensor> full =
        GatherGroup(*unit, locals, "fully_shard all-gather of " + unit->label());
    unit->unsharded_locals = full;
    unit->pinned_shards.clear();
    for (const at::Tensor& local : full) {
      for (int64_t r : unit->coll->HeldRanks(local))
        unit->pinned_shards.push_back(unit->coll->Shard(local, r));
    }
    unit->buffers_freed = false;
    torch::autograd::variable_list out;
    for (size_t i = 0; i < full.size(); ++i)
      out.push_back(Unsharded(*unit, unit->params[i], full[i]));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    Unit* u = reinterpret_cast<Unit*>(ctx->saved_data["unit"].toInt());
    std::vector<at::Tensor> locals;
    for (size_t i = 0; i < grads.size(); ++i) {
      const at::Tensor& g = grads[i];
      const ManagedParam& p = u->params[i];
      if (!g.defined()) {
        locals.emplace_back();
      } else if (auto dt = ops::FindDTensor(g)) {
        // Upstream's FSDPParam: a tp gradient in other placements (Partial from sequence
        // parallelism) is redistributed to the parameter's placements first.
        DTensor d = *dt;
        if (p.tp_mesh && d.placements() != p.tp_placements) {
          d = ops::ExecutePlanObserved("fully_shard gradient of " + p.fqn, 0, d,
                                       PlanFor(d.spec(), p.tp_placements));
        }
        locals.push_back(d.to_local());
      } else {
        locals.push_back(g);
      }
    }
    std::vector<at::Tensor> reduced =
        ReduceScatterGroup(*u, locals, "fully_shard reduce-scatter of " + u->label());
    // FSDP2's post-backward reshard: the unsharded parameters' buffers go (a root that keeps its
    // parameters unsharded between passes frees them too: the next forward all-gathers anew).
    FreeUnshardedBuffers(*u);
    u->unsharded_locals.clear();
    u->pinned_shards.clear();
    u->unsharded = false;
    torch::autograd::variable_list out;
    for (size_t i = 0; i < reduced.size(); ++i) {
      const DTensor leaf = ops::GetDTensor(u->params[i].sharded);
      out.push_back(ops::AsTensor(MakeDTensor(leaf.spec(), reduced[i], u->coll, leaf.stride())));
    }
    out.emplace_back();  // the unit pointer
    return out;
  }
};

// Swaps the module parameters between their sharded leaves and `values`.
void SetParams(Unit& u, const std::vector<at::Tensor>& values) {
  for (size_t i = 0; i < u.params.size(); ++i) {
    u.params[i].owner->SwapParameter(u.params[i].name, values[i]);
  }
}
void Reshard(Unit& u) {
  std::vector<at::Tensor> leaves;
  for (const ManagedParam& p : u.params) leaves.push_back(p.sharded);
  SetParams(u, leaves);
}

// A backward all-gather (re-gather after reshard, or a prefetch): issued and told; where the
// forward's buffers were freed, the gathered data moves into them (the allocation, charged to its
// rank when the all-gather made it, goes with it), so the tensors autograd saved hold the values
// again — FSDP2 all-gathers into the same storage.
void Regather(Unit& u, const std::string& why) {
  if (u.unsharded) return;
  std::vector<at::Tensor> locals;
  for (const ManagedParam& p : u.params) locals.push_back(ops::GetDTensor(p.sharded).to_local());
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor> gathered = GatherGroup(u, locals, why + u.label());
  if (u.buffers_freed) {
    ForEachUnshardedBuffer(u, [&](size_t i, int64_t r, c10::StorageImpl& storage) {
      const at::Tensor src = u.coll->Shard(gathered[i], r);
      c10::StorageImpl& from = *src.storage().unsafeGetStorageImpl();
      storage.set_nbytes(from.nbytes());
      storage.set_data_ptr_noswap(std::move(from.mutable_data_ptr()));
      from.set_nbytes(0);
    });
    u.buffers_freed = false;
  }
  u.unsharded = true;
}

void PreForward(Unit& u) {
  if (u.ctx->root == nullptr) {
    u.ctx->root = &u;  // upstream's lazy init: the first unit to run forward is the root
    u.ctx->post_forward_order.clear();
  }
  if (&u == u.ctx->root) u.ctx->post_forward_order.clear();
  u.in_backward = false;
  std::vector<at::Tensor> leaves;
  for (const ManagedParam& p : u.params) leaves.push_back(p.sharded);
  // As a TensorList: autograd tracks the tensors of a TensorList argument, not of a vector.
  torch::autograd::variable_list full = UnshardFn::apply(at::TensorList(leaves), &u);
  SetParams(u, full);
  u.unsharded = true;
}

at::Tensor PostForward(Unit& u, const at::Tensor& output) {
  if (u.reshard_after_forward()) {
    Reshard(u);
    FreeUnshardedBuffers(u);
    u.unsharded = false;
  } else {
    Reshard(u);  // the module's registered parameters are the sharded ones between passes
  }
  u.post_forward_indices.push_back(u.ctx->post_forward_order.size());
  u.ctx->post_forward_order.push_back(&u);
  if (!output.defined() || !output.requires_grad()) return output;
  Unit* unit = &u;
  return WithBackwardHook(output, [unit] {
    if (unit->in_backward) return;
    unit->in_backward = true;
    Regather(*unit, "fully_shard all-gather (backward) of ");
    // Upstream's default backward prefetch: the unit that ran before this one in forward.
    if (!unit->post_forward_indices.empty()) {
      const size_t index = unit->post_forward_indices.back();
      unit->post_forward_indices.pop_back();
      if (index > 0)
        Regather(*unit->ctx->post_forward_order[index - 1], "fully_shard prefetch of ");
    }
  });
}

}  // namespace

void FullyShard(Module& module, const DeviceMesh& dp_mesh,
                const std::shared_ptr<Collectives>& collectives, FullyShardOptions options) {
  if (dp_mesh.ndim() != 1) {
    throw InputError("mesh",
                     "fully_shard takes a 1-D mesh (the dp dim), got " + dp_mesh.ToString());
  }
  if (module.Attachment(kUnitKey)) {
    throw InputError("plan", "fully_shard was applied to " + module.fqn() + " already");
  }
  auto unit = std::make_shared<Unit>();
  unit->module = &module;
  unit->fqn = module.fqn();
  unit->dp_mesh = dp_mesh;
  unit->dp = dp_mesh.size(0);
  unit->dp_root_dim = dp_mesh.root_dims().at(0).at(0);
  unit->groups = GroupSet::AlongMeshDim(dp_mesh.root(), unit->dp_root_dim);
  unit->coll = collectives;
  unit->reshard_option = options.reshard_after_forward;

  // Parameters already managed by units below; every unit below and this one share one context
  // (upstream's state context, found from the root).
  std::set<std::pair<Module*, std::string>> managed;
  unit->ctx = std::make_shared<Context>();
  for (Module* m : AllModules(module)) {
    if (m == &module) continue;
    if (auto below = std::static_pointer_cast<Unit>(m->Attachment(kUnitKey))) {
      for (const ManagedParam& p : below->params) managed.insert({p.owner, p.name});
      below->ctx = unit->ctx;
    }
  }

  for (Module* m : AllModules(module)) {
    for (const auto& [name, value] : m->OwnParameters()) {
      if (managed.count({m, name})) continue;
      ManagedParam p;
      p.owner = m;
      p.name = name;
      p.fqn = (m->fqn().empty() ? "" : m->fqn() + ".") + name;
      if (auto dt = ops::FindDTensor(value)) {
        p.tp_mesh = dt->mesh();
        p.tp_placements = dt->placements();
        p.tp_shape = dt->shape();
        const at::Tensor& local = dt->to_local();
        for (int64_t r : collectives->HeldRanks(local)) {
          p.unsharded_shape[r] = collectives->Shard(local, r).sizes().vec();
        }
        p.sharded = ops::AsTensor(DistributeTensor(*dt, dp_mesh, {Placement::Shard(0)}));
      } else {
        p.tp_shape = value.sizes().vec();
        p.sharded = ops::AsTensor(
            DistributeTensor(value.detach(), dp_mesh, {Placement::Shard(0)}, 0, collectives));
        const at::Tensor local =
            ops::GetDTensor(p.sharded).to_local();  // a copy: the DTensor is a temporary
        for (int64_t r : collectives->HeldRanks(local)) p.unsharded_shape[r] = p.tp_shape;
      }
      if (p.tp_shape.empty()) {
        throw InputError("plan", "fully_shard cannot shard the 0-d parameter " + p.fqn);
      }
      p.sharded.set_requires_grad(true);
      m->SwapParameter(name, p.sharded);
      unit->params.push_back(std::move(p));
    }
  }
  if (unit->params.empty()) {
    throw InputError("plan", "fully_shard of " +
                                 (module.fqn().empty() ? module.name() : module.fqn()) +
                                 ": no parameter left to manage");
  }
  Unit* raw = unit.get();
  module.RegisterForwardPreHook(
      [raw](Module&, const at::Tensor& input) {
        PreForward(*raw);
        return input;
      },
      /*prepend=*/true);
  module.RegisterForwardHook([raw](Module&, const at::Tensor&, const at::Tensor& output) {
    return PostForward(*raw, output);
  });
  module.Attachment(kUnitKey) = unit;
}

}  // namespace model
}  // namespace dtsim
