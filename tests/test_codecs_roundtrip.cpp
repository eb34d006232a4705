// Every codec over the awkward sizes: message sizes, what a round trip may lose, decode
// modes, and the element types each codec takes and writes. Expected sizes and error bounds
// are computed here from docs/wire-format.md, not taken from the library.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compressors/half.hpp"
#include "gradwire/codec.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

using test::f32_bits;

enum class Kind { kNone, kFp16, kBf16, kQsgd, kSign, kTopk, kDgc, kRandomk };

struct Case {
  std::string spec;
  Kind kind;
  uint32_t bits = 0;       // qsgd
  uint32_t bucket = 512;   // qsgd, sign
  bool stochastic = true;  // qsgd; fp16 and bf16 (rounding=stochastic)
  double ratio = 0.0;      // sparse
  uint64_t k = 0;          // sparse
};

std::vector<Case> all_cases() {
  std::vector<Case> cases = {{"none", Kind::kNone}};
  for (bool stochastic : {false, true}) {
    Case h{stochastic ? "fp16:rounding=stochastic,seed=3" : "fp16", Kind::kFp16};
    Case b{stochastic ? "bf16:rounding=stochastic" : "bf16", Kind::kBf16};
    h.stochastic = b.stochastic = stochastic;
    cases.insert(cases.end(), {h, b});
  }
  for (uint32_t bits : {1u, 2u, 4u, 8u}) {
    for (bool stochastic : {true, false}) {
      for (uint32_t bucket : {512u, 37u}) {
        Case c{"qsgd:bits=" + std::to_string(bits) + ",bucket=" + std::to_string(bucket) +
                   (stochastic ? "" : ",rounding=nearest") + ",seed=" + std::to_string(bits * 7 + bucket),
               Kind::kQsgd};
        c.bits = bits;
        c.bucket = bucket;
        c.stochastic = stochastic;
        cases.push_back(c);
      }
    }
  }
  Case s1{"sign", Kind::kSign};
  Case s2{"sign:bucket=33", Kind::kSign};
  s2.bucket = 33;
  Case s3{"sign:bucket=1", Kind::kSign};
  s3.bucket = 1;
  cases.insert(cases.end(), {s1, s2, s3});
  auto sparse = [&](const std::string& spec, Kind kind, double ratio, uint64_t k) {
    Case c{spec, kind};
    c.ratio = ratio;
    c.k = k;
    cases.push_back(c);
  };
  sparse("topk:ratio=0.01", Kind::kTopk, 0.01, 0);
  sparse("topk:k=5", Kind::kTopk, 0.0, 5);
  sparse("topk:ratio=1", Kind::kTopk, 1.0, 0);
  sparse("dgc:ratio=0.01", Kind::kDgc, 0.01, 0);
  sparse("dgc:ratio=0.001,seed=5", Kind::kDgc, 0.001, 0);
  sparse("dgc:k=3,sample=0.5", Kind::kDgc, 0.0, 3);
  sparse("randomk:ratio=0.01,seed=3", Kind::kRandomk, 0.01, 0);
  sparse("randomk:k=5", Kind::kRandomk, 0.0, 5);
  sparse("randomk:ratio=0.5,seed=1", Kind::kRandomk, 0.5, 0);
  return cases;
}

uint64_t k_of(const Case& c, uint64_t n) {
  return c.k > 0 ? test::ref_k_for_fixed(n, c.k) : test::ref_k_for_ratio(n, c.ratio);
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The exact message size for n float32 elements (dgc: the size when it sends k).
uint64_t expected_bytes(const Case& c, uint64_t n) {
  const uint64_t h = test::kWireHeaderBytes;
  switch (c.kind) {
    case Kind::kNone: return h + 4 * n;
    case Kind::kFp16:
    case Kind::kBf16: return h + 2 * n;
    case Kind::kQsgd: return h + 8 * ceil_div(n, c.bucket) + ceil_div(n * c.bits, 8);
    case Kind::kSign: return h + 4 * ceil_div(n, c.bucket) + ceil_div(n, 8);
    case Kind::kTopk:
    case Kind::kDgc: return h + 8 * k_of(c, n);
    case Kind::kRandomk: return h + 4 * k_of(c, n);
  }
  return 0;
}

uint8_t codec_byte(Kind kind) { return static_cast<uint8_t>(kind); }

// |x - y| <= bound, reported with the element and bucket.
void check_qsgd(const Case& c, const std::vector<float>& x, const std::vector<float>& y) {
  const double levels = static_cast<double>((1u << c.bits) - 1u);
  const size_t n = x.size();
  for (size_t lo = 0; lo < n; lo += c.bucket) {
    const size_t hi = std::min<size_t>(lo + c.bucket, n);
    double mn = x[lo], mx = x[lo];
    for (size_t i = lo; i < hi; ++i) {
      mn = std::min<double>(mn, x[i]);
      mx = std::max<double>(mx, x[i]);
    }
    const double unit = (mx - mn) / levels;
    // fp32 slack: a few roundings of values of magnitude <= max(|mn|, |mx|), and the
    // rounding of u = (x - min) / unit (relative 2^-22 of at most `levels` units).
    const double slack = 1e-6 * (std::fabs(mn) + std::fabs(mx)) + 1e-4 * unit;
    const double bound = (c.stochastic ? unit : unit / 2) + slack;
    for (size_t i = lo; i < hi; ++i) {
      const double err = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
      ASSERT_LE(err, bound) << c.spec << " n " << n << " element " << i << " x " << x[i] << " decoded " << y[i]
                            << " bucket [" << mn << ", " << mx << "] unit " << unit;
      ASSERT_GE(y[i], mn - slack) << c.spec << " element " << i;
      ASSERT_LE(y[i], mx + slack) << c.spec << " element " << i;
    }
  }
}

void check_sign(const Case& c, const std::vector<float>& x, const std::vector<float>& y) {
  const size_t n = x.size();
  for (size_t lo = 0; lo < n; lo += c.bucket) {
    const size_t hi = std::min<size_t>(lo + c.bucket, n);
    double sum = 0.0;
    for (size_t i = lo; i < hi; ++i) sum += std::fabs(static_cast<double>(x[i]));
    const double mean = sum / static_cast<double>(hi - lo);
    for (size_t i = lo; i < hi; ++i) {
      ASSERT_NEAR(std::fabs(static_cast<double>(y[i])), mean, 1e-5 * mean) << c.spec << " n " << n << " element " << i;
      if (x[i] < 0.0f) {
        ASSERT_LT(y[i], 0.0f) << c.spec << " element " << i << " x " << x[i];
      } else {
        ASSERT_GT(y[i], 0.0f) << c.spec << " element " << i << " x " << x[i];
      }
    }
  }
}

// The decoded vector is the input at the kept positions and +0 elsewhere (inputs have no
// zeros, so the kept positions are the nonzero ones).
std::vector<uint64_t> check_sparse(const Case& c, const std::vector<float>& x, const std::vector<float>& y) {
  const std::vector<uint64_t> kept = test::nonzero_positions(y);
  for (uint64_t i : kept) {
    if (f32_bits(y[i]) != f32_bits(x[i])) {
      ADD_FAILURE() << c.spec << " n " << x.size() << ": element " << i << " decodes to " << y[i]
                    << " but the input is " << x[i];
      break;
    }
  }
  return kept;
}

TEST(Roundtrip, EveryCodecEverySize) {
  const std::vector<Case> cases = all_cases();
  std::vector<std::unique_ptr<Codec>> codecs;
  for (const Case& c : cases) {
    codecs.push_back(test::make_codec(c.spec));
    ASSERT_NE(codecs.back(), nullptr);
  }
  for (size_t n : test::awkward_sizes()) {
    const std::vector<float> x = test::gradient(n, 1000 + n);
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      Codec* codec = codecs[ci].get();
      SCOPED_TRACE(c.spec + " n=" + std::to_string(n));
      const size_t max_bytes = codec->max_encoded_bytes(n, DType::kFloat32);
      const std::vector<uint8_t> msg = test::encode(*codec, x, 3, 1);
      ASSERT_GE(msg.size(), test::kWireHeaderBytes);
      EXPECT_LE(msg.size(), max_bytes);
      const test::WireFields w = test::read_wire(msg);
      EXPECT_EQ(w.codec, codec_byte(c.kind));
      EXPECT_EQ(w.dtype, 1);
      EXPECT_EQ(w.count, n);
      if (c.kind == Kind::kDgc) {
        EXPECT_LE(msg.size(), expected_bytes(c, n));
        EXPECT_EQ((msg.size() - test::kWireHeaderBytes) % 8, 0u);
        EXPECT_EQ(max_bytes, expected_bytes(c, n));
      } else {
        EXPECT_EQ(msg.size(), expected_bytes(c, n));
        EXPECT_EQ(max_bytes, expected_bytes(c, n));
      }
      auto info = inspect(msg.data(), msg.size());
      ASSERT_TRUE(info.is_ok()) << info.status().to_string();
      EXPECT_EQ(info->count, n);
      EXPECT_EQ(info->total_bytes, msg.size());

      const std::vector<float> y = test::decode(msg, n);
      ASSERT_EQ(y.size(), n);
      switch (c.kind) {
        case Kind::kNone:
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(y[i]), f32_bits(x[i])) << "element " << i;
          break;
        case Kind::kFp16:
          for (size_t i = 0; i < n; ++i) {
            const double a = std::fabs(static_cast<double>(x[i]));
            const double err = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
            // Relative 2^-11 in the normal range; half a subnormal step (2^-25) below it. Stochastic
            // rounding goes to either neighbour: twice that.
            const double bound = (a >= std::ldexp(1.0, -14) ? a * std::ldexp(1.0, -11) : std::ldexp(1.0, -25)) *
                                 (c.stochastic ? 2.0 : 1.0);
            ASSERT_LE(err, bound) << "element " << i << " x " << x[i] << " decoded " << y[i];
            if (c.stochastic) continue;
            ASSERT_EQ(f32_bits(y[i]), f32_bits(test::ref_half_to_float(test::ref_float_to_half(x[i]))))
                << "element " << i;
          }
          break;
        case Kind::kBf16:
          for (size_t i = 0; i < n; ++i) {
            const double a = std::fabs(static_cast<double>(x[i]));
            const double err = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
            ASSERT_LE(err, a * std::ldexp(1.0, c.stochastic ? -7 : -8))
                << "element " << i << " x " << x[i] << " decoded " << y[i];
            if (c.stochastic) continue;
            ASSERT_EQ(f32_bits(y[i]), f32_bits(test::ref_bf16_to_float(test::ref_float_to_bf16(x[i]))))
                << "element " << i;
          }
          break;
        case Kind::kQsgd:
          check_qsgd(c, x, y);
          EXPECT_EQ(w.bits, c.bits);
          EXPECT_EQ(w.bucket, c.bucket);
          EXPECT_EQ(w.flags, c.stochastic ? 0 : 1);
          break;
        case Kind::kSign:
          check_sign(c, x, y);
          EXPECT_EQ(w.bits, 1u);
          EXPECT_EQ(w.bucket, c.bucket);
          break;
        case Kind::kTopk:
        case Kind::kDgc: {
          const std::vector<uint64_t> kept = check_sparse(c, x, y);
          EXPECT_EQ(kept, test::sparse_indices(msg));
          if (c.kind == Kind::kTopk) {
            EXPECT_EQ(kept.size(), k_of(c, n));
          } else {
            EXPECT_LE(kept.size(), k_of(c, n));
            if (n > 0) {
              EXPECT_GE(kept.size(), 1u);
            }
          }
          EXPECT_EQ(w.k, kept.size());
          break;
        }
        case Kind::kRandomk: {
          const std::vector<uint64_t> kept = check_sparse(c, x, y);
          const uint64_t k = k_of(c, n);
          ASSERT_EQ(kept.size(), k);
          EXPECT_EQ(w.k, k);
          // One index in each of the k strata (the first n % k one element longer).
          for (uint64_t j = 0; j < k; ++j) {
            const uint64_t start = j * (n / k) + std::min<uint64_t>(j, n % k);
            const uint64_t len = n / k + (j < n % k ? 1 : 0);
            ASSERT_GE(kept[j], start) << "stratum " << j;
            ASSERT_LT(kept[j], start + len) << "stratum " << j;
          }
          break;
        }
      }
    }
  }
}

// qsgd buckets with nothing to quantize (constant, single element), a bucket minimum
// (always code 0, so exact), and tiny magnitudes.
TEST(Roundtrip, QsgdDegenerateBuckets) {
  for (uint32_t bits : {1u, 4u, 8u}) {
    for (bool stochastic : {true, false}) {
      Case c{"qsgd:bucket=16,bits=" + std::to_string(bits) + (stochastic ? "" : ",rounding=nearest"), Kind::kQsgd};
      c.bits = bits;
      c.bucket = 16;
      c.stochastic = stochastic;
      auto codec = test::make_codec(c.spec);
      ASSERT_NE(codec, nullptr);
      std::vector<float> x(16 * 4 + 1);
      for (size_t i = 0; i < 16; ++i) x[i] = 0.25f;                             // constant
      for (size_t i = 16; i < 32; ++i) x[i] = (i % 2) ? -3.0f : 5.0f;           // two values
      for (size_t i = 32; i < 48; ++i) x[i] = static_cast<float>(i) - 40.0f;    // a ramp with 0
      for (size_t i = 48; i < 64; ++i) x[i] = -1e-30f * static_cast<float>(i);  // tiny
      x[64] = 123.0f;                                                           // single
      for (uint64_t step = 0; step < 8; ++step) {
        const std::vector<float> y = test::decode(test::encode(*codec, x, step), x.size());
        check_qsgd(c, x, y);
        for (size_t i = 0; i < 16; ++i) EXPECT_EQ(y[i], 0.25f) << c.spec << " element " << i;
        for (size_t i = 17; i < 32; i += 2) EXPECT_EQ(y[i], -3.0f) << c.spec << " element " << i;
        EXPECT_EQ(y[32], -8.0f) << c.spec;
        EXPECT_EQ(y[63], x[63]) << c.spec;
        EXPECT_EQ(y[64], 123.0f) << c.spec;
        if (bits == 1) {  // unit = max - min exactly: both values exact
          for (size_t i = 16; i < 32; i += 2) EXPECT_EQ(y[i], 5.0f) << c.spec << " element " << i;
        }
      }
    }
  }
}

// A bucket whose range (max - min) exceeds FLT_MAX: qsgd_scale has a fallback for the unit
// (max / L - min / L), so such buckets are meant to work, and each element must still land
// within one unit of its value.
TEST(Roundtrip, QsgdBucketWiderThanFloatMax) {
  for (bool stochastic : {true, false}) {
    Case c{std::string("qsgd:bits=8,bucket=4") + (stochastic ? "" : ",rounding=nearest"), Kind::kQsgd};
    c.bits = 8;
    c.bucket = 4;
    c.stochastic = stochastic;
    auto codec = test::make_codec(c.spec);
    ASSERT_NE(codec, nullptr);
    const std::vector<float> x = {-3e38f, 3e38f, 1e38f, 0.0f};
    const std::vector<float> y = test::decode(test::encode(*codec, x), x.size());
    check_qsgd(c, x, y);
  }
}

TEST(Roundtrip, DenseWideRange) {
  // fp16: every binade of its normal range; bf16: most of float's.
  std::vector<float> h, b;
  for (int e = -14; e <= 15; ++e) {
    for (int j = 0; j < 64; ++j) {
      const float m = 1.0f + static_cast<float>(j) * 0.0156f + 1e-4f * static_cast<float>(j % 7);
      const float v = std::ldexp(m, e);
      if (v <= 65504.0f) h.push_back((j & 1) ? -v : v);
    }
  }
  for (int e = -126; e <= 126; e += 3) {
    for (int j = 0; j < 16; ++j) {
      const float v = std::ldexp(1.0f + static_cast<float>(j) * 0.0613f + 3e-6f * static_cast<float>(j), e);
      b.push_back((j & 1) ? -v : v);
    }
  }
  auto fp16 = test::make_codec("fp16");
  auto bf16 = test::make_codec("bf16");
  const std::vector<float> yh = test::decode(test::encode(*fp16, h), h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_LE(std::fabs(static_cast<double>(h[i]) - yh[i]), std::fabs(h[i]) * std::ldexp(1.0, -11))
        << "fp16 x " << h[i] << " decoded " << yh[i];
  }
  const std::vector<float> yb = test::decode(test::encode(*bf16, b), b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_LE(std::fabs(static_cast<double>(b[i]) - yb[i]), std::fabs(b[i]) * std::ldexp(1.0, -8))
        << "bf16 x " << b[i] << " decoded " << yb[i];
  }
}

TEST(Roundtrip, SignOfZeroIsPositive) {
  auto codec = test::make_codec("sign:bucket=4");
  const std::vector<float> x = {0.0f, -0.0f, -2.0f, 6.0f};
  const std::vector<float> y = test::decode(test::encode(*codec, x), x.size());
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[2], -2.0f);
  EXPECT_EQ(y[3], 2.0f);
}

// Accumulate and subtract give exactly dst0 + v and dst0 - v (one fp32 operation) where v
// is what overwrite writes.
TEST(Roundtrip, DecodeModes) {
  for (const Case& c : all_cases()) {
    auto codec = test::make_codec(c.spec);
    ASSERT_NE(codec, nullptr);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{513}, size_t{65537}}) {
      SCOPED_TRACE(c.spec + " n=" + std::to_string(n));
      const std::vector<float> x = test::gradient(n, 7 * n + 1);
      const std::vector<uint8_t> msg = test::encode(*codec, x, 1, 0);
      const std::vector<float> over = test::decode(msg, n);
      const std::vector<float> dst0 = test::gradient(n, 31 * n + 5);
      std::vector<float> acc = dst0, sub = dst0;
      ASSERT_TRUE(decode(msg.data(), msg.size(), acc.data(), n, DType::kFloat32, DecodeMode::kAccumulate).is_ok());
      ASSERT_TRUE(decode(msg.data(), msg.size(), sub.data(), n, DType::kFloat32, DecodeMode::kSubtract).is_ok());
      for (size_t i = 0; i < n; ++i) {
        const float want_acc = dst0[i] + over[i];
        const float want_sub = dst0[i] - over[i];
        ASSERT_EQ(f32_bits(acc[i]), f32_bits(want_acc)) << "accumulate, element " << i;
        ASSERT_EQ(f32_bits(sub[i]), f32_bits(want_sub)) << "subtract, element " << i;
      }
    }
  }
}

// ---- element types for none, fp16 and bf16 ----

size_t size_of(DType d) { return d == DType::kFloat32 ? 4 : 2; }

// The value of raw element i of a buffer of dtype d (reference conversions).
float ref_load(DType d, const std::vector<uint8_t>& raw, size_t i) {
  if (d == DType::kFloat32) {
    float f;
    std::memcpy(&f, raw.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, raw.data() + 2 * i, 2);
  return d == DType::kFloat16 ? test::ref_half_to_float(h) : test::ref_bf16_to_float(h);
}

void ref_store(DType d, std::vector<uint8_t>& raw, size_t i, float v) {
  if (d == DType::kFloat32) {
    std::memcpy(raw.data() + 4 * i, &v, 4);
    return;
  }
  const uint16_t h = d == DType::kFloat16 ? test::ref_float_to_half(v) : test::ref_float_to_bf16(v);
  std::memcpy(raw.data() + 2 * i, &h, 2);
}

// A buffer of n elements of dtype d built with the library's conversions from x.
std::vector<uint8_t> make_buffer(DType d, const std::vector<float>& x) {
  std::vector<uint8_t> raw(x.size() * size_of(d));
  for (size_t i = 0; i < x.size(); ++i) {
    if (d == DType::kFloat32) {
      std::memcpy(raw.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t h = d == DType::kFloat16 ? hd::float_to_half(x[i]) : hd::float_to_bf16(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
  }
  return raw;
}

const char* dtype_text(DType d) { return d == DType::kFloat32 ? "f32" : d == DType::kFloat16 ? "f16" : "bf16"; }

TEST(Roundtrip, DenseDtypes) {
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const DecodeMode modes[] = {DecodeMode::kOverwrite, DecodeMode::kAccumulate, DecodeMode::kSubtract};
  for (const char* spec : {"none", "fp16", "bf16"}) {
    auto codec = test::make_codec(spec);
    ASSERT_NE(codec, nullptr);
    const std::string name = spec;
    for (DType din : dtypes) {
      EXPECT_TRUE(codec->accepts(din));
      // The payload's element type.
      const DType pt = name == "fp16" ? DType::kFloat16 : name == "bf16" ? DType::kBFloat16 : din;
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{513}, size_t{4097}}) {
        SCOPED_TRACE(name + " in " + dtype_text(din) + " n=" + std::to_string(n));
        std::vector<float> xf = test::gradient(n, 5 * n + 3);
        for (auto& v : xf) v *= 300.0f;  // mostly inside fp16's normal range
        const std::vector<uint8_t> in = make_buffer(din, xf);
        std::vector<uint8_t> msg(codec->max_encoded_bytes(n, din));
        EXPECT_EQ(msg.size(), test::kWireHeaderBytes + n * size_of(pt));
        auto r = codec->encode(in.data(), n, din, EncodeContext{}, msg.data(), msg.size());
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        ASSERT_EQ(*r, test::kWireHeaderBytes + n * size_of(pt));
        msg.resize(*r);
        const test::WireFields w = test::read_wire(msg);
        EXPECT_EQ(w.dtype, static_cast<uint8_t>(din));
        // What the payload carries for element i, as float.
        std::vector<float> carried(n);
        for (size_t i = 0; i < n; ++i) {
          const float v = ref_load(din, in, i);
          carried[i] = pt == DType::kFloat32   ? v
                       : pt == DType::kFloat16 ? test::ref_half_to_float(test::ref_float_to_half(v))
                                               : test::ref_bf16_to_float(test::ref_float_to_bf16(v));
        }
        for (DType dout : dtypes) {
          for (DecodeMode mode : modes) {
            std::vector<float> d0f = test::gradient(n, 9 * n + 1);
            for (auto& v : d0f) v *= 100.0f;
            const std::vector<uint8_t> dst0 = make_buffer(dout, d0f);
            std::vector<uint8_t> dst = dst0;
            const Status s = decode(msg.data(), msg.size(), dst.data(), n, dout, mode);
            ASSERT_TRUE(s.is_ok()) << s.to_string();
            std::vector<uint8_t> want = dst0;
            for (size_t i = 0; i < n; ++i) {
              const float old = ref_load(dout, dst0, i);
              const float v = mode == DecodeMode::kOverwrite    ? carried[i]
                              : mode == DecodeMode::kAccumulate ? old + carried[i]
                                                                : old - carried[i];
              ref_store(dout, want, i, v);
            }
            ASSERT_EQ(dst, want) << "decoded into " << dtype_text(dout) << " mode " << static_cast<int>(mode);
          }
        }
      }
    }
  }
}

TEST(Roundtrip, LossyCodecsTakeAndWriteFloat32Only) {
  const size_t n = 100;
  const std::vector<float> x = test::gradient(n, 4);
  const std::vector<uint16_t> h(n, 0x3c00);
  for (const Case& c : all_cases()) {
    if (c.kind == Kind::kNone || c.kind == Kind::kFp16 || c.kind == Kind::kBf16) continue;
    SCOPED_TRACE(c.spec);
    auto codec = test::make_codec(c.spec);
    ASSERT_NE(codec, nullptr);
    EXPECT_TRUE(codec->accepts(DType::kFloat32));
    EXPECT_FALSE(codec->accepts(DType::kFloat16));
    EXPECT_FALSE(codec->accepts(DType::kBFloat16));
    for (DType d : {DType::kFloat16, DType::kBFloat16}) {
      std::vector<uint8_t> out(1 << 16);
      auto r = codec->encode(h.data(), n, d, EncodeContext{}, out.data(), out.size());
      ASSERT_FALSE(r.is_ok());
      EXPECT_EQ(r.status().code(), Code::kUnsupported) << r.status().to_string();
    }
    const std::vector<uint8_t> msg = test::encode(*codec, x);
    for (DType d : {DType::kFloat16, DType::kBFloat16}) {
      std::vector<uint16_t> dst(n, 0x1234);
      for (DecodeMode mode : {DecodeMode::kOverwrite, DecodeMode::kAccumulate}) {
        const Status s = decode(msg.data(), msg.size(), dst.data(), n, d, mode);
        EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
      }
      EXPECT_EQ(dst, std::vector<uint16_t>(n, 0x1234)) << "destination written on error";
    }
  }
}

}  // namespace
}  // namespace gw
