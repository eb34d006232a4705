// The hierarchical all-reduce between forked processes over real UCX (UCX_TLS from the
// test's environment), ranks laid out on nodes through GW_HOST_ID: every codec with and
// without error feedback and every inter-node algorithm on 2x2, 3x2 and 2x3; every rank gets
// the same bits; error feedback leaves a residual only on this rank's shard (the inter-node
// leg); switching between flat and hierarchical calls on one EF state loses no gradient;
// mismatched calls fail on every rank; a killed peer fails the others within seconds; a
// launcher hint that disagrees with the host identities is warned about; sparse all-gather
// (raw and dense) goes hierarchical too. The dense path
// (every op, dtype, size and layout) is in test_dense_collectives.
#include <signal.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "collectives/common/context.hpp"
#include "tests/multiproc/hier_test_util.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

using namespace hier_test;  // NOLINT: the shared helpers of these tests

struct Layout {
  int nodes, per_node;
  int np() const { return nodes * per_node; }
};

using Body = std::function<int(Communicator&, int rank, int np)>;

// Forks the ranks of layout (rank r on node r / per_node, through GW_HOST_ID) and runs body.
std::vector<int> run_layout(const Layout& l, const CommConfig& base, const Body& body,
                            const std::function<void(int)>& before_init = nullptr) {
  std::vector<int> ranks;
  for (int r = 0; r < l.np(); ++r) ranks.push_back(r);
  return test::fork_with_unique_id(
      ranks, seconds(30),
      [&](int rank, const bootstrap::UniqueId& id) {
        setenv("GW_HOST_ID", ("node" + std::to_string(rank / l.per_node)).c_str(), 1);
        setenv("GW_TUNE", "0", 1);  // the hierarchical path itself, not the trials of flat ones
        if (before_init) before_init(rank);
        CommConfig cfg = base;
        auto comm = coll::init_communicator(
            rank, l.np(),
            [&](const std::string& blob) { return bootstrap::rendezvous(id, rank, l.np(), blob, cfg.timeout); }, cfg);
        if (!comm.is_ok()) {
          fail(rank, "init failed: " + comm.status().to_string());
          return kInitFailed;
        }
        if (!(*comm)->barrier().is_ok()) return kInitFailed;
        return body(**comm, rank, l.np());
      },
      seconds(240));
}

CommConfig config(Algo inter = Algo::kAuto) {
  CommConfig c;
  c.timeout = milliseconds(60000);
  c.chunk_bytes = 4096;  // many chunks in every leg
  c.dense_threshold_bytes = 0;
  c.inter_algo = inter;
  return c;
}

void expect_all_ok(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], kOk) << "rank " << r;
}

struct CodecCase {
  const char* spec;
  Algo inter;    // kAuto: the policy's
  double bound;  // without EF: relative error of the running sum after kSteps calls
};
constexpr int kSteps = 12;

// kSteps all-reduces of one buffer: every rank's bits equal; without EF the running sum of
// the outputs close to the true one; with EF a residual on this rank's shard only, and
// nothing lost: the running sum plus every rank's residual (sent dense) is the true one.
int run_codec(Communicator& c, int rank, int np, const CodecCase& cc, size_t n, ReduceOp op) {
  auto codec = Codec::create(cc.spec);
  if (!codec.is_ok()) return fail(rank, codec.status().to_string());
  const bool ef_on = (*codec)->spec().ef;
  ErrorFeedback ef(n);
  std::vector<double> got(n, 0.0), want(n, 0.0);
  for (int t = 0; t < kSteps; ++t) {
    const auto g = grad(n, rank, t);
    std::vector<float> out(n, -99.0f);
    CALL_OK(rank, c.allreduce(g.data(), out.data(), n, DType::kFloat32, op, codec->get(), ef_on ? &ef : nullptr,
                              Algo::kAuto));
    if (c.stats()->last_algo != Algo::kHierarchical)
      return fail(rank, std::string("ran ") + algo_name(c.stats()->last_algo));
    if (int e = same_everywhere(c, rank, out)) return e;
    const auto s = true_sum(n, np, t);
    for (size_t i = 0; i < n; ++i) {
      got[i] += out[i];
      want[i] += op == ReduceOp::kAvg ? s[i] / static_cast<float>(np) : s[i];
    }
    if (ef_on) {
      const coll::Partition part{n, static_cast<uint64_t>(c.local_size())};
      const uint64_t lo = part.start(static_cast<uint64_t>(c.local_rank())),
                     hi = lo + part.length(static_cast<uint64_t>(c.local_rank()));
      for (size_t i = 0; i < n; ++i) {
        if ((i < lo || i >= hi) && ef.residual()[i] != 0.0f) {
          return fail(rank, "EF residual " + std::to_string(ef.residual()[i]) + " at " + std::to_string(i) +
                                " outside this rank's shard [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
        }
      }
      if (ef.step() != static_cast<uint64_t>(t + 1)) return fail(rank, "EF step " + std::to_string(ef.step()));
    }
  }
  double bound = cc.bound;
  if (ef_on) {
    std::vector<float> rest(ef.residual(), ef.residual() + n), flushed(n);
    CALL_OK(rank, c.allreduce(rest.data(), flushed.data(), n, DType::kFloat32, op, nullptr, nullptr, Algo::kAuto));
    for (size_t i = 0; i < n; ++i) got[i] += flushed[i];
    bound = 1e-5;
  }
  const double err = rel_err(got, want);
  if (!(err <= bound)) {
    std::ostringstream o;
    o << cc.spec << " (" << algo_name(cc.inter) << " between nodes, n " << n << ", " << red_op_name(op)
      << "): running-sum error " << err << " above " << bound;
    return fail(rank, o.str());
  }
  return kOk;
}

const CodecCase kCases[] = {
    {"fp16", Algo::kAuto, 0.0},  // small integers: exact
    {"fp16", Algo::kCompressedRing, 0.0},
    {"fp16", Algo::kRing, 0.0},
    {"qsgd:bits=8,bucket=512", Algo::kScatterReduce, 0.05},  // two stochastic roundings
    {"qsgd:bits=4,ef=1", Algo::kCompressedRing, 0},
    {"topk:ratio=0.25,ef=1", Algo::kAuto, 0},
    {"topk:ratio=0.25,ef=1", Algo::kScatterReduce, 0},
    {"dgc:ratio=0.1,ef=1", Algo::kSparseAllgather, 0},
    {"randomk:ratio=0.5,ef=1", Algo::kAuto, 0},
    {"sign:ef=1", Algo::kScatterReduce, 0},
};

class HierarchicalCodecs : public ::testing::TestWithParam<int> {};

TEST_P(HierarchicalCodecs, EveryCodecAndInterNodeAlgorithm) {
  const Layout layouts[] = {{2, 2}, {3, 2}, {2, 3}};
  const Layout l = layouts[GetParam()];
  for (const CodecCase& cc : kCases) {
    SCOPED_TRACE(std::string(cc.spec) + " between nodes " + algo_name(cc.inter));
    expect_all_ok(run_layout(l, config(cc.inter), [&](Communicator& c, int rank, int np) {
      if (c.node_count() != l.nodes || c.local_size() != l.per_node || c.local_rank() != rank % l.per_node) {
        return fail(rank, "topology " + std::to_string(c.node_count()) + " nodes, local " +
                              std::to_string(c.local_rank()) + " of " + std::to_string(c.local_size()));
      }
      for (size_t n : {size_t{1}, size_t{5}, size_t{997}, size_t{20000}}) {
        if (int e = run_codec(c, rank, np, cc, n, ReduceOp::kSum)) return e;
      }
      return run_codec(c, rank, np, cc, 4099, ReduceOp::kAvg);
    }));
  }
}
INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalCodecs, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == 0 ? "2x2" : i.param == 1 ? "3x2" : "2x3");
                         });

// One EF state used by flat and hierarchical calls in turn: what one path left in the
// residual reaches the sum through the other (the running sum stays close), and after a
// hierarchical call the residual is zero outside this rank's shard.
TEST(Hierarchical, SwitchingBetweenFlatAndHierarchicalKeepsTheResidual) {
  // Top-k (sparse results, one piece) and qsgd (2 pieces a shard, the flat residual
  // flushed on the way into the node's segment).
  const std::pair<const char*, size_t> cases[] = {{"topk:ratio=0.1,ef=1", 5003}, {"qsgd:bits=4,ef=1", 1200007}};
  for (const auto& [spec, n] : cases) {
    SCOPED_TRACE(spec);
    expect_all_ok(run_layout({2, 2}, config(), [&, spec = spec, n = n](Communicator& c, int rank, int np) {
      auto codec = Codec::create(spec);
      if (!codec.is_ok()) return kFailed;
      ErrorFeedback ef(n);
      std::vector<double> got(n, 0.0), want(n, 0.0);
      const Algo order[] = {Algo::kScatterReduce, Algo::kHierarchical,    Algo::kCompressedRing, Algo::kHierarchical,
                            Algo::kHierarchical,  Algo::kSparseAllgather, Algo::kHierarchical};
      int t = 0;
      for (int round = 0; round < 4; ++round) {
        for (Algo a : order) {
          const auto g = grad(n, rank, t);
          std::vector<float> out(n);
          CALL_OK(rank, c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(), &ef, a));
          const auto s = true_sum(n, np, t++);
          for (size_t i = 0; i < n; ++i) {
            got[i] += out[i];
            want[i] += s[i];
          }
        }
      }
      // The last call was hierarchical: the residual holds all that is left (the owner-side
      // residuals were folded into it), so sending it dense completes the sum.
      std::vector<float> rest(ef.residual(), ef.residual() + n), flushed(n);
      CALL_OK(rank, c.allreduce(rest.data(), flushed.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                Algo::kAuto));
      for (size_t i = 0; i < n; ++i) got[i] += flushed[i];
      const double err = rel_err(got, want);
      if (err > 1e-5)
        return fail(rank, std::string(spec) + ": running sum plus residual off by " + std::to_string(err));
      return kOk;
    }));
  }
}

// Shards past the pipeline's piece size (2 MiB) cross the nodes in pieces, each its own
// lossy all-reduce with its own EF view: the same checks as above (same bits everywhere, EF
// only on the shard, one EF step per call, nothing lost).
TEST(Hierarchical, LossyCallsInPiecesKeepEveryProperty) {
  const CodecCase cases[] = {
      {"qsgd:bits=4,ef=1", Algo::kScatterReduce, 0},
      {"sign:ef=1", Algo::kCompressedRing, 0},
      {"qsgd:bits=8", Algo::kScatterReduce, 0.05},  // no EF: the pieces' random streams
  };
  for (const CodecCase& cc : cases) {
    SCOPED_TRACE(std::string(cc.spec) + " between nodes " + algo_name(cc.inter));
    expect_all_ok(run_layout({2, 2}, config(cc.inter), [&](Communicator& c, int rank, int np) {
      if (int e = run_codec(c, rank, np, cc, 1500007, ReduceOp::kSum)) return e;  // 3 pieces a shard
      return run_codec(c, rank, np, cc, 1100009, ReduceOp::kAvg);                 // 2 pieces
    }));
  }
}

// A sparse codec between nodes: each shard's inter-node messages reach every local rank
// through the node's segment and each decodes them itself. The result is, to the bit, the
// codec applied to every node's sum of the shard, decoded in node order over zeros (divided
// by the ranks for kAvg), with and without error feedback (first call: the residual is zero).
TEST(Hierarchical, SparseResultsAreEachNodesCompressedShardSummed) {
  for (const Layout& l : {Layout{2, 2}, Layout{3, 2}, Layout{2, 3}}) {
    for (const char* spec : {"topk:ratio=0.1", "topk:ratio=0.05,ef=1", "dgc:ratio=0.1,ef=1"}) {
      SCOPED_TRACE(std::string(spec) + " on " + std::to_string(l.nodes) + "x" + std::to_string(l.per_node));
      expect_all_ok(run_layout(l, config(Algo::kSparseAllgather), [&](Communicator& c, int rank, int np) {
        auto codec = Codec::create(spec);
        if (!codec.is_ok()) return fail(rank, codec.status().to_string());
        const bool ef_on = (*codec)->spec().ef;
        for (size_t n : {size_t{1}, size_t{7}, size_t{1001}, size_t{40009}}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            ErrorFeedback ef(n);
            const auto g = grad(n, rank, 2);
            std::vector<float> out(n, -99.0f);
            CALL_OK(rank, c.allreduce(g.data(), out.data(), n, DType::kFloat32, op, codec->get(), ef_on ? &ef : nullptr,
                                      Algo::kHierarchical));
            // Every node's sum of its ranks' gradients (small integers: exact in any order).
            std::vector<float> want(n, 0.0f);
            const coll::Partition shards{n, static_cast<uint64_t>(l.per_node)};
            auto fresh = Codec::create(spec);
            if (!fresh.is_ok()) return kFailed;
            for (int s = 0; s < l.per_node; ++s) {
              const size_t lo = shards.start(static_cast<uint64_t>(s)), len = shards.length(static_cast<uint64_t>(s));
              for (int node = 0; node < l.nodes; ++node) {
                std::vector<float> sum(len, 0.0f);
                for (int lr = 0; lr < l.per_node; ++lr) {
                  const auto gr = grad(n, node * l.per_node + lr, 2);
                  for (size_t i = 0; i < len; ++i) sum[i] += gr[lo + i];
                }
                std::vector<uint8_t> m((*fresh)->max_encoded_bytes(len, DType::kFloat32));
                auto bytes = (*fresh)->encode(sum.data(), len, DType::kFloat32,
                                              EncodeContext{0, static_cast<uint32_t>(node)}, m.data(), m.size());
                if (!bytes.is_ok()) return fail(rank, bytes.status().to_string());
                CALL_OK(rank,
                        decode(m.data(), *bytes, want.data() + lo, len, DType::kFloat32, DecodeMode::kAccumulate));
              }
            }
            if (op == ReduceOp::kAvg) {
              for (float& v : want) v /= static_cast<float>(np);
            }
            if (c.stats()->last_algo != Algo::kHierarchical) return fail(rank, "did not run hierarchical");
            for (size_t i = 0; i < n; ++i) {
              if (std::memcmp(&out[i], &want[i], sizeof(float)) != 0) {
                return fail(rank, std::string(spec) + " n " + std::to_string(n) + " " + red_op_name(op) + ": element " +
                                      std::to_string(i) + " is " + std::to_string(out[i]) + ", want " +
                                      std::to_string(want[i]));
              }
            }
          }
        }
        return kOk;
      }));
    }
  }
}

// Sparse all-gather on hierarchical layouts: every rank's message (some empty) in rank order,
// and the dense form the same bits as decoding every message in rank order here.
TEST(Hierarchical, SparseAllgatherOnEveryLayout) {
  for (const Layout& l : {Layout{2, 2}, Layout{3, 2}, Layout{2, 3}}) {
    expect_all_ok(run_layout(l, config(), [&](Communicator& c, int rank, int np) {
      auto msg_of = [](int r) {
        std::vector<uint8_t> m(static_cast<size_t>((r * 37 % 11) * 13));
        for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(r * 31 + static_cast<int>(i));
        return m;
      };
      std::vector<uint8_t> want;
      for (int r = 0; r < np; ++r) {
        const auto m = msg_of(r);
        want.insert(want.end(), m.begin(), m.end());
      }
      const auto mine = msg_of(rank);
      std::vector<uint8_t> out(want.size() + 5, 0xee);
      std::vector<size_t> lengths(static_cast<size_t>(np));
      CALL_OK(rank, c.sparse_allgather(mine.data(), mine.size(), out.data(), out.size(), lengths.data()));
      if (!want.empty() && std::memcmp(out.data(), want.data(), want.size()) != 0)
        return fail(rank, "gathered bytes differ");
      for (int r = 0; r < np; ++r) {
        if (lengths[static_cast<size_t>(r)] != msg_of(r).size())
          return fail(rank, "length of rank " + std::to_string(r));
      }
      // Dense: top-k messages of every rank's gradient.
      auto codec = Codec::create("topk:ratio=0.05");
      if (!codec.is_ok()) return kFailed;
      const size_t n = 30011;
      auto encode = [&](int r) {
        const auto g = grad(n, r, 3);
        std::vector<uint8_t> m((*codec)->max_encoded_bytes(n, DType::kFloat32));
        auto len = (*codec)->encode(g.data(), n, DType::kFloat32, EncodeContext{7, static_cast<uint32_t>(r)}, m.data(),
                                    m.size());
        m.resize(len.is_ok() ? *len : 0);
        return m;
      };
      std::vector<float> expect(n, 0.0f);
      for (int r = 0; r < np; ++r) {
        const auto m = encode(r);
        CALL_OK(rank, decode(m.data(), m.size(), expect.data(), n, DType::kFloat32, DecodeMode::kAccumulate));
      }
      const auto m = encode(rank);
      std::vector<float> dense(n, -1.0f);
      CALL_OK(rank, c.sparse_allgather_dense(m.data(), m.size(), dense.data(), n));
      if (std::memcmp(dense.data(), expect.data(), n * sizeof(float)) != 0) return fail(rank, "dense sum differs");
      return kOk;
    }));
  }
}

// A call that differs on one rank (count, algorithm) fails on every rank, never succeeds
// with wrong data.
TEST(Hierarchical, MismatchedCallsFailOnEveryRank) {
  for (int variant = 0; variant < 2; ++variant) {
    expect_all_ok(run_layout({2, 2}, config(), [&](Communicator& c, int rank, int) {
      auto codec = Codec::create("qsgd:bits=8");
      if (!codec.is_ok()) return kFailed;
      const size_t n = 4096 + (variant == 0 && rank == 3 ? 1 : 0);
      const Algo a = variant == 1 && rank == 0 ? Algo::kScatterReduce : Algo::kAuto;
      std::vector<float> x(n, 1.0f), y(n);
      usleep(200000);  // every rank out of the first barrier: the mismatch breaks the communicator

      const Status s = c.allreduce(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(), nullptr, a);
      if (s.is_ok()) return fail(rank, "mismatched call succeeded");
      if (s.code() != Code::kInvalidUsage) return fail(rank, "mismatch gave " + s.to_string());
      return kOk;
    }));
  }
}

// A peer killed between calls: every survivor's next hierarchical all-reduce fails within
// seconds (the timeout is a minute), whether or not it talks to the dead rank directly.
TEST(Hierarchical, KilledPeerFailsEveryRankWithinSeconds) {
  const auto codes = run_layout({2, 2}, config(), [&](Communicator& c, int rank, int) {
    std::vector<float> x(1 << 18, 1.0f);
    CALL_OK(rank, c.allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr));
    if (rank == 3) {
      usleep(300000);  // the others have finished the first call (a peer lost inside a call fails it too)
      raise(SIGKILL);
    }
    const auto start = std::chrono::steady_clock::now();
    const Status s = c.allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
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

// The same on the lossy paths (pieces of a dense-result codec, sparse results through the
// node's segment), with the peer lost on the other node or inside this one; and a frozen
// local peer (SIGSTOP) fails every other rank once the timeout (3 s here) has passed.
TEST(Hierarchical, LostOrFrozenPeerFailsEveryOtherRankOnLossyPaths) {
  for (const char* spec : {"topk:ratio=0.01,ef=1", "qsgd:bits=8"}) {
    for (int victim : {1, 3}) {
      for (bool freeze : {false, true}) {
        SCOPED_TRACE(std::string(spec) + (freeze ? " frozen rank " : " killed rank ") + std::to_string(victim));
        CommConfig cfg = config(spec[0] == 't' ? Algo::kSparseAllgather : Algo::kScatterReduce);
        cfg.timeout = milliseconds(3000);
        const auto codes = run_layout({2, 2}, cfg, [&](Communicator& c, int rank, int np) {
          auto codec = Codec::create(spec);
          if (!codec.is_ok()) return kFailed;
          const size_t n = 1500007;  // pieces: 3 a shard for qsgd
          std::vector<float> x(n, 1.0f), y(n);
          ErrorFeedback ef(n);
          ErrorFeedback* efp = (*codec)->spec().ef ? &ef : nullptr;
          std::vector<int> pids(static_cast<size_t>(np));
          const int me = static_cast<int>(getpid());
          CALL_OK(rank, c.allgather(&me, pids.data(), sizeof me));
          CALL_OK(rank, c.allreduce(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(), efp,
                                    Algo::kHierarchical));
          if (rank == victim) {
            usleep(300000);
            raise(freeze ? SIGSTOP : SIGKILL);
          }
          const auto start = std::chrono::steady_clock::now();
          const Status st = c.allreduce(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(), efp,
                                        Algo::kHierarchical);
          const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (freeze && rank == 0) kill(pids[static_cast<size_t>(victim)], SIGKILL);
          if (st.is_ok()) return fail(rank, "succeeded without rank " + std::to_string(victim));
          const double limit = freeze ? 3.0 + 5.0 : 15.0;
          if (took > limit) return fail(rank, "the error took " + std::to_string(took) + " s: " + st.to_string());
          return kOk;
        });
        for (int r = 0; r < 4; ++r) {
          if (r == victim) {
            EXPECT_EQ(codes[static_cast<size_t>(r)], 128 + SIGKILL) << "rank " << r;
          } else {
            EXPECT_EQ(codes[static_cast<size_t>(r)], kOk) << "rank " << r;
          }
        }
      }
    }
  }
}

// GW_LOCAL_SIZE that disagrees with the host identities: a warning on that rank, and the
// identities win.
TEST(Hierarchical, LauncherHintThatDisagreesIsWarnedAbout) {
  char dir[] = "/tmp/gw_hint_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/gw.%p.log";
  const auto codes = run_layout(
      {2, 2}, config(),
      [&](Communicator& c, int rank, int) {
        if (c.local_size() != 2 || c.node_count() != 2) return fail(rank, "the hint won over the identities");
        return kOk;
      },
      [&](int rank) {
        setenv("GW_DEBUG_FILE", log.c_str(), 1);
        setenv("GW_DEBUG", "WARN", 1);
        setenv("GW_LOCAL_RANK", rank == 1 ? "1" : "0", 1);
        setenv("GW_LOCAL_SIZE", rank == 1 ? "4" : "2", 1);
        if (rank >= 2) setenv("GW_LOCAL_RANK", std::to_string(rank - 2).c_str(), 1);
      });
  expect_all_ok(codes);
  std::string all;
  FILE* p = popen((std::string("cat ") + dir + "/*.log 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) all.append(buf, got);
  pclose(p);
  EXPECT_NE(all.find("GW_LOCAL_RANK/GW_LOCAL_SIZE says local rank 1 of 4"), std::string::npos) << all;
  EXPECT_EQ(all.find("says local rank 0 of 2"), std::string::npos) << all;  // agreeing hints are quiet
  const int rc = std::system((std::string("rm -rf ") + dir).c_str());
  (void)rc;
}

}  // namespace
}  // namespace gw
