// NcclCollectives (see include/dtsim/backends/nccl_collectives.h). The front
// (src/tensor/collectives.cc) has validated the call and accounts the bytes; the group agreed on
// the call over MPI (mpi_world.h); this file runs NCCL on the group's communicator (created once
// per group: the group's first rank makes the unique id and broadcasts it over MPI). A CUDA tensor
// is handed to NCCL where it lies (device-resident); a CPU tensor is staged through the rank's
// device buffers and copied back.
#include "dtsim/backends/nccl_collectives.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <map>
#include <numeric>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/layout/error.h"
#include "mpi_world.h"

namespace dtsim {
namespace {

using internal::MpiLaunchedCollectives;
using internal::MpiWorld;

int64_t Bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// NCCL's type for `t` where its reductions are exact and order-independent here; nullopt otherwise.
std::optional<ncclDataType_t> NativeType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kChar:
      return ncclInt8;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    default:
      return std::nullopt;
  }
}

std::optional<ncclRedOp_t> NativeOp(at::ScalarType t, ReduceOp op) {
  if (!NativeType(t)) return std::nullopt;
  const bool floating = at::isFloatingType(t);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // sum, then divide (as the simulation does)
      return ncclSum;
    case ReduceOp::kProduct:
      if (floating) return std::nullopt;
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    default:
      return std::nullopt;  // NCCL has no bitwise ops
  }
}

at::Tensor StackPieces(const at::Tensor& x, int64_t n, int64_t dim) {
  return at::stack(x.chunk(n, dim), 0).contiguous();
}

class NcclCollectives : public MpiLaunchedCollectives {
 public:
  explicit NcclCollectives(const RealBackendOptions& options)
      : MpiLaunchedCollectives("nccl", options) {
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
      throw InputError("backend", StrCat("nccl: no CUDA device is visible to rank ", rank(), " (",
                                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                                         "); use --backend mpi on CPU-only machines"));
    }
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    device_ = (local ? std::atoi(local) : static_cast<int>(rank())) % devices;
    CudaCheck(cudaSetDevice(device_), "cudaSetDevice");
    CudaCheck(cudaStreamCreate(&stream_), "cudaStreamCreate");
  }

 protected:
  at::Tensor DoAllGather(const at::Tensor& input, const CallInfo& call, int64_t dim) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    at::Tensor stacked = GatherStacked(input, call);
    if (dim == 0) {
      std::vector<int64_t> shape = input.sizes().vec();
      shape[0] *= n;
      return stacked.reshape(shape);
    }
    return at::cat(stacked.unbind(0), dim);
  }

  at::Tensor DoReduceScatter(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                             int64_t dim) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    const int64_t chunk = input.size(dim) / n;
    if (Ordered(input, op)) {
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& x : GatherStacked(input, call).unbind(0)) {
        pieces.push_back(x.narrow(dim, Position(call) * chunk, chunk));
      }
      return ReduceInOrder(pieces, op);
    }
    at::Tensor send = dim == 0 ? input.contiguous() : StackPieces(input, n, dim);
    std::vector<int64_t> shape = input.sizes().vec();
    shape[dim] = chunk;
    at::Tensor out = at::empty(shape, input.options());
    void* d_in = Source(send, 0);
    void* d_out = Target(out);
    NcclCheck(ncclReduceScatter(d_in, d_out, out.numel(), *NativeType(input.scalar_type()),
                                *NativeOp(input.scalar_type(), op), Comm(call), stream_),
              "ncclReduceScatter");
    Finish(d_out, out);
    if (op == ReduceOp::kAvg) DivideByCount(out, n);
    return out;
  }

  at::Tensor DoAllReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    if (Ordered(input, op)) return ReduceInOrder(GatherStacked(input, call).unbind(0), op);
    at::Tensor out = input.clone(at::MemoryFormat::Contiguous);
    void* d = Source(out, 0);
    NcclCheck(ncclAllReduce(d, d, out.numel(), *NativeType(out.scalar_type()),
                            *NativeOp(out.scalar_type(), op), Comm(call), stream_),
              "ncclAllReduce");
    Finish(d, out);
    if (op == ReduceOp::kAvg) DivideByCount(out, n);
    return out;
  }

  at::Tensor DoReduce(const at::Tensor& input, const CallInfo& call, ReduceOp op,
                      int64_t dst) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    const bool root = Position(call) == dst;
    if (Ordered(input, op)) {
      at::Tensor stacked = GatherStacked(input, call);
      return root ? ReduceInOrder(stacked.unbind(0), op) : input.clone();
    }
    at::Tensor out = input.clone(at::MemoryFormat::Contiguous);
    void* d = Source(out, 0);
    NcclCheck(
        ncclReduce(d, d, out.numel(), *NativeType(out.scalar_type()),
                   *NativeOp(out.scalar_type(), op), static_cast<int>(dst), Comm(call), stream_),
        "ncclReduce");
    Finish(d, out);
    if (!root) return input.clone();
    if (op == ReduceOp::kAvg) DivideByCount(out, n);
    return out;
  }

  at::Tensor DoAllToAll(const at::Tensor& input, const CallInfo& call, int64_t split_dim,
                        int64_t concat_dim) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    at::Tensor send = StackPieces(input, n, split_dim);
    at::Tensor recv = at::empty_like(send);
    const int64_t piece = Bytes(send) / n;
    std::vector<int64_t> counts(n, piece);
    Exchange(send, counts, recv, counts, call);
    return at::cat(recv.unbind(0), concat_dim);
  }

  at::Tensor DoAllToAllSingle(const at::Tensor& input, const CallInfo& call,
                              const SplitSizes& input_splits,
                              const SplitSizes& output_splits) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    at::Tensor x = input.contiguous();
    int64_t row = x.element_size();
    for (int64_t d = 1; d < x.dim(); ++d) row *= x.size(d);
    const std::vector<int64_t>& mine = input_splits.at(rank());
    std::vector<int64_t> theirs(n);
    MPI_Alltoall(mine.data(), 1, MPI_INT64_T, theirs.data(), 1, MPI_INT64_T, MpiComm(call));
    auto expected = output_splits.find(rank());
    if (expected != output_splits.end() && expected->second != theirs) {
      MpiWorld::Get().Abort(StrCat("all_to_all_single: rank ", rank(), " expects ",
                                   IntListToString(expected->second),
                                   " rows but the group sends it ", IntListToString(theirs)));
    }
    std::vector<int64_t> send_bytes(n), recv_bytes(n);
    for (int64_t j = 0; j < n; ++j) {
      send_bytes[j] = mine[j] * row;
      recv_bytes[j] = theirs[j] * row;
    }
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] = std::accumulate(theirs.begin(), theirs.end(), int64_t{0});
    at::Tensor out = at::empty(shape, x.options());
    Exchange(x, send_bytes, out, recv_bytes, call);
    return out;
  }

  at::Tensor DoBroadcast(const at::Tensor& input, const CallInfo& call, int64_t src) override {
    if (GroupSize(call) == 0) return input.clone();
    at::Tensor out = input.clone(at::MemoryFormat::Contiguous);
    void* d = Source(out, 0);
    NcclCheck(
        ncclBroadcast(d, d, Bytes(out), ncclUint8, static_cast<int>(src), Comm(call), stream_),
        "ncclBroadcast");
    Finish(d, out);
    return out;
  }

  at::Tensor DoScatter(const at::Tensor& input, const CallInfo& call, int64_t src,
                       int64_t dim) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    std::vector<int64_t> shape = input.sizes().vec();
    shape[dim] /= n;
    at::Tensor out = at::empty(shape, input.options());
    const bool root = Position(call) == src;
    at::Tensor send = root ? StackPieces(input, n, dim) : at::Tensor();
    std::vector<int64_t> send_bytes(n, root ? Bytes(out) : 0), recv_bytes(n, 0);
    recv_bytes[src] = Bytes(out);
    Exchange(root ? send : out, send_bytes, out, recv_bytes, call);
    return out;
  }

  at::Tensor DoGather(const at::Tensor& input, const CallInfo& call, int64_t dst,
                      int64_t dim) override {
    const int64_t n = GroupSize(call);
    if (n == 0) return input.clone();
    const bool root = Position(call) == dst;
    at::Tensor x = input.contiguous();
    std::vector<int64_t> shape = x.sizes().vec();
    shape.insert(shape.begin(), n);
    at::Tensor stacked = root ? at::empty(shape, x.options()) : at::Tensor();
    std::vector<int64_t> send_bytes(n, 0), recv_bytes(n, root ? Bytes(x) : 0);
    send_bytes[dst] = Bytes(x);
    Exchange(x, send_bytes, root ? stacked : x, recv_bytes, call);
    return root ? at::cat(stacked.unbind(0), dim) : input.clone();
  }

  at::Tensor DoSendRecv(const at::Tensor& input, const CallInfo&,
                        const std::vector<std::pair<int64_t, int64_t>>& pairs) override {
    // Shapes travel over MPI (small); the data over NCCL on a world communicator.
    at::Tensor x = input.contiguous();
    std::vector<int64_t> world(world_size());
    std::iota(world.begin(), world.end(), 0);
    ncclComm_t comm = CommOf(world);
    std::vector<int64_t> header(1 + x.dim());
    header[0] = x.dim();
    for (int64_t d = 0; d < x.dim(); ++d) header[1 + d] = x.size(d);
    std::vector<MPI_Request> sends;
    for (const auto& [src, dst] : pairs) {
      if (src != rank()) continue;
      sends.emplace_back();
      MPI_Isend(header.data(), static_cast<int>(header.size()), MPI_INT64_T, static_cast<int>(dst),
                7320, MPI_COMM_WORLD, &sends.back());
    }
    at::Tensor out;
    int64_t from = -1;
    for (const auto& [src, dst] : pairs) {
      if (dst != rank()) continue;
      std::vector<int64_t> got(65);
      MPI_Recv(got.data(), 65, MPI_INT64_T, static_cast<int>(src), 7320, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      out = at::empty(std::vector<int64_t>(got.begin() + 1, got.begin() + 1 + got[0]), x.options());
      from = src;
    }
    if (!sends.empty())
      MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
    void* d_in = Source(x, 0);
    void* d_out = out.defined() ? Target(out) : nullptr;
    NcclCheck(ncclGroupStart(), "ncclGroupStart");
    for (const auto& [src, dst] : pairs) {
      if (src == rank())
        NcclCheck(ncclSend(d_in, Bytes(x), ncclUint8, static_cast<int>(dst), comm, stream_),
                  "ncclSend");
    }
    if (out.defined())
      NcclCheck(ncclRecv(d_out, Bytes(out), ncclUint8, static_cast<int>(from), comm, stream_),
                "ncclRecv");
    NcclCheck(ncclGroupEnd(), "ncclGroupEnd");
    if (!out.defined()) {
      CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      return input.clone();
    }
    Finish(d_out, out);
    return out;
  }

  void DoBarrier(const CallInfo& call) override {
    if (GroupSize(call) > 1) MPI_Barrier(MpiComm(call));
  }

 private:
  bool Ordered(const at::Tensor& x, ReduceOp op) const {
    return !NativeOp(x.scalar_type(), op) || fault().kind == FaultSpec::Kind::kWrongOp;
  }

  [[noreturn]] void Fail(const std::string& what) { MpiWorld::Get().Abort("nccl: " + what); }
  void CudaCheck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) Fail(StrCat(what, " failed: ", cudaGetErrorString(e)));
  }
  void NcclCheck(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) Fail(StrCat(what, " failed: ", ncclGetErrorString(r)));
  }

  // The NCCL communicator of `group` (this rank among them), created once: the group's first rank
  // makes the unique id and broadcasts it over the group's MPI communicator.
  ncclComm_t CommOf(const std::vector<int64_t>& group) {
    auto it = comms_.find(group);
    if (it != comms_.end()) return it->second;
    ncclUniqueId id;
    const int64_t position = std::find(group.begin(), group.end(), rank()) - group.begin();
    if (position == 0) NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MpiWorld::Get().GroupComm(group));
    ncclComm_t comm;
    NcclCheck(
        ncclCommInitRank(&comm, static_cast<int>(group.size()), id, static_cast<int>(position)),
        "ncclCommInitRank");
    comms_.emplace(group, comm);
    return comm;
  }
  ncclComm_t Comm(const CallInfo& call) { return CommOf(*MpiWorld::GroupOf(call)); }

  // Device buffer `slot` (0: send, 1: receive) of at least `bytes`, grown as needed.
  void* Buffer(int slot, int64_t bytes) {
    if (bytes > capacity_[slot]) {
      if (device_buffers_[slot]) CudaCheck(cudaFree(device_buffers_[slot]), "cudaFree");
      CudaCheck(cudaMalloc(&device_buffers_[slot], std::max<int64_t>(bytes, 256)), "cudaMalloc");
      capacity_[slot] = std::max<int64_t>(bytes, 256);
    }
    return device_buffers_[slot];
  }
  // Copies `host` (contiguous) into device buffer `slot`.
  void* Stage(const at::Tensor& host, int slot) {
    void* d = Buffer(slot, Bytes(host));
    if (Bytes(host) > 0) {
      CudaCheck(cudaMemcpyAsync(d, host.data_ptr(), Bytes(host), cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync");
    }
    return d;
  }
  // Copies `device` into `host` (contiguous) and waits for the stream.
  void Unstage(const void* device, at::Tensor& host) {
    if (Bytes(host) > 0) {
      CudaCheck(
          cudaMemcpyAsync(host.data_ptr(), device, Bytes(host), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync");
    }
    CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  // Where NCCL reads `x` (contiguous): its own memory when it lies on this rank's GPU, else device
  // buffer `slot` holding a copy. The rank's stream is a blocking stream, ordered after the work
  // LibTorch queued on the legacy default stream, so a CUDA tensor's producer has finished.
  // An empty tensor reads from the (never null) device buffer, as on the host path.
  void* Source(const at::Tensor& x, int slot) {
    if (!x.is_cuda() || Bytes(x) == 0) return Stage(x, slot);
    CheckOnRankDevice(x);
    return x.data_ptr();
  }
  // Where NCCL writes `out` (contiguous): its own memory on the GPU, else device buffer 1.
  void* Target(at::Tensor& out) {
    if (!out.is_cuda() || Bytes(out) == 0) return Buffer(1, Bytes(out));
    CheckOnRankDevice(out);
    return out.data_ptr();
  }
  // After the call: a host `out` gets its bytes back from `device`; either way the call has ended.
  void Finish(const void* device, at::Tensor& out) {
    if (out.is_cuda() || Bytes(out) == 0) {
      CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    } else {
      Unstage(device, out);
    }
  }
  void CheckOnRankDevice(const at::Tensor& t) {
    if (t.device().index() != device_) {
      Fail(StrCat("rank ", rank(), " uses GPU ", device_, " but a tensor of this collective is on ",
                  t.device().str()));
    }
  }

  // Every group member's input, stacked [n, ...shape] (ncclAllGather of bytes).
  at::Tensor GatherStacked(const at::Tensor& input, const CallInfo& call) {
    at::Tensor x = input.contiguous();
    std::vector<int64_t> shape = x.sizes().vec();
    shape.insert(shape.begin(), GroupSize(call));
    at::Tensor out = at::empty(shape, x.options());
    void* d_in = Source(x, 0);
    void* d_out = Target(out);
    NcclCheck(ncclAllGather(d_in, d_out, Bytes(x), ncclUint8, Comm(call), stream_),
              "ncclAllGather");
    Finish(d_out, out);
    return out;
  }

  // Point-to-point exchange within the group: send_bytes[j] bytes of `send` (in order) to group
  // rank j, recv_bytes[j] bytes from group rank j into `recv` (in order).
  void Exchange(const at::Tensor& send, const std::vector<int64_t>& send_bytes, at::Tensor& recv,
                const std::vector<int64_t>& recv_bytes, const CallInfo& call) {
    const std::vector<int64_t>& group = *MpiWorld::GroupOf(call);
    ncclComm_t comm = Comm(call);
    const at::Tensor send_bytes_of = send.contiguous();
    char* d_send = static_cast<char*>(Source(send_bytes_of, 0));
    char* d_recv = static_cast<char*>(Target(recv));
    NcclCheck(ncclGroupStart(), "ncclGroupStart");
    int64_t s = 0, r = 0;
    for (size_t j = 0; j < group.size(); ++j) {
      if (send_bytes[j] > 0)
        NcclCheck(
            ncclSend(d_send + s, send_bytes[j], ncclUint8, static_cast<int>(j), comm, stream_),
            "ncclSend");
      if (recv_bytes[j] > 0)
        NcclCheck(
            ncclRecv(d_recv + r, recv_bytes[j], ncclUint8, static_cast<int>(j), comm, stream_),
            "ncclRecv");
      s += send_bytes[j];
      r += recv_bytes[j];
    }
    NcclCheck(ncclGroupEnd(), "ncclGroupEnd");
    if (r > 0) {
      Finish(d_recv, recv);
    } else {
      CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // `recv` is not written
    }
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  void* device_buffers_[2] = {nullptr, nullptr};
  int64_t capacity_[2] = {0, 0};
  std::map<std::vector<int64_t>, ncclComm_t> comms_;
};

}  // namespace

std::shared_ptr<Collectives> MakeNcclCollectives(const RealBackendOptions& options) {
  if (!(options.timeout_s > 0)) {
    throw InputError("timeout",
                     StrCat("must be a positive number of seconds, got ", options.timeout_s));
  }
  return std::make_shared<NcclCollectives>(options);
}

}  // namespace dtsim
