// The hierarchical all-reduce over the in-process transport (threads as ranks, 2 nodes of 2)
// when one rank's sparse inter-node messages arrive corrupted (indices out of range): the
// ranks that decode them fail with kInvalidMessage naming the inter-node message, within the
// call (no hang, no crash), and no rank returns success with wrong data. (Dense codecs'
// payloads have no invalid values to detect: any bytes are some scale and levels.)
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/common/context.hpp"
#include "gradwire/communicator.hpp"
#include "transport/local/local_transport.hpp"

namespace gw {
namespace {

// Every message this rank sends in the inter-node leg's tag range (steps 1024 to 3071 of a
// hierarchical call) has its bytes past the wire header overwritten: sparse indices far
// beyond any count.
class CorruptingTransport final : public transport::ForwardingTransport {
 public:
  explicit CorruptingTransport(std::unique_ptr<transport::Transport> inner)
      : ForwardingTransport(*inner), owned_(std::move(inner)) {}
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, transport::Op& op) override {
    const uint64_t step = (tag >> coll::kChunkBits) & ((uint64_t{1} << coll::kStepBits) - 1);
    if (step >= 1024 && step < 3072 && len > 64) {
      copies_.emplace_back(static_cast<const uint8_t*>(buf), static_cast<const uint8_t*>(buf) + len);
      std::memset(copies_.back().data() + 56, 0xff, len - 56);
      return inner_.isend(peer, tag, copies_.back().data(), len, op);
    }
    return inner_.isend(peer, tag, buf, len, op);
  }

 private:
  std::unique_ptr<transport::Transport> owned_;
  std::vector<std::vector<uint8_t>> copies_;  // alive until the transport goes
};

TEST(HierarchicalHostile, CorruptInterNodeMessagesFailTheRanksThatDecodeThem) {
  for (const char* spec : {"topk:ratio=0.05,ef=1", "topk:ratio=0.05", "dgc:ratio=0.05,ef=1"}) {
    SCOPED_TRACE(spec);
    const int p = 4;
    auto group = transport::make_local_group(p);
    CommConfig cfg;
    cfg.timeout = std::chrono::seconds(20);
    cfg.chunk_bytes = 4096;
    cfg.dense_threshold_bytes = 0;
    cfg.algo = Algo::kHierarchical;
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < p; ++r) {
      std::unique_ptr<transport::Transport> t = std::move(group[static_cast<size_t>(r)]);
      if (r == 2) t = std::make_unique<CorruptingTransport>(std::move(t));
      auto c = Communicator::create(std::move(t), cfg, {0, 0, 1, 1});
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      comms.push_back(std::move(c).value());
    }
    const size_t n = 20011;
    std::vector<Status> got(p);
    std::vector<std::vector<float>> outs(p, std::vector<float>(n, -7.0f));
    std::vector<double> seconds(p);
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) {
      threads.emplace_back([&, r] {
        auto codec = Codec::create(spec);
        ASSERT_TRUE(codec.is_ok());
        ErrorFeedback ef(n);
        std::vector<float> g(n);
        for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 7 + static_cast<size_t>(r)) % 13) - 6.0f;
        const auto t0 = std::chrono::steady_clock::now();
        got[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->allreduce(
            g.data(), outs[static_cast<size_t>(r)].data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(),
            (*codec)->spec().ef ? &ef : nullptr, Algo::kHierarchical);
        seconds[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      });
    }
    for (auto& t : threads) t.join();
    // Node 0 (ranks 0 and 1) decodes what rank 2 sent rank 0 for shard 0: both fail.
    for (int r : {0, 1}) {
      EXPECT_EQ(got[static_cast<size_t>(r)].code(), Code::kInvalidMessage)
          << "rank " << r << ": " << got[static_cast<size_t>(r)].to_string();
      EXPECT_NE(got[static_cast<size_t>(r)].message().find("inter-node"), std::string::npos)
          << got[static_cast<size_t>(r)].to_string();
      EXPECT_LT(seconds[static_cast<size_t>(r)], 10.0) << "rank " << r;
    }
    // Node 1 received clean messages: success with both nodes' sum, or an error; never
    // success with the corrupt bytes in it.
    for (int r : {2, 3}) {
      EXPECT_LT(seconds[static_cast<size_t>(r)], 10.0) << "rank " << r;
      if (!got[static_cast<size_t>(r)].is_ok()) continue;
      for (size_t i = 0; i < n; ++i) {
        const float v = outs[static_cast<size_t>(r)][i];
        ASSERT_TRUE(std::isfinite(v) && std::fabs(v) <= 4 * 6.0f + 1) << "rank " << r << " element " << i << " = " << v;
      }
    }
  }
}

}  // namespace
}  // namespace gw
