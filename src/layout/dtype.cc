// DType names and sizes.
#include "dtsim/layout/dtype.h"

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  int64_t item_size;
  bool integral;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kFloat32, "float32", 4, false}, {DType::kFloat64, "float64", 8, false},
    {DType::kFloat16, "float16", 2, false}, {DType::kBFloat16, "bfloat16", 2, false},
    {DType::kInt64, "int64", 8, true},      {DType::kInt32, "int32", 4, true},
    {DType::kInt16, "int16", 2, true},      {DType::kInt8, "int8", 1, true},
    {DType::kUInt8, "uint8", 1, true},      {DType::kBool, "bool", 1, true},
};

const DTypeInfo& Info(DType dtype) {
  for (const auto& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  DTSIM_CHECK(false, "unknown DType ", static_cast<int>(dtype));
  return kDTypes[0];
}

}  // namespace

std::string ToString(DType dtype) { return Info(dtype).name; }

DType ParseDType(std::string_view text, const std::string& field) {
  std::string t(text);
  if (t.rfind("torch.", 0) == 0) t = t.substr(6);
  if (t == "float") t = "float32";
  if (t == "double") t = "float64";
  if (t == "half") t = "float16";
  if (t == "long") t = "int64";
  if (t == "int") t = "int32";
  for (const auto& info : kDTypes) {
    if (t == info.name) return info.dtype;
  }
  throw InputError(
      field,
      StrCat("unknown dtype '", ExcerptText(text, 40),
             "' (expected float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8"
             " or bool)"));
}

int64_t ItemSize(DType dtype) { return Info(dtype).item_size; }

bool IsIntegral(DType dtype) { return Info(dtype).integral; }

}  // namespace dtsim
