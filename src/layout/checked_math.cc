// Overflow-checked arithmetic (see include/dtsim/layout/checked_math.h).
#include "dtsim/layout/checked_math.h"

#include <limits>

#include "dtsim/layout/error.h"

namespace dtsim {

int64_t MulOrThrow(const std::vector<int64_t>& factors, const std::string& field,
                   const std::string& what) {
  int64_t product = 1;
  bool overflow = false;
  for (int64_t f : factors) {
    if (auto p = CheckedMul(product, f)) {
      product = *p;
    } else {
      overflow = true;
      break;
    }
  }
  if (!overflow) return product;
  std::string text;
  for (size_t i = 0; i < factors.size() && i < 16; ++i) text += StrCat(i ? " × " : "", factors[i]);
  if (factors.size() > 16) text += StrCat(" × … (", factors.size(), " factors)");
  throw InputError(field, StrCat(what, ": ", text, " overflows 64-bit integers (more than ",
                                 std::numeric_limits<int64_t>::max(), ")"));
}

}  // namespace dtsim
