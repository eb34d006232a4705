// The fast paths of the sparse codecs must not change a byte: top-k's sampled bracket gives
// the exact top k on inputs built to mislead a sample, and encode_adding (residual += g folded
// into the codec's first pass) writes the same message and leaves the same residual as the
// addition followed by encode_accumulated, for every codec, step after step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gradwire/codec.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

// Positions of the k largest magnitudes (bits of |x|: NaN above infinity), ties to the lower
// index, increasing; written here from the definition.
std::vector<uint64_t> reference_topk(const std::vector<float>& x, uint64_t k) {
  std::vector<uint64_t> order(x.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  auto key = [&](uint64_t i) { return test::f32_bits(x[i]) & 0x7fffffffu; };
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return key(a) > key(b); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<std::pair<std::string, std::vector<float>>> misleading_inputs(size_t n) {
  std::mt19937_64 rng(99);
  std::vector<std::pair<std::string, std::vector<float>>> out;
  out.emplace_back("gradient", test::gradient(n, 7));
  // Large values only at one phase of a period: a strided sample sees none or all of them.
  for (size_t period : {size_t{64}, size_t{37}, n / 1000}) {
    std::vector<float> v = test::gradient(n, 8 + period);
    for (size_t i = 0; i < n; i += period) v[i] *= 1000.0f;
    out.emplace_back("spikes every " + std::to_string(period), std::move(v));
  }
  // A block of large values: the sample's strides cross it a few times only.
  std::vector<float> block = test::gradient(n, 9);
  for (size_t i = n / 3; i < n / 3 + n / 50; ++i) block[i] *= 100.0f;
  out.emplace_back("one hot block", std::move(block));
  // Fewer non-zeros than k: zeros tie at the boundary.
  std::vector<float> sparse(n, 0.0f);
  for (size_t i = 0; i < n; i += 997) sparse[i] = static_cast<float>(rng() % 7) - 3.0f;
  out.emplace_back("mostly zeros", std::move(sparse));
  out.emplace_back("all equal", std::vector<float>(n, -0.25f));
  std::vector<float> levels(n);
  for (auto& v : levels) v = static_cast<float>(static_cast<int>(rng() % 5) - 2);
  out.emplace_back("five levels", std::move(levels));
  std::vector<float> specials = test::gradient(n, 10);
  for (size_t i = 5; i < n; i += 4099) specials[i] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 11; i < n; i += 7001) specials[i] = -std::numeric_limits<float>::infinity();
  out.emplace_back("nan and inf", std::move(specials));
  return out;
}

TEST(TopkFastPath, ExactOnInputsThatMisleadASample) {
  const size_t n = 300007;
  for (const auto& [name, x] : misleading_inputs(n)) {
    for (const char* ratio : {"0.01", "0.001", "0.1", "0.0003"}) {
      const std::string spec = std::string("topk:ratio=") + ratio;
      SCOPED_TRACE(spec + " on " + name);
      auto codec = test::make_codec(spec);
      const std::vector<uint8_t> msg = test::encode(*codec, x);
      const uint64_t k = test::ref_k_for_ratio(n, std::stod(ratio));
      EXPECT_EQ(test::sparse_indices(msg), reference_topk(x, k));
    }
  }
}

// One codec through encode_adding, another through add + encode_accumulated: same bytes and
// same residual at every step.
void check_adding_matches(const std::string& spec, const std::vector<float>& first, size_t steps) {
  SCOPED_TRACE(spec);
  auto fused = test::make_codec(spec);
  auto plain = test::make_codec(spec);
  const size_t n = first.size();
  const size_t cap = fused->max_encoded_bytes(n, DType::kFloat32);
  std::vector<float> res_fused(n, 0.0f), res_plain(n, 0.0f);
  std::vector<uint8_t> msg_fused(cap), msg_plain(cap);
  for (size_t s = 0; s < steps; ++s) {
    // Gradients that shrink and grow between steps, as the residual's threshold moves.
    std::vector<float> g = s == 0 ? first : test::gradient(n, 1000 + s);
    const float scale = s % 2 == 0 ? 1.0f : 3.0f;
    for (float& v : g) v *= scale;
    const EncodeContext ctx{s, 1};
    auto a = fused->encode_adding(res_fused.data(), g.data(), n, ctx, msg_fused.data(), cap);
    for (size_t i = 0; i < n; ++i) res_plain[i] += g[i];
    auto b = plain->encode_accumulated(res_plain.data(), n, ctx, msg_plain.data(), cap);
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    ASSERT_EQ(*a, *b) << "step " << s;
    ASSERT_EQ(std::memcmp(msg_fused.data(), msg_plain.data(), *a), 0) << "message differs at step " << s;
    if (n > 0) {  // memcmp takes no null pointers, not even for 0 bytes
      ASSERT_EQ(std::memcmp(res_fused.data(), res_plain.data(), n * sizeof(float)), 0)
          << "residual differs at step " << s;
    }
  }
}

TEST(EncodeAdding, SameBytesAndResidualAsAddThenEncode) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{4099}, size_t{300007}}) {
    const std::vector<float> g = test::gradient(n, 31 + n);
    for (const char* spec : {"topk:ratio=0.01", "topk:ratio=0.001", "topk:k=1", "dgc:ratio=0.01", "dgc:ratio=0.001",
                             "qsgd:bits=8", "sign", "randomk:ratio=0.01", "fp16"}) {
      SCOPED_TRACE("n=" + std::to_string(n));
      check_adding_matches(spec, g, 6);
    }
  }
  for (const auto& [name, x] : misleading_inputs(100003)) {
    SCOPED_TRACE(name);
    check_adding_matches("topk:ratio=0.01", x, 3);
    check_adding_matches("dgc:ratio=0.001", x, 3);
  }
}

TEST(EncodeAdding, RefusesNullAndShortBuffersLikeEncode) {
  auto codec = test::make_codec("topk:ratio=0.1");
  std::vector<float> acc(100, 0.0f), g(100, 1.0f);
  std::vector<uint8_t> out(codec->max_encoded_bytes(100, DType::kFloat32));
  const EncodeContext ctx{0, 0};
  EXPECT_EQ(codec->encode_adding(nullptr, g.data(), 100, ctx, out.data(), out.size()).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(codec->encode_adding(acc.data(), nullptr, 100, ctx, out.data(), out.size()).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(codec->encode_adding(acc.data(), g.data(), 100, ctx, out.data(), out.size() - 1).status().code(),
            Code::kBufferTooSmall);
  for (float v : acc) ASSERT_EQ(v, 0.0f);  // refused before anything was added
}

}  // namespace
}  // namespace gw
