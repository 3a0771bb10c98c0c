// The op layer's cost per family (issue 15): one DTensor op on 8 simulated ranks with small shards,
// paired with the same op run on the local data alone (the LocalTensor op every rank's shard needs
// anyway), so the ratio local / dtsim says what sharding propagation, the wrappers and the cache
// add. No redistribution happens in these cases (the inputs already have the placements the op
// wants), as in upstream's steady state. scripts/bench.sh prints `bench
// op_<family>_dispatch_overhead ratio <local / dtsim>` and, with bench/upstream_op_bench.py, `bench
// op_<family>_vs_upstream ratio <upstream / dtsim>`. BM_OpMathWrapperFloor (below) times the least
// any two-layer design spends on op_math's sum, for `bench op_math_wrapper_floor_vs_upstream`.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <benchmark/benchmark.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

#include <chrono>
#include <functional>

#include "dtsim/core/dtensor.h"
#include "dtsim/ops/dtensor_tensor.h"
#include "paired.h"

namespace {

using dtsim::DeviceMesh;
using dtsim::ParsePlacements;
using dtsim::bench::Paired;

constexpr int kRounds = 200, kBatch = 20;  // a_us: the local op alone, b_us: the DTensor op

const DeviceMesh& Mesh() {
  static DeviceMesh mesh = DeviceMesh::Create({8});
  return mesh;
}

struct Inputs {
  at::Tensor da, db;  // DTensor wrappers
  at::Tensor la, lb;  // their local data (LocalTensors)
};
// 8 ranks, global [128, 16] with `pa` and [16, 16] / [128, 16] with `pb` (shards 16 x 16).
Inputs Make(const char* pa, const std::vector<int64_t>& shape_b, const char* pb) {
  dtsim::DTensor a = dtsim::DistributeTensor(at::randn({128, 16}), Mesh(), ParsePlacements(pa));
  dtsim::DTensor b = dtsim::DistributeTensor(at::randn(shape_b), Mesh(), ParsePlacements(pb));
  return {dtsim::ops::AsTensor(a), dtsim::ops::AsTensor(b), a.to_local(), b.to_local()};
}

void BM_OpMatrix(benchmark::State& state) {  // mm: [S(0)] x [R] -> [S(0)]
  Inputs in = Make("S(0)", {16, 16}, "R");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::mm(in.la, in.lb)); },
      [&] { benchmark::DoNotOptimize(at::mm(in.da, in.db)); }, kRounds, kBatch);
}
BENCHMARK(BM_OpMatrix)->Iterations(1);

void BM_OpPointwise(benchmark::State& state) {  // add: [S(0)] + [S(0)] -> [S(0)]
  Inputs in = Make("S(0)", {128, 16}, "S(0)");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::add(in.la, in.lb)); },
      [&] { benchmark::DoNotOptimize(at::add(in.da, in.db)); }, kRounds, kBatch);
}
BENCHMARK(BM_OpPointwise)->Iterations(1);

void BM_OpMath(benchmark::State& state) {  // sum over dim 1 of [S(0)] -> [S(0)]
  Inputs in = Make("S(0)", {128, 16}, "S(0)");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::sum(in.la, {1})); },
      [&] { benchmark::DoNotOptimize(at::sum(in.da, {1})); }, kRounds, kBatch);
}
BENCHMARK(BM_OpMath)->Iterations(1);

void BM_OpView(benchmark::State& state) {  // transpose(0, 1) of [S(0)] -> [S(1)]
  Inputs in = Make("S(0)", {128, 16}, "S(0)");
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::transpose(in.la, 0, 1)); },
      [&] { benchmark::DoNotOptimize(at::transpose(in.da, 0, 1)); }, kRounds, kBatch);
}
BENCHMARK(BM_OpView)->Iterations(1);

// The floor of any design that puts a DTensor layer over a LocalTensor layer, each a tensor
// subclass behind a boxed dispatcher fallback, as dtsim and upstream do: two wrappers that only
// unwrap their argument, call the op and wrap its result, with no sharding propagation, cache, rank
// list or stacking. The inner wrapper holds the ranks' stacked shards, and the op they run is the
// one the LocalTensor layer runs for BM_OpMath (a sum over the shard's dim 1, the stacked tensor's
// dim 2). Its time over upstream's is the most that op_math_vs_upstream could reach in that design.
constexpr c10::DispatchKeySet kFloorKeys =
    c10::DispatchKeySet({c10::DispatchKey::PrivateUse3, c10::DispatchKey::ADInplaceOrView,
                         c10::DispatchKey::AutogradPrivateUse3});

class FloorImpl final : public c10::TensorImpl {
 public:
  explicit FloorImpl(at::Tensor inner)
      : c10::TensorImpl(kFloorKeys, inner.dtype(), inner.device()), inner_(std::move(inner)) {
    set_storage_access_should_throw();
    set_sizes_and_strides(inner_.sizes(), inner_.strides());
  }
  const at::Tensor& inner() const { return inner_; }

 private:
  at::Tensor inner_;
};

at::Tensor FloorWrap(at::Tensor inner) {
  return at::Tensor(c10::make_intrusive<FloorImpl>(std::move(inner)));
}

// The wrapper impl of `t`, or nullptr for any other tensor (only FloorImpl has PrivateUse3).
const FloorImpl* FindFloorImpl(const at::Tensor& t) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return t.defined() && impl->key_set().has(c10::DispatchKey::PrivateUse3)
             ? static_cast<const FloorImpl*>(impl)
             : nullptr;
}

// The tensor a wrapper holds, or an undefined tensor for anything else.
at::Tensor FloorUnwrap(const at::Tensor& t) {
  const FloorImpl* impl = FindFloorImpl(t);
  return impl != nullptr ? impl->inner() : at::Tensor();
}

void FloorKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const size_t n_args = op.schema().arguments().size();
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(n_args); it != stack->end(); ++it) {
    if (!it->isTensor()) continue;
    if (const FloorImpl* impl = FindFloorImpl(it->toTensor())) *it = impl->inner();
  }
  op.callBoxed(*stack);
  const size_t n_out = op.schema().returns().size();
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(n_out); it != stack->end(); ++it)
    if (it->isTensor()) *it = FloorWrap(std::move(*it).toTensor());
}

// For the op itself, not as a fallback: ATen's composite kernel for the op would take precedence
// over a fallback (dtsim registers its kernels for such ops in the same way).
TORCH_LIBRARY_IMPL(aten, PrivateUse3, m) {
  m.impl("sum.dim_IntList", torch::CppFunction::makeFromBoxedFunction<&FloorKernel>());
}

void BM_OpMathWrapperFloor(benchmark::State& state) {
  const at::Tensor stacked = at::randn({8, 16, 16});
  const at::Tensor outer = FloorWrap(FloorWrap(stacked));
  // The floor's result must be what the stacked sum gives: the wrappers change nothing.
  const at::Tensor inner = FloorUnwrap(FloorUnwrap(at::sum(outer, {2})));
  if (!inner.defined() || !at::equal(inner, at::sum(stacked, {2}))) {
    state.SkipWithError("the wrapper floor's sum differs from the stacked sum");
    return;
  }
  Paired(
      state, [&] { benchmark::DoNotOptimize(at::sum(stacked, {2})); },
      [&] { benchmark::DoNotOptimize(at::sum(outer, {2})); }, kRounds, kBatch);
}
BENCHMARK(BM_OpMathWrapperFloor)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
