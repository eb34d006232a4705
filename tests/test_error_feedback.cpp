// Error feedback: encode(g) sends g + residual and keeps what the message failed to carry,
// so that over any number of steps sum(sent) + residual == sum(g), up to fp32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

using test::f32_bits;

const char* const kLossy[] = {
    "qsgd:bits=8,bucket=512,seed=1",
    "qsgd:bits=4,bucket=100,seed=2",
    "qsgd:bits=1,bucket=512,seed=3",
    "qsgd:bits=2,rounding=nearest",
    "sign:bucket=512",
    "sign:bucket=33",
    "topk:ratio=0.01",
    "topk:k=1",
    "dgc:ratio=0.01,seed=4",
    "randomk:ratio=0.05,seed=5",
};

std::vector<uint8_t> encode_ef(Codec& codec, const std::vector<float>& g, ErrorFeedback& ef, uint64_t step,
                               uint32_t rank) {
  std::vector<uint8_t> out(codec.max_encoded_bytes(g.size(), DType::kFloat32));
  auto r = codec.encode(g.data(), g.size(), EncodeContext{step, rank}, ef, out.data(), out.size());
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  out.resize(r.is_ok() ? *r : 0);
  return out;
}

TEST(ErrorFeedback, InvariantForEveryLossyCodec) {
  const size_t n = 10007;  // partial buckets, and dgc's sampled path (n >= 4096)
  const int steps = 20;
  for (const char* spec : kLossy) {
    SCOPED_TRACE(spec);
    auto codec = test::make_codec(spec);
    ASSERT_NE(codec, nullptr);
    ErrorFeedback ef(n);
    EXPECT_EQ(ef.count(), n);
    EXPECT_EQ(ef.step(), 0u);
    std::vector<double> sum_g(n, 0.0), sum_sent(n, 0.0), bound(n, 0.0);
    for (int t = 0; t < steps; ++t) {
      std::vector<float> g = test::gradient(n, 500 + static_cast<uint64_t>(t));
      if (t % 5 == 4) {
        for (auto& v : g) v *= 1000.0f;  // a step far larger than the residual
      }
      const std::vector<float> before(ef.residual(), ef.residual() + n);
      const std::vector<uint8_t> msg = encode_ef(*codec, g, ef, static_cast<uint64_t>(t), 2);
      ASSERT_FALSE(msg.empty());
      EXPECT_EQ(ef.step(), static_cast<uint64_t>(t + 1));
      const std::vector<float> sent = test::decode(msg, n);
      for (size_t i = 0; i < n; ++i) {
        // residual' = (g + residual) - decode(msg), each one fp32 operation.
        const float acc = before[i] + g[i];
        const float want = acc - sent[i];
        ASSERT_EQ(f32_bits(ef.residual()[i]), f32_bits(want))
            << "step " << t << " element " << i << " g " << g[i] << " residual " << before[i] << " sent " << sent[i]
            << " residual' " << ef.residual()[i];
        sum_g[i] += g[i];
        sum_sent[i] += sent[i];
        // Each of the two fp32 operations rounds by at most half an ulp of its result.
        bound[i] += (std::fabs(static_cast<double>(acc)) + std::fabs(static_cast<double>(want))) * std::ldexp(1.0, -24);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const double lhs = sum_sent[i] + static_cast<double>(ef.residual()[i]);
      ASSERT_NEAR(lhs, sum_g[i], bound[i] * 1.0001 + 1e-30)
          << "element " << i << ": sum of sent + residual != sum of gradients";
    }
    // Not vacuous: the codec did lose something that the residual holds.
    double residual_norm = 0.0;
    for (size_t i = 0; i < n; ++i) residual_norm += std::fabs(ef.residual()[i]);
    EXPECT_GT(residual_norm, 0.0);
  }
}

// The same through encode_accumulated, where the caller has already added g into the buffer.
TEST(ErrorFeedback, EncodeAccumulatedMatchesEncodeWithState) {
  const size_t n = 4099;
  for (const char* spec : kLossy) {
    SCOPED_TRACE(spec);
    auto a = test::make_codec(spec);
    auto b = test::make_codec(spec);
    ErrorFeedback ef(n);
    std::vector<float> acc(n, 0.0f);
    for (int t = 0; t < 5; ++t) {
      const std::vector<float> g = test::gradient(n, 40 + static_cast<uint64_t>(t));
      const std::vector<uint8_t> m1 = encode_ef(*a, g, ef, static_cast<uint64_t>(t), 1);
      for (size_t i = 0; i < n; ++i) acc[i] += g[i];
      std::vector<uint8_t> m2(b->max_encoded_bytes(n, DType::kFloat32));
      auto r = b->encode_accumulated(acc.data(), n, EncodeContext{static_cast<uint64_t>(t), 1}, m2.data(), m2.size());
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      m2.resize(*r);
      EXPECT_EQ(m1, m2) << "step " << t;
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(acc[i]), f32_bits(ef.residual()[i])) << "element " << i;
    }
  }
}

TEST(ErrorFeedback, ResetZeroesResidualsAndStep) {
  const size_t n = 1000;
  auto codec = test::make_codec("topk:ratio=0.1");
  ErrorFeedback ef(n);
  for (int t = 0; t < 3; ++t)
    encode_ef(*codec, test::gradient(n, static_cast<uint64_t>(t)), ef, static_cast<uint64_t>(t), 0);
  EXPECT_EQ(ef.step(), 3u);
  float* owner = ef.owner_residual(77);
  EXPECT_EQ(ef.owner_count(), 77u);
  for (size_t i = 0; i < 77; ++i) owner[i] = 1.5f;
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += ef.residual()[i] != 0.0f;
  EXPECT_GT(nonzero, 0u);
  ef.reset();
  EXPECT_EQ(ef.step(), 0u);
  EXPECT_EQ(ef.count(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(ef.residual()[i]), 0u) << "element " << i;
  EXPECT_EQ(ef.owner_count(), 77u);
  for (size_t i = 0; i < 77; ++i) ASSERT_EQ(f32_bits(ef.owner_residual(77)[i]), 0u) << "owner element " << i;
  // After a reset the state behaves like a fresh one.
  ErrorFeedback fresh(n);
  const std::vector<float> g = test::gradient(n, 99);
  EXPECT_EQ(encode_ef(*codec, g, ef, 0, 0), encode_ef(*codec, g, fresh, 0, 0));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(ef.residual()[i]), f32_bits(fresh.residual()[i]));
}

TEST(ErrorFeedback, MismatchedCountIsInvalidArgument) {
  auto codec = test::make_codec("qsgd:bits=4");
  ErrorFeedback ef(100);
  for (size_t i = 0; i < 100; ++i) ef.residual()[i] = static_cast<float>(i);
  const std::vector<float> g = test::gradient(101, 3);
  std::vector<uint8_t> out(codec->max_encoded_bytes(101, DType::kFloat32));
  for (size_t n : {size_t{99}, size_t{101}, size_t{0}}) {
    auto r = codec->encode(g.data(), n, EncodeContext{}, ef, out.data(), out.size());
    ASSERT_FALSE(r.is_ok()) << "n " << n;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().to_string();
  }
  EXPECT_EQ(ef.step(), 0u);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(ef.residual()[i], static_cast<float>(i)) << "residual changed";
  // A too-small output buffer fails before the residual is touched, too.
  auto r = codec->encode(g.data(), 100, EncodeContext{}, ef, out.data(), 10);
  EXPECT_EQ(r.status().code(), Code::kBufferTooSmall);
  EXPECT_EQ(ef.step(), 0u);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(ef.residual()[i], static_cast<float>(i)) << "residual changed";
}

// topk with error feedback on a constant gradient: every element is eventually sent and the
// residual settles instead of growing with the step count.
TEST(ErrorFeedback, TopkEventuallySendsEverything) {
  const size_t n = 1000;
  const uint64_t k = 10;
  std::vector<float> g(n);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  for (auto& v : g) v = (rng() & 1) ? mag(rng) : -mag(rng);
  double max_g = 0.0;
  for (float v : g) max_g = std::max(max_g, std::fabs(static_cast<double>(v)));
  auto codec = test::make_codec("topk:k=" + std::to_string(k));
  ErrorFeedback ef(n);
  std::vector<int> times_sent(n, 0);
  std::vector<double> total_sent(n, 0.0);
  const int steps = 600;
  double max_residual_early = 0.0, max_residual_late = 0.0;
  int all_sent_at = -1;
  for (int t = 0; t < steps; ++t) {
    const std::vector<uint8_t> msg = encode_ef(*codec, g, ef, static_cast<uint64_t>(t), 0);
    for (uint64_t i : test::sparse_indices(msg)) ++times_sent[i];
    const std::vector<float> sent = test::decode(msg, n);
    for (size_t i = 0; i < n; ++i) total_sent[i] += sent[i];
    double m = 0.0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(ef.residual()[i])));
    if (t >= 200 && t < 300) max_residual_early = std::max(max_residual_early, m);
    if (t >= 500) max_residual_late = std::max(max_residual_late, m);
    if (all_sent_at < 0 && std::count(times_sent.begin(), times_sent.end(), 0) == 0) all_sent_at = t;
  }
  EXPECT_GE(all_sent_at, 0) << "some element was never sent in " << steps << " steps";
  // n / k = 100 steps per round; magnitudes differ by at most 3x.
  EXPECT_LE(all_sent_at, 350);
  EXPECT_LE(max_residual_late, 1.05 * max_residual_early) << "residual keeps growing";
  EXPECT_LE(max_residual_late, 3.0 * static_cast<double>(n / k) * max_g);
  // What was sent tracks what was asked for: per element, the totals differ by the residual.
  for (size_t i = 0; i < n; ++i) {
    EXPECT_GT(times_sent[i], 0) << "element " << i;
    EXPECT_NEAR(total_sent[i] / steps, g[i], 3.0 * static_cast<double>(n / k) * max_g / steps + 1e-4)
        << "element " << i;
  }
}

TEST(ErrorFeedback, LosslessCodecsLeaveNoResidual) {
  const size_t n = 4097;
  auto codec = test::make_codec("none");
  ErrorFeedback ef(n);
  for (int t = 0; t < 5; ++t) {
    const std::vector<float> g = test::gradient(n, 70 + static_cast<uint64_t>(t));
    const std::vector<uint8_t> msg = encode_ef(*codec, g, ef, static_cast<uint64_t>(t), 0);
    // The message carries exactly g (the residual was zero).
    const std::vector<float> sent = test::decode(msg, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(f32_bits(sent[i]), f32_bits(g[i])) << "element " << i;
      ASSERT_EQ(f32_bits(ef.residual()[i]), 0u) << "element " << i;
    }
    EXPECT_EQ(ef.step(), static_cast<uint64_t>(t + 1));
  }
  // topk keeping every element is lossless too.
  auto all = test::make_codec("topk:ratio=1");
  ErrorFeedback ef2(n);
  for (int t = 0; t < 3; ++t) {
    encode_ef(*all, test::gradient(n, 80 + static_cast<uint64_t>(t)), ef2, static_cast<uint64_t>(t), 0);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(ef2.residual()[i]), 0u) << "element " << i;
  }
}

}  // namespace
}  // namespace gw
