// dtsim layout: prints which part of the global tensor every rank holds.
//
//   dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements "S(0),S(1)" [--dtype float32]
//   [--json]
//                [--ranks auto|all|summary|0,5,8-15] [--meta]
//   dtsim layout --batch cases.jsonl      one JSON case per line in, one JSON layout (or {"error":
//   ...}) per line out;
//                                         exit code 1 when any line failed
//   --svg out.svg / --png out.png         also draw the layout (mesh + the global tensor's blocks
//   per rank) into a
//                                         picture, written atomically (viewer/model/picture.h)
#include <ATen/ATen.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/backends/local_collectives.h"
#include "dtsim/core/dtensor.h"
#include "dtsim/core/meta.h"
#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"
#include "dtsim/layout/layout_report.h"
#include "dtsim/layout/rank_selection.h"
#include "dtsim/layout/spec.h"
#include "dtsim/tensor/aten_dtype.h"
#include "dtsim/trace/files.h"
#include "dtsim/trace/trace.h"
#include "viewer/model/colors.h"
#include "viewer/model/picture.h"
#include "viewer/model/render_png.h"
#include "viewer/model/render_svg.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim layout`; defaults in comments.
struct LayoutOptions : TensorOptions {  // --mesh, --names, --shape, --dtype
  std::string placements;               // required: "S(0),S(1)"
  bool json = false;                    // print one JSON object instead of text
  std::string batch;                    // "" = single case; a path or "-" for stdin
  std::string svg;                      // "" = none; else draw the layout into this SVG file
  std::string png;                      // "" = none; else draw the layout into this PNG file
  std::string ranks = "auto";  // which ranks to list: auto (all up to 256 ranks, else a summary),
                               // all, summary, list
  bool meta =
      false;  // also distribute a meta tensor on the simulated world and check every shard's shape
};

// --meta: distribute_tensor of a meta tensor of the global shape (the code path of a data run, no
// data) and the check that every rank's shard has its layout's shape; nullopt when it does, else
// the mismatch.
std::optional<std::string> DistributeMeta(const DTensorSpec& spec) {
  CheckSimulationFits(spec, spec.mesh().size(), /*meta=*/true);
  std::shared_ptr<Collectives> collectives = MakeLocalCollectives();
  const at::Tensor global = at::empty(
      spec.shape(), at::TensorOptions().dtype(ToScalarType(spec.dtype())).device(at::kMeta));
  Placements placements = spec.placements();
  for (Placement& p : placements) {
    if (p.is_partial()) p = Placement::Replicate();  // a Partial layout is Replicate's
  }
  DTensor dt = DistributeTensor(global, spec.mesh(), placements, 0, collectives);
  return FindShapeMismatch(dt.spec(), dt.to_local(), *collectives);
}

// Writes the pictures asked for (before anything is printed: an error leaves stdout empty).
void WritePictures(const DTensorSpec& spec, const LayoutOptions& o) {
  if (o.svg.empty() && o.png.empty()) return;
  RunFiles files;  // --svg and --png may not name the same file
  if (!o.svg.empty()) files.Output(o.svg, "svg");
  if (!o.png.empty()) files.Output(o.png, "png");
  const viewer::TraceModel model = viewer::TraceModel::FromSpec(spec);
  const auto [width, height] = viewer::PictureSize(model);
  if (!o.svg.empty()) {
    // Sized for a 12 px monospace font, which the SVG asks for.
    const viewer::DrawList list =
        viewer::LayoutPicture(model, 0, viewer::ViewState{}, width, height, {7.3f, 14});
    WriteFileAtomically(o.svg, viewer::ToSvg(list, width, height, viewer::kBackgroundColor), "svg");
  }
  if (!o.png.empty()) {
    const viewer::DrawList list = viewer::LayoutPicture(model, 0, viewer::ViewState{}, width,
                                                        height, viewer::kRasterTextMetrics);
    WriteFileAtomically(
        o.png, viewer::EncodePng(viewer::Rasterize(list, width, height, viewer::kBackgroundColor)),
        "png");
  }
}

DTensorSpec SpecFromJson(const nlohmann::json& c, const CaseLimits& limits) {
  CheckCaseKeys(c, {"mesh", "names", "shape", "placements", "dtype", "ranks"},
                {"mesh", "shape", "placements"});
  DType dtype = c.contains("dtype") ? ParseDType(StringFromJson(c, "dtype")) : DType::kFloat32;
  DeviceMesh mesh = MeshFromJson(c, limits);
  return DTensorSpec::Create(std::move(mesh), ParsePlacements(StringFromJson(c, "placements")),
                             IntsFromJson(c["shape"], "shape"), dtype);
}

}  // namespace

nlohmann::json LayoutCase(const nlohmann::json& c, const CaseLimits& limits) {
  DTensorSpec spec = SpecFromJson(c, limits);
  const RankSelection selection =
      RankSelection::Parse(c.contains("ranks") ? StringFromJson(c, "ranks") : "auto");
  return LayoutToJson(spec, selection);
}

int RunLayout(const Args& args) {
  LayoutOptions o;
  po::options_description desc("dtsim layout options");
  AddTensorOptions(desc, o, "element type (sizes in bytes)");
  desc.add_options()("placements", po::value(&o.placements),
                     "one placement per mesh dim, e.g. S(0),S(1) or [_S(0,2), R]")(
      "json", po::bool_switch(&o.json), "print one JSON object")(
      "batch", po::value(&o.batch),
      "read JSON cases, one per line, from a file or - (stdin); print JSON lines")(
      "svg", po::value(&o.svg),
      "also draw the layout (mesh and tensor blocks per rank) into this SVG file")(
      "png", po::value(&o.png), "also draw the layout into this PNG file")(
      "ranks", po::value(&o.ranks)->default_value(o.ranks),
      "ranks to list: auto (all up to 256 ranks, else a summary of shapes), all, summary, or e.g. "
      "0,5,8-15")("meta", po::bool_switch(&o.meta),
                  "also run distribute_tensor on meta tensors (no data) and check every rank's "
                  "shard against the layout");
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements "
                 "\"S(0),S(1)\" [--json] "
                 "[--svg out.svg] [--png out.png]\n"
              << desc;
    return 0;
  }
  if (vm.count("batch")) {
    RefuseOptionsWithBatch(vm);
    return RunJsonLines(o.batch, [](const nlohmann::json& c) { return LayoutCase(c); });
  }
  RequireOptions(vm, {"mesh", "shape", "placements"});
  DTensorSpec spec =
      DTensorSpec::Create(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.placements),
                          ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  const RankSelection selection = RankSelection::Parse(o.ranks);
  selection.CheckAgainst(spec.mesh().ranks(), spec.mesh().ToString());
  std::optional<std::string> mismatch;
  if (o.meta) mismatch = DistributeMeta(spec);
  WritePictures(spec, o);
  if (o.json) {
    if (o.meta) {
      nlohmann::json j = LayoutToJson(spec, selection);
      j["meta"] = true;
      j["ok"] = !mismatch;
      if (mismatch) j["problem"] = *mismatch;
      std::cout << SafeDump(j) << "\n";
    } else {
      WriteLayoutJson(std::cout, spec,
                      selection);  // streamed: constant memory for --ranks all on 2^20 ranks
      std::cout << "\n";
    }
  } else {
    std::cout << RenderLayout(spec, selection);
    if (o.meta) {
      std::cout << "\nmetadata-only distribute_tensor on the simulated world: "
                << (mismatch ? "MISMATCH — " + *mismatch
                             : "OK — every rank's shard has its layout's shape")
                << "\n";
    }
  }
  return mismatch ? 1 : 0;
}

}  // namespace dtsim::cli
