// MpiCollectives (see include/dtsim/backends/mpi_collectives.h). The front
// (src/tensor/collectives.cc) has validated the call, checked the fault plan and accounts the
// bytes; this file moves the data with MPI on the communicator of this rank's group (mpi_world.h)
// while the group agrees on the call: CheckAgreement only starts the check, every MPI call here is
// begun non-blocking and awaited together with it (Await), so the check's round overlaps the data
// movement instead of preceding it.
#include "dtsim/backends/mpi_collectives.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "mpi_world.h"

namespace dtsim {
namespace {

using internal::MpiLaunchedCollectives;
using internal::MpiWorld;

constexpr int kSendRecvTag = 7310;
constexpr int kMaxDims = 64;

int Count(int64_t bytes) {
  if (bytes > INT_MAX) {
    throw InputError("input", StrCat("mpi: a message of ", bytes,
                                     " bytes is over the 2^31-1 bytes one MPI call "
                                     "sends here; use a smaller tensor or more ranks"));
  }
  return static_cast<int>(bytes);
}

int64_t Bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

void Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  MpiWorld::Get().Abort(StrCat(what, " failed: ", std::string(text, len)));
}

// MPI's datatype for `t` where its reductions are exact and order-independent here, or
// MPI_DATATYPE_NULL.
MPI_Datatype NativeType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kChar:
      return MPI_INT8_T;
    case at::kShort:
      return MPI_INT16_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

// MPI's op for `op` on `t`, or MPI_OP_NULL where the result would depend on the reduction order or
// MPI lacks it.
MPI_Op NativeOp(at::ScalarType t, ReduceOp op) {
  if (NativeType(t) == MPI_DATATYPE_NULL) return MPI_OP_NULL;
  const bool floating = at::isFloatingType(t);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // sum, then divide
      return MPI_SUM;
    case ReduceOp::kProduct:
      return floating ? MPI_OP_NULL
                      : MPI_PROD;  // a float product rounds differently in another order
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kBand:
      return floating ? MPI_OP_NULL : MPI_BAND;
    case ReduceOp::kBor:
      return floating ? MPI_OP_NULL : MPI_BOR;
    case ReduceOp::kBxor:
      return floating ? MPI_OP_NULL : MPI_BXOR;
  }
  return MPI_OP_NULL;
}

// The n pieces of `x` along `dim` stacked along a new dim 0, contiguous: [n, ...piece].
at::Tensor StackPieces(const at::Tensor& x, int64_t n, int64_t dim) {
  return at::stack(x.chunk(n, dim), 0).contiguous();
}

class MpiCollectives : public MpiLaunchedCollectives {
 public:
  explicit MpiCollectives(const RealBackendOptions& options)
      : MpiLaunchedCollectives("mpi", options) {
    // Ranks on one host share its cores: give each an equal share of LibTorch's intra-op threads.
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int64_t per_host = local ? std::max(1, std::atoi(local)) : 1;
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    at::set_num_threads(static_cast<int>(std::max<int64_t>(1, cores / per_host)));
  }

 protected:
  void CheckAgreement(const CallInfo& call, const std::string& fingerprint) override {
    MpiWorld::Get().StartAgreementOnCall(call, fingerprint, options_.timeout_s);
  }

  at::Tensor DoAllGather(const at::Tensor& input, const CallInfo& call, int64_t dim) override {
    const int64_t n = GroupSize(call);
    if (n <= 1) return input.clone();
    at::Tensor stacked = GatherStacked(input, call);
    if (dim == 0) return stacked.reshape(Concatenated(input, 0, n));
    return at::cat(stacked.unbind(0), dim);
  }

  at::Tensor DoReduceScatter(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                             int64_t dim) override {
    const int64_t n = GroupSize(call);
    if (n <= 1) return input.clone();
    const int64_t chunk = input.size(dim) / n;
    if (Ordered(input, op)) {
      std::vector<at::Tensor> all = GatherStacked(input, call).unbind(0);
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& x : all)
        pieces.push_back(x.narrow(dim, Position(call) * chunk, chunk));
      return ReduceInOrder(pieces, op);
    }
    at::Tensor send = dim == 0 ? input.contiguous() : StackPieces(input, n, dim);
    std::vector<int64_t> shape = input.sizes().vec();
    shape[dim] = chunk;
    at::Tensor out = at::empty(shape, input.options());
    MPI_Request request;
    Check(MPI_Ireduce_scatter_block(send.data_ptr(), out.data_ptr(), Count(out.numel()),
                                    NativeType(input.scalar_type()),
                                    NativeOp(input.scalar_type(), op), MpiComm(call), &request),
          "MPI_Ireduce_scatter_block");
    Await(request, "MPI_Ireduce_scatter_block");
    if (op == ReduceOp::kAvg) out.div_(static_cast<double>(n));
    return out;
  }

  at::Tensor DoAllReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op) override {
    const int64_t n = GroupSize(call);
    if (n <= 1) return input.clone();
    if (Ordered(input, op)) return ReduceInOrder(GatherStacked(input, call).unbind(0), op);
    at::Tensor x = input.contiguous();
    at::Tensor out = at::empty_like(x);
    MPI_Request request;
    Check(
        MPI_Iallreduce(x.data_ptr(), out.data_ptr(), Count(x.numel()), NativeType(x.scalar_type()),
                       NativeOp(x.scalar_type(), op), MpiComm(call), &request),
        "MPI_Iallreduce");
    Await(request, "MPI_Iallreduce");
    if (op == ReduceOp::kAvg) out.div_(static_cast<double>(n));
    return out;
  }

  at::Tensor DoReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                      int64_t dst) override {
    const int64_t n = GroupSize(call);
    if (n <= 1) return input.clone();
    const bool root = Position(call) == dst;
    if (Ordered(input, op)) {
      at::Tensor stacked = GatherStackedTo(input, call, dst);
      return root ? ReduceInOrder(stacked.unbind(0), op) : input.clone();
    }
    at::Tensor send = input.contiguous();
    at::Tensor out = root ? at::empty_like(send) : input.clone();
    MPI_Request request;
    Check(MPI_Ireduce(send.data_ptr(), root ? out.data_ptr() : nullptr, Count(send.numel()),
                      NativeType(input.scalar_type()), NativeOp(input.scalar_type(), op),
                      static_cast<int>(dst), MpiComm(call), &request),
          "MPI_Ireduce");
    Await(request, "MPI_Ireduce");
    if (root && op == ReduceOp::kAvg) out.div_(static_cast<double>(n));
    return out;
  }

  at::Tensor DoAllToAll(const at::Tensor& input, const CallInfo& call, int64_t split_dim,
                        int64_t concat_dim) override {
    const int64_t n = GroupSize(call);
    if (n <= 1) return input.clone();
    at::Tensor send = StackPieces(input, n, split_dim);
    at::Tensor recv = at::empty_like(send);
    const int piece = Count(Bytes(send) / n);
    MPI_Request request;
    Check(MPI_Ialltoall(send.data_ptr(), piece, MPI_BYTE, recv.data_ptr(), piece, MPI_BYTE,
                        MpiComm(call), &request),
          "MPI_Ialltoall");
    Await(request, "MPI_Ialltoall");
    return at::cat(recv.unbind(0), concat_dim);
  }

  at::Tensor DoAllToAllSingle(const at::Tensor& input, const CallInfo& call,
                              const SplitSizes& input_splits,
                              const SplitSizes& output_splits) override {
    const int64_t n = GroupSize(call);
    if (n <= 1) return input.clone();
    at::Tensor x = input.contiguous();
    int64_t row = x.element_size();
    for (int64_t d = 1; d < x.dim(); ++d) row *= x.size(d);
    const std::vector<int64_t>& mine = input_splits.at(rank());
    std::vector<int64_t> theirs(n);
    MPI_Request request;
    Check(MPI_Ialltoall(mine.data(), 1, MPI_INT64_T, theirs.data(), 1, MPI_INT64_T, MpiComm(call),
                        &request),
          "MPI_Ialltoall");
    Await(request, "MPI_Ialltoall");
    auto expected = output_splits.find(rank());
    if (expected != output_splits.end() && expected->second != theirs) {
      MpiWorld::Get().Abort(StrCat("all_to_all_single: rank ", rank(), " expects ",
                                   IntListToString(expected->second),
                                   " rows but the group sends it ", IntListToString(theirs)));
    }
    std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
    int64_t s = 0, r = 0;
    for (int64_t j = 0; j < n; ++j) {
      send_counts[j] = Count(mine[j] * row);
      send_displs[j] = Count(s);
      s += mine[j] * row;
      recv_counts[j] = Count(theirs[j] * row);
      recv_displs[j] = Count(r);
      r += theirs[j] * row;
    }
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] = std::accumulate(theirs.begin(), theirs.end(), int64_t{0});
    at::Tensor out = at::empty(shape, x.options());
    Check(MPI_Ialltoallv(x.data_ptr(), send_counts.data(), send_displs.data(), MPI_BYTE,
                         out.data_ptr(), recv_counts.data(), recv_displs.data(), MPI_BYTE,
                         MpiComm(call), &request),
          "MPI_Ialltoallv");
    Await(request, "MPI_Ialltoallv");
    return out;
  }

  at::Tensor DoBroadcast(const at::Tensor& input, const CallInfo& call, int64_t src) override {
    if (GroupSize(call) <= 1) return input.clone();
    at::Tensor out = input.clone(at::MemoryFormat::Contiguous);
    MPI_Request request;
    Check(MPI_Ibcast(out.data_ptr(), Count(Bytes(out)), MPI_BYTE, static_cast<int>(src),
                     MpiComm(call), &request),
          "MPI_Ibcast");
    Await(request, "MPI_Ibcast");
    return out;
  }

  at::Tensor DoScatter(const at::Tensor& input, const CallInfo& call, int64_t src,
                       int64_t dim) override {
    const int64_t n = GroupSize(call);
    if (n <= 1) return input.clone();
    std::vector<int64_t> shape = input.sizes().vec();
    shape[dim] /= n;
    at::Tensor out = at::empty(shape, input.options());
    at::Tensor send = Position(call) == src ? StackPieces(input, n, dim) : at::Tensor();
    MPI_Request request;
    Check(MPI_Iscatter(send.defined() ? send.data_ptr() : nullptr, Count(Bytes(out)), MPI_BYTE,
                       out.data_ptr(), Count(Bytes(out)), MPI_BYTE, static_cast<int>(src),
                       MpiComm(call), &request),
          "MPI_Iscatter");
    Await(request, "MPI_Iscatter");
    return out;
  }

  at::Tensor DoGather(const at::Tensor& input, const CallInfo& call, int64_t dst,
                      int64_t dim) override {
    if (GroupSize(call) <= 1) return input.clone();
    at::Tensor stacked = GatherStackedTo(input, call, dst);
    return Position(call) == dst ? at::cat(stacked.unbind(0), dim) : input.clone();
  }

  at::Tensor DoSendRecv(const at::Tensor& input, const CallInfo&,
                        const std::vector<std::pair<int64_t, int64_t>>& pairs) override {
    at::Tensor x = input.contiguous();
    std::vector<int64_t> header(1 + x.dim());
    header[0] = x.dim();
    for (int64_t d = 0; d < x.dim(); ++d) header[1 + d] = x.size(d);
    std::vector<MPI_Request> sends;
    for (const auto& [src, dst] : pairs) {
      if (src != rank()) continue;
      sends.emplace_back();
      Check(MPI_Isend(header.data(), static_cast<int>(header.size()), MPI_INT64_T,
                      static_cast<int>(dst), kSendRecvTag, MPI_COMM_WORLD, &sends.back()),
            "MPI_Isend");
      sends.emplace_back();
      Check(MPI_Isend(x.data_ptr(), Count(Bytes(x)), MPI_BYTE, static_cast<int>(dst),
                      kSendRecvTag + 1, MPI_COMM_WORLD, &sends.back()),
            "MPI_Isend");
    }
    at::Tensor out;
    for (const auto& [src, dst] : pairs) {
      if (dst != rank()) continue;
      std::vector<int64_t> got(1 + kMaxDims);
      std::vector<MPI_Request> recv(1);
      Check(MPI_Irecv(got.data(), static_cast<int>(got.size()), MPI_INT64_T, static_cast<int>(src),
                      kSendRecvTag, MPI_COMM_WORLD, &recv[0]),
            "MPI_Irecv");
      Await(recv, "MPI_Irecv");
      std::vector<int64_t> shape(got.begin() + 1, got.begin() + 1 + got[0]);
      out = at::empty(shape, x.options());
      Check(MPI_Irecv(out.data_ptr(), Count(Bytes(out)), MPI_BYTE, static_cast<int>(src),
                      kSendRecvTag + 1, MPI_COMM_WORLD, &recv[0]),
            "MPI_Irecv");
      Await(recv, "MPI_Irecv");
    }
    Await(sends, "MPI_Isend");
    return out.defined() ? out : input.clone();
  }

  void DoBarrier(const CallInfo& call) override {
    if (GroupSize(call) <= 1) return;
    MPI_Request request;
    Check(MPI_Ibarrier(MpiComm(call), &request), "MPI_Ibarrier");
    Await(request, "MPI_Ibarrier");
  }

 private:
  // Waits for the MPI call begun in `requests` together with the agreement check begun before it
  // (MpiWorld::Wait); the time it waited for the check alone counts as the check's.
  void Await(std::vector<MPI_Request>& requests, const char* what) {
    AddAgreementSeconds(MpiWorld::Get().Wait(requests, what));
  }
  void Await(MPI_Request& request, const char* what) {
    std::vector<MPI_Request> requests{request};
    Await(requests, what);
  }

  // Reductions in group-rank order (the simulation's ReduceInOrder) where MPI's op is not exact and
  // order-independent, and on every rank while a wrong-op fault is armed (so one rank can reduce
  // differently without breaking the MPI call).
  bool Ordered(const at::Tensor& x, ReduceOp op) const {
    return NativeOp(x.scalar_type(), op) == MPI_OP_NULL ||
           fault().kind == FaultSpec::Kind::kWrongOp;
  }

  // `input` with the shape of the concatenation of n such along `dim`.
  static std::vector<int64_t> Concatenated(const at::Tensor& input, int64_t dim, int64_t n) {
    std::vector<int64_t> shape = input.sizes().vec();
    shape[dim] *= n;
    return shape;
  }

  // Every group member's input, stacked: [n, ...input shape] on every rank (MPI_Allgather of
  // bytes).
  at::Tensor GatherStacked(const at::Tensor& input, const CallInfo& call) {
    at::Tensor x = input.contiguous();
    std::vector<int64_t> shape = x.sizes().vec();
    shape.insert(shape.begin(), GroupSize(call));
    at::Tensor out = at::empty(shape, x.options());
    MPI_Request request;
    Check(MPI_Iallgather(x.data_ptr(), Count(Bytes(x)), MPI_BYTE, out.data_ptr(), Count(Bytes(x)),
                         MPI_BYTE, MpiComm(call), &request),
          "MPI_Iallgather");
    Await(request, "MPI_Iallgather");
    return out;
  }

  // The same, on group rank `root` only (MPI_Gather); other ranks get an undefined tensor.
  at::Tensor GatherStackedTo(const at::Tensor& input, const CallInfo& call, int64_t root) {
    at::Tensor x = input.contiguous();
    at::Tensor out;
    if (Position(call) == root) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape.insert(shape.begin(), GroupSize(call));
      out = at::empty(shape, x.options());
    }
    MPI_Request request;
    Check(MPI_Igather(x.data_ptr(), Count(Bytes(x)), MPI_BYTE,
                      out.defined() ? out.data_ptr() : nullptr, Count(Bytes(x)), MPI_BYTE,
                      static_cast<int>(root), MpiComm(call), &request),
          "MPI_Igather");
    Await(request, "MPI_Igather");
    return out;
  }
};

}  // namespace

std::shared_ptr<Collectives> MakeMpiCollectives(const RealBackendOptions& options) {
  if (!(options.timeout_s > 0)) {
    throw InputError("timeout",
                     StrCat("must be a positive number of seconds, got ", options.timeout_s));
  }
  return std::make_shared<MpiCollectives>(options);
}

}  // namespace dtsim
