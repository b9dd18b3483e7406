// The problem descriptor parser (core/descriptor.h) that every problem's parse() uses: the
// letters in order, optional letters, HxW pairs, digit limits, and what is malformed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/descriptor.h"
#include "grux/conv.h"
#include "grux/cost.h"
#include "grux/error.h"
#include "grux/gru.h"
#include "grux/mingru.h"
#include "grux/nn.h"
#include "grux/scan.h"

namespace grux::test_descriptor {
namespace {

using detail::Descriptor;
using detail::descriptor_tokens;
using ::testing::HasSubstr;

Descriptor conv_like(const std::string& text) {
  return Descriptor::parse(text, {{'n'}, {'k', false, true}, {'s', true, true}, {'g', true}},
                           "test descriptor", "n{N}k{K}[s{S}][g{G}]");
}

std::string error_of(const std::string& text) {
  try {
    conv_like(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Descriptor, TokensInOrderWithPairs) {
  const auto t = descriptor_tokens("l2d1t100k3x5");
  ASSERT_TRUE(t.has_value());
  ASSERT_EQ(t->size(), 4u);
  EXPECT_EQ((*t)[0].letter, 'l');
  EXPECT_EQ((*t)[0].value, 2);
  EXPECT_EQ((*t)[2].value, 100);
  EXPECT_EQ((*t)[3].letter, 'k');
  EXPECT_TRUE((*t)[3].has_second);
  EXPECT_EQ((*t)[3].second, 5);
  EXPECT_EQ((*t)[3].digits, 1);
  for (const char* bad : {"", "l", "1", "l1 ", "L1", "l1-2", "l1x", "x", "l1xx2", "t1234567890123"})
    EXPECT_FALSE(descriptor_tokens(bad).has_value()) << "'" << bad << "'";
  EXPECT_TRUE(descriptor_tokens("t123456789012").has_value());
  EXPECT_FALSE(descriptor_tokens("t123456789012", 11).has_value());
}

TEST(Descriptor, LettersOptionalAndPairs) {
  const Descriptor d = conv_like("n8k3x5g2");
  EXPECT_EQ(d.get('n'), 8);
  EXPECT_EQ(d.get('k'), 3);
  EXPECT_EQ(d.second('k'), 5);
  EXPECT_FALSE(d.has('s'));
  EXPECT_EQ(d.get('s', 1), 1);
  EXPECT_EQ(d.second('s', 1), 1);
  EXPECT_EQ(d.get('g', 1), 2);
  const Descriptor e = conv_like("n1k7s2");
  EXPECT_EQ(e.second('k'), 7);  // one value stands for both
  EXPECT_EQ(e.second('s'), 2);
}

TEST(Descriptor, MalformedNamesTheTextAndTheForm) {
  // Out of order, repeated, unknown letter, a required letter missing, a pair where none is
  // allowed, trailing text, too many digits.
  for (const char* bad : {"k3n8", "n8n8k3", "n8k3z1", "n8", "n8k3g2x2", "n8k3 ", "n1234567890k3"}) {
    const std::string e = error_of(bad);
    EXPECT_THAT(e, HasSubstr(std::string("test descriptor '") + bad + "' is malformed"));
    EXPECT_THAT(e, HasSubstr("(expected n{N}k{K}[s{S}][g{G}])"));
  }
  EXPECT_EQ(error_of("n123456789k1"), "");  // 9 digits: the default limit
}

// The problems' parse() read their descriptors through it (their round trips and errors).
TEST(Descriptor, EveryProblemParsesThroughIt) {
  EXPECT_EQ(GruProblem::parse("t10n2i3h4").descriptor(), "l1d1t10n2i3h4");
  EXPECT_EQ(GruProblem::parse("l2d2t10n2i3h4").descriptor(), "l2d2t10n2i3h4");
  EXPECT_THROW(GruProblem::parse("l1234567t1n1i1h1"), Error);  // l: at most 6 digits
  EXPECT_EQ(MinGruProblem::parse("l3t5n2i3h4").descriptor(), "l3t5n2i3h4");
  EXPECT_EQ(GruCellProblem::parse("n1i256h128").descriptor(), "n1i256h128");
  EXPECT_EQ(LinearProblem::parse("b32i256o512").descriptor(), "b32i256o512");
  const ConvProblem c = ConvProblem::parse("n1c8h32w32d8k3x5s2p1x2");
  EXPECT_EQ(c.kernel.h, 3);
  EXPECT_EQ(c.kernel.w, 5);
  EXPECT_EQ(c.stride.w, 2);
  EXPECT_EQ(c.padding.h, 1);
  EXPECT_EQ(c.padding.w, 2);
  EXPECT_EQ(c.dilation.h, 1);
  EXPECT_EQ(c.groups, 1);
  EXPECT_EQ(Conv1dProblem::parse("n8c16l128d32k3").descriptor(), "n8c16l128d32k3");
  EXPECT_EQ(ScanProblem::parse("n8t4096c1536").descriptor(), "n8t4096c1536");
  EXPECT_EQ(ActivationProblem::parse(Activation::tanh, "n65536").n, 65536);
  EXPECT_THROW(ActivationProblem::parse(Activation::tanh, "n65536x2"), Error);
  EXPECT_EQ(charlm_cost("l1t64n16e64h512v65", DType::f32).problem, "l1t64n16e64h512v65");
  EXPECT_THROW(charlm_cost("l1t64n16e64h512", DType::f32), Error);
}

}  // namespace
}  // namespace grux::test_descriptor
