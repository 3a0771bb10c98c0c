// CollectiveEvent: "a collective happened" — the one type every producer and every trace format
// uses for it. The Collectives front reports each call with it (its rows: every rank this process
// holds); a redistribution's trace keeps those events per plan step; a recording holds the ones
// upstream's ranks issued; the model run and the parallel styles report the planned ones with
// their cause and cost; model traces nest them in ops. Each producer fills what it knows and
// leaves the rest empty; each trace format writes the fields its documented JSON form has
// (docs/trace-format.md, docs/python.md), so files keep their keys. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtsim/layout/collective_kind.h"
#include "dtsim/trace/observers.h"

namespace dtsim {

struct CollectiveEvent {
  CollectiveKind kind = CollectiveKind::kNone;

  // Where it ran: every group of the call (global ranks; SPMD calls run on all at once) and the
  // mesh dim they run along ("" when the producer does not name one).
  std::vector<std::vector<int64_t>> groups;
  std::string mesh_dim;

  // Per rank: the rows, one per rank of `ranks` (ascending), in that order. A producer that keeps
  // no rows (the cost model's planned collectives) leaves them all empty; one that does not know a
  // column leaves that column empty.
  std::vector<int64_t> ranks;
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<std::vector<int64_t>> output_shapes;
  // Rows whose buffer was a list of tensors with no one shape (recordings write null there; the
  // row's shape is empty and its bytes count the whole list), as indices into `ranks`; usually
  // none.
  std::vector<size_t> unshaped_inputs, unshaped_outputs;
  std::vector<int64_t> input_bytes;     // the buffer each rank handed in
  std::vector<int64_t> output_bytes;    // the buffer each rank got back
  std::vector<int64_t> bytes_sent;      // what crossed the wire under ring algorithms
  std::vector<int64_t> bytes_received;  // (docs/trace-format.md, "Two byte counts")
  std::vector<double> time_us;          // measured wall time (real backends)
  // Each rank's input before and output after it ("xxh3:<16 hex>"), when recorded.
  std::vector<std::string> input_hashes;
  std::vector<std::string> output_hashes;

  // Planned collectives: the largest per-rank wire bytes and the cost model's time (the slowest
  // group). Producers with rows leave them 0.
  int64_t max_bytes_sent = 0;
  int64_t max_bytes_received = 0;
  double est_us = 0;

  // Why: "aten::mm arg 1", "fully_shard all-gather of layers.0", "RowwiseParallel output of wo";
  // the redistribution's placements before and after ("" for a style's own call); and whether an
  // op's sharding propagation caused it.
  std::string cause;
  std::string from, to;
  bool implicit = false;

  // Ranks per group (0 without groups).
  int64_t group_size() const {
    return groups.empty() ? 0 : static_cast<int64_t>(groups.front().size());
  }
};

// Receives every collective a Collectives object runs while registered in its observers()
// (CollectiveObservers::Scoped) — the one observer of collectives; op-level observers
// (ops::OpObserver) hear the planned ones with their cause in the same type.
class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;
  virtual void OnCollective(const CollectiveEvent& event) = 0;
};
using CollectiveObservers = Observers<CollectiveObserver>;

}  // namespace dtsim
