// What each codec promises beyond a round trip: topk's exact selection, dgc's top set,
// qsgd's unbiased (or deterministic) rounding, the compression ratio, and the random stream's
// agreement across ranks. References are computed here, independently of the library.
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

using test::f32_bits;

// Positions of the k largest |x|, ties to the lower index, returned increasing.
std::vector<uint64_t> reference_topk(const std::vector<float>& x, uint64_t k) {
  std::vector<uint64_t> order(x.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  // Magnitude as docs/wire-format.md orders it: the bits of |x| as an unsigned integer, which
  // for non-NaN values is the order of fabs; NaNs rank above infinity.
  auto key = [&](uint64_t i) -> double {
    if (std::isnan(x[i])) return std::numeric_limits<double>::max();
    return std::fabs(static_cast<double>(x[i]));
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](uint64_t a, uint64_t b) {
                      const double ka = key(a), kb = key(b);
                      return ka != kb ? ka > kb : a < b;
                    });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<float> sparse_values(const std::vector<uint8_t>& msg) {
  const test::WireFields w = test::read_wire(msg);
  const size_t width = w.count <= (uint64_t{1} << 32) ? 4 : 8;
  std::vector<float> v(w.k);
  const size_t off = test::kWireHeaderBytes + w.k * width;
  if (msg.size() < off + 4 * w.k) {
    ADD_FAILURE() << "message too short";
    return {};
  }
  if (w.k > 0) std::memcpy(v.data(), msg.data() + off, 4 * w.k);
  return v;
}

void check_topk(const std::string& spec, const std::vector<float>& x, uint64_t k, const std::string& what) {
  SCOPED_TRACE(spec + " on " + what + " n=" + std::to_string(x.size()) + " k=" + std::to_string(k));
  auto codec = test::make_codec(spec);
  ASSERT_NE(codec, nullptr);
  const std::vector<uint8_t> msg = test::encode(*codec, x, 0, 0);
  const std::vector<uint64_t> got = test::sparse_indices(msg);
  const std::vector<uint64_t> want = reference_topk(x, k);
  ASSERT_EQ(got.size(), k);
  EXPECT_EQ(got, want);
  const std::vector<float> values = sparse_values(msg);
  ASSERT_EQ(values.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LT(got[i], x.size());
    EXPECT_EQ(f32_bits(values[i]), f32_bits(x[got[i]])) << "entry " << i;
  }
}

TEST(Topk, KeepsExactlyTheLargestMagnitudes) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{33}, size_t{513}, size_t{4097}, size_t{65537}}) {
    const std::vector<float> x = test::gradient(n, 300 + n);
    check_topk("topk:k=1", x, 1, "gradient");
    check_topk("topk:k=" + std::to_string(n), x, n, "gradient");
    check_topk("topk:k=17", x, std::min<uint64_t>(17, n), "gradient");
    check_topk("topk:ratio=0.01", x, test::ref_k_for_ratio(n, 0.01), "gradient");
    check_topk("topk:ratio=0.3", x, test::ref_k_for_ratio(n, 0.3), "gradient");
    check_topk("topk:ratio=1", x, n, "gradient");
    if (n > 1) check_topk("topk:k=" + std::to_string(n - 1), x, n - 1, "gradient");
  }
}

TEST(Topk, TiesGoToTheLowerIndex) {
  std::mt19937_64 rng(17);
  const size_t n = 5000;
  // Few distinct magnitudes, both signs, and zeros of both signs: ties everywhere.
  std::vector<float> few(n);
  const float levels[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 3.0f, -3.0f};
  for (auto& v : few) v = levels[rng() % 8];
  // Magnitudes that share their top bits and differ in the low ones (the select's later
  // rounds), again with ties.
  std::vector<float> close(n);
  for (auto& v : close) {
    const float m = test::f32_from_bits(0x3f800000u + static_cast<uint32_t>(rng() % 40) * 97u);
    v = (rng() & 1) ? -m : m;
  }
  // All equal.
  std::vector<float> equal(n, -0.5f);
  for (size_t i = 0; i < n; i += 3) equal[i] = 0.5f;
  // Specials: infinities, subnormals, the largest float.
  std::vector<float> special = test::gradient(n, 5);
  for (size_t i = 0; i < n; i += 97) special[i] = std::numeric_limits<float>::denorm_min();
  special[10] = std::numeric_limits<float>::infinity();
  special[4000] = -std::numeric_limits<float>::infinity();
  special[20] = -std::numeric_limits<float>::max();
  special[21] = std::numeric_limits<float>::max();
  for (const auto& input : {std::make_pair("few", few), std::make_pair("close", close), std::make_pair("equal", equal),
                            std::make_pair("special", special)}) {
    for (uint64_t k :
         {uint64_t{1}, uint64_t{2}, uint64_t{100}, uint64_t{1700}, uint64_t{2500}, uint64_t{4999}, uint64_t{5000}}) {
      check_topk("topk:k=" + std::to_string(k), input.second, k, input.first);
    }
    check_topk("topk:ratio=0.37", input.second, test::ref_k_for_ratio(n, 0.37), input.first);
  }
}

TEST(Topk, NanRanksAboveInfinity) {
  std::vector<float> x = test::gradient(100, 1);
  x[3] = std::numeric_limits<float>::infinity();
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[9] = -std::numeric_limits<float>::infinity();
  auto codec = test::make_codec("topk:k=1");
  EXPECT_EQ(test::sparse_indices(test::encode(*codec, x)), std::vector<uint64_t>{5});
  auto codec3 = test::make_codec("topk:k=3");
  EXPECT_EQ(test::sparse_indices(test::encode(*codec3, x)), (std::vector<uint64_t>{3, 5, 9}));
}

// ---- dgc ----

TEST(Dgc, SendsATopSetOfAboutK) {
  const size_t n = 1000000;
  const std::vector<float> x = test::gradient(n, 2718);
  for (double ratio : {0.001, 0.01}) {
    const uint64_t k = test::ref_k_for_ratio(n, ratio);
    for (uint64_t step = 0; step < 3; ++step) {
      SCOPED_TRACE("ratio " + std::to_string(ratio) + " step " + std::to_string(step));
      auto codec = test::make_codec("dgc:ratio=" + std::to_string(ratio) + ",seed=" + std::to_string(step + 1));
      ASSERT_NE(codec, nullptr);
      const std::vector<uint8_t> msg = test::encode(*codec, x, step, static_cast<uint32_t>(step));
      const std::vector<uint64_t> idx = test::sparse_indices(msg);
      EXPECT_LE(idx.size(), k);
      EXPECT_GE(static_cast<double>(idx.size()), 0.5 * static_cast<double>(k));
      std::vector<char> sent(n, 0);
      double min_sent = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < idx.size(); ++i) {
        ASSERT_LT(idx[i], n);
        if (i > 0) {
          ASSERT_GT(idx[i], idx[i - 1]);
        }
        sent[idx[i]] = 1;
        min_sent = std::min(min_sent, std::fabs(static_cast<double>(x[idx[i]])));
      }
      double max_unsent = 0.0;
      for (size_t i = 0; i < n; ++i) {
        if (!sent[i]) max_unsent = std::max(max_unsent, std::fabs(static_cast<double>(x[i])));
      }
      EXPECT_GE(min_sent, max_unsent) << "an element was left out while a smaller one was sent";
      const std::vector<float> values = sparse_values(msg);
      for (size_t i = 0; i < idx.size(); ++i) {
        ASSERT_EQ(f32_bits(values[i]), f32_bits(x[idx[i]]));
      }
    }
  }
}

// Inputs that mislead the sample (many equal magnitudes around the threshold, a spike the
// sample misses): dgc may send fewer, or fall back to an exact top-k, but never more than k
// and always a top set.
TEST(Dgc, DegenerateInputsStillGiveATopSet) {
  const size_t n = 200000;
  std::mt19937_64 rng(8);
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  std::vector<float> equal(n);
  for (size_t i = 0; i < n; ++i) equal[i] = (i % 3) ? 0.5f : -0.5f;
  inputs.emplace_back("all equal magnitudes", equal);
  std::vector<float> two_levels(n);
  for (auto& v : two_levels) v = (rng() % 100 == 0) ? 2.0f : ((rng() & 1) ? 1.0f : -1.0f);
  inputs.emplace_back("1% at 2, the rest at 1", two_levels);
  std::vector<float> spike = test::gradient(n, 12);
  for (size_t i = 0; i < 50; ++i) spike[(i * 7919) % n] = 1e3f;
  inputs.emplace_back("a few spikes", spike);
  std::vector<float> tiny(n, 1e-20f);
  for (size_t i = 0; i < n; i += 1000) tiny[i] = 3.0f;
  inputs.emplace_back("sparse input", tiny);
  for (const auto& input : inputs) {
    const std::vector<float>& x = input.second;
    for (const char* spec : {"dgc:k=100", "dgc:ratio=0.01", "dgc:ratio=0.2,sample=0.001", "dgc:k=1"}) {
      SCOPED_TRACE(std::string(spec) + " on " + input.first);
      auto codec = test::make_codec(spec);
      ASSERT_NE(codec, nullptr);
      const uint64_t k = codec->spec().k > 0 ? test::ref_k_for_fixed(n, codec->spec().k)
                                             : test::ref_k_for_ratio(n, codec->spec().ratio);
      for (uint64_t step = 0; step < 2; ++step) {
        const std::vector<uint8_t> msg = test::encode(*codec, x, step, 1);
        const std::vector<uint64_t> idx = test::sparse_indices(msg);
        EXPECT_LE(idx.size(), k);
        EXPECT_GE(idx.size(), 1u);
        std::vector<char> sent(n, 0);
        double min_sent = std::numeric_limits<double>::infinity();
        for (size_t i = 0; i < idx.size(); ++i) {
          ASSERT_LT(idx[i], n);
          if (i > 0) {
            ASSERT_GT(idx[i], idx[i - 1]);
          }
          sent[idx[i]] = 1;
          min_sent = std::min(min_sent, std::fabs(static_cast<double>(x[idx[i]])));
        }
        double max_unsent = 0.0;
        for (size_t i = 0; i < n; ++i) {
          if (!sent[i]) max_unsent = std::max(max_unsent, std::fabs(static_cast<double>(x[i])));
        }
        EXPECT_GE(min_sent, max_unsent);
        const std::vector<float> values = sparse_values(msg);
        for (size_t i = 0; i < idx.size(); ++i) ASSERT_EQ(f32_bits(values[i]), f32_bits(x[idx[i]]));
      }
    }
  }
}

// ---- qsgd ----

struct BucketStats {
  double mn, mx, unit;
};

std::vector<BucketStats> bucket_stats(const std::vector<float>& x, size_t bucket, uint32_t bits) {
  std::vector<BucketStats> out;
  for (size_t lo = 0; lo < x.size(); lo += bucket) {
    const size_t hi = std::min(lo + bucket, x.size());
    double mn = x[lo], mx = x[lo];
    for (size_t i = lo; i < hi; ++i) {
      mn = std::min<double>(mn, x[i]);
      mx = std::max<double>(mx, x[i]);
    }
    out.push_back({mn, mx, (mx - mn) / static_cast<double>((1u << bits) - 1u)});
  }
  return out;
}

// E[decode(encode(x))] = x: the mean over many steps converges at rate unit / (2 sqrt(T)),
// since one trial's error lies in an interval of one unit (variance <= unit^2 / 4).
TEST(Qsgd, StochasticRoundingIsUnbiased) {
  const size_t n = 1000, bucket = 256;
  const int trials = 2000;
  const std::vector<float> x = test::gradient(n, 161803);
  for (uint32_t bits : {1u, 2u, 4u, 8u}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    auto codec = test::make_codec("qsgd:bits=" + std::to_string(bits) + ",bucket=256,seed=12");
    ASSERT_NE(codec, nullptr);
    const std::vector<BucketStats> stats = bucket_stats(x, bucket, bits);
    std::vector<double> sum(n, 0.0);
    std::vector<int> differs_from_first(n, 0);
    std::vector<float> first;
    for (int t = 0; t < trials; ++t) {
      const std::vector<float> y = test::decode(test::encode(*codec, x, static_cast<uint64_t>(t), 3), n);
      if (t == 0) first = y;
      for (size_t i = 0; i < n; ++i) {
        sum[i] += y[i];
        differs_from_first[i] += y[i] != first[i];
      }
    }
    const double root = std::sqrt(static_cast<double>(trials));
    double signed_error = 0.0, max_unit = 0.0;
    int random_elements = 0;
    for (size_t i = 0; i < n; ++i) {
      const BucketStats& s = stats[i / bucket];
      max_unit = std::max(max_unit, s.unit);
      const double mean = sum[i] / trials;
      // 5 standard deviations, plus fp32 slack of the decoded values.
      const double bound = 5.0 * s.unit / (2.0 * root) + 1e-5 * s.unit + 1e-6 * (std::fabs(s.mn) + std::fabs(s.mx));
      EXPECT_NEAR(mean, x[i], bound) << "element " << i << " unit " << s.unit;
      signed_error += mean - static_cast<double>(x[i]);
      random_elements += differs_from_first[i] > 0;
    }
    // The average signed error over all n elements: its sd is at most unit / (2 sqrt(T n)).
    EXPECT_LE(std::fabs(signed_error / static_cast<double>(n)),
              5.0 * max_unit / (2.0 * std::sqrt(static_cast<double>(trials) * static_cast<double>(n))));
    // Rounding really is random: all but the bucket extremes (codes 0 and L) vary.
    EXPECT_GE(random_elements, static_cast<int>(n) - 8 * static_cast<int>(stats.size()));
  }
}

TEST(Qsgd, NearestRoundingIsDeterministic) {
  const std::vector<float> x = test::gradient(4097, 8);
  for (uint32_t bits : {1u, 2u, 4u, 8u}) {
    auto codec = test::make_codec("qsgd:rounding=nearest,bits=" + std::to_string(bits));
    ASSERT_NE(codec, nullptr);
    const std::vector<uint8_t> ref = test::encode(*codec, x, 0, 0);
    for (uint64_t step : {uint64_t{1}, uint64_t{99}, uint64_t{1} << 33}) {
      for (uint32_t rank : {0u, 5u}) {
        EXPECT_EQ(test::encode(*codec, x, step, rank), ref) << "bits " << bits << " step " << step << " rank " << rank;
      }
    }
    auto other_seed = test::make_codec("qsgd:rounding=nearest,seed=9,bits=" + std::to_string(bits));
    EXPECT_EQ(test::encode(*other_seed, x, 4, 1), ref);
  }
}

TEST(Qsgd, StochasticEncodeIsReproducible) {
  const std::vector<float> x = test::gradient(4097, 9);
  for (uint32_t bits : {1u, 2u, 4u, 8u}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    const std::string spec = "qsgd:seed=77,bits=" + std::to_string(bits);
    auto a = test::make_codec(spec);
    auto b = test::make_codec(spec);
    const std::vector<uint8_t> ref = test::encode(*a, x, 5, 2);
    EXPECT_EQ(test::encode(*a, x, 5, 2), ref) << "same codec, again";
    EXPECT_EQ(test::encode(*b, x, 5, 2), ref) << "another codec with the same spec";
    EXPECT_NE(test::encode(*a, x, 5, 3), ref) << "another rank";
    EXPECT_NE(test::encode(*a, x, 6, 2), ref) << "another step";
    EXPECT_NE(test::encode(*a, x, 5 + (uint64_t{1} << 32), 2), ref) << "another step, high word";
    auto c = test::make_codec("qsgd:seed=78,bits=" + std::to_string(bits));
    EXPECT_NE(test::encode(*c, x, 5, 2), ref) << "another seed";
  }
}

// ---- compression ratio ----

TEST(Codecs, CompressionRatio) {
  const size_t n = size_t{1} << 20;
  const std::vector<float> x = test::gradient(n, 42);
  const double dense = 4.0 * static_cast<double>(n);
  const double header = static_cast<double>(test::kWireHeaderBytes) / dense;
  struct Row {
    std::string spec;
    double ratio;  // payload bytes per dense byte, from the wire format
    double slack;  // rounding of k to a whole element
  };
  const double element = 8.0 / dense;
  const std::vector<Row> rows = {
      {"none", 1.0, 0.0},
      {"fp16", 0.5, 0.0},
      {"bf16", 0.5, 0.0},
      {"qsgd:bits=8", 8.0 / 32 + 8.0 / (512 * 4), 0.0},
      {"qsgd:bits=4", 4.0 / 32 + 8.0 / (512 * 4), 0.0},
      {"qsgd:bits=2", 2.0 / 32 + 8.0 / (512 * 4), 0.0},
      {"qsgd:bits=1", 1.0 / 32 + 8.0 / (512 * 4), 0.0},
      {"qsgd:bits=4,bucket=128", 4.0 / 32 + 8.0 / (128 * 4), 0.0},
      {"sign", 1.0 / 32 + 4.0 / (512 * 4), 0.0},
      {"topk:ratio=0.01", 0.02, element},
      {"topk:ratio=0.001", 0.002, element},
      {"dgc:ratio=0.01", 0.02, element},
      {"randomk:ratio=0.01", 0.01, element / 2},
  };
  for (const Row& r : rows) {
    auto codec = test::make_codec(r.spec);
    ASSERT_NE(codec, nullptr);
    const std::vector<uint8_t> msg = test::encode(*codec, x, 1, 0);
    const double got = static_cast<double>(msg.size()) / dense;
    EXPECT_LE(got, r.ratio + header + r.slack + 1e-12) << r.spec;
    EXPECT_LE(static_cast<double>(codec->max_encoded_bytes(n, DType::kFloat32)) / dense,
              r.ratio + header + r.slack + 1e-12)
        << r.spec;
    if (r.spec.rfind("dgc", 0) != 0) {
      EXPECT_GE(got, r.ratio - r.slack) << r.spec;  // and not by sending less than promised
    }
  }
}

// ---- randomk's shared indices ----

TEST(Randomk, RanksAgreeOnIndices) {
  const size_t n = 100003;
  auto codec = test::make_codec("randomk:ratio=0.01,seed=1234");
  const std::vector<float> g0 = test::gradient(n, 1), g1 = test::gradient(n, 2);
  auto positions = [&](Codec& c, const std::vector<float>& g, uint64_t step, uint32_t rank) {
    return test::nonzero_positions(test::decode(test::encode(c, g, step, rank), n));
  };
  const std::vector<uint64_t> r0 = positions(*codec, g0, 10, 0);
  EXPECT_EQ(r0.size(), test::ref_k_for_ratio(n, 0.01));
  EXPECT_EQ(positions(*codec, g1, 10, 1), r0) << "another rank, another gradient";
  EXPECT_EQ(positions(*codec, g0, 10, 7), r0);
  // Identical bytes for the same input on any rank (the message carries no rank).
  EXPECT_EQ(test::encode(*codec, g0, 10, 0), test::encode(*codec, g0, 10, 3));
  const std::vector<uint64_t> next = positions(*codec, g0, 11, 0);
  EXPECT_NE(next, r0) << "the next step must draw other indices";
  EXPECT_EQ(next.size(), r0.size());
  size_t common = 0;
  for (size_t j = 0; j < r0.size(); ++j) common += r0[j] == next[j];
  // Each stratum has ~100 positions: two steps agree on a stratum about 1% of the time.
  EXPECT_LT(common, r0.size() / 10);
  auto other_seed = test::make_codec("randomk:ratio=0.01,seed=1235");
  EXPECT_NE(positions(*other_seed, g0, 10, 0), r0) << "another seed";
}

// ---- bit-exact conformance with docs/wire-format.md ----
//
// Reference encoders written from the wire-format page alone: the header, qsgd's
// scale/round/pack, sign's lane-ordered mean, topk's selection and randomk's stratified
// indices. The host codecs (and through them the GPU kernels) must write these exact bytes.

void put_le(std::vector<uint8_t>& m, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) m[off + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

void put_f32(std::vector<uint8_t>& m, size_t off, float f) { put_le(m, off, f32_bits(f), 4); }

std::vector<uint8_t> ref_header(uint8_t codec, uint64_t count, uint8_t flags, uint32_t bits, uint32_t bucket,
                                uint64_t k, uint64_t seed, uint64_t step, uint64_t payload) {
  std::vector<uint8_t> m(test::kWireHeaderBytes + payload, 0);
  m[0] = 'G';
  m[1] = 'W';
  m[2] = 'R';
  m[3] = 'E';
  m[4] = 1;
  m[5] = codec;
  m[6] = 1;  // f32
  m[7] = flags;
  put_le(m, 8, count, 8);
  put_le(m, 16, bits, 4);
  put_le(m, 20, bucket, 4);
  put_le(m, 24, k, 8);
  put_le(m, 32, seed, 8);
  put_le(m, 40, step, 8);
  put_le(m, 48, payload, 8);
  return m;
}

// Words of the stream (seed, step, rank), a block at a time.
class RefStream {
 public:
  RefStream(uint64_t seed, uint64_t step, uint32_t rank) : seed_(seed), step_(step), rank_(rank) {}
  uint32_t word(uint64_t i) {
    if (i / 4 != block_) {
      block_ = i / 4;
      const uint32_t ctr[4] = {static_cast<uint32_t>(block_), static_cast<uint32_t>(block_ >> 32), rank_,
                               static_cast<uint32_t>(step_)};
      const uint32_t key[2] = {static_cast<uint32_t>(seed_),
                               static_cast<uint32_t>(seed_ >> 32) ^ static_cast<uint32_t>(step_ >> 32)};
      test::ref_philox4x32_10(ctr, key, words_);
    }
    return words_[i % 4];
  }

 private:
  uint64_t seed_, step_;
  uint32_t rank_;
  uint64_t block_ = ~uint64_t{0};
  uint32_t words_[4] = {};
};

std::vector<uint8_t> ref_qsgd(const std::vector<float>& x, uint32_t bits, uint32_t bucket, bool stochastic,
                              uint64_t seed, uint64_t step, uint32_t rank) {
  const uint64_t n = x.size();
  const uint64_t nb = (n + bucket - 1) / bucket;
  const uint64_t payload = 8 * nb + (n * bits + 7) / 8;
  std::vector<uint8_t> m = ref_header(3, n, stochastic ? 0 : 1, bits, bucket, 0, 0, 0, payload);
  const size_t scales = test::kWireHeaderBytes, codes = scales + 8 * nb;
  const uint32_t levels = (1u << bits) - 1u;
  const float l = static_cast<float>(levels);
  RefStream rs(seed, step, rank);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * bucket, hi = std::min<uint64_t>(lo + bucket, n);
    float mn = x[lo], mx = x[lo];
    for (uint64_t i = lo + 1; i < hi; ++i) {
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
    }
    float unit = (mx - mn) / l;
    if (!(unit <= 3.4e38f)) unit = mx / l - mn / l;
    const float inv = (unit > 0.0f && unit <= 3.4e38f) ? 1.0f / unit : 0.0f;
    put_f32(m, scales + 8 * b, mn);
    put_f32(m, scales + 8 * b + 4, unit);
    for (uint64_t i = lo; i < hi; ++i) {
      const float r = stochastic ? static_cast<float>(rs.word(i) >> 8) * (1.0f / 16777216.0f) : 0.5f;
      const float u = (x[i] - mn) * inv;
      const float t = u + r;
      float q = std::floor(t);
      if (!(q >= 0.0f)) q = 0.0f;  // negatives and NaN
      if (q > l) q = l;
      const uint64_t bit = i * bits;
      m[codes + bit / 8] = static_cast<uint8_t>(m[codes + bit / 8] | (static_cast<uint32_t>(q) << (bit % 8)));
    }
  }
  return m;
}

std::vector<uint8_t> ref_sign(const std::vector<float>& x, uint32_t bucket) {
  const uint64_t n = x.size();
  const uint64_t nb = (n + bucket - 1) / bucket;
  std::vector<uint8_t> m = ref_header(4, n, 0, 1, bucket, 0, 0, 0, 4 * nb + (n + 7) / 8);
  const size_t scales = test::kWireHeaderBytes, codes = scales + 4 * nb;
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * bucket, len = std::min<uint64_t>(bucket, n - lo);
    float lane[32] = {};
    for (uint64_t i = 0; i < len; ++i) lane[i % 32] += std::fabs(x[lo + i]);
    for (int w = 16; w >= 1; w /= 2) {
      for (int j = 0; j < w; ++j) lane[j] += lane[j + w];
    }
    put_f32(m, scales + 4 * b, lane[0] / static_cast<float>(len));
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (x[i] < 0.0f) m[codes + i / 8] = static_cast<uint8_t>(m[codes + i / 8] | (1u << (i % 8)));
  }
  return m;
}

std::vector<uint8_t> ref_topk(const std::vector<float>& x, uint64_t k) {
  const std::vector<uint64_t> idx = reference_topk(x, k);
  std::vector<uint8_t> m = ref_header(5, x.size(), 0, 0, 0, k, 0, 0, 8 * k);
  for (uint64_t i = 0; i < k; ++i) {
    put_le(m, test::kWireHeaderBytes + 4 * i, idx[i], 4);
    put_f32(m, test::kWireHeaderBytes + 4 * k + 4 * i, x[idx[i]]);
  }
  return m;
}

std::vector<uint8_t> ref_randomk(const std::vector<float>& x, uint64_t k, uint64_t seed, uint64_t step) {
  const uint64_t n = x.size();
  std::vector<uint8_t> m = ref_header(7, n, 0, 0, 0, k, seed, step, 4 * k);
  RefStream rs(seed, step, 0xFFFFFFFFu);
  __extension__ typedef unsigned __int128 U128;
  for (uint64_t j = 0; j < k; ++j) {
    const uint64_t start = j * (n / k) + std::min(j, n % k);
    const uint64_t len = n / k + (j < n % k ? 1 : 0);
    const uint64_t lo = rs.word(4 * (j / 2) + 2 * (j % 2));
    const uint64_t hi = rs.word(4 * (j / 2) + 2 * (j % 2) + 1);
    const uint64_t w = (hi << 32) | lo;
    const uint64_t idx = start + static_cast<uint64_t>((static_cast<U128>(w) * len) >> 64);
    put_f32(m, test::kWireHeaderBytes + 4 * j, x[idx]);
  }
  return m;
}

// Inputs for conformance: heavy-tailed gradients, and one with the values that take the
// codecs' slow paths (signed zeros as extremes, NaN first or inside a bucket, infinities,
// subnormals, constant runs).
std::vector<float> awkward_values(size_t n, uint64_t seed) {
  std::vector<float> x = test::gradient(n, seed);
  std::mt19937_64 rng(seed);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            3e38f,
                            -3e38f};
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng() % 1000;
    if (r < 9) x[i] = specials[r];
    if (r >= 990) x[i] = 0.0f;
    if (r >= 980 && r < 990) x[i] = -0.0f;
  }
  // A bucket of zeros of both signs only, and a bucket that starts with NaN.
  for (size_t i = 0; i < std::min<size_t>(n, 64); ++i) x[i] = (i % 3) ? 0.0f : -0.0f;
  if (n > 64) x[64] = std::numeric_limits<float>::quiet_NaN();
  // Stretches where the minimum (then the maximum) is a zero that occurs with both signs, in
  // random order: which zero a bucket reports depends on the order of the comparisons.
  for (size_t i = 512; i < std::min<size_t>(n, 1536); ++i) {
    const uint64_t r = rng() % 8;
    x[i] = r == 0 ? 0.0f : r == 1 ? -0.0f : std::fabs(x[i]);
    if (std::isnan(x[i])) x[i] = 1.0f;
  }
  for (size_t i = 1536; i < std::min<size_t>(n, 2560); ++i) {
    const uint64_t r = rng() % 8;
    x[i] = r == 0 ? 0.0f : r == 1 ? -0.0f : -std::fabs(x[i]);
    if (std::isnan(x[i])) x[i] = -1.0f;
  }
  return x;
}

void expect_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      FAIL() << what << ": first difference at byte " << i << " (payload byte "
             << static_cast<int64_t>(i) - static_cast<int64_t>(test::kWireHeaderBytes) << "): got "
             << static_cast<int>(got[i]) << ", the wire format says " << static_cast<int>(want[i]);
    }
  }
}

TEST(WireFormat, QsgdBytesMatchReference) {
  const size_t sizes[] = {1, 2, 7, 31, 33, 511, 513, 4097, 8200, 65537};
  std::vector<std::vector<float>> inputs;
  for (size_t n : sizes) {
    inputs.push_back(test::gradient(n, n + 1));
    inputs.push_back(awkward_values(n, n * 5 + 3));
  }
  for (uint32_t bits : {1u, 2u, 4u, 8u}) {
    for (bool stochastic : {true, false}) {
      for (uint32_t bucket : {1u, 37u, 64u, 512u, 4099u}) {
        const uint64_t seed = bucket * 3 + bits;
        const std::string spec = "qsgd:bits=" + std::to_string(bits) + ",bucket=" + std::to_string(bucket) +
                                 ",seed=" + std::to_string(seed) + (stochastic ? "" : ",rounding=nearest");
        auto codec = test::make_codec(spec);
        ASSERT_NE(codec, nullptr);
        for (size_t i = 0; i < inputs.size(); ++i) {
          const std::vector<float>& x = inputs[i];
          const size_t n = x.size();
          const uint64_t step = n % 3 == 0 ? (uint64_t{1} << 32) + 7 : n;
          const uint32_t rank = static_cast<uint32_t>(n % 5);
          expect_same_bytes(test::encode(*codec, x, step, rank),
                            ref_qsgd(x, bits, bucket, stochastic, seed, step, rank),
                            spec + " n=" + std::to_string(n) + (i % 2 ? " awkward values" : " gradient"));
        }
      }
    }
  }
}

TEST(WireFormat, SignBytesMatchReference) {
  for (uint32_t bucket : {1u, 31u, 32u, 33u, 512u, 5000u}) {
    auto codec = test::make_codec("sign:bucket=" + std::to_string(bucket));
    for (size_t n : test::awkward_sizes()) {
      if (n > 65537) continue;
      for (int input = 0; input < 2; ++input) {
        std::vector<float> x = input == 0 ? test::gradient(n, n + 11) : awkward_values(n, n + 12);
        if (input == 1) {  // keep the scales finite: a NaN or inf scale's bits are not the point here
          for (auto& v : x) {
            if (!std::isfinite(v)) v = -2.5f;
          }
        }
        expect_same_bytes(test::encode(*codec, x, 1, 0), ref_sign(x, bucket),
                          "sign:bucket=" + std::to_string(bucket) + " n=" + std::to_string(n));
      }
    }
  }
}

TEST(WireFormat, TopkBytesMatchReference) {
  for (size_t n : test::awkward_sizes()) {
    if (n == 0 || n > 65537) continue;
    const std::vector<float> x = test::gradient(n, n + 21);
    for (const std::string spec : {"topk:ratio=0.01", "topk:k=3", "topk:ratio=0.5"}) {
      auto codec = test::make_codec(spec);
      const uint64_t k = codec->spec().k > 0 ? test::ref_k_for_fixed(n, codec->spec().k)
                                             : test::ref_k_for_ratio(n, codec->spec().ratio);
      expect_same_bytes(test::encode(*codec, x, 0, 0), ref_topk(x, k), spec + " n=" + std::to_string(n));
    }
  }
}

TEST(WireFormat, RandomkBytesMatchReference) {
  for (size_t n : test::awkward_sizes()) {
    if (n == 0) continue;
    const std::vector<float> x = test::gradient(n, n + 31);
    for (uint64_t step : {uint64_t{0}, uint64_t{5}, (uint64_t{1} << 32) + 3}) {
      auto codec = test::make_codec("randomk:ratio=0.01,seed=99");
      expect_same_bytes(test::encode(*codec, x, step, 4), ref_randomk(x, test::ref_k_for_ratio(n, 0.01), 99, step),
                        "randomk n=" + std::to_string(n) + " step=" + std::to_string(step));
    }
  }
}

}  // namespace
}  // namespace gw
