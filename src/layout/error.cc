// Out-of-line pieces of the error policy.
#include "dtsim/layout/error.h"

namespace dtsim::internal {

void ThrowInternal(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(StrCat("internal error at ", file, ":", line, ": check '", condition,
                             "' failed", message.empty() ? "" : ": ", message));
}

}  // namespace dtsim::internal
