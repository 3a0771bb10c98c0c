// DType: the element types dtsim's layouts and plans know, without pulling in LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtsim {

enum class DType {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool
};

// Upstream's names: "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
// "uint8", "bool".
std::string ToString(DType dtype);
// Reads those names (also "float", "double", "half", "long", "int" and a "torch." prefix); throws
// InputError(field) naming the text otherwise.
DType ParseDType(std::string_view text, const std::string& field = "dtype");
// Bytes per element: float32 → 4.
int64_t ItemSize(DType dtype);
// True for the integer and bool types (the ones band/bor/bxor accept).
bool IsIntegral(DType dtype);

}  // namespace dtsim
