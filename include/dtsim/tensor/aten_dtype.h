// Conversions between dtsim's DType (no LibTorch) and at::ScalarType.
#pragma once

#include <c10/core/ScalarType.h>

#include "dtsim/layout/dtype.h"

namespace dtsim {

// float32 → at::kFloat, ...
c10::ScalarType ToScalarType(DType dtype);
// at::kFloat → float32; InputError("dtype") for types dtsim does not handle (complex, float8, ...).
DType FromScalarType(c10::ScalarType type);

}  // namespace dtsim
