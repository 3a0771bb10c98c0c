// Fuzz target: `dtsim trace-diff` on two fuzzed traces. The input is "<trace A>\0<trace B>".
// Properties: DiffTraces on two valid traces never throws; it returns at most `limit` differences;
// the first difference does not depend on the limit; "agree" is symmetric (diff(A, B) is empty
// exactly when diff(B, A) is); RanksThatDiffer is sorted and unique. Two model traces: the same
// properties of DiffModelTraces.
#include <algorithm>
#include <cstdint>

#include "dtsim/layout/error.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  const std::vector<std::string> parts = fuzz::SplitParts(fuzz::AsText(data, size), '\0', 2);
  if (parts.size() != 2) return 0;
  if (parts[0].find("dtsim-model-trace") != std::string::npos) {
    ModelTrace a, b;
    try {
      a = ModelTraceFromJson(ParseJsonText(parts[0], "trace", "A"));
      b = ModelTraceFromJson(ParseJsonText(parts[1], "trace", "B"));
    } catch (const InputError& e) {
      DTSIM_FUZZ_EXPECT(e.field() == "trace", e.what());
      return 0;
    }
    const auto ab = DiffModelTraces(a, b, 20);
    const auto ba = DiffModelTraces(b, a, 20);
    const auto first = DiffModelTraces(a, b, 1);
    DTSIM_FUZZ_EXPECT(ab.size() <= 20 && first.size() <= 1, ab.size());
    DTSIM_FUZZ_EXPECT(ab.empty() == ba.empty(), "asymmetric: ", ab.size(), " vs ", ba.size());
    DTSIM_FUZZ_EXPECT(ab.empty() == first.empty(), "limit 1");
    if (!ab.empty()) {
      DTSIM_FUZZ_EXPECT(first[0].where == ab[0].where && first[0].what == ab[0].what, first[0].what,
                        " vs ", ab[0].what);
    }
    return 0;
  }
  Trace a, b;
  try {
    a = TraceFromJson(ParseJsonText(parts[0], "trace", "A"));
    b = TraceFromJson(ParseJsonText(parts[1], "trace", "B"));
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "trace", e.what());
    return 0;
  }
  const auto ab = DiffTraces(a, b, 20);
  const auto ba = DiffTraces(b, a, 20);
  const auto first = DiffTraces(a, b, 1);
  DTSIM_FUZZ_EXPECT(ab.size() <= 20 && first.size() <= 1, ab.size());
  DTSIM_FUZZ_EXPECT(ab.empty() == ba.empty(), "asymmetric: ", ab.size(), " vs ", ba.size());
  DTSIM_FUZZ_EXPECT(ab.empty() == first.empty(), "limit 1");
  if (!ab.empty()) {
    DTSIM_FUZZ_EXPECT(first[0].where == ab[0].where && first[0].what == ab[0].what, first[0].what,
                      " vs ", ab[0].what);
  }
  const std::vector<int64_t> ranks = RanksThatDiffer(ab);
  DTSIM_FUZZ_EXPECT(std::is_sorted(ranks.begin(), ranks.end()), "sorted");
  DTSIM_FUZZ_EXPECT(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), "unique");
  return 0;
}
