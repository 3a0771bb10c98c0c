#include "dtsim/model/model_run.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <map>
#include <sstream>
#include <type_traits>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/real_run.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/error.h"
#include "dtsim/model/fully_shard.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "dtsim/ops/loss_parallel.h"
#include "dtsim/tensor/local_tensor.h"
#include "dtsim/tensor/memory_meter.h"

namespace dtsim {
namespace model {
namespace {

constexpr const char* kGlobal = "Global";
enum Phase { kForward = 0, kBackward = 1 };

std::string PlacementsOf(const at::Tensor& t) {
  if (auto dt = ops::FindDTensor(t)) return ToString(dt->placements());
  return "plain";
}

// Every rank's `mine` (same length on each), by position in the mesh: an all-gather over the
// world on a real backend. T is double or int64_t.
template <typename T>
std::vector<std::vector<T>> GatherWorld(Collectives& coll, const DeviceMesh& mesh,
                                        const std::vector<T>& mine) {
  const at::ScalarType type = std::is_same_v<T, double> ? at::kDouble : at::kLong;
  at::Tensor t = at::tensor(mine, type).unsqueeze(0);
  at::Tensor all = coll.AllGather(t, GroupSet::Of(mesh.root().ranks()), 0).contiguous();
  std::vector<std::vector<T>> out(mesh.root().size());
  const T* data = all.data_ptr<T>();
  for (size_t i = 0; i < out.size(); ++i)
    out[i].assign(data + i * mine.size(), data + (i + 1) * mine.size());
  return out;
}

// A sketch of a shard's values for a model trace (model_trace.h): projections on two fixed
// quasi-random weight sequences in [-1, 1] and the L2 norm, in double.
std::array<double, 3> Sketch(const at::Tensor& shard) {
  const at::Tensor x = shard.detach().reshape({-1}).to(at::kDouble);
  if (x.numel() == 0) return {0, 0, 0};
  const at::Tensor i = at::arange(x.numel(), x.options());
  const at::Tensor w1 = at::sin(i * 0.7548776662466927 + 0.3);
  const at::Tensor w2 = at::cos(i * 0.5698402909980532 + 0.7);
  return {(x * w1).sum().item<double>(), (x * w2).sum().item<double>(), x.norm().item<double>()};
}

// Hears modules, ops and redistributions; attributes each to a module as CommDebugMode does.
//
// With `trace`, it also keeps the run's events in order for a model trace (model_trace.h): module
// begins and ends with every rank's hash of the output, output gradients, ops with the collectives
// of their implicit redistributions, the styles' collectives. On a real backend each rank hashes
// its own shard; FinishTrace gathers them.
class Recorder : public ops::OpObserver, public ModuleObserver {
 public:
  Recorder(const std::string& root_name, const DeviceMesh& mesh, const Collectives* coll,
           bool trace, bool hashes)
      : root_name_(root_name),
        mesh_(mesh),
        coll_(coll),
        trace_(trace),
        hashes_(hashes),
        start_(std::chrono::steady_clock::now()) {
    nodes_.push_back(ModuleNode{kGlobal, "", 0, {}, {}, {}, {}, {}});
    index_[kGlobal] = 0;
  }

  void SetPhase(Phase p) { phase_ = p; }
  std::vector<ModuleNode> TakeNodes() { return std::move(nodes_); }

  // An event of the trace not heard from a module or an op: a parameter, the loss, a gradient.
  void AddTensorEvent(RunEvent::Kind kind, const std::string& phase, const std::string& name,
                      const at::Tensor& t) {
    if (!trace_) return;
    RunEvent e = NewEvent(kind);
    e.pass = phase;
    e.module.clear();
    e.name = name;
    e.tensor = TensorOf(t);
    events_.push_back(std::move(e));
  }

  // The recorded events, every rank's hashes gathered on a real backend (every rank calls it).
  std::vector<RunEvent> FinishTrace(Collectives& coll);

  void OnForwardBegin(Module& m, const at::Tensor& input) override {
    const std::string name = Name(m);
    auto it = index_.find(name);
    if (it == index_.end()) {
      ModuleNode node;
      node.fqn = name;
      node.type = m.name();
      const size_t parent = stack_.empty() ? 0 : stack_.back();
      node.depth = nodes_[parent].depth + 1;
      nodes_[parent].children.push_back(name);
      index_[name] = nodes_.size();
      nodes_.push_back(std::move(node));
      it = index_.find(name);
    }
    stack_.push_back(it->second);
    if (MemoryMeter* meter = MemoryMeter::Current()) meter->PushWindow();
    if (trace_) {
      RunEvent e = NewEvent(RunEvent::Kind::kModuleBegin);
      e.type = m.name();
      e.tensor = TensorOf(input);
      events_.push_back(std::move(e));
    }
  }

  void OnForwardEnd(Module& m, const at::Tensor& output) override {
    if (trace_) {
      RunEvent e = NewEvent(RunEvent::Kind::kModuleEnd);
      e.tensor = TensorOf(output);
      events_.push_back(std::move(e));
    }
    ModuleNode& node = nodes_[stack_.back()];
    if (node.parameters.empty()) {
      for (const auto& [pname, p] : m.OwnParameters())
        node.parameters.emplace_back(pname, PlacementsOf(p));
    }
    if (MemoryMeter* meter = MemoryMeter::Current()) {
      std::vector<int64_t> peaks = meter->PopWindow();
      peaks.resize(mesh_.root().size(), 0);
      if (node.forward_peak_bytes.size() < peaks.size())
        node.forward_peak_bytes.resize(peaks.size(), 0);
      for (size_t r = 0; r < peaks.size(); ++r) {
        node.forward_peak_bytes[r] = std::max(node.forward_peak_bytes[r], peaks[r]);
      }
    }
    stack_.pop_back();
  }

  void OnBackwardBegin(Module& m, const at::Tensor& grad_output) override {
    auto it = index_.find(Name(m));
    if (it != index_.end()) backward_current_ = it->second;
    if (trace_) {
      RunEvent e = NewEvent(RunEvent::Kind::kBackwardBegin);
      e.module = Name(m);
      e.tensor = TensorOf(grad_output);
      events_.push_back(std::move(e));
    }
  }

  void OnOp(const ops::OpEvent& e) override {
    std::vector<std::string> args, results;
    for (const Placements& p : e.input_placements) args.push_back(ToString(p));
    for (const auto& out : e.outputs)
      results.push_back(out ? ToString(out->placements()) : std::string("none"));
    const std::string text = PlacementsText(args, results);
    if (trace_) {
      RunEvent ev = NewEvent(RunEvent::Kind::kOp);
      ev.op = e.op;
      ev.args = std::move(args);
      ev.results = std::move(results);
      ev.collectives = std::move(pending_);
      pending_.clear();
      events_.push_back(std::move(ev));
    }
    std::vector<OpRecord>& ops = Current().operations[phase_];
    for (OpRecord& r : ops) {
      if (r.op == e.op && r.placements == text) {
        ++r.count;
        return;
      }
    }
    ops.push_back(OpRecord{e.op, text, 1});
  }

  void OnCollective(const CollectiveEvent& call) override {
    if (trace_) {
      RunEvent e = NewEvent(RunEvent::Kind::kCollective);
      CollectiveEvent c = call;
      // A style's collective runs in every group along its mesh dim (the submesh it was given
      // stands for all of them).
      if (auto d = mesh_.FindDim(call.mesh_dim)) c.groups = mesh_.GroupsAlong(*d);
      e.collectives.push_back(std::move(c));
      events_.push_back(std::move(e));
    }
    Current().collectives[phase_].push_back(call);
  }

  void OnRedistributeBegin(const std::string& op, size_t input, const DTensor& source,
                           const Plan& plan) override {
    const bool implicit = op.rfind("aten::", 0) == 0;
    const std::string cause = implicit ? op + " arg " + std::to_string(input) : op;
    for (const PlanStep& step : plan.steps) {
      if (!MovesData(step.collective)) continue;
      CollectiveEvent ev;
      ev.kind = step.collective;
      ev.mesh_dim = source.mesh().DimLabel(step.mesh_dim);
      ev.groups = step.groups;
      for (int64_t b : step.bytes_sent_per_rank) ev.max_bytes_sent = std::max(ev.max_bytes_sent, b);
      for (int64_t b : step.bytes_received_per_rank)
        ev.max_bytes_received = std::max(ev.max_bytes_received, b);
      ev.est_us = step.est_us;
      ev.from = ToString(plan.src);
      ev.to = ToString(plan.dst);
      ev.cause = cause;
      ev.implicit = implicit;
      if (trace_) {
        CollectiveEvent c = ev;
        // A plan on a submesh (the tp mesh standing for every dp group) runs in every group along
        // that dim of the world.
        const auto world_dim = mesh_.FindDim(ev.mesh_dim);
        if (source.mesh().size() != mesh_.size() && world_dim)
          c.groups = mesh_.GroupsAlong(*world_dim);
        if (implicit) {
          pending_.push_back(std::move(c));  // nested in the op's event when it comes
        } else {
          RunEvent e = NewEvent(RunEvent::Kind::kCollective);
          e.collectives.push_back(std::move(c));
          events_.push_back(std::move(e));
        }
      }
      Current().collectives[phase_].push_back(std::move(ev));
    }
  }

 private:
  std::string Name(const Module& m) const { return m.fqn().empty() ? root_name_ : m.fqn(); }
  ModuleNode& Current() {
    if (phase_ == kForward) return nodes_[stack_.empty() ? 0 : stack_.back()];
    return nodes_[backward_current_];
  }

  // An event of the current phase and module, timed now.
  RunEvent NewEvent(RunEvent::Kind kind) {
    RunEvent e;
    e.kind = kind;
    e.pass = phase_ == kForward ? "forward" : "backward";
    e.module = Current().fqn;
    e.t_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
                 .count();
    return e;
  }

  // A model tensor at a boundary: its placements and global shape (a DTensor), or "local" and its
  // own shape (per-rank data), and every rank's hash of its shard (this rank's alone on a real
  // backend, the rest left empty until FinishTrace).
  WorldTensor TensorOf(const at::Tensor& t) {
    WorldTensor out;
    if (!t.defined()) {
      out.placements = "none";
      return out;
    }
    at::Tensor local = t;
    if (auto dt = ops::FindDTensor(t)) {
      out.placements = ToString(dt->placements());
      out.shape = dt->shape();
      local = dt->to_local();
    } else {
      out.placements = "local";
    }
    const std::vector<int64_t> held = IsLocalTensor(local) || !coll_->simulated()
                                          ? coll_->HeldRanks(local)
                                          : mesh_.root().ranks();
    if (out.shape.empty() && out.placements == "local") {
      out.shape = IsLocalTensor(local) ? coll_->Shard(local, held.front()).sizes().vec()
                                       : local.sizes().vec();
    }
    if (!hashes_) return out;
    RankScope nobody(-1);  // a copy a hash may make is no rank's memory
    const int64_t world = mesh_.root().size();
    out.hashes.assign(world, std::string());
    out.sketches.assign(world, {0, 0, 0});
    for (int64_t r : held) {
      const at::Tensor shard = IsLocalTensor(local) ? coll_->Shard(local, r) : local;
      out.hashes.at(r) = ShardHash(shard);
      out.sketches.at(r) = Sketch(shard);
    }
    if (coll_->simulated()) {
      for (int64_t r = 0; r < world; ++r) {
        if (out.hashes[r].empty()) {
          throw InternalError("model trace: rank " + std::to_string(r) + " holds no shard of " +
                              out.placements + " tensor");
        }
      }
    }
    return out;
  }

  std::string root_name_;
  DeviceMesh mesh_;
  const Collectives* coll_;
  bool trace_, hashes_;
  std::chrono::steady_clock::time_point start_;
  std::vector<RunEvent> events_;
  std::vector<CollectiveEvent> pending_;  // implicit redistributions of the op to come
  Phase phase_ = kForward;
  std::vector<ModuleNode> nodes_;
  std::map<std::string, size_t> index_;
  std::vector<size_t> stack_;
  size_t backward_current_ = 0;
};

std::vector<RunEvent> Recorder::FinishTrace(Collectives& coll) {
  if (!pending_.empty()) {  // implicit redistributions whose op never reported (none expected)
    RunEvent e = NewEvent(RunEvent::Kind::kCollective);
    for (CollectiveEvent& c : pending_) {
      e.collectives = {std::move(c)};
      events_.push_back(e);
    }
    pending_.clear();
  }
  if (coll.simulated() || !hashes_) return std::move(events_);
  // Every rank's hashes of every tensor event, as 64-bit numbers, gathered in event order.
  std::vector<WorldTensor*> tensors;
  for (RunEvent& e : events_) {
    if (e.tensor && !e.tensor->hashes.empty()) tensors.push_back(&*e.tensor);
  }
  const int64_t me = coll.rank();
  const std::vector<std::vector<int64_t>> counts =
      GatherWorld<int64_t>(coll, mesh_, {static_cast<int64_t>(tensors.size())});
  for (const auto& c : counts) {
    if (c[0] != static_cast<int64_t>(tensors.size())) {
      throw InternalError("model trace: ranks recorded " + std::to_string(c[0]) + " and " +
                          std::to_string(tensors.size()) + " tensors");
    }
  }
  if (tensors.empty()) return std::move(events_);
  std::vector<int64_t> mine;
  mine.reserve(tensors.size());
  for (WorldTensor* t : tensors) {
    const std::string& h = t->hashes.at(me);
    mine.push_back(static_cast<int64_t>(std::stoull(h.substr(5), nullptr, 16)));
  }
  std::vector<double> my_sketches;
  my_sketches.reserve(3 * tensors.size());
  for (WorldTensor* t : tensors) {
    for (double v : t->sketches.at(me)) my_sketches.push_back(v);
  }
  const std::vector<std::vector<int64_t>> all = GatherWorld<int64_t>(coll, mesh_, mine);
  const std::vector<std::vector<double>> all_sketches =
      GatherWorld<double>(coll, mesh_, my_sketches);
  const std::vector<int64_t>& ranks = mesh_.root().ranks();
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "xxh3:%016llx", static_cast<unsigned long long>(all[i][k]));
      tensors[k]->hashes.at(ranks[i]) = buf;
      for (size_t c = 0; c < 3; ++c)
        tensors[k]->sketches.at(ranks[i])[c] = all_sketches[i][3 * k + c];
    }
  }
  return std::move(events_);
}

// Registers the recorder as both an op and a module observer for a scope.
class Observing {
 public:
  explicit Observing(Recorder* r)
      : op_(ops::ThreadOpObservers(), r), module_(ThreadModuleObservers(), r) {}

 private:
  ops::OpObservers::Scoped op_;
  ModuleObservers::Scoped module_;
};

// The global value of a model tensor: a DTensor's full tensor, or a LocalTensor whose ranks all
// hold the same value (InternalError naming `what` otherwise), or a plain tensor.
at::Tensor GlobalValue(const at::Tensor& t, const std::string& what) {
  if (auto dt = ops::FindDTensor(t)) return dt->FullTensor();
  if (!IsLocalTensor(t)) return t;
  std::vector<at::Tensor> shards = LocalShards(t);
  for (size_t i = 1; i < shards.size(); ++i) {
    if (!at::equal(shards[i], shards[0])) {
      throw InternalError(what + ": ranks " + std::to_string(LocalRanks(t)[0]) + " and " +
                          std::to_string(LocalRanks(t)[i]) + " hold different values");
    }
  }
  return shards[0];
}

// max |a - b| against a tolerance of 1e-4 times the reference's largest magnitude (plus 1e-6):
// sharding changes only the order of float32 summations (matmul splits, reduce-scatter and
// all-reduce sums), whose rounding differences grow like sqrt(terms) · 2^-24 relative to the
// magnitudes involved — far below 1e-4 for these sizes, while any wrong shard, missing reduction
// or double count moves values by O(1) relative.
TensorCheck Check(const std::string& name, const at::Tensor& got, const at::Tensor& want) {
  TensorCheck c;
  c.name = name;
  at::Tensor a = got.to(at::kDouble), b = want.to(at::kDouble);
  if (a.sizes() != b.sizes()) {
    c.max_abs_diff = std::numeric_limits<double>::infinity();
    return c;
  }
  c.max_abs_diff = a.numel() == 0 ? 0 : (a - b).abs().max().item<double>();
  const double scale = b.numel() == 0 ? 0 : b.abs().max().item<double>();
  c.tolerance = 1e-4 * scale + 1e-6;
  c.ok = c.max_abs_diff <= c.tolerance;
  return c;
}

std::string Bytes(int64_t b) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1);
  if (b >= (int64_t{1} << 30))
    o << double(b) / double(int64_t{1} << 30) << " GiB";
  else if (b >= (int64_t{1} << 20))
    o << double(b) / double(int64_t{1} << 20) << " MiB";
  else if (b >= 1024)
    o << double(b) / 1024.0 << " KiB";
  else
    o << b << " B";
  return o.str();
}

}  // namespace

const std::vector<std::string>& ModelPlanNames() {
  static const std::vector<std::string> names = {"tp", "tp+sp", "fsdp", "fsdp+tp"};
  return names;
}

namespace {

// Saturating arithmetic: sizes past 2^62 stay at 2^62 (every limit below is far smaller).
constexpr int64_t kSaturated = int64_t{1} << 62;
int64_t Mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out) || out > kSaturated) return kSaturated;
  return out;
}
int64_t Add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out) || out > kSaturated) return kSaturated;
  return out;
}

// The largest tensor of the model (elements), and a bound on the bytes a data run allocates: the
// full weights (kept for the reference model and its gradients: 3 copies), every rank's shards and
// gradients (2 more in total), and the activations of each rank kept for backward (a generous
// 24 tensors of batch · seq · max(dim, ffn) per layer, plus the logits and their float copies).
struct Size {
  int64_t largest = 0;
  int64_t data_bytes = 0;
};

Size SizeOf(const ModelRunOptions& o) {
  const LlamaArgs& a = o.args;
  const int64_t tokens = Mul(a.batch, a.seq);
  const int64_t logits = Mul(tokens, a.vocab);
  const int64_t act = Mul(tokens, std::max(a.dim, a.ffn_hidden()));
  const int64_t emb = Mul(a.vocab, a.dim);
  const int64_t ffn = Mul(a.dim, a.ffn_hidden());
  const int64_t attn = Mul(a.dim, a.dim);
  Size size;
  size.largest = std::max({logits, act, emb, ffn, attn});
  const int64_t layer = Add(Add(Mul(ffn, 3), Mul(attn, 4)), Mul(a.dim, 2));
  const int64_t params = Add(Mul(layer, a.layers), Mul(emb, 2));
  const int64_t acts = Mul(Add(Mul(Mul(act, 24), a.layers), Mul(logits, 4)), o.mesh.size());
  size.data_bytes = Mul(Add(Mul(params, 5), acts), 4);
  return size;
}

}  // namespace

void ValidateModelRun(const ModelRunOptions& o) {
  o.args.Validate();
  if (o.args.layers > kMaxModelLayers) {
    throw InputError("layers", std::to_string(o.args.layers) +
                                   " transformer blocks are too many: dtsim model simulates at "
                                   "most " +
                                   std::to_string(kMaxModelLayers));
  }
  if (o.mesh.size() > kMaxModelRanks) {
    throw InputError("mesh", o.mesh.ToString() + " has " + std::to_string(o.mesh.size()) +
                                 " ranks; dtsim model simulates at most " +
                                 std::to_string(kMaxModelRanks));
  }
  if (!o.backend) {
    const long double rank_layers =
        static_cast<long double>(o.mesh.size()) * static_cast<long double>(o.args.layers + 2);
    if (rank_layers > kMaxModelRankLayers) {
      throw InputError(
          "layers",
          StrCat(o.args.layers, " transformer blocks on ", o.mesh.size(), " simulated ranks are ",
                 static_cast<int64_t>(rank_layers),
                 " rank-layers (ranks x (layers + 2)); one run simulates at most ",
                 kMaxModelRankLayers,
                 " (minutes of work): simulate fewer layers (the blocks repeat) or ranks"));
    }
  }
  const Size size = SizeOf(o);
  if (size.largest > kMaxModelTensorElements) {
    throw InputError("model", "a tensor of this model would hold more than 2^50 elements");
  }
  if (!o.meta && size.data_bytes > kMaxModelDataBytes) {
    throw InputError("model",
                     "a data run of this model needs more than " +
                         std::to_string(kMaxModelDataBytes >> 30) +
                         " GiB on this machine (weights, every rank's shards and activations); use "
                         "--meta for shapes, collectives and memory without data");
  }
  const auto& names = ModelPlanNames();
  if (std::find(names.begin(), names.end(), o.plan) == names.end()) {
    throw InputError("plan", "'" + o.plan + "' is not one of tp, tp+sp, fsdp, fsdp+tp");
  }
  const bool uses_tp = o.plan != "fsdp";
  const bool uses_dp = o.plan.rfind("fsdp", 0) == 0;
  if (uses_tp && !o.mesh.FindDim("tp").has_value()) {
    throw InputError("names", "plan " + o.plan + " shards over the mesh dim named 'tp'; " +
                                  o.mesh.ToString() + " has none (e.g. --names tp)");
  }
  if (uses_dp && !o.mesh.FindDim("dp").has_value()) {
    throw InputError("names", "plan " + o.plan +
                                  " shards parameters over the mesh dim named 'dp'; " +
                                  o.mesh.ToString() + " has none (e.g. --mesh 2x4 --names dp,tp)");
  }
  for (int64_t d = 0; d < o.mesh.ndim(); ++d) {
    const std::string label = o.mesh.DimLabel(d);
    const bool used = (label == "tp" && uses_tp) || (label == "dp" && uses_dp);
    if (!used && o.mesh.size(d) > 1) {
      throw InputError(
          "mesh", "plan " + o.plan + " does not use mesh dim " + label + " of size " +
                      std::to_string(o.mesh.size(d)) + " in " + o.mesh.ToString() +
                      (label == "dp" ? " (data parallelism needs --plan fsdp or fsdp+tp)" : ""));
    }
  }
  if (uses_tp) {
    // Every tp rank's rows of wq/wk/wv (torch.chunk of heads · head_dim) must be whole heads: the
    // attention views its local projection as (batch, seq, -1, head_dim), as upstream's does.
    const int64_t tp = o.mesh.size(*o.mesh.FindDim("tp"));
    const int64_t rows = o.args.heads * o.args.head_dim();
    const int64_t full = (rows + tp - 1) / tp;
    for (int64_t r = 0; r < tp; ++r) {
      const int64_t mine = std::max<int64_t>(0, std::min(rows, (r + 1) * full) - r * full);
      if (mine == 0) {
        throw InputError("heads", std::to_string(o.args.heads) + " heads over tp " +
                                      std::to_string(tp) + " leave tp rank " + std::to_string(r) +
                                      " without a head");
      }
      if (mine % o.args.head_dim() != 0) {
        throw InputError("heads", std::to_string(o.args.heads) + " heads of " +
                                      std::to_string(o.args.head_dim()) + " over tp " +
                                      std::to_string(tp) + " give tp rank " + std::to_string(r) +
                                      " " + std::to_string(mine) + " rows of wq, not whole heads");
      }
    }
  }
  const bool sp = o.plan == "tp+sp" || o.plan == "fsdp+tp";
  if (sp) {
    const int64_t tp = o.mesh.size(*o.mesh.FindDim("tp"));
    if (o.args.seq % tp != 0) {
      throw InputError("seq", "sequence parallelism splits seq " + std::to_string(o.args.seq) +
                                  " over tp " + std::to_string(tp) +
                                  ": it must divide evenly (upstream's SequenceParallel takes "
                                  "local inputs as even shards)");
    }
  }
  if (uses_dp) {
    const int64_t dp = o.mesh.size(*o.mesh.FindDim("dp"));
    if (o.args.batch % dp != 0) {
      throw InputError("batch", "batch " + std::to_string(o.args.batch) +
                                    " does not split evenly over the " + std::to_string(dp) +
                                    " dp ranks (each rank's batch is batch / dp)");
    }
  }
  if (o.backend && !o.backend->simulated() && o.meta) {
    throw InputError("meta", "metadata-only runs are simulations: leave out --backend");
  }
  if (o.loss_parallel && !uses_tp) {
    throw InputError("loss-parallel", "loss parallelism shards the logits over tp: plan " + o.plan +
                                          " has no tensor parallelism");
  }
  if (o.loss_parallel) {
    // Each tp rank's vocabulary columns (torch.chunk of the vocab): the loss-parallel log_softmax
    // takes every rank's max over its own columns, which has none to take on an empty shard.
    const int64_t tp = o.mesh.size(*o.mesh.FindDim("tp"));
    const int64_t full = (o.args.vocab + tp - 1) / tp;
    const int64_t empty_rank = (o.args.vocab + full - 1) / full;  // the first rank with no column
    if (empty_rank < tp) {
      throw InputError("loss-parallel",
                       "vocab " + std::to_string(o.args.vocab) + " over tp " + std::to_string(tp) +
                           " leaves tp rank " + std::to_string(empty_rank) +
                           " without a vocabulary column (chunks of " + std::to_string(full) +
                           "); the loss-parallel softmax needs one on every rank (upstream's "
                           "skips its max all-reduce on an empty shard while the other ranks "
                           "make it: a hang on real ranks)");
    }
  }
}

bool ModelReport::ok() const {
  for (const TensorCheck& c : checks) {
    if (!c.ok) return false;
  }
  return true;
}

ModelReport RunModel(const ModelRunOptions& o) {
  ValidateModelRun(o);
  ModelReport report;
  report.options = o;
  const DeviceMesh& mesh = o.mesh;
  std::shared_ptr<Collectives> coll =
      o.backend ? o.backend : std::shared_ptr<Collectives>(MakeLocalCollectives(mesh.size()));
  const bool real = !coll->simulated();
  const bool uses_tp = o.plan != "fsdp";
  const bool uses_dp = o.plan.rfind("fsdp", 0) == 0;
  // The dp mesh dim's index, or -1 (an index rather than an optional: gcc 12 misreads those).
  const int64_t dp_index = uses_dp ? *mesh.FindDim("dp") : -1;

  const auto weights = LlamaWeights(o.args, o.dtype, o.meta);
  std::shared_ptr<Transformer> sharded = BuildLlama(o.args, weights);
  if (uses_tp) {
    const DeviceMesh tp_mesh = mesh.Submesh({"tp"}, mesh.ranks().front());
    const bool sp = o.plan == "tp+sp" || o.plan == "fsdp+tp";
    ParallelizeModule(*sharded, tp_mesh, LlamaTensorParallelPlan(o.args, sp, o.loss_parallel),
                      coll);
  }
  if (uses_dp) {
    // torchtitan's order: every block, then the root (FSDP2's defaults: the root keeps its
    // parameters unsharded between forward and backward, the blocks reshard).
    const DeviceMesh dp_mesh = mesh.Submesh({"dp"}, mesh.ranks().front());
    for (int64_t i = 0; i < o.args.layers; ++i) {
      FullyShard(*FindModule(*sharded, "layers." + std::to_string(i)), dp_mesh, coll);
    }
    FullyShard(*sharded, dp_mesh, coll);
  }

  // Parameters no plan distributed (the norms of plan tp): every rank holds its own copy, as a
  // LocalTensor of the world (so that each rank's memory counts it, and metadata runs mix it with
  // the activations as data runs do).
  {
    Placements all_r(mesh.ndim(), Placement::Replicate());
    for (Module* m : AllModules(*sharded)) {
      for (const auto& [pname, p] : m->OwnParameters()) {
        if (ops::IsDTensor(p) || IsLocalTensor(p)) continue;
        m->ReplaceParameter(
            pname, DistributeTensor(p.detach(), mesh, all_r, std::nullopt, coll).to_local());
      }
    }
  }
  report.param_bytes.assign(mesh.root().size(), 0);
  for (Module* m : AllModules(*sharded)) {
    for (const auto& [pname, p] : m->OwnParameters()) {
      const at::Tensor local = ops::IsDTensor(p) ? ops::GetDTensor(p).to_local() : p;
      for (int64_t r : coll->HeldRanks(local)) {
        const at::Tensor shard = coll->Shard(local, r);
        report.param_bytes.at(mesh.root().PositionOf(r)) += shard.numel() * shard.element_size();
      }
    }
  }
  if (o.tamper) o.tamper(*sharded);

  const at::Tensor tokens_full = LlamaTokens(o.args, o.meta);
  const at::Tensor labels_full = LlamaLabels(o.args, o.meta);
  // The batch: split over dp (each dp rank its own rows, as a data loader gives them), the same
  // on every tp rank.
  Placements batch_layout(mesh.ndim(), Placement::Replicate());
  if (dp_index >= 0) batch_layout[dp_index] = Placement::Shard(0);
  const at::Tensor tokens =
      DistributeTensor(tokens_full, mesh, batch_layout, std::nullopt, coll).to_local();
  const at::Tensor labels =
      DistributeTensor(labels_full, mesh, batch_layout, std::nullopt, coll).to_local();

  Recorder recorder(sharded->name(), mesh, coll.get(), o.trace, o.trace && !o.meta);
  if (o.trace) {
    for (Module* m : AllModules(*sharded)) {
      for (const auto& [pname, p] : m->OwnParameters()) {
        recorder.AddTensorEvent(RunEvent::Kind::kParameter, "setup",
                                (m->fqn().empty() ? "" : m->fqn() + ".") + pname, p.detach());
      }
    }
  }
  at::Tensor logits, loss;
  {
    MemoryMeter meter;
    // On a real rank everything this process allocates is its own rank's.
    std::optional<RankScope> own_rank;
    if (real) own_rank.emplace(coll->rank());
    meter.BeginWindow();
    const auto start = std::chrono::steady_clock::now();
    const int64_t rounds_before = coll->agreement_rounds();
    const double agreement_before = coll->agreement_seconds();
    if (real) coll->SetFault(o.fault);
    {
      Observing observing(&recorder);
      logits = (*sharded)(tokens);
      // Upstream's loss_parallel() context around the loss and its backward (a no-op for logits
      // that are not sharded).
      std::optional<ops::LossParallel> loss_parallel;
      if (o.loss_parallel) loss_parallel.emplace();
      loss = CrossEntropy(logits, labels);
      recorder.AddTensorEvent(RunEvent::Kind::kLoss, "forward", "loss", loss.detach());
      if (o.backward) {
        recorder.SetPhase(kBackward);
        loss.backward();
      }
    }
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.agreement_rounds = coll->agreement_rounds() - rounds_before;
    report.agreement_seconds = {coll->agreement_seconds() - agreement_before};
    report.peak_bytes = meter.Peaks(mesh.root().ranks());
  }
  if (real && o.fault.active()) {
    report.fault_struck = AnyRank(*coll, coll->fault_struck());
    coll->SetFault(FaultSpec{});
  }
  if (real) {
    std::vector<double> all;
    for (const auto& v : GatherWorld<double>(*coll, mesh, report.agreement_seconds)) {
      all.push_back(v[0]);
    }
    report.agreement_seconds = std::move(all);
  } else {
    report.agreement_seconds.clear();
  }
  if (o.trace && o.backward) {
    for (Module* m : AllModules(*sharded)) {
      for (const auto& [pname, p] : m->OwnParameters()) {
        recorder.AddTensorEvent(RunEvent::Kind::kGradient, "end",
                                (m->fqn().empty() ? "" : m->fqn() + ".") + pname, p.grad());
      }
    }
  }
  report.modules = recorder.TakeNodes();
  if (real) {
    // Rank 0 reports the world: every rank's parameter bytes, peaks and per-module peaks.
    std::vector<int64_t> mine = {report.param_bytes.at(mesh.root().PositionOf(coll->rank())),
                                 report.peak_bytes.at(mesh.root().PositionOf(coll->rank()))};
    for (const ModuleNode& n : report.modules) {
      const size_t at_rank = static_cast<size_t>(coll->rank());
      mine.push_back(at_rank < n.forward_peak_bytes.size() ? n.forward_peak_bytes[at_rank] : 0);
    }
    const std::vector<std::vector<int64_t>> all = GatherWorld<int64_t>(*coll, mesh, mine);
    for (size_t i = 0; i < all.size(); ++i) {
      report.param_bytes[i] = all[i][0];
      report.peak_bytes[i] = all[i][1];
      for (size_t m = 0; m < report.modules.size(); ++m) {
        std::vector<int64_t>& peaks = report.modules[m].forward_peak_bytes;
        peaks.resize(all.size(), 0);
        peaks[i] = all[i][2 + m];
      }
    }
  }
  if (o.trace) {
    ModelTrace t;
    t.meta.command = "model";
    t.meta.backend = coll->backend();
    t.meta.world_size = mesh.size();
    t.meta.data = !o.meta;
    const LlamaArgs& a = o.args;
    t.model = {{"dim", a.dim},
               {"heads", a.heads},
               {"layers", a.layers},
               {"vocab", a.vocab},
               {"ffn", a.ffn_hidden()},
               {"seq", a.seq},
               {"batch", a.batch},
               {"plan", o.plan},
               {"loss_parallel", o.loss_parallel},
               {"backward", o.backward},
               {"dtype", std::string(c10::toString(o.dtype))}};
    t.mesh_shape = mesh.shape();
    for (int64_t d = 0; d < mesh.ndim(); ++d) t.mesh_names.push_back(mesh.DimLabel(d));
    t.events = recorder.FinishTrace(*coll);
    t.peak_bytes = report.peak_bytes;
    report.trace = std::move(t);
  }
  for (Module* m : AllModules(*sharded)) {
    for (const auto& [pname, p] : m->OwnParameters()) {
      const std::string fqn = (m->fqn().empty() ? "" : m->fqn() + ".") + pname;
      if (o.backward) {
        report.grad_placements.emplace_back(fqn,
                                            p.grad().defined() ? PlacementsOf(p.grad()) : "none");
      }
    }
  }
  if (o.meta) return report;

  // Each dp rank's loss is the mean over its own rows; the reported loss is their mean (what the
  // averaged gradients are the gradient of). Without dp every rank's loss is the same.
  const int64_t dp = dp_index >= 0 ? mesh.size(dp_index) : 1;
  auto dp_coord = [&](int64_t rank) {
    return dp_index >= 0 ? mesh.GetCoordinate(rank)[dp_index] : int64_t{0};
  };
  auto rows_of = [&](int64_t c) {
    const int64_t full = (o.args.batch + dp - 1) / dp;
    const int64_t start = std::min(o.args.batch, c * full);
    return std::make_pair(start, std::min(o.args.batch, start + full) - start);
  };
  // Per-rank values of a model output: a DTensor (the loss and logits under loss parallelism, on
  // the tp mesh standing for every dp group) made Replicate, its local data; or the local data.
  auto per_rank = [&](const at::Tensor& t) {
    if (auto dt = ops::FindDTensor(t)) {
      const Placements all_r(dt->mesh().ndim(), Placement::Replicate());
      return dt->placements() == all_r ? dt->to_local()
                                       : dt->Redistribute(dt->mesh(), all_r).to_local();
    }
    return t;
  };
  const at::Tensor loss_local = per_rank(loss.detach());
  // Every rank's loss, by position in the mesh (gathered on a real backend).
  std::vector<double> losses;
  if (real) {
    for (const auto& v : GatherWorld<double>(*coll, mesh, {loss_local.item<double>()})) {
      losses.push_back(v[0]);
    }
  } else {
    for (int64_t r : mesh.ranks()) losses.push_back(LocalShard(loss_local, r).item<double>());
  }
  {
    // Ranks of one dp coordinate must agree; the loss is the mean over dp coordinates.
    std::vector<std::optional<double>> by_dp(dp);
    for (size_t i = 0; i < losses.size(); ++i) {
      const int64_t c = dp_coord(mesh.ranks()[i]);
      if (by_dp[c] && *by_dp[c] != losses[i]) {
        throw InternalError("loss: ranks of dp coordinate " + std::to_string(c) +
                            " computed different losses");
      }
      by_dp[c] = losses[i];
    }
    double sum = 0;
    for (const auto& l : by_dp) sum += l.value_or(0.0);
    report.loss = sum / static_cast<double>(dp);
  }
  if (!o.check) return report;

  // The same model on one device, with the same weights, its loss averaged over the same rows.
  std::shared_ptr<Transformer> reference = BuildLlama(o.args, weights);
  at::Tensor ref_logits = (*reference)(tokens_full);
  std::vector<at::Tensor> chunk_losses;
  for (int64_t c = 0; c < dp; ++c) {
    const auto [start, n] = rows_of(c);
    chunk_losses.push_back(
        CrossEntropy(ref_logits.narrow(0, start, n), labels_full.narrow(0, start, n)));
  }
  at::Tensor ref_loss = at::stack(chunk_losses).mean();
  if (o.backward) ref_loss.backward();
  report.checks.push_back(
      Check("loss", at::scalar_tensor(*report.loss, at::kDouble), ref_loss.detach()));
  {
    // Every rank's logits against the reference's rows of its dp coordinate.
    const at::Tensor got = per_rank(logits.detach());
    TensorCheck worst{"logits", 0, 0, true};
    for (int64_t r : coll->HeldRanks(got)) {
      const auto [start, n] = rows_of(dp_coord(r));
      const at::Tensor mine = coll->Shard(got, r);
      TensorCheck c = Check("logits", mine, ref_logits.detach().narrow(0, start, n));
      if (!c.ok) {
        worst = c;
        worst.name = "logits (rank " + std::to_string(r) + ")";
        break;
      }
      if (c.max_abs_diff >= worst.max_abs_diff) worst = c;
    }
    if (real) {  // the worst rank's
      for (const auto& v : GatherWorld<double>(
               *coll, mesh, {worst.max_abs_diff, worst.tolerance, worst.ok ? 1.0 : 0.0})) {
        const bool ok = v[2] != 0;
        if ((!ok && worst.ok) || (ok == worst.ok && v[0] > worst.max_abs_diff)) {
          worst = TensorCheck{"logits", v[0], v[1], ok};
        }
      }
    }
    report.checks.push_back(worst);
  }
  if (o.backward) {
    std::map<std::string, at::Tensor> ref_grads;
    for (Module* m : AllModules(*reference)) {
      for (const auto& [pname, p] : m->OwnParameters()) {
        ref_grads[(m->fqn().empty() ? "" : m->fqn() + ".") + pname] = p.grad();
      }
    }
    for (Module* m : AllModules(*sharded)) {
      for (const auto& [pname, p] : m->OwnParameters()) {
        const std::string fqn = (m->fqn().empty() ? "" : m->fqn() + ".") + pname;
        if (!p.grad().defined()) {
          report.checks.push_back(TensorCheck{"grad " + fqn + " (missing)", 0, 0, false});
          continue;
        }
        report.checks.push_back(
            Check("grad " + fqn, GlobalValue(p.grad(), "grad " + fqn), ref_grads.at(fqn)));
      }
    }
  }
  return report;
}

namespace {

struct Totals {
  std::map<std::string, int64_t> count[2];
  int64_t bytes[2] = {0, 0};
  double us[2] = {0, 0};
};

// Inclusive totals of every node (own events plus descendants').
std::map<std::string, Totals> Inclusive(const ModelReport& r) {
  std::map<std::string, const ModuleNode*> by_name;
  for (const ModuleNode& n : r.modules) by_name[n.fqn] = &n;
  std::map<std::string, Totals> out;
  std::function<Totals(const ModuleNode&)> visit = [&](const ModuleNode& n) {
    Totals t;
    for (int ph = 0; ph < 2; ++ph) {
      for (const CollectiveEvent& e : n.collectives[ph]) {
        ++t.count[ph][std::string(ToString(e.kind))];
        t.bytes[ph] += e.max_bytes_sent;
        t.us[ph] += e.est_us;
      }
    }
    for (const std::string& c : n.children) {
      Totals ct = visit(*by_name.at(c));
      for (int ph = 0; ph < 2; ++ph) {
        for (const auto& [k, v] : ct.count[ph]) t.count[ph][k] += v;
        t.bytes[ph] += ct.bytes[ph];
        t.us[ph] += ct.us[ph];
      }
    }
    out[n.fqn] = t;
    return t;
  };
  visit(r.modules.front());
  return out;
}

nlohmann::json EventJson(const CollectiveEvent& e) {
  return {{"kind", std::string(ToString(e.kind))},
          {"mesh_dim", e.mesh_dim},
          {"groups", e.groups.size()},
          {"group_size", e.group_size()},
          {"bytes_sent_per_rank", e.max_bytes_sent},
          {"bytes_received_per_rank", e.max_bytes_received},
          {"est_us", e.est_us},
          {"from", e.from},
          {"to", e.to},
          {"cause", e.cause},
          {"implicit", e.implicit}};
}

}  // namespace

nlohmann::json ReportToJson(const ModelReport& r) {
  using nlohmann::json;
  const auto totals = Inclusive(r);
  std::map<std::string, const ModuleNode*> by_name;
  for (const ModuleNode& n : r.modules) by_name[n.fqn] = &n;
  const bool per_rank = r.peak_bytes.size() <= 64;
  std::function<json(const ModuleNode&)> node = [&](const ModuleNode& n) {
    json j;
    j["fqn"] = n.fqn;
    j["module_type"] = n.type;
    j["parameters"] = json::array();
    for (const auto& [name, p] : n.parameters) j["parameters"].push_back({name, p});
    j["children"] = json::array();
    for (const std::string& c : n.children) j["children"].push_back(node(*by_name.at(c)));
    const Totals& t = totals.at(n.fqn);
    const char* phase_names[2] = {"forward", "backward"};
    for (int ph = 0; ph < 2; ++ph) {
      json counts = json::array();
      for (const auto& [k, v] : t.count[ph]) counts.push_back({k, v});
      j[std::string("collectives_") + phase_names[ph]] = counts;
      json opsj = json::array();
      for (const OpRecord& op : n.operations[ph]) {
        opsj.push_back({{"name", op.op}, {"placements", op.placements}, {"count", op.count}});
      }
      j[std::string("operations_") + phase_names[ph]] = opsj;
      json events = json::array();
      for (const CollectiveEvent& e : n.collectives[ph]) events.push_back(EventJson(e));
      j[std::string("dtsim_collectives_") + phase_names[ph]] = events;
      j[std::string("dtsim_bytes_") + phase_names[ph]] = t.bytes[ph];
      j[std::string("dtsim_est_us_") + phase_names[ph]] = t.us[ph];
    }
    if (!n.forward_peak_bytes.empty()) {
      const auto mx = std::max_element(n.forward_peak_bytes.begin(), n.forward_peak_bytes.end());
      j["dtsim_forward_peak_bytes"] = {
          {"max", *mx},
          {"max_rank", mx - n.forward_peak_bytes.begin()},
          {"min", *std::min_element(n.forward_peak_bytes.begin(), n.forward_peak_bytes.end())}};
      if (per_rank) j["dtsim_forward_peak_bytes"]["per_rank"] = n.forward_peak_bytes;
    }
    return j;
  };
  json out;
  const LlamaArgs& a = r.options.args;
  out["model"] = {{"dim", a.dim},     {"heads", a.heads},      {"layers", a.layers},
                  {"vocab", a.vocab}, {"ffn", a.ffn_hidden()}, {"seq", a.seq},
                  {"batch", a.batch}};
  out["mesh"] = r.options.mesh.ToString();
  out["plan"] = r.options.plan;
  out["backward"] = r.options.backward;
  out["meta"] = r.options.meta;
  out["tree"] = node(r.modules.front());
  json grads = json::object();
  for (const auto& [k, v] : r.grad_placements) grads[k] = v;
  out["grad_placements"] = grads;
  if (!r.peak_bytes.empty()) {
    const auto mx = std::max_element(r.peak_bytes.begin(), r.peak_bytes.end());
    out["peak_bytes"] = {{"max", *mx}, {"max_rank", mx - r.peak_bytes.begin()}};
    if (per_rank) out["peak_bytes"]["per_rank"] = r.peak_bytes;
  }
  out["seconds"] = r.seconds;
  if (!r.agreement_seconds.empty()) {
    out["dtsim_agreement"] = {
        {"calls", r.agreement_rounds},
        {"seconds_max", *std::max_element(r.agreement_seconds.begin(), r.agreement_seconds.end())}};
    if (per_rank) out["dtsim_agreement"]["seconds_per_rank"] = r.agreement_seconds;
  }
  if (r.loss) out["loss"] = *r.loss;
  if (!r.checks.empty()) {
    json checks = json::array();
    for (const TensorCheck& c : r.checks) {
      checks.push_back({{"name", c.name},
                        {"max_abs_diff", c.max_abs_diff},
                        {"tolerance", c.tolerance},
                        {"ok", c.ok}});
    }
    out["checks"] = checks;
    out["verdict"] = r.ok() ? "OK" : "WRONG";
  }
  return out;
}

std::string ReportToText(const ModelReport& r, bool with_ops) {
  const auto totals = Inclusive(r);
  std::map<std::string, const ModuleNode*> by_name;
  for (const ModuleNode& n : r.modules) by_name[n.fqn] = &n;
  std::ostringstream o;
  const LlamaArgs& a = r.options.args;
  o << "model: Llama dim " << a.dim << ", " << a.heads << " heads, " << a.layers << " layers, ffn "
    << a.ffn_hidden() << ", vocab " << a.vocab << ", seq " << a.seq << ", batch " << a.batch << "; "
    << r.options.mesh.ToString() << "; plan " << r.options.plan
    << (r.options.backward ? "; forward + backward" : "; forward")
    << (r.options.meta ? "; meta" : "") << "\n";
  auto counts = [](const std::map<std::string, int64_t>& c) {
    std::string s;
    for (const auto& [k, v] : c) s += (s.empty() ? "" : ", ") + k + " " + std::to_string(v);
    return s.empty() ? std::string("none") : s;
  };
  std::function<void(const ModuleNode&)> visit = [&](const ModuleNode& n) {
    const std::string pad(2 * n.depth, ' ');
    const Totals& t = totals.at(n.fqn);
    o << pad << n.fqn << (n.type.empty() ? "" : " (" + n.type + ")");
    for (const auto& [name, p] : n.parameters) o << "  " << name << " " << p;
    o << "\n";
    o << pad << "  FORWARD  " << counts(t.count[0]);
    if (!t.count[0].empty()) {
      o << " | " << Bytes(t.bytes[0]) << "/rank, " << std::fixed << std::setprecision(1) << t.us[0]
        << " us";
    }
    if (!n.forward_peak_bytes.empty()) {
      o << " | peak "
        << Bytes(*std::max_element(n.forward_peak_bytes.begin(), n.forward_peak_bytes.end()))
        << "/rank";
    }
    o << "\n";
    if (r.options.backward && !t.count[1].empty()) {
      o << pad << "  BACKWARD " << counts(t.count[1]) << " | " << Bytes(t.bytes[1]) << "/rank, "
        << std::fixed << std::setprecision(1) << t.us[1] << " us\n";
    }
    const char* phase_names[2] = {"fwd", "bwd"};
    for (int ph = 0; ph < 2; ++ph) {
      for (const CollectiveEvent& e : n.collectives[ph]) {
        o << pad << "    " << phase_names[ph] << " " << ToString(e.kind) << " on " << e.mesh_dim
          << " (" << e.groups.size() << " x " << e.group_size() << " ranks) "
          << Bytes(e.max_bytes_sent) << " -> " << Bytes(e.max_bytes_received) << "/rank "
          << std::setprecision(1) << e.est_us << " us  "
          << (e.from.empty() ? "" : e.from + " -> " + e.to + "  ")
          << (e.implicit ? "implicit, " : "") << e.cause << "\n";
      }
      for (const OpRecord& op : with_ops ? n.operations[ph] : std::vector<OpRecord>{}) {
        o << pad << "    " << phase_names[ph] << " op " << op.op << " " << op.placements
          << (op.count > 1 ? " x" + std::to_string(op.count) : "") << "\n";
      }
    }
    for (const std::string& c : n.children) visit(*by_name.at(c));
  };
  visit(r.modules.front());
  if (!r.grad_placements.empty()) {
    // One line per distinct placement, the parameters that have it.
    std::map<std::string, std::vector<std::string>> by_placement;
    for (const auto& [k, v] : r.grad_placements) by_placement[v].push_back(k);
    o << "gradient placements:\n";
    for (const auto& [v, names] : by_placement) {
      o << "  " << v << ":";
      for (const std::string& k : names) o << " " << k;
      o << "\n";
    }
  }
  if (!r.peak_bytes.empty()) {
    const auto mx = std::max_element(r.peak_bytes.begin(), r.peak_bytes.end());
    o << "peak memory: " << Bytes(*mx) << " on rank " << (mx - r.peak_bytes.begin()) << "\n";
  }
  if (!r.agreement_seconds.empty()) {
    const double most = *std::max_element(r.agreement_seconds.begin(), r.agreement_seconds.end());
    o << "time: " << std::setprecision(3) << r.seconds
      << " s on rank 0; collective-order check: " << r.agreement_rounds << " calls, "
      << std::setprecision(1) << most * 1e3 << " ms on the slowest rank (" << std::setprecision(1)
      << (r.seconds > 0 ? 100.0 * most / r.seconds : 0.0) << " % of the run)\n";
  } else {
    o << "time: " << std::setprecision(3) << r.seconds << " s simulated run\n";
  }
  if (r.loss) o << "loss: " << std::setprecision(6) << *r.loss << "\n";
  if (!r.checks.empty()) {
    int bad = 0;
    for (const TensorCheck& c : r.checks) {
      if (!c.ok) {
        ++bad;
        o << "  MISMATCH " << c.name << ": max |diff| " << std::scientific << c.max_abs_diff
          << " > " << c.tolerance << std::fixed << "\n";
      }
    }
    o << "verdict: " << (bad == 0 ? "OK" : "WRONG") << " (" << r.checks.size() - bad << "/"
      << r.checks.size() << " tensors equal to the unsharded model's within 1e-4 x max|value|)\n";
  }
  return o.str();
}

}  // namespace model
}  // namespace dtsim
