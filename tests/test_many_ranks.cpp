// Communicators past 1024 ranks: created, and their calls run, over the in-process transport;
// and the tag field's wrap for algorithms with more steps than it holds (rings past 2048
// ranks) never reaches the call check's step.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "collectives/checks/call_check.hpp"
#include "collectives/common/context.hpp"
#include "collectives/common/step_ranges.hpp"
#include "gradwire/communicator.hpp"
#include "tests/local_ranks.hpp"
#include "tests/test_util.hpp"
#include "transport/local/local_transport.hpp"

namespace gw {
namespace {

TEST(ManyRanks, TagsWrapBelowTheCallChecksStep) {
  auto group = transport::make_local_group(1);
  coll::Scratch scratch;
  coll::Context c{*group[0], 0, 1, transport::Clock::now(), 77, 4096, scratch};
  const uint64_t check = coll::CallCheck::tag(77);
  auto step_of = [](uint64_t tag) { return (tag >> coll::kChunkBits) & (coll::kMaxSteps - 1); };
  for (uint32_t s = 0; s < 4 * coll::kMaxSteps; ++s) {
    const uint64_t t = c.tag(s, 0);
    ASSERT_NE(t, check) << s;
    ASSERT_LT(step_of(t), coll::kCallCheckSteps.base) << s;
    if (s < coll::kCallCheckSteps.base) {
      ASSERT_EQ(step_of(t), s);  // the wire is unchanged below the wrap
    }
    // Two steps in flight (a ring's) never share a tag.
    ASSERT_NE(t, c.tag(s + 1, 0)) << s;
  }
  // A ring of 65536 ranks: 131070 steps, a step and its twin kMaxSteps - 1 apart.
  EXPECT_EQ(c.tag(5, 3), c.tag(5 + coll::kMaxSteps - 1, 3));
}

// Past the old bound of 1024. Threads as ranks on this machine's two cores: the communicators
// are made and one call runs (ranks far apart talk in recursive doubling's first exchanges).
TEST(ManyRanks, ACommunicatorOf1025RanksRunsACall) {
  const int p = 1025;
  std::atomic<int> ok{0};
  CommConfig cfg;
  cfg.timeout = std::chrono::seconds(120);
  test::run_local_ranks(
      p,
      [&](Communicator& c, int r) {
        ASSERT_EQ(c.size(), p);
        float x = static_cast<float>(r), out = 0;
        Status s =
            c.allreduce(&x, &out, 1, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr, Algo::kRecursiveDoubling);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        EXPECT_EQ(out, static_cast<float>(p) * static_cast<float>(p - 1) / 2.0f);
        ok.fetch_add(1);
      },
      cfg);
  EXPECT_EQ(ok.load(), p);
}

TEST(ManyRanks, MoreThanTheTransportHoldsIsRefused) {
  // The bound is the transport's (and the bootstrap's): 65536 ranks.
  EXPECT_EQ(transport::kMaxRanks, 65536);
}

}  // namespace
}  // namespace gw
