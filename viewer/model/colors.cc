// The viewer's colours (see colors.h).
#include "colors.h"

#include <algorithm>
#include <cmath>

namespace dtsim::viewer {
namespace {

Rgba FromHsv(double h, double s, double v) {
  const double i = std::floor(h * 6);
  const double f = h * 6 - i;
  const double p = v * (1 - s), q = v * (1 - f * s), t = v * (1 - (1 - f) * s);
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(i) % 6) {
    case 0:
      r = v, g = t, b = p;
      break;
    case 1:
      r = q, g = v, b = p;
      break;
    case 2:
      r = p, g = v, b = t;
      break;
    case 3:
      r = p, g = q, b = v;
      break;
    case 4:
      r = t, g = p, b = v;
      break;
    default:
      r = v, g = p, b = q;
      break;
  }
  auto byte = [](double x) {
    return static_cast<uint8_t>(std::lround(std::clamp(x, 0.0, 1.0) * 255));
  };
  return {byte(r), byte(g), byte(b), 255};
}

}  // namespace

Rgba RankColor(int64_t rank) {
  // Golden-ratio hue steps; saturation and value cycle with periods 3 and 5 so that ranks with
  // similar hues (rank and rank + 21 or + 34) still differ in shade.
  const uint64_t r = static_cast<uint64_t>(rank < 0 ? -rank : rank);
  const double hue = std::fmod(0.07 + static_cast<double>(r % 100003) * 0.6180339887498949, 1.0);
  const double sat = 0.45 + 0.085 * static_cast<double>(r % 3);         // 0.45 .. 0.62
  const double val = 0.80 + 0.0375 * static_cast<double>((r / 3) % 5);  // 0.80 .. 0.95
  return FromHsv(hue, sat, val);
}

Rgba TextColorOn(Rgba bg) {
  const double luma = 0.299 * bg.r + 0.587 * bg.g + 0.114 * bg.b;
  return luma > 140 ? Rgba{0, 0, 0, 255} : Rgba{255, 255, 255, 255};
}

Rgba OutlineOn(Rgba fill, Rgba preferred) {
  const double dr = fill.r - preferred.r, dg = fill.g - preferred.g, db = fill.b - preferred.b;
  return std::sqrt(dr * dr + dg * dg + db * db) < 150 ? Rgba{0, 0, 0, 255} : preferred;
}

}  // namespace dtsim::viewer
