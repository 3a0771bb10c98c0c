// CollectiveKind: the names of what a plan step or a collective call runs — one enum shared by
// plans, the cost model, the executor, collective records and traces (whose JSON keeps the stable
// text names below).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dtsim {

enum class CollectiveKind : uint8_t {
  kNone,        // "none": no data moves (same placement, or a mesh dim of size 1)
  kLocalSplit,  // "local_split": R → S / R → _S, each rank keeps its chunk (no communication)
  kLocalPartition,  // "local_partition": R → P, internal only (sum divides by n; no communication)
  kAllGather,       // "all_gather": S → R, _S → R (also the first half of S → _S)
  kReduceScatter,   // "reduce_scatter": P → S
  kAllReduce,       // "all_reduce": P → R (also the first half of P → _S)
  kAllToAll,        // "all_to_all": S(i) → S(j), i != j (shard dims, even splits)
  kAllToAllSingle,  // "all_to_all_single": dim-0 all-to-all with per-rank split sizes
  kReduce,          // "reduce"
  kBroadcast,       // "broadcast"
  kScatter,         // "scatter"
  kGather,          // "gather"
  kSendRecv,        // "send_recv"
  kBarrier,         // "barrier"
};

// The stable text name, e.g. "all_gather".
std::string_view ToString(CollectiveKind kind);
// Reads a text name; nullopt for anything else.
std::optional<CollectiveKind> FindCollectiveKind(std::string_view name);
// True when the kind moves data between ranks (every kind but none, local_split, local_partition
// and barrier).
bool MovesData(CollectiveKind kind);

}  // namespace dtsim
