// Fuzz target: what a viewer user types — the go-to box (ParseRankQuery), the step search
// (FindSteps) and headless input scripts (ParseInputScript, --input).
// Properties: ParseRankQuery returns a rank of the mesh or throws InputError("go to") with a capped
// message; a returned rank parses back from its number and from its coordinate; FindSteps never
// throws and returns ascending after-step frames; ParseInputScript returns frames whose mouse is
// inside the picture (or absent) or throws InputError("input") with a capped message.
#include <cstdint>
#include <string>

#include "dtsim/layout/error.h"
#include "fuzz_common.h"
#include "viewer/app/input_script.h"
#include "viewer/model/find.h"
#include "viewer/tools/meta_trace.h"

namespace {

using dtsim::viewer::TraceModel;

const TraceModel& Model(int which) {
  static const TraceModel named = TraceModel::FromTrace(dtsim::viewer::MakeMetaTrace(
      dtsim::DTensorSpec::Create(dtsim::DeviceMesh::Parse("4x3x2", "pp,dp,tp"),
                                 dtsim::ParsePlacements("S(0),S(1),R"), {9, 7, 5}),
      dtsim::ParsePlacements("R,S(0),S(1)")));
  static const TraceModel unnamed = TraceModel::FromTrace(
      dtsim::viewer::MakeMetaTrace(dtsim::DTensorSpec::Create(dtsim::DeviceMesh::Parse("5", ""),
                                                              dtsim::ParsePlacements("S(0)"), {11}),
                                   dtsim::ParsePlacements("R")));
  return which == 0 ? named : unnamed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtsim;
  using namespace dtsim::viewer;
  const std::string text(fuzz::AsText(data, size));
  for (int which = 0; which < 2; ++which) {
    const TraceModel& m = Model(which);
    try {
      const int64_t rank = ParseRankQuery(m, text);
      DTSIM_FUZZ_EXPECT(m.FindPosition(rank).has_value(), "rank ", rank, " from ", text);
      DTSIM_FUZZ_EXPECT(ParseRankQuery(m, std::to_string(rank)) == rank, rank);
      const std::vector<int64_t> c = m.CoordinateAt(m.GetPosition(rank));
      DTSIM_FUZZ_EXPECT(ParseRankQuery(m, IntListToString(c)) == rank, IntListToString(c));
    } catch (const InputError& e) {
      DTSIM_FUZZ_EXPECT(e.field() == "go to", e.what());
      DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 1024,
                        "capped: ", std::string(e.what()).size());
    }
    const std::vector<int64_t> frames = FindSteps(m, text);
    for (size_t i = 0; i < frames.size(); ++i) {
      DTSIM_FUZZ_EXPECT(frames[i] > 0 && frames[i] < m.num_frames() - 1, frames[i]);
      DTSIM_FUZZ_EXPECT(i == 0 || frames[i] > frames[i - 1], "ascending");
    }
  }
  try {
    const std::vector<InputFrame> frames = ParseInputScript(text, 640, 480);
    DTSIM_FUZZ_EXPECT(frames.size() <= 10 * 10000, frames.size());
    for (const InputFrame& f : frames) {
      const bool none = f.mouse_x < 0 && f.mouse_y < 0;
      DTSIM_FUZZ_EXPECT(
          none || (f.mouse_x >= 0 && f.mouse_x < 640 && f.mouse_y >= 0 && f.mouse_y < 480),
          f.mouse_x, ",", f.mouse_y);
    }
  } catch (const InputError& e) {
    DTSIM_FUZZ_EXPECT(e.field() == "input", e.what());
    DTSIM_FUZZ_EXPECT(std::string(e.what()).size() < 1024,
                      "capped: ", std::string(e.what()).size());
  }
  return 0;
}
