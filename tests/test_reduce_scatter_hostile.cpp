// The reduce-scatter over the in-process transport (threads as ranks) when one rank's
// contributions arrive forged: a wrong element count, a foreign codec, a cut-short message,
// random bytes, or a raw block of the wrong length. Every owner it sends to fails within the
// call with an error naming the contribution and its sender (no hang, no crash), and a rank
// that succeeds holds the clean result.
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

enum class Forgery { kCountOffByOne, kForeignCodec, kCutShort, kRandomBytes };

const char* forgery_name(Forgery f) {
  switch (f) {
    case Forgery::kCountOffByOne: return "count off by one";
    case Forgery::kForeignCodec: return "foreign codec";
    case Forgery::kCutShort: return "cut short";
    default: return "random bytes";
  }
}

// Every data message this rank sends (not the call check's) is forged as f says, in a copy.
class ForgingTransport final : public transport::ForwardingTransport {
 public:
  ForgingTransport(std::unique_ptr<transport::Transport> inner, Forgery f)
      : ForwardingTransport(*inner), owned_(std::move(inner)), f_(f) {}
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, transport::Op& op) override {
    const uint64_t step = (tag >> coll::kChunkBits) & ((uint64_t{1} << coll::kStepBits) - 1);
    if (step == coll::kMaxSteps - 1 || len < 2) return inner_.isend(peer, tag, buf, len, op);
    const auto* b = static_cast<const uint8_t*>(buf);
    copies_.emplace_back(b, b + len);
    uint8_t* m = copies_.back().data();
    const bool message = len >= 64 && std::memcmp(m, "GWRE", 4) == 0;
    size_t out_len = len;
    switch (f_) {
      case Forgery::kCountOffByOne:
        if (message) m[8] = static_cast<uint8_t>(m[8] + 1);
        break;
      case Forgery::kForeignCodec:
        if (message) m[5] = static_cast<uint8_t>(m[5] == 3 ? 5 : 3);  // qsgd <-> topk
        break;
      case Forgery::kCutShort: out_len = len - 1; break;
      case Forgery::kRandomBytes:
        for (size_t i = 0; i < len; ++i) m[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
        break;
    }
    return inner_.isend(peer, tag, m, out_len, op);
  }

 private:
  std::unique_ptr<transport::Transport> owned_;
  Forgery f_;
  std::vector<std::vector<uint8_t>> copies_;  // alive until the transport goes
};

TEST(ReduceScatterHostile, ForgedContributionsFailTheirOwnersAndNoRankSucceedsWithThem) {
  const Forgery all[] = {Forgery::kCountOffByOne, Forgery::kForeignCodec, Forgery::kCutShort, Forgery::kRandomBytes};
  constexpr int kForger = 2;
  for (int p : {3, 4}) {
    for (const char* spec : {"qsgd:bits=4", "topk:ratio=0.05", "bf16", ""}) {  // "": raw
      for (Forgery f : all) {
        const bool raw = spec[0] == '\0';
        // A raw block has no header to forge, and any bytes of the right length are some floats.
        if (raw && f != Forgery::kCutShort) continue;
        SCOPED_TRACE(std::string(raw ? "raw" : spec) + ", " + forgery_name(f) + ", p=" + std::to_string(p));
        std::vector<size_t> counts(static_cast<size_t>(p));
        size_t n = 0;
        for (int r = 0; r < p; ++r) n += counts[r] = 3001 + 17 * static_cast<size_t>(r);
        std::vector<Status> got(static_cast<size_t>(p));
        std::vector<double> seconds(static_cast<size_t>(p));
        std::vector<std::vector<float>> outs(static_cast<size_t>(p));
        auto run = [&](bool forge) {
          auto group = transport::make_local_group(p);
          CommConfig cfg;
          cfg.timeout = std::chrono::seconds(20);
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
              std::unique_ptr<Codec> codec;
              if (!raw) codec = std::move(Codec::create(spec)).value();
              std::vector<float> g(n);
              for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 7 + static_cast<size_t>(r)) % 13) - 6.0f;
              auto& out = outs[static_cast<size_t>(r)];
              out.assign(counts[r], -7.0f);
              const auto t0 = std::chrono::steady_clock::now();
              got[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->reduce_scatterv(
                  g.data(), out.data(), counts.data(), DType::kFloat32, ReduceOp::kSum, codec.get(), nullptr);
              seconds[static_cast<size_t>(r)] =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            });
          }
          for (auto& t : threads) t.join();
        };
        run(false);
        for (const Status& s : got) ASSERT_TRUE(s.is_ok()) << s.to_string();
        const std::vector<std::vector<float>> clean = outs;
        run(true);
        int named = 0;
        for (int r = 0; r < p; ++r) {
          const Status& s = got[static_cast<size_t>(r)];
          if (s.is_ok()) {
            EXPECT_EQ(outs[static_cast<size_t>(r)], clean[static_cast<size_t>(r)])
                << "rank " << r << " succeeded with a result not the clean one";
          }
          EXPECT_LT(seconds[static_cast<size_t>(r)], 10.0) << "rank " << r << ": " << s.to_string();
          const bool judged = s.code() == Code::kInvalidMessage || s.code() == Code::kRemote;
          if (r != kForger && judged && s.message().find("rank 2") != std::string::npos) ++named;
          if (r != kForger) {
            EXPECT_FALSE(s.is_ok()) << "rank " << r << " took a forged contribution";
          }
        }
        EXPECT_GE(named, 1);
      }
    }
  }
}

}  // namespace
}  // namespace gw
