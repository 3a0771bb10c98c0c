// dtsim layout: prints which part of the global tensor every rank holds.
//
//   dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements "S(0),S(1)" [--dtype float32] [--json]
//   dtsim layout --batch cases.jsonl      one JSON case per line in, one JSON layout (or {"error": ...}) per line out
//   --svg out.svg / --png out.png         also draw the layout (mesh + the global tensor's blocks per rank) into a
//                                         picture, written atomically (viewer/model/picture.h)
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "dtsim/error.h"
#include "dtsim/layout_report.h"
#include "dtsim/spec.h"
#include "dtsim/trace.h"
#include "viewer/model/colors.h"
#include "viewer/model/picture.h"
#include "viewer/model/render_png.h"
#include "viewer/model/render_svg.h"

namespace po = boost::program_options;

namespace dtsim::cli {
namespace {

// Options of `dtsim layout`; defaults in comments.
struct LayoutOptions : TensorOptions {  // --mesh, --names, --shape, --dtype
  std::string placements;  // required: "S(0),S(1)"
  bool json = false;       // print one JSON object instead of text
  std::string batch;       // "" = single case; a path or "-" for stdin
  std::string svg;         // "" = none; else draw the layout into this SVG file
  std::string png;         // "" = none; else draw the layout into this PNG file
};

// Writes the pictures asked for (before anything is printed: an error leaves stdout empty).
void WritePictures(const DTensorSpec& spec, const LayoutOptions& o) {
  if (o.svg.empty() && o.png.empty()) return;
  const viewer::TraceModel model = viewer::TraceModel::FromSpec(spec);
  const auto [width, height] = viewer::PictureSize(model);
  if (!o.svg.empty()) {
    // Sized for a 12 px monospace font, which the SVG asks for.
    const viewer::DrawList list = viewer::LayoutPicture(model, 0, viewer::ViewState{}, width, height, {7.3f, 14});
    WriteFileAtomically(o.svg, viewer::ToSvg(list, width, height, viewer::kBackgroundColor), "svg");
  }
  if (!o.png.empty()) {
    const viewer::DrawList list =
        viewer::LayoutPicture(model, 0, viewer::ViewState{}, width, height, viewer::kRasterTextMetrics);
    WriteFileAtomically(o.png, viewer::EncodePng(viewer::Rasterize(list, width, height, viewer::kBackgroundColor)),
                        "png");
  }
}

DTensorSpec SpecFromJson(const nlohmann::json& c) {
  for (const char* key : {"mesh", "shape", "placements"}) {
    if (!c.contains(key)) throw InputError(key, "missing");
  }
  DType dtype = c.contains("dtype") ? ParseDType(StringFromJson(c, "dtype")) : DType::kFloat32;
  return DTensorSpec::Create(MeshFromJson(c), ParsePlacements(StringFromJson(c, "placements")),
                             IntsFromJson(c["shape"], "shape"), dtype);
}

}  // namespace

int RunLayout(const Args& args) {
  LayoutOptions o;
  po::options_description desc("dtsim layout options");
  AddTensorOptions(desc, o, "element type (sizes in bytes)");
  desc.add_options()
      ("placements", po::value(&o.placements), "one placement per mesh dim, e.g. S(0),S(1) or [_S(0,2), R]")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("batch", po::value(&o.batch), "read JSON cases, one per line, from a file or - (stdin); print JSON lines")
      ("svg", po::value(&o.svg), "also draw the layout (mesh and tensor blocks per rank) into this SVG file")
      ("png", po::value(&o.png), "also draw the layout into this PNG file");
  po::variables_map vm = ParseOptions(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: dtsim layout --mesh 2x4 [--names dp,tp] --shape 5,10 --placements \"S(0),S(1)\" [--json] "
                 "[--svg out.svg] [--png out.png]\n"
              << desc;
    return 0;
  }
  if (!o.batch.empty() && (!o.svg.empty() || !o.png.empty())) {
    throw InputError(o.svg.empty() ? "png" : "svg", "draws one layout; it cannot be combined with --batch");
  }
  if (!o.batch.empty()) {
    return RunJsonLines(o.batch, [](const nlohmann::json& c) { return LayoutToJson(SpecFromJson(c)); });
  }
  RequireOptions(vm, {"mesh", "shape", "placements"});
  DTensorSpec spec = DTensorSpec::Create(DeviceMesh::Parse(o.mesh, o.names), ParsePlacements(o.placements),
                                         ParseIntList(o.shape, "shape"), ParseDType(o.dtype));
  WritePictures(spec, o);
  if (o.json) {
    std::cout << LayoutToJson(spec).dump() << "\n";
  } else {
    std::cout << RenderLayout(spec);
  }
  return 0;
}

}  // namespace dtsim::cli
