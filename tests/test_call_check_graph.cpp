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
  Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                         transport::Op& op) override {
    ++heads;
    return inner_.isend_with_head(peer, tag, head, head_len, buf, len, op);
  }
  int sends = 0;
  int heads = 0;  // data messages with the descriptor at their head
};

struct Outcome {
  Status status;
  int sends = 0;
  int heads = 0;
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
      // kRingHead: the descriptor rides ahead of the dense ring's first chunk, here 8 bytes
      // (16 from the odd rank, whose call has more elements), and r - 1's ahead of its.
      transport::Op head_send;
      if (s.is_ok() && graph == CheckGraph::kRingHead) {
        // Both outlive the posts: a failed rank leaves its send posted until the abort below.
        static thread_local const uint8_t data[16] = {};
        static thread_local uint8_t room[2 * CallCheck::kHeadRoom + 16];
        auto got = check.recv_ring_head(tp, room + CallCheck::kHeadRoom, 8);
        s = got.status();
        if (s.is_ok()) s = check.send_ring_head(tp, data, r == odd ? 16 : 8, head_send);
        if (s.is_ok()) s = check.require((r + p - 1) % p, deadline);
        if (s.is_ok()) s = tp.wait(head_send, deadline);
      }
      if (s.is_ok()) s = check.finish(deadline);
      out[static_cast<size_t>(r)] = Outcome{s, tp.sends, tp.heads};
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
    for (CheckGraph g : {CheckGraph::kAllPeers, CheckGraph::kRing, CheckGraph::kDoubling, CheckGraph::kDissemination,
                         CheckGraph::kRingHead}) {
      const auto out = one_call(p, g, -1);
      for (int r = 0; r < p; ++r) {
        const Outcome& o = out[static_cast<size_t>(r)];
        ASSERT_TRUE(o.status.is_ok()) << o.status.to_string();
        const int want = g == CheckGraph::kAllPeers        ? p - 1
                         : g == CheckGraph::kDissemination ? ceil_log2(p)
                         : g == CheckGraph::kRingHead      ? 0  // it rides ahead of the first chunk
                                                           : 1;      // the ring edge; partners' ride in the data
        EXPECT_EQ(o.sends, want) << "graph " << static_cast<int>(g) << " rank " << r;
        EXPECT_EQ(o.heads, g == CheckGraph::kRingHead ? 1 : 0) << "graph " << static_cast<int>(g) << " rank " << r;
      }
    }
  }
}

TEST(CallCheckGraph, MismatchIsFoundOnTheRingEdgesOfTheOddRank) {
  for (int p : {3, 5, 8}) {
    for (int odd : {0, 2}) {
      for (CheckGraph g : {CheckGraph::kRing, CheckGraph::kRingHead}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " odd=" + std::to_string(odd) + " graph " +
                     std::to_string(static_cast<int>(g)));
        const auto out = one_call(p, g, odd);
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
}

TEST(CallCheckGraph, EveryGraphFindsAMismatchSomewhere) {
  for (int p : {2, 3, 4, 7, 9}) {
    for (CheckGraph g : {CheckGraph::kAllPeers, CheckGraph::kRing, CheckGraph::kDoubling, CheckGraph::kDissemination,
                         CheckGraph::kRingHead}) {
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

// Hostile bytes on the check's tag from rank 1 to rank 0 (its ring successor at p = 2): what
// rank 0 makes of them when its descriptor travels alone (kRing) and when it rides ahead of
// the dense ring's first chunk (kRingHead).
Status judged_from(CheckGraph g, const std::vector<uint8_t>& msg) {
  auto group = transport::make_local_group(2);
  CallCheck check;
  CallDescriptor d;
  d.kind = CallKind::kAllreduce;
  d.count = 1000;
  const auto deadline = transport::Clock::now() + std::chrono::seconds(2);
  Status s = check.start(*group[0], d, g);
  static uint8_t room[2 * CallCheck::kHeadRoom + 64];
  if (s.is_ok() && g == CheckGraph::kRingHead)
    s = check.recv_ring_head(*group[0], room + CallCheck::kHeadRoom, 64).status();
  transport::Op forged;
  if (s.is_ok()) s = group[1]->isend(0, CallCheck::tag(d.seq), msg.data(), msg.size(), forged);
  if (s.is_ok()) s = check.require(1, deadline);
  group[0]->abort(Status(Code::kAborted, "test over"));
  return s;
}

TEST(CallCheckGraph, HostileBytesOnTheChecksTagAreRefusedNamingThePeer) {
  CallDescriptor d;
  d.kind = CallKind::kAllreduce;
  d.count = 1000;
  std::vector<uint8_t> same(CallDescriptor::kMaxBytes);
  same.resize(encode_descriptor(d, same.data()));
  for (CheckGraph g : {CheckGraph::kRing, CheckGraph::kRingHead}) {
    SCOPED_TRACE("graph " + std::to_string(static_cast<int>(g)));
    // Junk, an empty message, and a descriptor cut short: a malformed descriptor from rank 1.
    for (const std::vector<uint8_t>& bad : {std::vector<uint8_t>(100, 0x5a), std::vector<uint8_t>(),
                                            std::vector<uint8_t>(same.begin(), same.end() - 1)}) {
      const Status s = judged_from(g, bad);
      EXPECT_EQ(s.code(), Code::kRemote) << s.to_string();
      EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
    }
    // A matching descriptor with 40 bytes behind it: data where a lone descriptor belongs
    // (kRing), or the data itself (kRingHead: the algorithm checks its length).
    std::vector<uint8_t> more = same;
    more.resize(same.size() + 40, 7);
    const Status s = judged_from(g, more);
    if (g == CheckGraph::kRing) {
      EXPECT_EQ(s.code(), Code::kRemote) << s.to_string();
      EXPECT_NE(s.message().find("40 bytes behind a call descriptor"), std::string::npos) << s.message();
    } else {
      EXPECT_TRUE(s.is_ok()) << s.to_string();
    }
    // A different call with 100 KB behind it: a mismatch, both sides named, either way.
    d.count = 1001;
    std::vector<uint8_t> other(CallDescriptor::kMaxBytes);
    other.resize(encode_descriptor(d, other.data()));
    other.resize(other.size() + 100000, 1);
    d.count = 1000;
    const Status m = judged_from(g, other);
    EXPECT_EQ(m.code(), Code::kInvalidUsage) << m.to_string();
    const bool named = m.message().find("rank 1 called allreduce") != std::string::npos &&
                       m.message().find("rank 0 called allreduce") != std::string::npos;
    EXPECT_TRUE(named) << m.message();
  }
}

}  // namespace
}  // namespace gw::coll
