// LocalCollectives: the simulated backend. Each collective is computed exactly over the shards of a LocalTensor,
// group by group, reductions in group-rank order, and reported to the observer in one place (Finish).
//
// Terms: a "call" is one collective on one GroupSet; "slot" i is the i-th rank the input LocalTensor holds; a group's
// "members" are its slots in group order. Ranks the input holds but no group names keep (a copy of) their input.
// Bytes in the records follow the usual ring algorithms (nccl-tests' bus bandwidth factors): all_reduce sends and
// receives 2(n-1)/n of the buffer, all_gather and reduce_scatter (n-1) chunks, all_to_all everything but the piece it
// keeps, broadcast/scatter/gather/reduce/send-recv the bytes that leave or reach a rank.
#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "dtsim/collectives.h"
#include "dtsim/error.h"
#include "dtsim/local_tensor.h"
#include "local_tensor_impl.h"

namespace dtsim {
namespace {

std::string Ints(c10::IntArrayRef v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

int64_t Bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// One collective call being computed: the input's shards by slot, the outputs, the per-slot byte counts.
struct Call {
  std::string op;
  bool local = false;  // input was a LocalTensor (else a plain tensor for CurrentRank())
  std::vector<int64_t> ranks;
  std::vector<at::Tensor> in;
  std::vector<at::Tensor> out;
  std::vector<int64_t> sent;
  std::vector<int64_t> received;
  std::vector<std::vector<size_t>> members;  // per group: slots in group order

  int64_t n(size_t g) const { return static_cast<int64_t>(members[g].size()); }
  std::string GroupText(size_t g) const {
    std::vector<int64_t> r;
    for (size_t s : members[g]) r.push_back(ranks[s]);
    return Ints(r);
  }
};

// The size of each of the group's n equal pieces along `dim` (shapes within the group already agree); an InputError
// naming the group when the size does not divide by n: the caller must pad uneven shards first.
int64_t EvenChunk(const Call& c, size_t g, int64_t dim, const char* dim_name) {
  const int64_t size = c.in[c.members[g][0]].size(dim);
  if (size % c.n(g) != 0) {
    throw InputError("input", StrCat(c.op, ": size ", size, " along ", dim_name, " ", dim,
                                     " does not divide evenly by the group size ", c.n(g), " (group ", c.GroupText(g),
                                     "); pad uneven shards first"));
  }
  return size / c.n(g);
}

class LocalCollectives : public Collectives {
 public:
  at::Tensor AllGather(const at::Tensor& input, const GroupSet& groups, int64_t dim) override {
    Call c = Begin("all_gather", input, groups);
    dim = NormalizeDim(c, dim, "dim");
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckSameShapes(c, g);
      const auto& m = c.members[g];
      const at::Tensor& first = c.in[m[0]];
      const int64_t piece = first.size(dim);
      std::vector<int64_t> shape(first.sizes().begin(), first.sizes().end());
      shape[dim] = piece * c.n(g);
      for (size_t dst : m) {
        at::Tensor out = at::empty(shape, first.options().memory_format(at::MemoryFormat::Contiguous));
        for (size_t k = 0; k < m.size(); ++k) out.narrow(dim, k * piece, piece).copy_(c.in[m[k]]);
        c.out[dst] = std::move(out);
        c.sent[dst] = (c.n(g) - 1) * Bytes(c.in[dst]);
        c.received[dst] = (c.n(g) - 1) * Bytes(c.in[dst]);
      }
    }
    return Finish(c, groups);
  }

  at::Tensor ReduceScatter(const at::Tensor& input, const GroupSet& groups, ReduceOp op, int64_t dim) override {
    Call c = Begin("reduce_scatter", input, groups);
    CheckReduceOp(c, op);
    dim = NormalizeDim(c, dim, "dim");
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckSameShapes(c, g);
      const auto& m = c.members[g];
      const int64_t chunk = EvenChunk(c, g, dim, "dim");
      for (size_t i = 0; i < m.size(); ++i) {
        std::vector<at::Tensor> pieces;
        for (size_t s : m) pieces.push_back(c.in[s].narrow(dim, i * chunk, chunk));
        c.out[m[i]] = ReduceTensors(pieces, op);
        c.sent[m[i]] = c.received[m[i]] = (c.n(g) - 1) * Bytes(c.out[m[i]]);
      }
    }
    return Finish(c, groups);
  }

  at::Tensor AllReduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op) override {
    Call c = Begin("all_reduce", input, groups);
    CheckReduceOp(c, op);
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckSameShapes(c, g);
      const auto& m = c.members[g];
      std::vector<at::Tensor> xs;
      for (size_t s : m) xs.push_back(c.in[s]);
      at::Tensor red = ReduceTensors(xs, op);
      for (size_t k = 0; k < m.size(); ++k) {
        c.out[m[k]] = k + 1 == m.size() ? red : red.clone();
        c.sent[m[k]] = c.received[m[k]] = 2 * (c.n(g) - 1) * Bytes(red) / c.n(g);
      }
    }
    return Finish(c, groups);
  }

  at::Tensor Reduce(const at::Tensor& input, const GroupSet& groups, ReduceOp op, int64_t dst) override {
    Call c = Begin("reduce", input, groups);
    CheckReduceOp(c, op);
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckSameShapes(c, g);
      CheckRoot(c, g, dst, "dst");
      const auto& m = c.members[g];
      std::vector<at::Tensor> xs;
      for (size_t s : m) xs.push_back(c.in[s]);
      c.out[m[dst]] = ReduceTensors(xs, op);
      for (size_t k = 0; k < m.size(); ++k) {
        if (static_cast<int64_t>(k) != dst) c.sent[m[k]] = Bytes(c.in[m[k]]);
      }
      c.received[m[dst]] = (c.n(g) - 1) * Bytes(c.in[m[dst]]);
    }
    return Finish(c, groups);
  }

  at::Tensor AllToAll(const at::Tensor& input, const GroupSet& groups, int64_t split_dim,
                      int64_t concat_dim) override {
    Call c = Begin("all_to_all", input, groups);
    split_dim = NormalizeDim(c, split_dim, "split_dim");
    concat_dim = NormalizeDim(c, concat_dim, "concat_dim");
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckSameShapes(c, g);
      const auto& m = c.members[g];
      const int64_t chunk = EvenChunk(c, g, split_dim, "split_dim");
      for (size_t j = 0; j < m.size(); ++j) {
        std::vector<at::Tensor> pieces;
        for (size_t s : m) pieces.push_back(c.in[s].narrow(split_dim, j * chunk, chunk));
        c.out[m[j]] = at::cat(pieces, concat_dim);
        int64_t piece_bytes = Bytes(pieces[j]);
        c.sent[m[j]] = Bytes(c.in[m[j]]) - piece_bytes;
        c.received[m[j]] = Bytes(c.out[m[j]]) - piece_bytes;
      }
    }
    return Finish(c, groups);
  }

  at::Tensor AllToAllSingle(const at::Tensor& input, const GroupSet& groups, const SplitSizes& input_split_sizes,
                            const SplitSizes& output_split_sizes) override {
    Call c = Begin("all_to_all_single", input, groups);
    for (const auto& [rank, sizes] : input_split_sizes) CheckHeld(c, rank, "input_split_sizes");
    for (const auto& [rank, sizes] : output_split_sizes) CheckHeld(c, rank, "output_split_sizes");
    for (size_t g = 0; g < c.members.size(); ++g) {
      const auto& m = c.members[g];
      const int64_t n = c.n(g);
      // splits[k][j]: rows group rank k sends to group rank j.
      std::vector<std::vector<int64_t>> splits(m.size());
      for (size_t k = 0; k < m.size(); ++k) {
        const at::Tensor& x = c.in[m[k]];
        if (x.dim() == 0) throw InputError("input", StrCat(c.op, ": needs at least one dim, rank ", c.ranks[m[k]],
                                                           " has a 0-dim tensor"));
        if (x.sizes().slice(1) != c.in[m[0]].sizes().slice(1) || x.scalar_type() != c.in[m[0]].scalar_type()) {
          throw InputError("input", StrCat(c.op, ": shapes beyond dim 0 differ within group ", c.GroupText(g),
                                           ": rank ", c.ranks[m[0]], " has ", Ints(c.in[m[0]].sizes()), ", rank ",
                                           c.ranks[m[k]], " has ", Ints(x.sizes())));
        }
        auto it = input_split_sizes.find(c.ranks[m[k]]);
        if (it == input_split_sizes.end()) {
          if (!input_split_sizes.empty()) {
            throw InputError("input_split_sizes", StrCat("no split sizes for rank ", c.ranks[m[k]]));
          }
          if (x.size(0) % n != 0) {
            throw InputError("input", StrCat(c.op, ": rank ", c.ranks[m[k]], " has ", x.size(0),
                                             " rows, which do not split evenly over the group size ", n,
                                             "; give input_split_sizes"));
          }
          splits[k].assign(m.size(), x.size(0) / n);
        } else {
          splits[k] = it->second;
          if (static_cast<int64_t>(splits[k].size()) != n) {
            throw InputError("input_split_sizes", StrCat("rank ", c.ranks[m[k]], " gives ", splits[k].size(),
                                                         " split sizes ", Ints(splits[k]), " for a group of ", n));
          }
          int64_t sum = 0;
          for (int64_t s : splits[k]) {
            if (s < 0) throw InputError("input_split_sizes", StrCat("rank ", c.ranks[m[k]], " has a negative split "
                                                                    "size in ", Ints(splits[k])));
            sum += s;
          }
          if (sum != x.size(0)) {
            throw InputError("input_split_sizes", StrCat("rank ", c.ranks[m[k]], " split sizes ", Ints(splits[k]),
                                                         " add up to ", sum, " but its input has ", x.size(0),
                                                         " rows"));
          }
        }
      }
      for (size_t j = 0; j < m.size(); ++j) {
        auto it = output_split_sizes.find(c.ranks[m[j]]);
        if (it == output_split_sizes.end()) {
          if (!output_split_sizes.empty()) {
            throw InputError("output_split_sizes", StrCat("no split sizes for rank ", c.ranks[m[j]]));
          }
          continue;
        }
        for (size_t k = 0; k < m.size(); ++k) {
          if (it->second.size() != m.size() || it->second[k] != splits[k][j]) {
            throw InputError("output_split_sizes",
                             StrCat("rank ", c.ranks[m[j]], " expects ", Ints(it->second), " but the group sends it ",
                                    Ints([&] {
                                      std::vector<int64_t> v;
                                      for (size_t kk = 0; kk < m.size(); ++kk) v.push_back(splits[kk][j]);
                                      return v;
                                    }())));
          }
        }
      }
      for (size_t j = 0; j < m.size(); ++j) {
        std::vector<at::Tensor> pieces;
        for (size_t k = 0; k < m.size(); ++k) {
          int64_t offset = std::accumulate(splits[k].begin(), splits[k].begin() + j, int64_t{0});
          pieces.push_back(c.in[m[k]].narrow(0, offset, splits[k][j]));
        }
        c.out[m[j]] = at::cat(pieces, 0);
        c.received[m[j]] = Bytes(c.out[m[j]]) - Bytes(pieces[j]);
        int64_t own = 0;
        {
          int64_t offset = std::accumulate(splits[j].begin(), splits[j].begin() + j, int64_t{0});
          own = Bytes(c.in[m[j]].narrow(0, offset, splits[j][j]));
        }
        c.sent[m[j]] = Bytes(c.in[m[j]]) - own;
      }
    }
    return Finish(c, groups);
  }

  at::Tensor Broadcast(const at::Tensor& input, const GroupSet& groups, int64_t src) override {
    Call c = Begin("broadcast", input, groups);
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckSameShapes(c, g);
      CheckRoot(c, g, src, "src");
      const auto& m = c.members[g];
      for (size_t k = 0; k < m.size(); ++k) {
        c.out[m[k]] = c.in[m[src]].clone();
        if (static_cast<int64_t>(k) != src) c.received[m[k]] = Bytes(c.in[m[src]]);
      }
      c.sent[m[src]] = (c.n(g) - 1) * Bytes(c.in[m[src]]);
    }
    return Finish(c, groups);
  }

  at::Tensor Scatter(const at::Tensor& input, const GroupSet& groups, int64_t src, int64_t dim) override {
    Call c = Begin("scatter", input, groups);
    dim = NormalizeDim(c, dim, "dim");
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckRoot(c, g, src, "src");
      const auto& m = c.members[g];
      const at::Tensor& x = c.in[m[src]];
      if (x.size(dim) % c.n(g) != 0) {
        throw InputError("input", StrCat(c.op, ": size ", x.size(dim), " along dim ", dim, " of source rank ",
                                         c.ranks[m[src]], " does not divide evenly by the group size ", c.n(g)));
      }
      const int64_t chunk = x.size(dim) / c.n(g);
      for (size_t k = 0; k < m.size(); ++k) {
        c.out[m[k]] = x.narrow(dim, k * chunk, chunk).clone(at::MemoryFormat::Contiguous);
        if (static_cast<int64_t>(k) != src) c.received[m[k]] = Bytes(c.out[m[k]]);
      }
      c.sent[m[src]] = Bytes(x) - Bytes(c.out[m[src]]);
    }
    return Finish(c, groups);
  }

  at::Tensor Gather(const at::Tensor& input, const GroupSet& groups, int64_t dst, int64_t dim) override {
    Call c = Begin("gather", input, groups);
    dim = NormalizeDim(c, dim, "dim");
    for (size_t g = 0; g < c.members.size(); ++g) {
      CheckSameShapes(c, g);
      CheckRoot(c, g, dst, "dst");
      const auto& m = c.members[g];
      std::vector<at::Tensor> xs;
      for (size_t s : m) xs.push_back(c.in[s]);
      c.out[m[dst]] = at::cat(xs, dim);
      for (size_t k = 0; k < m.size(); ++k) {
        if (static_cast<int64_t>(k) != dst) c.sent[m[k]] = Bytes(c.in[m[k]]);
      }
      c.received[m[dst]] = (c.n(g) - 1) * Bytes(c.in[m[dst]]);
    }
    return Finish(c, groups);
  }

  at::Tensor SendRecv(const at::Tensor& input, const std::vector<std::pair<int64_t, int64_t>>& pairs) override {
    GroupSet groups;
    std::set<int64_t> receivers;
    for (const auto& [src, dst] : pairs) {
      if (src == dst) throw InputError("pairs", StrCat("send_recv: rank ", src, " sends to itself"));
      if (!receivers.insert(dst).second) {
        throw InputError("pairs", StrCat("send_recv: rank ", dst, " receives more than once"));
      }
      groups.groups.push_back({src, dst});
    }
    Call c = Begin("send_recv", input, GroupSet{}, /*check_groups=*/false);
    c.members.clear();
    for (const auto& [src, dst] : pairs) {
      size_t s = CheckHeld(c, src, "pairs");
      size_t d = CheckHeld(c, dst, "pairs");
      c.out[d] = c.in[s].clone();
      c.sent[s] += Bytes(c.in[s]);
      c.received[d] += Bytes(c.in[s]);
    }
    return Finish(c, groups);
  }

  void Barrier(const GroupSet& groups, const std::vector<int64_t>& ranks) override {
    std::vector<at::Tensor> shards(ranks.size(), at::empty({0}));
    for (size_t i = 1; i < ranks.size(); ++i) {
      if (ranks[i] <= ranks[i - 1]) {
        throw InputError("ranks", StrCat("barrier: ranks must be distinct and ascending, got ", Ints(ranks)));
      }
    }
    if (ranks.empty()) throw InputError("ranks", "barrier: no ranks");
    at::Tensor token = internal::WrapShards(ranks, shards);
    Call c = Begin("barrier", token, groups);
    CollectiveRecord record;
    record.op = c.op;
    record.groups = groups;
    record.ranks = c.ranks;
    record.input_shapes.assign(c.ranks.size(), {});
    record.output_shapes.assign(c.ranks.size(), {});
    record.bytes_sent.assign(c.ranks.size(), 0);
    record.bytes_received.assign(c.ranks.size(), 0);
    Notify(record);
  }

 private:
  // Reads the input's shards and checks the groups: non-empty, disjoint, every rank held by the input.
  Call Begin(const std::string& op, const at::Tensor& input, const GroupSet& groups, bool check_groups = true) {
    if (!input.defined()) throw InputError("input", op + ": the input tensor is undefined");
    Call c;
    c.op = op;
    c.local = IsLocalTensor(input);
    c.ranks = LocalRanks(input);
    c.in = LocalShards(input);
    c.out.resize(c.in.size());
    c.sent.assign(c.in.size(), 0);
    c.received.assign(c.in.size(), 0);
    if (!check_groups) return c;
    if (groups.groups.empty()) throw InputError("groups", op + ": no groups given");
    std::set<int64_t> seen;
    for (const auto& group : groups.groups) {
      if (group.empty()) throw InputError("groups", StrCat(op, ": an empty group in ", groups.ToString()));
      std::vector<size_t> members;
      for (int64_t rank : group) {
        if (!seen.insert(rank).second) {
          throw InputError("groups", StrCat(op, ": rank ", rank, " appears twice in ", groups.ToString()));
        }
        members.push_back(CheckHeld(c, rank, "groups"));
      }
      c.members.push_back(std::move(members));
    }
    return c;
  }

  static size_t CheckHeld(const Call& c, int64_t rank, const char* field) {
    auto it = std::lower_bound(c.ranks.begin(), c.ranks.end(), rank);
    if (it == c.ranks.end() || *it != rank) {
      throw InputError(field, StrCat(c.op, ": rank ", rank, " is not held by the input ",
                                     c.local ? "LocalTensor" : "tensor", " (it holds ranks ", Ints(c.ranks), ")"));
    }
    return it - c.ranks.begin();
  }

  static void CheckSameShapes(const Call& c, size_t g) {
    const auto& m = c.members[g];
    const at::Tensor& first = c.in[m[0]];
    for (size_t s : m) {
      if (c.in[s].sizes() != first.sizes() || c.in[s].scalar_type() != first.scalar_type()) {
        throw InputError("input", StrCat(c.op, ": shapes/dtypes differ within group ", c.GroupText(g), ": rank ",
                                         c.ranks[m[0]], " has ", Ints(first.sizes()), " ", first.scalar_type(),
                                         ", rank ", c.ranks[s], " has ", Ints(c.in[s].sizes()), " ",
                                         c.in[s].scalar_type()));
      }
    }
  }

  static void CheckRoot(const Call& c, size_t g, int64_t root, const char* field) {
    if (root < 0 || root >= c.n(g)) {
      throw InputError(field, StrCat(c.op, ": group-relative rank ", root, " is outside group ", c.GroupText(g),
                                     " of size ", c.n(g)));
    }
  }

  static int64_t NormalizeDim(const Call& c, int64_t dim, const char* field) {
    const int64_t ndim = c.in[0].dim();
    if (dim < -ndim || dim >= ndim || ndim == 0) {
      throw InputError(field, StrCat(c.op, ": dim ", dim, " is out of range for a tensor with ", ndim, " dims"));
    }
    return dim < 0 ? dim + ndim : dim;
  }

  static void CheckReduceOp(const Call& c, ReduceOp op) {
    const at::ScalarType t = c.in[0].scalar_type();
    const bool integral = at::isIntegralType(t, /*includeBool=*/true);
    if ((op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor) && !integral) {
      throw InputError("op", StrCat(c.op, ": reduce op '", ToString(op), "' needs an integer or bool dtype, got ", t));
    }
    if (op == ReduceOp::kAvg && integral) {
      throw InputError("op", StrCat(c.op, ": reduce op 'avg' needs a floating dtype, got ", t));
    }
    if ((op == ReduceOp::kMin || op == ReduceOp::kMax) && at::isComplexType(t)) {
      throw InputError("op", StrCat(c.op, ": reduce op '", ToString(op), "' is not defined for complex dtype ", t));
    }
  }

  // Reduces in order xs[0] op xs[1] op ... (group-rank order), into a fresh contiguous tensor.
  static at::Tensor ReduceTensors(const std::vector<at::Tensor>& xs, ReduceOp op) {
    at::Tensor acc = xs[0].clone(at::MemoryFormat::Contiguous);
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
    if (op == ReduceOp::kAvg) acc.div_(static_cast<double>(xs.size()));
    return acc;
  }

  // Ranks outside every group keep a copy of their input; builds the record, notifies, wraps the output.
  at::Tensor Finish(Call& c, const GroupSet& groups) {
    for (size_t s = 0; s < c.out.size(); ++s) {
      if (!c.out[s].defined()) c.out[s] = c.in[s].clone();
    }
    CollectiveRecord record;
    record.op = c.op;
    record.groups = groups;
    record.ranks = c.ranks;
    for (size_t s = 0; s < c.in.size(); ++s) {
      record.input_shapes.emplace_back(c.in[s].sizes().begin(), c.in[s].sizes().end());
      record.output_shapes.emplace_back(c.out[s].sizes().begin(), c.out[s].sizes().end());
    }
    record.bytes_sent = c.sent;
    record.bytes_received = c.received;
    Notify(record);
    if (!c.local) return c.out[0];
    return internal::WrapShards(c.ranks, std::move(c.out));
  }
};

}  // namespace

std::unique_ptr<Collectives> MakeLocalCollectives() { return std::make_unique<LocalCollectives>(); }

}  // namespace dtsim
