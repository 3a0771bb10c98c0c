// Fault injection for real runs: a rank that misbehaves on purpose, so tests can show that dtsim
// reports a wrong result with its step and rank, and ends a stuck run within its timeout instead of
// hanging. No LibTorch.
//
//   wrong-offset:R      rank R sends its shard shifted by one element (its data lands at the wrong
//   offset) wrong-op:R          rank R reduces with another op (sum <-> max; other ops become sum)
//   drop-rank:R         rank R skips a collective
//   stall-rank:R:S      rank R sleeps S seconds before a collective
// A fault strikes once, at the first collective after it is armed that it can affect (wrong-offset:
// one where rank R sends data; wrong-op: a reduction; drop/stall: any); "@K" strikes at the K-th
// such collective instead (0-based): "drop-rank:3@1". Example: ParseFault("stall-rank:1:30") =
// {kStallRank, rank 1, 30 s}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtsim {

struct FaultSpec {
  enum class Kind { kNone, kWrongOffset, kWrongOp, kDropRank, kStallRank };
  Kind kind = Kind::kNone;
  int64_t rank = 0;
  double seconds = 0;      // stall-rank only
  int64_t occurrence = 0;  // strikes at the occurrence-th eligible collective

  bool active() const { return kind != Kind::kNone; }
  // "wrong-offset:3", "stall-rank:1:30", "drop-rank:3@1"; "none" when inactive.
  std::string ToString() const;
};

// Reads the forms above (also "none" or ""). InputError(field) naming the text and the accepted
// forms otherwise.
FaultSpec ParseFault(std::string_view text, const std::string& field = "inject-fault");

}  // namespace dtsim
