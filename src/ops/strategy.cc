// The strategy registry and the small helpers shared by the op family files.
#include "dtsim/ops/strategy.h"

#include <ATen/core/function_schema.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "dtsim/layout/error.h"
#include "ops/families.h"

namespace dtsim {
namespace ops {

std::string RulePlacement::ToString() const {
  switch (kind_) {
    case Kind::kPlacement:
      return placement_.ToString();
    case Kind::kShardOn:
      return StrCat("S?(", dim_, ")");
    case Kind::kNone:
      return "None";
  }
  return "?";
}

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, StrategyEntry, std::less<>> entries;
};
Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

// Accepts "mm", "aten::mm", "aten::mm.default" and stores "aten::mm".
std::string CanonicalOpName(std::string name) {
  if (name.find("::") == std::string::npos) name = "aten::" + name;
  const std::string suffix = ".default";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name;
}

}  // namespace

void RegisterSingleDimStrategy(const std::vector<std::string>& ops, SingleDimStrategyFn fn,
                               SingleDimOptions options) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (const std::string& op : ops) {
    StrategyEntry& e = reg.entries[CanonicalOpName(op)];
    e.single_dim = fn;
    e.options = options;
    e.op_strategy.reset();
  }
}

void RegisterOpStrategy(const std::vector<std::string>& ops, OpStrategyFn fn) {
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (const std::string& op : ops) {
    StrategyEntry& e = reg.entries[CanonicalOpName(op)];
    e.op_strategy = fn;
    e.single_dim.reset();
  }
}

void EnsureStrategiesRegistered() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Pointwise last: its table is upstream's final registry, where clone, copy_ and to.dtype
    // resolve to pointwise rules although _tensor_ops.py registers them too.
    RegisterMatrixOps();
    RegisterMathOps();
    RegisterViewOps();
    RegisterTensorOps();
    RegisterEmbeddingOps();
    RegisterRandomOps();
    RegisterPointwiseOps();
  });
}

const StrategyEntry* FindStrategy(std::string_view op_name) {
  EnsureStrategiesRegistered();
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.entries.find(op_name);
  return it == reg.entries.end()
             ? nullptr
             : &it->second;  // entries are never erased: the pointer stays valid
}

std::vector<std::string> RegisteredOps() {
  EnsureStrategiesRegistered();
  Registry& reg = GetRegistry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<std::string> names;
  for (const auto& [name, entry] : reg.entries) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------------------------------------------------------
// OpCallInfo accessors

namespace {
const c10::IValue& Arg(const OpCallInfo& call, size_t i) {
  DTSIM_CHECK(i < call.args.size(), call.name, ": argument ", i, " of ", call.args.size());
  return call.args[i];
}
}  // namespace

int64_t OpCallInfo::Int(size_t i) const {
  const c10::IValue& v = Arg(*this, i);
  if (v.isInt()) return v.toInt();
  if (v.isSymInt()) return v.toSymInt().guard_int(__FILE__, __LINE__);
  if (v.isBool()) return v.toBool();
  throw InputError(name, StrCat("argument ", i, " must be an int, got ", v.tagKind()));
}

std::optional<int64_t> OpCallInfo::OptInt(size_t i) const {
  if (Arg(*this, i).isNone()) return std::nullopt;
  return Int(i);
}

std::vector<int64_t> OpCallInfo::IntList(size_t i) const {
  const c10::IValue& v = Arg(*this, i);
  if (v.isInt()) return {v.toInt()};  // int[1] arguments accept a single int
  if (v.isIntList()) return v.toIntVector();
  if (v.isSymIntList()) {
    std::vector<int64_t> out;
    for (const c10::SymInt& s : v.toSymIntVector()) out.push_back(s.guard_int(__FILE__, __LINE__));
    return out;
  }
  if (v.isList()) {
    std::vector<int64_t> out;
    for (const c10::IValue& e : v.toList())
      out.push_back(e.isSymInt() ? e.toSymInt().guard_int(__FILE__, __LINE__) : e.toInt());
    return out;
  }
  throw InputError(name, StrCat("argument ", i, " must be a list of ints, got ", v.tagKind()));
}

std::optional<std::vector<int64_t>> OpCallInfo::OptIntList(size_t i) const {
  if (Arg(*this, i).isNone()) return std::nullopt;
  return IntList(i);
}

double OpCallInfo::Double(size_t i) const {
  const c10::IValue& v = Arg(*this, i);
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  if (v.isScalar()) return v.toScalar().toDouble();
  throw InputError(name, StrCat("argument ", i, " must be a number, got ", v.tagKind()));
}

bool OpCallInfo::Bool(size_t i) const {
  const c10::IValue& v = Arg(*this, i);
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt() != 0;
  throw InputError(name, StrCat("argument ", i, " must be a bool, got ", v.tagKind()));
}

bool OpCallInfo::IsScalar(size_t i) const {
  const c10::IValue& v = Arg(*this, i);
  return v.isScalar() || v.isInt() || v.isDouble() || v.isBool() || v.isComplexDouble() ||
         v.isSymInt() || v.isSymFloat();
}

const std::vector<int64_t>& OpCallInfo::MeshSizes(size_t mesh_ndim) const {
  DTSIM_CHECK(mesh_shape.size() == mesh_ndim, name, ": mesh has ", mesh_shape.size(),
              " dims but the input has ", mesh_ndim, " placements");
  return mesh_shape;
}

bool OpCallInfo::inplace() const {
  const size_t colon = name.find("::");
  std::string base = name.substr(colon == std::string::npos ? 0 : colon + 2);
  base = base.substr(0, base.find('.'));
  return !base.empty() && base.back() == '_';
}

bool OpCallInfo::out_variant() const {
  if (schema == nullptr) return false;
  for (const c10::Argument& a : schema->arguments()) {
    if (a.is_out()) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers

std::vector<int64_t> BroadcastDimsMap(const std::vector<int64_t>& common,
                                      const std::vector<int64_t>& shape) {
  const int64_t n = static_cast<int64_t>(common.size());
  const int64_t m = static_cast<int64_t>(shape.size());
  std::vector<int64_t> out(n, -1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = i - (n - m);
    if (j >= 0 && !(shape[j] == 1 && common[i] != 1)) out[i] = j;
  }
  return out;
}

std::vector<int64_t> BroadcastShapes(const std::vector<std::vector<int64_t>>& shapes) {
  size_t n = 0;
  for (const auto& s : shapes) n = std::max(n, s.size());
  std::vector<int64_t> out(n, 1);
  for (const auto& s : shapes) {
    for (size_t k = 0; k < s.size(); ++k) {
      const size_t i = n - s.size() + k;
      if (s[k] == out[i] || s[k] == 1) continue;
      if (out[i] == 1) {
        out[i] = s[k];
        continue;
      }
      throw InputError("shape",
                       StrCat("shapes do not broadcast: dim ", i, " is ", out[i], " and ", s[k]));
    }
  }
  return out;
}

int64_t NormalizeDim(int64_t dim, int64_t ndim, const std::string& field) {
  const int64_t n =
      std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1, as ATen's maybe_wrap_dim
  if (dim < -n || dim >= n) {
    throw InputError(field,
                     StrCat("dim ", dim, " is out of range for a tensor of ", ndim, " dims"));
  }
  return dim < 0 ? dim + n : dim;
}

}  // namespace ops
}  // namespace dtsim
