// Helpers for runs on real ranks (see include/dtsim/core/real_run.h).
#include "dtsim/core/real_run.h"

#include <ATen/ATen.h>

#include <cstring>
#include <numeric>

#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {
namespace {

std::vector<int64_t> World(const Collectives& c) {
  std::vector<int64_t> ranks(c.world_size());
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

// A shard as bytes: dtype, number of dims, dims, data.
std::string Serialize(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  std::string out;
  auto put = [&](int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<int64_t>(c.scalar_type()));
  put(c.dim());
  for (int64_t s : c.sizes()) put(s);
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return out;
}

at::Tensor Deserialize(const std::string& bytes) {
  size_t at = 0;
  auto get = [&]() {
    int64_t v = 0;
    DTSIM_CHECK(at + sizeof(v) <= bytes.size(), "truncated shard message");
    std::memcpy(&v, bytes.data() + at, sizeof(v));
    at += sizeof(v);
    return v;
  };
  const auto type = static_cast<at::ScalarType>(get());
  const int64_t ndim = get();
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < ndim; ++d) shape.push_back(get());
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  const size_t n = t.numel() * t.element_size();
  DTSIM_CHECK(at + n == bytes.size(), "shard message of ", bytes.size(), " bytes for ", n,
              " bytes of data");
  if (n > 0) std::memcpy(t.data_ptr(), bytes.data() + at, n);
  return t;
}

}  // namespace

bool IsReportingRank(const Collectives& collectives) {
  return collectives.simulated() || collectives.rank() == 0;
}

int64_t BroadcastFromRankZero(Collectives& collectives, int64_t value) {
  if (collectives.simulated()) return value;
  CollectiveObservers::Paused pause(collectives.observers());
  at::Tensor v = at::full({1}, value, at::kLong);
  return collectives.Broadcast(v, GroupSet::Of(World(collectives)), /*src=*/0).item<int64_t>();
}

bool AnyRank(Collectives& collectives, bool mine) {
  if (collectives.simulated()) return mine;
  CollectiveObservers::Paused pause(collectives.observers());
  at::Tensor v = at::full({1}, static_cast<int64_t>(mine), at::kLong);
  return collectives.AllReduce(v, GroupSet::Of(World(collectives)), ReduceOp::kMax)
             .item<int64_t>() != 0;
}

std::vector<std::string> GatherToRankZero(Collectives& collectives, const std::string& mine) {
  if (collectives.simulated()) return {mine};
  CollectiveObservers::Paused pause(collectives.observers());
  const GroupSet world = GroupSet::Of(World(collectives));
  at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  const int64_t longest = collectives.AllReduce(length, world, ReduceOp::kMax).item<int64_t>();
  at::Tensor buf = at::zeros({1, longest + 8}, at::kByte);
  const int64_t size = static_cast<int64_t>(mine.size());
  std::memcpy(buf.data_ptr(), &size, sizeof(size));
  if (size > 0) std::memcpy(static_cast<char*>(buf.data_ptr()) + 8, mine.data(), mine.size());
  at::Tensor all = collectives.Gather(buf, world, /*dst=*/0, /*dim=*/0);
  if (collectives.rank() != 0) return {};
  std::vector<std::string> out;
  for (int64_t r = 0; r < collectives.world_size(); ++r) {
    const char* row = static_cast<const char*>(all[r].data_ptr());
    int64_t n = 0;
    std::memcpy(&n, row, sizeof(n));
    out.emplace_back(row + 8, n);
  }
  return out;
}

std::optional<Trace> GatherTrace(Collectives& collectives, const Trace& mine) {
  if (collectives.simulated()) return mine;
  const std::vector<std::string> parts = GatherToRankZero(collectives, ToJson(mine).dump());
  if (parts.empty()) return std::nullopt;
  std::vector<Trace> traces;
  for (const std::string& p : parts) traces.push_back(TraceFromJson(nlohmann::json::parse(p)));
  return MergeRankTraces(traces);
}

std::optional<at::Tensor> GatherShards(Collectives& collectives, const at::Tensor& local) {
  if (collectives.simulated()) return local;
  const std::vector<std::string> parts = GatherToRankZero(collectives, Serialize(local));
  if (parts.empty()) return std::nullopt;
  std::vector<at::Tensor> shards;
  for (const std::string& p : parts) shards.push_back(Deserialize(p));
  return MakeLocalTensor(World(collectives), std::move(shards));
}

}  // namespace dtsim
