// Trace recording and shard hashing (see include/dtsim/core/trace_recorder.h).
#include "dtsim/core/trace_recorder.h"

#include <ATen/ATen.h>
#include <xxhash.h>

#include <cstdio>

#include "dtsim/core/dtensor.h"
#include "dtsim/core/real_run.h"
#include "dtsim/layout/error.h"
#include "dtsim/tensor/local_tensor.h"

namespace dtsim {

std::string ShardHash(const at::Tensor& shard) {
  at::Tensor c = shard.is_cpu() ? shard.contiguous() : shard.to(at::kCPU).contiguous();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const std::string header =
      StrCat(c10::toString(c.scalar_type()), IntListToString(c.sizes().vec()));
  XXH3_64bits_update(state, header.data(), header.size());
  if (c.numel() > 0) XXH3_64bits_update(state, c.const_data_ptr(), c.numel() * c.element_size());
  const XXH64_hash_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "xxh3:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::vector<RankState> RankStates(const DTensorSpec& spec, const at::Tensor& local,
                                  const Collectives& collectives, bool hashes) {
  std::vector<RankState> out;
  MeshView view(spec.mesh());
  for (int64_t rank : collectives.HeldRanks(local)) {
    RankLayout l = ComputeRankLayout(spec.shape(), spec.mesh().shape(), view.Coordinate(rank),
                                     spec.placements(), rank);
    at::Tensor shard = collectives.Shard(local, rank);
    RankState s;
    s.rank = rank;
    s.coordinate = l.coordinate;
    s.local_shape = shard.sizes().vec();
    s.global_offset = l.global_offset;
    if (hashes) s.hash = ShardHash(shard);
    out.push_back(std::move(s));
  }
  return out;
}

TraceCollective ToTraceCollective(const CollectiveRecord& r) {
  TraceCollective c;
  c.kind = r.kind;
  c.groups = r.groups.groups;
  c.ranks = r.ranks;
  c.input_shapes = r.input_shapes;
  c.output_shapes = r.output_shapes;
  c.bytes_sent = r.bytes_sent;
  c.bytes_received = r.bytes_received;
  c.time_us = r.time_us;
  return c;
}

TraceRecorder::TraceRecorder(TraceMeta meta, bool hashes) : hashes_(hashes) {
  meta.data = hashes;
  trace_.meta = std::move(meta);
}

void TraceRecorder::OnCollective(const CollectiveRecord& record) {
  pending_.push_back(ToTraceCollective(record));
}

void TraceRecorder::SetInitial(const DTensorSpec& spec, const at::Tensor& local,
                               const Collectives& collectives) {
  trace_.initial.spec = spec;
  trace_.initial.ranks = RankStates(spec, local, collectives, hashes_);
  pending_.clear();
}

void TraceRecorder::EndStep(const PlanStep& step, const DTensorSpec& spec_after,
                            const at::Tensor& local_after, const Collectives& collectives) {
  TraceStep s;
  s.plan = step;
  s.mesh_dim_name = spec_after.mesh().DimLabel(step.mesh_dim);
  s.collectives = std::move(pending_);
  pending_.clear();
  s.placements_after = spec_after.placements();
  s.ranks_after = RankStates(spec_after, local_after, collectives, hashes_);
  trace_.steps.push_back(std::move(s));
}

void TraceRecorder::SetFinal(const DTensorSpec& spec, const at::Tensor& local,
                             const Collectives& collectives, std::optional<bool> ok) {
  trace_.final_state.spec = spec;
  trace_.final_state.ranks = RankStates(spec, local, collectives, hashes_);
  trace_.ok = ok;
}

TracedRedistribution RedistributeWithTrace(const DTensor& source, const Placements& placements,
                                           TraceMeta meta, RedistributeOptions options) {
  Collectives& comm = source.collectives();
  meta.backend = comm.backend();
  meta.world_size = MeshView(source.mesh()).ranks().size();
  meta.planner = ToString(options.planner);
  TraceRecorder recorder(std::move(meta));
  recorder.SetInitial(source.spec(), source.to_local(), comm);
  CollectiveObserver* saved = comm.observer();
  comm.SetObserver(&recorder);
  auto user_step = options.on_step;
  options.on_step = [&](const PlanStep& step, const DTensorSpec& spec, const at::Tensor& local) {
    recorder.EndStep(step, spec, local, comm);
    if (user_step) user_step(step, spec, local);
  };
  DTensor result = source.Redistribute(source.mesh(), placements, options);
  comm.SetObserver(saved);
  recorder.SetFinal(result.spec(), result.to_local(), comm, std::nullopt);
  return {result, GatherTrace(comm, recorder.trace())};
}

}  // namespace dtsim
