// Fuzz target: the placement-list parser (what --placements, --from, --to and --step read).
// Properties: ParsePlacements either returns placements or throws InputError("placements") whose
// message is capped; an accepted list prints (ToString) to the canonical text, which parses back to
// the same list and prints the same (a fixed point); Normalized on a tensor of 0..4 dims keeps
// shard dims in range or refuses; Canonical is idempotent.
#include <cstdint>

#include "dtsim/layout/error.h"
#include "dtsim/layout/placement.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  const std::string_view text = fuzz::AsText(data, size);
  Placements parsed;
  try {
    parsed = ParsePlacements(text);
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "placements", e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 1024,
                      "capped message: ", std::string(e.what()).size());
    return 0;
  }
  const std::string canonical = ToString(parsed);
  Placements again;
  try {
    again = ParsePlacements(canonical);
  } catch (const InputError& e) {
    fuzz::Fail(StrCat("the canonical form ", canonical, " does not parse back: ", e.what()));
  }
  DTSIM_FUZZ_EXPECT(again == parsed, canonical, " parses to ", ToString(again));
  DTSIM_FUZZ_EXPECT(ToString(again) == canonical, canonical);
  for (const Placement& p : parsed) {
    DTSIM_FUZZ_EXPECT(p.Canonical().Canonical() == p.Canonical(), p.ToString());
    DTSIM_FUZZ_EXPECT(Placement::Parse(p.ToString()) == p, p.ToString());
    if (p.is_strided_shard()) DTSIM_FUZZ_EXPECT(p.split_factor() >= 1, p.ToString());
    for (int64_t ndim = 0; ndim <= 4; ++ndim) {
      try {
        const Placement n = p.Normalized(ndim);
        if (n.is_shard_like())
          DTSIM_FUZZ_EXPECT(n.dim() >= 0 && n.dim() < ndim, p.ToString(), " on ", ndim, " dims");
      } catch (const InputError& e) {
        DTSIM_FUZZ_EXPECT(p.is_shard_like() && (p.dim() >= ndim || p.dim() < -ndim), p.ToString(),
                          ": ", e.what());
      }
    }
  }
  return 0;
}
