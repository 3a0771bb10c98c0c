// Op-trace arguments against ATen's schemas (see include/dtsim/core/op_schema.h).
#include "dtsim/core/op_schema.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <vector>

#include "dtsim/layout/error.h"

namespace dtsim {

std::string TensorArgumentProblem(const std::string& op, int64_t arg) {
  if (op.rfind("aten::", 0) != 0 && op.rfind("prims::", 0) != 0) {
    return arg == 0 ? "" : StrCat("arg ", arg, ", but '", op, "' converts one tensor (arg 0)");
  }
  const size_t dot = op.find('.');
  const c10::OperatorName name(op.substr(0, dot),
                               dot == std::string::npos ? "" : op.substr(dot + 1));
  const std::optional<c10::OperatorHandle> handle = c10::Dispatcher::singleton().findSchema(name);
  if (!handle) {
    // prims ops are defined by torch's Python package, which a C++ program may not have loaded.
    return op.rfind("prims::", 0) == 0 ? "" : StrCat("op '", op, "' is not an op of this LibTorch");
  }
  std::vector<std::string> tensors;  // the names of its tensor arguments
  for (const c10::Argument& a : handle->schema().arguments()) {
    const c10::TypePtr& type = a.real_type();
    if (type->kind() == c10::TypeKind::ListType &&
        type->expectRef<c10::ListType>().getElementType()->kind() == c10::TypeKind::TensorType) {
      return "";  // a tensor list: any number of tensors
    }
    const bool tensor = type->kind() == c10::TypeKind::TensorType ||
                        (type->kind() == c10::TypeKind::OptionalType &&
                         type->expectRef<c10::OptionalType>().getElementType()->kind() ==
                             c10::TypeKind::TensorType);
    if (tensor) tensors.push_back(a.name());
  }
  if (arg < static_cast<int64_t>(tensors.size())) return "";
  std::string names;
  for (const std::string& t : tensors) names += (names.empty() ? "" : ", ") + t;
  return StrCat("arg ", arg, ", but ", op, " has ", tensors.size(), " tensor argument",
                tensors.size() == 1 ? "" : "s", " (", names, "), counted from 0");
}

}  // namespace dtsim
