// A 2-D (FSDP x TP) linear layer, written once against the DTensor API: it runs unchanged on the
// simulated world (one process holds all 8 ranks) and on real ranks under mpirun, and writes traces
// that `dtsim trace-diff` compares.
//
//   build/examples/tp_fsdp_linear --trace-prefix /tmp/sim                      # simulated, 8 ranks
//   in one process mpirun -np 8 build/examples/tp_fsdp_linear --trace-prefix /tmp/real        # 8
//   MPI ranks build/dtsim trace-diff /tmp/sim_weight.json /tmp/real_weight.json          # "traces
//   agree"
//
// The layer: y = x W^T with W of shape [16, 12] on a (dp=2, tp=4) mesh. W is stored FSDP x
// TP-sharded [S(0), S(1)] (rows over dp, input features over tp); x [3, 12] has its features
// sharded over tp [R, S(1)]. Forward: FSDP gathers the weight over dp ([S(0), S(1)] -> [R, S(1)]);
// `at::matmul(x, w.t())` on the DTensors then runs through dtsim's sharding propagation exactly as
// upstream's would: t() gives W^T as [R, S(0)], and mm of [R, S(1)] x [R, S(0)] shards the
// contracting dim on tp, so every rank multiplies its feature slices with no communication and the
// result is partial sums over tp ([R, P(sum)]); an all-reduce over tp gives every rank y
// ([R, R]). The result is checked against the global x W^T computed directly (integer-valued
// floats: exact).
#include <ATen/ATen.h>

#include <cstring>
#include <iostream>
#include <string>

#include "dtsim/backends/backends.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/real_run.h"
#include "dtsim/core/trace_recorder.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "dtsim/trace/trace.h"

using namespace dtsim;

int main(int argc, char** argv) {
  std::string prefix;
  std::string backend = BackendFromEnvironment();  // "mpi" under mpirun, else the simulated world
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--trace-prefix") == 0) prefix = argv[i + 1];
    if (std::strcmp(argv[i], "--backend") == 0) backend = argv[i + 1];
  }
  std::shared_ptr<Collectives> comm = MakeCollectives({backend});
  const DeviceMesh mesh = DeviceMesh::Create({2, 4}, {"dp", "tp"});

  // The same global tensors on every rank (small integers: every result below is exact).
  const at::Tensor weight = at::arange(16 * 12, at::kFloat).reshape({16, 12}).remainder(7) - 3;
  const at::Tensor x = at::arange(3 * 12, at::kFloat).reshape({3, 12}).remainder(5);

  // Parameters live FSDP x TP-sharded; the input is feature-sharded over tp.
  DTensor w = DistributeTensor(weight, mesh, ParsePlacements("S(0),S(1)"), 0, comm);
  DTensor xs = DistributeTensor(x, mesh, ParsePlacements("R,S(1)"), 0, comm);

  // FSDP: gather the weight over dp (traced).
  TraceMeta meta;
  meta.command = "example tp_fsdp_linear";
  TracedRedistribution gathered = RedistributeWithTrace(w, ParsePlacements("R,S(1)"), meta);

  // TP: matmul on the DTensors; sharding propagation keeps both operands in place and returns
  // partial sums over tp.
  const at::Tensor y_tensor = at::matmul(ops::AsTensor(xs), ops::AsTensor(gathered.result).t());
  const DTensor y_partial = ops::GetDTensor(y_tensor);
  if (ToString(y_partial.placements()) != "[R, P(sum)]") {
    std::cerr << "tp_fsdp_linear: matmul gave " << ToString(y_partial.placements())
              << ", expected [R, P(sum)]\n";
    return 1;
  }
  TracedRedistribution reduced = RedistributeWithTrace(y_partial, ParsePlacements("R,R"), meta);

  // Every rank now holds y; check it against x W^T computed directly.
  const at::Tensor y = reduced.result.FullTensor();
  const bool ok_here = at::equal(y, at::matmul(x, weight.t()));
  const bool any_wrong = AnyRank(*comm, !ok_here);
  if (IsReportingRank(*comm)) {
    if (!prefix.empty()) {
      WriteJsonFileAtomically(prefix + "_weight.json", ToJson(*gathered.trace));
      WriteJsonFileAtomically(prefix + "_output.json", ToJson(*reduced.trace));
    }
    std::cout << "tp_fsdp_linear on "
              << (comm->simulated()
                      ? std::string("the simulated world of 8 ranks")
                      : std::to_string(comm->world_size()) + " " + comm->backend() + " ranks")
              << ": y = x W^T has shape [3, 16]; "
              << (any_wrong ? "WRONG on some rank" : "equal to the direct product")
              << (prefix.empty()
                      ? ""
                      : "; traces " + prefix + "_weight.json, " + prefix + "_output.json")
              << "\n";
  }
  return any_wrong ? 1 : 0;
}
