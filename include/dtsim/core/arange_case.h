// Arange cases: the inputs `dtsim redistribute`, the trace checks and the benchmarks share, exact
// by construction.
//
// The global tensor is arange(numel) in the spec's dtype, reshaped (bool: arange % 2). A source
// spec with Partial placements is built as upstream tests build one with from_local: each rank
// holds its shard of the global tensor (Partial read as Replicate) times the product, over the
// Partial mesh dims, of (1 + its coordinate there). Mesh (2, 2) with [P(sum), R] on arange(4):
// ranks at dp=0 hold arange(4), ranks at dp=1 hold 2·arange(4); the global tensor is their sum,
// 3·arange(4).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "dtsim/core/dtensor.h"

namespace dtsim {

// arange(numel) in the spec's dtype and shape.
at::Tensor ArangeGlobal(const DTensorSpec& spec);

// The source DTensor of `spec` as described above (distribute_tensor of the arange tensor when
// nothing is Partial), on `collectives` (default: a fresh simulated world); on a real backend every
// rank builds only its own shard.
DTensor MakeArangeSource(const DTensorSpec& spec,
                         std::shared_ptr<Collectives> collectives = nullptr);

// The same construction from any global tensor of the spec's shape and dtype (`dtsim op` uses
// ((arange(numel) + 3k) mod 7) - 3 for tensor argument k).
DTensor MakeSourceFromGlobal(const DTensorSpec& spec, const at::Tensor& global,
                             std::shared_ptr<Collectives> collectives = nullptr);
// The tensor a source made by MakeSourceFromGlobal(spec, global) stands for (the reduction of its
// Partials).
at::Tensor ExpectedGlobalOf(const DTensorSpec& spec, const at::Tensor& global);

// The global tensor the source of `spec` stands for, computed from the arange tensor alone (no
// collectives): the reduction over the Partial mesh dims of the scaled copies.
at::Tensor ExpectedArangeGlobal(const DTensorSpec& spec);

// The relative tolerance comparing results of `spec` needs, 0 for exact. A floating dtype with a
// Partial avg (it divides), or with a Partial sum/product over more than one mesh dim (the plan and
// the judge reduce in different orders, and a value beyond the dtype's exact integers rounds
// differently: bfloat16 [P(sum), P(sum)] on 4x3 ranks of arange(300)) is compared within (ranks of
// the Partial dims) · the dtype's epsilon (the bound on the difference of two summation orders of
// that many terms).
double ArangeTolerance(const DTensorSpec& spec);

}  // namespace dtsim
