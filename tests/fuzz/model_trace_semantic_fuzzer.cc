// Fuzz target: model traces that lie (`dtsim model --trace`, read by trace-diff, export, the viewer
// and Python). Each input is a program of semantic mutations applied to data/model_trace.json (a
// 2x2 fsdp+tp run with backward): placements replaced by ones that do not fit the tensor or mesh,
// an op's placements line replaced by one that may not split into arguments and results,
// collectives moved to dims the mesh lacks or given groups of other sizes, mesh names duplicated,
// model sizes made negative, fractional or huge, shapes and hash lists changed, events dropped or
// duplicated. The JSON stays valid; what it says may be impossible. Properties, beyond "no crash,
// no sanitizer report":
//  * a refusal is InputError("trace") with a capped message (dtsim's exit 2), never another
//    exception;
//  * an accepted trace is possible — checked here independently of the validator (Impossible()
//    below): unique mesh names, model sizes of at least 1, collectives along a mesh dim in groups
//    of its size, placements at most one per mesh dim and shard dims inside the tensor's rank, an
//    op's placements each one bracketed list or "none";
//  * an accepted trace writes JSON that reads back to the same JSON and diffs equal to itself.
// DTSIM_FUZZ_SWEEP=N:SEED (ctest's fuzz_model_trace_semantic sets it): the first input also runs N
// programs drawn from SEED.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/placement.h"
#include "dtsim/trace/model_trace.h"
#include "fuzz_common.h"

namespace {

using dtsim::InputError;
using dtsim::StrCat;
using Json = nlohmann::json;

const Json& Seed() {
  static const Json seed = [] {
    Json j = dtsim::fuzz::ReadSeedJson(
        std::filesystem::path(DTSIM_SOURCE_DIR) / "tests/fuzz/data/model_trace.json", "trace");
    dtsim::ModelTraceFromJson(j);  // the seed is valid, or the target has nothing to lie about
    return j;
  }();
  return seed;
}

using dtsim::fuzz::Pick;
using dtsim::fuzz::Program;

// Events that hold a tensor, and those that hold collectives.
std::vector<size_t> EventsWith(const Json& doc, const char* key) {
  std::vector<size_t> out;
  for (size_t i = 0; i < doc["events"].size(); ++i)
    if (doc["events"][i].contains(key) && !doc["events"][i][key].empty()) out.push_back(i);
  return out;
}

void Mutate(Program& p, Json& doc) {
  static const std::vector<std::string> kPlacements = {"[S(9)]",
                                                       "[S(-3)]",
                                                       "[S(0), R, R]",
                                                       "[]",
                                                       "[_S(0,2)]",
                                                       "local",
                                                       "[R]",
                                                       "[S(1), S(1)]",
                                                       "[P(sum), P(max)]",
                                                       "[P(avg), P(sum)]",
                                                       "[S(0)]",
                                                       "[R, S(1)]",
                                                       "nonsense"};
  static const std::vector<Json> kGroups = {
      Json::parse("[[0],[1],[2],[3]]"), Json::parse("[[0,1],[2,3]]"), Json::parse("[[0,2],[1,3]]"),
      Json::parse("[[0,1,2,3]]"), Json::parse("[[3,1],[2,0]]")};
  static const std::vector<Json> kSizes = {
      Json(-1), Json(0), Json(1), Json(1.5), Json("x"), Json(int64_t{1} << 40), Json(8)};
  static const std::vector<std::string> kDims = {"dp", "tp", "pp", "", "0"};
  switch (p.Next() % 10) {
    case 0: {  // a tensor's placements
      const auto at = EventsWith(doc, "tensor");
      doc["events"][Pick(p, at)]["tensor"]["placements"] = Pick(p, kPlacements);
      break;
    }
    case 1: {  // a tensor's shape
      const auto at = EventsWith(doc, "tensor");
      Json& shape = doc["events"][Pick(p, at)]["tensor"]["shape"];
      if (p.Next() % 2 && !shape.empty())
        shape.erase(shape.size() - 1);
      else
        shape.push_back(p.Next() % 5);
      break;
    }
    case 2: {  // a collective's mesh dim
      const auto at = EventsWith(doc, "collectives");
      doc["events"][Pick(p, at)]["collectives"][0]["mesh_dim"] = Pick(p, kDims);
      break;
    }
    case 3: {  // a collective's groups
      const auto at = EventsWith(doc, "collectives");
      doc["events"][Pick(p, at)]["collectives"][0]["groups"] = Pick(p, kGroups);
      break;
    }
    case 4: {  // the mesh's names and shape
      static const std::vector<Json> kNames = {Json::parse(R"(["dp","dp"])"),
                                               Json::parse(R"(["tp","dp"])"),
                                               Json::parse(R"(["","tp"])")};
      static const std::vector<Json> kShapes = {Json::parse("[4,1]"), Json::parse("[1,4]"),
                                                Json::parse("[2,2]")};
      if (p.Next() % 2)
        doc["mesh"]["names"] = Pick(p, kNames);
      else
        doc["mesh"]["shape"] = Pick(p, kShapes);
      break;
    }
    case 5: {  // a model size
      static const std::vector<std::string> kKeys = {"dim", "heads", "layers", "vocab",
                                                     "seq", "batch", "ffn"};
      doc["model"][Pick(p, kKeys)] = Pick(p, kSizes);
      break;
    }
    case 6: {  // an event dropped or duplicated
      Json& events = doc["events"];
      const size_t i = p.Next() % events.size();
      if (p.Next() % 2)
        events.erase(i);
      else
        events.insert(events.begin() + static_cast<std::ptrdiff_t>(i), events[i]);
      break;
    }
    case 7: {  // a hash list one short or one long
      const auto at = EventsWith(doc, "tensor");
      Json& tensor = doc["events"][Pick(p, at)]["tensor"];
      if (!tensor.contains("hashes")) break;
      if (p.Next() % 2)
        tensor["hashes"].erase(0);
      else
        tensor["hashes"].push_back("xxh3:0000000000000000");
      break;
    }
    case 8: {  // an op's placements line
      static const std::vector<std::string> kLines = {"[S(0)] -> [S(0)]",
                                                      "[S(0)], [R] -> [P(sum)]",
                                                      " -> [R]",
                                                      "[S(0)] -> none",
                                                      "[S(0)]",
                                                      "[S(0)] -> [R] -> [R]",
                                                      "S(0) -> [R]",
                                                      "[S(0)],[R] -> [R]",
                                                      "[S(0) -> [R]",
                                                      "",
                                                      "->",
                                                      "[S(0)]] -> [[R]"};
      std::vector<size_t> ops;
      for (size_t i = 0; i < doc["events"].size(); ++i)
        if (doc["events"][i]["event"] == "op") ops.push_back(i);
      doc["events"][Pick(p, ops)]["placements"] = Pick(p, kLines);
      break;
    }
    default: {  // a placement moved from one tensor to another
      const auto at = EventsWith(doc, "tensor");
      doc["events"][Pick(p, at)]["tensor"]["placements"] =
          doc["events"][Pick(p, at)]["tensor"]["placements"];
      break;
    }
  }
}

// What cannot be true of an accepted trace, checked without the validator's code; nullopt if none.
std::optional<std::string> Impossible(const dtsim::ModelTrace& t) {
  std::set<std::string> names(t.mesh_names.begin(), t.mesh_names.end());
  if (names.size() != t.mesh_names.size()) return "mesh names repeat";
  for (const char* key : {"dim", "heads", "layers", "vocab", "seq", "batch"}) {
    if (t.model.contains(key) && !(t.model[key].is_number_integer() && t.model[key] >= 1))
      return StrCat("model.", key, " is ", t.model[key].dump());
  }
  for (const dtsim::RunEvent& e : t.events) {
    for (const auto* list : {&e.args, &e.results}) {
      for (const std::string& one : *list) {
        const bool bracketed = one.size() >= 2 && one.front() == '[' && one.back() == ']' &&
                               one.find('[', 1) == std::string::npos &&
                               one.find(']') == one.size() - 1;
        if (!bracketed && one != "none") return StrCat("an op's placement '", one, "'");
      }
    }
    for (const dtsim::CollectiveEvent& c : e.collectives) {
      size_t dim = 0;
      while (dim < t.mesh_names.size() && t.mesh_names[dim] != c.mesh_dim) ++dim;
      if (dim == t.mesh_names.size()) return StrCat("a collective on dim '", c.mesh_dim, "'");
      for (const auto& g : c.groups) {
        if (static_cast<int64_t>(g.size()) != t.mesh_shape[dim]) return "a group of another size";
      }
    }
    if (!e.tensor || e.tensor->placements == "local") continue;
    dtsim::Placements list;
    try {
      list = dtsim::ParsePlacements(e.tensor->placements);
    } catch (const InputError&) {
      return StrCat("placements '", e.tensor->placements, "' do not parse");
    }
    if (list.empty() || list.size() > t.mesh_shape.size()) return "placements for another mesh";
    const int64_t rank = static_cast<int64_t>(e.tensor->shape.size());
    for (const dtsim::Placement& pl : list) {
      if (pl.is_shard_like() && (pl.dim() >= rank || pl.dim() < -rank))
        return "a shard dim outside";
    }
    if (dtsim::HasMixedPartials(list)) return "mixed Partial reduce ops";
  }
  return std::nullopt;
}

// True when the mutated input was accepted.
bool RunProgram(const uint8_t* data, size_t size) {
  Program p(data, size);
  Json doc = Seed();
  dtsim::fuzz::ApplyMutations(p, doc, 6, Mutate);
  dtsim::ModelTrace t;
  try {
    t = dtsim::ModelTraceFromJson(doc);
  } catch (const InputError& e) {
    dtsim::fuzz::ExpectRefusal(e, "trace");
    return false;
  }
  if (auto why = Impossible(t)) {
    dtsim::fuzz::Fail(StrCat("an impossible model trace was accepted: ", *why));
  }
  const Json written = dtsim::ToJson(t);
  dtsim::ModelTrace again;
  try {
    again = dtsim::ModelTraceFromJson(written);
  } catch (const InputError& e) {
    dtsim::fuzz::Fail(StrCat("an accepted model trace does not read back: ", e.what()));
  }
  DTSIM_FUZZ_EXPECT(dtsim::ToJson(again) == written, "round trip");
  const auto diffs = dtsim::DiffModelTraces(t, again);
  DTSIM_FUZZ_EXPECT(diffs.empty(), "a model trace differs from its own copy: ", diffs[0].where);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dtsim::fuzz::RunStructuredTarget("model_trace_semantic", 24, data, size, RunProgram);
}
