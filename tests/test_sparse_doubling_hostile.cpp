// Sparse doubling over the in-process transport (threads as ranks) when one rank's messages
// arrive forged: indices out of range or out of order, a wrong element count, a foreign
// codec, a cut-short message. The ranks it sends to fail with kInvalidMessage naming the
// message and its sender, all within the call (no hang, no crash), and a rank that succeeds
// holds the clean sum: one whose inputs never passed through a forged message (the forger
// itself, or a rank that took the forger's own sum, merged from what it received intact).
// A dense message's floats have no invalid values, so index forgeries touch sparse ones.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/common/context.hpp"
#include "gradwire/communicator.hpp"
#include "transport/local/local_transport.hpp"

namespace gw {
namespace {

enum class Forgery { kIndexOutOfRange, kIndicesOutOfOrder, kCountOffByOne, kForeignCodec, kCutShort };

const char* forgery_name(Forgery f) {
  switch (f) {
    case Forgery::kIndexOutOfRange: return "index out of range";
    case Forgery::kIndicesOutOfOrder: return "indices out of order";
    case Forgery::kCountOffByOne: return "count off by one";
    case Forgery::kForeignCodec: return "foreign codec";
    default: return "cut short";
  }
}

// Every data message this rank sends (not the call check's) is forged as f says, in a copy;
// the wire message starts at its magic (after the carried call descriptor).
class ForgingTransport final : public transport::ForwardingTransport {
 public:
  ForgingTransport(std::unique_ptr<transport::Transport> inner, Forgery f)
      : ForwardingTransport(*inner), owned_(std::move(inner)), f_(f) {}
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, transport::Op& op) override {
    const uint64_t step = (tag >> coll::kChunkBits) & ((uint64_t{1} << coll::kStepBits) - 1);
    const auto* b = static_cast<const uint8_t*>(buf);
    size_t at = 0;
    while (at + 4 <= len && std::memcmp(b + at, "GWRE", 4) != 0) ++at;
    const bool sparse = at + 64 <= len && b[at + 5] == 5;  // codec topk: index/value pairs
    const bool indices = f_ == Forgery::kIndexOutOfRange || f_ == Forgery::kIndicesOutOfOrder;
    if (step == coll::kMaxSteps - 1 || at + 64 > len || (indices && !sparse)) {
      return inner_.isend(peer, tag, buf, len, op);
    }
    copies_.emplace_back(b, b + len);
    uint8_t* m = copies_.back().data() + at;
    size_t out_len = len;
    switch (f_) {
      case Forgery::kIndexOutOfRange: std::memset(m + 56, 0xff, 4); break;
      case Forgery::kIndicesOutOfOrder: std::memcpy(m + 60, m + 56, 4); break;
      case Forgery::kCountOffByOne: m[8] = static_cast<uint8_t>(m[8] + 1); break;
      case Forgery::kForeignCodec: m[5] = 3; break;  // qsgd
      case Forgery::kCutShort: out_len = len - 1; break;
    }
    return inner_.isend(peer, tag, copies_.back().data(), out_len, op);
  }

 private:
  std::unique_ptr<transport::Transport> owned_;
  Forgery f_;
  std::vector<std::vector<uint8_t>> copies_;  // alive until the transport goes
};

TEST(SparseDoublingHostile, ForgedMessagesFailTheirReceiversAndNoRankSucceedsWithThem) {
  const Forgery all[] = {Forgery::kIndexOutOfRange, Forgery::kIndicesOutOfOrder, Forgery::kCountOffByOne,
                         Forgery::kForeignCodec, Forgery::kCutShort};
  for (int p : {4, 5}) {
    for (const char* spec : {"topk:ratio=0.05", "topk:ratio=0.4"}) {  // sparse unions, and dense ones
      for (Forgery f : all) {
        // The count of a dense message is the only field a forger can get wrong in one
        // (any payload bytes are some floats); its other forgeries are the sparse ones'.
        SCOPED_TRACE(std::string(spec) + ", " + forgery_name(f) + ", p=" + std::to_string(p));
        constexpr int kForger = 2;
        const size_t n = 20011;
        std::vector<Status> got(static_cast<size_t>(p));
        std::vector<double> seconds(static_cast<size_t>(p));
        std::vector<std::vector<float>> outs(static_cast<size_t>(p), std::vector<float>(n, -7.0f));
        // forge: whether rank kForger's messages are forged (else a clean run, the reference).
        auto run = [&](bool forge) {
          auto group = transport::make_local_group(p);
          CommConfig cfg;
          cfg.timeout = std::chrono::seconds(20);
          cfg.dense_threshold_bytes = 0;
          std::vector<std::unique_ptr<Communicator>> comms;
          for (int r = 0; r < p; ++r) {
            std::unique_ptr<transport::Transport> t = std::move(group[static_cast<size_t>(r)]);
            if (forge && r == kForger) t = std::make_unique<ForgingTransport>(std::move(t), f);
            auto c = Communicator::create(std::move(t), cfg);
            ASSERT_TRUE(c.is_ok()) << c.status().to_string();
            comms.push_back(std::move(c).value());
          }
          std::vector<std::thread> threads;
          for (int r = 0; r < p; ++r) {
            threads.emplace_back([&, r] {
              auto codec = Codec::create(spec);
              ASSERT_TRUE(codec.is_ok());
              std::vector<float> g(n);
              for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 7 + static_cast<size_t>(r)) % 13) - 6.0f;
              const auto t0 = std::chrono::steady_clock::now();
              got[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->allreduce(
                  g.data(), outs[static_cast<size_t>(r)].data(), n, DType::kFloat32, ReduceOp::kSum, codec->get(),
                  nullptr, Algo::kSparseDoubling);
              seconds[static_cast<size_t>(r)] =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            });
          }
          for (auto& t : threads) t.join();
        };
        run(false);
        for (const Status& s : got) ASSERT_TRUE(s.is_ok()) << s.to_string();
        const std::vector<float> clean = outs[0];
        run(true);
        int named = 0, failed = 0;
        for (int r = 0; r < p; ++r) {
          const Status& s = got[static_cast<size_t>(r)];
          if (s.is_ok()) {
            EXPECT_EQ(outs[static_cast<size_t>(r)], clean) << "rank " << r << " succeeded with a sum not the clean one";
          } else {
            ++failed;
          }
          EXPECT_LT(seconds[static_cast<size_t>(r)], 10.0) << "rank " << r << ": " << s.to_string();
          if (s.code() == Code::kInvalidMessage) {
            EXPECT_NE(s.message().find("sparse-doubling message from rank 2"), std::string::npos) << s.to_string();
            ++named;
          }
        }
        // At least the forger's first partner judged the message itself, and the job broke.
        EXPECT_GE(named, 1);
        EXPECT_GE(failed, 1);
      }
    }
  }
}

}  // namespace
}  // namespace gw
