// Pictures without a window: the SVG writer, the software rasteriser and PNG round trips, and the
// layout picture of `dtsim layout --svg/--png`.
#include "viewer/model/picture.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "viewer/model/colors.h"
#include "viewer/model/render_png.h"
#include "viewer/model/render_svg.h"
#include "viewer/model/trace_model.h"

namespace dtsim::viewer {
namespace {

using ::testing::HasSubstr;

const Rgba kRed{200, 10, 10, 255}, kBlue{10, 10, 200, 255}, kBg{0, 0, 0, 255};

TEST(RasterTest, RectsFillAndBordersLieInside) {
  DrawList l;
  l.rects.push_back({Rect{10, 10, 30, 20}, kRed, kBlue, 2, Role::kDecoration});
  const Image img = Rasterize(l, 40, 30, kBg);
  EXPECT_EQ(img.At(15, 15), kRed);   // inside, past the border
  EXPECT_EQ(img.At(10, 10), kBlue);  // first pixel: border
  EXPECT_EQ(img.At(11, 15), kBlue);  // border 2 px wide
  EXPECT_EQ(img.At(12, 15), kRed);
  EXPECT_EQ(img.At(29, 19), kBlue);  // last pixel inside [10, 30) x [10, 20)
  EXPECT_EQ(img.At(30, 15), kBg);    // outside
  EXPECT_EQ(img.At(9, 15), kBg);
}

TEST(RasterTest, AlphaBlendsAndLinesAndText) {
  DrawList l;
  l.rects.push_back({Rect{0, 0, 10, 10}, Rgba{255, 255, 255, 128}, Rgba{}, 0, Role::kDecoration});
  l.lines.push_back({0, 20, 39, 20, kRed, 1, Role::kDecoration});
  l.lines.push_back({20, 0, 39, 19, kBlue, 2, Role::kDecoration});
  l.texts.push_back({0, 24, 30, 12, "88", Rgba{0, 255, 0, 255}, Role::kDecoration});
  const Image img = Rasterize(l, 40, 40, kBg);
  EXPECT_EQ(img.At(5, 5), (Rgba{128, 128, 128, 255}));
  EXPECT_EQ(img.At(30, 19),
            kRed);  // a 1 px line at y = 20 covers the pixel row whose centre is 19.5
  EXPECT_EQ(img.At(30, 10), kBlue);  // on the diagonal
  int green = 0;
  for (int y = 24; y < 36; ++y) {
    for (int x = 0; x < 30; ++x) green += img.At(x, y) == Rgba{0, 255, 0, 255};
  }
  EXPECT_GT(green, 10);
}

TEST(RasterTest, PngRoundTrip) {
  DrawList l;
  l.rects.push_back({Rect{3, 4, 9, 7}, kRed, Rgba{}, 0, Role::kDecoration});
  const Image img = Rasterize(l, 17, 11, kBg);
  const std::string png = EncodePng(img);
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  const Image back = DecodePng(png);
  ASSERT_EQ(back.width, 17);
  ASSERT_EQ(back.height, 11);
  EXPECT_EQ(back.rgba, img.rgba);
  EXPECT_EQ(DecodePng("not a png").width, 0);
}

TEST(SvgTest, RectsCarryColoursAndRanks) {
  DrawList l;
  l.rects.push_back({Rect{1, 2, 11, 12}, RankColor(3), kBlue, 1, Role::kMeshCell, 3});
  l.texts.push_back({0, 0, 10, 12, "a<b & \"c\"", kRed, Role::kDecoration});
  const std::string svg = ToSvg(l, 100, 50, kBg);
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("width=\"100\" height=\"50\""));
  EXPECT_THAT(svg, HasSubstr("<rect x=\"1\" y=\"2\" width=\"10\" height=\"10\" fill=\"" +
                             ToHex(RankColor(3)) + "\" data-role=\"mesh_cell\" data-rank=\"3\"/>"));
  EXPECT_THAT(svg, HasSubstr("stroke=\"#0a0ac8\" stroke-width=\"1\""));
  EXPECT_THAT(svg, HasSubstr("a&lt;b &amp; &quot;c&quot;</text>"));
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(PictureTest, LayoutPictureShowsEveryRankInItsColour) {
  // mesh[dp=2, tp=4], shape [5, 10], [S(0), S(1)]: rank 3 owns rows 0:3, columns 9:10.
  const DTensorSpec spec =
      DTensorSpec::Create(DeviceMesh::Parse("2x4", "dp,tp"), ParsePlacements("S(0),S(1)"), {5, 10});
  const TraceModel m = TraceModel::FromSpec(spec);
  const auto [w, h] = PictureSize(m);
  const DrawList list = LayoutPicture(m, 0, ViewState{}, w, h, kRasterTextMetrics);
  const Image img = Rasterize(list, w, h, kBackgroundColor);
  int cells = 0, owners = 0;
  for (const DrawRect& r : list.rects) {
    if (r.role != Role::kMeshCell && r.role != Role::kTensorOwner) continue;
    (r.role == Role::kMeshCell ? cells : owners) += 1;
    // A pixel of the record away from its labels and border has the rank's colour.
    const int x = static_cast<int>(r.rect.x1) - 3, y = static_cast<int>(r.rect.y1) - 3;
    EXPECT_EQ(img.At(x, y), RankColor(r.rank)) << ToString(r.role) << " of rank " << r.rank;
  }
  EXPECT_EQ(cells, 8);
  EXPECT_EQ(owners, 8);  // one block per rank, no replicas
  // The title is the spec.
  EXPECT_EQ(list.texts.front().text, "mesh[dp=2, tp=4] [S(0), S(1)] shape=[5, 10] float32");
}

}  // namespace
}  // namespace dtsim::viewer
