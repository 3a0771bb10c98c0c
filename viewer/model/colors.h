// The viewer's colours: one colour per rank, the same in every panel, picture and screenshot, and
// the few marking colours (diff, selection, groups). Rank colours are never fully saturated, so the
// diff colour (saturated red) can never be mistaken for a rank, even by a pixel test that compares
// exact values.
//
// Example: RankColor(3) is the fill of rank 3's mesh cell, of rank 3's blocks in the tensor panel
// and of its bytes bar; a rank that differs between two traces is filled with kDiffColor in the
// mesh panel instead.
#pragma once

#include <cstdint>

#include "draw.h"

namespace dtsim::viewer {

// A categorical colour for `rank`: golden-ratio steps around the hue circle (neighbouring ranks
// differ strongly), saturation 0.45..0.62 and value 0.80..0.95, opaque. Deterministic across runs
// and machines.
Rgba RankColor(int64_t rank);

// Black or white, whichever reads better on `background`.
Rgba TextColorOn(Rgba background);

// An outline of `preferred` colour on a cell filled with `fill`, or black where the two are too
// close to tell apart (a yellow group ring on a yellowish rank).
Rgba OutlineOn(Rgba fill, Rgba preferred);

// Fully saturated red: ranks that differ between two traces.
inline constexpr Rgba kDiffColor{235, 20, 20, 255};
// White: the selected or hovered rank, and what the other panel hovers.
inline constexpr Rgba kHighlightColor{255, 255, 255, 255};
// Yellow: the collective group of the selected rank in the current step.
inline constexpr Rgba kGroupColor{255, 210, 0, 255};
// Orange: a rank whose recorded shape or offset disagrees with the layout rule (a broken or real
// trace).
inline constexpr Rgba kAnomalyColor{255, 140, 0, 255};
// Outline of blocks that hold Partial values (to be reduced), and their label.
inline constexpr Rgba kPartialColor{120, 200, 255, 255};
// Panel backgrounds, text, grid lines.
inline constexpr Rgba kBackgroundColor{30, 30, 36, 255};
inline constexpr Rgba kTextColor{230, 230, 230, 255};
inline constexpr Rgba kDimTextColor{150, 150, 160, 255};
inline constexpr Rgba kGridColor{70, 70, 80, 255};
inline constexpr Rgba kCellBorderColor{20, 20, 24, 255};

}  // namespace dtsim::viewer
