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

#include "gradwire/communicator.hpp"
#include "tests/forging_transport.hpp"

namespace gw {
namespace {

using test::Forgery;
using test::forgery_name;
using test::ForgingTransport;

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
