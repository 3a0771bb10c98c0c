// Draw records rasterised in software into an RGBA image, and PNG encoding (stb_image_write):
// `dtsim layout --png` and tests, without a window or OpenGL. Text uses stb_easy_font (ASCII, about
// 6 x 12 pixels per character; pass kRasterTextMetrics to the layout step so labels are sized for
// it).
//
// Example: Image img = Rasterize(list, 900, 420, kBackgroundColor);  img.At(x, y) is the colour of
// that pixel;
//          WriteFileAtomically("layout.png", EncodePng(img), "png").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "draw.h"

namespace dtsim::viewer {

inline constexpr TextMetrics kRasterTextMetrics{6, 12};

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgba;  // row-major, top row first, 4 bytes per pixel
  Rgba At(int x, int y) const;
};

// Paints `list` in order (rect fills, rect borders inside the rect, lines, texts), with alpha
// blending, clipped to the image.
Image Rasterize(const DrawList& list, int width, int height, Rgba background);

// The PNG file bytes of `image`. InternalError if the encoder fails.
std::string EncodePng(const Image& image);

// Reads PNG bytes back (stb_image): for tests and tools. nullopt-like empty image on failure.
Image DecodePng(const std::string& bytes);

}  // namespace dtsim::viewer
