// The device collectives (collectives/device_*.cpp) on a stand-in accelerator
// (tests/host_device_backend.hpp: host memory, an asynchronous in-order stream with random
// delays, the host codecs). With the same inputs they must give the host algorithms' results
// and residuals bit for bit, over any rank count and size, and fail cleanly. The CUDA backend
// and kernels themselves are tested on a GPU (tests/gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "gradwire/communicator.hpp"
#include "tests/device_group.hpp"
#include "tests/host_device_backend.hpp"
#include "tests/test_util.hpp"
#include "transport/local/local_transport.hpp"

namespace gw {
namespace {

using test::DeviceVector;
using test::HostDeviceBackend;
using test::StandInEf;

using test::Comms;
using test::make_group;
using test::on_ranks;

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

struct Case {
  const char* spec;
  Algo algo;
};

// Three steps of host and device all-reduce on the same gradients: every result and every
// residual must be the same bits.
void expect_same_as_host(int p, size_t n, const Case& k, bool with_ef, ReduceOp op) {
  SCOPED_TRACE(std::string(k.spec) + " " + algo_name(k.algo) + " p=" + std::to_string(p) + " n=" + std::to_string(n) +
               (with_ef ? " ef" : "") + (op == ReduceOp::kAvg ? " avg" : " sum"));
  constexpr int kSteps = 3;
  std::vector<std::vector<std::vector<float>>> host_out(kSteps), dev_out(kSteps);
  std::vector<std::vector<float>> host_res(static_cast<size_t>(p)), dev_res(static_cast<size_t>(p));
  for (auto& s : host_out) s.resize(static_cast<size_t>(p));
  for (auto& s : dev_out) s.resize(static_cast<size_t>(p));
  {
    Comms comms = make_group(p, false);
    on_ranks(comms, [&](Communicator& c, int r) {
      auto codec = test::make_codec(k.spec);
      ErrorFeedback ef(n);
      for (int step = 0; step < kSteps; ++step) {
        auto g = test::gradient(n, static_cast<uint64_t>(1000 * step + r));
        std::vector<float> out(n, -7.0f);
        const Status s =
            c.allreduce(g.data(), out.data(), n, DType::kFloat32, op, codec.get(), with_ef ? &ef : nullptr, k.algo);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        host_out[step][r] = out;
      }
      host_res[r].assign(ef.residual(), ef.residual() + n);
    });
  }
  {
    Comms comms = make_group(p, true);
    on_ranks(comms, [&](Communicator& c, int r) {
      auto codec = test::make_codec(k.spec);
      StandInEf ef(n);
      DeviceVector<float> g(n), out(n);
      for (int step = 0; step < kSteps; ++step) {
        g.upload(test::gradient(n, static_cast<uint64_t>(1000 * step + r)));
        std::memset(out.data(), 0x7F, n * sizeof(float));
        const Status s = c.allreduce_device(g.data(), out.data(), n, DType::kFloat32, op, codec.get(),
                                            with_ef ? &ef : nullptr, k.algo, nullptr);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        dev_out[step][r] = out.download();
      }
      dev_res[r].resize(n);
      ASSERT_TRUE(ef.copy_out(dev_res[r].data(), n).is_ok());
    });
  }
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(bits(dev_out[step][r]), bits(host_out[step][r])) << "step " << step << " rank " << r;
    }
  }
  if (with_ef) {
    for (int r = 0; r < p; ++r) ASSERT_EQ(bits(dev_res[r]), bits(host_res[r])) << "residual of rank " << r;
  }
}

const Case kCases[] = {
    {"qsgd:bits=8,bucket=512", Algo::kScatterReduce},
    {"qsgd:bits=2,bucket=128", Algo::kScatterReduce},
    {"sign:bucket=256", Algo::kScatterReduce},
    {"fp16", Algo::kScatterReduce},
    {"topk:ratio=0.01", Algo::kSparseAllgather},
    {"dgc:ratio=0.01", Algo::kSparseAllgather},
    {"randomk:ratio=0.05,seed=3", Algo::kSparseAllgather},
    {"topk:ratio=0.02", Algo::kScatterReduce},
    {"qsgd:bits=4", Algo::kSparseAllgather},
};

TEST(DeviceAllreduce, SameBitsAsTheHostAlgorithmsForEveryRankCountAndSize) {
  for (int p : {1, 2, 3, 5}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}, size_t{20011}}) {
      for (const Case& k : kCases) expect_same_as_host(p, n, k, true, ReduceOp::kAvg);
    }
  }
}

TEST(DeviceAllreduce, WithoutErrorFeedbackAndWithSum) {
  for (int p : {2, 4}) {
    for (const Case& k : kCases) expect_same_as_host(p, 3001, k, false, ReduceOp::kSum);
  }
}

// The policy's own choice (kAuto): the tuner alternates the compressed algorithm with the
// dense path, then keeps one; a dense call after compressed ones first sends the EF residual.
// Whatever it picks, every rank gets the same bits, and nothing is lost: the outputs summed
// over the calls plus what the residuals still hold equal the inputs summed.
TEST(DeviceAllreduce, TunedChoiceKeepsRanksTogetherAndConservesMass) {
  const int p = 2;
  const size_t n = 20011;  // above the dense threshold (64 KiB), so the policy compresses
  const int calls = 14;
  auto codec_spec = "qsgd:bits=4";
  std::vector<std::vector<double>> out_sum(p, std::vector<double>(n, 0.0)), held(p, std::vector<double>(n, 0.0));
  std::vector<std::vector<float>> last(p);
  std::vector<double> in_sum(n, 0.0);
  for (int k = 0; k < calls; ++k) {
    for (int r = 0; r < p; ++r) {
      const auto g = test::gradient(n, static_cast<uint64_t>(50 * k + r));
      for (size_t i = 0; i < n; ++i) in_sum[i] += g[i];
    }
  }
  Comms comms = make_group(p, true);
  on_ranks(comms, [&](Communicator& c, int r) {
    auto codec = test::make_codec(codec_spec);
    StandInEf ef(n);
    DeviceVector<float> x(n);
    for (int k = 0; k < calls; ++k) {
      x.upload(test::gradient(n, static_cast<uint64_t>(50 * k + r)));
      const Status s = c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), &ef,
                                          Algo::kAuto, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      const auto got = x.download();
      for (size_t i = 0; i < n; ++i) out_sum[r][i] += got[i];
      last[r] = got;
    }
    std::vector<float> res(n);
    ASSERT_TRUE(ef.copy_out(res.data(), n).is_ok());
    const coll::Partition part{n, static_cast<uint64_t>(p)};
    const size_t own = part.length(static_cast<uint64_t>(r)), start = part.start(static_cast<uint64_t>(r));
    const float* owner = ef.owner_residual(own).value();  // the one the algorithm used (same size)
    for (size_t i = 0; i < n; ++i) held[r][i] += res[i];
    for (size_t i = 0; i < own; ++i) held[r][start + i] += owner[i];
  });
  ASSERT_EQ(bits(last[0]), bits(last[1]));
  for (size_t i = 0; i < n; ++i) {
    const double accounted = out_sum[0][i] + held[0][i] + held[1][i];
    ASSERT_NEAR(accounted, in_sum[i], 1e-3 * (1.0 + std::abs(in_sum[i]))) << i;
  }
}

TEST(DeviceAllreduce, EightRanks) {
  expect_same_as_host(8, 10007, kCases[0], true, ReduceOp::kAvg);
  expect_same_as_host(8, 10007, kCases[4], true, ReduceOp::kAvg);
}

TEST(DeviceAllreduce, DenseWithoutNcclForEveryDtype) {
  for (int p : {1, 3, 4}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{4099}}) {
      Comms comms = make_group(p, true);
      on_ranks(comms, [&](Communicator& c, int r) {
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>((i * 7 + r * 13) % 41) - 20);
        DeviceVector<float> in(n);
        in.upload(x);
        // In place, with the policy's choice (no codec: the dense ring).
        ASSERT_TRUE(c.allreduce_device(in.data(), in.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                       Algo::kAuto, nullptr)
                        .is_ok());
        const auto got = in.download();
        for (size_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < p; ++q) want += static_cast<float>(static_cast<int>((i * 7 + q * 13) % 41) - 20);
          ASSERT_EQ(got[i], want) << i;
        }
        // Half precision: 2-byte elements through the same staging.
        DeviceVector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h.data()[i] = test::ref_float_to_half(static_cast<float>(r + 1));
        ASSERT_TRUE(c.allreduce_device(h.data(), h.data(), n, DType::kFloat16, ReduceOp::kSum, nullptr, nullptr,
                                       Algo::kAuto, nullptr)
                        .is_ok());
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(test::ref_half_to_float(h.data()[i]), static_cast<float>(p * (p + 1) / 2));
      });
    }
  }
}

TEST(DeviceCollectives, AllgatherAndBroadcast) {
  for (int p : {1, 2, 5}) {
    Comms comms = make_group(p, true);
    on_ranks(comms, [&](Communicator& c, int r) {
      const size_t bytes = 1031;
      DeviceVector<uint8_t> mine(bytes), all(bytes * static_cast<size_t>(p));
      for (size_t i = 0; i < bytes; ++i) mine.data()[i] = static_cast<uint8_t>(i * 3 + static_cast<size_t>(r));
      ASSERT_TRUE(c.allgather_device(mine.data(), all.data(), bytes, nullptr).is_ok());
      for (int q = 0; q < p; ++q) {
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(all.data()[static_cast<size_t>(q) * bytes + i],
                    static_cast<uint8_t>(i * 3 + static_cast<size_t>(q)));
        }
      }
      DeviceVector<uint8_t> buf(bytes);
      for (size_t i = 0; i < bytes; ++i) buf.data()[i] = r == p - 1 ? static_cast<uint8_t>(i ^ 0x5c) : 0;
      ASSERT_TRUE(c.broadcast_device(buf.data(), bytes, p - 1, nullptr).is_ok());
      for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(buf.data()[i], static_cast<uint8_t>(i ^ 0x5c));
    });
  }
}

TEST(DeviceCollectives, EveryCallStartsFromTheCallersStream) {
  std::vector<HostDeviceBackend*> backends;
  Comms comms = make_group(2, true, std::chrono::seconds(20), &backends);
  coll::StandInStream s0(50, 1), s1(50, 2);
  coll::StandInStream* streams[2] = {&s0, &s1};
  on_ranks(comms, [&](Communicator& c, int r) {
    DeviceVector<float> x(100);
    x.upload(std::vector<float>(100, 1.0f));
    ASSERT_TRUE(c.allreduce_device(x.data(), x.data(), 100, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                   Algo::kAuto, streams[r])
                    .is_ok());
    ASSERT_TRUE(c.broadcast_device(x.data(), 400, 0, streams[r]).is_ok());
    ASSERT_TRUE(c.allgather_device(x.data(), x.data(), 0, streams[r]).is_ok());
  });
  // What begin() saw: the CUDA backend makes its stream wait on an event recorded there.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(backends[static_cast<size_t>(r)]->last_stream.load(), streams[r]);
    EXPECT_EQ(backends[static_cast<size_t>(r)]->begins, 3);
  }
}

TEST(DeviceCollectives, BadArgumentsAreRefusedAndTheCommunicatorStaysUsable) {
  Comms comms = make_group(2, true);
  on_ranks(comms, [&](Communicator& c, int) {
    auto codec = test::make_codec("qsgd:bits=4");
    DeviceVector<float> x(64);
    std::vector<float> host(64, 1.0f);
    StandInEf small(10);
    Status s = c.allreduce_device(host.data(), x.data(), 64, DType::kFloat32, ReduceOp::kSum, codec.get(), nullptr,
                                  Algo::kAuto, nullptr);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("sendbuf"), std::string::npos) << s.to_string();
    s = c.allreduce_device(x.data(), x.data(), 64, DType::kFloat32, ReduceOp::kSum, codec.get(), &small, Algo::kAuto,
                           nullptr);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    s = c.allreduce_device(x.data(), x.data(), 64, DType::kFloat32, ReduceOp::kSum, codec.get(), nullptr,
                           Algo::kCompressedRing, nullptr);
    EXPECT_EQ(s.code(), Code::kUnsupported);
    EXPECT_NE(s.message().find("scatter_reduce"), std::string::npos) << s.to_string();
    s = c.allreduce_device(x.data(), x.data(), 64, DType::kFloat16, ReduceOp::kSum, codec.get(), nullptr,
                           Algo::kScatterReduce, nullptr);
    EXPECT_EQ(s.code(), Code::kUnsupported);
    s = c.broadcast_device(x.data(), 4, 2, nullptr);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    // Still works.
    x.upload(std::vector<float>(64, 2.0f));
    ASSERT_TRUE(c.allreduce_device(x.data(), x.data(), 64, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                   Algo::kAuto, nullptr)
                    .is_ok());
    EXPECT_EQ(x.download()[63], 4.0f);
  });
}

TEST(DeviceCollectives, ADeadPeerIsATimeoutNotAHang) {
  Comms comms = make_group(3, true, std::chrono::milliseconds(1500));
  auto codec = test::make_codec("qsgd:bits=8");
  const auto t0 = std::chrono::steady_clock::now();
  on_ranks(comms, [&](Communicator& c, int r) {
    if (r == 2) return;  // never calls
    DeviceVector<float> x(50000);
    x.upload(test::gradient(50000, 5));
    const Status s = c.allreduce_device(x.data(), x.data(), 50000, DType::kFloat32, ReduceOp::kAvg, codec.get(),
                                        nullptr, Algo::kScatterReduce, nullptr);
    EXPECT_EQ(s.code(), Code::kTimeout) << s.to_string();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// An argument-class error raised midway (here a device encode that refuses) leaves the peers
// mid-protocol: the failing rank's communicator breaks, so they learn it, and nobody waits
// for the full timeout.
TEST(DeviceCollectives, AnErrorMidwayBreaksTheCommunicator) {
  std::vector<HostDeviceBackend*> backends;
  Comms comms = make_group(2, true, std::chrono::seconds(30), &backends);
  backends[0]->refuse_encodes = true;
  auto codec = test::make_codec("qsgd:bits=8");
  const auto t0 = std::chrono::steady_clock::now();
  on_ranks(comms, [&](Communicator& c, int r) {
    DeviceVector<float> x(20000);
    x.upload(test::gradient(20000, 5));
    const Status s = c.allreduce_device(x.data(), x.data(), 20000, DType::kFloat32, ReduceOp::kAvg, codec.get(),
                                        nullptr, Algo::kScatterReduce, nullptr);
    EXPECT_FALSE(s.is_ok());
    if (r == 0) {
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
      EXPECT_FALSE(c.error().is_ok());
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST(DeviceCollectives, NcclIsRefusedEverywhereWhenRankZeroCannotStartIt) {
  Comms comms = make_group(3, true);
  on_ranks(comms, [&](Communicator& c, int) {
    const Status s = c.enable_nccl();
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
    EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.to_string();
    EXPECT_FALSE(c.nccl_enabled());
    DeviceVector<float> x(10);
    x.upload(std::vector<float>(10, 1.0f));
    ASSERT_TRUE(c.allreduce_device(x.data(), x.data(), 10, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                   Algo::kAuto, nullptr)
                    .is_ok());
    EXPECT_EQ(x.download()[0], 3.0f);
  });
}

// Without the stand-in: the real backend, which on a machine without a GPU (or a build
// without CUDA) is refused on every rank with the reason, and the communicator goes on.
TEST(DeviceCollectives, WithoutADeviceEveryRankGetsTheReason) {
  if (coll::make_cuda_backend().is_ok()) GTEST_SKIP() << "a CUDA device is present: tests/gpu covers this machine";
  Comms comms = make_group(2, false);
  on_ranks(comms, [&](Communicator& c, int) {
    const Status s = c.enable_nccl();
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
    std::vector<float> x(5, 1.0f);
    ASSERT_TRUE(c.allreduce(x.data(), x.data(), 5, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok());
    EXPECT_EQ(x[0], 2.0f);
  });
}

TEST(DeviceCollectives, StagedMessagesAreCheckedBeforeTheyAreCopiedUp) {
  auto codec = test::make_codec("topk:ratio=0.1");
  auto msg = test::encode(*codec, test::gradient(1000, 1));
  EXPECT_TRUE(coll::validate_staged(msg.data(), msg.size(), 1000).is_ok());
  auto wrong_count = coll::validate_staged(msg.data(), msg.size(), 999);
  EXPECT_EQ(wrong_count.status().code(), Code::kInvalidMessage);
  auto truncated = coll::validate_staged(msg.data(), msg.size() - 3, 1000);
  EXPECT_FALSE(truncated.is_ok());
  // An index past the end (the last index of the payload) must not reach the device.
  auto forged = msg;
  const auto idx = test::sparse_indices(msg);
  ASSERT_FALSE(idx.empty());
  for (size_t off = 56; off + 4 <= forged.size(); ++off) {
    uint32_t v;
    std::memcpy(&v, forged.data() + off, 4);
    if (v == idx.back()) {
      v = 5000;
      std::memcpy(forged.data() + off, &v, 4);
      break;
    }
  }
  EXPECT_EQ(coll::validate_staged(forged.data(), forged.size(), 1000).status().code(), Code::kInvalidMessage);
}

}  // namespace
}  // namespace gw
