// DeviceMesh: construction rules, coordinates, groups, submeshes, flattening and the text form.
#include "dtsim/layout/mesh.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtsim/layout/error.h"

namespace dtsim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DeviceMeshTest, RowMajorCoordinatesAndGroups) {
  DeviceMesh mesh = DeviceMesh::Create({2, 4}, {"dp", "tp"});
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_THAT(mesh.GetCoordinate(6), ElementsAre(1, 2));
  EXPECT_EQ(mesh.RankAt({1, 2}), 6);
  EXPECT_THAT(mesh.GroupAlong(1, 6), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(mesh.GroupAlong(0, 6), ElementsAre(2, 6));
  auto groups = mesh.GroupsAlong(0);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_THAT(groups[3], ElementsAre(3, 7));
  EXPECT_FALSE(mesh.FindCoordinate(8).has_value());
  EXPECT_EQ(mesh.ToString(), "mesh[dp=2, tp=4]");
  EXPECT_EQ(DeviceMesh::Create({2, 4}).ToString(), "mesh[2, 4]");
}

TEST(DeviceMeshTest, CustomRankLayout) {
  DeviceMesh mesh = DeviceMesh::Create({2, 2}, {}, {0, 2, 1, 3});
  EXPECT_THAT(mesh.GetCoordinate(2), ElementsAre(0, 1));
  EXPECT_THAT(mesh.GroupAlong(0, 0), ElementsAre(0, 1));
  EXPECT_EQ(mesh.ToString(), "mesh[2, 2](ranks=[0, 2, 1, 3])");
}

TEST(DeviceMeshTest, SubmeshRemembersRoot) {
  DeviceMesh mesh = DeviceMesh::Create({2, 4}, {"dp", "tp"});
  DeviceMesh tp = mesh.Submesh({"tp"}, 6);
  EXPECT_EQ(tp.ToString(), "mesh[tp=4](ranks=[4, 5, 6, 7])");
  EXPECT_FALSE(tp.is_root());
  EXPECT_EQ(tp.root(), mesh);
  EXPECT_THAT(tp.root_dims()[0], ElementsAre(1));
  DeviceMesh dp = tp.root().Submesh({"dp"}, 6);
  EXPECT_THAT(dp.ranks(), ElementsAre(2, 6));
  DeviceMesh swapped = mesh.Submesh({"tp", "dp"}, 0);
  EXPECT_THAT(swapped.shape(), ElementsAre(4, 2));
  EXPECT_THAT(swapped.ranks(), ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
}

TEST(DeviceMeshTest, FlattenMergesDims) {
  DeviceMesh mesh = DeviceMesh::Create({2, 2, 2}, {"a", "b", "c"});
  DeviceMesh ac = mesh.Flatten({"a", "c"}, "ac");
  EXPECT_EQ(ac.ToString(), "mesh[ac=4, b=2](ranks=[0, 2, 1, 3, 4, 6, 5, 7])");
  EXPECT_THAT(ac.GroupAlong(0, 0), ElementsAre(0, 1, 4, 5));
  EXPECT_THAT(ac.root_dims()[0], ElementsAre(0, 2));
  DeviceMesh all = mesh.Flatten({"a", "b", "c"}, "world");
  EXPECT_THAT(all.ranks(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(DeviceMeshTest, ParseForms) {
  EXPECT_THAT(DeviceMesh::Parse("2x4").shape(), ElementsAre(2, 4));
  EXPECT_THAT(DeviceMesh::Parse("2,3,2").shape(), ElementsAre(2, 3, 2));
  EXPECT_THAT(DeviceMesh::Parse("8", "world").names(), ElementsAre("world"));
}

struct BadMesh {
  std::string shape, names, field, message;
};

TEST(DeviceMeshTest, BadInputNamesFieldAndValue) {
  const BadMesh cases[] = {
      {"2x0", "", "mesh", "dim 1 has size 0"},
      {"2x-1", "", "mesh", "dim 1 has size -1"},
      {"", "", "mesh", "at least one dim"},
      {"2xa", "", "mesh", "'a' is not an integer"},
      {"2x4", "dp", "names", "1 names given for a mesh of 2 dims"},
      {"2x4", "dp,dp", "names", "duplicate mesh dim name 'dp'"},
      {"2x4", "dp,", "names", "empty"},
      // An invisible character is named and shown escaped, never echoed raw; a list of one is not
      // echoed twice.
      {"2\xc2\xa0", "", "mesh",
       "mesh: '2\\u00a0' is not an integer: it holds the invisible character U+00A0 (no-break "
       "space)"},
      {"2x4\xe2\x80\x8b", "", "mesh", "'2x4\\u200b': '4\\u200b' is not an integer"},
      {"2", "tp\xc2\xa0", "names",
       "mesh dim name 'tp\\u00a0' holds the invisible character U+00A0 (no-break space)"},
  };
  for (const BadMesh& c : cases) {
    try {
      DeviceMesh::Parse(c.shape, c.names);
      ADD_FAILURE() << "no error for " << c.shape << " / " << c.names;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), c.field) << c.shape;
      EXPECT_THAT(e.what(), HasSubstr(c.message)) << c.shape;
    }
  }
  EXPECT_EQ(DeviceMesh::Parse("2", "\xe6\x95\xb0").names()[0], "\xe6\x95\xb0");  // visible, kept
  EXPECT_THROW(DeviceMesh::Create({2}, {}, {0, 0}), InputError);
  EXPECT_THROW(DeviceMesh::Create({2}, {}, {0}), InputError);
  EXPECT_THROW(DeviceMesh::Create({2, 4}, {"dp", "tp"}).Submesh({"pp"}, 0), InputError);
}

}  // namespace
}  // namespace dtsim
