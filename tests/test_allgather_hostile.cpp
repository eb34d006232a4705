// The compressed all-gather over the in-process transport (threads as ranks) when one rank's
// messages arrive forged: a wrong element count, a foreign codec, a cut-short message or
// random bytes. Every other rank fails within the call with GW_ERR_INVALID_MESSAGE naming the
// forger's block (no hang, no crash, no success with forged data); the forger, whose own
// block is decoded from its clean message, holds the clean result or fails as its peers stop.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gradwire/communicator.hpp"
#include "tests/forging_transport.hpp"

namespace gw {
namespace {

using test::Forgery;
using test::forgery_name;
using test::ForgingTransport;

TEST(AllgatherHostile, ForgedBlocksFailEveryOtherRankNamingTheSender) {
  const Forgery all[] = {Forgery::kCountOffByOne, Forgery::kForeignCodec, Forgery::kCutShort, Forgery::kRandomBytes};
  constexpr int kForger = 2;
  const size_t n = 3001;
  for (int p : {3, 4}) {
    for (const char* spec : {"qsgd:bits=8,rounding=nearest", "qsgd:bits=4", "bf16", "topk:ratio=0.05"}) {
      for (Forgery f : all) {
        SCOPED_TRACE(std::string(spec) + ", " + forgery_name(f) + ", p=" + std::to_string(p));
        std::vector<Status> got(static_cast<size_t>(p));
        std::vector<double> seconds(static_cast<size_t>(p));
        std::vector<std::vector<float>> outs(static_cast<size_t>(p));
        auto run = [&](bool forge) {
          auto group = transport::make_local_group(p);
          CommConfig cfg;
          cfg.timeout = std::chrono::seconds(20);
          cfg.chunk_bytes = 4096;  // several messages per block
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
              std::unique_ptr<Codec> codec = std::move(Codec::create(spec)).value();
              std::vector<float> x(n);
              for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7 + static_cast<size_t>(r)) % 13) - 6.0f;
              auto& out = outs[static_cast<size_t>(r)];
              out.assign(n * static_cast<size_t>(p), -7.0f);
              const auto t0 = std::chrono::steady_clock::now();
              got[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->allgather_compressed(
                  x.data(), out.data(), n, DType::kFloat32, codec.get());
              seconds[static_cast<size_t>(r)] =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            });
          }
          for (auto& t : threads) t.join();
        };
        run(false);
        for (const Status& s : got) ASSERT_TRUE(s.is_ok()) << s.to_string();
        const std::vector<std::vector<float>> clean = outs;
        for (int r = 1; r < p; ++r) EXPECT_EQ(clean[static_cast<size_t>(r)], clean[0]) << "rank " << r;
        run(true);
        for (int r = 0; r < p; ++r) {
          const Status& s = got[static_cast<size_t>(r)];
          EXPECT_LT(seconds[static_cast<size_t>(r)], 10.0) << "rank " << r << ": " << s.to_string();
          if (r == kForger) {
            // Its peers stop mid-call when they see the forgery and pass their error on: it
            // may fail, but never succeeds with anything but the clean result.
            if (s.is_ok()) {
              EXPECT_EQ(outs[static_cast<size_t>(r)], clean[static_cast<size_t>(r)]);
            }
            continue;
          }
          EXPECT_EQ(s.code(), Code::kInvalidMessage) << "rank " << r << ": " << s.to_string();
          EXPECT_NE(s.message().find("block from rank 2"), std::string::npos) << "rank " << r << ": " << s.to_string();
        }
      }
    }
  }
}

}  // namespace
}  // namespace gw
