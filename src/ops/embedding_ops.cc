// Sharding strategies of the embedding op family (upstream: torch/distributed/tensor/_ops/_embedding_ops.py).
#include "dtsim/ops/strategy.h"
#include "ops/families.h"

namespace dtsim {
namespace ops {

void RegisterEmbeddingOps() {}

}  // namespace ops
}  // namespace dtsim
