// The simulator (tools/sim): its schedules send what the real algorithms send (every rank's
// messages and bytes, counted by the communicator over the in-process transport), its engine
// keeps time as its header says, and the policy's closed forms agree with its replays.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <vector>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/policy/policy.hpp"
#include "gradwire/communicator.hpp"
#include "tests/local_ranks.hpp"
#include "tests/test_util.hpp"
#include "tools/sim/engine.hpp"
#include "tools/sim/schedules.hpp"

namespace gw::sim {
namespace {

struct Sent {
  uint64_t messages = 0;
  double bytes = 0;
};

// What rank r's program sends, over all its lanes.
Sent sent_by(const Schedule& s, int r) {
  Sent out;
  for (int lane = 0; lane < s.lanes(); ++lane) {
    for (uint64_t pc = 0;; ++pc) {
      const Op op = s.op(r, lane, pc);
      if (op.kind == Op::kEnd) break;
      if (op.kind == Op::kSend) {
        ++out.messages;
        out.bytes += op.amount;
      }
    }
  }
  return out;
}

struct Case {
  const char* sim;
  Algo algo;
  const char* codec;  // null: dense
};

TEST(Sim, SchedulesSendWhatTheAlgorithmsSend) {
  const Case cases[] = {
      {"ring", Algo::kRing, nullptr},
      {"recursive_doubling", Algo::kRecursiveDoubling, nullptr},
      {"rabenseifner", Algo::kRabenseifner, nullptr},
      {"compressed_ring", Algo::kCompressedRing, "qsgd:bits=8"},
      {"scatter_reduce", Algo::kScatterReduce, "qsgd:bits=4,bucket=64"},
      {"halving_doubling", Algo::kHalvingDoubling, "qsgd:bits=8"},
      {"halving_doubling", Algo::kHalvingDoubling, "none"},
      {"sparse_allgather", Algo::kSparseAllgather, "topk:k=7"},
      {"sparse_doubling", Algo::kSparseDoubling, "topk:k=7"},
      {"sparse_doubling", Algo::kSparseDoubling, "topk:ratio=0.2"},
  };
  const coll::CostModel model;
  for (const Case& k : cases) {
    for (int p : {1, 2, 3, 5, 8, 13}) {
      for (size_t n : {size_t{1}, size_t{13}, size_t{1031}, size_t{20011}}) {
        if (k.algo == Algo::kCompressedRing && p > 8) continue;
        std::vector<Sent> real(static_cast<size_t>(p));
        std::mutex mu;
        test::run_local_ranks(p, [&](Communicator& c, int r) {
          std::unique_ptr<Codec> codec = k.codec != nullptr ? test::make_codec(k.codec) : nullptr;
          std::vector<float> x(n, 1.0f + static_cast<float>(r)), out(n);
          for (size_t i = 0; i < n; ++i) x[i] += static_cast<float>(i % 17) * 0.25f;
          if (k.algo == Algo::kSparseDoubling) {
            // Rank r's top-k are the k elements from r k on (mod n): unions as disjoint as they
            // can be, which the schedule assumes.
            const uint64_t kept = codec->spec().k_for(n);
            for (uint64_t j = 0; j < kept; ++j) x[(static_cast<uint64_t>(r) * kept + j) % n] = 1000.0f;
          }
          ASSERT_TRUE(c.reset_stats().is_ok());
          const Status s =
              c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), nullptr, k.algo);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          const auto st = c.stats();
          ASSERT_TRUE(st.is_ok());
          std::lock_guard<std::mutex> lock(mu);
          real[static_cast<size_t>(r)] = Sent{st->messages_sent, static_cast<double>(st->bytes_sent)};
        });
        std::unique_ptr<Codec> codec = k.codec != nullptr ? test::make_codec(k.codec) : nullptr;
        // run_local_ranks pipelines in 4 KiB chunks; the statistics do not count descriptors.
        const Call call{p, n, 4096, codec.get(), false};
        auto s = make_schedule(k.sim, call, model);
        ASSERT_NE(s, nullptr);
        for (int r = 0; r < p; ++r) {
          const Sent want = sent_by(*s, r);
          const Sent got = real[static_cast<size_t>(r)];
          EXPECT_EQ(got.messages, want.messages)
              << k.sim << " " << (k.codec ? k.codec : "") << " p=" << p << " n=" << n << " rank " << r;
          EXPECT_EQ(got.bytes, want.bytes)
              << k.sim << " " << (k.codec ? k.codec : "") << " p=" << p << " n=" << n << " rank " << r;
        }
        const Outcome o = simulate(*s, model);
        EXPECT_TRUE(o.error.empty()) << o.error;
      }
    }
  }
}

// A schedule given as lists, for the engine's own tests.
class Listed : public Schedule {
 public:
  explicit Listed(std::vector<std::vector<Op>> ops) : ops_(std::move(ops)) {}
  std::string name() const override { return "listed"; }
  int ranks() const override { return static_cast<int>(ops_.size()); }
  Op op(int r, int, uint64_t pc) const override {
    const auto& v = ops_[static_cast<size_t>(r)];
    return pc < v.size() ? v[pc] : Op::end();
  }

 private:
  std::vector<std::vector<Op>> ops_;
};

coll::CostModel simple_model() {
  coll::CostModel m;
  m.latency_s = 1e-6;
  m.link_bytes_per_s = 1e9;
  m.message_cpu_s = 1e-7;
  return m;
}

TEST(Sim, OneMessageCostsCpuLatencyAndBytesAtBothEnds) {
  const coll::CostModel m = simple_model();
  const Outcome o = simulate(Listed({{Op::send(1, 1000)}, {Op::recv(0)}}), m);
  ASSERT_TRUE(o.error.empty());
  // Sender's CPU, latency, 1000 bytes at 1 GB/s, receiver's CPU.
  EXPECT_NEAR(o.seconds, 1e-7 + 1e-6 + 1e-6 + 1e-7, 1e-12);
  EXPECT_EQ(o.messages, 1u);
}

TEST(Sim, ATargetPortTakesMessagesOneAfterAnother) {
  const coll::CostModel m = simple_model();
  // Two senders at once into one receiver: the second message waits for the first's bytes.
  const Outcome o = simulate(Listed({{Op::send(2, 1e6)}, {Op::send(2, 1e6)}, {Op::recv(0), Op::recv(1)}}), m);
  ASSERT_TRUE(o.error.empty());
  EXPECT_NEAR(o.seconds, 1e-7 + 1e-6 + 2e-3 + 1e-7, 2e-7);
}

TEST(Sim, SharedCoresSerialiseWork) {
  coll::CostModel m = simple_model();
  const Listed two({{Op::work(1.0)}, {Op::work(1.0)}});
  EXPECT_NEAR(simulate(two, m).seconds, 1.0, 1e-9);  // a core each
  m.cores = 1;
  EXPECT_NEAR(simulate(two, m).seconds, 2.0, 1e-9);
}

TEST(Sim, AWaitNobodyAnswersIsADeadlockNotAHang) {
  const Outcome o = simulate(Listed({{Op::recv(1)}, {Op::recv(0)}}), simple_model());
  EXPECT_TRUE(o.deadlock);
  EXPECT_NE(o.error.find("waits for rank 1"), std::string::npos) << o.error;
}

TEST(Sim, TooManyMessagesInFlightIsReported) {
  std::vector<std::vector<Op>> ops(2);
  for (int i = 0; i < 100; ++i) ops[0].push_back(Op::send(1, 8));
  for (int i = 0; i < 100; ++i) ops[1].push_back(Op::recv(0));
  Limits lim;
  lim.max_in_flight = 10;
  const Outcome o = simulate(Listed(ops), simple_model(), lim);
  EXPECT_FALSE(o.error.empty());
  EXPECT_TRUE(simulate(Listed(ops), simple_model()).error.empty());
}

// The policy decides with closed forms of the algorithms (the call checks left out); where no
// port is shared by two messages at once
// (powers of two), they are the replay's time to within 10 %.
TEST(Sim, ClosedFormsAgreeWithTheReplay) {
  const coll::CostModel model;
  auto q = test::make_codec("qsgd:bits=8");
  auto t = test::make_codec("topk:ratio=0.01");
  for (const char* a :
       {"ring", "recursive_doubling", "rabenseifner", "scatter_reduce", "halving_doubling", "sparse_doubling"}) {
    const Codec* codec = std::string(a) == "sparse_doubling" ? t.get() : q.get();
    for (int p : {4, 64, 256, 1024}) {
      for (uint64_t bytes : {uint64_t{4096}, uint64_t{1} << 20, uint64_t{64} << 20}) {
        // Rings and all-to-alls at 1024 ranks are millions of messages: minutes under ASan.
        const bool log_p = std::string(a) == "recursive_doubling" || std::string(a) == "halving_doubling" ||
                           std::string(a) == "sparse_doubling" || std::string(a) == "rabenseifner";
        if (p == 1024 && !log_p) continue;
        const Call call{p, bytes / 4, size_t{1} << 20, codec, false};  // the closed forms leave out the checks
        const Outcome o = simulate(*make_schedule(a, call, model), model);
        ASSERT_TRUE(o.error.empty()) << o.error;
        const coll::PolicyInput in{bytes / 4, DType::kFloat32, codec, p, Algo::kAuto, Algo::kAuto, 0, false, &model};
        const double closed = coll::model_seconds(in, coll::find_algorithm(a)->id);
        EXPECT_NEAR(closed / o.seconds, 1.0, 0.10) << a << " p=" << p << " bytes=" << bytes;
      }
    }
  }
}

// Every call sends its call-check descriptors as the graph of its algorithm says: one to the
// ring neighbour for ring-based calls, one per partner more for halving-doubling, one to
// every peer for scatter-reduce.
TEST(Sim, CallChecksAddTheirGraphsMessages) {
  const coll::CostModel model;
  auto q = test::make_codec("qsgd:bits=8");
  const int p = 16;
  auto extra = [&](const char* a) {
    Call on{p, 4096, size_t{1} << 20, q.get(), true}, off = on;
    off.checks = false;
    return simulate(*make_schedule(a, on, model), model).messages -
           simulate(*make_schedule(a, off, model), model).messages;
  };
  EXPECT_EQ(extra("ring"), 0u);                 // the dense ring's descriptor rides in its first chunk
  EXPECT_EQ(extra("compressed_ring"), 16u);     // the ring edge as a message of its own
  EXPECT_EQ(extra("recursive_doubling"), 16u);  // partners' descriptors ride in the data
  // The ring edge and 4 partners, each peer once: an even rank's next is its first partner.
  EXPECT_EQ(extra("halving_doubling"), 8u * 4u + 8u * 5u);
  EXPECT_EQ(extra("scatter_reduce"), 16u * 15u);
  auto t = test::make_codec("topk:ratio=0.01");
  Call on{p, 4096, size_t{1} << 20, t.get(), true}, off = on;
  off.checks = false;
  EXPECT_EQ(simulate(*make_schedule("sparse_doubling", on, model), model).messages -
                simulate(*make_schedule("sparse_doubling", off, model), model).messages,
            16u);  // like recursive doubling: the partners' descriptors ride in the data
}

TEST(Sim, NcclTreeIsLogarithmicAndEveryRankTakesPart) {
  const coll::CostModel model;
  const Call small{1024, 1024, size_t{1} << 20, nullptr};
  const Outcome tree = simulate(*make_schedule("nccl_tree", small, model), model);
  const Outcome ring = simulate(*make_schedule("nccl_ring", small, model), model);
  ASSERT_TRUE(tree.error.empty()) << tree.error;
  EXPECT_LT(tree.seconds * 10, ring.seconds);  // ~4 log p hops against 2 (p - 1)
  // Two trees, every rank but each tree's root sends up once and every non-leaf down.
  EXPECT_GE(tree.messages, 2u * 2u * 1023u);
}

}  // namespace
}  // namespace gw::sim
