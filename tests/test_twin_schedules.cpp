// A host algorithm and its device twin run one schedule (collectives/algorithms/schedules/):
// the schedules' keys and layout, and the twins called directly with the same Context,
// including a piece of a call cut into pieces (Context::piece > 0, as the hierarchical
// all-reduce's inter-node leg runs them), must give the same messages, results, residuals
// and EF steps bit for bit. The device side runs on the stand-in backend
// (tests/host_device_backend.hpp).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/scatter_reduce_schedule.hpp"
#include "collectives/algorithms/schedules/sparse_allgather_schedule.hpp"
#include "tests/host_device_backend.hpp"
#include "tests/test_util.hpp"
#include "transport/local/local_transport.hpp"

namespace gw::coll {
namespace {

using test::DeviceVector;
using test::HostDeviceBackend;
using test::StandInEf;

Context context(transport::Transport& tp, Scratch& scratch, uint64_t seq, uint32_t piece) {
  Context c{tp, tp.rank(), tp.size(), transport::Clock::now() + std::chrono::seconds(30), seq, 4096, scratch};
  c.piece = piece;
  return c;
}

TEST(TwinSchedules, EveryPieceHopAndChunkHasItsOwnStreamKey) {
  auto group = transport::make_local_group(3);
  Scratch scratch;
  ErrorFeedback ef(100);
  ef.set_step(5);
  std::set<uint64_t> keys;
  for (uint32_t piece = 0; piece < 4; ++piece) {
    const Context c = context(*group[1], scratch, 9, piece);
    const auto sr = ScatterReduceSchedule::make(c, 100000, &ef);
    EXPECT_EQ(sr.base_step, c.stream_step(5));  // the EF state's step, not the sequence number
    const auto sa = SparseAllgatherSchedule::make(c, 5000, &ef);
    EXPECT_EQ(sa.base_step, sr.base_step);
    for (auto phase : {ScatterReduceSchedule::kContribute, ScatterReduceSchedule::kResult}) {
      for (uint32_t k = 0; k < sr.max_chunks; ++k) {
        const EncodeContext e = sr.encode_context(phase, k);
        EXPECT_EQ(e.rank, 1u);
        EXPECT_TRUE(keys.insert(e.step).second) << "piece " << piece << " phase " << phase << " chunk " << k;
      }
    }
  }
  const Context c = context(*group[1], scratch, 9, 0);
  EXPECT_EQ(ScatterReduceSchedule::make(c, 10, static_cast<const ErrorFeedback*>(nullptr)).base_step, 9u);
}

TEST(TwinSchedules, LayoutCoversEverySegmentOnceAndPeersInStaggeredOrder) {
  auto group = transport::make_local_group(4);
  Scratch scratch;
  const Context c = context(*group[2], scratch, 0, 0);
  const auto s = ScatterReduceSchedule::make(c, 70001, static_cast<const ErrorFeedback*>(nullptr));
  uint64_t covered = 0;
  for (int seg = 0; seg < 4; ++seg) {
    for (uint32_t k = 0; k < s.seg_chunks(seg); ++k) {
      EXPECT_EQ(s.chunk_start(seg, k), covered);
      covered += s.chunk_len(seg, k);
      EXPECT_LT(s.slot(seg, k), s.per_phase());
    }
  }
  EXPECT_EQ(covered, 70001u);
  EXPECT_EQ(s.own_start(), s.part.start(2));
  EXPECT_EQ(s.send_peer(1), 3);
  EXPECT_EQ(s.send_peer(2), 0);
  EXPECT_EQ(s.tag(c, ScatterReduceSchedule::kResult, 7), c.tag(1, 7));
  const auto a = SparseAllgatherSchedule::make(c, 100000, static_cast<const ErrorFeedback*>(nullptr));
  EXPECT_EQ(a.recv_peer(1), 1);
  EXPECT_EQ(a.recv_peer(3), 3);
  EXPECT_EQ(a.op_index(3, a.pieces.count - 1), 4 * size_t{a.pieces.count} - 1);
}

using HostRun = std::function<Status(Context&, const float*, float*, size_t, Codec&, ErrorFeedback*)>;
using DeviceRun =
    std::function<Status(Context&, DeviceBackend&, const float*, float*, size_t, const Codec&, DeviceEfState*)>;

std::vector<uint32_t> bits(const float* v, size_t n) {
  std::vector<uint32_t> b(n);
  if (n > 0) std::memcpy(b.data(), v, n * sizeof(float));
  return b;
}

void on_ranks(int p, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

// Three calls of each twin on the same gradients and Contexts (sequence numbers, piece):
// results, residuals, owner residuals and steps must be the same bits.
void expect_twins_agree(int p, size_t n, const char* spec, uint32_t piece, bool with_ef, const HostRun& host,
                        const DeviceRun& device) {
  SCOPED_TRACE(std::string(spec) + " p=" + std::to_string(p) + " n=" + std::to_string(n) +
               " piece=" + std::to_string(piece) + (with_ef ? " ef" : ""));
  constexpr int kCalls = 3;
  using PerRank = std::vector<std::vector<float>>;
  std::vector<PerRank> host_out(kCalls, PerRank(static_cast<size_t>(p)));
  std::vector<PerRank> dev_out = host_out;
  PerRank host_res(static_cast<size_t>(p)), dev_res(static_cast<size_t>(p));
  PerRank host_own(static_cast<size_t>(p)), dev_own(static_cast<size_t>(p));
  std::vector<uint64_t> host_step(static_cast<size_t>(p)), dev_step(static_cast<size_t>(p));
  {
    auto group = transport::make_local_group(p);
    on_ranks(p, [&](int r) {
      Scratch scratch;
      auto codec = test::make_codec(spec);
      ErrorFeedback ef(n);
      for (int call = 0; call < kCalls; ++call) {
        Context c = context(*group[static_cast<size_t>(r)], scratch, 40 + static_cast<uint64_t>(call), piece);
        const auto g = test::gradient(n, static_cast<uint64_t>(1000 * call + r));
        std::vector<float> out(n, -7.0f);
        const Status s = host(c, g.data(), out.data(), n, *codec, with_ef ? &ef : nullptr);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        host_out[call][r] = out;
      }
      host_res[r].assign(ef.residual(), ef.residual() + n);
      host_own[r].assign(ef.owner_residual(), ef.owner_residual() + ef.owner_count());
      host_step[r] = ef.step();
    });
  }
  {
    auto group = transport::make_local_group(p);
    on_ranks(p, [&](int r) {
      Scratch scratch;
      HostDeviceBackend dev(static_cast<uint64_t>(r + 1) * 7919);
      auto codec = test::make_codec(spec);
      StandInEf ef(n);
      DeviceVector<float> g(n), out(n);
      for (int call = 0; call < kCalls; ++call) {
        Context c = context(*group[static_cast<size_t>(r)], scratch, 40 + static_cast<uint64_t>(call), piece);
        g.upload(test::gradient(n, static_cast<uint64_t>(1000 * call + r)));
        ASSERT_TRUE(dev.begin(*dev.mark(nullptr).value()).is_ok());
        const Status s = device(c, dev, g.data(), out.data(), n, *codec, with_ef ? &ef : nullptr);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        dev_out[call][r] = out.download();
      }
      dev_res[r].resize(n);
      ASSERT_TRUE(ef.copy_out(dev_res[r].data(), n).is_ok());
      dev_own[r].resize(ef.owner_count());
      ASSERT_TRUE(ef.copy_owner_out(dev_own[r].data(), ef.owner_count()).is_ok());
      dev_step[r] = ef.step();
    });
  }
  for (int call = 0; call < kCalls; ++call) {
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(bits(dev_out[call][r].data(), n), bits(host_out[call][r].data(), n))
          << "call " << call << " rank " << r;
    }
  }
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(bits(dev_res[r].data(), n), bits(host_res[r].data(), n)) << "residual of rank " << r;
    EXPECT_EQ(bits(dev_own[r].data(), dev_own[r].size()), bits(host_own[r].data(), host_own[r].size()))
        << "owner residual of rank " << r;
    EXPECT_EQ(dev_step[r], host_step[r]) << "EF step of rank " << r;
  }
}

const HostRun kHostScatterReduce = [](Context& c, const float* s, float* r, size_t n, Codec& codec, ErrorFeedback* ef) {
  return scatter_reduce_allreduce(c, s, r, n, ReduceOp::kAvg, codec, ef);
};
const DeviceRun kDeviceScatterReduce = [](Context& c, DeviceBackend& d, const float* s, float* r, size_t n,
                                          const Codec& codec, DeviceEfState* ef) {
  return device_scatter_reduce_allreduce(c, d, s, r, n, ReduceOp::kAvg, codec, ef);
};
const HostRun kHostSparseAllgather = [](Context& c, const float* s, float* r, size_t n, Codec& codec,
                                        ErrorFeedback* ef) {
  return sparse_allgather_allreduce(c, s, r, n, ReduceOp::kAvg, codec, ef);
};
const DeviceRun kDeviceSparseAllgather = [](Context& c, DeviceBackend& d, const float* s, float* r, size_t n,
                                            const Codec& codec, DeviceEfState* ef) {
  return device_sparse_allgather_allreduce(c, d, s, r, n, ReduceOp::kAvg, codec, ef);
};

// Random streams (stochastic rounding, random-k's strata) make a key that differs between
// the twins show; piece 0 is the flat call, pieces 1 and 5 those of a cut shard.
TEST(TwinSchedules, ScatterReduceTwinsAgreeOnEveryPiece) {
  for (uint32_t piece : {0u, 1u, 5u}) {
    for (int p : {2, 3}) {
      expect_twins_agree(p, 5003, "qsgd:bits=4,bucket=128,rounding=stochastic", piece, true, kHostScatterReduce,
                         kDeviceScatterReduce);
      expect_twins_agree(p, 5003, "randomk:ratio=0.05,seed=3", piece, false, kHostScatterReduce, kDeviceScatterReduce);
    }
  }
}

TEST(TwinSchedules, SparseAllgatherTwinsAgreeOnEveryPiece) {
  for (uint32_t piece : {0u, 1u, 5u}) {
    for (int p : {2, 3}) {
      expect_twins_agree(p, 5003, "randomk:ratio=0.05,seed=3", piece, true, kHostSparseAllgather,
                         kDeviceSparseAllgather);
      expect_twins_agree(p, 5003, "qsgd:bits=2,bucket=128,rounding=stochastic", piece, false, kHostSparseAllgather,
                         kDeviceSparseAllgather);
    }
  }
}

}  // namespace
}  // namespace gw::coll
