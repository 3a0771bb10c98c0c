// Fuzz target, structured and differential: decodes the input bytes into a case — a mesh of 1-3
// dims (at most 16 ranks), a tensor of 0-3 dims (sizes 0-12), source and target placements of every
// kind (S, _S, R, P(op), negative dims), a dtype and a planner — then plans it and runs the plan in
// the simulated world, and checks the result against the global tensor, not just "no crash":
//   * planning or running either succeeds or refuses with an InputError (a dtsim bug is an
//   InternalError: a finding);
//   * the shards put back together (AssembleGlobal) equal the expected global tensor
//   (ExpectedArangeGlobal);
//   * every rank holds what the target layout says (local shape), and the result has the target
//   placements;
//   * the plan that ran is consistent: its steps chain from the source to the target placements,
//   run the collective
//     they name, and every buffer a rank passed to (got from) a collective has the bytes the plan
//     announced for it (bytes_per_rank, bytes_received_per_rank);
//   * the recorded trace is valid (TraceFromJson accepts it) and equal to itself under DiffTraces.
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>

#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/arange_case.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/global_view.h"
#include "dtsim/core/redistribute.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/planner.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "fuzz_common.h"

namespace dtsim::fuzz {
namespace {

// Reads the input byte by byte; zeros once it is used up.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Next() { return pos_ < size_ ? data_[pos_++] : 0; }
  // An integer in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi) { return lo + Next() % (hi - lo + 1); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr ReduceOp kOps[] = {ReduceOp::kSum,     ReduceOp::kAvg,  ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                             DType::kInt64,   DType::kInt32,   DType::kInt16,   DType::kInt8,
                             DType::kUInt8,   DType::kBool};

Placement DecodePlacement(Bytes& in, int64_t ndim) {
  const int kind = in.Range(0, 7);
  if (ndim > 0 && kind <= 2) return Placement::Shard(in.Range(-ndim, ndim - 1));
  if (ndim > 0 && kind == 3)
    return Placement::StridedShard(in.Range(-ndim, ndim - 1), in.Range(1, 6));
  if (kind >= 6) return Placement::Partial(kOps[in.Range(0, 7)]);
  return Placement::Replicate();
}

struct Case {
  DTensorSpec src;
  Placements to;
  PlannerKind planner;
};

void Check(const Case& c) {
  std::shared_ptr<Collectives> collectives = MakeLocalCollectives();
  DTensor source = MakeArangeSource(c.src, collectives);
  TraceMeta meta;
  meta.command = "fuzz";
  meta.world_size = c.src.mesh().size();
  TraceRecorder recorder(meta);
  recorder.SetInitial(source.spec(), source.to_local(), *collectives);
  collectives->observers().Add(&recorder);
  RedistributeOptions options;
  options.planner = c.planner;
  const Plan plan = PlanFor(source.spec(), c.to, c.planner);
  options.on_step = [&](const PlanStep& step, const DTensorSpec& spec, const at::Tensor& local) {
    recorder.EndStep(step, spec, local, *collectives);
  };
  const DTensor result = source.Redistribute(source.mesh(), c.to, options);
  collectives->observers().Remove(&recorder);
  const std::string what =
      StrCat(c.src.ToString(), " -> ", ToString(c.to), " (", ToString(c.planner), ")");

  // The global tensor.
  const Assembled assembled = AssembleGlobal(result.spec(), result.to_local());
  DTSIM_FUZZ_EXPECT(assembled.global.has_value(), what, ": ", assembled.problem);
  DTSIM_FUZZ_EXPECT(
      SameValues(*assembled.global, ExpectedArangeGlobal(c.src), ArangeTolerance(c.src)), what,
      ": the global tensor after redistribution differs from the expected one");
  recorder.SetFinal(result.spec(), result.to_local(), *collectives, true);

  // The target layout.
  for (size_t m = 0; m < c.to.size(); ++m) {
    DTSIM_FUZZ_EXPECT(result.placements()[m].Canonical() == c.to[m].Canonical(), what);
  }
  for (int64_t rank : collectives->HeldRanks(result.to_local())) {
    const std::vector<int64_t> held = collectives->Shard(result.to_local(), rank).sizes().vec();
    DTSIM_FUZZ_EXPECT(held == result.spec().LayoutOfRank(rank).local_shape, what, ": rank ", rank,
                      " holds ", IntListToString(held));
  }

  // The plan that ran: a chain of steps from the source to the target, each collective moving the
  // announced bytes.
  Placements cur;
  for (const Placement& p : c.src.placements()) cur.push_back(p.Canonical());
  std::map<int64_t, size_t> position;
  for (size_t i = 0; i < c.src.mesh().ranks().size(); ++i) position[c.src.mesh().ranks()[i]] = i;
  const Trace& trace = recorder.trace();
  bool given_strided = false;
  for (const Placement& p : c.src.placements())
    given_strided = given_strided || p.is_strided_shard();
  for (const Placement& p : c.to) given_strided = given_strided || p.is_strided_shard();
  DTSIM_FUZZ_EXPECT(trace.steps.size() == plan.steps.size(), what);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    DTSIM_FUZZ_EXPECT(step.placements_before == cur, what, ": step ", s, " starts at ",
                      ToString(step.placements_before), " not ", ToString(cur));
    cur = step.placements_after;
    // Upstream's logical shapes (which the plan's bytes follow) ignore the narrowing of a
    // _StridedShard on an earlier mesh dim, where dtsim's left-to-right executor pads what the rank
    // really holds: compare bytes without them. A _S(d,1) as given is plain S(d) in the plan's
    // placements, but the planner's logical shapes treat it as upstream does, as a _StridedShard
    // (fuzz finding: [P(sum), _S(0,1), S(0)] -> [_S(0,6), R, S(1)]).
    bool strided = given_strided;
    for (const Placement& p : step.placements_before) strided = strided || p.is_strided_shard();
    for (const Placement& p : step.placements_after) strided = strided || p.is_strided_shard();
    for (const CollectiveEvent& col : trace.steps[s].collectives) {
      DTSIM_FUZZ_EXPECT(col.kind == step.collective, what, ": step ", s, " ran ",
                        ToString(col.kind), " not ", ToString(step.collective));
      for (size_t i = 0; i < col.ranks.size() && !strided; ++i) {
        // The record's bytes are on-the-wire counts (ring algorithms); its shapes are the buffers
        // the rank passed and got back, which the plan's byte counts describe.
        const size_t at = position.at(col.ranks[i]);
        const int64_t item = ItemSize(c.src.dtype());
        auto numel = [](const std::vector<int64_t>& shape) {
          int64_t n = 1;
          for (int64_t d : shape) n *= d;
          return n;
        };
        DTSIM_FUZZ_EXPECT(numel(col.input_shapes[i]) * item == step.bytes_sent_per_rank.at(at),
                          what, ": step ", s, " rank ", col.ranks[i], " passed ",
                          IntListToString(col.input_shapes[i]), ", the plan says ",
                          step.bytes_sent_per_rank.at(at), " bytes");
        DTSIM_FUZZ_EXPECT(numel(col.output_shapes[i]) * item == step.bytes_received_per_rank.at(at),
                          what, ": step ", s, " rank ", col.ranks[i], " got ",
                          IntListToString(col.output_shapes[i]), ", the plan says ",
                          step.bytes_received_per_rank.at(at), " bytes");
      }
    }
  }
  Placements target;
  for (const Placement& p : c.to) target.push_back(p.Normalized(c.src.ndim()).Canonical());
  DTSIM_FUZZ_EXPECT(cur == target, what, ": the plan ends at ", ToString(cur));

  // The trace is valid and equal to itself.
  Trace read;
  try {
    read = TraceFromJson(ToJson(trace));
  } catch (const InputError& e) {
    Fail(StrCat(what, ": the recorded trace is invalid: ", e.what()));
  }
  const auto diffs = DiffTraces(trace, read);
  DTSIM_FUZZ_EXPECT(diffs.empty(), what, ": ", diffs[0].where, ": ", diffs[0].what);
}

}  // namespace
}  // namespace dtsim::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  fuzz::Bytes in(data, size);
  std::vector<int64_t> mesh_shape;
  int64_t ranks = 1;
  const int64_t mesh_ndim = in.Range(1, 3);
  for (int64_t m = 0; m < mesh_ndim; ++m) {
    int64_t n = in.Range(1, 4);
    if (ranks * n > 16) n = 1;
    ranks *= n;
    mesh_shape.push_back(n);
  }
  std::vector<int64_t> shape;
  const int64_t ndim = in.Range(0, 3);
  for (int64_t d = 0; d < ndim; ++d) shape.push_back(in.Range(0, 12));
  Placements from, to;
  for (int64_t m = 0; m < mesh_ndim; ++m) from.push_back(fuzz::DecodePlacement(in, ndim));
  for (int64_t m = 0; m < mesh_ndim; ++m) {
    // Half the time keep the source's Partial (the only Partial target upstream allows).
    to.push_back(from[m].is_partial() && in.Range(0, 1) ? from[m]
                                                        : fuzz::DecodePlacement(in, ndim));
  }
  const DType dtype = fuzz::kDTypes[in.Range(0, 9)];
  const PlannerKind planner = std::array<PlannerKind, 3>{
      PlannerKind::kGreedy, PlannerKind::kMinCost, PlannerKind::kUpstreamGraph}[in.Range(0, 2)];
  std::optional<fuzz::Case> c;
  try {
    const DTensorSpec src = cli::SourceSpec(DeviceMesh::Create(mesh_shape), from, shape, dtype);
    cli::CheckSimulationFits(src, src.mesh().size(), /*meta=*/false, fuzz::FuzzLimits());
    c = fuzz::Case{src, ValidateRedistribute(src, to), planner};
  } catch (const InputError&) {
    return 0;  // upstream's refusals (a target Partial, mixed reduce ops): not what this target
               // explores
  }
  try {
    fuzz::Check(*c);
  } catch (const InputError& e) {
    // Refusals while running are legitimate only for what upstream refuses too (R -> P(product) and
    // the like).
    const std::string what = e.what();
    DTSIM_FUZZ_EXPECT(what.find("internal") == std::string::npos, what);
  }
  return 0;
}
