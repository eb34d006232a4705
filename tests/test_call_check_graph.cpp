// The call check's graphs (check_graph.hpp) over the in-process transport: how many
// descriptor messages each rank sends per call (constant in p for the ring and recursive
// doubling), and which ranks find a mismatch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/checks/call_check.hpp"
#include "collectives/common/doubling.hpp"
#include "transport/local/local_transport.hpp"

namespace gw::coll {
namespace {

class CountingSends final : public transport::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, transport::Op& op) override {
    ++sends;
    return inner_.isend(peer, tag, buf, len, op);
  }
  int sends = 0;
};

struct Outcome {
  Status status;
  int sends = 0;
};

// One checked call on p ranks; rank odd (if any) states count 1001, the others 1000. Carried
// descriptors (kDoubling) are handed over as recursive doubling's messages would.
std::vector<Outcome> one_call(int p, CheckGraph graph, int odd) {
  auto group = transport::make_local_group(p);
  std::vector<Outcome> out(static_cast<size_t>(p));
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      CountingSends tp(*group[static_cast<size_t>(r)]);
      CallDescriptor d;
      d.kind = CallKind::kAllreduce;
      d.count = r == odd ? 1001 : 1000;
      CallDescriptor theirs = d;
      CallCheck check;
      const auto deadline = transport::Clock::now() + std::chrono::seconds(5);
      Status s = check.start(tp, d, graph);
      if (s.is_ok()) s = check.poll();  // sends this rank's descriptors, as a call's first wait does
      if (s.is_ok() && graph == CheckGraph::kDoubling) {
        const Doubling dbl(r, p);
        std::vector<int> partners;
        if (dbl.folded >= 0) partners.push_back(dbl.folded);
        if (dbl.takes >= 0) partners.push_back(dbl.takes);
        for (int k = 0; dbl.newrank >= 0 && k < dbl.m; ++k) partners.push_back(dbl.partner(k));
        for (int q : partners) {
          theirs.count = q == odd ? 1001 : 1000;
          uint8_t bytes[CallDescriptor::kMaxBytes + 8];
          const size_t len = encode_descriptor(theirs, bytes);
          size_t header = 0;
          s = check.take_carried(q, bytes, len + 8, &header);  // 8 bytes of "data" behind it
          if (!s.is_ok()) break;
          EXPECT_EQ(header, len);
        }
      }
      if (s.is_ok()) s = check.finish(deadline);
      out[static_cast<size_t>(r)] = Outcome{s, tp.sends};
      finished.fetch_add(1);
      // A failed rank aborts only once every rank is done: the abort would reach the others.
      while (finished.load() < p) std::this_thread::yield();
      if (!s.is_ok()) tp.abort(s);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

int ceil_log2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

TEST(CallCheckGraph, DescriptorMessagesPerRankPerCall) {
  for (int p : {2, 3, 5, 8, 16, 33, 64}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    for (CheckGraph g : {CheckGraph::kAllPeers, CheckGraph::kRing, CheckGraph::kDoubling, CheckGraph::kDissemination}) {
      const auto out = one_call(p, g, -1);
      for (int r = 0; r < p; ++r) {
        const Outcome& o = out[static_cast<size_t>(r)];
        ASSERT_TRUE(o.status.is_ok()) << o.status.to_string();
        const int want = g == CheckGraph::kAllPeers        ? p - 1
                         : g == CheckGraph::kDissemination ? ceil_log2(p)
                                                           : 1;  // the ring edge; partners' ride in the data
        EXPECT_EQ(o.sends, want) << "graph " << static_cast<int>(g) << " rank " << r;
      }
    }
  }
}

TEST(CallCheckGraph, MismatchIsFoundOnTheRingEdgesOfTheOddRank) {
  for (int p : {3, 5, 8}) {
    for (int odd : {0, 2}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " odd=" + std::to_string(odd));
      const auto out = one_call(p, CheckGraph::kRing, odd);
      for (int r = 0; r < p; ++r) {
        // Rank odd + 1 receives the odd rank's descriptor, the odd rank its left neighbour's.
        const bool finds = r == odd || r == (odd + 1) % p;
        const Status& s = out[static_cast<size_t>(r)].status;
        if (finds) {
          EXPECT_EQ(s.code(), Code::kInvalidUsage) << r << ": " << s.to_string();
          EXPECT_NE(s.message().find("count=1001"), std::string::npos) << s.message();
        } else {
          EXPECT_TRUE(s.is_ok()) << r << ": " << s.to_string();  // told by the finder's last words in a real job
        }
      }
    }
  }
}

TEST(CallCheckGraph, EveryGraphFindsAMismatchSomewhere) {
  for (int p : {2, 3, 4, 7, 9}) {
    for (CheckGraph g : {CheckGraph::kAllPeers, CheckGraph::kRing, CheckGraph::kDoubling, CheckGraph::kDissemination}) {
      const auto out = one_call(p, g, p - 1);
      int found = 0;
      for (const Outcome& o : out) found += o.status.code() == Code::kInvalidUsage ? 1 : 0;
      EXPECT_GE(found, 1) << "p=" << p << " graph " << static_cast<int>(g);
    }
  }
}

TEST(CallCheckGraph, DataFromAPeerTheGraphDoesNotCoverIsAnInternalError) {
  auto group = transport::make_local_group(5);
  CallCheck check;
  CallDescriptor d;
  d.kind = CallKind::kAllreduce;
  ASSERT_TRUE(check.start(*group[0], d, CheckGraph::kRing).is_ok());
  const Status s = check.require(2, transport::Clock::now() + std::chrono::seconds(1));  // rank 0's ring peer is 4
  EXPECT_EQ(s.code(), Code::kInternal) << s.to_string();
  EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.message();
  group[0]->abort(s);
}

TEST(CallCheckGraph, ACarriedDescriptorThatIsNotOneIsRefused) {
  auto group = transport::make_local_group(4);
  CallCheck check;
  CallDescriptor d;
  d.kind = CallKind::kAllreduce;
  ASSERT_TRUE(check.start(*group[0], d, CheckGraph::kDoubling).is_ok());
  const uint8_t junk[64] = {'G', 'W', 'C', 'X'};
  size_t header = 99;
  const Status s = check.take_carried(1, junk, sizeof junk, &header);
  EXPECT_EQ(s.code(), Code::kRemote) << s.to_string();
  EXPECT_EQ(header, 0u);
  // A descriptor longer than the message is refused the same way.
  uint8_t bytes[CallDescriptor::kMaxBytes];
  d.spec = "qsgd:bits=8";
  const size_t len = encode_descriptor(d, bytes);
  CallCheck again;
  ASSERT_TRUE(again.start(*group[2], d, CheckGraph::kDoubling).is_ok());
  EXPECT_EQ(again.take_carried(3, bytes, len - 1, &header).code(), Code::kRemote);
  group[0]->abort(s);
  group[2]->abort(s);
}

}  // namespace
}  // namespace gw::coll
