// Fuzz target: `dtsim trace-diff` on two fuzzed traces. The input is "<trace A>\0<trace B>".
// Properties: DiffTraces on two valid traces never throws; it returns at most `limit` differences;
// the first difference does not depend on the limit; "agree" is symmetric (diff(A, B) is empty
// exactly when diff(B, A) is); RanksThatDiffer is sorted and unique. Two model traces: the same
// properties of DiffModelTraces.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/trace/model_trace.h"
#include "dtsim/trace/trace.h"
#include "dtsim/trace/trace_diff.h"
#include "fuzz_common.h"

namespace {

// The properties both kinds of trace share: `read` reads one part, `diff(a, b, limit)` diffs.
// Returns the differences of A and B (limit 20), or nullopt where a part is refused.
template <typename TraceT, typename Read, typename Diff>
std::optional<std::vector<dtsim::TraceDifference>> CheckDiff(const std::vector<std::string>& parts,
                                                             Read read, Diff diff) {
  using namespace dtsim;
  TraceT a, b;
  try {
    a = read(ParseJsonText(parts[0], "trace", "A"));
    b = read(ParseJsonText(parts[1], "trace", "B"));
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "trace", e.what());
    return std::nullopt;
  }
  const auto ab = diff(a, b, 20);
  const auto ba = diff(b, a, 20);
  const auto first = diff(a, b, 1);
  DTSIM_FUZZ_EXPECT(ab.size() <= 20 && first.size() <= 1, ab.size());
  DTSIM_FUZZ_EXPECT(ab.empty() == ba.empty(), "asymmetric: ", ab.size(), " vs ", ba.size());
  DTSIM_FUZZ_EXPECT(ab.empty() == first.empty(), "limit 1");
  if (!ab.empty()) {
    DTSIM_FUZZ_EXPECT(first[0].where == ab[0].where && first[0].what == ab[0].what, first[0].what,
                      " vs ", ab[0].what);
  }
  return ab;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  const std::vector<std::string> parts = fuzz::SplitParts(fuzz::AsText(data, size), '\0', 2);
  if (parts.size() != 2) return 0;
  if (parts[0].find("dtsim-model-trace") != std::string::npos) {
    CheckDiff<ModelTrace>(
        parts, [](const nlohmann::json& j) { return ModelTraceFromJson(j); },
        [](const ModelTrace& a, const ModelTrace& b, size_t limit) {
          return DiffModelTraces(a, b, limit);
        });
    return 0;
  }
  const auto ab = CheckDiff<Trace>(
      parts, [](const nlohmann::json& j) { return TraceFromJson(j); },
      [](const Trace& a, const Trace& b, size_t limit) { return DiffTraces(a, b, limit); });
  if (!ab) return 0;
  const std::vector<int64_t> ranks = RanksThatDiffer(*ab);
  DTSIM_FUZZ_EXPECT(std::is_sorted(ranks.begin(), ranks.end()), "sorted");
  DTSIM_FUZZ_EXPECT(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), "unique");
  return 0;
}
