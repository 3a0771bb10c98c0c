// Draw records as SVG text: `dtsim layout --svg` and anything else that wants a picture without a
// window.
//
// Example: ToSvg(LayoutPicture(TraceModel::FromSpec(spec), {900, 420}), 900, 420) is a standalone
// <svg> document whose <rect> of rank 3 is filled with ToHex(RankColor(3)) and carries
// data-rank="3".
#pragma once

#include <string>

#include "draw.h"

namespace dtsim::viewer {

// A standalone SVG 1.1 document of `width` x `height` pixels over `background`. Rects carry
// data-role / data-rank / data-block attributes so tools can find them; text is escaped.
std::string ToSvg(const DrawList& list, int width, int height, Rgba background);

}  // namespace dtsim::viewer
