// The reduce-scatter with blocks of any sizes (Communicator::reduce_scatterv) between forked
// processes over real UCX (UCX_TLS from the test's environment): raw blocks in every dtype
// and op, codec "none" summing half-precision inputs in float32 and rounding once, lossy
// codecs whose error feedback loses no element across steps, the device twin equal to the
// host bit for bit, calls that differ between ranks failing on every rank, bad arguments
// leaving the communicator usable, and a killed or frozen peer as an error, not a hang.
#include <signal.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "compressors/half.hpp"
#include "tests/host_device_backend.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "tests/test_util.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kOk = test::kRankOk;
using test::rank_failed;
#define CALL_OK(rank, expr)                                                                                \
  do {                                                                                                     \
    const Status s_ = (expr);                                                                              \
    if (!s_.is_ok()) return rank_failed(rank, "line %d: %s: %s", __LINE__, #expr, s_.to_string().c_str()); \
  } while (0)

using Body = std::function<int(Communicator&, int rank, int np)>;

std::vector<int> run_np(int np, const Body& body, milliseconds timeout = milliseconds(30000)) {
  CommConfig cfg;
  cfg.timeout = timeout;
  cfg.chunk_bytes = 4096;  // several chunks per block even for small ones
  return test::fork_communicators(np, cfg, body, seconds(180));
}

void expect_all_ok(const std::vector<int>& codes, int np) {
  ASSERT_EQ(codes.size(), static_cast<size_t>(np));
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], kOk) << "rank " << r << " of " << np;
}

// Block layouts that stress the schedule: empty blocks, one element, primes, the longest
// block not first, and many chunks (chunk_bytes 4096 is 1024 floats).
std::vector<std::vector<size_t>> layouts(int p) {
  std::vector<std::vector<size_t>> out;
  out.push_back(std::vector<size_t>(static_cast<size_t>(p), 0));
  out.push_back(std::vector<size_t>(static_cast<size_t>(p), 1));
  std::vector<size_t> primes = {2, 4099, 7, 0, 1031, 13, 3};
  std::vector<size_t> a(static_cast<size_t>(p)), b(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    a[r] = primes[static_cast<size_t>(r) % primes.size()];
    b[r] = r == p - 1 ? 5003 : static_cast<size_t>(r);
  }
  out.push_back(a);
  out.push_back(b);
  return out;
}

size_t total(const std::vector<size_t>& counts) {
  size_t t = 0;
  for (size_t c : counts) t += c;
  return t;
}
size_t start_of(const std::vector<size_t>& counts, int r) {
  size_t t = 0;
  for (int i = 0; i < r; ++i) t += counts[i];
  return t;
}

// Small integer values: every sum, product, min and max is exact in every dtype.
int small_value(int rank, size_t i) { return static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 5) + 1; }

template <class T>
T reduce_ref(ReduceOp op, int p, size_t i) {
  double acc = small_value(0, i);
  for (int r = 1; r < p; ++r) {
    const double v = small_value(r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = v < acc ? v : acc; break;
      case ReduceOp::kMax: acc = v > acc ? v : acc; break;
    }
  }
  if (op == ReduceOp::kAvg) acc /= p;
  return static_cast<T>(acc);
}

template <class T>
int check_raw(Communicator& c, int rank, int p, ReduceOp op, const std::vector<size_t>& counts, bool in_place) {
  const size_t n = total(counts), own = start_of(counts, rank);
  std::vector<T> x(n), y(counts[rank] + 1);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(small_value(rank, i));
  T* out = in_place ? x.data() + own : y.data();
  const DType dt = std::is_same_v<T, int32_t> ? DType::kInt32 : DType::kFloat64;
  CALL_OK(rank, c.reduce_scatterv(x.data(), out, counts.data(), dt, op, nullptr, nullptr));
  for (size_t i = 0; i < counts[rank]; ++i) {
    const T want = reduce_ref<T>(op, p, own + i);
    if (out[i] != want)
      return rank_failed(rank, "raw %s op %d: element %zu is %g, want %g", dtype_name(dt), static_cast<int>(op), i,
                         static_cast<double>(out[i]), static_cast<double>(want));
  }
  return kOk;
}

TEST(ReduceScatterV, RawBlocksOfAnySizeEveryOp) {
  for (int np : {1, 2, 3, 5}) {
    expect_all_ok(run_np(np,
                         [](Communicator& c, int rank, int p) {
                           for (const auto& counts : layouts(p)) {
                             for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
                               if (int rc = check_raw<int32_t>(c, rank, p, op, counts, op == ReduceOp::kMax)) return rc;
                             }
                             if (int rc = check_raw<double>(c, rank, p, ReduceOp::kAvg, counts, true)) return rc;
                           }
                           return kOk;
                         }),
                  np);
  }
}

// Values whose float32 sum is exact but whose half-precision partial sums would round: the
// owner's float32 sum, rounded once, must come out, bit for bit.
TEST(ReduceScatterV, CodecNoneSumsHalfPrecisionInFloat32AndRoundsOnce) {
  const int np = 3;
  expect_all_ok(run_np(np,
                       [](Communicator& c, int rank, int p) {
                         auto none = test::make_codec("none");
                         const std::vector<size_t> counts = {1000, 3, 2047};
                         const size_t n = total(counts), own = start_of(counts, rank);
                         for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
                           auto value = [&](int r, size_t i) {  // representable in every dtype
                             const float base = dt == DType::kBFloat16 ? 256.0f : 2048.0f;
                             return r == 0 ? base : (i % 2 == 0 ? 1.0f : 0.5f) * static_cast<float>(r);
                           };
                           auto store = [&](float v) -> uint16_t {
                             return dt == DType::kBFloat16 ? hd::float_to_bf16(v) : hd::float_to_half(v);
                           };
                           auto load = [&](uint16_t v) {
                             return dt == DType::kBFloat16 ? hd::bf16_to_float(v) : hd::half_to_float(v);
                           };
                           for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
                             std::vector<float> xf(n), yf(counts[rank]);
                             std::vector<uint16_t> xh(n), yh(counts[rank]);
                             for (size_t i = 0; i < n; ++i) {
                               xf[i] = value(rank, i);
                               xh[i] = store(xf[i]);
                             }
                             const bool f32 = dt == DType::kFloat32;
                             CALL_OK(rank, c.reduce_scatterv(f32 ? static_cast<void*>(xf.data()) : xh.data(),
                                                             f32 ? static_cast<void*>(yf.data()) : yh.data(),
                                                             counts.data(), dt, op, none.get(), nullptr));
                             for (size_t i = 0; i < counts[rank]; ++i) {
                               float s = value(rank, own + i);
                               for (int r = 0; r < p; ++r) {
                                 if (r != rank) s += value(r, own + i);
                               }
                               if (op == ReduceOp::kAvg) s /= static_cast<float>(p);
                               const float got = f32 ? yf[i] : load(yh[i]);
                               const float want = f32 ? s : load(store(s));
                               if (std::memcmp(&got, &want, sizeof got) != 0)
                                 return rank_failed(rank, "%s op %d element %zu: %.9g, want %.9g", dtype_name(dt),
                                                    static_cast<int>(op), i, got, want);
                             }
                           }
                         }
                         return kOk;
                       }),
                np);
}

// With error feedback nothing is lost: for every element of a block, what the owner received
// over the steps plus what each sender still holds in its residual equals the sum of the
// inputs (to float rounding). The owner's own part of its residual stays zero.
TEST(ReduceScatterV, ErrorFeedbackLosesNoElementAcrossSteps) {
  for (int np : {3, 4}) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 struct Run {
                   const char* spec;
                   DType dtype;  // bfloat16: the input is widened into the residual, the output rounded once
                 };
                 for (const Run& run : {Run{"qsgd:bits=4", DType::kFloat32}, Run{"topk:ratio=0.05", DType::kFloat32},
                                        Run{"sign", DType::kFloat32}, Run{"bf16:rounding=stochastic", DType::kFloat32},
                                        Run{"qsgd:bits=4", DType::kBFloat16}}) {
                   const char* spec = run.spec;
                   const bool bf16 = run.dtype == DType::kBFloat16;
                   auto made = Codec::create(spec);
                   if (!made.is_ok()) {
                     if (std::strncmp(spec, "bf16", 4) == 0) continue;  // rounding key not in this build
                     return rank_failed(rank, "codec %s: %s", spec, made.status().to_string().c_str());
                   }
                   std::unique_ptr<Codec> codec = std::move(made).value();
                   std::vector<size_t> counts(static_cast<size_t>(p));
                   for (int r = 0; r < p; ++r) counts[r] = r == 1 ? 0 : 3001 + 1000 * static_cast<size_t>(r);
                   const size_t n = total(counts), own = start_of(counts, rank), mine = counts[rank];
                   ErrorFeedback ef(n);
                   std::vector<double> sent(n, 0.0), got(mine, 0.0);
                   std::vector<float> out(mine);
                   std::vector<uint16_t> g16(n), out16(mine);
                   const int steps = 6;
                   for (int t = 0; t < steps; ++t) {
                     auto g = test::gradient(n, static_cast<uint64_t>(1000 * t + rank));
                     if (bf16) {
                       for (size_t i = 0; i < n; ++i) g[i] = hd::bf16_to_float(g16[i] = hd::float_to_bf16(g[i]));
                     }
                     for (size_t i = 0; i < n; ++i) sent[i] += g[i];
                     CALL_OK(rank, c.reduce_scatterv(bf16 ? static_cast<const void*>(g16.data()) : g.data(),
                                                     bf16 ? static_cast<void*>(out16.data()) : out.data(),
                                                     counts.data(), run.dtype, ReduceOp::kSum, codec.get(), &ef));
                     for (size_t i = 0; i < mine; ++i) got[i] += bf16 ? hd::bf16_to_float(out16[i]) : out[i];
                   }
                   if (ef.step() != static_cast<uint64_t>(steps))
                     return rank_failed(rank, "ef step %llu", (unsigned long long)ef.step());
                   for (size_t i = 0; i < mine; ++i) {
                     if (ef.residual()[own + i] != 0.0f)
                       return rank_failed(rank, "%s: own residual %zu nonzero", spec, i);
                   }
                   // Every rank's inputs and residuals, to check the owner's totals.
                   std::vector<float> mine_f(2 * n), all(2 * n * static_cast<size_t>(p));
                   for (size_t i = 0; i < n; ++i) {
                     mine_f[i] = static_cast<float>(sent[i]);
                     mine_f[n + i] = ef.residual()[i];
                   }
                   CALL_OK(rank, c.allgather(mine_f.data(), all.data(), 2 * n * sizeof(float)));
                   for (size_t i = 0; i < mine; ++i) {
                     double in = 0, kept = 0, scale = 0;
                     for (int r = 0; r < p; ++r) {
                       const float* theirs = all.data() + 2 * n * static_cast<size_t>(r);
                       in += theirs[own + i];
                       kept += theirs[n + own + i];
                       scale += std::fabs(theirs[own + i]);
                     }
                     // bfloat16 outputs are rounded once per step: 2^-8 of each step's sum at most.
                     if (std::fabs(got[i] + kept - in) > (bf16 ? 5e-3 : 1e-4) * (scale + 1.0))
                       return rank_failed(rank, "%s: element %zu: received %.7g + residuals %.7g != inputs %.7g", spec,
                                          own + i, got[i], kept, in);
                   }
                 }
                 return kOk;
               }),
        np);
  }
}

// The device twin (stand-in accelerator) sends the same messages and gets the same results
// and residuals as the host algorithm, bit for bit.
TEST(ReduceScatterV, DeviceBuffersGiveTheHostResultsBitForBit) {
  const int np = 3;
  expect_all_ok(
      run_np(np,
             [](Communicator& c, int rank, int) {
               CALL_OK(rank, c.use_device_backend(
                                 std::make_unique<test::HostDeviceBackend>(static_cast<uint64_t>(rank) + 5)));
               const std::vector<size_t> counts = {2049, 0, 4003};
               const size_t n = total(counts), mine = counts[rank];
               for (const char* spec : {"qsgd:bits=4", "topk:ratio=0.02", "none", "null"}) {
                 // null: no codec, raw on the host, the exact "none" wire on the device
                 const bool null = std::strcmp(spec, "null") == 0;
                 auto codec = null ? nullptr : test::make_codec(spec);
                 // Without EF a stochastic codec's random stream is keyed by the call's
                 // sequence number, which differs between the host call and the device one.
                 const bool stochastic = std::strncmp(spec, "qsgd", 4) == 0;
                 for (bool with_ef : {true, false}) {
                   if ((!with_ef && stochastic) || (with_ef && null)) continue;
                   ErrorFeedback host_ef(n);
                   test::StandInEf dev_ef(n);
                   test::DeviceVector<float> x(n), y(mine + 1);
                   std::vector<float> h(mine + 1);
                   for (int step = 0; step < 3; ++step) {
                     const auto g = test::gradient(n, static_cast<uint64_t>(10 * step + rank));
                     x.upload(g);
                     CALL_OK(rank, c.reduce_scatterv(g.data(), h.data(), counts.data(), DType::kFloat32, ReduceOp::kAvg,
                                                     codec.get(), with_ef ? &host_ef : nullptr));
                     CALL_OK(rank, c.reduce_scatterv_device(x.data(), y.data(), counts.data(), DType::kFloat32,
                                                            ReduceOp::kAvg, codec.get(), with_ef ? &dev_ef : nullptr,
                                                            nullptr));
                     const auto d = y.download();
                     if (std::memcmp(d.data(), h.data(), mine * sizeof(float)) != 0)
                       return rank_failed(rank, "%s ef=%d step %d: device result differs", spec, with_ef, step);
                   }
                   if (with_ef) {
                     std::vector<float> res(n);
                     CALL_OK(rank, dev_ef.copy_out(res.data(), n));
                     if (std::memcmp(res.data(), host_ef.residual(), n * sizeof(float)) != 0)
                       return rank_failed(rank, "%s: device residual differs", spec);
                   }
                 }
               }
               return kOk;
             }),
      np);
}

TEST(ReduceScatterV, MismatchedCallsFailOnEveryRank) {
  const int np = 3;
  const std::vector<test::MismatchCase> cases = {
      {"counts",
       [](Communicator& c, int rank) {
         std::vector<size_t> counts = {5, 5, 5};
         if (rank == 2) counts = {4, 6, 5};
         std::vector<float> x(15, 1.0f), y(6);
         return c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
       },
       {"reduce_scatterv", "recvcounts digest"}},
      {"codec",
       [](Communicator& c, int rank) {
         auto codec = test::make_codec(rank == 0 ? "qsgd:bits=8" : "qsgd:bits=4");
         std::vector<size_t> counts = {100, 100, 100};
         std::vector<float> x(300, 1.0f), y(100);
         return c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum, codec.get(),
                                  nullptr);
       },
       {"reduce_scatterv", "bits=8", "bits=4"}},
      {"raw against codec none",
       [](Communicator& c, int rank) {
         auto codec = test::make_codec("none");
         std::vector<size_t> counts = {100, 100, 100};
         std::vector<float> x(300, 1.0f), y(100);
         return c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum,
                                  rank == 1 ? codec.get() : nullptr, nullptr);
       },
       {"reduce_scatterv", "codec=none", "codec=null (raw)"}},
      {"ring reduce-scatter against reduce_scatterv",
       [](Communicator& c, int rank) {
         std::vector<size_t> counts = {100, 100, 100};
         std::vector<float> x(300, 1.0f), y(100);
         if (rank == 0) return c.reduce_scatter(x.data(), y.data(), 100, DType::kFloat32, ReduceOp::kSum);
         return c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
       },
       {"reduce_scatter ", "reduce_scatterv"}},
      {"dtype",
       [](Communicator& c, int rank) {
         auto codec = test::make_codec("none");
         std::vector<size_t> counts = {64, 64, 64};
         std::vector<float> x(192, 1.0f), y(64);
         const DType dt = rank == 2 ? DType::kBFloat16 : DType::kFloat16;
         return c.reduce_scatterv(x.data(), y.data(), counts.data(), dt, ReduceOp::kSum, codec.get(), nullptr);
       },
       {"bfloat16", "float16"}},
  };
  for (const test::MismatchCase& k : cases) {
    SCOPED_TRACE(k.what);
    expect_all_ok(run_np(np, [&](Communicator& c, int rank, int) { return test::expect_invalid_usage(k, c, rank); }),
                  np);
  }
}

TEST(ReduceScatterV, BadArgumentsLeaveTheCommunicatorUsable) {
  for (int np : {1, 2}) {
    expect_all_ok(
        run_np(
            np,
            [](Communicator& c, int rank, int p) {
              auto qsgd = test::make_codec("qsgd:bits=8");
              std::vector<float> x(8 * static_cast<size_t>(p), 1.0f), y(8);
              std::vector<size_t> counts(static_cast<size_t>(p), 8);
              const size_t huge = std::numeric_limits<size_t>::max() - 3;
              std::vector<size_t> big(static_cast<size_t>(p), 8), wrap(static_cast<size_t>(p), huge / 2 + 7);
              big[0] = huge;
              ErrorFeedback small(3);
              struct Case {
                const char* name;
                Status s;
                Code code;
                const char* names;
              };
              const Case cases[] = {
                  {"null counts",
                   c.reduce_scatterv(x.data(), y.data(), nullptr, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr),
                   Code::kInvalidArgument, "recvcounts"},
                  {"ef without codec",
                   c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum, nullptr,
                                     &small),
                   Code::kInvalidArgument, "codec"},
                  {"int32 with a codec",
                   c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kInt32, ReduceOp::kSum, qsgd.get(),
                                     nullptr),
                   Code::kUnsupported, "int32"},
                  {"max with a codec",
                   c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kMax, qsgd.get(),
                                     nullptr),
                   Code::kInvalidArgument, "max"},
                  {"ef of the wrong size",
                   c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum, qsgd.get(),
                                     &small),
                   Code::kInvalidArgument, "error-feedback"},
                  {"huge count",
                   c.reduce_scatterv(x.data(), y.data(), big.data(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr),
                   Code::kInvalidArgument, "recvcounts[0]"},
                  {"counts whose sum overflows",
                   c.reduce_scatterv(x.data(), y.data(), wrap.data(), DType::kUInt8, ReduceOp::kSum, nullptr, nullptr),
                   Code::kInvalidArgument, p == 1 ? "recvcounts[0]" : "recvcounts"},
                  {"null sendbuf",
                   c.reduce_scatterv(nullptr, y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum, nullptr,
                                     nullptr),
                   Code::kInvalidArgument, "sendbuf"},
                  {"null recvbuf",
                   c.reduce_scatterv(x.data(), nullptr, counts.data(), DType::kFloat32, ReduceOp::kSum, qsgd.get(),
                                     nullptr),
                   Code::kInvalidArgument, "recvbuf"},
                  {"dtype 9",
                   c.reduce_scatterv(x.data(), y.data(), counts.data(), static_cast<DType>(9), ReduceOp::kSum, nullptr,
                                     nullptr),
                   Code::kInvalidArgument, "dtype"},
              };
              for (const Case& k : cases) {
                if (k.s.code() != k.code)
                  return rank_failed(rank, "%s: expected %s, got %s", k.name, code_name(k.code),
                                     k.s.to_string().c_str());
                if (k.s.message().find(k.names) == std::string::npos)
                  return rank_failed(rank, "%s: the message does not name %s: %s", k.name, k.names,
                                     k.s.message().c_str());
              }
              CALL_OK(rank, c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kSum,
                                              qsgd.get(), nullptr));
              if (y[7] != static_cast<float>(p)) return rank_failed(rank, "after the errors: %g", y[7]);
              CALL_OK(rank, c.error());
              return kOk;
            }),
        np);
  }
}

// A peer that dies mid-sequence, or stops calling, fails the call on the others: a death within
// seconds (kRemote), a freeze at the timeout (kTimeout); never a hang or a wrong result.
TEST(ReduceScatterV, DeadOrFrozenPeerIsAnErrorNotAHang) {
  for (const bool freeze : {false, true}) {
    SCOPED_TRACE(freeze ? "stopped calling" : "killed");
    const int np = 3;
    const auto codes = run_np(
        np,
        [freeze](Communicator& c, int rank, int p) {
          auto codec = test::make_codec("qsgd:bits=4");
          const size_t n = 3 * (1u << 18);  // a step well inside the timeout, sanitized builds too
          std::vector<size_t> counts(static_cast<size_t>(p), n / static_cast<size_t>(p));
          std::vector<float> x(n, 1.0f), y(counts[rank]);
          ErrorFeedback ef(n);
          for (int step = 0;; ++step) {
            if (rank == 2 && step == 3) {
              if (freeze) std::this_thread::sleep_for(seconds(7));  // alive, but never calls
              _exit(kOk);
            }
            const auto t0 = std::chrono::steady_clock::now();
            const Status s =
                c.reduce_scatterv(x.data(), y.data(), counts.data(), DType::kFloat32, ReduceOp::kAvg, codec.get(), &ef);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (s.is_ok()) {
              if (y[0] != 1.0f && step == 0) return rank_failed(rank, "step 0 gave %g", y[0]);
              if (step > 50) return rank_failed(rank, "no failure after 50 steps");
              continue;
            }
            const Code want = freeze ? Code::kTimeout : Code::kRemote;
            if (s.code() != want)
              return rank_failed(rank, "expected %s, got %s", code_name(want), s.to_string().c_str());
            const double limit = freeze ? 5.0 : 3.0;  // a freeze: the 3 s timeout, and some
            if (secs > limit) return rank_failed(rank, "the failure took %.2f s", secs);
            return kOk;
          }
        },
        milliseconds(3000));
    for (int r = 0; r < 2; ++r) EXPECT_EQ(codes[r], kOk) << "rank " << r;
  }
}

}  // namespace
}  // namespace gw
