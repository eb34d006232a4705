// The device collectives between real processes over UCX, each on the stand-in accelerator
// (tests/host_device_backend.hpp): the staged messages cross a real transport, and the
// results still equal the host algorithms' bit for bit; a peer killed mid-call is an error
// on the others, not a hang.
#include <signal.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "tests/host_device_backend.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "tests/test_util.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kOk = 0, kInitFailed = 10, kCallFailed = 11, kMismatch = 12, kWrongCode = 13, kTooSlow = 14;

Result<std::unique_ptr<Communicator>> join(const bootstrap::UniqueId& id, int rank, int n, milliseconds timeout) {
  CommConfig cfg;
  cfg.timeout = timeout;
  cfg.chunk_bytes = 16 << 10;
  auto comm = coll::init_communicator(
      rank, n, [&](const std::string& blob) { return bootstrap::rendezvous(id, rank, n, blob, timeout); }, cfg);
  if (comm.is_ok()) {
    const Status s =
        (*comm)->use_device_backend(std::make_unique<test::HostDeviceBackend>(static_cast<uint64_t>(rank) + 11));
    if (!s.is_ok()) return s;
  }
  return comm;
}

TEST(DeviceOverUcx, StagedMessagesGiveTheHostResultsBitForBit) {
  const int n_ranks = 3;
  const auto codes = test::fork_with_unique_id(
      {0, 1, 2}, seconds(30),
      [&](int rank, const bootstrap::UniqueId& id) {
        auto comm = join(id, rank, n_ranks, milliseconds(20000));
        if (!comm.is_ok()) return kInitFailed;
        Communicator& c = **comm;
        const size_t n = 100003;
        for (const char* spec : {"qsgd:bits=4", "topk:ratio=0.01", "none"}) {
          auto codec = test::make_codec(spec);
          ErrorFeedback host_ef(n);
          test::StandInEf dev_ef(n);
          test::DeviceVector<float> x(n);
          std::vector<float> h(n);
          const Algo algo = std::strcmp(spec, "topk:ratio=0.01") == 0 ? Algo::kSparseAllgather : Algo::kScatterReduce;
          for (int step = 0; step < 3; ++step) {
            const auto g = test::gradient(n, static_cast<uint64_t>(10 * step + rank));
            h = g;
            x.upload(g);
            if (!c.allreduce(h.data(), h.data(), n, DType::kFloat32, ReduceOp::kAvg, codec.get(), &host_ef, algo)
                     .is_ok()) {
              return kCallFailed;
            }
            if (!c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kAvg, codec.get(), &dev_ef, algo,
                                    nullptr)
                     .is_ok()) {
              return kCallFailed;
            }
            if (std::memcmp(x.download().data(), h.data(), n * sizeof(float)) != 0) return kMismatch;
          }
          std::vector<float> res(n);
          if (!dev_ef.copy_out(res.data(), n).is_ok()) return kCallFailed;
          if (std::memcmp(res.data(), host_ef.residual(), n * sizeof(float)) != 0) return kMismatch;
        }
        return kOk;
      },
      seconds(90));
  for (int rc : codes) EXPECT_EQ(rc, kOk);
}

TEST(DeviceOverUcx, KilledPeerFailsTheOthersWithinTheTimeout) {
  const auto codes = test::fork_with_unique_id(
      {0, 1, 2}, seconds(30),
      [&](int rank, const bootstrap::UniqueId& id) {
        auto comm = join(id, rank, 3, milliseconds(4000));
        if (!comm.is_ok()) return kInitFailed;
        auto codec = test::make_codec("qsgd:bits=8");
        const size_t n = 1 << 18;
        test::DeviceVector<float> x(n);
        x.upload(test::gradient(n, 1));
        auto call = [&] {
          return (*comm)->allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kAvg, codec.get(), nullptr,
                                           Algo::kScatterReduce, nullptr);
        };
        if (!call().is_ok()) return kCallFailed;
        if (rank == 2) raise(SIGKILL);
        const auto start = std::chrono::steady_clock::now();
        const Status s = call();
        if (s.is_ok()) return kCallFailed;
        if (s.code() != Code::kRemote && s.code() != Code::kTimeout && s.code() != Code::kAborted) return kWrongCode;
        if (std::chrono::steady_clock::now() - start > seconds(10)) return kTooSlow;
        return kOk;
      },
      seconds(60));
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
}

}  // namespace
}  // namespace gw
