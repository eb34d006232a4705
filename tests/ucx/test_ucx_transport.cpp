// The UCX transport between real processes: forked ranks, over TCP and over shared memory.
// Each child checks what it sees and reports through its exit status; the parent asserts.
#include <signal.h>
#include <time.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/ucx/fork_ranks.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using transport::Clock;
using transport::kTagMask;
using transport::Op;
using transport::OpState;
using transport::UcxTransport;

int g_rank = -1;  // this child's rank, for messages

#define CHILD_CHECK(cond)                                                                            \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, __FILE__, __LINE__, #cond); \
      return 1;                                                                                      \
    }                                                                                                \
  } while (0)

#define CHILD_OK(expr)                                                                                             \
  do {                                                                                                             \
    const ::gw::Status s_ = (expr);                                                                                \
    if (!s_.is_ok()) {                                                                                             \
      std::fprintf(stderr, "rank %d: %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #expr, s_.to_string().c_str()); \
      return 1;                                                                                                    \
    }                                                                                                              \
  } while (0)

Clock::time_point in(Clock::duration d) { return Clock::now() + d; }

// Reproducible bytes (xorshift64*, 8 at a time).
void fill(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const uint64_t v = x * 0x2545F4914F6CDD1Dull;
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i);
}

bool matches(const uint8_t* p, size_t n, uint64_t seed) {
  std::vector<uint8_t> want(n);
  fill(want.data(), n, seed);
  return n == 0 || std::memcmp(p, want.data(), n) == 0;
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A ring exchange, so that every rank has talked to its neighbours.
int ring_once(UcxTransport& t, uint64_t tag) {
  const int n = t.size(), r = t.rank();
  std::vector<uint8_t> out(4096), in_buf(4096);
  fill(out.data(), out.size(), static_cast<uint64_t>(r));
  Op ops[2];
  CHILD_OK(t.irecv((r + n - 1) % n, tag, in_buf.data(), in_buf.size(), ops[0]));
  CHILD_OK(t.isend((r + 1) % n, tag, out.data(), out.size(), ops[1]));
  CHILD_OK(t.wait_all(ops, 2, in(seconds(20))));
  CHILD_CHECK(ops[0].bytes == in_buf.size());
  CHILD_CHECK(matches(in_buf.data(), in_buf.size(), static_cast<uint64_t>((r + n - 1) % n)));
  return 0;
}

std::string describe(const std::vector<int>& codes) {
  std::string s;
  for (size_t i = 0; i < codes.size(); ++i) s += "rank " + std::to_string(i) + ": " + std::to_string(codes[i]) + "; ";
  return s;
}

class Ucx : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<int> run(int n, const test::RankBody& body, seconds limit = seconds(40)) {
    return test::run_ranks(
        n, GetParam(),
        [&](std::unique_ptr<UcxTransport>& t, int rank, int size) {
          g_rank = rank;
          return body(t, rank, size);
        },
        limit);
  }
  void expect_all_ok(const std::vector<int>& codes) {
    for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << describe(codes);
  }
};

TEST_P(Ucx, PingPongOfAwkwardSizes) {
  const std::vector<size_t> sizes = {0, 1, 7, 4097, (size_t{1} << 20) + 3, size_t{64} << 20};
  expect_all_ok(run(2, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
    std::vector<uint8_t> buf(sizes.back() + 64);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t len = sizes[i];
      const uint64_t tag = 100 + i;
      Op op;
      if (rank == 0) {
        fill(buf.data(), len, 2 * i);
        CHILD_OK(t->isend(1, tag, buf.data(), len, op));
        CHILD_OK(t->wait(op, in(seconds(30))));
        CHILD_CHECK(op.bytes == len);
        Op back;
        CHILD_OK(t->irecv(1, tag, buf.data(), buf.size(), back));  // cap larger than the message
        CHILD_OK(t->wait(back, in(seconds(30))));
        CHILD_CHECK(back.bytes == len);
        CHILD_CHECK(matches(buf.data(), len, 2 * i + 1));
      } else {
        CHILD_OK(t->irecv(0, tag, buf.data(), len, op));  // cap exactly the message
        CHILD_OK(t->wait(op, in(seconds(30))));
        CHILD_CHECK(op.current() == OpState::kDone);
        CHILD_CHECK(op.bytes == len);
        CHILD_CHECK(matches(buf.data(), len, 2 * i));
        fill(buf.data(), len, 2 * i + 1);
        Op back;
        CHILD_OK(t->isend(0, tag, buf.data(), len, back));
        CHILD_OK(t->wait(back, in(seconds(30))));
      }
    }
    CHILD_OK(t->error());
    return 0;
  }));
}

TEST_P(Ucx, ManyTagsPostedOutOfOrder) {
  constexpr int kMessages = 64;
  auto tag_of = [](int k) -> uint64_t {
    if (k == 0) return 0;
    if (k == 1) return kTagMask;  // the largest user tag
    return (static_cast<uint64_t>(k) * 0x9E3779B97Full) & kTagMask;
  };
  auto size_of = [](int k) -> size_t {
    return k % 16 == 5 ? 300000 + static_cast<size_t>(k) : static_cast<size_t>(k * 37 % 5000);
  };
  expect_all_ok(run(2, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
    std::vector<std::vector<uint8_t>> bufs(kMessages);
    std::vector<Op> ops(kMessages);
    if (rank == 0) {
      for (int k = 0; k < kMessages; ++k) {
        bufs[k].resize(size_of(k));
        fill(bufs[k].data(), bufs[k].size(), static_cast<uint64_t>(k));
        CHILD_OK(t->isend(1, tag_of(k), bufs[k].data(), bufs[k].size(), ops[k]));
      }
      CHILD_OK(t->wait_all(ops.data(), ops.size(), in(seconds(30))));
      return 0;
    }
    // Odd tags are posted before the messages come (in reverse order), even ones after
    // they have arrived unexpected (also in reverse).
    for (int k = kMessages - 1; k >= 0; k -= 2) {
      bufs[k].resize(size_of(k) + 8);
      CHILD_OK(t->irecv(0, tag_of(k), bufs[k].data(), bufs[k].size(), ops[k]));
    }
    const auto until = in(milliseconds(200));
    while (Clock::now() < until) {
      if (!t->progress()) t->wait_for_events(until);
    }
    for (int k = kMessages - 2; k >= 0; k -= 2) {
      bufs[k].resize(size_of(k) + 8);
      CHILD_OK(t->irecv(0, tag_of(k), bufs[k].data(), bufs[k].size(), ops[k]));
    }
    CHILD_OK(t->wait_all(ops.data(), ops.size(), in(seconds(30))));
    for (int k = 0; k < kMessages; ++k) {
      CHILD_CHECK(ops[k].bytes == size_of(k));
      CHILD_CHECK(matches(bufs[k].data(), size_of(k), static_cast<uint64_t>(k)));
    }
    return 0;
  }));
}

// Every rank sends to every rank (itself included) with the same tag: only (peer, tag) tells
// the messages apart.
TEST_P(Ucx, AllToAllBetweenEveryPair) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    expect_all_ok(run(n, [&](std::unique_ptr<UcxTransport>& t, int rank, int size) {
      auto len = [](int src, int dst) -> size_t {
        return 1000 * static_cast<size_t>(src) + 17 * static_cast<size_t>(dst) + (src == dst ? 200000 : 0) +
               ((src + dst) % 3 == 0 ? 1 << 20 : 0);
      };
      auto seed = [](int src, int dst) { return static_cast<uint64_t>(src * 100 + dst); };
      for (int round = 0; round < 2; ++round) {
        std::vector<std::vector<uint8_t>> out(size), inb(size);
        std::vector<Op> sends(size), recvs(size);
        for (int i = 0; i < size; ++i) {
          const int peer = round == 0 ? i : (rank + size - i) % size;  // another posting order
          inb[peer].resize(len(peer, rank));
          CHILD_OK(t->irecv(peer, 7, inb[peer].data(), inb[peer].size(), recvs[peer]));
        }
        for (int i = 0; i < size; ++i) {
          const int peer = (rank + i) % size;
          out[peer].resize(len(rank, peer));
          fill(out[peer].data(), out[peer].size(), seed(rank, peer) + static_cast<uint64_t>(round));
          CHILD_OK(t->isend(peer, 7, out[peer].data(), out[peer].size(), sends[peer]));
        }
        CHILD_OK(t->wait_all(recvs.data(), recvs.size(), in(seconds(30))));
        CHILD_OK(t->wait_all(sends.data(), sends.size(), in(seconds(30))));
        for (int peer = 0; peer < size; ++peer) {
          CHILD_CHECK(recvs[peer].bytes == len(peer, rank));
          CHILD_CHECK(matches(inb[peer].data(), inb[peer].size(), seed(peer, rank) + static_cast<uint64_t>(round)));
        }
      }
      return 0;
    }));
  }
}

TEST_P(Ucx, SendsToSelfInAGroupOfOne) {
  expect_all_ok(run(1, [&](std::unique_ptr<UcxTransport>& t, int, int) {
    for (size_t len : {size_t{0}, size_t{5}, size_t{1} << 20}) {
      std::vector<uint8_t> out(len), inb(len);
      fill(out.data(), len, len);
      Op s, r;
      // Receive posted after the send, then before it.
      CHILD_OK(t->isend(0, 1, out.data(), len, s));
      CHILD_OK(t->irecv(0, 1, inb.data(), len, r));
      CHILD_OK(t->wait(r, in(seconds(20))));
      CHILD_OK(t->wait(s, in(seconds(20))));
      CHILD_CHECK(r.bytes == len && matches(inb.data(), len, len));
      std::fill(inb.begin(), inb.end(), 0);
      CHILD_OK(t->irecv(0, 2, inb.data(), len, r));
      CHILD_OK(t->isend(0, 2, out.data(), len, s));
      CHILD_OK(t->wait(r, in(seconds(20))));
      CHILD_OK(t->wait(s, in(seconds(20))));
      CHILD_CHECK(r.bytes == len && matches(inb.data(), len, len));
    }
    Op bad;
    CHILD_CHECK(t->isend(1, 0, nullptr, 0, bad).code() == Code::kInvalidArgument);
    CHILD_CHECK(t->irecv(-1, 0, nullptr, 0, bad).code() == Code::kInvalidArgument);
    return 0;
  }));
}

// A message longer than the receive buffer fails that receive (and writes nothing past the
// buffer); the transport stays healthy.
TEST_P(Ucx, TruncationFailsOnlyThatReceive) {
  constexpr size_t kGuard = 4096;
  const std::vector<std::pair<size_t, size_t>> cases = {{100, 50}, {2 << 20, 1 << 20}, {70000, 0}};  // (sent, cap)
  expect_all_ok(run(2, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto [sent, cap] = cases[i];
      if (rank == 0) {
        std::vector<uint8_t> out(sent);
        fill(out.data(), sent, i);
        Op s;
        CHILD_OK(t->isend(1, 10 + i, out.data(), sent, s));
        const Status st = t->wait(s, in(seconds(20)));
        CHILD_CHECK(st.code() != Code::kTimeout);  // either way it must end
      } else {
        std::vector<uint8_t> inb(cap + kGuard, 0xAB);
        Op r;
        CHILD_OK(t->irecv(0, 10 + i, inb.data(), cap, r));
        const Status st = t->wait(r, in(seconds(20)));
        CHILD_CHECK(st.code() == Code::kRemote);
        CHILD_CHECK(st.message().find("truncated") != std::string::npos);
        CHILD_CHECK(r.current() == OpState::kFailed);
        for (size_t k = cap; k < inb.size(); ++k) CHILD_CHECK(inb[k] == 0xAB);
      }
      CHILD_OK(t->error());
    }
    // Still healthy: a normal exchange works both ways.
    return ring_once(*t, 99);
  }));
}

// A peer that dies (no goodbye) fails the survivors' pending operations within seconds, and
// the failure is sticky.
TEST_P(Ucx, KilledPeerFailsPendingOperations) {
  const auto codes = run(3, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
    if (ring_once(*t, 1) != 0) return 1;
    // Rank 2 dies once the others have everything it sent (a completed send is not yet a
    // delivered one), so they are all waiting on the ops below when it goes.
    uint8_t go = 0;
    if (rank == 2) {
      Op r[2];
      CHILD_OK(t->irecv(0, 40, &go, 1, r[0]));
      CHILD_OK(t->irecv(1, 40, &go, 1, r[1]));
      CHILD_OK(t->wait_all(r, 2, in(seconds(20))));
      raise(SIGKILL);
    }
    Op sent_go;
    CHILD_OK(t->isend(2, 40, &go, 1, sent_go));
    std::vector<uint8_t> big(size_t{64} << 20), small(64);
    Op ops[3];
    const auto start = Clock::now();
    // Posting may already fail with the sticky error if the death was noticed first.
    Status posted[3];
    if (rank == 0) {
      posted[0] = t->irecv(2, 50, small.data(), small.size(), ops[0]);  // never sent
      posted[1] = t->irecv(1, 51, small.data(), small.size(), ops[1]);  // never sent
      posted[2] = t->isend(2, 52, big.data(), big.size(), ops[2]);      // never received
    } else {
      posted[0] = t->irecv(0, 53, small.data(), small.size(), ops[0]);  // never sent
      posted[1] = t->irecv(2, 54, big.data(), big.size(), ops[1]);      // never sent
      posted[2] = t->isend(0, 55, big.data(), big.size(), ops[2]);      // never received
    }
    for (const Status& p : posted) CHILD_CHECK(p.is_ok() || p.code() == Code::kRemote);
    const Status st = posted[0].is_ok() ? t->wait(ops[0], in(seconds(25))) : posted[0];
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "rank %d: pending receive ended after %.2f s: %s\n", rank, secs, st.to_string().c_str());
    CHILD_CHECK(st.code() == Code::kRemote);
    CHILD_CHECK(secs < 10);
    t->progress();
    for (int i = 0; i < 3; ++i) CHILD_CHECK(!posted[i].is_ok() || ops[i].current() == OpState::kFailed);
    const Status sticky = t->error();
    CHILD_CHECK(!sticky.is_ok());
    Op late;
    const Status again = t->isend(1 - rank, 60, small.data(), small.size(), late);
    CHILD_CHECK(again.code() == sticky.code() && again.message() == sticky.message());
    CHILD_CHECK(t->irecv(1 - rank, 61, small.data(), small.size(), late).code() == sticky.code());
    return 0;
  });
  EXPECT_EQ(codes[0], 0) << describe(codes);
  EXPECT_EQ(codes[1], 0) << describe(codes);
  EXPECT_EQ(codes[2], 128 + SIGKILL) << describe(codes);
}

// A peer that exits without closing its transport, while the other is in the middle of a
// large transfer.
TEST_P(Ucx, PeerExitingMidTransferFailsTheTransfer) {
  constexpr int kExited = 7;
  const auto codes = run(2, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
    std::vector<uint8_t> big(size_t{64} << 20);
    if (ring_once(*t, 1) != 0) return 1;
    if (rank == 1) {
      Op r;
      CHILD_OK(t->irecv(0, 5, big.data(), big.size() / 2, r));  // matches no send: different tag
      const auto until = in(milliseconds(100));
      while (Clock::now() < until) t->wait_for_events(until);
      _exit(kExited);  // no goodbye, no cleanup
    }
    Op s, r;
    const auto start = Clock::now();
    CHILD_OK(t->isend(1, 6, big.data(), big.size(), s));
    CHILD_OK(t->irecv(1, 7, big.data(), 16, r));
    const Status st = t->wait(s, in(seconds(25)));
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "rank 0: pending send ended after %.2f s: %s\n", secs, st.to_string().c_str());
    CHILD_CHECK(st.code() == Code::kRemote);
    CHILD_CHECK(st.message().find("rank 1") != std::string::npos);
    CHILD_CHECK(secs < 10);
    CHILD_CHECK(t->wait(r, in(seconds(1))).code() == Code::kRemote);
    return 0;
  });
  EXPECT_EQ(codes[0], 0) << describe(codes);
  EXPECT_EQ(codes[1], kExited) << describe(codes);
}

// abort() from another thread ends a blocked wait promptly with the given reason; the
// peer, whose connection is dropped, fails too.
TEST_P(Ucx, AbortFromAnotherThreadEndsAWait) {
  expect_all_ok(run(2, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
    if (ring_once(*t, 1) != 0) return 1;
    std::vector<uint8_t> buf(1 << 20);
    Op r;
    CHILD_OK(t->irecv(1 - rank, 9, buf.data(), buf.size(), r));  // never sent
    if (rank == 0) {
      std::thread killer([&] {
        std::this_thread::sleep_for(milliseconds(200));
        t->abort(Status(Code::kAborted, "test abort"));
      });
      const auto start = Clock::now();
      const Status st = t->wait(r, in(seconds(25)));
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      killer.join();
      CHILD_CHECK(st.code() == Code::kAborted);
      CHILD_CHECK(st.message() == "test abort");
      CHILD_CHECK(secs < 1.5);
      Op late;
      CHILD_CHECK(t->isend(1, 10, buf.data(), 8, late).code() == Code::kAborted);
      CHILD_CHECK(t->error().message() == "test abort");
      t.reset();  // rank 1 learns of it from the dropped connection
      return 0;
    }
    const Status st = t->wait(r, in(seconds(25)));
    std::fprintf(stderr, "rank 1: %s\n", st.to_string().c_str());
    CHILD_CHECK(st.code() == Code::kRemote);
    return 0;
  }));
}

// abort() while the owning thread is outside the transport fails pending ops before it returns.
TEST_P(Ucx, AbortWhileIdleFailsPendingOpsAtOnce) {
  expect_all_ok(run(1, [&](std::unique_ptr<UcxTransport>& t, int, int) {
    std::vector<uint8_t> buf(100);
    Op r1, r2, s;
    CHILD_OK(t->irecv(0, 1, buf.data(), buf.size(), r1));
    CHILD_OK(t->irecv(0, 2, buf.data(), buf.size(), r2));
    std::thread([&] { t->abort(Status(Code::kAborted, "idle abort")); }).join();
    CHILD_CHECK(r1.current() == OpState::kFailed && r1.status.message() == "idle abort");
    CHILD_CHECK(r2.current() == OpState::kFailed && r2.status.message() == "idle abort");
    CHILD_CHECK(t->isend(0, 1, buf.data(), 1, s).message() == "idle abort");
    t->abort(Status(Code::kAborted, "second abort"));  // the first failure stays
    CHILD_CHECK(t->error().message() == "idle abort");
    return 0;
  }));
}

// A wait that times out leaves the op pending (and does not burn a core meanwhile); abort
// from the same thread then fails it at once.
TEST_P(Ucx, TimeoutThenAbortFromTheSameThread) {
  expect_all_ok(run(2, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
    if (ring_once(*t, 1) != 0) return 1;
    std::vector<uint8_t> buf(100);
    if (rank == 1) {
      Op r;
      CHILD_OK(t->irecv(0, 3, buf.data(), buf.size(), r));  // rank 0 sends after its timeout
      CHILD_OK(t->wait(r, in(seconds(20))));
      return 0;
    }
    Op r;
    CHILD_OK(t->irecv(1, 2, buf.data(), buf.size(), r));  // never sent
    const double cpu0 = cpu_seconds();
    const auto start = Clock::now();
    const Status st = t->wait(r, in(milliseconds(1000)));
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu = cpu_seconds() - cpu0;
    std::fprintf(stderr, "rank 0: waited %.2f s using %.3f s of CPU\n", secs, cpu);
    CHILD_CHECK(st.code() == Code::kTimeout);
    CHILD_CHECK(secs >= 0.95 && secs < 3);
    CHILD_CHECK(cpu < 0.5 * secs);
    CHILD_CHECK(r.current() == OpState::kPending);
    Op s;
    CHILD_OK(t->isend(1, 3, buf.data(), buf.size(), s));
    CHILD_OK(t->wait(s, in(seconds(20))));
    t->abort(Status(Code::kAborted, "gave up"));
    CHILD_CHECK(r.current() == OpState::kFailed && r.status.message() == "gave up");
    return 0;
  }));
}

// One rank closing its transport cleanly does not fail the others, which go on talking, even
// when they are too busy to answer its goodbye in time.
TEST_P(Ucx, CleanCloseOfOneRankDoesNotFailTheOthers) {
  for (const int busy_ms : {0, 2500}) {
    SCOPED_TRACE("busy " + std::to_string(busy_ms) + " ms");
    expect_all_ok(run(3, [&](std::unique_ptr<UcxTransport>& t, int rank, int) {
      if (ring_once(*t, 1) != 0) return 1;
      if (rank == 0) {
        t.reset();
        return 0;
      }
      std::this_thread::sleep_for(milliseconds(busy_ms));
      const int peer = 3 - rank;
      std::vector<uint8_t> out(4 << 20), inb(4 << 20);
      for (int i = 0; i < 40; ++i) {
        const size_t len = i == 39 ? out.size() : 65536;
        fill(out.data(), len, static_cast<uint64_t>(rank * 1000 + i));
        Op ops[2];
        CHILD_OK(t->irecv(peer, 20 + static_cast<uint64_t>(i), inb.data(), inb.size(), ops[0]));
        CHILD_OK(t->isend(peer, 20 + static_cast<uint64_t>(i), out.data(), len, ops[1]));
        CHILD_OK(t->wait_all(ops, 2, in(seconds(20))));
        CHILD_CHECK(ops[0].bytes == len && matches(inb.data(), len, static_cast<uint64_t>(peer * 1000 + i)));
      }
      // Sending to the rank that left is an error, but not a sticky one.
      Op gone;
      const Status st = t->isend(0, 1, out.data(), 1, gone);
      CHILD_CHECK(st.code() == Code::kRemote);
      CHILD_OK(t->error());
      return 0;
    }));
  }
}

INSTANTIATE_TEST_SUITE_P(Tls, Ucx, ::testing::Values("tcp", "sm"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
}  // namespace gw
