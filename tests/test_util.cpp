#include "tests/test_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace gw::test {

std::vector<float> gradient(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi(3.0f);
  std::vector<float> x(n);
  for (auto& v : x) {
    float t = normal(rng) / std::sqrt(chi(rng) / 3.0f) * 1e-3f;
    if (t == 0.0f) t = 1e-9f;
    v = t;
  }
  return x;
}

std::unique_ptr<Codec> make_codec(const std::string& spec) {
  auto c = Codec::create(spec);
  EXPECT_TRUE(c.is_ok()) << spec << ": " << c.status().to_string();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

std::vector<uint8_t> encode(Codec& codec, const std::vector<float>& x, uint64_t step, uint32_t rank) {
  std::vector<uint8_t> out(codec.max_encoded_bytes(x.size(), DType::kFloat32));
  auto r = codec.encode(x.data(), x.size(), DType::kFloat32, EncodeContext{step, rank}, out.data(),
                        out.size());
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  out.resize(r.is_ok() ? *r : 0);
  return out;
}

std::vector<float> decode(const std::vector<uint8_t>& msg, size_t n) {
  std::vector<float> out(n, 0.0f);
  const Status s = gw::decode(msg.data(), msg.size(), out.data(), n, DType::kFloat32,
                              DecodeMode::kOverwrite);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

const std::vector<size_t>& awkward_sizes() {
  static const std::vector<size_t> sizes = {0, 1, 2, 7, 31, 33, 511, 513, 4097, 65537, 1000003};
  return sizes;
}

}  // namespace gw::test
