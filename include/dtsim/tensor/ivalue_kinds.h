// Cheap tests of a boxed argument's list kind, for the kernels' per-call loops over the stack.
// c10's IValue::isTensorList() and isIntList() are out of line and, where the kinds differ (an int
// list asked whether it holds tensors), compare against a type they fetch by reference-counted
// pointer; these read the list's element type kind in place. For a build with full types (not
// mobile's DynamicType) the kind alone decides, so the answers are the same.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

namespace dtsim {

// Whether `v` is a list whose element type is of `kind` (false for any other value).
inline bool ListOfKind(const c10::IValue& v, c10::TypeKind kind) {
  if (!v.isList()) return false;
  const auto* list = static_cast<const c10::detail::ListImpl*>(v.internalToPointer());
  return list->elementType->kind() == kind;
}

// v.isTensorList(), without the type pointer's copy.
inline bool IsTensorList(const c10::IValue& v) { return ListOfKind(v, c10::TypeKind::TensorType); }
// v.isIntList(), the same way.
inline bool IsIntList(const c10::IValue& v) { return ListOfKind(v, c10::TypeKind::IntType); }
// v.isSymIntList(), the same way.
inline bool IsSymIntList(const c10::IValue& v) { return ListOfKind(v, c10::TypeKind::SymIntType); }

}  // namespace dtsim
