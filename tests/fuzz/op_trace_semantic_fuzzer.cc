// Fuzz target: op traces that lie (`dtsim op --trace`, read by trace-diff and Python's load_trace).
// Each input is a program of semantic mutations applied to data/op_trace.json (mm on a 2x2 mesh
// whose two operands are both redistributed): redistributions moved to arguments the op lacks or
// to ops that do not exist, worlds that disagree, redistributions dropped, duplicated or given
// another's trace, inner traces with other meshes or fewer steps, header fields of other types.
// The JSON stays valid; what it says may be impossible. Properties, beyond "no crash, no sanitizer
// report":
//  * a refusal is InputError("trace") with a capped message (dtsim's exit 2), never another
//    exception;
//  * an accepted op trace is possible — checked here independently of the validator (Impossible()
//    below, which asks ATen's schema types, not the names the validator reads): every inner trace
//    of the op's world, each aten op one of LibTorch's with a tensor argument `arg`, any other
//    conversion on argument 0;
//  * an accepted op trace writes JSON that reads back to the same JSON and diffs equal to itself.
// DTSIM_FUZZ_SWEEP=N:SEED (ctest's fuzz_op_trace_semantic sets it): the first input also runs N
// programs drawn from SEED.
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dtsim/core/op_schema.h"
#include "dtsim/layout/error.h"
#include "dtsim/trace/op_trace.h"
#include "fuzz_common.h"

namespace {

using dtsim::InputError;
using dtsim::StrCat;
using dtsim::fuzz::AnyIndex;
using dtsim::fuzz::AnyOf;
using dtsim::fuzz::Pick;
using dtsim::fuzz::Program;
using Json = nlohmann::json;

dtsim::OpTrace Read(const Json& doc) {
  return dtsim::OpTraceFromJson(doc, dtsim::TensorArgumentProblem);
}

const Json& Seed() {
  static const Json seed = [] {
    Json j = dtsim::fuzz::ReadSeedJson(
        std::filesystem::path(DTSIM_SOURCE_DIR) / "tests/fuzz/data/op_trace.json", "trace");
    Read(j);  // the seed is valid, or the target has nothing to lie about
    return j;
  }();
  return seed;
}

void Mutate(Program& p, Json& doc) {
  static const std::vector<Json> kArgs = {Json(-1), Json(0),  Json(1),   Json(2),
                                          Json(3),  Json(99), Json("1"), Json(1.5)};
  static const std::vector<Json> kOps = {Json("aten::mm"),
                                         Json("aten::add.Tensor"),
                                         Json("aten::cat"),
                                         Json("aten::relu"),
                                         Json("aten::no_such_op"),
                                         Json("aten::mm.no_such_overload"),
                                         Json("loss_parallel target"),
                                         Json(""),
                                         Json(7)};
  static const std::vector<Json> kWorlds = {Json(0), Json(1), Json(2), Json(3),
                                            Json(4), Json(8), Json(-1)};
  switch (p.Next() % 9) {
    case 0:  // the argument a redistribution moved
      AnyOf(p, doc["redistributions"])["arg"] = Pick(p, kArgs);
      break;
    case 1:  // the op it belongs to
      AnyOf(p, doc["redistributions"])["op"] = Pick(p, kOps);
      break;
    case 2:  // the op's world
      doc["meta"]["world_size"] = Pick(p, kWorlds);
      break;
    case 3:  // an inner trace's world
      AnyOf(p, doc["redistributions"])["trace"]["meta"]["world_size"] = Pick(p, kWorlds);
      break;
    case 4: {  // a redistribution dropped or duplicated
      Json& list = doc["redistributions"];
      const size_t i = AnyIndex(p, list.size());
      if (p.Next() % 2)
        list.erase(i);
      else
        list.insert(list.begin() + static_cast<std::ptrdiff_t>(i), list[i]);
      break;
    }
    case 5: {  // one redistribution's trace given to another
      Json& list = doc["redistributions"];
      AnyOf(p, list)["trace"] = AnyOf(p, list)["trace"];
      break;
    }
    case 6: {  // an inner trace's mesh reshaped or a step dropped
      Json& trace = AnyOf(p, doc["redistributions"])["trace"];
      if (p.Next() % 2) {
        static const std::vector<Json> kShapes = {Json::parse("[4]"), Json::parse("[1,4]"),
                                                  Json::parse("[2,2,1]")};
        trace["initial"]["spec"]["mesh"]["shape"] = Pick(p, kShapes);
      } else if (!trace["steps"].empty()) {
        trace["steps"].erase(AnyIndex(p, trace["steps"].size()));
      }
      break;
    }
    case 7: {  // the verdict
      static const std::vector<Json> kOk = {Json(true), Json(false), Json("yes"), Json(nullptr)};
      doc["ok"] = Pick(p, kOk);
      break;
    }
    default: {  // the header's op and strategy
      static const std::vector<Json> kText = {Json(""), Json("matmul"), Json(3), Json(nullptr)};
      doc[p.Next() % 2 ? "op" : "strategy"] = Pick(p, kText);
      break;
    }
  }
}

// The number of tensors `op` takes, by the types of its schema's arguments (`*any_number` when one
// is a tensor list); -1 when LibTorch has no such op.
int64_t TensorArguments(const std::string& op, bool* any_number) {
  *any_number = false;
  const size_t dot = op.find('.');
  const auto handle = c10::Dispatcher::singleton().findSchema(
      {op.substr(0, dot), dot == std::string::npos ? "" : op.substr(dot + 1)});
  if (!handle) return -1;
  int64_t n = 0;
  for (const c10::Argument& a : handle->schema().arguments()) {
    if (a.type()->isSubtypeOf(*c10::ListType::ofTensors())) *any_number = true;
    if (a.type()->isSubtypeOf(*c10::TensorType::get()) ||
        a.type()->isSubtypeOf(*c10::OptionalType::ofTensor()))
      ++n;
  }
  return n;
}

// What cannot be true of an accepted op trace, checked without the validator's code; nullopt if
// none.
std::optional<std::string> Impossible(const dtsim::OpTrace& t) {
  if (t.meta.world_size < 1) return StrCat("a world of ", t.meta.world_size, " ranks");
  for (const dtsim::RedistributionEvent& r : t.redistributions) {
    if (r.trace.meta.world_size != t.meta.world_size) return "an inner trace of another world";
    if (!r.arg) return "a redistribution without its argument";
    const int64_t arg = *r.arg;
    if (arg < 0) return StrCat("arg ", arg);
    if (r.op.rfind("aten::", 0) != 0) {
      if (arg != 0) return StrCat("arg ", arg, " of the conversion '", r.op, "'");
      continue;
    }
    bool any_number = false;
    const int64_t n = TensorArguments(r.op, &any_number);
    if (n < 0) return StrCat("'", r.op, "' is no op");
    if (!any_number && arg >= n) return StrCat("arg ", arg, " of ", r.op, " (", n, " tensors)");
  }
  return std::nullopt;
}

// True when the mutated input was accepted.
bool RunProgram(const uint8_t* data, size_t size) {
  Program p(data, size);
  Json doc = Seed();
  dtsim::fuzz::ApplyMutations(p, doc, 6, Mutate);
  dtsim::OpTrace t;
  try {
    t = Read(doc);
  } catch (const InputError& e) {
    dtsim::fuzz::ExpectRefusal(e, "trace");
    return false;
  }
  if (auto why = Impossible(t)) {
    dtsim::fuzz::Fail(StrCat("an impossible op trace was accepted: ", *why));
  }
  const Json written = dtsim::ToJson(t);
  dtsim::OpTrace again;
  try {
    again = Read(written);
  } catch (const InputError& e) {
    dtsim::fuzz::Fail(StrCat("an accepted op trace does not read back: ", e.what()));
  }
  DTSIM_FUZZ_EXPECT(dtsim::ToJson(again) == written, "round trip");
  const auto diffs = dtsim::DiffOpTraces(t, again);
  DTSIM_FUZZ_EXPECT(diffs.empty(), "an op trace differs from its own copy: ", diffs[0].where);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dtsim::fuzz::RunStructuredTarget("op_trace_semantic", 24, data, size, RunProgram);
}
