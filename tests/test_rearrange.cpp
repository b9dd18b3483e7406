// rearrange: permutations, merges, splits, unit axes and ellipsis against hand-computed
// element positions and PyTorch permute/reshape golden files; view vs copy; every error path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "grux/io.h"
#include "grux/rearrange.h"
#include "test_util.h"

namespace grux::test_rearrange {
namespace {

using ::testing::HasSubstr;

Tensor arange(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i);
  return t;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Rearrange, SeedExamples) {
  Tensor a = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor b = rearrange(a, "h w -> w h");
  EXPECT_EQ(max_abs_diff(b, Tensor::from_vector<float>({2, 2}, {1, 3, 2, 4})), 0.0);
  EXPECT_TRUE(b.shares_storage(a));
  Tensor c = rearrange(a, "h w -> 1 1 h w");
  EXPECT_EQ(c.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(c.item({0, 0, 1, 0}), 3.0);
  EXPECT_TRUE(c.shares_storage(a));
}

TEST(Rearrange, MergeIsACopyWhenStridesDoNotAllowAView) {
  // x[b, c, h, w] = ((b * 3 + c) * 4 + h) * 5 + w.
  Tensor x = arange({2, 3, 4, 5});
  Tensor y = rearrange(x, "b c h w -> b (h w) c");
  ASSERT_EQ(y.shape(), (Shape{2, 20, 3}));
  // y[b, h * 5 + w, c] = x[b, c, h, w]
  EXPECT_EQ(y.item({1, 2 * 5 + 3, 2}), x.item({1, 2, 2, 3}));
  EXPECT_EQ(y.item({0, 19, 1}), x.item({0, 1, 3, 4}));
  // (h w) are adjacent in x, but c moves behind them: merging h and w is fine, and the
  // permutation is expressible with strides, so this is still a view.
  EXPECT_TRUE(y.shares_storage(x));
  // Merging h and c in the opposite order of their strides (h steps 5, c steps 20) cannot be
  // one stride: a copy.
  Tensor z = rearrange(x, "b c h w -> b (h c) w");
  EXPECT_FALSE(z.shares_storage(x));
  ASSERT_EQ(z.shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(z.item({1, 1 * 3 + 2, 3}), x.item({1, 2, 1, 3}));
  // Moving w in front leaves c and h nested (c steps 20 = 4 x 5): still a view.
  EXPECT_TRUE(rearrange(x, "b c h w -> b w (c h)").shares_storage(x));
  // Merging axes in their original order is a view.
  Tensor f = rearrange(x, "b c h w -> (b c) (h w)");
  EXPECT_TRUE(f.shares_storage(x));
  EXPECT_EQ(f.shape(), (Shape{6, 20}));
}

TEST(Rearrange, SplitInfersTheMissingSize) {
  Tensor x = arange({2, 20, 3});
  Tensor y = rearrange(x, "b (h w) c -> b h w c", {{"h", 4}});
  ASSERT_EQ(y.shape(), (Shape{2, 4, 5, 3}));
  EXPECT_TRUE(y.shares_storage(x));
  EXPECT_EQ(y.item({1, 2, 3, 1}), x.item({1, 2 * 5 + 3, 1}));
  // Both sizes given (consistent) is fine too.
  EXPECT_EQ(rearrange(x, "b (h w) c -> b h w c", {{"h", 4}, {"w", 5}}).shape(),
            (Shape{2, 4, 5, 3}));
  // Split and merge in one go; a transposed input stays a view when the split allows it.
  Tensor t = arange({6, 4}).transpose(0, 1);  // (4, 6), strides (1, 4)
  Tensor s = rearrange(t, "a (b c) -> c a b", {{"c", 3}});
  ASSERT_EQ(s.shape(), (Shape{3, 4, 2}));
  EXPECT_TRUE(s.shares_storage(t));
  EXPECT_EQ(s.item({2, 1, 1}), t.item({1, 1 * 3 + 2}));
}

TEST(Rearrange, UnitAxesAndEllipsis) {
  Tensor x = arange({3, 1, 4});
  Tensor y = rearrange(x, "a 1 b -> b a");
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(y.item({2, 1}), x.item({1, 0, 2}));
  EXPECT_EQ(rearrange(x, "a () b -> (a b) ()").shape(), (Shape{12, 1}));
  EXPECT_EQ(rearrange(x, "a 1 b -> a (1 b) 1").shape(), (Shape{3, 4, 1}));
  Tensor e = arange({2, 3, 4, 5});
  Tensor sw = rearrange(e, "... h w -> ... w h");
  EXPECT_EQ(sw.shape(), (Shape{2, 3, 5, 4}));
  EXPECT_EQ(sw.item({1, 2, 3, 1}), e.item({1, 2, 1, 3}));
  EXPECT_TRUE(sw.shares_storage(e));
  EXPECT_EQ(rearrange(e, "b ... -> b (...)").shape(), (Shape{2, 60}));
  EXPECT_EQ(rearrange(e, "b c h w ... -> ... b c h w").shape(), e.shape());  // empty ellipsis
  EXPECT_EQ(rearrange(e, "... -> ...").shape(), e.shape());
  EXPECT_EQ(rearrange(e, "b ... w -> w ... b").shape(), (Shape{5, 3, 4, 2}));
  // 0-size dimensions keep working.
  EXPECT_EQ(rearrange(Tensor::zeros({0, 6}, DType::f32), "a (b c) -> c a b", {{"b", 2}}).shape(),
            (Shape{3, 0, 2}));
}

TEST(Rearrange, ViewWritesAreVisibleInTheBase) {
  Tensor x = arange({2, 6});
  Tensor v = rearrange(x, "a (b c) -> c b a", {{"b", 2}});
  v.set({1, 1, 0}, -5.0);
  EXPECT_EQ(x.item({0, 1 * 3 + 1}), -5.0);
}

TEST(Rearrange, ErrorsNameThePatternAndTheProblem) {
  Tensor x = arange({2, 3, 4});
  auto err = [&](const std::string& pattern, const std::map<std::string, int64_t>& sizes = {}) {
    return error_of([&] { rearrange(x, pattern, sizes); });
  };
  EXPECT_EQ(err("a b c -> a b d"),
            "rearrange 'a b c -> a b d': axis 'd' appears on the right side but not on the left");
  EXPECT_THAT(err("a b c -> a b"),
              HasSubstr("axis 'c' appears on the left side but not on the right"));
  EXPECT_THAT(err("a a c -> a c"), HasSubstr("axis 'a' appears twice on the left side"));
  EXPECT_THAT(err("a b c -> a b b c"), HasSubstr("axis 'b' appears twice on the right side"));
  EXPECT_THAT(
      err("a b -> b a"),
      HasSubstr("the left side has 2 dimensions but the input has shape (2, 3, 4) (rank 3)"));
  EXPECT_THAT(err("a b c d e ... -> a b c d e ..."), HasSubstr("has at least 5 dimensions"));
  EXPECT_THAT(err("a (b c -> a b c"), HasSubstr("unbalanced parentheses on the left side"));
  EXPECT_THAT(err("a b c) -> a b c"), HasSubstr("unbalanced parentheses on the left side"));
  EXPECT_THAT(err("a b c -> a (b c"), HasSubstr("unbalanced parentheses on the right side"));
  EXPECT_THAT(err("a ((b c)) -> a b c"), HasSubstr("nested parentheses"));
  EXPECT_THAT(err("a (b d) c -> a b d c"),
              HasSubstr("cannot infer the sizes of 'b' and 'd' in group (b d) (dimension 1 of "
                        "size 3)"));
  EXPECT_THAT(
      err("a b (c d) -> a b c d", {{"c", 3}}),
      HasSubstr("dimension 2 of size 4 cannot be split as (c d): 4 is not a multiple of 3"));
  EXPECT_THAT(err("a b c -> a b c", {{"b", 5}}),
              HasSubstr("axis 'b' is given size 5 but dimension 1 has size 3"));
  EXPECT_THAT(err("a b (c d) -> a b c d", {{"c", 2}, {"d", 3}}),
              HasSubstr("group (c d) has 6 elements from the given sizes but dimension 2 has "
                        "size 4"));
  EXPECT_THAT(err("a b c -> a b c", {{"q", 2}}),
              HasSubstr("axis 'q' is given a size (2) but does not appear in the pattern"));
  EXPECT_THAT(err("a b (c d) -> a b c d", {{"c", 0}}), HasSubstr("sizes must be >= 1"));
  EXPECT_THAT(err("a b c"), HasSubstr("no '->'"));
  EXPECT_THAT(err("a b c -> a b c -> a"), HasSubstr("more than one '->'"));
  EXPECT_THAT(err("a 1 c -> a c"), HasSubstr("dimension 1 is 1 in the pattern but has size 3"));
  EXPECT_THAT(err("a b c -> a b c 2"), HasSubstr("the only number allowed is 1"));
  EXPECT_THAT(err("a b c -> a b c+"), HasSubstr("unexpected character '+'"));
  EXPECT_THAT(err("a ... c -> a c"),
              HasSubstr("'...' appears on the left side but not on the right"));
  EXPECT_THAT(err("a b c -> ... a b c"),
              HasSubstr("'...' appears on the right side but not on the left"));
  EXPECT_THAT(err("... a ... -> a"), HasSubstr("'...' appears twice on the left side"));
  EXPECT_THAT(err("a (b ...) -> a b ..."), HasSubstr("'...' inside parentheses is only allowed"));
  EXPECT_THAT(err("a .. c -> a c"), HasSubstr("not part of an ellipsis"));
}

Tensor golden(const std::string& name) {
  return read_npy(std::string(GRUX_GOLDEN_DIR) + "/tensor_ops/" + name + ".npy");
}

// Golden files from torch permute / reshape (einops is not a dependency; the script spells
// each pattern out).
TEST(Rearrange, GoldenFromTorchPermuteReshape) {
  Tensor x = golden("rearrange_x");
  ASSERT_EQ(x.shape(), (Shape{2, 3, 4, 5}));
  struct Case {
    const char* file;
    const char* pattern;
    std::map<std::string, int64_t> sizes;
  };
  const std::vector<Case> cases = {
      {"rearrange_bhwc_merge", "b c h w -> b (h w) c", {}},
      {"rearrange_bh_cw", "b c h w -> (b h) (c w)", {}},
      {"rearrange_split_merge", "b c (h2 h) w -> b (c h2) h w", {{"h2", 2}}},
      {"rearrange_unit", "b c h w -> w 1 (b c) h", {}},
      {"rearrange_ellipsis", "... h w -> ... w h", {}},
      {"rearrange_flatten", "b ... -> b (...)", {}},
  };
  for (const Case& c : cases) {
    Tensor want = golden(c.file);
    Tensor got = rearrange(x, c.pattern, c.sizes);
    EXPECT_EQ(got.shape(), want.shape()) << c.pattern;
    EXPECT_EQ(max_abs_diff(got, want), 0.0) << c.pattern;
    // Strided input: the same pattern on a non-contiguous copy of x gives the same values.
    Tensor xs = x.transpose(0, 3).contiguous().transpose(0, 3);
    EXPECT_EQ(max_abs_diff(rearrange(xs, c.pattern, c.sizes), want), 0.0) << c.pattern;
  }
}

}  // namespace
}  // namespace grux::test_rearrange
