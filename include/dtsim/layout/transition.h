// Transition: one placement change on one mesh dim, and THE table of what it runs — shared by the
// planner (which names each step's collective from it) and the executor (which runs the step's
// collective and checks that it is the one this table gives). Pure placement logic, no LibTorch.
//
//   from → to (n = mesh dim size > 1)  collective       then_local_split
//   X → X, or n == 1                   none
//   S/_S → R                           all_gather
//   P → R                              all_reduce
//   R → S, R → _S                      local_split
//   P → S                              reduce_scatter
//   S(i) → S(j), i != j                all_to_all
//   S(d) → S(d) with another split,    all_gather       true   (gather, then keep the rank's piece)
//   _S → S, S → _S, _S → _S
//   P → _S                             all_reduce       true
//   R → P                              local_partition         (internal: sum divides by n)
//   S/_S → P, P(a) → P(b)              refused (InputError)
#pragma once

#include <cstdint>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/layout/placement.h"

namespace dtsim {

// One placement change on one mesh dim.
struct Transition {
  int64_t mesh_dim = 0;
  Placement from = Placement::Replicate();
  Placement to = Placement::Replicate();
};

// What a transition runs.
struct TransitionRule {
  CollectiveKind collective = CollectiveKind::kNone;
  bool then_local_split = false;  // gather/reduce, then keep the rank's chunk
  bool operator==(const TransitionRule& o) const {
    return collective == o.collective && then_local_split == o.then_local_split;
  }
};

// The row of the table above for `from` → `to` on a mesh dim of `mesh_dim_size` ranks. Throws
// InputError("placements") for the refused rows, naming both placements and the mesh dim.
// Example: RuleFor(S(0), R, 4) = {all_gather, false}; RuleFor(S(0), _S(0,2), 4) = {all_gather,
// true}.
TransitionRule RuleFor(const Placement& from, const Placement& to, int64_t mesh_dim_size,
                       int64_t mesh_dim = 0);

}  // namespace dtsim
