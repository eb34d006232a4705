// The all-gather on a compressed wire (Communicator::allgather_compressed) between forked
// processes over real UCX (UCX_TLS from the test's environment): every block is the decode of
// its rank's message and every rank holds the same bits, for any rank count and size, in
// float32, float16 and bfloat16, in place too; calls that differ between ranks fail on every
// rank; bad arguments leave the communicator usable; a killed or frozen peer is an error, not
// a hang. The device twin (stand-in accelerator) gives the host's bits.
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "compressors/half.hpp"
#include "tests/host_device_backend.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kOk = test::kRankOk;
constexpr size_t kChunkBytes = 4096;  // 1024 floats a message: several messages even for small blocks
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
  cfg.chunk_bytes = kChunkBytes;
  return test::fork_communicators(np, cfg, body, seconds(180));
}

void expect_all_ok(const std::vector<int>& codes, int np) {
  ASSERT_EQ(codes.size(), static_cast<size_t>(np));
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], kOk) << "rank " << r << " of " << np;
}

float value(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7919 + static_cast<size_t>(rank) * 104729) % 2001) - 1000) / 97.0f;
}

uint16_t narrow(float v, DType dt) { return dt == DType::kBFloat16 ? hd::float_to_bf16(v) : hd::float_to_half(v); }
float widen(uint16_t v, DType dt) { return dt == DType::kBFloat16 ? hd::bf16_to_float(v) : hd::half_to_float(v); }

// Rank r's block as every rank must hold it: each message (1024 elements) encoded from r's
// input as the algorithm does and decoded, in the output dtype. Deterministic codecs only.
std::vector<uint8_t> expected_block(Codec& codec, int r, size_t n, DType dt) {
  const size_t es = dtype_size(dt);
  std::vector<uint8_t> out(n * es);
  const size_t per = kChunkBytes / sizeof(float);
  std::vector<float> wide(per), dec(per);
  std::vector<uint16_t> half(per);
  std::vector<uint8_t> msg;
  for (size_t off = 0; off < n; off += per) {
    const size_t len = n - off < per ? n - off : per;
    for (size_t i = 0; i < len; ++i) {
      wide[i] = value(r, off + i);
      if (dt != DType::kFloat32) wide[i] = widen(half[i] = narrow(wide[i], dt), dt);
    }
    const bool as_is = dt != DType::kFloat32 && codec.accepts(dt);
    const void* src = as_is ? static_cast<const void*>(half.data()) : wide.data();
    const DType src_dt = as_is ? dt : DType::kFloat32;
    msg.resize(codec.max_encoded_bytes(len, src_dt));
    const size_t bytes =
        codec.encode(src, len, src_dt, EncodeContext{0, static_cast<uint32_t>(r)}, msg.data(), msg.size()).value();
    EXPECT_TRUE(decode(msg.data(), bytes, dec.data(), len, DType::kFloat32, DecodeMode::kOverwrite).is_ok());
    for (size_t i = 0; i < len; ++i) {
      if (dt == DType::kFloat32) {
        std::memcpy(out.data() + (off + i) * 4, &dec[i], 4);
      } else {
        const uint16_t h = narrow(dec[i], dt);
        std::memcpy(out.data() + (off + i) * 2, &h, 2);
      }
    }
  }
  return out;
}

TEST(AllgatherCompressed, EveryBlockIsItsRanksDecodeAndEveryRankHoldsTheSameBits) {
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  for (int np : {1, 2, 3, 5}) {
    SCOPED_TRACE("np=" + std::to_string(np));
    expect_all_ok(
        run_np(
            np,
            [&](Communicator& c, int rank, int p) {
              const char* specs[] = {
                  "qsgd:bits=8,rounding=nearest,bucket=256", "bf16", "fp16", "none", "qsgd:bits=4", "topk:ratio=0.1"};
              for (const char* spec : specs) {
                auto codec = test::make_codec(spec);
                const bool deterministic = std::strcmp(spec, "qsgd:bits=4") != 0;
                for (DType dt : dtypes) {
                  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
                    for (bool in_place : {false, true}) {
                      const size_t es = dtype_size(dt);
                      std::vector<uint8_t> x(n * es), out(n * static_cast<size_t>(p) * es + 1, 0xAB);
                      for (size_t i = 0; i < n; ++i) {
                        const float v = value(rank, i);
                        if (dt == DType::kFloat32) {
                          std::memcpy(x.data() + i * 4, &v, 4);
                        } else {
                          const uint16_t h = narrow(v, dt);
                          std::memcpy(x.data() + i * 2, &h, 2);
                        }
                      }
                      uint8_t* own = out.data() + static_cast<size_t>(rank) * n * es;
                      const void* send = x.data();
                      if (in_place) {
                        if (n > 0) std::memcpy(own, x.data(), n * es);
                        send = own;
                      }
                      CALL_OK(rank, c.allgather_compressed(send, out.data(), n, dt, codec.get()));
                      if (out.back() != 0xAB) return rank_failed(rank, "%s: wrote past recvbuf", spec);
                      out.pop_back();
                      if (deterministic) {
                        for (int r = 0; r < p; ++r) {
                          const std::vector<uint8_t> want = expected_block(*codec, r, n, dt);
                          if (n > 0 &&
                              std::memcmp(out.data() + static_cast<size_t>(r) * n * es, want.data(), n * es) != 0)
                            return rank_failed(rank, "%s %s n=%zu%s: block %d is not its decode", spec, dtype_name(dt),
                                               n, in_place ? " in place" : "", r);
                        }
                      }
                      // The same bits on every rank (the stochastic codec included).
                      std::vector<uint8_t> all(out.size() * static_cast<size_t>(p));
                      CALL_OK(rank, c.allgather(out.data(), all.data(), out.size()));
                      for (int r = 0; r < p; ++r) {
                        if (!out.empty() &&
                            std::memcmp(all.data() + static_cast<size_t>(r) * out.size(), out.data(), out.size()) != 0)
                          return rank_failed(rank, "%s %s n=%zu: rank %d holds other bits", spec, dtype_name(dt), n, r);
                      }
                    }
                  }
                }
              }
              // codec null is the raw all-gather, in any dtype.
              std::vector<int64_t> xi(3, rank * 10 + 1), oi(3 * static_cast<size_t>(p));
              CALL_OK(rank, c.allgather_compressed(xi.data(), oi.data(), 3, DType::kInt64, nullptr));
              for (int r = 0; r < p; ++r) {
                if (oi[static_cast<size_t>(r) * 3 + 2] != r * 10 + 1)
                  return rank_failed(rank, "raw: block %d holds %lld", r,
                                     static_cast<long long>(oi[static_cast<size_t>(r) * 3 + 2]));
              }
              return kOk;
            }),
        np);
  }
}

// The device twin (stand-in accelerator) gives the host call's bits, in place too, and
// refuses what it does not take by name.
TEST(AllgatherCompressed, DeviceBuffersGiveTheHostResultsBitForBit) {
  for (int np : {1, 3}) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 CALL_OK(rank, c.use_device_backend(
                                   std::make_unique<test::HostDeviceBackend>(static_cast<uint64_t>(rank) + 5)));
                 for (const char* spec : {"qsgd:bits=8,rounding=nearest,bucket=256", "bf16", "topk:ratio=0.02"}) {
                   auto codec = test::make_codec(spec);
                   for (size_t n : {size_t{0}, size_t{1}, size_t{4099}}) {
                     for (bool in_place : {false, true}) {
                       std::vector<float> x(n), h(n * static_cast<size_t>(p));
                       for (size_t i = 0; i < n; ++i) x[i] = value(rank, i);
                       test::DeviceVector<float> dx(n), dy(n * static_cast<size_t>(p));
                       dx.upload(x);
                       float* dsend = dx.data();
                       if (in_place) {
                         std::vector<float> seeded(n * static_cast<size_t>(p), 0.0f);
                         std::copy(x.begin(), x.end(), seeded.begin() + static_cast<std::ptrdiff_t>(rank * n));
                         dy.upload(seeded);
                         dsend = dy.data() + static_cast<size_t>(rank) * n;
                       }
                       CALL_OK(rank, c.allgather_compressed(x.data(), h.data(), n, DType::kFloat32, codec.get()));
                       CALL_OK(rank, c.allgather_compressed_device(dsend, dy.data(), n, DType::kFloat32, codec.get(),
                                                                   nullptr));
                       const auto d = dy.download();
                       if (!h.empty() && std::memcmp(d.data(), h.data(), h.size() * sizeof(float)) != 0)
                         return rank_failed(rank, "%s n=%zu%s: the device result differs", spec, n,
                                            in_place ? " in place" : "");
                     }
                   }
                 }
                 auto bf16 = test::make_codec("bf16");
                 test::DeviceVector<float> dx(8), dy(8 * static_cast<size_t>(p));
                 const Status s =
                     c.allgather_compressed_device(dx.data(), dy.data(), 4, DType::kBFloat16, bf16.get(), nullptr);
                 if (s.code() != Code::kUnsupported || s.message().find("float32") == std::string::npos)
                   return rank_failed(rank, "bfloat16 on the device: %s", s.to_string().c_str());
                 return kOk;
               }),
        np);
  }
}

TEST(AllgatherCompressed, MismatchedCallsFailOnEveryRank) {
  const int np = 3;
  const std::vector<test::MismatchCase> cases = {
      {"count",
       [](Communicator& c, int rank) {
         auto codec = test::make_codec("bf16");
         std::vector<float> x(6, 1.0f), y(18);
         return c.allgather_compressed(x.data(), y.data(), rank == 1 ? 6 : 5, DType::kFloat32, codec.get());
       },
       {"allgather_compressed", "count=6", "count=5"}},
      {"codec",
       [](Communicator& c, int rank) {
         auto codec = test::make_codec(rank == 0 ? "qsgd:bits=8" : "qsgd:bits=4");
         std::vector<float> x(100, 1.0f), y(300);
         return c.allgather_compressed(x.data(), y.data(), 100, DType::kFloat32, codec.get());
       },
       {"allgather_compressed", "bits=8", "bits=4"}},
      {"dtype",
       [](Communicator& c, int rank) {
         auto codec = test::make_codec("qsgd:bits=8");
         std::vector<float> x(64, 1.0f), y(192);
         return c.allgather_compressed(x.data(), y.data(), 64, rank == 2 ? DType::kBFloat16 : DType::kFloat16,
                                       codec.get());
       },
       {"bfloat16", "float16"}},
      {"raw against compressed",
       [](Communicator& c, int rank) {
         auto codec = test::make_codec("bf16");
         std::vector<float> x(64, 1.0f), y(192);
         return c.allgather_compressed(x.data(), y.data(), 64, DType::kFloat32, rank == 1 ? nullptr : codec.get());
       },
       {"allgather_compressed", "allgather "}},
  };
  for (const test::MismatchCase& k : cases) {
    SCOPED_TRACE(k.what);
    expect_all_ok(run_np(np, [&](Communicator& c, int rank, int) { return test::expect_invalid_usage(k, c, rank); }),
                  np);
  }
}

TEST(AllgatherCompressed, BadArgumentsLeaveTheCommunicatorUsable) {
  for (int np : {1, 2}) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 auto qsgd = test::make_codec("qsgd:bits=8,rounding=nearest");
                 std::vector<float> x(8, 1.0f), y(8 * static_cast<size_t>(p));
                 const size_t huge = std::numeric_limits<size_t>::max() - 3;
                 struct Case {
                   const char* name;
                   Status s;
                   Code code;
                   const char* names;
                 };
                 const Case cases[] = {
                     {"int32 with a codec", c.allgather_compressed(x.data(), y.data(), 8, DType::kInt32, qsgd.get()),
                      Code::kUnsupported, "int32"},
                     {"huge count", c.allgather_compressed(x.data(), y.data(), huge, DType::kFloat32, qsgd.get()),
                      Code::kInvalidArgument, "larger than any buffer"},
                     {"count times ranks overflows",
                      c.allgather_compressed(x.data(), y.data(), (size_t{1} << 47) + 1, DType::kUInt8, qsgd.get()),
                      Code::kInvalidArgument, p == 1 ? "" : "recvbuf"},
                     {"null sendbuf", c.allgather_compressed(nullptr, y.data(), 8, DType::kFloat32, qsgd.get()),
                      Code::kInvalidArgument, "sendbuf"},
                     {"null recvbuf", c.allgather_compressed(x.data(), nullptr, 8, DType::kFloat32, qsgd.get()),
                      Code::kInvalidArgument, "recvbuf"},
                     {"dtype 9", c.allgather_compressed(x.data(), y.data(), 8, static_cast<DType>(9), qsgd.get()),
                      Code::kInvalidArgument, "dtype"},
                 };
                 for (const Case& k : cases) {
                   // One rank: 2^47 + 1 bytes is a buffer, so only the dtype check (uint8 with a
                   // codec) can refuse it.
                   const Code want = (p == 1 && k.names[0] == '\0') ? Code::kUnsupported : k.code;
                   if (k.s.code() != want)
                     return rank_failed(rank, "%s: expected %s, got %s", k.name, code_name(want),
                                        k.s.to_string().c_str());
                   if (k.s.message().find(k.names) == std::string::npos)
                     return rank_failed(rank, "%s: the message does not name %s: %s", k.name, k.names,
                                        k.s.message().c_str());
                 }
                 CALL_OK(rank, c.allgather_compressed(x.data(), y.data(), 8, DType::kFloat32, qsgd.get()));
                 if (y[8 * static_cast<size_t>(p) - 1] != 1.0f)
                   return rank_failed(rank, "after the errors: %g", y[8 * static_cast<size_t>(p) - 1]);
                 CALL_OK(rank, c.error());
                 return kOk;
               }),
        np);
  }
}

// A peer that dies mid-sequence, or stops calling, fails the call on the others: a death within
// seconds (kRemote), a freeze at the timeout (kTimeout); never a hang or a wrong result.
TEST(AllgatherCompressed, DeadOrFrozenPeerIsAnErrorNotAHang) {
  for (const bool freeze : {false, true}) {
    SCOPED_TRACE(freeze ? "stopped calling" : "killed");
    const int np = 3;
    const auto codes = run_np(
        np,
        [freeze](Communicator& c, int rank, int p) {
          auto codec = test::make_codec("qsgd:bits=8,rounding=nearest");
          const size_t n = 1u << 18;
          std::vector<float> x(n, 1.0f), y(n * static_cast<size_t>(p));
          for (int step = 0;; ++step) {
            if (rank == 2 && step == 3) {
              if (freeze) std::this_thread::sleep_for(seconds(7));  // alive, but never calls
              _exit(kOk);
            }
            const auto t0 = std::chrono::steady_clock::now();
            const Status s = c.allgather_compressed(x.data(), y.data(), n, DType::kFloat32, codec.get());
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (s.is_ok()) {
              if (y.back() != 1.0f) return rank_failed(rank, "step %d gave %g", step, y.back());
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
