// DType <-> at::ScalarType.
#include "dtsim/tensor/aten_dtype.h"

#include "dtsim/layout/error.h"

namespace dtsim {
namespace {

struct Pair {
  DType dtype;
  c10::ScalarType type;
};
constexpr Pair kPairs[] = {
    {DType::kFloat32, c10::ScalarType::Float}, {DType::kFloat64, c10::ScalarType::Double},
    {DType::kFloat16, c10::ScalarType::Half},  {DType::kBFloat16, c10::ScalarType::BFloat16},
    {DType::kInt64, c10::ScalarType::Long},    {DType::kInt32, c10::ScalarType::Int},
    {DType::kInt16, c10::ScalarType::Short},   {DType::kInt8, c10::ScalarType::Char},
    {DType::kUInt8, c10::ScalarType::Byte},    {DType::kBool, c10::ScalarType::Bool},
};

}  // namespace

c10::ScalarType ToScalarType(DType dtype) {
  for (const Pair& p : kPairs) {
    if (p.dtype == dtype) return p.type;
  }
  DTSIM_CHECK(false, "unknown DType");
  return c10::ScalarType::Float;
}

DType FromScalarType(c10::ScalarType type) {
  for (const Pair& p : kPairs) {
    if (p.type == type) return p.dtype;
  }
  throw InputError("dtype", StrCat("tensors of type ", c10::toString(type), " are not supported"));
}

}  // namespace dtsim
