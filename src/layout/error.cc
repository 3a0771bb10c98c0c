// Out-of-line pieces of the error policy.
#include "dtsim/layout/error.h"

#include <algorithm>
#include <string_view>

namespace dtsim::internal {

void ThrowInternal(const char* file, int line, const char* condition, const std::string& message) {
  // The source path relative to the project ("src/core/dtensor.cc"), not where it was built.
  std::string_view path(file);
  size_t cut = std::string_view::npos;
  for (const char* folder :
       {"/src/", "/include/", "/simulator/", "/viewer/", "/python/", "/tests/"}) {
    cut = std::min(cut, path.find(folder));
  }
  if (cut != std::string_view::npos) path.remove_prefix(cut + 1);
  throw InternalError(StrCat("internal error at ", path, ":", line, ": check '", condition,
                             "' failed", message.empty() ? "" : ": ", message));
}

}  // namespace dtsim::internal
