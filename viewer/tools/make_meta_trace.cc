// dtsim_make_meta_trace: writes a metadata-only trace (meta_trace.h) — viewer test and benchmark
// input.
//
//   dtsim_make_meta_trace --mesh 16x16x16 --names pp,dp,tp --shape 64,64,64 --from "S(0),S(1),S(2)"
//   \
//                         --to "R,S(0),S(1)" [--measured] out.json
#include <iostream>
#include <map>
#include <string>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/mesh.h"
#include "dtsim/layout/placement.h"
#include "dtsim/trace/trace.h"
#include "meta_trace.h"

int main(int argc, char** argv) {
  try {
    std::map<std::string, std::string> opt = {{"--names", ""}, {"--dtype", "float32"}};
    std::string out, command = "dtsim_make_meta_trace";
    bool measured = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      command += " " + a;
      if (a == "--measured") {
        measured = true;
      } else if (a.rfind("--", 0) == 0 && i + 1 < argc) {
        opt[a] = argv[++i];
        command += std::string(" ") + argv[i];
      } else if (out.empty()) {
        out = a;
      } else {
        throw dtsim::InputError("args", "unexpected '" + a + "'");
      }
    }
    for (const char* key : {"--mesh", "--shape", "--from", "--to"}) {
      if (!opt.count(key)) throw dtsim::InputError(key + 2, "missing");
    }
    if (out.empty()) throw dtsim::InputError("out", "missing: give the output path");
    const dtsim::DTensorSpec src = dtsim::DTensorSpec::Create(
        dtsim::DeviceMesh::Parse(opt["--mesh"], opt["--names"]),
        dtsim::ParsePlacements(opt["--from"], "from"), dtsim::ParseIntList(opt["--shape"], "shape"),
        dtsim::ParseDType(opt["--dtype"]));
    dtsim::viewer::MetaTraceOptions options;
    options.measured = measured;
    options.argv = command;
    const dtsim::Trace trace =
        dtsim::viewer::MakeMetaTrace(src, dtsim::ParsePlacements(opt["--to"], "to"), options);
    dtsim::TraceFromJson(dtsim::ToJson(trace));  // what the viewer will read must validate
    dtsim::WriteFileAtomically(out, dtsim::SafeDump(dtsim::ToJson(trace)) + "\n", "out");
    return 0;
  } catch (const dtsim::InputError& e) {
    std::cerr << "dtsim_make_meta_trace: error: " << e.what() << "\n";
    return 2;
  }
}
