// The hierarchical all-reduce on device buffers between forked processes over real UCX, each
// rank on the stand-in accelerator (tests/host_device_backend.hpp), ranks laid out on nodes
// through GW_HOST_ID: on 2x2, 2x3 and 3x2 every codec gives the host hierarchical path's
// bits (outputs and residuals) for the same inputs, and the same bits on every rank; dense
// calls give the exact sum for every tested op and dtype; error feedback stays on this
// rank's shard and loses nothing, also when flat and hierarchical calls share one state;
// uneven layouts run flat; mismatched calls and a killed peer fail every rank.
#include <signal.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "collectives/common/context.hpp"
#include "compressors/half.hpp"
#include "tests/host_device_backend.hpp"
#include "tests/multiproc/hier_test_util.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "tests/multiproc/shm_node_nccl.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

using namespace hier_test;  // NOLINT: the shared helpers of these tests

using Body = std::function<int(Communicator&, int rank, int np)>;

constexpr size_t kMaxCount = 30011;  // the largest buffer a test passes (node NCCL slots hold it)

// Forks one rank per entry of node_of (its node, through GW_HOST_ID), each with the stand-in
// accelerator (node_nccl: with a shared-memory stand-in for the node's NCCL communicator),
// and runs body.
std::vector<int> run_nodes(const std::vector<int>& node_of, Algo inter, const Body& body, bool node_nccl = false) {
  static int runs = 0;
  const std::string shm_prefix =
      "/dev/shm/gw_test_node_nccl_" + std::to_string(getpid()) + "_" + std::to_string(runs++) + "_";
  std::vector<int> ranks;
  for (size_t r = 0; r < node_of.size(); ++r) ranks.push_back(static_cast<int>(r));
  const int np = static_cast<int>(node_of.size());
  const milliseconds timeout(60000);
  auto codes = test::fork_with_unique_id(
      ranks, seconds(30),
      [&](int rank, const bootstrap::UniqueId& id) {
        setenv("GW_HOST_ID", ("node" + std::to_string(node_of[static_cast<size_t>(rank)])).c_str(), 1);
        setenv("GW_TUNE", "0", 1);  // the hierarchical path itself, not the tuner's trials
        CommConfig cfg;
        cfg.timeout = timeout;
        cfg.chunk_bytes = 4096;  // many chunks in every leg
        cfg.dense_threshold_bytes = 0;
        cfg.inter_algo = inter;
        auto comm = coll::init_communicator(
            rank, np, [&](const std::string& blob) { return bootstrap::rendezvous(id, rank, np, blob, cfg.timeout); },
            cfg);
        if (!comm.is_ok()) {
          fail(rank, "init failed: " + comm.status().to_string());
          return kInitFailed;
        }
        auto backend = std::make_unique<test::HostDeviceBackend>(static_cast<uint64_t>(rank) + 5);
        if (node_nccl) {
          const int node = node_of[static_cast<size_t>(rank)];
          int local_rank = 0, local_size = 0;
          for (int r = 0; r < np; ++r) {
            if (node_of[static_cast<size_t>(r)] != node) continue;
            if (r < rank) ++local_rank;
            ++local_size;
          }
          backend->node = test::ShmNodeNccl::open(shm_prefix + std::to_string(node), local_size, local_rank,
                                                  (kMaxCount + 64) * sizeof(float));
          if (backend->node == nullptr) return kInitFailed;
        }
        const test::HostDeviceBackend* used = backend.get();  // the communicator's until it ends
        const Status s = (*comm)->use_device_backend(std::move(backend));
        if (!s.is_ok() || !(*comm)->barrier().is_ok()) return kInitFailed;
        const int rc = body(**comm, rank, np);
        if (rc == kOk && node_nccl && used->node_calls == 0) return fail(rank, "the node's NCCL legs never ran");
        return rc;
      },
      seconds(300));
  if (node_nccl) {
    for (int node : node_of) unlink((shm_prefix + std::to_string(node)).c_str());
  }
  return codes;
}

std::vector<int> layout(int nodes, int per_node) {
  std::vector<int> node_of;
  for (int r = 0; r < nodes * per_node; ++r) node_of.push_back(r / per_node);
  return node_of;
}

void expect_all_ok(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], kOk) << "rank " << r;
}

std::string where(const char* spec, size_t n, ReduceOp op, int t) {
  return std::string(spec) + " n " + std::to_string(n) + " " + red_op_name(op) + " step " + std::to_string(t);
}

struct CodecCase {
  const char* spec;
  Algo inter;    // kAuto: the policy's
  bool stepped;  // stochastic without EF: the random stream follows the call's sequence number,
                 // which differs between the host call and the device call: compared with the sum
  double bound;  // for those: relative error of the running sum
};
constexpr int kSteps = 4;

// kSteps all-reduces of one buffer on the host and on the device with the same inputs:
// the device path's result and residual are the host hierarchical path's bits; with EF the
// residual is zero outside this rank's shard and the outputs plus every rank's residual are
// the true sum (to 1e-5).
int run_codec(Communicator& c, int rank, int np, const CodecCase& cc, size_t n, ReduceOp op) {
  auto codec = Codec::create(cc.spec);
  if (!codec.is_ok()) return fail(rank, codec.status().to_string());
  const bool ef_on = (*codec)->spec().ef;
  ErrorFeedback host_ef(n);
  test::StandInEf dev_ef(n);
  test::DeviceVector<float> x(n);
  std::vector<double> got(n, 0.0), want(n, 0.0);
  for (int t = 0; t < kSteps; ++t) {
    const auto g = grad(n, rank, t);
    std::vector<float> host_out(n, -99.0f);
    CALL_OK(rank, c.allreduce(g.data(), host_out.data(), n, DType::kFloat32, op, codec->get(),
                              ef_on ? &host_ef : nullptr, Algo::kAuto));
    if (c.stats()->last_algo != Algo::kHierarchical)
      return fail(rank, "host ran " + std::string(algo_name(c.stats()->last_algo)));
    x.upload(g);
    if (c.choose_algo(n, DType::kFloat32, codec->get(), Algo::kAuto, /*on_device=*/true) != Algo::kHierarchical) {
      return fail(rank, "the policy does not report hierarchical for the device call");
    }
    CALL_OK(rank, c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, op, codec->get(),
                                     ef_on ? &dev_ef : nullptr, Algo::kAuto, nullptr));
    if (c.stats()->last_algo != Algo::kHierarchical) {
      return fail(rank, "device ran " + std::string(algo_name(c.stats()->last_algo)));
    }
    const auto out = x.download();
    if (int e = same_everywhere(c, rank, out)) return e;
    if (!cc.stepped && n > 0 && std::memcmp(out.data(), host_out.data(), n * sizeof(float)) != 0) {
      return fail(rank, where(cc.spec, n, op, t) + ": the device result differs from the host hierarchical result");
    }
    const auto s = true_sum(n, np, t);
    for (size_t i = 0; i < n; ++i) {
      got[i] += out[i];
      want[i] += op == ReduceOp::kAvg ? s[i] / static_cast<float>(np) : s[i];
    }
    if (ef_on) {
      std::vector<float> res(n);
      CALL_OK(rank, dev_ef.copy_out(res.data(), n));
      if (n > 0 && std::memcmp(res.data(), host_ef.residual(), n * sizeof(float)) != 0) {
        return fail(rank, where(cc.spec, n, op, t) + ": the device residual differs from the host's");
      }
      const coll::Partition part{n, static_cast<uint64_t>(c.local_size())};
      const uint64_t lo = part.start(static_cast<uint64_t>(c.local_rank()));
      const uint64_t hi = lo + part.length(static_cast<uint64_t>(c.local_rank()));
      for (size_t i = 0; i < n; ++i) {
        if ((i < lo || i >= hi) && res[i] != 0.0f)
          return fail(rank, "EF residual outside this rank's shard at " + std::to_string(i));
      }
      if (dev_ef.step() != static_cast<uint64_t>(t + 1)) return fail(rank, "EF step " + std::to_string(dev_ef.step()));
    }
  }
  double bound = cc.bound;
  if (ef_on) {
    std::vector<float> rest(n), flushed(n);
    CALL_OK(rank, dev_ef.copy_out(rest.data(), n));
    if (op == ReduceOp::kAvg) {
      for (float& v : rest) v /= static_cast<float>(np);
    }
    CALL_OK(rank, c.allreduce(rest.data(), flushed.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr));
    for (size_t i = 0; i < n; ++i) got[i] += flushed[i];
    bound = 1e-5;
  }
  const double err = rel_err(got, want);
  if (!(err <= bound)) {
    return fail(rank, where(cc.spec, n, op, kSteps) + ": running-sum error " + std::to_string(err) + " above " +
                          std::to_string(bound));
  }
  return kOk;
}

const CodecCase kCases[] = {
    {"fp16", Algo::kAuto, false, 0.0},  // small integers: exact
    {"qsgd:bits=8,bucket=512", Algo::kScatterReduce, true, 0.05},
    {"qsgd:bits=4,ef=1", Algo::kScatterReduce, false, 0},
    {"sign", Algo::kScatterReduce, false, 100.0},  // deterministic: compared with the host bits only
    {"sign:ef=1", Algo::kScatterReduce, false, 0},
    {"topk:ratio=0.25,ef=1", Algo::kAuto, false, 0},
    {"topk:ratio=0.25,ef=1", Algo::kScatterReduce, false, 0},
    {"topk:ratio=0.1", Algo::kSparseAllgather, false, 100.0},
    {"dgc:ratio=0.1,ef=1", Algo::kSparseAllgather, false, 0},
};

class DeviceHierarchicalCodecs : public ::testing::TestWithParam<int> {};

TEST_P(DeviceHierarchicalCodecs, EveryCodecGivesTheHostHierarchicalBits) {
  const int shapes[][2] = {{2, 2}, {3, 2}, {2, 3}};
  const int nodes = shapes[GetParam()][0], per_node = shapes[GetParam()][1];
  for (const CodecCase& cc : kCases) {
    SCOPED_TRACE(std::string(cc.spec) + " between nodes " + algo_name(cc.inter));
    expect_all_ok(run_nodes(layout(nodes, per_node), cc.inter, [&](Communicator& c, int rank, int np) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{997}, size_t{20011}}) {
        if (int e = run_codec(c, rank, np, cc, n, ReduceOp::kSum)) return e;
      }
      return run_codec(c, rank, np, cc, 4099, ReduceOp::kAvg);
    }));
  }
}
INSTANTIATE_TEST_SUITE_P(Layouts, DeviceHierarchicalCodecs, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == 0 ? "2x2" : i.param == 1 ? "3x2" : "2x3");
                         });

// The legs inside a node through the node's NCCL communicator (its shared-memory stand-in),
// with the shards padded where the node size does not divide the count: the host
// hierarchical path's bits, compressed (EF included) and dense.
TEST(DeviceHierarchical, NcclLegsInsideNodesGiveTheHostBits) {
  const int shapes[][2] = {{2, 2}, {3, 2}, {2, 3}};
  const CodecCase cases[] = {
      {"qsgd:bits=4,ef=1", Algo::kScatterReduce, false, 0},
      {"topk:ratio=0.25,ef=1", Algo::kAuto, false, 0},
      {"fp16", Algo::kAuto, false, 0.0},
  };
  for (const auto& shape : shapes) {
    SCOPED_TRACE(std::to_string(shape[0]) + "x" + std::to_string(shape[1]));
    expect_all_ok(run_nodes(
        layout(shape[0], shape[1]), Algo::kAuto,
        [&](Communicator& c, int rank, int np) {
          for (const CodecCase& cc : cases) {
            for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{997}, size_t{20011}}) {
              if (int e = run_codec(c, rank, np, cc, n, ReduceOp::kSum)) return e;
            }
            if (int e = run_codec(c, rank, np, cc, 4099, ReduceOp::kAvg)) return e;
          }
          for (size_t n : {size_t{1}, size_t{7}, size_t{1009}, kMaxCount}) {
            for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
              const auto g = grad(n, rank, 2);
              std::vector<float> host_out(n);
              CALL_OK(rank, c.allreduce(g.data(), host_out.data(), n, DType::kFloat32, op, nullptr, nullptr));
              test::DeviceVector<float> x(n);
              x.upload(g);
              CALL_OK(rank, c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, op, nullptr, nullptr,
                                               Algo::kAuto, nullptr));
              if (c.stats()->last_algo != Algo::kHierarchical) return fail(rank, "dense device call ran flat");
              if (std::memcmp(x.download().data(), host_out.data(), n * sizeof(float)) != 0) {
                return fail(rank, std::string("dense ") + red_op_name(op) + " n " + std::to_string(n) +
                                      " differs from the host");
              }
            }
          }
          return kOk;
        },
        /*node_nccl=*/true));
  }
}

// Dense device calls (no NCCL here) run hierarchically and give the exact result: every
// tested op and dtype, sizes around the shard boundaries, in place and not.
TEST(DeviceHierarchical, DenseCallsAreExactOnEveryLayout) {
  const int shapes[][2] = {{2, 2}, {3, 2}, {2, 3}};
  for (const auto& shape : shapes) {
    expect_all_ok(run_nodes(layout(shape[0], shape[1]), Algo::kAuto, [&](Communicator& c, int rank, int np) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1009}, kMaxCount}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          const auto g = grad(n, rank, 1);
          test::DeviceVector<float> x(n), y(n);
          x.upload(g);
          CALL_OK(rank, c.allreduce_device(x.data(), y.data(), n, DType::kFloat32, op, nullptr, nullptr, Algo::kAuto,
                                           nullptr));
          if (c.stats()->last_algo != Algo::kHierarchical)
            return fail(rank, "ran " + std::string(algo_name(c.stats()->last_algo)));
          const auto out = y.download();
          std::vector<std::vector<float>> all;
          for (int r = 0; r < np; ++r) all.push_back(grad(n, r, 1));
          for (size_t i = 0; i < n; ++i) {
            float want = op == ReduceOp::kMax ? -1e30f : 0.0f;
            for (int r = 0; r < np; ++r) {
              const float v = all[static_cast<size_t>(r)][i];
              want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
            }
            if (op == ReduceOp::kAvg) want /= static_cast<float>(np);
            if (std::fabs(out[i] - want) > 1e-6f * std::max(1.0f, std::fabs(want))) {
              return fail(rank, std::string("dense ") + red_op_name(op) + " n " + std::to_string(n) + " at " +
                                    std::to_string(i) + ": " + std::to_string(out[i]) + " want " +
                                    std::to_string(want));
            }
          }
        }
        // int32 sums and fp16 sums of small integers, in place.
        std::vector<int32_t> gi(n);
        std::vector<uint16_t> gh(n);
        for (size_t i = 0; i < n; ++i) {
          gi[i] = static_cast<int32_t>((i * 31 + static_cast<size_t>(rank) * 1000003) % 100000) - 50000;
          gh[i] = hd::float_to_half(static_cast<float>((i + static_cast<size_t>(rank)) % 9));
        }
        test::DeviceVector<int32_t> xi(n);
        test::DeviceVector<uint16_t> xh(n);
        xi.upload(gi);
        xh.upload(gh);
        CALL_OK(rank, c.allreduce_device(xi.data(), xi.data(), n, DType::kInt32, ReduceOp::kSum, nullptr, nullptr,
                                         Algo::kAuto, nullptr));
        CALL_OK(rank, c.allreduce_device(xh.data(), xh.data(), n, DType::kFloat16, ReduceOp::kSum, nullptr, nullptr,
                                         Algo::kAuto, nullptr));
        const auto oi = xi.download();
        const auto oh = xh.download();
        for (size_t i = 0; i < n; ++i) {
          int64_t wi = 0;
          float wh = 0;
          for (int r = 0; r < np; ++r) {
            wi += static_cast<int32_t>((i * 31 + static_cast<size_t>(r) * 1000003) % 100000) - 50000;
            wh += static_cast<float>((i + static_cast<size_t>(r)) % 9);
          }
          if (oi[i] != static_cast<int32_t>(wi)) return fail(rank, "int32 sum at " + std::to_string(i));
          if (hd::half_to_float(oh[i]) != wh) return fail(rank, "fp16 sum at " + std::to_string(i));
        }
      }
      return kOk;
    }));
  }
}

// Layouts the hierarchical path does not take (uneven nodes, one node, one rank per node):
// device calls run flat, asked for or not, and still give the right sum.
TEST(DeviceHierarchical, OtherLayoutsRunFlat) {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1}, {0, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 2}};
  for (const auto& node_of : layouts) {
    expect_all_ok(run_nodes(node_of, Algo::kAuto, [&](Communicator& c, int rank, int np) {
      auto codec = Codec::create("topk:ratio=0.5,ef=1");
      if (!codec.is_ok()) return kFailed;
      const size_t n = 1031;
      test::StandInEf ef(n);
      test::DeviceVector<float> x(n);
      x.upload(grad(n, rank, 0));
      for (Algo a : {Algo::kAuto, Algo::kHierarchical}) {
        CALL_OK(rank, c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(), &ef, a,
                                         nullptr));
        if (c.stats()->last_algo == Algo::kHierarchical) return fail(rank, "ran hierarchical on an uneven layout");
        if (c.choose_algo(n, DType::kFloat32, codec->get(), a, true) != c.stats()->last_algo) {
          return fail(rank, "the policy reports another algorithm than the one that ran");
        }
        x.upload(grad(n, rank, 0));
      }
      test::DeviceVector<float> y(n);
      CALL_OK(rank, c.allreduce_device(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                       Algo::kAuto, nullptr));
      if (c.stats()->last_algo == Algo::kHierarchical) return fail(rank, "dense ran hierarchical on an uneven layout");
      const auto out = y.download();
      const auto want = true_sum(n, np, 0);
      for (size_t i = 0; i < n; ++i) {
        if (out[i] != want[i]) return fail(rank, "flat dense sum at " + std::to_string(i));
      }
      return kOk;
    }));
  }
}

// One device EF state used by flat and hierarchical calls in turn: nothing is lost (outputs
// plus the final residual are the true sum to 1e-5), and after a hierarchical call the
// residual is zero outside this rank's shard.
TEST(DeviceHierarchical, SwitchingBetweenFlatAndHierarchicalKeepsTheResidual) {
  for (const char* spec : {"topk:ratio=0.1,ef=1", "qsgd:bits=2,ef=1"}) {
    SCOPED_TRACE(spec);
    expect_all_ok(run_nodes(layout(2, 2), Algo::kAuto, [&](Communicator& c, int rank, int np) {
      auto codec = Codec::create(spec);
      if (!codec.is_ok()) return kFailed;
      const size_t n = 5003;
      test::StandInEf ef(n);
      test::DeviceVector<float> x(n);
      std::vector<double> got(n, 0.0), want(n, 0.0);
      const Algo other = std::strncmp(spec, "topk", 4) == 0 ? Algo::kSparseAllgather : Algo::kScatterReduce;
      const Algo order[] = {Algo::kScatterReduce, Algo::kHierarchical,  other, Algo::kHierarchical,
                            Algo::kHierarchical,  Algo::kScatterReduce, other, Algo::kHierarchical};
      int t = 0;
      for (int round = 0; round < 3; ++round) {
        for (Algo a : order) {
          x.upload(grad(n, rank, t));
          CALL_OK(rank, c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(), &ef, a,
                                           nullptr));
          if (c.stats()->last_algo != a) return fail(rank, std::string("ran ") + algo_name(c.stats()->last_algo));
          const auto out = x.download();
          const auto s = true_sum(n, np, t++);
          for (size_t i = 0; i < n; ++i) {
            got[i] += out[i];
            want[i] += s[i];
          }
        }
      }
      // The last call was hierarchical: the owner-side residuals were folded into the
      // residual, which now holds all that is left, and only on this rank's shard.
      std::vector<float> rest(n), flushed(n);
      CALL_OK(rank, ef.copy_out(rest.data(), n));
      const coll::Partition part{n, 2};
      const uint64_t lo = part.start(static_cast<uint64_t>(c.local_rank()));
      const uint64_t hi = lo + part.length(static_cast<uint64_t>(c.local_rank()));
      for (size_t i = 0; i < n; ++i) {
        if ((i < lo || i >= hi) && rest[i] != 0.0f)
          return fail(rank, "residual outside the shard at " + std::to_string(i));
      }
      CALL_OK(rank, c.allreduce(rest.data(), flushed.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr));
      for (size_t i = 0; i < n; ++i) got[i] += flushed[i];
      const double err = rel_err(got, want);
      if (err > 1e-5) return fail(rank, "running sum plus residual off by " + std::to_string(err));
      return kOk;
    }));
  }
}

// A device call that differs on one rank (count, codec, algorithm) fails on every rank with
// kInvalidUsage, never succeeds with wrong data.
TEST(DeviceHierarchical, MismatchedCallsFailOnEveryRank) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    expect_all_ok(run_nodes(layout(2, 2), Algo::kAuto, [&](Communicator& c, int rank, int) {
      auto q8 = Codec::create("qsgd:bits=8");
      auto q4 = Codec::create("qsgd:bits=4");
      if (!q8.is_ok() || !q4.is_ok()) return kFailed;
      const size_t n = 4096 + (variant == 0 && rank == 3 ? 1 : 0);
      Codec* codec = variant == 1 && rank == 2 ? q4->get() : q8->get();
      const Algo a = variant == 2 && rank == 0 ? Algo::kScatterReduce : Algo::kAuto;
      test::DeviceVector<float> x(n);
      x.upload(std::vector<float>(n, 1.0f));
      usleep(200000);  // every rank out of the first barrier: the mismatch breaks the communicator
      const Status s =
          c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, codec, nullptr, a, nullptr);
      // Stay up a while: a rank that exits at once can reach a slower one as a lost
      // connection before that one has read the mismatching descriptor.
      sleep(2);
      if (s.is_ok()) return fail(rank, "mismatched call succeeded");
      if (s.code() != Code::kInvalidUsage) return fail(rank, "mismatch gave " + s.to_string());
      return kOk;
    }));
  }
}

// A peer killed between calls: every survivor's next hierarchical device all-reduce fails
// within seconds (the timeout is a minute), whether or not it talks to the dead rank directly.
TEST(DeviceHierarchical, KilledPeerFailsEveryRankWithinSeconds) {
  for (const char* spec : {"none", "qsgd:bits=8,ef=1"}) {
    SCOPED_TRACE(spec);
    const auto codes = run_nodes(layout(2, 2), Algo::kAuto, [&](Communicator& c, int rank, int) {
      auto codec = Codec::create(spec);
      if (!codec.is_ok()) return kFailed;
      const size_t n = 1 << 17;
      test::StandInEf ef(n);
      test::DeviceVector<float> x(n);
      x.upload(grad(n, rank, 0));
      auto call = [&] {
        return c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(), &ef,
                                  Algo::kAuto, nullptr);
      };
      CALL_OK(rank, call());
      if (c.stats()->last_algo != Algo::kHierarchical) return fail(rank, "not hierarchical");
      if (rank == 3) {
        usleep(300000);  // the others have finished the first call
        raise(SIGKILL);
      }
      const auto start = std::chrono::steady_clock::now();
      const Status s = call();
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s.is_ok()) return fail(rank, "succeeded without rank 3");
      if (took > 15) return fail(rank, "the error took " + std::to_string(took) + " s: " + s.to_string());
      return kOk;
    });
    EXPECT_EQ(codes[0], kOk);
    EXPECT_EQ(codes[1], kOk);
    EXPECT_EQ(codes[2], kOk);
    EXPECT_EQ(codes[3], 128 + SIGKILL);
  }
}

}  // namespace
}  // namespace gw
