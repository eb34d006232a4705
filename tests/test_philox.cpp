// The random stream (Philox4x32-10, the documented key/counter layout, bulk generation),
// stratified sampling, and the fp16 / bf16 conversions the codecs share with the kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "compressors/half.hpp"
#include "compressors/philox.hpp"
#include "compressors/stratified.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

__extension__ typedef unsigned __int128 U128;

struct Kat {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t expect[4];
};

// Random123's kat_vectors for philox4x32_10.
const Kat kKats[] = {
    {{0u, 0u, 0u, 0u}, {0u, 0u}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

TEST(Philox, KnownAnswerVectors) {
  for (const Kat& kat : kKats) {
    const Philox4 ctr{{kat.ctr[0], kat.ctr[1], kat.ctr[2], kat.ctr[3]}};
    const Philox4 got = philox4x32_10(ctr, kat.key[0], kat.key[1]);
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(got.v[w], kat.expect[w]) << "word " << w << " for counter " << std::hex << kat.ctr[0];
    }
    // The test's own transcription of the algorithm must agree too (it is the reference
    // the stream-layout tests below use).
    uint32_t ref[4];
    test::ref_philox4x32_10(kat.ctr, kat.key, ref);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(ref[w], kat.expect[w]) << "reference word " << w;
  }
}

struct StreamCase {
  uint64_t seed;
  uint64_t step;
  uint32_t rank;
};

const StreamCase kStreams[] = {
    {0, 0, 0},
    {1, 0, 0},
    {0, 1, 0},
    {0, 0, 1},
    {0x0123456789abcdefull, 17, 3},
    {42, (uint64_t{5} << 32) | 9u, 7},  // step above 2^32 folds into the key
    {0xffffffff00000000ull, 1, 0},      // seed high word only
    {7, 3, kSharedStreamRank},          // the randomk shared stream
};

TEST(Philox, StreamFollowsDocumentedLayout) {
  const uint64_t indices[] = {0,           1, 2, 3, 4, 5, 1023, 4096, (uint64_t{1} << 34) + 6, (uint64_t{1} << 40) + 3,
                              ~uint64_t{0}};
  for (const StreamCase& s : kStreams) {
    const RandomStream rs{s.seed, s.step, s.rank};
    for (uint64_t i : indices) {
      EXPECT_EQ(rs.word(i), test::ref_stream_word(s.seed, s.step, s.rank, i))
          << "seed " << s.seed << " step " << s.step << " rank " << s.rank << " index " << i;
      EXPECT_EQ(rs.block(i >> 2).v[i & 3], rs.word(i));
    }
  }
}

TEST(Philox, StreamsDifferBySeedStepAndRank) {
  const RandomStream base{5, 9, 2};
  const RandomStream other_seed{6, 9, 2}, other_step{5, 10, 2}, other_rank{5, 9, 3};
  const RandomStream other_step_hi{5, 9 + (uint64_t{1} << 32), 2};
  int same_seed = 0, same_step = 0, same_rank = 0, same_hi = 0;
  for (uint64_t i = 0; i < 256; ++i) {
    same_seed += base.word(i) == other_seed.word(i);
    same_step += base.word(i) == other_step.word(i);
    same_rank += base.word(i) == other_rank.word(i);
    same_hi += base.word(i) == other_step_hi.word(i);
  }
  EXPECT_LE(same_seed, 2);
  EXPECT_LE(same_step, 2);
  EXPECT_LE(same_rank, 2);
  EXPECT_LE(same_hi, 2);
}

TEST(Philox, FillMatchesWord) {
  // first is a multiple of 4; counts around every vector width (4, 8, 16 blocks of 4).
  const uint64_t firsts[] = {
      0, 4, 60, 64, 4 * 1001, (uint64_t{1} << 34) - 4 * 37, (uint64_t{1} << 34) - 8, 4 * ((uint64_t{1} << 40) + 3)};
  const uint64_t counts[] = {0, 1, 3, 4, 5, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4099};
  for (const StreamCase& s : kStreams) {
    const RandomStream rs{s.seed, s.step, s.rank};
    for (uint64_t first : firsts) {
      for (uint64_t count : counts) {
        // Exactly the words philox_fill promises to write, so ASan sees any overrun.
        std::vector<uint32_t> out(4 * ((count + 3) / 4), 0xdeadbeefu);
        philox_fill(rs, first, out.data(), count);
        for (uint64_t i = 0; i < out.size(); ++i) {
          ASSERT_EQ(out[i], rs.word(first + i)) << "seed " << s.seed << " step " << s.step << " rank " << s.rank
                                                << " first " << first << " count " << count << " word " << i;
        }
      }
    }
  }
}

TEST(Philox, Uniform01IsExactAndInRange) {
  EXPECT_EQ(uniform01(0u), 0.0f);
  EXPECT_EQ(uniform01(0xffu), 0.0f);
  EXPECT_EQ(uniform01(0x100u), std::ldexp(1.0f, -24));
  EXPECT_EQ(uniform01(0x80000000u), 0.5f);
  EXPECT_EQ(uniform01(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_LT(uniform01(0xffffffffu), 1.0f);
  const RandomStream rs{99, 1, 0};
  double sum = 0.0;
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const uint32_t w = rs.word(static_cast<uint64_t>(i));
    const float u = uniform01(w);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(static_cast<double>(u), std::ldexp(static_cast<double>(w >> 8), -24)) << w;
    sum += u;
  }
  // Mean of n uniforms: sd = sqrt(1/12/n) ~ 0.0011.
  EXPECT_NEAR(sum / n, 0.5, 0.006);
}

// ---- stratified sampling ----

uint64_t ref_stratum_start(uint64_t j, uint64_t n, uint64_t m) {
  const uint64_t q = n / m, r = n % m;
  return j * q + std::min(j, r);
}

// The index docs/wire-format.md defines for stratum j.
uint64_t ref_stratified(const StreamCase& s, uint64_t j, uint64_t n, uint64_t m) {
  const uint64_t start = ref_stratum_start(j, n, m);
  const uint64_t len = ref_stratum_start(j + 1, n, m) - start;
  const uint64_t w = (static_cast<uint64_t>(test::ref_stream_word(s.seed, s.step, s.rank, 2 * j + 1)) << 32) |
                     test::ref_stream_word(s.seed, s.step, s.rank, 2 * j);
  return start + static_cast<uint64_t>((static_cast<U128>(w) * len) >> 64);
}

void check_strata(const StreamCase& s, uint64_t n, uint64_t m, bool compare_reference) {
  const RandomStream rs{s.seed, s.step, s.rank};
  uint64_t prev = 0;
  for (uint64_t j = 0; j < m; ++j) {
    // Strata: the first n % m have floor(n/m) + 1 elements, the rest floor(n/m).
    const uint64_t len = n / m + (j < n % m ? 1 : 0);
    const uint64_t start = ref_stratum_start(j, n, m);
    ASSERT_EQ(stratum_start(j, n, m), start) << "n " << n << " m " << m << " j " << j;
    const uint64_t idx = stratified_index(rs, j, n, m);
    ASSERT_GE(idx, start) << "n " << n << " m " << m << " j " << j;
    ASSERT_LT(idx, start + len) << "n " << n << " m " << m << " j " << j;
    if (j > 0) {
      ASSERT_GT(idx, prev) << "n " << n << " m " << m << " j " << j;
    }
    if (compare_reference) {
      ASSERT_EQ(idx, ref_stratified(s, j, n, m)) << "n " << n << " m " << m << " j " << j;
    }
    prev = idx;
  }
  EXPECT_EQ(ref_stratum_start(m, n, m), n);
  EXPECT_EQ(stratum_start(m, n, m), n);
}

TEST(Stratified, IndicesIncreaseInsideTheirStrata) {
  const StreamCase s{0x5eed, 12, kSharedStreamRank};
  for (size_t n : test::awkward_sizes()) {
    if (n == 0) continue;
    const uint64_t ms[] = {1, 2, 3, 7, 1000, n / 2, n - 1, n};
    for (uint64_t m : ms) {
      if (m < 1 || m > n) continue;
      check_strata(s, n, m, /*compare_reference=*/m <= 4096 || m == n);
    }
  }
}

TEST(Stratified, EveryStratumOfSizeOneIsItsIndex) {
  const RandomStream rs{3, 4, 5};
  for (uint64_t n : {1ull, 2ull, 7ull, 513ull, 4097ull}) {
    for (uint64_t j = 0; j < n; ++j) ASSERT_EQ(stratified_index(rs, j, n, n), j);
  }
}

TEST(Stratified, SixtyFourBitStrata) {
  const uint64_t n = (uint64_t{1} << 40) + 12345;
  const StreamCase cases[] = {{1, 2, 3}, {0xabcdef, (uint64_t{1} << 33) + 5, kSharedStreamRank}};
  for (const StreamCase& s : cases) {
    for (uint64_t m : {1ull, 2ull, 3ull, 1000ull, 4099ull}) check_strata(s, n, m, true);
  }
  // The offset inside a 2^40-long stratum must use the high bits too: over many steps its
  // fraction of the stratum spreads over [0, 1) with mean 1/2.
  const uint64_t m = 3;
  double sum = 0.0, lo = 1.0, hi = 0.0;
  int samples = 0;
  for (uint64_t step = 0; step < 2000; ++step) {
    const RandomStream rs{77, step, 0};
    for (uint64_t j = 0; j < m; ++j) {
      const uint64_t start = ref_stratum_start(j, n, m);
      const uint64_t len = ref_stratum_start(j + 1, n, m) - start;
      const double frac = static_cast<double>(stratified_index(rs, j, n, m) - start) / static_cast<double>(len);
      sum += frac;
      lo = std::min(lo, frac);
      hi = std::max(hi, frac);
      ++samples;
    }
  }
  // sd of the mean of 6000 uniforms: 0.0037.
  EXPECT_NEAR(sum / samples, 0.5, 0.02);
  EXPECT_LT(lo, 0.01);
  EXPECT_GT(hi, 0.99);
}

TEST(Stratified, SingleStratumIsUniform) {
  const uint64_t n = 10;
  const int trials = 20000;
  std::vector<int> hits(n, 0);
  for (int t = 0; t < trials; ++t) {
    const RandomStream rs{11, static_cast<uint64_t>(t), kSharedStreamRank};
    const uint64_t idx = stratified_index(rs, 0, n, 1);
    ASSERT_LT(idx, n);
    ++hits[idx];
  }
  // Binomial(20000, 0.1): mean 2000, sd 42.4; allow 6 sd.
  for (uint64_t i = 0; i < n; ++i) EXPECT_NEAR(hits[i], 2000, 255) << "index " << i;
}

// ---- fp16 ----

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

TEST(Half, EveryPatternDecodesAndRoundTrips) {
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto h = static_cast<uint16_t>(p);
    const float f = hd::half_to_float(h);
    if (half_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << p;
      ASSERT_TRUE(half_is_nan(hd::float_to_half(f))) << std::hex << p;
      continue;
    }
    const float ref = test::ref_half_to_float(h);
    ASSERT_EQ(test::f32_bits(f), test::f32_bits(ref)) << std::hex << "pattern " << p;
    ASSERT_EQ(hd::float_to_half(f), h) << std::hex << "pattern " << p;
  }
}

// Between every pair of adjacent finite halves: the midpoint rounds to the even one, and the
// floats just either side of it round to the nearer one.
TEST(Half, MidpointsRoundToEven) {
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t p = 0; p < 0x7bffu; ++p) {
      const auto a = static_cast<uint16_t>(sign | p);
      const auto b = static_cast<uint16_t>(sign | (p + 1));
      const double va = test::ref_half_to_float(a), vb = test::ref_half_to_float(b);
      const auto mid = static_cast<float>((va + vb) / 2);  // 12 significant bits: exact
      ASSERT_EQ(static_cast<double>(mid), (va + vb) / 2);
      const uint16_t even = (p & 1u) ? b : a;
      ASSERT_EQ(hd::float_to_half(mid), even) << std::hex << "between " << a << " and " << b;
      const float toward_a = std::nextafter(mid, static_cast<float>(va));
      const float toward_b = std::nextafter(mid, static_cast<float>(vb));
      ASSERT_EQ(hd::float_to_half(toward_a), a) << std::hex << "just past the midpoint toward " << a;
      ASSERT_EQ(hd::float_to_half(toward_b), b) << std::hex << "just past the midpoint toward " << b;
    }
  }
}

TEST(Half, ChosenValues) {
  struct Case {
    float f;
    uint16_t h;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},      // tie, even is 1.0
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},  // tie, even is 1 + 2^-9
      {2049.0f, 0x6800},                           // tie between 2048 and 2050
      {2051.0f, 0x6802},                           // tie between 2050 and 2052
      {65504.0f, 0x7bff},                          // largest finite
      {65519.996f, 0x7bff},                        // just below the overflow midpoint
      {65520.0f, 0x7c00},                          // midpoint to 65536: ties to even = inf
      {-65520.0f, 0xfc00},
      {1e10f, 0x7c00},
      {std::numeric_limits<float>::max(), 0x7c00},
      {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00},
      {std::ldexp(1.0f, -14), 0x0400},  // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},  // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},  // half of it: tie to even zero
      {std::nextafter(std::ldexp(1.0f, -25), 1.0f), 0x0001},
      {3 * std::ldexp(1.0f, -25), 0x0002},   // tie between 1 and 2 subnormal units
      {-5 * std::ldexp(1.0f, -25), 0x8002},  // tie between 2 and 3: even is 2
      {std::ldexp(1.0f, -30), 0x0000},
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), 0x0400},  // rounds up into the normals
  };
  for (const Case& c : cases) {
    EXPECT_EQ(hd::float_to_half(c.f), c.h) << std::hexfloat << c.f;
    EXPECT_EQ(test::ref_float_to_half(c.f), c.h) << "reference, " << std::hexfloat << c.f;
  }
}

TEST(Half, NanStaysNan) {
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f802000u, 0x7fbfffffu};
  for (uint32_t bits : nans) {
    const float f = test::f32_from_bits(bits);
    ASSERT_TRUE(std::isnan(f));
    EXPECT_TRUE(half_is_nan(hd::float_to_half(f))) << std::hex << bits << " -> " << hd::float_to_half(f);
    EXPECT_TRUE(bf16_is_nan(hd::float_to_bf16(f))) << std::hex << bits << " -> " << hd::float_to_bf16(f);
  }
  EXPECT_TRUE(std::isnan(hd::half_to_float(0x7c01)));
  EXPECT_TRUE(std::isnan(hd::half_to_float(0xfe00)));
  EXPECT_TRUE(std::isnan(hd::bf16_to_float(0x7f81)));
  EXPECT_TRUE(std::isnan(hd::bf16_to_float(0xffc0)));
}

TEST(Half, RandomFloatsMatchReference) {
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 2000000; ++i) {
    // Half the draws are arbitrary bit patterns, half sit in or near the fp16 range.
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i & 1) bits = (bits & 0x807fffffu) | ((96u + static_cast<uint32_t>(rng() % 50)) << 23);
    const float f = test::f32_from_bits(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(hd::float_to_half(f), test::ref_float_to_half(f)) << std::hexfloat << f;
  }
}

// ---- bf16 ----

TEST(BFloat16, EveryPatternDecodesAndRoundTrips) {
  for (uint32_t p = 0; p <= 0xffffu; ++p) {
    const auto b = static_cast<uint16_t>(p);
    const float f = hd::bf16_to_float(b);
    if (bf16_is_nan(b)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << p;
      ASSERT_TRUE(bf16_is_nan(hd::float_to_bf16(f))) << std::hex << p;
      continue;
    }
    ASSERT_EQ(test::f32_bits(f), test::f32_bits(test::ref_bf16_to_float(b))) << std::hex << p;
    ASSERT_EQ(hd::float_to_bf16(f), b) << std::hex << p;
  }
}

TEST(BFloat16, ChosenValues) {
  struct Case {
    float f;
    uint16_t b;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3f80},
      {1.0f + std::ldexp(1.0f, -8), 0x3f80},      // tie, even is 1.0
      {1.0f + 3 * std::ldexp(1.0f, -8), 0x3f82},  // tie, even is 1 + 2^-6
      {std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f), 0x3f81},
      {-257.0f, 0xc380},                            // tie between 256 and 258
      {std::numeric_limits<float>::max(), 0x7f80},  // rounds past the largest bf16
      {test::f32_from_bits(0x7f7f7fffu), 0x7f7f},   // just below that midpoint
      {test::f32_from_bits(0x7f7f8000u), 0x7f80},   // the midpoint, odd below: up to inf
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {-std::numeric_limits<float>::infinity(), 0xff80},
      {std::numeric_limits<float>::denorm_min(), 0x0000},  // 2^-149: far below half a unit
      {test::f32_from_bits(0x00008000u), 0x0000},          // tie, even is zero
      {test::f32_from_bits(0x00018000u), 0x0002},          // tie, even is 2
      {test::f32_from_bits(0x00008001u), 0x0001},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(hd::float_to_bf16(c.f), c.b) << std::hexfloat << c.f;
    EXPECT_EQ(test::ref_float_to_bf16(c.f), c.b) << "reference, " << std::hexfloat << c.f;
  }
}

TEST(BFloat16, RandomFloatsMatchReference) {
  std::mt19937_64 rng(77);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 4 == 1) bits &= 0x8001ffffu;                                          // subnormals and near-zero
    if (i % 4 == 2) bits |= 0x7f000000u;                                          // near the top of the range
    if (i % 4 == 3) bits = (bits & 0xffff8000u) | ((i & 8) ? 0x8000u : 0x7fffu);  // near ties
    const float f = test::f32_from_bits(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(hd::float_to_bf16(f), test::ref_float_to_bf16(f)) << std::hexfloat << f;
  }
}

}  // namespace
}  // namespace gw
