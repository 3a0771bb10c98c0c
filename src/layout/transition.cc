// CollectiveKind names and the transition table (see include/dtsim/layout/transition.h).
#include "dtsim/layout/transition.h"

#include <string>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace {

struct KindName {
  CollectiveKind kind;
  std::string_view name;
};
constexpr KindName kKindNames[] = {
    {CollectiveKind::kNone, "none"},
    {CollectiveKind::kLocalSplit, "local_split"},
    {CollectiveKind::kLocalPartition, "local_partition"},
    {CollectiveKind::kAllGather, "all_gather"},
    {CollectiveKind::kReduceScatter, "reduce_scatter"},
    {CollectiveKind::kAllReduce, "all_reduce"},
    {CollectiveKind::kAllToAll, "all_to_all"},
    {CollectiveKind::kAllToAllSingle, "all_to_all_single"},
    {CollectiveKind::kReduce, "reduce"},
    {CollectiveKind::kBroadcast, "broadcast"},
    {CollectiveKind::kScatter, "scatter"},
    {CollectiveKind::kGather, "gather"},
    {CollectiveKind::kSendRecv, "send_recv"},
    {CollectiveKind::kBarrier, "barrier"},
};

}  // namespace

std::string_view ToString(CollectiveKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "?";
}

std::optional<CollectiveKind> FindCollectiveKind(std::string_view name) {
  for (const KindName& k : kKindNames) {
    if (k.name == name) return k.kind;
  }
  return std::nullopt;
}

bool MovesData(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kNone:
    case CollectiveKind::kLocalSplit:
    case CollectiveKind::kLocalPartition:
    case CollectiveKind::kBarrier:
      return false;
    default:
      return true;
  }
}

TransitionRule RuleFor(const Placement& from, const Placement& to, int64_t mesh_dim_size,
                       int64_t mesh_dim) {
  using K = CollectiveKind;
  if (from == to || mesh_dim_size == 1) return {K::kNone, false};
  if (to.is_partial()) {
    if (from.is_replicate()) return {K::kLocalPartition, false};
    throw InputError("placements",
                     StrCat("redistributing from ", from.ToString(), " to ", to.ToString(),
                            " on mesh dim ", mesh_dim, " is not supported",
                            from.is_partial() ? ": one partial type cannot become another" : ""));
  }
  if (to.is_replicate()) return {from.is_partial() ? K::kAllReduce : K::kAllGather, false};
  if (from.is_replicate()) return {K::kLocalSplit, false};
  if (from.is_partial())
    return to.is_shard() ? TransitionRule{K::kReduceScatter, false}
                         : TransitionRule{K::kAllReduce, true};
  // shard-like → shard-like
  if (from.is_shard() && to.is_shard() && from.dim() != to.dim()) return {K::kAllToAll, false};
  return {K::kAllGather, true};
}

}  // namespace dtsim
