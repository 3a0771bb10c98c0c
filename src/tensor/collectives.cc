// The Collectives front (dtsim/tensor/collectives.h): identity and per-rank data helpers, argument
// validation, byte accounting and records — written once for every backend.
//
// Bytes in the records follow the usual ring algorithms (nccl-tests' bus bandwidth factors), per
// rank with group size n: all_reduce sends and receives 2(n-1)/n of the buffer, all_gather and
// reduce_scatter (n-1) chunks, all_to_all everything but the piece it keeps,
// broadcast/scatter/gather/reduce/send-recv the bytes that leave or reach a rank. Ranks in no group
// move nothing (and keep a copy of their input).
#include "dtsim/tensor/collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"
#include "tensor/local_tensor_impl.h"

namespace dtsim {
namespace {

int64_t Bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

std::string Ints(c10::IntArrayRef v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

std::string OpName(CollectiveKind kind) { return std::string(ToString(kind)); }

int64_t NormalizeDim(CollectiveKind kind, int64_t ndim, int64_t dim, const char* field) {
  if (dim < -ndim || dim >= ndim || ndim == 0) {
    throw InputError(field, StrCat(OpName(kind), ": dim ", dim,
                                   " is out of range for a tensor with ", ndim, " dims"));
  }
  return dim < 0 ? dim + ndim : dim;
}

void CheckReduceOp(CollectiveKind kind, at::ScalarType t, ReduceOp op) {
  const bool integral = at::isIntegralType(t, /*includeBool=*/true);
  if ((op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor) && !integral) {
    throw InputError("op", StrCat(OpName(kind), ": reduce op '", ToString(op),
                                  "' needs an integer or bool dtype, got ", t));
  }
  if (op == ReduceOp::kAvg && integral) {
    throw InputError("op",
                     StrCat(OpName(kind), ": reduce op 'avg' needs a floating dtype, got ", t));
  }
  if ((op == ReduceOp::kMin || op == ReduceOp::kMax) && at::isComplexType(t)) {
    throw InputError("op", StrCat(OpName(kind), ": reduce op '", ToString(op),
                                  "' is not defined for complex dtype ", t));
  }
}

}  // namespace

GroupSet GroupSet::AlongMeshDim(const DeviceMesh& mesh, int64_t dim) {
  if (dim < 0 || dim >= mesh.ndim()) {
    throw InputError("mesh dim", StrCat("mesh dim ", dim, " is out of range for mesh ",
                                        mesh.ToString(), " with ", mesh.ndim(), " dims"));
  }
  return GroupSet{mesh.GroupsAlong(dim)};
}

GroupSet GroupSet::Of(std::vector<int64_t> ranks) { return GroupSet{{std::move(ranks)}}; }

std::string GroupSet::ToString() const {
  std::ostringstream out;
  out << "[";
  for (size_t g = 0; g < groups.size(); ++g) {
    out << (g ? ", " : "") << "[";
    for (size_t i = 0; i < groups[g].size(); ++i) out << (i ? ", " : "") << groups[g][i];
    out << "]";
  }
  out << "]";
  return out.str();
}

// ---------------------------------------------------------------------------------------------------------------
// Identity and per-rank data

Collectives::Collectives(std::string backend, int64_t world_size, std::optional<int64_t> rank)
    : backend_(std::move(backend)), world_size_(world_size), rank_(rank) {
  DTSIM_CHECK(!rank || (*rank >= 0 && *rank < world_size), "rank ", rank.value_or(-1), " of world ",
              world_size);
}

int64_t Collectives::rank() const {
  DTSIM_CHECK(rank_.has_value(), "rank() of the simulated backend, which holds every rank");
  return *rank_;
}

std::vector<int64_t> Collectives::HeldRanks(const at::Tensor& local) const {
  if (!local.defined()) throw InputError("input", "the local tensor is undefined");
  if (simulated()) {
    if (!IsLocalTensor(local)) {
      throw InputError(
          "input",
          "the simulated backend holds every rank's data in a LocalTensor (one shard per rank); "
          "got a plain tensor");
    }
    return LocalRanks(local);
  }
  if (IsLocalTensor(local)) {
    throw InputError("input", StrCat("the ", backend_,
                                     " backend holds this rank's plain tensor; got a LocalTensor"));
  }
  return {*rank_};
}

at::Tensor Collectives::Shard(const at::Tensor& local, int64_t rank) const {
  if (simulated()) return LocalShard(local, rank);
  HeldRanks(local);
  if (rank != *rank_) {
    throw InputError("rank",
                     StrCat("rank ", rank, " asked of rank ", *rank_, "'s ", backend_, " data"));
  }
  return local;
}

at::Tensor Collectives::MapShards(const at::Tensor& local, const ShardFn& fn) const {
  if (simulated()) {
    if (!IsLocalTensor(local)) HeldRanks(local);  // throws the InputError
    return dtsim::MapShards(local, fn);
  }
  HeldRanks(local);
  return fn(*rank_, local);
}

at::Tensor Collectives::MapShards(const std::vector<at::Tensor>& locals, const ShardsFn& fn) const {
  if (simulated()) return dtsim::MapShards(locals, fn);
  for (const at::Tensor& t : locals) {
    if (IsLocalTensor(t)) HeldRanks(t);  // refuses
  }
  return fn(*rank_, locals);
}

at::Tensor Collectives::FromRankFn(const std::vector<int64_t>& ranks,
                                   const std::function<at::Tensor(int64_t)>& fn) const {
  if (simulated()) return MakeLocalTensor(ranks, fn, sim_world());
  if (std::find(ranks.begin(), ranks.end(), *rank_) == ranks.end()) {
    throw InputError("ranks", StrCat("rank ", *rank_, " of the ", backend_,
                                     " world is not among the ranks ", Ints(ranks)));
  }
  return fn(*rank_);
}

// ---------------------------------------------------------------------------------------------------------------
// The front

CallInfo Collectives::Begin(CollectiveKind kind, const at::Tensor& input, const GroupSet& groups) {
  if (!input.defined()) throw InputError("input", OpName(kind) + ": the input tensor is undefined");
  CallInfo call;
  call.kind = kind;
  call.groups = &groups;
  call.held = HeldRanks(input);
  call.group.assign(call.held.size(), -1);
  call.position.assign(call.held.size(), -1);
  call.sequence = sequence_++;
  if (groups.groups.empty()) throw InputError("groups", OpName(kind) + ": no groups given");
  const bool pairs = kind == CollectiveKind::kSendRecv;  // pairs may share a sender
  // Ranks seen so far, marked by held slot (simulation) or by rank (a real world's 0..N-1): linear
  // in the ranks.
  std::vector<char> seen(
      simulated() ? call.held.size() : static_cast<size_t>(std::max<int64_t>(world_size_, 0)), 0);
  for (size_t g = 0; g < groups.groups.size(); ++g) {
    const auto& group = groups.groups[g];
    if (group.empty())
      throw InputError("groups", StrCat(OpName(kind), ": an empty group in ", groups.ToString()));
    for (size_t i = 0; i < group.size(); ++i) {
      const int64_t rank = group[i];
      auto it = std::lower_bound(call.held.begin(), call.held.end(), rank);
      const bool held = it != call.held.end() && *it == rank;
      if (simulated() && !held) {
        throw InputError("groups", StrCat(OpName(kind), ": rank ", rank,
                                          " is not held by the input LocalTensor (it "
                                          "holds ranks ",
                                          Ints(call.held), ")"));
      }
      if (!simulated() && (rank < 0 || rank >= world_size_)) {
        throw InputError("groups", StrCat(OpName(kind), ": rank ", rank, " is outside the ",
                                          backend_, " world of ", world_size_, " ranks"));
      }
      const size_t mark =
          simulated() ? static_cast<size_t>(it - call.held.begin()) : static_cast<size_t>(rank);
      if (!pairs && seen[mark]++) {
        throw InputError("groups", StrCat(OpName(kind), ": rank ", rank, " appears twice in ",
                                          groups.ToString()));
      }
      if (held && !pairs) {
        call.group[it - call.held.begin()] = static_cast<int64_t>(g);
        call.position[it - call.held.begin()] = static_cast<int64_t>(i);
      }
    }
  }
  return call;
}

std::vector<at::Tensor> Collectives::ShardsOf(const at::Tensor& local, const CallInfo& call) const {
  if (!simulated()) return {local};
  return LocalShards(local);
}

int64_t Collectives::GroupSize(const CallInfo& call, size_t i) const {
  return call.group[i] < 0 ? 0 : static_cast<int64_t>(call.groups->groups[call.group[i]].size());
}

namespace {

// Simulation sees every rank: the shapes and dtypes within each group must agree (a real backend
// checks the same through CheckAgreement). `dims_from` = 1 compares only the dims after the first
// (all_to_all_single).
void CheckSameShapes(CollectiveKind kind, const CallInfo& call,
                     const std::vector<at::Tensor>& shards, int64_t dims_from = 0) {
  std::vector<int64_t> first(call.groups->groups.size(), -1);
  for (size_t i = 0; i < call.held.size(); ++i) {
    if (call.group[i] < 0) continue;
    int64_t& f = first[call.group[i]];
    if (f < 0) {
      f = static_cast<int64_t>(i);
      continue;
    }
    const at::Tensor& a = shards[f];
    const at::Tensor& b = shards[i];
    const bool same = a.scalar_type() == b.scalar_type() && a.dim() == b.dim() &&
                      a.sizes().slice(std::min<int64_t>(dims_from, a.dim())) ==
                          b.sizes().slice(std::min<int64_t>(dims_from, b.dim()));
    if (!same) {
      throw InputError(
          "input", StrCat(OpName(kind), ": shapes/dtypes differ within group ",
                          Ints(call.groups->groups[call.group[i]]), ": rank ", call.held[f],
                          " has ", Ints(a.sizes()), " ", a.scalar_type(), ", rank ", call.held[i],
                          " has ", Ints(b.sizes()), " ", b.scalar_type()));
    }
  }
}

// Every held rank in a group: its size along `dim` divides evenly by the group size.
void CheckEven(CollectiveKind kind, const CallInfo& call, const std::vector<at::Tensor>& shards,
               int64_t dim, const char* dim_name) {
  for (size_t i = 0; i < call.held.size(); ++i) {
    if (call.group[i] < 0) continue;
    const auto& group = call.groups->groups[call.group[i]];
    const int64_t n = static_cast<int64_t>(group.size());
    const int64_t size = shards[i].size(dim);
    if (size % n != 0) {
      throw InputError("input", StrCat(OpName(kind), ": size ", size, " along ", dim_name, " ", dim,
                                       " does not divide evenly by the group size ", n, " (group ",
                                       Ints(group), "); pad uneven shards first"));
    }
  }
}

void CheckRoot(CollectiveKind kind, const GroupSet& groups, int64_t root, const char* field) {
  for (const auto& group : groups.groups) {
    if (root < 0 || root >= static_cast<int64_t>(group.size())) {
      throw InputError(field, StrCat(OpName(kind), ": group-relative rank ", root,
                                     " is outside group ", Ints(group), " of size ", group.size()));
    }
  }
}

}  // namespace

std::string Collectives::Fingerprint(const CallInfo& call, const at::Tensor& input,
                                     const std::string& args) const {
  // This rank's view of the call; every member of its group must describe the same call:
  // "#2 all_gather on group [3, 7] (of 4 groups), input [3, 1] Float, dim 0".
  std::ostringstream out;
  out << "#" << call.sequence << " " << ToString(call.kind);
  if (!call.group.empty() && call.group[0] >= 0) {
    out << " on group " << Ints(call.groups->groups[call.group[0]]) << " (of "
        << call.groups->groups.size() << " group" << (call.groups->groups.size() == 1 ? "" : "s")
        << ")";
  }
  if (call.kind == CollectiveKind::kAllToAllSingle) {
    out << ", input [rows" << (input.dim() > 1 ? ", " : "")
        << Ints(input.sizes().slice(std::min<int64_t>(1, input.dim()))).substr(1);
  } else if (call.kind != CollectiveKind::kBarrier && call.kind != CollectiveKind::kSendRecv) {
    out << ", input " << Ints(input.sizes());
  }
  out << " " << input.scalar_type() << (args.empty() ? "" : ", ") << args;
  return out.str();
}

// Rank's data one element off: rolled by one along the flattened data; a single element is shifted
// by one in value.
static at::Tensor Shifted(const at::Tensor& x) {
  if (x.numel() > 1) return x.flatten().roll(1).reshape(x.sizes()).contiguous();
  if (x.scalar_type() == at::kBool) return x.logical_not();
  return (x + 1).to(x.scalar_type());
}

void Collectives::EndJob(const std::string& message, int, bool) { throw InternalError(message); }

void Collectives::SetFault(const FaultSpec& fault) {
  if (simulated() && fault.active()) {
    throw InputError("inject-fault",
                     StrCat("faults are injected on real backends (mpi, nccl); the ", backend_,
                            " backend computes every rank at once"));
  }
  if (fault.active() && fault.rank >= world_size_) {
    throw InputError("inject-fault",
                     StrCat("'", fault.ToString(), "' names rank ", fault.rank, ", outside the ",
                            backend_, " world of ", world_size_, " ranks"));
  }
  fault_ = fault;
  fault_seen_ = 0;
  fault_struck_ = false;
}

bool Collectives::Strikes(FaultSpec::Kind kind, bool eligible) {
  if (fault_.kind != kind || fault_struck_ || !eligible || simulated() || fault_.rank != *rank_)
    return false;
  if (fault_seen_++ < fault_.occurrence) return false;
  fault_struck_ = true;
  return true;
}

bool Collectives::SendsData(const CallInfo& call, const at::Tensor& input, int64_t root) const {
  if (simulated() || call.held.size() != 1 || input.numel() == 0) return false;
  const int64_t pos = call.position[0];
  const bool in_group = call.group[0] >= 0 && call.groups->groups[call.group[0]].size() > 1;
  switch (call.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kAllToAllSingle:
      return in_group;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kScatter:
      return in_group && pos == root;
    case CollectiveKind::kReduce:
    case CollectiveKind::kGather:
      return in_group && pos != root;
    default:
      return false;
  }
}

ReduceOp Collectives::OpFor(CallInfo& call, ReduceOp op) {
  const bool in_group =
      !call.held.empty() && call.group[0] >= 0 && call.groups->groups[call.group[0]].size() > 1;
  if (!Strikes(FaultSpec::Kind::kWrongOp, in_group)) return op;
  call.wrong_op = true;
  return op == ReduceOp::kSum ? ReduceOp::kMax : ReduceOp::kSum;
}

at::Tensor Collectives::Run(const CallInfo& call, const at::Tensor& input, const std::string& args,
                            const std::function<at::Tensor(const at::Tensor&)>& body,
                            double* micros, int64_t root) {
  at::Tensor sent = input;
  if (!simulated()) {
    const bool in_group =
        !call.held.empty() && call.group[0] >= 0 && call.groups->groups[call.group[0]].size() > 1;
    if (Strikes(FaultSpec::Kind::kDropRank, in_group)) {
      std::fprintf(stderr, "dtsim: fault injected: rank %lld skips collective #%lld (%s)\n",
                   static_cast<long long>(*rank_), static_cast<long long>(call.sequence),
                   std::string(ToString(call.kind)).c_str());
      SkipCall(call, Fingerprint(call, input, args));
      return input.clone();
    }
    if (Strikes(FaultSpec::Kind::kStallRank, in_group)) {
      std::fprintf(stderr,
                   "dtsim: fault injected: rank %lld sleeps %g s before collective #%lld (%s)\n",
                   static_cast<long long>(*rank_), fault_.seconds,
                   static_cast<long long>(call.sequence), std::string(ToString(call.kind)).c_str());
      std::this_thread::sleep_for(std::chrono::duration<double>(fault_.seconds));
    }
    const auto agree_start = std::chrono::steady_clock::now();
    CheckAgreement(call, Fingerprint(call, input, args));
    agreement_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - agree_start).count();
    ++agreement_rounds_;
    if (Strikes(FaultSpec::Kind::kWrongOffset, SendsData(call, input, root))) sent = Shifted(input);
  }
  // Every rank's copies in this process (the local backend's): LibTorch's threads fitted to the
  // load first, as before each LocalTensor op's ranks.
  if (simulated()) internal::AdaptThreadsToLoad();
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = body(sent);
  *micros =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return out;
}

void Collectives::Finish(const CallInfo& call, const at::Tensor& input, const at::Tensor& output,
                         double micros, const BytesFn& bytes) {
  if (!observed()) return;
  CollectiveEvent record;
  record.kind = call.kind;
  record.groups = call.groups->groups;
  record.ranks = call.held;
  const std::vector<at::Tensor> in = ShardsOf(input, call);
  const std::vector<at::Tensor> out = ShardsOf(output, call);
  for (size_t i = 0; i < call.held.size(); ++i) {
    if (call.kind == CollectiveKind::kBarrier) {
      record.input_shapes.emplace_back();
      record.output_shapes.emplace_back();
    } else {
      record.input_shapes.push_back(in[i].sizes().vec());
      record.output_shapes.push_back(out[i].sizes().vec());
    }
    auto [sent, received] = GroupSize(call, i) > 0 || call.kind == CollectiveKind::kSendRecv
                                ? bytes(i, in[i], out[i])
                                : std::pair<int64_t, int64_t>{0, 0};
    record.bytes_sent.push_back(sent);
    record.bytes_received.push_back(received);
    if (!simulated()) record.time_us.push_back(micros);
  }
  observers_.Notify([&record](CollectiveObserver& observer) { observer.OnCollective(record); });
}

at::Tensor Collectives::AllGather(const at::Tensor& input, const GroupSet& groups, int64_t dim) {
  CallInfo call = Begin(CollectiveKind::kAllGather, input, groups);
  dim = NormalizeDim(call.kind, input.dim(), dim, "dim");
  if (simulated()) CheckSameShapes(call.kind, call, ShardsOf(input, call));
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("dim ", dim),
      [&](const at::Tensor& x) { return DoAllGather(x, call, dim); }, &us);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor&) {
    const int64_t b = (GroupSize(call, i) - 1) * Bytes(x);
    return std::pair<int64_t, int64_t>{b, b};
  });
  return out;
}

at::Tensor Collectives::ReduceScatter(const at::Tensor& input, const GroupSet& groups, ReduceOp op,
                                      int64_t dim) {
  CallInfo call = Begin(CollectiveKind::kReduceScatter, input, groups);
  CheckReduceOp(call.kind, input.scalar_type(), op);
  dim = NormalizeDim(call.kind, input.dim(), dim, "dim");
  const std::vector<at::Tensor> shards = ShardsOf(input, call);
  if (simulated()) CheckSameShapes(call.kind, call, shards);
  CheckEven(call.kind, call, shards, dim, "dim");
  const ReduceOp used = OpFor(call, op);
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("op ", ToString(op), " dim ", dim),
      [&](const at::Tensor& x) { return DoReduceScatter(x, call, used, dim); }, &us);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor&, const at::Tensor& y) {
    const int64_t b = (GroupSize(call, i) - 1) * Bytes(y);
    return std::pair<int64_t, int64_t>{b, b};
  });
  return out;
}

at::Tensor Collectives::AllReduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op) {
  CallInfo call = Begin(CollectiveKind::kAllReduce, input, groups);
  CheckReduceOp(call.kind, input.scalar_type(), op);
  if (simulated()) CheckSameShapes(call.kind, call, ShardsOf(input, call));
  const ReduceOp used = OpFor(call, op);
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("op ", ToString(op)),
      [&](const at::Tensor& x) { return DoAllReduce(x, call, used); }, &us);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor&, const at::Tensor& y) {
    const int64_t n = GroupSize(call, i);
    const int64_t b = 2 * (n - 1) * Bytes(y) / n;
    return std::pair<int64_t, int64_t>{b, b};
  });
  return out;
}

at::Tensor Collectives::Reduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op,
                               int64_t dst) {
  CallInfo call = Begin(CollectiveKind::kReduce, input, groups);
  CheckReduceOp(call.kind, input.scalar_type(), op);
  CheckRoot(call.kind, groups, dst, "dst");
  if (simulated()) CheckSameShapes(call.kind, call, ShardsOf(input, call));
  const ReduceOp used = OpFor(call, op);
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("op ", ToString(op), " dst ", dst),
      [&](const at::Tensor& x) { return DoReduce(x, call, used, dst); }, &us, dst);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor&) {
    if (call.position[i] == dst)
      return std::pair<int64_t, int64_t>{0, (GroupSize(call, i) - 1) * Bytes(x)};
    return std::pair<int64_t, int64_t>{Bytes(x), 0};
  });
  return out;
}

at::Tensor Collectives::AllToAll(const at::Tensor& input, const GroupSet& groups, int64_t split_dim,
                                 int64_t concat_dim) {
  CallInfo call = Begin(CollectiveKind::kAllToAll, input, groups);
  split_dim = NormalizeDim(call.kind, input.dim(), split_dim, "split_dim");
  concat_dim = NormalizeDim(call.kind, input.dim(), concat_dim, "concat_dim");
  const std::vector<at::Tensor> shards = ShardsOf(input, call);
  if (simulated()) CheckSameShapes(call.kind, call, shards);
  CheckEven(call.kind, call, shards, split_dim, "split_dim");
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("split_dim ", split_dim, " concat_dim ", concat_dim),
      [&](const at::Tensor& x) { return DoAllToAll(x, call, split_dim, concat_dim); }, &us);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor& y) {
    const int64_t piece = Bytes(x) / GroupSize(call, i);
    return std::pair<int64_t, int64_t>{Bytes(x) - piece, Bytes(y) - piece};
  });
  return out;
}

at::Tensor Collectives::AllToAllSingle(const at::Tensor& input, const GroupSet& groups,
                                       const SplitSizes& input_split_sizes,
                                       const SplitSizes& output_split_sizes) {
  CallInfo call = Begin(CollectiveKind::kAllToAllSingle, input, groups);
  const std::vector<at::Tensor> shards = ShardsOf(input, call);
  auto check_known = [&](const SplitSizes& sizes, const char* field) {
    for (const auto& [rank, s] : sizes) {
      if (simulated() && !std::binary_search(call.held.begin(), call.held.end(), rank)) {
        throw InputError(field, StrCat(OpName(call.kind), ": rank ", rank,
                                       " is not held by the input LocalTensor (it "
                                       "holds ranks ",
                                       Ints(call.held), ")"));
      }
    }
  };
  check_known(input_split_sizes, "input_split_sizes");
  check_known(output_split_sizes, "output_split_sizes");
  // The held ranks' input splits, checked and completed (even splits when none are given).
  SplitSizes in_splits;
  for (size_t i = 0; i < call.held.size(); ++i) {
    const int64_t rank = call.held[i];
    const at::Tensor& x = shards[i];
    if (x.dim() == 0) {
      throw InputError("input", StrCat(OpName(call.kind), ": needs at least one dim, rank ", rank,
                                       " has a 0-dim tensor"));
    }
    if (call.group[i] < 0) continue;
    const int64_t n = GroupSize(call, i);
    auto it = input_split_sizes.find(rank);
    if (it == input_split_sizes.end()) {
      if (!input_split_sizes.empty()) {
        throw InputError("input_split_sizes", StrCat("no split sizes for rank ", rank));
      }
      if (x.size(0) % n != 0) {
        throw InputError("input", StrCat(OpName(call.kind), ": rank ", rank, " has ", x.size(0),
                                         " rows, which do not split evenly over the group size ", n,
                                         "; give input_split_sizes"));
      }
      in_splits[rank].assign(n, x.size(0) / n);
      continue;
    }
    const std::vector<int64_t>& s = it->second;
    if (static_cast<int64_t>(s.size()) != n) {
      throw InputError("input_split_sizes",
                       StrCat("rank ", rank, " gives ", s.size(), " split sizes ", Ints(s),
                              " for a group of ", n));
    }
    int64_t sum = 0;
    for (int64_t v : s) {
      if (v < 0)
        throw InputError("input_split_sizes",
                         StrCat("rank ", rank, " has a negative split size in ", Ints(s)));
      sum += v;
    }
    if (sum != x.size(0)) {
      throw InputError("input_split_sizes",
                       StrCat("rank ", rank, " split sizes ", Ints(s), " add up to ", sum,
                              " but its input has ", x.size(0), " rows"));
    }
    in_splits[rank] = s;
  }
  SplitSizes out_splits;
  for (size_t i = 0; i < call.held.size(); ++i) {
    if (call.group[i] < 0) continue;
    const int64_t rank = call.held[i];
    auto it = output_split_sizes.find(rank);
    if (it == output_split_sizes.end()) {
      if (!output_split_sizes.empty())
        throw InputError("output_split_sizes", StrCat("no split sizes for rank ", rank));
      continue;
    }
    const auto& group = call.groups->groups[call.group[i]];
    if (it->second.size() != group.size()) {
      throw InputError("output_split_sizes",
                       StrCat("rank ", rank, " gives ", it->second.size(), " split sizes ",
                              Ints(it->second), " for a group of ", group.size()));
    }
    for (int64_t v : it->second) {
      if (v < 0) {
        throw InputError("output_split_sizes",
                         StrCat("rank ", rank, " has a negative split size in ", Ints(it->second)));
      }
    }
    if (simulated()) {
      // Every sender is held: what rank receives must be what the group sends it.
      std::vector<int64_t> sent;
      for (int64_t member : group) sent.push_back(in_splits.at(member)[call.position[i]]);
      if (sent != it->second) {
        throw InputError("output_split_sizes", StrCat("rank ", rank, " expects ", Ints(it->second),
                                                      " but the group sends it ", Ints(sent)));
      }
    }
    out_splits[rank] = it->second;
  }
  if (simulated()) CheckSameShapes(call.kind, call, shards, /*dims_from=*/1);
  double us = 0;
  at::Tensor out = Run(
      call, input, "",
      [&](const at::Tensor& x) { return DoAllToAllSingle(x, call, in_splits, out_splits); }, &us);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor& y) {
    int64_t row = static_cast<int64_t>(x.element_size());
    for (int64_t d = 1; d < x.dim(); ++d) row *= x.size(d);
    const int64_t own = in_splits.at(call.held[i])[call.position[i]] * row;
    return std::pair<int64_t, int64_t>{Bytes(x) - own, Bytes(y) - own};
  });
  return out;
}

at::Tensor Collectives::Broadcast(const at::Tensor& input, const GroupSet& groups, int64_t src) {
  CallInfo call = Begin(CollectiveKind::kBroadcast, input, groups);
  CheckRoot(call.kind, groups, src, "src");
  if (simulated()) CheckSameShapes(call.kind, call, ShardsOf(input, call));
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("src ", src),
      [&](const at::Tensor& x) { return DoBroadcast(x, call, src); }, &us, src);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor& y) {
    if (call.position[i] == src)
      return std::pair<int64_t, int64_t>{(GroupSize(call, i) - 1) * Bytes(x), 0};
    return std::pair<int64_t, int64_t>{0, Bytes(y)};
  });
  return out;
}

at::Tensor Collectives::Scatter(const at::Tensor& input, const GroupSet& groups, int64_t src,
                                int64_t dim) {
  CallInfo call = Begin(CollectiveKind::kScatter, input, groups);
  CheckRoot(call.kind, groups, src, "src");
  dim = NormalizeDim(call.kind, input.dim(), dim, "dim");
  const std::vector<at::Tensor> shards = ShardsOf(input, call);
  if (!simulated())
    CheckEven(call.kind, call, shards, dim, "dim");  // every real rank passes the source's shape
  for (size_t i = 0; i < call.held.size(); ++i) {
    if (call.position[i] != src) continue;
    const int64_t n = GroupSize(call, i);
    if (shards[i].size(dim) % n != 0) {
      throw InputError("input", StrCat(OpName(call.kind), ": size ", shards[i].size(dim),
                                       " along dim ", dim, " of source rank ", call.held[i],
                                       " does not divide evenly by the group size ", n));
    }
  }
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("src ", src, " dim ", dim),
      [&](const at::Tensor& x) { return DoScatter(x, call, src, dim); }, &us, src);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor& y) {
    if (call.position[i] == src) return std::pair<int64_t, int64_t>{Bytes(x) - Bytes(y), 0};
    return std::pair<int64_t, int64_t>{0, Bytes(y)};
  });
  return out;
}

at::Tensor Collectives::Gather(const at::Tensor& input, const GroupSet& groups, int64_t dst,
                               int64_t dim) {
  CallInfo call = Begin(CollectiveKind::kGather, input, groups);
  CheckRoot(call.kind, groups, dst, "dst");
  dim = NormalizeDim(call.kind, input.dim(), dim, "dim");
  if (simulated()) CheckSameShapes(call.kind, call, ShardsOf(input, call));
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat("dst ", dst, " dim ", dim),
      [&](const at::Tensor& x) { return DoGather(x, call, dst, dim); }, &us, dst);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor&) {
    if (call.position[i] == dst)
      return std::pair<int64_t, int64_t>{0, (GroupSize(call, i) - 1) * Bytes(x)};
    return std::pair<int64_t, int64_t>{Bytes(x), 0};
  });
  return out;
}

at::Tensor Collectives::SendRecv(const at::Tensor& input,
                                 const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  GroupSet groups;
  std::set<int64_t> receivers;
  for (const auto& [src, dst] : pairs) {
    if (src == dst) throw InputError("pairs", StrCat("send_recv: rank ", src, " sends to itself"));
    if (!receivers.insert(dst).second) {
      throw InputError("pairs", StrCat("send_recv: rank ", dst, " receives more than once"));
    }
    groups.groups.push_back({src, dst});
  }
  if (pairs.empty()) {
    // Nothing moves; every rank keeps a copy of its input.
    HeldRanks(input);
    at::Tensor out = MapShards(input, [](int64_t, const at::Tensor& s) { return s.clone(); });
    return out;
  }
  CallInfo call;
  try {
    call = Begin(CollectiveKind::kSendRecv, input, groups);
  } catch (const InputError& e) {
    throw InputError("pairs", std::string(e.what()).substr(e.field().size() + 2));
  }
  double us = 0;
  at::Tensor out = Run(
      call, input, StrCat(pairs.size(), " pairs"),
      [&](const at::Tensor& x) { return DoSendRecv(x, call, pairs); }, &us);
  Finish(call, input, out, us, [&](size_t i, const at::Tensor& x, const at::Tensor& y) {
    int64_t sent = 0, received = 0;
    for (const auto& [src, dst] : pairs) {
      if (src == call.held[i]) sent += Bytes(x);
      if (dst == call.held[i]) received += Bytes(y);
    }
    return std::pair<int64_t, int64_t>{sent, received};
  });
  return out;
}

void Collectives::Barrier(const GroupSet& groups, const std::vector<int64_t>& ranks) {
  if (ranks.empty()) throw InputError("ranks", "barrier: no ranks");
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] <= ranks[i - 1]) {
      throw InputError("ranks",
                       StrCat("barrier: ranks must be distinct and ascending, got ", Ints(ranks)));
    }
  }
  const at::Tensor token = FromRankFn(ranks, [](int64_t) { return at::empty({0}); });
  CallInfo call = Begin(CollectiveKind::kBarrier, token, groups);
  double us = 0;
  Run(
      call, token, "",
      [&](const at::Tensor&) {
        DoBarrier(call);
        return token;
      },
      &us);
  Finish(call, token, token, us, [](size_t, const at::Tensor&, const at::Tensor&) {
    return std::pair<int64_t, int64_t>{0, 0};
  });
}

}  // namespace dtsim
