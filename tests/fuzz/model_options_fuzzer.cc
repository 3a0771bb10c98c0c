// Fuzz target: `dtsim model`'s options (model_run.h): the input is
// "<mesh>\n<names>\n<plan>\n<dim> <heads> <layers> <vocab> <seq> <batch> <ffn>\n<flags>" with flags
// among b (backward), m (meta), l (loss parallelism). Properties: every refusal is an InputError
// naming one of the model's fields with a capped message; an accepted configuration small enough
// to run here (<= 16 ranks and small sizes) runs — a data run's verdict is OK (the sharded model
// equals the unsharded one), a metadata run gives every rank a peak — and its report serializes to
// JSON whose Global counts are the root module's (without loss parallelism, whose all-reduces are
// outside the model).
#include <cstdint>
#include <set>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/model/model_run.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  const std::vector<std::string> parts = fuzz::SplitParts(fuzz::AsText(data, size), '\n', 5);
  auto part = [&](size_t i) { return parts.size() > i ? parts[i] : std::string(); };
  model::ModelRunOptions o;
  std::istringstream sizes(part(3));
  int64_t* fields[] = {&o.args.dim, &o.args.heads, &o.args.layers, &o.args.vocab,
                       &o.args.seq, &o.args.batch, &o.args.ffn};
  for (int64_t* f : fields) {
    int64_t v = 0;
    if (sizes >> v) *f = v;
  }
  const std::string flags = part(4);
  o.backward = flags.find('b') != std::string::npos;
  o.meta = flags.find('m') != std::string::npos;
  o.loss_parallel = flags.find('l') != std::string::npos;
  o.plan = part(2);
  const std::set<std::string> fields_ok = {"mesh",  "names",  "plan",  "dim",
                                           "heads", "layers", "vocab", "seq",
                                           "batch", "ffn",    "model", "loss-parallel"};
  try {
    o.mesh = DeviceMesh::Parse(part(0), part(1));
    model::ValidateModelRun(o);
    const bool small = o.mesh.size() <= 16 && o.args.dim <= 64 && o.args.layers <= 2 &&
                       o.args.vocab <= 128 && o.args.seq <= 16 && o.args.batch <= 4 &&
                       o.args.ffn_hidden() <= 128;
    if (!small) return 0;
    o.check = !o.meta;
    const model::ModelReport r = model::RunModel(o);
    DTSIM_FUZZ_EXPECT(r.ok(), "verdict WRONG for an accepted configuration");
    DTSIM_FUZZ_EXPECT(r.peak_bytes.size() == static_cast<size_t>(o.mesh.size()), "peaks");
    const nlohmann::json j = model::ReportToJson(r);
    const nlohmann::json& global = j["tree"];
    DTSIM_FUZZ_EXPECT(global["fqn"] == "Global" && global["children"].size() == 1, "tree root");
    // Everything happens inside the model, except loss parallelism's all-reduces (the loss is
    // outside it, as in torchtitan).
    if (!o.loss_parallel) {
      for (const char* key : {"collectives_forward", "collectives_backward"}) {
        DTSIM_FUZZ_EXPECT(global[key] == global["children"][0][key], key);
      }
    }
    (void)j.dump();
    (void)model::ReportToText(r, true);
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(fields_ok.count(e.field()) == 1, e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 1024, "capped message");
  }
  return 0;
}
