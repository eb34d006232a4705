#include "tests/test_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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
  auto r = codec.encode(x.data(), x.size(), DType::kFloat32, EncodeContext{step, rank}, out.data(), out.size());
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  out.resize(r.is_ok() ? *r : 0);
  return out;
}

std::vector<float> decode(const std::vector<uint8_t>& msg, size_t n) {
  std::vector<float> out(n, 0.0f);
  const Status s = gw::decode(msg.data(), msg.size(), out.data(), n, DType::kFloat32, DecodeMode::kOverwrite);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

const std::vector<size_t>& awkward_sizes() {
  static const std::vector<size_t> sizes = {0, 1, 2, 7, 31, 33, 511, 513, 4097, 65537, 1000003};
  return sizes;
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t ref_float_to_half(float f) {
  const unsigned sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < std::ldexp(1.0, -14)) {                        // subnormal half (or zero): multiples of 2^-24
    const double q = std::nearbyint(std::ldexp(a, 24));  // 1024 is the smallest normal
    return static_cast<uint16_t>(sign | static_cast<unsigned>(q));
  }
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int exponent = e - 1;
  double m = std::nearbyint(std::ldexp(a, 10 - exponent));  // [1024, 2048]
  if (m == 2048.0) {
    m = 1024.0;
    ++exponent;
  }
  if (exponent > 15) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | (static_cast<unsigned>(exponent + 15) << 10) |
                               (static_cast<unsigned>(m) - 1024u));
}

float ref_half_to_float(uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exponent == 0x1f) {
    return mant != 0 ? std::numeric_limits<float>::quiet_NaN()
                     : static_cast<float>(sign * std::numeric_limits<double>::infinity());
  }
  if (exponent == 0) return static_cast<float>(sign * std::ldexp(mant, -24));
  return static_cast<float>(sign * std::ldexp(1024 + mant, exponent - 25));
}

uint16_t ref_float_to_bf16(float f) {
  const unsigned sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7fc0u);
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return static_cast<uint16_t>(sign | 0x7f80u);
  if (a < std::ldexp(1.0, -126)) {  // subnormal bf16: multiples of 2^-133
    const double q = std::nearbyint(std::ldexp(a, 133));
    return static_cast<uint16_t>(sign | static_cast<unsigned>(q));
  }
  int e = 0;
  std::frexp(a, &e);
  int exponent = e - 1;
  double m = std::nearbyint(std::ldexp(a, 7 - exponent));  // [128, 256]
  if (m == 256.0) {
    m = 128.0;
    ++exponent;
  }
  if (exponent > 127) return static_cast<uint16_t>(sign | 0x7f80u);
  return static_cast<uint16_t>(sign | (static_cast<unsigned>(exponent + 127) << 7) | (static_cast<unsigned>(m) - 128u));
}

float ref_bf16_to_float(uint16_t b) {
  const double sign = (b & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (b >> 7) & 0xff;
  const int mant = b & 0x7f;
  if (exponent == 0xff) {
    return mant != 0 ? std::numeric_limits<float>::quiet_NaN()
                     : static_cast<float>(sign * std::numeric_limits<double>::infinity());
  }
  if (exponent == 0) return static_cast<float>(sign * std::ldexp(mant, -133));
  return static_cast<float>(sign * std::ldexp(128 + mant, exponent - 134));
}

namespace {

uint64_t le(const std::vector<uint8_t>& m, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | m[off + static_cast<size_t>(i)];
  return v;
}

}  // namespace

WireFields read_wire(const std::vector<uint8_t>& msg) {
  WireFields w;
  EXPECT_GE(msg.size(), kWireHeaderBytes);
  if (msg.size() < kWireHeaderBytes) return w;
  EXPECT_EQ(msg[0], 'G');
  EXPECT_EQ(msg[1], 'W');
  EXPECT_EQ(msg[2], 'R');
  EXPECT_EQ(msg[3], 'E');
  EXPECT_EQ(msg[4], 1);
  w.codec = msg[5];
  w.dtype = msg[6];
  w.flags = msg[7];
  w.count = le(msg, 8, 8);
  w.bits = static_cast<uint32_t>(le(msg, 16, 4));
  w.bucket = static_cast<uint32_t>(le(msg, 20, 4));
  w.k = le(msg, 24, 8);
  w.seed = le(msg, 32, 8);
  w.step = le(msg, 40, 8);
  w.payload_bytes = le(msg, 48, 8);
  EXPECT_EQ(w.payload_bytes + kWireHeaderBytes, msg.size());
  return w;
}

std::vector<uint64_t> sparse_indices(const std::vector<uint8_t>& msg) {
  const WireFields w = read_wire(msg);
  const int width = w.count <= (uint64_t{1} << 32) ? 4 : 8;
  std::vector<uint64_t> idx;
  if (msg.size() < kWireHeaderBytes + w.k * static_cast<uint64_t>(width)) {
    ADD_FAILURE() << "message too short for " << w.k << " indices";
    return idx;
  }
  idx.reserve(w.k);
  for (uint64_t i = 0; i < w.k; ++i) {
    idx.push_back(le(msg, kWireHeaderBytes + i * static_cast<uint64_t>(width), width));
  }
  return idx;
}

uint64_t ref_k_for_ratio(uint64_t n, double ratio) {
  if (n == 0) return 0;
  const double want = std::floor(ratio * static_cast<double>(n) + 0.5);
  if (want < 1.0) return 1;
  if (want >= static_cast<double>(n)) return n;
  return static_cast<uint64_t>(want);
}

uint64_t ref_k_for_fixed(uint64_t n, uint64_t k) { return k < n ? k : n; }

void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

uint32_t ref_stream_word(uint64_t seed, uint64_t step, uint32_t rank, uint64_t index) {
  const uint64_t block = index / 4;
  const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), rank,
                           static_cast<uint32_t>(step)};
  const uint32_t key[2] = {static_cast<uint32_t>(seed),
                           static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(step >> 32)};
  uint32_t out[4];
  ref_philox4x32_10(ctr, key, out);
  return out[index % 4];
}

std::vector<uint64_t> nonzero_positions(const std::vector<float>& v) {
  std::vector<uint64_t> pos;
  for (size_t i = 0; i < v.size(); ++i) {
    if (f32_bits(v[i]) != 0u) pos.push_back(i);
  }
  return pos;
}

}  // namespace gw::test
