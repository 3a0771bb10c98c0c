// Traces: the versioned JSON record of a run that simulated and real runs both write, so a diff can say exactly
// where they part, and that the viewer reads. The format is documented in docs/trace-format.md.
//
// A trace holds: meta (format, version, tool, backend, world size, the command), the spec before and after, every
// plan step with its collectives (op, groups, per-rank input/output shapes, bytes), and after each step every rank's
// local shape, global offset and a hash of its shard bytes (XXH3-64 of the contiguous row-major data, as
// "xxh3:<16 hex digits>"), so two runs compare shard by shard without storing data.
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtsim/collectives.h"
#include "dtsim/spec.h"

namespace dtsim {

inline constexpr const char* kTraceFormat = "dtsim-trace";
inline constexpr int kTraceVersion = 1;

// The hash of one tensor's values: "xxh3:" + 16 hex digits over its contiguous bytes, shape and dtype included.
std::string ShardHash(const at::Tensor& shard);

// Collects the collectives of one run step by step (a CollectiveObserver) and the per-rank state after each step.
class TraceRecorder : public CollectiveObserver {
 public:
  // `meta` goes into the trace as is, with format and version added.
  explicit TraceRecorder(nlohmann::json meta);

  void OnCollective(const CollectiveRecord& record) override;

  // Records the state before anything runs: {"spec", "ranks"}.
  void SetInitial(const DTensorSpec& spec, const at::Tensor& local);
  // Ends a step: `step` (the plan step's JSON) gets the collectives seen since the last step and the ranks' state.
  void EndStep(nlohmann::json step, const DTensorSpec& spec_after, const at::Tensor& local_after);
  // Records the final state and the verdict.
  void SetFinal(const DTensorSpec& spec, const at::Tensor& local, bool ok);

  const nlohmann::json& json() const { return trace_; }

 private:
  nlohmann::json trace_;
  nlohmann::json pending_ = nlohmann::json::array();
};

// {"placements", "mesh", "shape", "dtype"} of a spec.
nlohmann::json SpecToJson(const DTensorSpec& spec);
// The spec SpecToJson wrote; InputError("trace") naming the field when something is missing or invalid.
DTensorSpec SpecFromJson(const nlohmann::json& json);
// Per rank: {"rank", "coordinate", "local_shape", "global_offset", "hash"}.
nlohmann::json RankStatesToJson(const DTensorSpec& spec, const at::Tensor& local);
// JSON of one collective record.
nlohmann::json CollectiveToJson(const CollectiveRecord& record);

// Checks that `trace` is a dtsim trace of a version this build reads; InputError("trace") naming what is wrong
// (not an object, wrong format, version N unsupported, a missing field).
void ValidateTrace(const nlohmann::json& trace);
// Reads and validates a trace file; InputError("trace") for unreadable files and broken JSON (with the position).
nlohmann::json ReadTrace(const std::string& path);
// Writes `json` to `path` through a temporary file renamed into place: never a half-written file.
void WriteJsonFileAtomically(const std::string& path, const nlohmann::json& json);

}  // namespace dtsim
