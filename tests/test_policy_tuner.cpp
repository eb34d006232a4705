// The measured all-reduce policy (AllreduceTuner) driven with synthetic timings: one tuner
// per simulated rank, every agreement fed the concatenation of the ranks' local_stats, as the
// communicator's all-gather does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/common/context.hpp"
#include "collectives/policy/policy.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/ef_state.hpp"
#include "test_util.hpp"
#include "tests/local_ranks.hpp"

namespace gw {
namespace {

using Tuner = coll::AllreduceTuner;
using Timing = std::function<double(int rank, int call, Algo algo)>;

Tuner::Candidates candidates(std::initializer_list<Algo> algos, int seed = 0, bool seeded = false) {
  Tuner::Candidates c;
  for (Algo a : algos) c.algo[c.n++] = a;
  c.seed = seed;
  c.seeded = seeded;
  return c;
}

// Simulated ranks of one communicator: the same calls of one key on each, in lockstep.
struct Ranks {
  explicit Ranks(int n) {
    for (int r = 0; r < n; ++r) tuners.push_back(std::make_unique<Tuner>());
  }
  // Runs calls more calls of key, each timed by time; checks that every rank got the same
  // plan and returns rank 0's.
  std::vector<Tuner::Plan> run(const std::string& key, const Tuner::Candidates& c, int calls, const Timing& time) {
    std::vector<Tuner::Plan> plans;
    for (int i = 0; i < calls; ++i, ++index) {
      std::vector<Tuner::Plan> mine;
      for (auto& t : tuners) mine.push_back(t->plan(key, c));
      for (size_t r = 1; r < mine.size(); ++r) {
        EXPECT_EQ(mine[r].algo, mine[0].algo) << "call " << index;
        EXPECT_EQ(mine[r].timed, mine[0].timed) << "call " << index;
        EXPECT_EQ(mine[r].agree_after, mine[0].agree_after) << "call " << index;
        EXPECT_EQ(mine[r].trial, mine[0].trial) << "call " << index;
      }
      for (size_t r = 0; r < tuners.size(); ++r) {
        if (mine[r].timed) tuners[r]->record(key, mine[r].algo, time(static_cast<int>(r), index, mine[r].algo));
      }
      if (mine[0].agree_after) {
        std::vector<double> all(Tuner::kExchange * tuners.size());
        for (size_t r = 0; r < tuners.size(); ++r) tuners[r]->local_stats(key, all.data() + r * Tuner::kExchange);
        std::vector<Tuner::Verdict> vs;
        for (auto& t : tuners) vs.push_back(t->decide(key, all.data(), static_cast<int>(tuners.size())));
        for (size_t r = 1; r < vs.size(); ++r) {
          EXPECT_EQ(vs[r].pick, vs[0].pick);
          EXPECT_EQ(vs[r].next_refresh, vs[0].next_refresh);
        }
        verdicts.push_back(vs[0]);
        agreed_at.push_back(index);
      }
      plans.push_back(mine[0]);
    }
    return plans;
  }
  std::vector<std::unique_ptr<Tuner>> tuners;
  std::vector<Tuner::Verdict> verdicts;
  std::vector<int> agreed_at;  // call indices after which the ranks exchanged
  int index = 0;
};

constexpr int kTrials3 = Tuner::trial_calls(3);
constexpr int kTrials2 = Tuner::trial_calls(2);
// The calls of a refresh round with n candidates: a block of each challenger.
constexpr int kRefreshCalls3 = 2 * Tuner::kBlock;

TEST(PolicyTuner, TrialsRotateFromTheSeedThenAgree) {
  Ranks ranks(1);
  const auto c = candidates({Algo::kScatterReduce, Algo::kCompressedRing, Algo::kRing}, 1, true);
  const auto plans = ranks.run("k", c, kTrials3, [](int, int, Algo) { return 1.0; });
  ASSERT_EQ(kTrials3, 3 + 3 * 3 * Tuner::kBlock);
  for (int i = 0; i < kTrials3; ++i) {
    if (i < 3) {  // the first round warms up: each once, untimed
      EXPECT_EQ(plans[i].algo, c.algo[(1 + i) % 3]) << i;
      EXPECT_FALSE(plans[i].timed) << i;
    } else {  // then blocks, the last call of each timed
      const int b = i - 3;
      EXPECT_EQ(plans[i].algo, c.algo[(1 + b / Tuner::kBlock) % 3]) << i;
      EXPECT_EQ(plans[i].timed, b % Tuner::kBlock == Tuner::kBlock - 1) << i;
    }
    EXPECT_EQ(plans[i].agree_after, i == kTrials3 - 1) << i;
    EXPECT_TRUE(plans[i].trial);
  }
  ASSERT_EQ(ranks.verdicts.size(), 1u);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(ranks.verdicts[0].samples[j], Tuner::kRounds - 1);
}

TEST(PolicyTuner, DecidesTheFasterSlowestRank) {
  // Three candidates, two ranks: scatter-reduce is fastest on rank 0 but slow on rank 1; the
  // compressed ring is the fastest slowest-rank median.
  Ranks ranks(2);
  const auto c = candidates({Algo::kScatterReduce, Algo::kCompressedRing, Algo::kRing});
  ranks.run("k", c, kTrials3, [](int r, int call, Algo a) {
    const double noise = (call % 4) * 0.01;  // medians, not the best call
    switch (a) {
      case Algo::kScatterReduce: return (r == 0 ? 0.5 : 1.5) + noise;
      case Algo::kCompressedRing: return 1.2 + noise;
      default: return 2.0 + noise;
    }
  });
  ASSERT_EQ(ranks.verdicts.size(), 1u);
  const Tuner::Verdict& v = ranks.verdicts[0];
  EXPECT_EQ(v.pick, Algo::kCompressedRing) << v.describe();
  EXPECT_TRUE(v.switched);
  EXPECT_EQ(v.before, Algo::kRing);  // unseeded, the incumbent is the dense ring
  EXPECT_NEAR(v.slowest[0], 1.5, 1e-9);
  EXPECT_NEAR(v.slowest[1], 1.22, 1e-9);  // timed at calls 6, 12, 18: 1.22, 1.20, 1.22
  EXPECT_EQ(v.samples[0], Tuner::kRounds - 1);
  EXPECT_EQ(ranks.tuners[0]->decided("k"), Algo::kCompressedRing);
  EXPECT_EQ(ranks.tuners[1]->decided("k"), Algo::kCompressedRing);
  EXPECT_NE(v.describe().find("switched from ring"), std::string::npos) << v.describe();
  EXPECT_NE(v.describe().find("compressed_ring 1220.000 ms (3 samples)"), std::string::npos) << v.describe();
  // After the decision every call runs it, timed, until the first refresh.
  const auto after = ranks.run("k", c, Tuner::kRefresh, [](int, int, Algo) { return 1.0; });
  for (const auto& p : after) {
    EXPECT_EQ(p.algo, Algo::kCompressedRing);
    EXPECT_TRUE(p.timed);
    EXPECT_FALSE(p.trial || p.agree_after);
  }
  EXPECT_EQ(ranks.tuners[0]->decided("other"), Algo::kAuto);
}

TEST(PolicyTuner, CompressionMustBeatTheRingByTheMargin) {
  Ranks ranks(2);
  const auto c = candidates({Algo::kScatterReduce, Algo::kRing});
  ranks.run("k", c, kTrials2, [](int, int, Algo a) { return a == Algo::kRing ? 1.0 : 0.95; });
  ASSERT_EQ(ranks.verdicts.size(), 1u);
  EXPECT_EQ(ranks.verdicts[0].pick, Algo::kRing) << ranks.verdicts[0].describe();
  EXPECT_FALSE(ranks.verdicts[0].switched);
  // Measured slower (within the margin): the decision is checked again soon, not backed off.
  EXPECT_EQ(ranks.verdicts[0].next_refresh, Tuner::kRefresh);
}

TEST(PolicyTuner, NearEqualAlternatingTimingsDoNotFlip) {
  for (Algo first : {Algo::kScatterReduce, Algo::kRing}) {
    Ranks ranks(3);
    const auto c = candidates({Algo::kScatterReduce, Algo::kRing});
    // First make `first` the incumbent with a clear win, then make both paths near-equal,
    // each alternating above and below the other from call to call and rank to rank.
    ranks.run("k", c, kTrials2, [&](int, int, Algo a) { return a == first ? 1.0 : 2.0; });
    ASSERT_EQ(ranks.tuners[0]->decided("k"), first);
    const auto plans = ranks.run("k", c, 5000, [](int r, int call, Algo a) {
      const bool up = (call + r) % 2 == 0;
      return a == Algo::kRing ? (up ? 1.04 : 0.98) : (up ? 0.97 : 1.03);
    });
    ASSERT_GE(ranks.verdicts.size(), 6u);  // refreshes back off towards kRefreshMax
    for (size_t i = 1; i < ranks.verdicts.size(); ++i) {
      EXPECT_EQ(ranks.verdicts[i].pick, first) << ranks.verdicts[i].describe();
      EXPECT_FALSE(ranks.verdicts[i].switched);
    }
    for (const auto& p : plans) {
      if (!p.trial) {
        EXPECT_EQ(p.algo, first);
      }
    }
  }
}

TEST(PolicyTuner, PathThatBecomesSlowerIsDroppedAtTheRefresh) {
  Ranks ranks(2);
  const auto c = candidates({Algo::kScatterReduce, Algo::kCompressedRing, Algo::kRing});
  int slow_from = 1 << 30;
  const Timing time = [&](int r, int call, Algo a) {
    if (a == Algo::kScatterReduce) return call >= slow_from ? 3.0 + 0.1 * r : 0.5;
    return a == Algo::kCompressedRing ? 1.5 : 1.0;
  };
  ranks.run("k", c, kTrials3, time);
  ASSERT_EQ(ranks.tuners[0]->decided("k"), Algo::kScatterReduce);
  // Scatter-reduce slows down (a busy CPU, say) after 20 calls of the decision; the next
  // refresh round (kRefresh calls after the decision) finds the ring faster and switches.
  slow_from = ranks.index + 20;
  ranks.run("k", c, Tuner::kRefresh + kRefreshCalls3, time);
  ASSERT_EQ(ranks.verdicts.size(), 2u);
  EXPECT_EQ(ranks.agreed_at[1], kTrials3 - 1 + Tuner::kRefresh + kRefreshCalls3);
  const Tuner::Verdict& v = ranks.verdicts[1];
  EXPECT_EQ(v.before, Algo::kScatterReduce);
  EXPECT_EQ(v.pick, Algo::kRing) << v.describe();
  EXPECT_TRUE(v.switched);
  EXPECT_NEAR(v.slowest[0], 3.1, 1e-9);
  EXPECT_EQ(v.next_refresh, Tuner::kRefresh);
  EXPECT_EQ(ranks.tuners[1]->decided("k"), Algo::kRing);
  // When scatter-reduce is fast again, the refreshes bring it back (its window of kWindow
  // times turns over one refresh at a time), and every decision is the fastest by the margin.
  slow_from = 1 << 30;
  ranks.run("k", c, 2000, time);
  EXPECT_EQ(ranks.tuners[0]->decided("k"), Algo::kScatterReduce);
  for (const auto& vv : ranks.verdicts) {
    int p = -1;
    for (int j = 0; j < vv.n; ++j) p = vv.algo[j] == vv.pick ? j : p;
    ASSERT_GE(p, 0);
    for (int j = 0; j < vv.n; ++j) {
      EXPECT_LE(vv.slowest[p], vv.slowest[j] * (1 + Tuner::kMargin)) << vv.describe();
    }
  }
}

TEST(PolicyTuner, RefreshBacksOffWhileTheDecisionHolds) {
  Ranks ranks(2);
  const auto c = candidates({Algo::kSparseAllgather, Algo::kScatterReduce, Algo::kRing});
  ranks.run("k", c, 20000, [](int, int, Algo a) { return a == Algo::kSparseAllgather ? 0.2 : 1.0; });
  // Each refresh round runs a block of each of the two other candidates, then exchanges.
  // The first decision sets kRefresh; every later one that holds doubles it up to the cap.
  std::vector<int> want;
  int at = kTrials3 - 1, interval = Tuner::kRefresh;
  want.push_back(at);
  while (at + interval + kRefreshCalls3 < 20000) {
    at += interval + kRefreshCalls3;
    want.push_back(at);
    interval = std::min(2 * interval, Tuner::kRefreshMax);
  }
  EXPECT_EQ(ranks.agreed_at, want);
  for (size_t i = 0; i < ranks.verdicts.size(); ++i) {
    EXPECT_EQ(ranks.verdicts[i].pick, Algo::kSparseAllgather);
    EXPECT_EQ(ranks.verdicts[i].switched, i == 0);
  }
  EXPECT_EQ(ranks.verdicts.back().next_refresh, Tuner::kRefreshMax);
}

// Every rank makes the same calls in the same order whatever its own timings: the schedule of
// plans and agreements is a function of the call sequence and the exchanged numbers only.
TEST(PolicyTuner, ScheduleIsTheSameOnEveryRankAndEveryRun) {
  auto noisy = [](uint64_t salt) {
    return [salt](int r, int call, Algo a) {
      uint64_t h = (static_cast<uint64_t>(call) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(r) << 32) ^
                   (static_cast<uint64_t>(a) << 48) ^ salt;
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 32;
      const double base = a == Algo::kRing ? 1.0 : a == Algo::kScatterReduce ? 0.9 : 1.1;
      const double phase = (call / 700) % 2 == 0 ? 1.0 : (a == Algo::kRing ? 0.5 : 1.5);  // regimes change
      return base * phase * (0.8 + 0.4 * static_cast<double>(h % 1000) / 1000.0);
    };
  };
  const auto c = candidates({Algo::kScatterReduce, Algo::kCompressedRing, Algo::kRing});
  const auto d = candidates({Algo::kSparseAllgather, Algo::kRing});
  std::vector<std::vector<int>> schedules;
  for (uint64_t salt : {1u, 1u, 2u}) {
    Ranks ranks(4);  // run() checks that the four ranks' plans are equal call by call
    std::vector<int> sched;
    for (int block = 0; block < 60; ++block) {
      // Two keys interleaved, as a trainer's buckets are.
      for (const auto& p : ranks.run("a", c, 50, noisy(salt))) {
        sched.push_back(p.agree_after ? 1000 : static_cast<int>(p.algo));
      }
      for (const auto& p : ranks.run("b", d, 17, noisy(salt + 7))) {
        sched.push_back(p.agree_after ? 2000 : static_cast<int>(p.algo));
      }
    }
    EXPECT_GT(ranks.verdicts.size(), 10u);
    schedules.push_back(sched);
  }
  // The same calls with the same timings: the same schedule, agreements included.
  EXPECT_EQ(schedules[0], schedules[1]);
  // Other timings may decide otherwise, but the trials' agreement comes at the same call.
  EXPECT_EQ(schedules[0][kTrials3 - 1], 1000);
  EXPECT_EQ(schedules[2][kTrials3 - 1], 1000);
}

TEST(PolicyTuner, CandidatesByCodecRanksAndMemory) {
  auto q = test::make_codec("qsgd:bits=8");
  auto t = test::make_codec("topk:ratio=0.01");
  auto tdense = test::make_codec("topk:ratio=0.5");
  auto in = [](const Codec* codec, int p) {
    return coll::PolicyInput{size_t{1} << 20, DType::kFloat32, codec, p, Algo::kAuto, Algo::kAuto, size_t{64} << 10};
  };
  auto check = [&](const coll::PolicyInput& pi, bool device, std::vector<Algo> want) {
    const auto c = coll::allreduce_candidates(pi, coll::choose_allreduce(pi), device, 0);
    std::string got;
    for (int j = 0; j < c.n; ++j) got += std::string(j > 0 ? ", " : "") + algo_name(c.algo[j]);
    ASSERT_EQ(c.n, static_cast<int>(want.size())) << "p=" << pi.nranks << ": " << got;
    for (int j = 0; j < c.n; ++j) EXPECT_EQ(c.algo[j], want[static_cast<size_t>(j)]) << j;
    EXPECT_EQ(c.seed, 0);
    EXPECT_FALSE(c.seeded);
  };
  check(in(q.get(), 4), false, {Algo::kScatterReduce, Algo::kCompressedRing, Algo::kRing});
  check(in(q.get(), 2), false, {Algo::kScatterReduce, Algo::kRing});
  check(in(q.get(), 4), true, {Algo::kScatterReduce, Algo::kRing});  // no compressed ring on device
  // Sparse codecs on host buffers weigh sparse doubling against any other choice, and the
  // sparse all-gather while k p < n.
  check(in(t.get(), 4), false, {Algo::kSparseAllgather, Algo::kScatterReduce, Algo::kSparseDoubling, Algo::kRing});
  check(in(t.get(), 4), true, {Algo::kSparseAllgather, Algo::kScatterReduce, Algo::kRing});
  check(in(tdense.get(), 4), false, {Algo::kScatterReduce, Algo::kSparseDoubling, Algo::kRing});
  check(in(t.get(), 64), false,
        {Algo::kSparseAllgather, Algo::kScatterReduce, Algo::kSparseDoubling, Algo::kRing});  // k p < n
  // Which of scatter-reduce and halving-doubling is the static choice is the cost model's
  // (host buffers; on device scatter-reduce stays): scatter-reduce's 2 (p - 1) messages per
  // rank against halving-doubling's second compression.
  coll::CostModel dear;  // messages dear, codec fast
  dear.message_cpu_s = 20e-6;
  dear.default_codec = coll::CodecRates{50e9, 50e9};
  coll::CostModel cheap;  // messages cheap, codec slow
  cheap.message_cpu_s = 1e-9;
  cheap.latency_s = 1e-7;
  cheap.default_codec = coll::CodecRates{1e9, 2e9};
  auto with = [](coll::PolicyInput pi, const coll::CostModel& m) {
    pi.model = &m;
    return pi;
  };
  // Beyond 8 ranks halving-doubling replaces the compressed ring among the candidates.
  check(with(in(q.get(), 9), cheap), false, {Algo::kScatterReduce, Algo::kHalvingDoubling, Algo::kRing});
  check(with(in(q.get(), 65), dear), false, {Algo::kHalvingDoubling, Algo::kRing});
  check(with(in(q.get(), 65), cheap), false, {Algo::kScatterReduce, Algo::kHalvingDoubling, Algo::kRing});
  check(with(in(t.get(), 1024), dear), false, {Algo::kHalvingDoubling, Algo::kSparseDoubling, Algo::kRing});  // k p > n
  check(with(in(tdense.get(), 1024), dear), false, {Algo::kHalvingDoubling, Algo::kSparseDoubling, Algo::kRing});
  check(with(in(tdense.get(), 1000), cheap), false,
        {Algo::kScatterReduce, Algo::kSparseDoubling, Algo::kRing});  // folding costs a pass
  // Whatever the model, the choice is its faster one.
  const coll::CostModel* models[] = {&dear, &cheap, nullptr};
  for (const coll::CostModel* m : models) {
    for (int p : {3, 8, 65, 1024, 16384}) {
      for (size_t count : {size_t{1} << 14, size_t{1} << 20, size_t{1} << 24}) {
        coll::PolicyInput pi = in(q.get(), p);
        pi.count = count;
        pi.model = m;
        const bool hd = coll::model_seconds(pi, Algo::kHalvingDoubling) < coll::model_seconds(pi, Algo::kScatterReduce);
        EXPECT_EQ(coll::choose_allreduce(pi), hd ? Algo::kHalvingDoubling : Algo::kScatterReduce) << p << " " << count;
      }
    }
  }
  // Sparse codecs on host buffers, more than 2 ranks: the model's fastest of the exact sparse
  // sums (the sparse all-gather and sparse doubling) while k p < n, else of sparse doubling,
  // scatter-reduce and halving-doubling.
  for (const coll::CostModel* m : models) {
    for (const Codec* codec : {t.get(), tdense.get()}) {
      for (int p : {3, 8, 65, 1024, 16384}) {
        for (size_t count : {size_t{1} << 14, size_t{1} << 20, size_t{1} << 24}) {  // above the dense threshold
          coll::PolicyInput pi = in(codec, p);
          pi.count = count;
          pi.model = m;
          const bool fits = codec->spec().k_for(count) * static_cast<uint64_t>(p) < count;
          Algo best = Algo::kAuto;
          double fastest = 0;
          for (Algo a : {Algo::kSparseAllgather, Algo::kScatterReduce, Algo::kSparseDoubling, Algo::kHalvingDoubling}) {
            if (a == Algo::kSparseAllgather && !fits) continue;
            if (fits && a != Algo::kSparseAllgather && a != Algo::kSparseDoubling) continue;
            const double s = coll::model_seconds(pi, a);
            if (best == Algo::kAuto || s < fastest) {
              best = a;
              fastest = s;
            }
          }
          EXPECT_EQ(coll::choose_allreduce(pi), best) << codec->spec().to_string() << " p=" << p << " n=" << count;
        }
      }
    }
  }
  coll::PolicyInput dev = with(in(q.get(), 1024), dear);
  dev.on_device = true;
  EXPECT_EQ(coll::choose_allreduce(dev), Algo::kScatterReduce);
  // The dense choice: log p whole-buffer steps for small buffers on host memory, the ring's
  // bytes in 2 log p steps (Rabenseifner) for larger ones; on device buffers the ring.
  coll::PolicyInput small = in(nullptr, 8);
  small.count = 1024;
  EXPECT_EQ(coll::choose_allreduce(small), Algo::kRecursiveDoubling);
  small.on_device = true;
  EXPECT_EQ(coll::choose_allreduce(small), Algo::kRing);
  coll::PolicyInput large = in(nullptr, 8);
  EXPECT_EQ(coll::choose_allreduce(large), Algo::kRabenseifner);
  large.on_device = true;
  EXPECT_EQ(coll::choose_allreduce(large), Algo::kRing);
  // Whatever the model, the dense choice is its fastest of the three (the ring alone at 2
  // ranks, where Rabenseifner is the ring's schedule).
  for (const coll::CostModel* m : models) {
    for (int p : {2, 3, 8, 65, 1024, 16384}) {
      for (size_t count : {size_t{1} << 8, size_t{1} << 14, size_t{1} << 20, size_t{1} << 24}) {
        coll::PolicyInput pi = in(nullptr, p);
        pi.count = count;
        pi.model = m;
        Algo best = Algo::kRing;
        double fastest = coll::model_seconds(pi, Algo::kRing);
        for (Algo a : {Algo::kRecursiveDoubling, Algo::kRabenseifner}) {
          if (a == Algo::kRabenseifner && p <= 2) continue;
          if (const double s = coll::model_seconds(pi, a); s < fastest) {
            best = a;
            fastest = s;
          }
        }
        EXPECT_EQ(coll::choose_allreduce(pi), best) << "dense p=" << p << " n=" << count;
      }
    }
  }
}

TEST(PolicyTuner, LinkSpeedSeedsTheFirstChoice) {
  auto q = test::make_codec("qsgd:bits=8");
  const coll::PolicyInput in{size_t{64} << 20, DType::kFloat32, q.get(), 4, Algo::kAuto, Algo::kAuto, size_t{64} << 10};
  const Algo stat = coll::choose_allreduce(in);
  ASSERT_EQ(stat, Algo::kScatterReduce);
  const auto slow = coll::allreduce_candidates(in, stat, false, 1.0);
  const auto fast = coll::allreduce_candidates(in, stat, false, 100.0);
  EXPECT_TRUE(slow.seeded);
  EXPECT_EQ(slow.algo[slow.seed], Algo::kScatterReduce);  // 256 MiB over 1 Gbit/s: compress
  EXPECT_EQ(fast.algo[fast.seed], Algo::kRing);           // over 100 Gbit/s the encode costs more
  EXPECT_LT(coll::model_seconds(in, Algo::kScatterReduce, 1.0), coll::model_seconds(in, Algo::kRing, 1.0));
  EXPECT_GT(coll::model_seconds(in, Algo::kScatterReduce, 100.0), coll::model_seconds(in, Algo::kRing, 100.0));

  // The seed runs first and is the incumbent: near-equal trials keep it...
  for (const auto* c : {&slow, &fast}) {
    Ranks ranks(2);
    const auto plans = ranks.run("k", *c, 1, [](int, int, Algo) { return 1.0; });
    EXPECT_EQ(plans[0].algo, c->algo[c->seed]);
    ranks.run("k", *c, kTrials3 - 1, [](int, int, Algo a) { return a == Algo::kCompressedRing ? 2.0 : 1.0; });
    ASSERT_EQ(ranks.verdicts.size(), 1u);
    EXPECT_EQ(ranks.verdicts[0].pick, c->algo[c->seed]) << ranks.verdicts[0].describe();
    EXPECT_FALSE(ranks.verdicts[0].switched);
  }
  // ...and trials that disagree with it by the margin overrule it.
  Ranks ranks(2);
  ranks.run("k", slow, kTrials3, [](int, int, Algo a) { return a == Algo::kRing ? 0.5 : 1.0; });
  EXPECT_EQ(ranks.verdicts[0].pick, Algo::kRing);
  EXPECT_TRUE(ranks.verdicts[0].switched);
}

TEST(PolicyTuner, LinkSpeedParsing) {
  EXPECT_EQ(coll::parse_link_gbps(nullptr), 0.0);
  EXPECT_EQ(coll::parse_link_gbps(""), 0.0);
  EXPECT_EQ(coll::parse_link_gbps("1"), 1.0);
  EXPECT_EQ(coll::parse_link_gbps("2.5"), 2.5);
  EXPECT_EQ(coll::parse_link_gbps("100"), 100.0);
  for (const char* bad : {"0", "-1", "fast", "10gbit", "inf", "nan", "1e999"}) {
    EXPECT_EQ(coll::parse_link_gbps(bad), 0.0) << bad;
  }
  ASSERT_EQ(setenv("GW_LINK_GBPS", "25", 1), 0);
  EXPECT_EQ(coll::link_gbps_from_env(), 25.0);
  ASSERT_EQ(unsetenv("GW_LINK_GBPS"), 0);
  EXPECT_EQ(coll::link_gbps_from_env(), 0.0);
}

// The tuner weighs the compressed ring against scatter-reduce, which keep their owner residual
// for different segments (rank + 1 and rank). Alternating them with error feedback loses
// nothing and moves nothing to other elements: element by element, the outputs plus every
// residual equal the inputs.
TEST(PolicyTuner, SwitchingCompressedAlgorithmsKeepsTheResidualInPlace) {
  const int p = 3;
  const size_t n = 40000;  // segments of 13334, 13333, 13333: rank 0's two owner segments differ in length
  const Algo seq[] = {Algo::kScatterReduce,  Algo::kCompressedRing, Algo::kCompressedRing, Algo::kScatterReduce,
                      Algo::kCompressedRing, Algo::kScatterReduce,  Algo::kScatterReduce};
  const Algo last = seq[sizeof seq / sizeof seq[0] - 1];
  std::vector<double> in_total(n, 0.0), held(n, 0.0), out_total(n, 0.0);
  std::mutex mu;
  test::run_local_ranks(p, [&](Communicator& c, int r) {
    auto codec = test::make_codec("qsgd:bits=4");
    ErrorFeedback ef(n);
    std::vector<double> my_in(n, 0.0), my_out(n, 0.0);
    std::vector<float> out(n);
    uint64_t s = 0;
    for (Algo a : seq) {
      auto g = test::gradient(n, static_cast<uint64_t>(r * 1000) + s++);
      ASSERT_TRUE(c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, codec.get(), &ef, a).is_ok());
      for (size_t i = 0; i < n; ++i) {
        my_in[i] += g[i];
        my_out[i] += out[i];
      }
    }
    const coll::Partition part{n, static_cast<uint64_t>(p)};
    const uint64_t seg = static_cast<uint64_t>(last == Algo::kCompressedRing ? (r + 1) % p : r);
    ASSERT_EQ(ef.owner_count(), part.length(seg));
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < n; ++i) {
      in_total[i] += my_in[i];
      held[i] += ef.residual()[i];
      if (r == 0) out_total[i] = my_out[i];
    }
    for (size_t i = 0; i < ef.owner_count(); ++i) held[part.start(seg) + i] += ef.owner_residual()[i];
  });
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(out_total[i] + held[i], in_total[i], 1e-3 * (1.0 + std::fabs(in_total[i]))) << i;
  }
}

// GW_LINK_GBPS on a communicator: before the first decision the policy reports the seed.
TEST(PolicyTuner, CommunicatorReportsTheSeedBeforeDeciding) {
  for (const char* gbps : {"1", "100"}) {
    ASSERT_EQ(setenv("GW_LINK_GBPS", gbps, 1), 0);
    test::run_local_ranks(4, [&](Communicator& c, int) {
      auto q = test::make_codec("qsgd:bits=8");
      EXPECT_EQ(c.choose_algo(size_t{64} << 20, DType::kFloat32, q.get(), Algo::kAuto),
                gbps[1] == '\0' ? Algo::kScatterReduce : Algo::kRing)
          << gbps;
      // A caller's or GW_ALGO's choice still wins.
      EXPECT_EQ(c.choose_algo(size_t{64} << 20, DType::kFloat32, q.get(), Algo::kCompressedRing),
                Algo::kCompressedRing);
    });
  }
  ASSERT_EQ(unsetenv("GW_LINK_GBPS"), 0);
}

}  // namespace
}  // namespace gw
