// Stochastic rounding of the fp16 and bf16 codecs (rounding=stochastic): the spec key, the
// rounding against a reference written from docs/wire-format.md in double arithmetic, the
// bulk (SIMD) conversions against the scalar ones the kernels share, the random words used,
// unbiasedness over many steps, special values, overflow, and the unchanged message format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compressors/half.hpp"
#include "compressors/half_bulk.hpp"
#include "compressors/philox.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

using test::f32_bits;
using test::f32_from_bits;

enum class Narrow { kHalf, kBf16 };

const char* name_of(Narrow t) { return t == Narrow::kHalf ? "fp16" : "bf16"; }

constexpr uint16_t u16(unsigned v) { return static_cast<uint16_t>(v); }

// docs/wire-format.md: |x| between lo and hi = lo + ulp goes to hi when
// r < frac = floor(2^32 (|x| - lo) / ulp); the value one ulp above the largest finite one is
// infinity. Computed in double (every step exact), then written with the reference nearest
// conversion, which is exact for the representable value chosen. NaN is not handled here.
struct RefSplit {
  double lo, ulp, frac;
};

RefSplit ref_split(Narrow t, double a) {
  const bool half = t == Narrow::kHalf;
  const int mant_bits = half ? 10 : 7;
  const int min_exp = half ? -14 : -126;
  double ulp = std::ldexp(1.0, min_exp - mant_bits);
  if (a >= std::ldexp(1.0, min_exp)) {
    int e = 0;
    std::frexp(a, &e);  // a in [2^(e-1), 2^e)
    ulp = std::ldexp(1.0, e - 1 - mant_bits);
  }
  const double lo = std::floor(a / ulp) * ulp;
  return RefSplit{lo, ulp, std::floor(std::ldexp((a - lo) / ulp, 32))};
}

uint16_t ref_sr(Narrow t, float x, uint32_t r) {
  const bool half = t == Narrow::kHalf;
  const double top = half ? 65536.0 : std::ldexp(1.0, 128);
  const auto inf = u16((std::signbit(x) ? 0x8000u : 0u) | (half ? 0x7c00u : 0x7f80u));
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a) || a >= top) return inf;
  const RefSplit s = ref_split(t, a);
  const double v = static_cast<double>(r) < s.frac ? s.lo + s.ulp : s.lo;
  if (v >= top) return inf;
  const auto fv = static_cast<float>(std::copysign(v, static_cast<double>(x)));
  return half ? test::ref_float_to_half(fv) : test::ref_float_to_bf16(fv);
}

// The threshold word of x (the smallest r that rounds toward zero), for finite x below the top.
uint32_t ref_frac(Narrow t, float x) {
  const double top = t == Narrow::kHalf ? 65536.0 : std::ldexp(1.0, 128);
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a) || a >= top) return 0;
  return static_cast<uint32_t>(ref_split(t, a).frac);
}

uint16_t lib_sr(Narrow t, float x, uint32_t r) {
  return t == Narrow::kHalf ? hd::float_to_half_sr(x, r) : hd::float_to_bf16_sr(x, r);
}
uint16_t lib_nearest(Narrow t, float x) { return t == Narrow::kHalf ? hd::float_to_half(x) : hd::float_to_bf16(x); }
float widen(Narrow t, uint16_t b) { return t == Narrow::kHalf ? hd::half_to_float(b) : hd::bf16_to_float(b); }
bool is_nan(Narrow t, uint16_t b) { return (b & 0x7fffu) > (t == Narrow::kHalf ? 0x7c00u : 0x7f80u); }

// Float bit patterns over every exponent, sign and the fp16/bf16 boundaries.
std::vector<float> sweep_inputs() {
  std::vector<float> in;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65521) in.push_back(f32_from_bits(static_cast<uint32_t>(b)));
  for (uint32_t centre : {0x47800000u, 0x477fe000u, 0x38800000u, 0x33800000u, 0x33000000u, 0x2f800000u, 0x7f800000u,
                          0x7f7f0000u, 0x00800000u, 0x3f800000u, 0x00000000u}) {
    for (uint32_t d = 0; d < 256; ++d) {
      const uint32_t b = centre + d * 37 - 128 * 37;
      in.push_back(f32_from_bits(b));
      in.push_back(f32_from_bits(b | 0x80000000u));
    }
  }
  return in;
}

uint16_t payload_at(const std::vector<uint8_t>& msg, size_t i) {
  uint16_t v;
  std::memcpy(&v, msg.data() + test::kWireHeaderBytes + 2 * i, 2);
  return v;
}

TEST(StochasticRounding, SpecKeyAndCanonicalText) {
  for (const char* name : {"fp16", "bf16"}) {
    const std::string n(name);
    auto plain = CodecSpec::parse(n);
    ASSERT_TRUE(plain.is_ok());
    EXPECT_FALSE(plain->stochastic) << "nearest is the default";
    EXPECT_EQ(plain->to_string(), n + ":ef=0");
    auto nearest = CodecSpec::parse(n + ":rounding=nearest");
    ASSERT_TRUE(nearest.is_ok());
    EXPECT_EQ(nearest->to_string(), n + ":ef=0");
    auto sr = CodecSpec::parse(n + ":rounding=stochastic");
    ASSERT_TRUE(sr.is_ok());
    EXPECT_TRUE(sr->stochastic);
    EXPECT_EQ(sr->to_string(), n + ":rounding=stochastic,seed=0,ef=0");
    auto seeded = CodecSpec::parse(n + ":seed=7,rounding=stochastic,ef=1");
    ASSERT_TRUE(seeded.is_ok());
    EXPECT_EQ(seeded->seed, 7u);
    EXPECT_EQ(seeded->to_string(), n + ":rounding=stochastic,seed=7,ef=1");
    // A seed without stochastic rounding is kept (so the text round-trips) and does nothing.
    auto idle_seed = CodecSpec::parse(n + ":seed=3");
    ASSERT_TRUE(idle_seed.is_ok());
    EXPECT_EQ(idle_seed->to_string(), n + ":seed=3,ef=0");
    for (const auto& s : {*plain, *nearest, *sr, *seeded, *idle_seed}) {
      auto again = CodecSpec::parse(s.to_string());
      ASSERT_TRUE(again.is_ok()) << s.to_string();
      EXPECT_EQ(again->to_string(), s.to_string());
      EXPECT_EQ(again->stochastic, s.stochastic);
      EXPECT_EQ(again->seed, s.seed);
    }
    auto bad = CodecSpec::parse(n + ":rounding=up");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("rounding=up"), std::string::npos) << bad.status().message();
  }
  EXPECT_FALSE(CodecSpec::parse("none:rounding=stochastic").is_ok());
}

TEST(StochasticRounding, MatchesTheDefinitionAtTheThreshold) {
  std::mt19937 rng(11);
  for (Narrow t : {Narrow::kHalf, Narrow::kBf16}) {
    for (float x : sweep_inputs()) {
      if (std::isnan(x)) continue;
      const uint32_t frac = ref_frac(t, x);
      std::vector<uint32_t> words = {0u,
                                     1u,
                                     0x7fffffffu,
                                     0x80000000u,
                                     0xfffffffeu,
                                     0xffffffffu,
                                     static_cast<uint32_t>(rng()),
                                     static_cast<uint32_t>(rng())};
      for (uint32_t d : {0u, 1u}) {
        words.push_back(frac - d);
        words.push_back(frac + d);
      }
      for (uint32_t r : words) {
        ASSERT_EQ(lib_sr(t, x, r), ref_sr(t, x, r))
            << name_of(t) << " x bits 0x" << std::hex << f32_bits(x) << " r 0x" << r << " frac 0x" << frac;
      }
    }
  }
}

TEST(StochasticRounding, SpecialValues) {
  std::mt19937 rng(5);
  for (Narrow t : {Narrow::kHalf, Narrow::kBf16}) {
    // Every representable value, given as float, comes back unchanged whatever the word;
    // NaNs stay NaN with their sign, as the nearest conversion writes them.
    for (uint32_t b = 0; b < 65536; ++b) {
      const auto v = static_cast<uint16_t>(b);
      const float x = widen(t, v);
      for (uint32_t r : {0u, 0xffffffffu, static_cast<uint32_t>(rng())}) {
        const uint16_t got = lib_sr(t, x, r);
        if (is_nan(t, v)) {
          EXPECT_TRUE(is_nan(t, got)) << name_of(t) << " 0x" << std::hex << b;
          EXPECT_EQ(got & 0x8000u, v & 0x8000u);
          EXPECT_EQ(got, lib_nearest(t, x));
        } else {
          ASSERT_EQ(got, v) << name_of(t) << " 0x" << std::hex << b << " r 0x" << r;
        }
      }
    }
    const uint16_t inf = t == Narrow::kHalf ? u16(0x7c00u) : u16(0x7f80u);
    for (uint32_t r : {0u, 0xffffffffu}) {
      EXPECT_EQ(lib_sr(t, -0.0f, r), u16(0x8000u));
      EXPECT_EQ(lib_sr(t, 0.0f, r), u16(0));
      EXPECT_EQ(lib_sr(t, INFINITY, r), inf);
      EXPECT_EQ(lib_sr(t, -INFINITY, r), u16(inf | 0x8000u));
      EXPECT_TRUE(is_nan(t, lib_sr(t, f32_from_bits(0xffc00001u), r)));
      EXPECT_EQ(lib_sr(t, f32_from_bits(0xffc00001u), r) & 0x8000u, 0x8000u);
      EXPECT_TRUE(is_nan(t, lib_sr(t, f32_from_bits(0x7f800001u), r)));  // signaling, low payload
    }
  }
  // fp16 subnormals: 2.5 steps of 2^-24 is 2 or 3 steps; below one step, 0 or one step.
  const float step = std::ldexp(1.0f, -24);
  EXPECT_EQ(hd::float_to_half_sr(2.5f * step, 0), u16(3));
  EXPECT_EQ(hd::float_to_half_sr(2.5f * step, 0x80000000u), u16(2));
  EXPECT_EQ(hd::float_to_half_sr(-0.25f * step, 0x3fffffffu), u16(0x8001u));
  EXPECT_EQ(hd::float_to_half_sr(-0.25f * step, 0x40000000u), u16(0x8000u));
  EXPECT_EQ(hd::float_to_half_sr(std::ldexp(1.0f, -149), 0), u16(0)) << "2^-125 of a step: truncated to 0";
  // Just below the smallest normal rounds up into it.
  EXPECT_EQ(hd::float_to_half_sr(f32_from_bits(0x387fffffu), 0), u16(0x400u));
}

TEST(StochasticRounding, BulkMatchesScalar) {
  std::mt19937 rng(3);
  std::vector<float> in = sweep_inputs();
  for (int i = 0; i < 5000; ++i) in.push_back(f32_from_bits(static_cast<uint32_t>(rng())));
  const auto g = test::gradient(3000, 9);
  in.insert(in.end(), g.begin(), g.end());
  const RandomStream rs{0x1234567890abcdefull, 77, 5};
  // Block indices with high bits, and crossing 2^32 inside a batch of blocks.
  for (uint64_t first : {uint64_t{0}, uint64_t{4096}, (uint64_t{1} << 34) + 12, (uint64_t{1} << 34) - 20}) {
    for (size_t n : {in.size(), size_t{1}, size_t{15}, size_t{17}, size_t{1025}}) {
      std::vector<uint8_t> h(2 * n + 1), b(2 * n + 1);
      detail::floats_to_halves_sr(in.data(), h.data() + 1, n, rs, first);  // odd address
      detail::floats_to_bf16_sr(in.data(), b.data() + 1, n, rs, first);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t r = rs.word(first + i);
        uint16_t gh, gb;
        std::memcpy(&gh, h.data() + 1 + 2 * i, 2);
        std::memcpy(&gb, b.data() + 1 + 2 * i, 2);
        ASSERT_EQ(gh, hd::float_to_half_sr(in[i], r)) << "fp16 i " << i << " bits 0x" << std::hex << f32_bits(in[i]);
        ASSERT_EQ(gb, hd::float_to_bf16_sr(in[i], r)) << "bf16 i " << i << " bits 0x" << std::hex << f32_bits(in[i]);
      }
    }
  }
}

// The codec rounds element i with word i of the stream (spec seed, step, rank), computed
// here by the test's own Philox.
TEST(StochasticRounding, CodecUsesWordIOfTheStream) {
  for (Narrow t : {Narrow::kHalf, Narrow::kBf16}) {
    auto codec = test::make_codec(std::string(name_of(t)) + ":rounding=stochastic,seed=4242");
    ASSERT_NE(codec, nullptr);
    for (size_t n : {size_t{1}, size_t{7}, size_t{33}, size_t{4097}}) {
      std::vector<float> x = test::gradient(n, n);
      if (t == Narrow::kHalf) {
        for (size_t i = 0; i < n; ++i) x[i] *= (i % 3 == 0) ? 1e-2f : 1e3f;  // subnormal and normal fp16
      }
      const uint64_t step = 31;
      const uint32_t rank = 2;
      const std::vector<uint8_t> msg = test::encode(*codec, x, step, rank);
      ASSERT_EQ(msg.size(), test::kWireHeaderBytes + 2 * n);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t r = test::ref_stream_word(4242, step, rank, i);
        ASSERT_EQ(payload_at(msg, i), ref_sr(t, x[i], r)) << name_of(t) << " n " << n << " i " << i;
      }
    }
  }
}

TEST(StochasticRounding, MessageIsAPlainDensePayload) {
  const std::vector<float> x = test::gradient(1000, 1);
  for (Narrow t : {Narrow::kHalf, Narrow::kBf16}) {
    const std::string name = name_of(t);
    auto sr = test::make_codec(name + ":rounding=stochastic,seed=99");
    const std::vector<uint8_t> msg = test::encode(*sr, x, 12, 3);
    const test::WireFields w = test::read_wire(msg);
    EXPECT_EQ(w.codec, t == Narrow::kHalf ? 1 : 2);
    EXPECT_EQ(w.dtype, 1);
    EXPECT_EQ(w.flags, 0);
    EXPECT_EQ(w.seed, 0u);
    EXPECT_EQ(w.step, 0u);
    EXPECT_EQ(w.bits, 0u);
    EXPECT_EQ(w.payload_bytes, 2 * x.size());
    const std::vector<float> y = test::decode(msg, x.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(f32_bits(y[i]), f32_bits(widen(t, payload_at(msg, i))));
    // Nearest, with or without a seed, writes what it always wrote.
    const std::vector<uint8_t> plain = test::encode(*test::make_codec(name), x, 12, 3);
    EXPECT_EQ(test::encode(*test::make_codec(name + ":rounding=nearest,seed=5"), x, 12, 3), plain);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(payload_at(plain, i), lib_nearest(t, x[i]));
    EXPECT_NE(msg, plain);
  }
}

TEST(StochasticRounding, SameKeySameBytesOtherKeyOtherBits) {
  const std::vector<float> x = test::gradient(4096, 2);
  for (const char* name : {"fp16", "bf16"}) {
    const std::string spec = std::string(name) + ":rounding=stochastic,seed=1";
    auto a = test::make_codec(spec);
    auto b = test::make_codec(spec);
    const auto base = test::encode(*a, x, 5, 1);
    EXPECT_EQ(test::encode(*b, x, 5, 1), base) << "same seed, step and rank";
    EXPECT_EQ(test::encode(*a, x, 5, 1), base) << "again, same codec";
    auto count_diff = [&](const std::vector<uint8_t>& m) {
      size_t d = 0;
      for (size_t i = 0; i < x.size(); ++i) d += payload_at(m, i) != payload_at(base, i);
      return d;
    };
    // Each element rounds the other way with probability 2p(1-p); for these values hundreds do.
    EXPECT_GT(count_diff(test::encode(*a, x, 6, 1)), 200u) << "other step";
    EXPECT_GT(count_diff(test::encode(*a, x, 5, 2)), 200u) << "other rank";
    EXPECT_GT(count_diff(test::encode(*test::make_codec(std::string(name) + ":rounding=stochastic,seed=2"), x, 5, 1)),
              200u)
        << "other seed";
    EXPECT_GT(count_diff(test::encode(*a, x, 5ull + (1ull << 32), 1)), 200u) << "step differing in its high bits";
  }
}

// E[decode(encode(x))] == x: many values strictly between neighbours (normal, fp16
// subnormal, below the smallest fp16 subnormal, negative), each encoded at many steps and
// ranks; the mean must be within 5 standard deviations of x. Rounding to nearest, run
// through the same check, must fail it for most values (the test can see a bias).
TEST(StochasticRounding, IsUnbiasedOverSteps) {
  for (Narrow t : {Narrow::kHalf, Narrow::kBf16}) {
    const std::string name = name_of(t);
    std::vector<float> values;
    std::vector<double> ulps;
    const std::vector<float> bases =
        t == Narrow::kHalf
            ? std::vector<float>{1.0f,
                                 -3.0f,
                                 1000.0f,
                                 std::ldexp(1.0f, -14),
                                 std::ldexp(1.0f, -20),
                                 -std::ldexp(1.0f, -24),
                                 0.0f,
                                 60000.0f}
            : std::vector<float>{1.0f, -3.0f, 1e-3f, 1e30f, std::ldexp(1.0f, -126), -std::ldexp(1.0f, -133), 0.0f};
    for (float base : bases) {
      const uint16_t lo = lib_nearest(t, base);
      const double ulp = std::fabs(static_cast<double>(widen(t, static_cast<uint16_t>(lo + 1))) - widen(t, lo));
      for (double p : {0.03125, 0.1, 0.25, 0.5, 0.7, 0.96875}) {
        const double mag = std::fabs(static_cast<double>(widen(t, lo))) + p * ulp;
        values.push_back(static_cast<float>(std::copysign(mag, static_cast<double>(base) + 0.0)));
        ulps.push_back(ulp);
      }
    }
    if (t == Narrow::kHalf) {  // below the smallest subnormal: 0 or 2^-24
      for (float v : {std::ldexp(1.0f, -26), -std::ldexp(3.0f, -28)}) {
        values.push_back(v);
        ulps.push_back(std::ldexp(1.0, -24));
      }
    }
    constexpr size_t kReplicas = 64;
    constexpr uint64_t kSteps = 200;
    std::vector<float> x;
    for (float v : values) x.insert(x.end(), kReplicas, v);
    for (const std::string& spec : {name + ":rounding=stochastic,seed=17", name}) {
      auto codec = test::make_codec(spec);
      std::vector<double> sum(values.size(), 0.0);
      for (uint64_t step = 0; step < kSteps; ++step) {
        const std::vector<float> y =
            test::decode(test::encode(*codec, x, step, static_cast<uint32_t>(step % 3)), x.size());
        for (size_t i = 0; i < x.size(); ++i) sum[i / kReplicas] += y[i];
      }
      size_t biased = 0;
      for (size_t v = 0; v < values.size(); ++v) {
        const double m = static_cast<double>(kReplicas * kSteps);
        const double mean = sum[v] / m;
        const double x_exact = values[v];
        const double p = std::fabs(x_exact - std::trunc(x_exact / ulps[v]) * ulps[v]) / ulps[v];
        const double sigma = ulps[v] * std::sqrt(p * (1.0 - p) / m);
        const bool ok = std::fabs(mean - x_exact) <= 5.0 * sigma + 1e-12 * std::fabs(x_exact);
        if (spec == name) {
          biased += ok ? 0 : 1;
        } else {
          EXPECT_TRUE(ok) << spec << " x " << x_exact << " mean " << mean << " sigma " << sigma;
        }
      }
      if (spec == name) {
        EXPECT_GT(biased, values.size() * 3 / 4) << "nearest rounding should look biased here";
      }
    }
  }
}

// Past the largest finite value the next neighbour is infinity, one ulp up: fp16 65504 + 8
// becomes infinity a quarter of the time, 65536 and above always; bf16 likewise at its top.
TEST(StochasticRounding, OverflowGoesToInfinityWithTheRoundUpProbability) {
  struct Case {
    Narrow t;
    float x;
    double p_inf;
  };
  const float bf16_max = f32_from_bits(0x7f7f0000u);
  const std::vector<Case> cases = {
      {Narrow::kHalf, 65504.0f, 0.0},
      {Narrow::kHalf, 65512.0f, 0.25},
      {Narrow::kHalf, -65528.0f, 0.75},
      {Narrow::kHalf, 65536.0f, 1.0},
      {Narrow::kHalf, 1e9f, 1.0},
      {Narrow::kBf16, bf16_max, 0.0},
      {Narrow::kBf16, f32_from_bits(0x7f7f4000u), 0.25},
      {Narrow::kBf16, -f32_from_bits(0x7f7fc000u), 0.75},
  };
  constexpr size_t kN = 1 << 16;
  for (const Case& c : cases) {
    auto codec = test::make_codec(std::string(name_of(c.t)) + ":rounding=stochastic");
    const std::vector<float> x(kN, c.x);
    const std::vector<uint8_t> msg = test::encode(*codec, x, 1, 0);
    size_t infs = 0;
    for (size_t i = 0; i < kN; ++i) {
      const float y = widen(c.t, payload_at(msg, i));
      if (std::isinf(y)) {
        ++infs;
        EXPECT_EQ(std::signbit(y), std::signbit(c.x));
      } else {
        EXPECT_EQ(std::fabs(y), c.t == Narrow::kHalf ? 65504.0f : bf16_max) << "the largest finite value";
      }
    }
    const double frac = static_cast<double>(infs) / kN;
    const double sigma = std::sqrt(c.p_inf * (1.0 - c.p_inf) / kN);
    EXPECT_NEAR(frac, c.p_inf, 5.0 * sigma) << name_of(c.t) << " x " << c.x;
  }
}

// Input already in half precision: the payload's own type is copied; the other one is
// widened exactly and rounded stochastically like float32 input (fp16 -> bf16 drops 3
// bits; bf16 -> fp16 rounds only out of fp16's range).
TEST(StochasticRounding, HalfInputs) {
  std::mt19937 rng(8);
  const size_t n = 3001;
  std::vector<uint16_t> in(n);
  for (auto& v : in) v = static_cast<uint16_t>(rng());
  struct Pair {
    const char* spec;
    DType in;
    Narrow in_t;
    Narrow out_t;
  };
  for (const Pair& p : {Pair{"bf16:rounding=stochastic,seed=6", DType::kFloat16, Narrow::kHalf, Narrow::kBf16},
                        Pair{"fp16:rounding=stochastic,seed=6", DType::kBFloat16, Narrow::kBf16, Narrow::kHalf},
                        Pair{"fp16:rounding=stochastic,seed=6", DType::kFloat16, Narrow::kHalf, Narrow::kHalf},
                        Pair{"bf16:rounding=stochastic,seed=6", DType::kBFloat16, Narrow::kBf16, Narrow::kBf16}}) {
    auto codec = test::make_codec(p.spec);
    std::vector<uint8_t> msg(codec->max_encoded_bytes(n, p.in));
    auto w = codec->encode(in.data(), n, p.in, EncodeContext{4, 1}, msg.data(), msg.size());
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ASSERT_EQ(*w, test::kWireHeaderBytes + 2 * n);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t got = payload_at(msg, i);
      if (p.in_t == p.out_t) {
        ASSERT_EQ(got, in[i]) << p.spec << " copies";
        continue;
      }
      const float x = widen(p.in_t, in[i]);
      if (std::isnan(x)) {
        EXPECT_TRUE(is_nan(p.out_t, got));
        continue;
      }
      ASSERT_EQ(got, ref_sr(p.out_t, x, test::ref_stream_word(6, 4, 1, i))) << p.spec << " i " << i;
    }
  }
}

// With error feedback the residual is what the (stochastically rounded) message left out.
TEST(StochasticRounding, ErrorFeedbackKeepsWhatWasNotSent) {
  const size_t n = 1000;
  const std::vector<float> g = test::gradient(n, 4);
  for (const char* spec : {"fp16:rounding=stochastic,ef=1", "bf16:rounding=stochastic,ef=1"}) {
    auto codec = test::make_codec(spec);
    ErrorFeedback ef(n);
    std::vector<double> sent(n, 0.0);
    constexpr int kSteps = 20;
    for (int s = 0; s < kSteps; ++s) {
      std::vector<uint8_t> msg(codec->max_encoded_bytes(n, DType::kFloat32));
      auto w = codec->encode(g.data(), n, EncodeContext{static_cast<uint64_t>(s), 0}, ef, msg.data(), msg.size());
      ASSERT_TRUE(w.is_ok()) << w.status().to_string();
      msg.resize(*w);
      const std::vector<float> y = test::decode(msg, n);
      for (size_t i = 0; i < n; ++i) sent[i] += y[i];
    }
    for (size_t i = 0; i < n; ++i) {
      const double expect = kSteps * static_cast<double>(g[i]) - ef.residual()[i];
      EXPECT_NEAR(sent[i], expect, 1e-5 * std::fabs(kSteps * g[i]) + 1e-12) << spec << " i " << i;
    }
  }
}

}  // namespace
}  // namespace gw
