// Recording a run into a trace (trace.h's model): shard hashes and the recorder, a
// CollectiveObserver that collects each step's collectives and every held rank's state. Needs
// LibTorch (library dtsim_core).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "dtsim/core/dtensor.h"
#include "dtsim/tensor/collectives.h"
#include "dtsim/trace/trace.h"

namespace dtsim {

// The hash of one tensor's values: "xxh3:" + 16 hex digits over its dtype name, shape and
// contiguous bytes (a GPU tensor's bytes are copied to the host first: the same values hash the
// same wherever they lie).
std::string ShardHash(const at::Tensor& shard);

// A tensor's digest for run events (python/dtsim/events.py): its ShardHash and, for floating point
// (float64, float32, float16, bfloat16; not empty), a sketch: the sum over its elements in
// row-major order of x[i] * w(i), w(i) = 2 * frac(0.6180339887498949 * i + 0.25) - 1, and its
// scale, the sum of |x[i] * w(i)|: sixteen interleaved partial sums (in double for float64, else in
// float) added pairwise in a fixed order, the same value wherever it is computed.
struct ShardDigestValues {
  std::string hash;
  std::optional<double> sketch;
  std::optional<double> scale;
};
// The vectors the digest runs on: the widest the CPU has (AVX2 where present), or 16-byte ones
// (SSE2 on x86-64). Both give the same bits; the choice exists so tests can compare them.
enum class DigestVectors { kWidest, kPortable };
ShardDigestValues ShardDigest(const at::Tensor& shard,
                              DigestVectors vectors = DigestVectors::kWidest);

// The state of every rank `local` holds (every rank in simulation; this process's rank on a real
// backend), as `collectives` sees it: coordinate and global offset from the layout, local shape and
// hash from the data.
std::vector<RankState> RankStates(const DTensorSpec& spec, const at::Tensor& local,
                                  const Collectives& collectives, bool hashes = true);

// Collects the collectives of one run step by step and the per-rank state after each step.
class TraceRecorder : public CollectiveObserver {
 public:
  explicit TraceRecorder(TraceMeta meta, bool hashes = true);

  void OnCollective(const CollectiveEvent& event) override;

  // Records the state before anything runs.
  void SetInitial(const DTensorSpec& spec, const at::Tensor& local, const Collectives& collectives);
  // Ends a step: it gets the collectives seen since the last step and the held ranks' state after
  // it.
  void EndStep(const PlanStep& step, const DTensorSpec& spec_after, const at::Tensor& local_after,
               const Collectives& collectives);
  // Records the final state and the verdict (when known).
  void SetFinal(const DTensorSpec& spec, const at::Tensor& local, const Collectives& collectives,
                std::optional<bool> ok);

  const Trace& trace() const { return trace_; }
  Trace& trace() { return trace_; }

 private:
  Trace trace_;
  bool hashes_;
  std::vector<CollectiveEvent> pending_;
};

// A redistribution with its trace: what user programs call to record a run that `dtsim trace-diff`
// can compare with another (simulated against real, one build against another).
struct TracedRedistribution {
  DTensor result;
  std::optional<Trace> trace;  // the whole run's trace on the reporting rank (rank 0 of a real
                               // run); nullopt elsewhere
};

// Redistributes `source` to `placements` on its mesh, recording the trace (meta.backend and
// meta.world_size are filled in; every rank's part is gathered to the reporting rank). The verdict
// `ok` is left unset: the caller knows what the result should be.
TracedRedistribution RedistributeWithTrace(const DTensor& source, const Placements& placements,
                                           TraceMeta meta, RedistributeOptions options = {});

}  // namespace dtsim
