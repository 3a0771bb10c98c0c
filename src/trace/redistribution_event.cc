// The redistribution event's text (see include/dtsim/trace/redistribution_event.h).
#include "dtsim/trace/redistribution_event.h"

#include "dtsim/layout/error.h"

namespace dtsim {

std::string CallText(const RedistributionEvent& r) {
  std::string text = r.call;
  if (!r.op.empty()) text += " " + r.op;
  if (r.arg) text += StrCat(" arg ", *r.arg);
  return text;
}

}  // namespace dtsim
