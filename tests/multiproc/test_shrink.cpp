// Revoke and shrink between real processes over UCX (TCP and shared memory): a rank killed
// mid-collective, a frozen rank, a revoke, the would-be coordinator dying before the
// agreement, a second shrink. Survivors must agree, get a working communicator of the right
// size within 2 s (8 ranks), compute exact dense sums over it and keep EF mass.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Exit codes the children use (each failure its own, so a failing test says what went wrong).
constexpr int kOk = 0;
constexpr int kInitFailed = 10;
constexpr int kUnexpectedSuccess = 11;
constexpr int kWrongCode = 12;
constexpr int kTooSlow = 13;
constexpr int kShrinkFailed = 14;
constexpr int kWrongSize = 15;
constexpr int kWrongSum = 16;
constexpr int kNotConserved = 17;
constexpr int kWarmupFailed = 18;
constexpr int kAfterShrinkFailed = 19;
constexpr int kWrongRank = 20;
constexpr int kOldNotBroken = 21;
constexpr int kNotExcluded = 22;

Result<std::unique_ptr<Communicator>> join(const bootstrap::UniqueId& id, int rank, int n, milliseconds timeout) {
  CommConfig cfg;
  cfg.timeout = timeout;
  return coll::init_communicator(
      rank, n, [&](const std::string& blob) { return bootstrap::rendezvous(id, rank, n, blob, timeout); }, cfg);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// join(), then a barrier: every rank's init is over before anyone dies (a death during
// another rank's init fails that init, which is not what these tests are about).
Result<std::unique_ptr<Communicator>> join_all(const bootstrap::UniqueId& id, int rank, int n, milliseconds timeout) {
  auto comm = join(id, rank, n, timeout);
  if (comm.is_ok() && !(*comm)->barrier().is_ok()) return Status(Code::kRemote, "barrier after init failed");
  return comm;
}

// Dies between calls: after a pause, so that the last messages of the call this rank finished
// have reached its peers (a peer still waiting for one would fail that call instead).
[[noreturn]] void die_between_calls() {
  std::this_thread::sleep_for(milliseconds(200));
  raise(SIGKILL);
  std::abort();
}

bool dense_call_fails(Communicator& comm, size_t n) {
  std::vector<float> x(n, 1.0f);
  return !comm.allreduce(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok();
}

// comm.shrink(), its error printed when it fails.
Result<std::unique_ptr<Communicator>> shrink_noisily(Communicator& comm, int rank) {
  auto shrunk = comm.shrink();
  if (!shrunk.is_ok()) std::fprintf(stderr, "rank %d: shrink: %s\n", rank, shrunk.status().to_string().c_str());
  return shrunk;
}

// A dense sum over comm of (old_rank + 1) * (i % 7 + 1) per element: exact in float.
int check_dense(Communicator& comm, const std::vector<int>& old_ranks, int my_old_rank, size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((my_old_rank + 1) * static_cast<int>(i % 7 + 1));
  if (!comm.allreduce(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok()) {
    return kAfterShrinkFailed;
  }
  int total = 0;
  for (int r : old_ranks) total += r + 1;
  for (size_t i = 0; i < n; ++i) {
    if (x[i] != static_cast<float>(total * static_cast<int>(i % 7 + 1))) {
      std::fprintf(stderr, "element %zu: %g, want %d\n", i, static_cast<double>(x[i]),
                   total * static_cast<int>(i % 7 + 1));
      return kWrongSum;
    }
  }
  return kOk;
}

double total(const float* v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += v[i];
  return s;
}

// One compressed all-reduce with EF on comm: the sum of what came out plus what the states
// kept afterwards equals the sum of what went in plus what they kept before (summed over the
// ranks by a dense all-reduce), within float rounding.
int check_ef_conserved(Communicator& comm, Codec& codec, ErrorFeedback& ef, Algo algo, int seed) {
  const size_t n = ef.count();
  std::vector<float> x(n), out(n);
  for (size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
  const double before = total(x.data(), n) + total(ef.residual(), n) + total(ef.owner_residual(), ef.owner_count());
  const Status s = comm.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, &codec, &ef, algo);
  if (!s.is_ok()) {
    std::fprintf(stderr, "compressed all-reduce: %s\n", s.to_string().c_str());
    return kAfterShrinkFailed;
  }
  const double after = total(ef.residual(), n) + total(ef.owner_residual(), ef.owner_count());
  double mine[2] = {before - after, comm.rank() == 0 ? total(out.data(), n) : 0.0};
  if (!comm.allreduce(mine, mine, 2, DType::kFloat64, ReduceOp::kSum, nullptr, nullptr).is_ok()) {
    return kAfterShrinkFailed;
  }
  const double err = std::fabs(mine[0] - mine[1]);
  if (err > 1e-3 * (1.0 + std::fabs(mine[0]))) {
    std::fprintf(stderr, "EF mass: in - kept %.6f, out %.6f\n", mine[0], mine[1]);
    return kNotConserved;
  }
  return kOk;
}

class Shrink : public ::testing::TestWithParam<const char*> {
 protected:
  // Forks the ranks with UCX_TLS set to the parameter in each.
  std::vector<int> run(int n, const std::function<int(int, const bootstrap::UniqueId&)>& fn,
                       seconds limit = seconds(90)) {
    std::vector<int> ranks(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
    const std::string tls = std::string(GetParam()) + ",self";
    return test::fork_with_unique_id(
        ranks, seconds(30),
        [&](int rank, const bootstrap::UniqueId& id) {
          setenv("UCX_TLS", tls.c_str(), 1);
          return fn(rank, id);
        },
        limit);
  }
};

// 1 of 4 ranks is killed inside a large all-reduce; the others see the failure, shrink to 3
// in under 2 s, sum exactly, and their EF states (filled by scatter-reduce over 4 ranks, whose
// owner-side residuals belong to the old layout) keep their mass in calls over 3.
TEST_P(Shrink, KilledRankMidCollectiveIsShrunkAway) {
  const auto codes = run(4, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join(id, rank, 4, milliseconds(5000));
    if (!comm.is_ok()) return kInitFailed;
    auto codec = Codec::create("qsgd:bits=4");
    if (!codec.is_ok()) return kInitFailed;
    ErrorFeedback ef(100003);
    for (int step = 0; step < 3; ++step) {
      if (check_ef_conserved(**comm, **codec, ef, Algo::kScatterReduce, step) != kOk) return kWarmupFailed;
    }
    std::vector<float> big(size_t{8} << 20, 1.0f);
    if (rank == 2) {
      std::thread([] {
        std::this_thread::sleep_for(milliseconds(3));
        raise(SIGKILL);
      }).detach();
    }
    const auto t_call = Clock::now();
    const Status s =
        (*comm)->allreduce(big.data(), big.data(), big.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
    if (s.is_ok()) {
      // The call may have finished before the kill; the next one cannot.
      const Status again = (*comm)->barrier();
      if (again.is_ok()) return kUnexpectedSuccess;
    } else if (s.code() != Code::kRemote && s.code() != Code::kRevoked) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
      return kWrongCode;
    }
    if (seconds_since(t_call) > 5) return kTooSlow;
    const auto t0 = Clock::now();
    auto shrunk = shrink_noisily(**comm, rank);
    const double took = seconds_since(t0);
    if (!shrunk.is_ok()) return kShrinkFailed;
    std::fprintf(stderr, "rank %d: shrink took %.1f ms\n", rank, took * 1e3);
    if (took > 2.0) return kTooSlow;
    Communicator& c = **shrunk;
    if (c.size() != 3) return kWrongSize;
    if (c.rank() != (rank < 2 ? rank : rank - 1)) return kWrongRank;
    if ((*comm)->barrier().is_ok()) return kOldNotBroken;
    if (int r = check_dense(c, {0, 1, 3}, rank, 100003); r != kOk) return r;
    for (int step = 0; step < 3; ++step) {
      if (int r = check_ef_conserved(c, **codec, ef, Algo::kScatterReduce, 10 + step); r != kOk) return r;
    }
    return check_ef_conserved(c, **codec, ef, Algo::kCompressedRing, 20);
  });
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
  EXPECT_EQ(codes[3], kOk);
}

// A revoke on one rank fails the others' pending call with kRevoked within a second; a shrink
// with every rank alive gives a communicator over all of them.
TEST_P(Shrink, RevokeReachesEveryRankAndShrinkKeepsThemAll) {
  const auto codes = run(3, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join(id, rank, 3, milliseconds(10000));
    if (!comm.is_ok()) return kInitFailed;
    Communicator* c = comm->get();
    std::vector<float> x(1000, 1.0f);
    const auto t0 = Clock::now();
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(200));
      c->revoke();
    }
    // Ranks 0 and 2 wait in an all-reduce that rank 1 never joins.
    const Status s = c->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
    if (s.code() != Code::kRevoked) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
      return kWrongCode;
    }
    if (seconds_since(t0) > 1.5) return kTooSlow;
    if (c->error().code() != Code::kRevoked) return kWrongCode;
    auto shrunk = shrink_noisily(*c, rank);
    if (!shrunk.is_ok()) return kShrinkFailed;
    if ((*shrunk)->size() != 3 || (*shrunk)->rank() != rank) return kWrongSize;
    // Shrunk once: a second shrink of the old communicator is refused.
    auto twice = c->shrink();
    if (twice.is_ok() || twice.status().code() != Code::kInvalidUsage) return kWrongCode;
    return check_dense(**shrunk, {0, 1, 2}, rank, 4099);
  });
  for (int c : codes) EXPECT_EQ(c, kOk);
}

// Rank 0, which would coordinate the agreement, dies after rank 3 does and before shrinking;
// ranks 1 and 2 agree without both.
TEST_P(Shrink, CoordinatorDyingBeforeTheAgreementIsSurvived) {
  const auto codes = run(4, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join_all(id, rank, 4, milliseconds(5000));
    if (!comm.is_ok()) return kInitFailed;
    if (rank == 3) die_between_calls();
    if (!dense_call_fails(**comm, 4096)) return kUnexpectedSuccess;
    if (rank == 0) raise(SIGKILL);
    auto shrunk = shrink_noisily(**comm, rank);
    if (!shrunk.is_ok()) return kShrinkFailed;
    if ((*shrunk)->size() != 2 || (*shrunk)->rank() != rank - 1) return kWrongSize;
    return check_dense(**shrunk, {1, 2}, rank, 12345);
  });
  EXPECT_EQ(codes[0], 128 + SIGKILL);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], kOk);
  EXPECT_EQ(codes[3], 128 + SIGKILL);
}

// Shrink, then lose another rank and shrink the shrunk communicator.
TEST_P(Shrink, ShrinksTwice) {
  const auto codes = run(5, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join_all(id, rank, 5, milliseconds(5000));
    if (!comm.is_ok()) return kInitFailed;
    if (rank == 4) die_between_calls();
    if (!dense_call_fails(**comm, 777)) return kUnexpectedSuccess;
    auto first = shrink_noisily(**comm, rank);
    if (!first.is_ok()) return kShrinkFailed;
    if (int r = check_dense(**first, {0, 1, 2, 3}, rank, 1001); r != kOk) return r;
    if (rank == 1) die_between_calls();
    if (!dense_call_fails(**first, 777)) return kUnexpectedSuccess;
    comm->reset();  // the old one may go first: the shrunk ones keep the transport
    auto second = shrink_noisily(**first, rank);
    if (!second.is_ok()) return kShrinkFailed;
    if ((*second)->size() != 3) return kWrongSize;
    return check_dense(**second, {0, 2, 3}, rank, 1001);
  });
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
  EXPECT_EQ(codes[2], kOk);
  EXPECT_EQ(codes[3], kOk);
  EXPECT_EQ(codes[4], 128 + SIGKILL);
}

// A rank frozen (SIGSTOP) inside a collective: the others time out, shrink without it after
// the timeout, and go on; when it wakes, its call fails and its shrink says it was left out.
TEST_P(Shrink, FrozenRankIsCountedOutAfterTheTimeout) {
  const auto codes = run(3, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join_all(id, rank, 3, milliseconds(1500));
    if (!comm.is_ok()) return kInitFailed;
    std::vector<float> x(4096, 1.0f);
    if (rank == 2) {
      // A helper process wakes this one 6 s later (a stopped process cannot wake itself).
      const pid_t me = getpid();
      if (fork() == 0) {
        sleep(6);
        kill(me, SIGCONT);
        _exit(0);
      }
      raise(SIGSTOP);
      // Awake: the others have moved on without this rank.
      const Status s =
          (*comm)->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
      if (s.is_ok()) return kUnexpectedSuccess;
      auto shrunk = (*comm)->shrink();
      if (shrunk.is_ok()) return kNotExcluded;
      std::fprintf(stderr, "rank 2 after waking: %s\n", shrunk.status().to_string().c_str());
      return shrunk.status().code() == Code::kRemote || shrunk.status().code() == Code::kTimeout ? kOk : kWrongCode;
    }
    const auto t0 = Clock::now();
    const Status s =
        (*comm)->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
    if (s.code() != Code::kTimeout && s.code() != Code::kRevoked) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
      return kWrongCode;
    }
    auto shrunk = shrink_noisily(**comm, rank);
    if (!shrunk.is_ok()) return kShrinkFailed;
    std::fprintf(stderr, "rank %d: call + shrink took %.2f s\n", rank, seconds_since(t0));
    if (seconds_since(t0) > 5.5) return kTooSlow;
    if ((*shrunk)->size() != 2) return kWrongSize;
    const int r = check_dense(**shrunk, {0, 1}, rank, 3333);
    // Stay up until rank 2 has woken and asked: it must hear that it was left out (with
    // nobody left to ask, it would be the only survivor).
    std::this_thread::sleep_until(t0 + seconds(9));
    return r;
  });
  for (int c : codes) EXPECT_EQ(c, kOk);
}

// 8 ranks, one killed: the shrink takes under 2 s.
TEST_P(Shrink, EightRanksShrinkWithinTwoSeconds) {
  const auto codes = run(8, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join_all(id, rank, 8, milliseconds(10000));
    if (!comm.is_ok()) return kInitFailed;
    if (rank == 5) die_between_calls();
    if (!dense_call_fails(**comm, 100000)) return kUnexpectedSuccess;
    const auto t0 = Clock::now();
    auto shrunk = shrink_noisily(**comm, rank);
    const double took = seconds_since(t0);
    if (!shrunk.is_ok()) return kShrinkFailed;
    std::fprintf(stderr, "rank %d: 8-rank shrink took %.1f ms\n", rank, took * 1e3);
    if (took > 2.0) return kTooSlow;
    if ((*shrunk)->size() != 7) return kWrongSize;
    return check_dense(**shrunk, {0, 1, 2, 3, 4, 6, 7}, rank, 5003);
  });
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], r == 5 ? 128 + SIGKILL : kOk) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Tls, Shrink, ::testing::Values("tcp", "sm"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
}  // namespace gw
