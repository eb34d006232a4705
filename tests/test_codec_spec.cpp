#include <gtest/gtest.h>

#include "gradwire/codec.hpp"

namespace gw {
namespace {

TEST(CodecSpec, ParsesDefaults) {
  auto s = CodecSpec::parse("qsgd");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->id, CodecId::kQsgd);
  EXPECT_EQ(s->bits, 8u);
  EXPECT_EQ(s->bucket, 512u);
  EXPECT_TRUE(s->stochastic);
  EXPECT_FALSE(s->ef);
}

TEST(CodecSpec, ParsesKeys) {
  auto s = CodecSpec::parse(" qsgd : bits=4, bucket=128 ,ef=1,rounding=nearest,seed=42");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->bits, 4u);
  EXPECT_EQ(s->bucket, 128u);
  EXPECT_TRUE(s->ef);
  EXPECT_FALSE(s->stochastic);
  EXPECT_EQ(s->seed, 42u);
}

TEST(CodecSpec, RoundTripsThroughText) {
  for (const char* text :
       {"none", "fp16,", "bf16:ef=1", "qsgd:bits=2,bucket=64", "sign:bucket=1024,ef=1", "topk:ratio=0.01", "topk:k=17",
        "dgc:ratio=0.001,sample=0.02,seed=9", "randomk:ratio=0.1,seed=3"}) {
    auto s = CodecSpec::parse(text);
    if (std::string(text) == "fp16,") {
      EXPECT_FALSE(s.is_ok());
      continue;
    }
    ASSERT_TRUE(s.is_ok()) << text << ": " << s.status().to_string();
    auto again = CodecSpec::parse(s->to_string());
    ASSERT_TRUE(again.is_ok()) << s->to_string();
    EXPECT_EQ(again->to_string(), s->to_string());
    EXPECT_EQ(again->ratio, s->ratio);
  }
}

struct BadSpec {
  const char* text;
  const char* must_mention;
};

class CodecSpecErrors : public ::testing::TestWithParam<BadSpec> {};

TEST_P(CodecSpecErrors, NamesTheBadPart) {
  auto s = CodecSpec::parse(GetParam().text);
  ASSERT_FALSE(s.is_ok()) << GetParam().text;
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find(GetParam().must_mention), std::string::npos) << s.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    All, CodecSpecErrors,
    ::testing::Values(
        BadSpec{"zstd", "unknown codec 'zstd'"}, BadSpec{"", "unknown codec ''"}, BadSpec{"qsgd:bits=3", "bits=3"},
        BadSpec{"qsgd:bits=16", "bits=16"}, BadSpec{"qsgd:bits=-1", "bits=-1"}, BadSpec{"qsgd:bucket=0", "bucket=0"},
        BadSpec{"qsgd:bucket=99999999", "bucket=99999999"}, BadSpec{"qsgd:ratio=0.1", "unknown key 'ratio'"},
        BadSpec{"sign:bits=2", "unknown key 'bits'"}, BadSpec{"topk", "exactly one of ratio= or k="},
        BadSpec{"topk:ratio=0.1,k=5", "exactly one of ratio= or k="}, BadSpec{"topk:ratio=0", "ratio=0"},
        BadSpec{"topk:ratio=1.5", "ratio=1.5"}, BadSpec{"topk:ratio=nan", "ratio=nan"}, BadSpec{"topk:k=0", "k=0"},
        BadSpec{"topk:k=12x", "k=12x"}, BadSpec{"dgc:ratio=0.01,sample=2", "sample=2"},
        BadSpec{"qsgd:ef=maybe", "ef=maybe"}, BadSpec{"qsgd:bits", "not key=value"},
        BadSpec{"qsgd:bits=4,bits=8", "given twice"}, BadSpec{"qsgd:rounding=up", "rounding=up"},
        BadSpec{"none:seed=1", "unknown key 'seed'"}, BadSpec{"qsgd:bits=1,ef=1", "diverges"}));

TEST(CodecSpec, OneBitQsgdTakesErrorFeedbackOnlyWithNearestRounding) {
  EXPECT_TRUE(CodecSpec::parse("qsgd:bits=1,ef=1,rounding=nearest").is_ok());
  EXPECT_TRUE(CodecSpec::parse("qsgd:bits=1").is_ok());
  EXPECT_TRUE(CodecSpec::parse("qsgd:bits=2,ef=1").is_ok());
}

TEST(CodecSpec, KForRatio) {
  auto s = CodecSpec::parse("topk:ratio=0.01");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->k_for(0), 0u);
  EXPECT_EQ(s->k_for(1), 1u);
  EXPECT_EQ(s->k_for(100), 1u);
  EXPECT_EQ(s->k_for(1000), 10u);
  EXPECT_EQ(s->k_for(16u << 20), 167772u);
  auto fixed = CodecSpec::parse("topk:k=50");
  EXPECT_EQ(fixed->k_for(10), 10u);
  EXPECT_EQ(fixed->k_for(1000), 50u);
}

}  // namespace
}  // namespace gw
