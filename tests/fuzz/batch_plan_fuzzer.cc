// Fuzz target: the --batch JSON-line reader of `dtsim plan` (RunBatchLine with PlanCase), without a
// process. Each input line (at most 4) is a batch line. Properties (fuzz_common.h CheckBatchInput):
// every line is answered with the command's JSON or {"error": "<field>: ...", "field", "line"} —
// never an internal error, never an exception, never unprintable output; echoed values are capped.
#include <cstdint>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dtsim::cli::CaseLimits limits = dtsim::fuzz::FuzzLimits();
  dtsim::fuzz::CheckBatchInput(
      data, size, [](const nlohmann::json& c) { return dtsim::cli::PlanCase(c, limits); });
  return 0;
}
