// Placement: how a tensor is laid out along one mesh dim, as upstream torch.distributed.tensor
// placements.
//
//   Shard(d)                 S(d)        split tensor dim d with torch.chunk over the ranks of the
//   mesh dim StridedShard(d, sf)      _S(d,sf)    upstream _StridedShard: chunk dim d into sf
//   pieces, chunk each piece over
//                                        the mesh dim, rank i takes the i-th sub-piece of every
//                                        piece
//   Replicate()              R           every rank holds the whole (remaining) tensor
//   Partial(op)              P(op)       every rank holds a partial value; the tensor is their
//   reduction by op
//
// Text forms (canonical, printed by ToString and read back by Parse): S(0), _S(0,2), R, P(sum),
// P(avg), ...; `P` alone is P(sum). Upstream's longer names are accepted too: Shard(0),
// Shard(dim=0), _StridedShard(0, split_factor=2), Replicate(), Partial(sum). A placement list
// prints as "[S(0), R]" and parses from "S(0),R" or "[S(0), R]". Negative dims are kept as given
// until Normalized(ndim) maps them onto the tensor rank (S(-1) on a 2-d tensor: S(1)).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim {

// Placement lists longer than this (in characters) are refused before parsing: a mesh has at most
// 64 dims, so a real list is a few hundred characters.
inline constexpr size_t kMaxPlacementTextBytes = size_t{1} << 16;

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct, kBand, kBor, kBxor };

// "sum", "avg", "min", "max", "product", "band", "bor", "bxor".
std::string ToString(ReduceOp op);
// Reads the names above; nullopt for anything else.
std::optional<ReduceOp> FindReduceOp(std::string_view name);

class Placement {
 public:
  enum class Kind { kShard, kStridedShard, kReplicate, kPartial };

  static Placement Shard(int64_t dim);
  // split_factor >= 1 (InputError otherwise).
  static Placement StridedShard(int64_t dim, int64_t split_factor);
  static Placement Replicate();
  static Placement Partial(ReduceOp op = ReduceOp::kSum);

  // Reads one placement in any accepted text form; throws InputError(field) naming the text.
  static Placement Parse(std::string_view text, const std::string& field = "placements");

  Kind kind() const { return kind_; }
  bool is_shard() const { return kind_ == Kind::kShard; }
  bool is_strided_shard() const { return kind_ == Kind::kStridedShard; }
  // Shard or StridedShard.
  bool is_shard_like() const { return is_shard() || is_strided_shard(); }
  bool is_replicate() const { return kind_ == Kind::kReplicate; }
  bool is_partial() const { return kind_ == Kind::kPartial; }

  // The tensor dim of a Shard / StridedShard (may be negative before Normalized).
  int64_t dim() const { return dim_; }
  // The split factor of a StridedShard (1 otherwise).
  int64_t split_factor() const { return split_factor_; }
  // The reduce op of a Partial.
  ReduceOp reduce_op() const { return op_; }

  // This placement with a negative shard dim mapped onto a tensor of `ndim` dims. Throws
  // InputError(field) when the dim is outside [-ndim, ndim): "placements: 'S(3)' shards dim 3 but
  // the tensor has 2 dims".
  Placement Normalized(int64_t ndim, const std::string& field = "placements") const;

  // The same layout in its simplest form: _S(d,1) is S(d); everything else is itself. Planners and
  // executors work on canonical placements.
  Placement Canonical() const;

  std::string ToString() const;

  bool operator==(const Placement& other) const;
  bool operator!=(const Placement& other) const { return !(*this == other); }

 private:
  Placement(Kind kind, int64_t dim, int64_t split_factor, ReduceOp op)
      : kind_(kind), dim_(dim), split_factor_(split_factor), op_(op) {}

  Kind kind_;
  int64_t dim_;
  int64_t split_factor_;
  ReduceOp op_;
};

using Placements = std::vector<Placement>;

// "[S(0), R]".
std::string ToString(const Placements& placements);
// Reads "S(0),R" or "[S(0), R]"; throws InputError(field) naming the piece that does not parse
// (echoed values are shortened to 80 characters), or for text longer than kMaxPlacementTextBytes.
Placements ParsePlacements(std::string_view text, const std::string& field = "placements");

// Refuses (InputError(field)) a placement list that mixes Partial reduce ops other than sum with
// avg, as upstream's assert_no_mixed_partial_types: "from: '[P(sum), P(max)]' mixes Partial reduce
// ops {max, sum}; only sum with avg may be mixed (upstream refuses the rest)". The one check used
// by the planner, DTensor and the op layer.
void CheckNoMixedPartials(const Placements& placements, const std::string& field);
// True when CheckNoMixedPartials would refuse `placements` (op propagation drops such candidates).
bool HasMixedPartials(const Placements& placements);

}  // namespace dtsim
