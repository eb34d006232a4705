// Every collective over the in-process transport (threads as ranks): all rank counts,
// awkward sizes, every algorithm and codec, checked against independent references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "collectives/common/context.hpp"
#include "collectives/common/message_pieces.hpp"
#include "collectives/policy/policy.hpp"
#include "compressors/half.hpp"
#include "gradwire/communicator.hpp"
#include "tests/local_ranks.hpp"
#include "tests/test_util.hpp"
#include "transport/local/local_transport.hpp"

namespace gw {
namespace {

using test::run_local_ranks;

// Small integers: every sum is exact in fp32 whatever the order.
std::vector<float> int_data(size_t n, int rank, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + rank * 13 + salt) % 41) - 20);
  return v;
}

const int kRanks[] = {1, 2, 3, 4, 5, 8};
const size_t kSizes[] = {0, 1, 2, 3, 7, 13, 1024, 4099, 100003};

TEST(RingAllreduce, ExactSumsForEveryRankCountAndSize) {
  for (int p : kRanks) {
    for (size_t n : kSizes) {
      std::vector<float> expect(n, 0.0f);
      for (int r = 0; r < p; ++r) {
        const auto d = int_data(n, r, 1);
        for (size_t i = 0; i < n; ++i) expect[i] += d[i];
      }
      run_local_ranks(p, [&](Communicator& c, int r) {
        auto x = int_data(n, r, 1);
        std::vector<float> out(n, -1.0f);
        ASSERT_TRUE(c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok());
        EXPECT_EQ(out, expect) << "p=" << p << " n=" << n << " rank " << r;
        // In place, average.
        ASSERT_TRUE(c.allreduce(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kAvg, nullptr, nullptr).is_ok());
        for (size_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(x[i], expect[i] / static_cast<float>(p));
      });
    }
  }
}

// Recursive doubling and Rabenseifner asked for by name on every rank count (powers of two
// and not), every op, awkward sizes (fewer elements than ranks too), in and out of place;
// every rank ends with the same bits, NaN payloads and signed zeros included.
TEST(RecursiveDoubling, ExactForEveryRankCountOpAndSize) {
  for (Algo algo : {Algo::kRecursiveDoubling, Algo::kRabenseifner})
    for (int p : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1031}, size_t{70001}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
          std::vector<float> expect(n, op == ReduceOp::kProd ? 1.0f : 0.0f);
          for (int r = 0; r < p; ++r) {
            const auto d = int_data(n, r, 3);
            for (size_t i = 0; i < n; ++i) {
              const float v = op == ReduceOp::kProd ? (d[i] > 0 ? 1.0f : -1.0f) : d[i];
              if (op == ReduceOp::kMax)
                expect[i] = r == 0 ? v : std::max(expect[i], v);
              else if (op == ReduceOp::kMin)
                expect[i] = r == 0 ? v : std::min(expect[i], v);
              else if (op == ReduceOp::kProd)
                expect[i] *= v;
              else
                expect[i] += v;
            }
          }
          if (op == ReduceOp::kAvg) {
            for (float& e : expect) e /= static_cast<float>(p);
          }
          run_local_ranks(p, [&](Communicator& c, int r) {
            auto x = int_data(n, r, 3);
            if (op == ReduceOp::kProd) {
              for (float& v : x) v = v > 0 ? 1.0f : -1.0f;
            }
            std::vector<float> out(n, -7.0f);
            const Status s = c.allreduce(x.data(), out.data(), n, DType::kFloat32, op, nullptr, nullptr, algo);
            ASSERT_TRUE(s.is_ok()) << s.to_string();
            EXPECT_EQ(out, expect) << algo_name(algo) << " p=" << p << " n=" << n << " op " << red_op_name(op)
                                   << " rank " << r;
            EXPECT_EQ(c.stats()->last_algo, algo);
            ASSERT_TRUE(c.allreduce(x.data(), x.data(), n, DType::kFloat32, op, nullptr, nullptr, algo).is_ok());
            EXPECT_EQ(x, expect) << algo_name(algo) << " in place, p=" << p << " n=" << n;
          });
        }
      }
    }
}

TEST(RecursiveDoubling, EveryRankGetsTheSameBitsForNaNPayloadsAndSignedZeros) {
  for (Algo algo : {Algo::kRecursiveDoubling, Algo::kRabenseifner})
    for (int p : {2, 3, 5, 6}) {
      const size_t n = 64;
      std::vector<std::vector<uint32_t>> got(static_cast<size_t>(p));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        run_local_ranks(p, [&](Communicator& c, int r) {
          std::vector<float> x(n);
          for (size_t i = 0; i < n; ++i) {
            // Different NaN payloads on different ranks, and +0 / -0 by rank parity.
            const uint32_t nan = 0x7fc00000u | static_cast<uint32_t>(r * 64 + static_cast<int>(i) + 1);
            float v = r % 2 == 0 ? 0.0f : -0.0f;
            if (i % 3 == 0) std::memcpy(&v, &nan, sizeof v);
            x[i] = v;
          }
          std::vector<float> out(n);
          ASSERT_TRUE(c.allreduce(x.data(), out.data(), n, DType::kFloat32, op, nullptr, nullptr, algo).is_ok());
          std::vector<uint32_t> bits(n);
          std::memcpy(bits.data(), out.data(), n * sizeof(float));
          got[static_cast<size_t>(r)] = bits;
        });
        for (int r = 1; r < p; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], got[0]) << "p=" << p << " rank " << r;
      }
    }
}

// Halving-doubling on every rank count, powers of two and not, awkward sizes (fewer elements
// than owners included): exact with codec "none", the same bits on every rank with a lossy
// codec, and log p messages per rank each way (scatter-reduce: 2 (p - 1)), a halving step's
// cut in chunks of the pipelining unit (4 KiB here: 1024 elements), none for an empty half.
TEST(HalvingDoubling, EveryRankCountExactWithNoneSameBitsLossyAndLogPMessages) {
  for (int p : {1, 2, 3, 4, 5, 6, 7, 9, 12, 16}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{13}, size_t{1031}, size_t{40009}}) {
      std::vector<float> expect(n, 0.0f);
      for (int r = 0; r < p; ++r) {
        const auto d = int_data(n, r, 5);
        for (size_t i = 0; i < n; ++i) expect[i] += d[i];
      }
      std::vector<std::vector<float>> lossy(static_cast<size_t>(p));
      std::mutex mu;
      run_local_ranks(p, [&](Communicator& c, int r) {
        auto none = test::make_codec("none");
        auto q = test::make_codec("qsgd:bits=4,bucket=64");
        const auto x = int_data(n, r, 5);
        std::vector<float> out(n, -3.0f);
        ASSERT_TRUE(c.reset_stats().is_ok());
        Status s = c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, none.get(), nullptr,
                               Algo::kHalvingDoubling);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        EXPECT_EQ(out, expect) << "p=" << p << " n=" << n << " rank " << r;
        const auto st = c.stats();
        ASSERT_TRUE(st.is_ok());
        EXPECT_EQ(st->last_algo, Algo::kHalvingDoubling);
        int m = 0;
        while ((2 << m) <= p) ++m;
        const bool folded_or_taker = r < 2 * (p - (1 << m));
        const bool folded = folded_or_taker && r % 2 == 0;
        auto chunks = [](uint64_t e) { return (e + 1023) / 1024; };
        // Halving sends half of what the rank holds: about n/2, n/4, ... elements (segments
        // are a partition into 2^m owners, so a half is a whole number of them).
        uint64_t halving = 0;
        {
          const uint64_t owners = uint64_t{1} << m;
          const int v = r < 2 * (p - (1 << m)) ? r / 2 : r - (p - (1 << m));
          const coll::Partition part{n, owners};
          uint64_t lo = 0, hi = owners;
          for (int k = 0; k < m; ++k) {
            const uint64_t dist = owners >> (k + 1), mid = lo + (hi - lo) / 2;
            const bool low = (static_cast<uint64_t>(v) & dist) == 0;
            halving += chunks(low ? part.start(hi) - part.start(mid) : part.start(mid) - part.start(lo));
            if (low) {
              hi = mid;
            } else {
              lo = mid;
            }
          }
        }
        const uint64_t want = folded ? chunks(n) : halving + static_cast<uint64_t>(m) + (folded_or_taker ? 1 : 0);
        EXPECT_EQ(st->messages_sent, want) << "p=" << p << " n=" << n << " rank " << r;
        ErrorFeedback ef(n);
        std::vector<float> g = x;
        s = c.allreduce(g.data(), g.data(), n, DType::kFloat32, ReduceOp::kAvg, q.get(), &ef, Algo::kHalvingDoubling);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        std::lock_guard<std::mutex> lock(mu);
        lossy[static_cast<size_t>(r)] = g;
      });
      for (int r = 1; r < p; ++r) EXPECT_EQ(lossy[static_cast<size_t>(r)], lossy[0]) << "p=" << p << " n=" << n;
    }
  }
}

// Sparse doubling on every rank count, powers of two and not: the sparse all-gather's sum
// (integers: exact in any order) for top-k, dgc and random-k, in log p exchanges; sparse
// messages while the union is sparse, dense ones from the step it is denser.
TEST(SparseDoubling, TheSparseAllgathersSumInLogPExchangesDenseOnceDenser) {
  for (int p : {1, 2, 3, 4, 5, 6, 7, 8, 11, 16}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{13}, size_t{1031}, size_t{40009}}) {
      for (const char* spec : {"topk:ratio=0.01", "topk:ratio=0.3", "dgc:ratio=0.05", "randomk:ratio=0.1"}) {
        std::vector<std::vector<float>> outs(static_cast<size_t>(p));
        std::mutex mu;
        run_local_ranks(p, [&](Communicator& c, int r) {
          auto codec = test::make_codec(spec);
          const auto x = int_data(n, r, 9);
          std::vector<float> want(n, -7.0f), got(n, -3.0f);
          // Fresh states at the same step: random-k draws the same indices for both calls.
          ErrorFeedback ef_gather(n), ef_doubling(n);
          Status s = c.allreduce(x.data(), want.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), &ef_gather,
                                 Algo::kSparseAllgather);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          ASSERT_TRUE(c.reset_stats().is_ok());
          s = c.allreduce(x.data(), got.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), &ef_doubling,
                          Algo::kSparseDoubling);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          EXPECT_EQ(got, want) << spec << " p=" << p << " n=" << n << " rank " << r;
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(ef_doubling.residual()[i], ef_gather.residual()[i]) << i;
          const auto st = c.stats();
          ASSERT_TRUE(st.is_ok());
          EXPECT_EQ(st->last_algo, Algo::kSparseDoubling);
          int m = 0;
          while ((2 << m) <= p) ++m;
          const bool folded_or_taker = r < 2 * (p - (1 << m));
          const bool folded = folded_or_taker && r % 2 == 0;
          const uint64_t want_msgs = n == 0 ? 0 : folded ? 1 : static_cast<uint64_t>(m) + (folded_or_taker ? 1 : 0);
          EXPECT_EQ(st->messages_sent, want_msgs) << spec << " p=" << p << " n=" << n << " rank " << r;
          // No message is larger than a dense one (header, descriptor and all).
          if (want_msgs > 0) {
            EXPECT_LE(st->bytes_sent, want_msgs * (56 + 4 * n + 256)) << spec << " p=" << p;
          }
          std::lock_guard<std::mutex> lock(mu);
          outs[static_cast<size_t>(r)] = got;
        });
        for (int r = 1; r < p; ++r) EXPECT_EQ(outs[static_cast<size_t>(r)], outs[0]) << spec << " p=" << p;
      }
    }
  }
}

// A value codec forced onto sparse doubling is refused before any message moves, on every
// rank alike, and the communicator stays usable.
TEST(SparseDoubling, RefusesValueCodecsUpFront) {
  run_local_ranks(3, [&](Communicator& c, int) {
    auto q = test::make_codec("qsgd:bits=8");
    std::vector<float> x(100000, 1.0f), out(100000);
    const Status s = c.allreduce(x.data(), out.data(), x.size(), DType::kFloat32, ReduceOp::kSum, q.get(), nullptr,
                                 Algo::kSparseDoubling);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("sparse_doubling takes sparse codecs"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("not qsgd"), std::string::npos) << s.to_string();
    EXPECT_TRUE(c.allreduce(x.data(), out.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok());
    EXPECT_EQ(out[0], 3.0f);
  });
}

// Ranks whose top-k indices are disjoint: the union doubles every exchange, so the last
// exchange of 16 ranks at 1/16 density goes dense, and the bytes say so.
TEST(SparseDoubling, SwitchesToDenseMessagesWhereTheUnionIsDenser) {
  const int p = 16;
  const size_t n = 4096, k = n / 16;
  run_local_ranks(p, [&](Communicator& c, int r) {
    auto codec = test::make_codec("topk:k=" + std::to_string(k));
    std::vector<float> x(n, 0.0f), out(n, -1.0f);
    for (size_t i = 0; i < k; ++i) x[static_cast<size_t>(r) * k + i] = static_cast<float>(r + 1);
    ASSERT_TRUE(c.reset_stats().is_ok());
    const Status s = c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), nullptr,
                                 Algo::kSparseDoubling);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(i / k + 1)) << i;
    const auto st = c.stats();
    ASSERT_TRUE(st.is_ok());
    // It sends unions of 256, 512, 1024 and 2048 entries: pairs (8 bytes each) for the first
    // three, dense (4 bytes an element) for the last, where pairs would be no smaller.
    const uint64_t msgs = 56 + 8 * 256 + 56 + 8 * 512 + 56 + 8 * 1024 + 56 + 4 * n;
    EXPECT_GE(st->bytes_sent, msgs);
    EXPECT_LE(st->bytes_sent, msgs + 4 * 256);  // the call descriptors carried at each head
  });
}

// Rabenseifner on every dtype: integers wrap as the ring's do, half types sum through float,
// with chunks small enough (the local ranks' 4 KiB) that every step is several.
TEST(Rabenseifner, EveryDtypeAsTheRingGivesIt) {
  for (int p : {2, 3, 5, 8}) {
    for (DType dt : {DType::kInt32, DType::kInt64, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kUInt8}) {
      const size_t n = 10007, es = dtype_size(dt);
      std::vector<std::vector<uint8_t>> ring(static_cast<size_t>(p)), rab(static_cast<size_t>(p));
      std::mutex mu;
      run_local_ranks(p, [&](Communicator& c, int r) {
        std::vector<uint8_t> x(n * es), a(n * es), b(n * es);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>((i * 31 + static_cast<size_t>(r) * 7) % 61);
        if (dt == DType::kFloat16 || dt == DType::kBFloat16) {  // small finite halves
          for (size_t i = 0; i < n; ++i) {
            const float v = static_cast<float>(static_cast<int>((i + static_cast<size_t>(r)) % 9) - 4);
            const uint16_t h = dt == DType::kFloat16 ? hd::float_to_half(v) : hd::float_to_bf16(v);
            std::memcpy(x.data() + 2 * i, &h, 2);
          }
        }
        if (dt == DType::kFloat64) {
          for (size_t i = 0; i < n; ++i) {
            const double v = static_cast<double>((i * 3 + static_cast<size_t>(r)) % 17) - 8.0;
            std::memcpy(x.data() + 8 * i, &v, 8);
          }
        }
        ASSERT_TRUE(c.allreduce(x.data(), a.data(), n, dt, ReduceOp::kSum, nullptr, nullptr, Algo::kRing).is_ok());
        const Status s = c.allreduce(x.data(), b.data(), n, dt, ReduceOp::kSum, nullptr, nullptr, Algo::kRabenseifner);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        std::lock_guard<std::mutex> lock(mu);
        ring[static_cast<size_t>(r)] = a;
        rab[static_cast<size_t>(r)] = b;
      });
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(rab[static_cast<size_t>(r)] == ring[0]) << dtype_name(dt) << " p=" << p << " rank " << r;
      }
    }
  }
}

TEST(RingAllreduce, HalfPrecisionTypes) {
  for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
    for (int p : {2, 3, 4}) {
      const size_t n = 1031;
      run_local_ranks(p, [&](Communicator& c, int r) {
        std::vector<uint16_t> x(n), out(n);
        for (size_t i = 0; i < n; ++i) {
          const float v = static_cast<float>(static_cast<int>((i + static_cast<size_t>(r)) % 9) - 4);
          x[i] = dt == DType::kFloat16 ? hd::float_to_half(v) : hd::float_to_bf16(v);
        }
        ASSERT_TRUE(c.allreduce(x.data(), out.data(), n, dt, ReduceOp::kSum, nullptr, nullptr).is_ok());
        for (size_t i = 0; i < n; ++i) {
          float expect = 0;
          for (int q = 0; q < p; ++q)
            expect += static_cast<float>(static_cast<int>((i + static_cast<size_t>(q)) % 9) - 4);
          const float got = dt == DType::kFloat16 ? hd::half_to_float(out[i]) : hd::bf16_to_float(out[i]);
          ASSERT_EQ(got, expect) << i;
        }
      });
    }
  }
}

struct LossyCase {
  std::string codec;
  Algo algo;
};

std::vector<LossyCase> lossy_cases() {
  std::vector<LossyCase> cases;
  for (const char* spec : {"none", "fp16", "bf16", "qsgd:bits=8", "qsgd:bits=4,bucket=64", "qsgd:bits=1",
                           "sign:bucket=128", "topk:ratio=0.05", "dgc:ratio=0.05", "randomk:ratio=0.1"}) {
    for (Algo a : {Algo::kCompressedRing, Algo::kScatterReduce, Algo::kSparseAllgather, Algo::kHalvingDoubling}) {
      cases.push_back({spec, a});
    }
    const std::string s = spec;
    if (s == "none" || s.rfind("topk", 0) == 0 || s.rfind("dgc", 0) == 0 || s.rfind("randomk", 0) == 0) {
      cases.push_back({spec, Algo::kSparseDoubling});
    }
  }
  return cases;
}

// Runs steps of EF all-reduce and checks (1) every rank gets the same bits, (2) the EF
// invariant summed over ranks: what the outputs carried plus every residual left behind
// equals the sum of all inputs, (3) lossless codecs give the exact sum.
TEST(CompressedAllreduce, EveryCodecAndAlgorithmConservesMass) {
  for (const LossyCase& lc : lossy_cases()) {
    for (int p : {1, 2, 3, 5, 8}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
        const int steps = 3;
        std::vector<std::vector<float>> outs(static_cast<size_t>(p));
        std::vector<double> residual_total(n, 0.0), input_total(n, 0.0), output_total(n, 0.0);
        std::mutex mu;
        run_local_ranks(p, [&](Communicator& c, int r) {
          auto codec = test::make_codec(lc.codec);
          ErrorFeedback ef(n);
          std::vector<float> sum_out(n, 0.0f);
          std::vector<double> my_in(n, 0.0), my_out(n, 0.0);
          for (int s = 0; s < steps; ++s) {
            auto g = test::gradient(n, static_cast<uint64_t>(r * 100 + s));
            std::vector<float> out(n, 12345.0f);
            const Status st =
                c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), &ef, lc.algo);
            ASSERT_TRUE(st.is_ok()) << lc.codec << " " << algo_name(lc.algo) << " p=" << p << " n=" << n << ": "
                                    << st.to_string();
            for (size_t i = 0; i < n; ++i) {
              my_in[i] += g[i];
              my_out[i] += out[i];
            }
            if (s == steps - 1) {
              std::lock_guard<std::mutex> lock(mu);
              outs[static_cast<size_t>(r)] = out;
            }
          }
          std::lock_guard<std::mutex> lock(mu);
          for (size_t i = 0; i < n; ++i) {
            input_total[i] += my_in[i];
            residual_total[i] += ef.residual()[i];
            if (r == 0) output_total[i] = my_out[i];
          }
          // Owner residuals cover each rank's owned segment; their layout is the
          // algorithm's, so they are checked as a total below.
          double owner = 0;
          for (size_t i = 0; i < ef.owner_count(); ++i) owner += ef.owner_residual(ef.owner_count())[i];
          residual_total.push_back(owner);
        });
        for (int r = 1; r < p; ++r) {
          ASSERT_TRUE(outs[0] == outs[static_cast<size_t>(r)])
              << lc.codec << " " << algo_name(lc.algo) << ": ranks disagree";
        }
        double lhs = 0, rhs = 0, scale = 0;
        for (size_t i = 0; i < n; ++i) {
          lhs += output_total[i] + residual_total[i];
          rhs += input_total[i];
          scale += std::fabs(input_total[i]) + std::fabs(output_total[i]);
        }
        for (size_t i = n; i < residual_total.size(); ++i) lhs += residual_total[i];
        EXPECT_NEAR(lhs, rhs, 1e-5 * (scale + 1e-3) + 1e-6)
            << lc.codec << " " << algo_name(lc.algo) << " p=" << p << " n=" << n;
        if (lc.codec == "none" && n > 0) {
          for (size_t i = 0; i < n; ++i) {
            ASSERT_NEAR(output_total[i], input_total[i], 1e-5 * (std::fabs(input_total[i]) + 1e-3)) << i;
          }
        }
      }
    }
  }
}

// A sparse message larger than a pipelining chunk travels as several pieces (each goes
// eagerly); the result must be the same bits as in one piece, with every rank count.
TEST(SparseAllgather, MessagesInPiecesGiveTheSameBitsAsWhole) {
  for (int p : {2, 3, 5}) {
    for (const char* spec : {"topk:ratio=0.05", "dgc:ratio=0.05,ef=1", "randomk:ratio=0.2"}) {
      const size_t n = 40009;  // messages of several 4 KiB pieces, the last one short
      std::vector<std::vector<float>> got[2];
      for (int variant = 0; variant < 2; ++variant) {
        CommConfig cfg;
        cfg.chunk_bytes = variant == 0 ? size_t{1} << 22 : 4096;  // one piece, or several
        got[variant].assign(static_cast<size_t>(p), {});
        std::mutex mu;
        run_local_ranks(
            p,
            [&](Communicator& c, int r) {
              auto codec = test::make_codec(spec);
              ErrorFeedback ef(n);
              std::vector<float> out(n);
              for (int s = 0; s < 2; ++s) {
                auto g = test::gradient(n, static_cast<uint64_t>(r * 10 + s));
                const Status st = c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kAvg, codec.get(),
                                              &ef, Algo::kSparseAllgather);
                ASSERT_TRUE(st.is_ok()) << spec << " p=" << p << ": " << st.to_string();
              }
              std::lock_guard<std::mutex> lock(mu);
              got[variant][static_cast<size_t>(r)] = out;
            },
            cfg);
      }
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(got[0][static_cast<size_t>(r)] == got[1][static_cast<size_t>(r)])
            << spec << " p=" << p << " rank " << r;
        ASSERT_TRUE(got[1][0] == got[1][static_cast<size_t>(r)]) << spec << " p=" << p << ": ranks disagree";
      }
    }
  }
}

// The receiver's view of pieces: full ones, at most one short one, then empty ones; a piece
// with bytes after a short one (a gap of stale bytes in the message) is the peer's error.
TEST(SparseAllgather, PiecesWithAGapAreRefused) {
  const coll::MessagePieces mp = coll::MessagePieces::for_cap(10000, 4096);
  ASSERT_EQ(mp.count, 3u);
  ASSERT_EQ(mp.length(10000, 2), 10000u - 8192u);
  ASSERT_EQ(mp.length(5000, 2), 0u);
  transport::Op ops[3];
  auto with = [&](size_t a, size_t b, size_t c) {
    ops[0].bytes = a;
    ops[1].bytes = b;
    ops[2].bytes = c;
    return mp.assembled(ops, 10000, 4);
  };
  EXPECT_EQ(with(4096, 4096, 1808).value(), 10000u);
  EXPECT_EQ(with(4096, 904, 0).value(), 5000u);
  EXPECT_EQ(with(0, 0, 0).value(), 0u);
  const Result<size_t> gap = with(4096, 100, 50);
  ASSERT_FALSE(gap.is_ok());
  EXPECT_EQ(gap.status().code(), Code::kRemote);
  EXPECT_NE(gap.status().message().find("rank 4"), std::string::npos) << gap.status().message();
  EXPECT_FALSE(with(0, 4096, 0).is_ok());
  // Pieces never exceed the chunk tag space, whatever the cap.
  const coll::MessagePieces huge = coll::MessagePieces::for_cap(size_t{1} << 40, 4096);
  EXPECT_LT(huge.count, coll::kMaxChunks);
  EXPECT_GE(huge.piece * huge.count, size_t{1} << 40);
}

TEST(Collectives, AllgatherBroadcastBarrier) {
  for (int p : kRanks) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{5}, size_t{10007}}) {
      run_local_ranks(p, [&](Communicator& c, int r) {
        std::vector<uint8_t> mine(bytes), all(bytes * static_cast<size_t>(p));
        for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<uint8_t>(r * 31 + static_cast<int>(i));
        ASSERT_TRUE(c.allgather(mine.data(), all.data(), bytes).is_ok());
        for (int q = 0; q < p; ++q) {
          for (size_t i = 0; i < bytes; ++i) {
            ASSERT_EQ(all[static_cast<size_t>(q) * bytes + i], static_cast<uint8_t>(q * 31 + static_cast<int>(i)));
          }
        }
        const int root = p - 1;
        std::vector<uint8_t> b(bytes, static_cast<uint8_t>(r == root ? 7 : 0));
        ASSERT_TRUE(c.broadcast(b.data(), bytes, root).is_ok());
        for (uint8_t v : b) ASSERT_EQ(v, 7);
        ASSERT_TRUE(c.barrier().is_ok());
      });
    }
  }
}

TEST(Collectives, SparseAllgatherConcatenatesAndAccumulates) {
  for (int p : {1, 2, 3, 8}) {
    const size_t n = 1000;
    run_local_ranks(p, [&](Communicator& c, int r) {
      auto codec = test::make_codec("topk:k=" + std::to_string(10 + r));
      auto g = test::gradient(n, static_cast<uint64_t>(r));
      auto msg = test::encode(*codec, g);
      std::vector<uint8_t> all(static_cast<size_t>(p) * (msg.size() + 200));
      std::vector<size_t> lens(static_cast<size_t>(p));
      ASSERT_TRUE(c.sparse_allgather(msg.data(), msg.size(), all.data(), all.size(), lens.data()).is_ok());
      size_t off = 0;
      std::vector<float> expect(n, 0.0f);
      for (int q = 0; q < p; ++q) {
        auto qc = test::make_codec("topk:k=" + std::to_string(10 + q));
        auto qmsg = test::encode(*qc, test::gradient(n, static_cast<uint64_t>(q)));
        ASSERT_EQ(lens[static_cast<size_t>(q)], qmsg.size());
        ASSERT_EQ(std::memcmp(all.data() + off, qmsg.data(), qmsg.size()), 0);
        off += qmsg.size();
        ASSERT_TRUE(
            decode(qmsg.data(), qmsg.size(), expect.data(), n, DType::kFloat32, DecodeMode::kAccumulate).is_ok());
      }
      std::vector<float> dense(n);
      ASSERT_TRUE(c.sparse_allgather_dense(msg.data(), msg.size(), dense.data(), n).is_ok());
      EXPECT_EQ(dense, expect);
      // Too small an output: a clear error with every length reported, and the communicator
      // still works; also when only one rank's output is too small (the others cannot know).
      std::vector<size_t> small_lens(static_cast<size_t>(p), 0);
      const Status small = c.sparse_allgather(msg.data(), msg.size(), all.data(), 1, small_lens.data());
      if (p > 1 || msg.size() > 1) {
        EXPECT_EQ(small.code(), Code::kBufferTooSmall) << small.to_string();
      }
      EXPECT_EQ(small_lens, lens);
      const size_t cap = r == 0 ? 1 : all.size();
      const Status one = c.sparse_allgather(msg.data(), msg.size(), all.data(), cap, lens.data());
      EXPECT_EQ(one.code(), r == 0 && (p > 1 || msg.size() > 1) ? Code::kBufferTooSmall : Code::kOk) << one.to_string();
      ASSERT_TRUE(c.barrier().is_ok());
    });
  }
}

TEST(Policy, PicksByCodecSizeAndOverrides) {
  run_local_ranks(4, [&](Communicator& c, int) {
    auto q = test::make_codec("qsgd:bits=8");
    auto t = test::make_codec("topk:ratio=0.01");
    auto dense = test::make_codec("topk:ratio=0.5");
    // Larger dense calls: the ring's bytes in 2 log p steps (the default model's 100 Gbit/s).
    EXPECT_EQ(c.choose_algo(1 << 20, DType::kFloat32, nullptr, Algo::kAuto), Algo::kRabenseifner);
    // Small dense calls (a codec on a buffer under the threshold runs dense): log p steps.
    EXPECT_EQ(c.choose_algo(100, DType::kFloat32, q.get(), Algo::kAuto), Algo::kRecursiveDoubling);
    EXPECT_EQ(c.choose_algo(1000, DType::kInt64, nullptr, Algo::kAuto), Algo::kRecursiveDoubling);
    // On device buffers the dense choice is the ring (recursive doubling runs on the host).
    EXPECT_EQ(c.choose_algo(100, DType::kFloat32, nullptr, Algo::kAuto, true), Algo::kRing);
    EXPECT_EQ(c.choose_algo(1 << 20, DType::kFloat32, q.get(), Algo::kAuto), Algo::kScatterReduce);
    EXPECT_EQ(c.choose_algo(1 << 20, DType::kFloat32, t.get(), Algo::kAuto), Algo::kSparseAllgather);
    EXPECT_EQ(c.choose_algo(1 << 20, DType::kFloat32, dense.get(), Algo::kAuto), Algo::kScatterReduce);
    EXPECT_EQ(c.choose_algo(1 << 20, DType::kFloat16, q.get(), Algo::kAuto), Algo::kRabenseifner);
    EXPECT_EQ(c.choose_algo(1 << 20, DType::kFloat32, q.get(), Algo::kCompressedRing), Algo::kCompressedRing);
  });
  CommConfig cfg;
  cfg.algo = Algo::kCompressedRing;
  run_local_ranks(
      2,
      [&](Communicator& c, int) {
        auto q = test::make_codec("qsgd:bits=8");
        EXPECT_EQ(c.choose_algo(1 << 20, DType::kFloat32, q.get(), Algo::kAuto), Algo::kCompressedRing);
      },
      cfg);
}

// The tuner itself, driven with synthetic timings: tests/test_policy_tuner.cpp.

// The measured policy on a real communicator: whatever it decides, every rank runs the same
// algorithm, gets the same bits, and no gradient is lost (outputs plus residuals equal the
// inputs), through the trial calls, the agreement and the calls after it.
TEST(Policy, MeasuredChoiceKeepsRanksTogetherAndConservesMass) {
  for (const char* spec : {"topk:ratio=0.01,ef=1", "qsgd:bits=4"}) {
    const int p = 3;
    const size_t n = 40000;  // above the dense threshold
    const int steps = coll::AllreduceTuner::trial_calls(coll::AllreduceTuner::kMaxCandidates) + 3;  // past the trials
    std::vector<std::vector<float>> last(p);
    std::vector<Algo> ran(p);
    std::vector<double> in_total(n, 0.0), out_total(n, 0.0), res_total(n, 0.0);
    double owner_total = 0;
    std::mutex mu;
    run_local_ranks(p, [&](Communicator& c, int r) {
      auto codec = test::make_codec(spec);
      ErrorFeedback ef(n);
      std::vector<double> my_in(n, 0.0), my_out(n, 0.0);
      std::vector<float> out(n);
      for (int s = 0; s < steps; ++s) {
        auto g = test::gradient(n, static_cast<uint64_t>(r * 1000 + s));
        ASSERT_TRUE(c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), &ef).is_ok());
        for (size_t i = 0; i < n; ++i) {
          my_in[i] += g[i];
          my_out[i] += out[i];
        }
      }
      auto st = c.stats();
      ASSERT_TRUE(st.is_ok());
      EXPECT_EQ(st->allreduces, static_cast<uint64_t>(steps));
      EXPECT_EQ(c.choose_algo(n, DType::kFloat32, codec.get(), Algo::kAuto), st->last_algo);
      std::lock_guard<std::mutex> lock(mu);
      last[static_cast<size_t>(r)] = out;
      ran[static_cast<size_t>(r)] = st->last_algo;
      for (size_t i = 0; i < n; ++i) {
        in_total[i] += my_in[i];
        res_total[i] += ef.residual()[i];
        if (r == 0) out_total[i] = my_out[i];
      }
      for (size_t i = 0; i < ef.owner_count(); ++i) owner_total += ef.owner_residual(ef.owner_count())[i];
    });
    for (int r = 1; r < p; ++r) {
      EXPECT_EQ(ran[static_cast<size_t>(r)], ran[0]) << spec;
      EXPECT_TRUE(last[static_cast<size_t>(r)] == last[0]) << spec << ": ranks disagree";
    }
    double lhs = owner_total, rhs = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
      lhs += out_total[i] + res_total[i];
      rhs += in_total[i];
      scale += std::fabs(in_total[i]);
    }
    EXPECT_NEAR(lhs, rhs, 1e-5 * scale + 1e-6) << spec << " ran " << algo_name(ran[0]);
  }
}

TEST(Stats, CountBytesAndCodecTimeAndReset) {
  run_local_ranks(3, [&](Communicator& c, int r) {
    const size_t n = 30000;
    auto q = test::make_codec("qsgd:bits=8");
    auto g = test::gradient(n, static_cast<uint64_t>(r));
    std::vector<float> out(n);
    ASSERT_TRUE(c.reset_stats().is_ok());
    ASSERT_TRUE(
        c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, q.get(), nullptr, Algo::kScatterReduce)
            .is_ok());
    auto st = c.stats();
    ASSERT_TRUE(st.is_ok());
    EXPECT_EQ(st->collectives, 1u);
    EXPECT_EQ(st->allreduces, 1u);
    EXPECT_EQ(st->last_algo, Algo::kScatterReduce);
    EXPECT_EQ(st->algo_calls[static_cast<size_t>(Algo::kScatterReduce)], 1u);
    // qsgd 8-bit: about a byte per element, each rank sends 2 (p - 1) / p of its buffer.
    EXPECT_GT(st->bytes_sent, n * 2 * 2 / 3 * 9 / 10);
    EXPECT_LT(st->bytes_sent, n * 2 * 2 / 3 * 13 / 10);
    EXPECT_GT(st->encode_s, 0.0);
    EXPECT_GT(st->decode_s, 0.0);
    EXPECT_GE(st->total_s, st->encode_s + st->decode_s);
    EXPECT_GE(st->hidden_s, 0.0);  // the overlapped part of encode + decode
    EXPECT_LE(st->hidden_s, st->encode_s + st->decode_s);
    ASSERT_TRUE(c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok());
    st = c.stats();
    ASSERT_TRUE(st.is_ok());
    EXPECT_EQ(st->last_algo, Algo::kRing);
    // One all-reduce of each algorithm, counted apart (the perf tools read whether timed calls differed).
    EXPECT_EQ(st->algo_calls[static_cast<size_t>(Algo::kRing)], 1u);
    EXPECT_EQ(st->algo_calls[static_cast<size_t>(Algo::kScatterReduce)], 1u);
    EXPECT_EQ(st->algo_calls[static_cast<size_t>(Algo::kAuto)], 0u);
    EXPECT_GT(st->bytes_sent, n * 4 * 2 * 2 / 3);
    ASSERT_TRUE(c.reset_stats().is_ok());
    st = c.stats();
    ASSERT_TRUE(st.is_ok());
    EXPECT_EQ(st->bytes_sent, 0u);
    EXPECT_EQ(st->allreduces, 0u);
    EXPECT_EQ(st->algo_calls[static_cast<size_t>(Algo::kRing)], 0u);
    EXPECT_EQ(st->encode_s, 0.0);
    EXPECT_EQ(st->hidden_s, 0.0);
  });
}

TEST(Collectives, BadArgumentsAreRejectedAndLeaveTheCommunicatorUsable) {
  run_local_ranks(2, [&](Communicator& c, int) {
    std::vector<float> x(10, 1.0f);
    EXPECT_EQ(c.allreduce(nullptr, x.data(), 10, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).code(),
              Code::kInvalidArgument);
    EXPECT_EQ(c.allreduce(x.data(), x.data(), 10, static_cast<DType>(9), ReduceOp::kSum, nullptr, nullptr).code(),
              Code::kInvalidArgument);
    ErrorFeedback wrong(3);
    auto q = test::make_codec("qsgd");
    EXPECT_EQ(c.allreduce(x.data(), x.data(), 10, DType::kFloat32, ReduceOp::kSum, q.get(), &wrong).code(),
              Code::kInvalidArgument);
    EXPECT_EQ(
        c.allreduce(x.data(), x.data(), 10, DType::kFloat16, ReduceOp::kSum, q.get(), nullptr, Algo::kScatterReduce)
            .code(),
        Code::kUnsupported);
    EXPECT_EQ(c.broadcast(x.data(), 4, 5).code(), Code::kInvalidArgument);
    EXPECT_TRUE(c.allreduce(x.data(), x.data(), 10, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok());
    EXPECT_EQ(x[0], 2.0f);
  });
}

TEST(Failure, MissingRankTimesOutAndBreaksTheCommunicator) {
  CommConfig cfg;
  auto group = transport::make_local_group(3);
  cfg.timeout = std::chrono::milliseconds(300);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : group) comms.push_back(std::move(Communicator::create(std::move(t), cfg)).value());
  std::vector<std::thread> threads;
  std::vector<Status> results(2);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> x(1000, 1.0f);
      results[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->allreduce(
          x.data(), x.data(), 1000, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (const Status& s : results) {
    EXPECT_FALSE(s.is_ok());
    EXPECT_TRUE(s.code() == Code::kTimeout || s.code() == Code::kAborted) << s.to_string();
  }
  EXPECT_FALSE(comms[0]->error().is_ok());
  std::vector<float> y(4, 1.0f);
  EXPECT_FALSE(comms[0]->allreduce(y.data(), y.data(), 4, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok());
}

TEST(Failure, AbortFromAnotherThreadEndsAPendingCollective) {
  auto group = transport::make_local_group(2);
  CommConfig cfg;
  cfg.timeout = std::chrono::seconds(60);
  auto c0 = std::move(Communicator::create(std::move(group[0]), cfg)).value();
  auto c1 = std::move(Communicator::create(std::move(group[1]), cfg)).value();
  std::vector<float> x(1000, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c0->abort("test");
  });
  const Status s = c0->allreduce(x.data(), x.data(), 1000, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
  aborter.join();
  EXPECT_EQ(s.code(), Code::kAborted) << s.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(NonBlocking, SubmittedWorkCompletesInOrder) {
  run_local_ranks(3, [&](Communicator& c, int r) {
    std::vector<std::vector<float>> bufs(5, std::vector<float>(333, static_cast<float>(r + 1)));
    std::vector<std::shared_ptr<Communicator::Work>> works;
    for (auto& b : bufs) {
      float* p = b.data();
      works.push_back(c.submit([p](Communicator& comm) {
        return comm.allreduce(p, p, 333, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
      }));
    }
    for (auto& w : works) ASSERT_TRUE(Communicator::wait(*w).is_ok());
    for (auto& b : bufs) EXPECT_EQ(b[0], 6.0f);
  });
}

}  // namespace
}  // namespace gw
