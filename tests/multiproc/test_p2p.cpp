// Point-to-point messages and requests between forked ranks over real UCX (TCP and shared
// memory), through the C ABI: large messages both ways at once, many tags, order within a tag,
// size mismatches, a peer that never sends, a peer killed mid-receive, messages while a
// collective runs, gw_wait_for and gw_request_on_complete; and gw_comm_init_with_allgather over
// an all-gather that the test's parent relays through pipes.
//
// Every test forks its ranks (rank 0 calls gw_get_unique_id after the fork and passes the id
// through pipes; the parent starts nothing of gradwire's). A child checks what it sees and
// sends the parent the list of its failed checks; the parent asserts that every list is empty
// and that no child died (except a victim the test killed on purpose).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gradwire/gradwire.h"
#include "transport/bootstrap/fd_io.hpp"

namespace gw {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

const char* name(gw_result_t r) { return gw_get_error_string(r); }

// What the body of a child gets.
struct Child {
  int rank = -1;
  int np = 0;
  gw_unique_id_t id{};
  std::string fails;
  int event_fd = -1;
  int to_parent = -1;    // relay requests (gw_comm_init_with_allgather tests)
  int from_parent = -1;  // relay answers
  void check(bool ok, const std::string& what, int line) {
    if (!ok) fails += "rank " + std::to_string(rank) + ", line " + std::to_string(line) + ": " + what + "\n";
  }
  void event(char kind) {
    const char b[2] = {kind, static_cast<char>(rank)};
    if (write(event_fd, b, 2) != 2) _exit(97);
  }
};

#define CHECK_C(c, cond) (c).check((cond), #cond, __LINE__)
// The call returns want; on a mismatch the failure shows what it returned and its message.
#define EXPECT_CODE(c, call, want)                                                      \
  do {                                                                                  \
    const gw_result_t got_ = (call);                                                    \
    (c).check(got_ == (want),                                                           \
              std::string(#call) + " returned " + name(got_) + ", want " + name(want) + \
                  (got_ != GW_SUCCESS ? std::string(": ") + gw_get_last_error() : ""),  \
              __LINE__);                                                                \
  } while (0)

struct RankResult {
  int status = 0;
  bool hung = false;
  bool reported = false;
  std::string fails;
  bool clean() const { return !hung && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool killed_by(int sig) const { return !hung && WIFSIGNALED(status) && WTERMSIG(status) == sig; }
  std::string how() const {
    if (hung) return "hung (killed by the runner at the limit)";
    if (WIFSIGNALED(status)) return std::string("died of signal ") + strsignal(WTERMSIG(status));
    return "exited with " + std::to_string(WEXITSTATUS(status));
  }
};

// Reads n bytes from fd, or false at EOF, error or the deadline.
bool read_until(int fd, void* buf, size_t n, double until) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const double left = until - now_s();
    if (left <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    const ssize_t k = read(fd, p + got, n - got);
    if (k <= 0) return false;
    got += static_cast<size_t>(k);
  }
  return true;
}

// The parent's side of gw_comm_init_with_allgather: every rank's block in, the concatenation
// out to every rank, until a rank stops asking.
void relay(const std::vector<int>& req, const std::vector<int>& rep, double until) {
  const size_t np = req.size();
  for (;;) {
    std::vector<char> all;
    uint64_t bytes = 0;
    for (size_t i = 0; i < np; ++i) {
      uint64_t b = 0;
      if (!read_until(req[i], &b, sizeof b, until)) return;
      if (i == 0) bytes = b;
      if (b != bytes || b > (uint64_t{1} << 24)) return;
      const size_t at = all.size();
      all.resize(at + b);
      if (!read_until(req[i], all.data() + at, b, until)) return;
    }
    for (size_t i = 0; i < np; ++i) {
      if (!bootstrap::write_all(rep[i], all.data(), all.size())) return;
    }
  }
}

using Body = std::function<void(Child&)>;
using ParentAction = std::function<void(const std::vector<pid_t>&, int event_fd)>;

struct JobOptions {
  int np = 2;
  std::string tls = "tcp";
  int limit_s = 60;    // alarm() in every child; the runner kills what is left 10 s later
  bool relay = false;  // the parent relays gw_comm_init_with_allgather's all-gathers
  ParentAction parent;
};

std::vector<RankResult> run_job(const JobOptions& opt, const Body& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  signal(SIGPIPE, SIG_IGN);
  const int np = opt.np;
  const auto n = static_cast<size_t>(np);
  std::vector<int> id_pipes(2 * n), rep_pipes(2 * n), relay_req(2 * n), relay_rep(2 * n);
  int ev[2];
  if (pipe(ev) != 0) std::abort();
  for (size_t i = 0; i < n; ++i) {
    if (pipe(&id_pipes[2 * i]) != 0 || pipe(&rep_pipes[2 * i]) != 0 || pipe(&relay_req[2 * i]) != 0 ||
        pipe(&relay_rep[2 * i]) != 0) {
      std::abort();
    }
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < np; ++i) {
    const pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      alarm(static_cast<unsigned>(opt.limit_s));
      setenv("UCX_TLS", (opt.tls + ",self").c_str(), 1);
      const auto me = static_cast<size_t>(i);
      // Only this rank's ends stay open, so the parent sees EOF when a rank is gone.
      for (size_t j = 0; j < n; ++j) {
        close(relay_req[2 * j]);
        close(relay_rep[2 * j + 1]);
        if (j != me) {
          close(relay_req[2 * j + 1]);
          close(relay_rep[2 * j]);
        }
        close(rep_pipes[2 * j]);
        if (j != me) close(rep_pipes[2 * j + 1]);
      }
      close(ev[0]);
      Child c;
      c.rank = i;
      c.np = np;
      c.event_fd = ev[1];
      c.to_parent = relay_req[2 * me + 1];
      c.from_parent = relay_rep[2 * me];
      if (!opt.relay) {
        if (i == 0) {
          if (gw_get_unique_id(&c.id) != GW_SUCCESS) {
            std::fprintf(stderr, "gw_get_unique_id: %s\n", gw_get_last_error());
            _exit(95);
          }
          for (size_t j = 1; j < n; ++j) {
            if (!bootstrap::write_all(id_pipes[2 * j + 1], &c.id, sizeof c.id)) _exit(96);
          }
        } else if (!bootstrap::read_all(id_pipes[2 * me], &c.id, sizeof c.id)) {
          _exit(96);
        }
      }
      body(c);
      const uint64_t len = c.fails.size();
      if (!bootstrap::write_all(rep_pipes[2 * me + 1], &len, sizeof len) ||
          !bootstrap::write_all(rep_pipes[2 * me + 1], c.fails.data(), c.fails.size())) {
        _exit(98);
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(ev[1]);
  std::vector<int> req(n), rep(n);
  for (size_t i = 0; i < n; ++i) {
    close(id_pipes[2 * i]);
    close(id_pipes[2 * i + 1]);
    close(rep_pipes[2 * i + 1]);
    close(relay_req[2 * i + 1]);
    close(relay_rep[2 * i]);
    req[i] = relay_req[2 * i];
    rep[i] = relay_rep[2 * i + 1];
  }
  const double until = now_s() + opt.limit_s + 10;
  if (opt.parent) opt.parent(pids, ev[0]);
  if (opt.relay) relay(req, rep, until);

  std::vector<RankResult> out(n);
  std::vector<bool> done(n, false);
  // Reports are read while the children run: a long one must not block a child's exit.
  std::vector<std::string> reports(n);
  size_t left = n;
  while (left > 0) {
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        out[i].status = st;
        done[i] = true;
        --left;
      } else if (now_s() > until) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &st, 0);
        out[i].status = st;
        out[i].hung = true;
        done[i] = true;
        --left;
      }
    }
    if (left > 0) usleep(2000);
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t len = 0;
    const int fd = rep_pipes[2 * i];
    fcntl(fd, F_SETFL, O_NONBLOCK);
    if (read(fd, &len, sizeof len) == static_cast<ssize_t>(sizeof len) && len < (1u << 20)) {
      out[i].fails.resize(len);
      out[i].reported = len == 0 || read(fd, out[i].fails.data(), len) == static_cast<ssize_t>(len);
    }
    close(fd);
    close(req[i]);
    close(rep[i]);
  }
  close(ev[0]);
  return out;
}

// Every rank but the victim exited normally and reported no failed check.
void expect_clean(const std::vector<RankResult>& rs, int victim = -1) {
  for (size_t i = 0; i < rs.size(); ++i) {
    if (static_cast<int>(i) == victim) {
      EXPECT_TRUE(rs[i].killed_by(SIGKILL)) << "victim rank " << i << " " << rs[i].how();
      continue;
    }
    EXPECT_TRUE(rs[i].clean()) << "rank " << i << " " << rs[i].how();
    EXPECT_TRUE(rs[i].reported) << "rank " << i << " sent no report";
    EXPECT_EQ(rs[i].fails, "") << "rank " << i;
  }
}

gw_config_t config(double timeout_s) {
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  cfg.timeout_s = timeout_s;
  return cfg;
}

gw_comm_t init_rank(Child& c, double timeout_s) {
  const gw_config_t cfg = config(timeout_s);
  gw_comm_t comm = nullptr;
  EXPECT_CODE(c, gw_comm_init_rank(&comm, c.np, c.id, c.rank, &cfg), GW_SUCCESS);
  return comm;
}

gw_result_t async_error(gw_comm_t comm) {
  gw_result_t e = GW_ERR_INTERNAL;
  if (gw_comm_get_async_error(comm, &e) != GW_SUCCESS) return GW_ERR_INTERNAL;
  return e;
}

// Bytes that say who sent them and which message they are.
std::vector<uint8_t> pattern(size_t n, int from, uint32_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>((i * 131 + static_cast<size_t>(from) * 7 + salt * 13) >> 2);
  return v;
}

bool contains(const char* msg, const std::string& what) { return std::strstr(msg, what.c_str()) != nullptr; }

bool allreduce_ok(Child& c, gw_comm_t comm, size_t count) {
  std::vector<float> x(count, static_cast<float>(c.rank + 1)), y(count, -1.0f);
  EXPECT_CODE(c, gw_allreduce(comm, x.data(), y.data(), count, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_SUCCESS);
  const float want = static_cast<float>(c.np * (c.np + 1) / 2);
  for (float v : y) {
    if (v != want) return false;
  }
  return true;
}

class P2p : public ::testing::TestWithParam<std::string> {};

constexpr size_t kLarge = size_t{8} << 20;

TEST_P(P2p, LargeMessagesBothWaysAtOnceDoNotDeadlock) {
  JobOptions opt;
  opt.tls = GetParam();
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    const int other = 1 - c.rank;
    // Non-blocking both ways, the send posted first on both ranks and waited for first.
    const std::vector<uint8_t> out = pattern(kLarge, c.rank, 1);
    std::vector<uint8_t> in(kLarge, 0);
    gw_request_t s = nullptr, r = nullptr;
    EXPECT_CODE(c, gw_isend(comm, out.data(), kLarge, other, 7, &s), GW_SUCCESS);
    EXPECT_CODE(c, gw_irecv(comm, in.data(), kLarge, other, 7, &r), GW_SUCCESS);
    EXPECT_CODE(c, gw_wait(s), GW_SUCCESS);
    EXPECT_CODE(c, gw_wait(r), GW_SUCCESS);
    CHECK_C(c, in == pattern(kLarge, other, 1));
    // Blocking calls from two threads at once: one sends, the other receives.
    std::vector<uint8_t> in2(kLarge, 0);
    const std::vector<uint8_t> out2 = pattern(kLarge, c.rank, 2);
    gw_result_t sent = GW_ERR_INTERNAL;
    std::thread t([&] { sent = gw_send(comm, out2.data(), kLarge, other, 8); });
    EXPECT_CODE(c, gw_recv(comm, in2.data(), kLarge, other, 8), GW_SUCCESS);
    t.join();
    EXPECT_CODE(c, sent, GW_SUCCESS);
    CHECK_C(c, in2 == pattern(kLarge, other, 2));
    CHECK_C(c, allreduce_ok(c, comm, 1000));
    EXPECT_CODE(c, async_error(comm), GW_SUCCESS);
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, ManyTagsInterleavedEachFindsItsMessage) {
  JobOptions opt;
  opt.tls = GetParam();
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    const int other = 1 - c.rank;
    std::vector<uint32_t> tags;
    for (uint32_t t = 0; t < 64; ++t) tags.push_back(t * 977);
    tags.push_back(0xFFFFFFFFu);  // every tag value is the caller's
    tags.push_back(0x80000000u);
    auto size_of = [](uint32_t i) { return i % 5 == 0 ? size_t{300} << 10 : 100 + i; };
    std::vector<std::vector<uint8_t>> out, in;
    for (uint32_t i = 0; i < tags.size(); ++i) {
      out.push_back(pattern(size_of(i), c.rank, tags[i]));
      in.emplace_back(size_of(i), 0);
    }
    std::vector<gw_request_t> reqs;
    // Sends in tag order, receives in the reverse order, interleaved.
    for (size_t i = 0; i < tags.size(); ++i) {
      const size_t j = tags.size() - 1 - i;
      gw_request_t s = nullptr, r = nullptr;
      EXPECT_CODE(c, gw_isend(comm, out[i].data(), out[i].size(), other, tags[i], &s), GW_SUCCESS);
      EXPECT_CODE(c, gw_irecv(comm, in[j].data(), in[j].size(), other, tags[j], &r), GW_SUCCESS);
      reqs.push_back(s);
      reqs.push_back(r);
    }
    for (gw_request_t q : reqs) EXPECT_CODE(c, gw_wait(q), GW_SUCCESS);
    for (uint32_t i = 0; i < tags.size(); ++i) {
      c.check(in[i] == pattern(size_of(i), other, tags[i]), "message with tag " + std::to_string(tags[i]), __LINE__);
    }
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, OneTagRepeatedArrivesInOrder) {
  JobOptions opt;
  opt.tls = GetParam();
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    constexpr uint32_t kCount = 120;
    // Small (eager) and large (rendezvous) messages mixed: the order holds across protocols.
    auto size_of = [](uint32_t i) { return i % 3 == 0 ? size_t{256} << 10 : size_t{64} + i; };
    if (c.rank == 0) {
      std::vector<std::vector<uint8_t>> out;
      for (uint32_t i = 0; i < kCount; ++i) out.push_back(pattern(size_of(i), 0, i));
      std::vector<gw_request_t> reqs(kCount);
      for (uint32_t i = 0; i < kCount; ++i)
        EXPECT_CODE(c, gw_isend(comm, out[i].data(), out[i].size(), 1, 5, &reqs[i]), GW_SUCCESS);
      for (gw_request_t q : reqs) EXPECT_CODE(c, gw_wait(q), GW_SUCCESS);
    } else {
      std::vector<std::vector<uint8_t>> in;
      for (uint32_t i = 0; i < kCount; ++i) in.emplace_back(size_of(i), 0);
      std::vector<gw_request_t> reqs(kCount);
      for (uint32_t i = 0; i < kCount; ++i)
        EXPECT_CODE(c, gw_irecv(comm, in[i].data(), in[i].size(), 0, 5, &reqs[i]), GW_SUCCESS);
      for (gw_request_t q : reqs) EXPECT_CODE(c, gw_wait(q), GW_SUCCESS);
      for (uint32_t i = 0; i < kCount; ++i)
        c.check(in[i] == pattern(size_of(i), 0, i), "message " + std::to_string(i), __LINE__);
    }
    CHECK_C(c, allreduce_ok(c, comm, 10));
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, WrongSizeFailsTheReceiveWithInvalidUsageAndTheCommunicatorWorksOn) {
  JobOptions opt;
  opt.tls = GetParam();
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    // (sent, expected) per tag: longer, shorter, longer and large, right.
    const size_t sent[4] = {1000, 100, kLarge, 16};
    const size_t want[4] = {500, 500, kLarge / 2, 16};
    if (c.rank == 0) {
      for (uint32_t t = 0; t < 4; ++t) {
        const std::vector<uint8_t> out = pattern(sent[t], 0, t);
        // The sender's bytes were taken (the receiver dropped them): the send succeeds.
        EXPECT_CODE(c, gw_send(comm, out.data(), out.size(), 1, t), GW_SUCCESS);
      }
    } else {
      for (uint32_t t = 0; t < 4; ++t) {
        std::vector<uint8_t> in(want[t], 0);
        const gw_result_t r = gw_recv(comm, in.data(), in.size(), 0, t);
        const std::string msg = gw_get_last_error();
        if (t == 3) {
          EXPECT_CODE(c, r, GW_SUCCESS);
          CHECK_C(c, in == pattern(16, 0, 3));
          continue;
        }
        EXPECT_CODE(c, r, GW_ERR_INVALID_USAGE);
        c.check(contains(msg.c_str(), "rank 0") && contains(msg.c_str(), "tag " + std::to_string(t)) &&
                    contains(msg.c_str(), std::to_string(want[t])),
                "message names the sender, the tag and the expected size: " + msg, __LINE__);
        if (t == 1) c.check(contains(msg.c_str(), "sent 100 bytes"), "names the size sent: " + msg, __LINE__);
      }
      EXPECT_CODE(c, async_error(comm), GW_SUCCESS);
    }
    CHECK_C(c, allreduce_ok(c, comm, 1000));
    const std::vector<uint8_t> out = pattern(4096, c.rank, 9);
    std::vector<uint8_t> in(4096, 0);
    gw_request_t s = nullptr;
    EXPECT_CODE(c, gw_isend(comm, out.data(), out.size(), 1 - c.rank, 9, &s), GW_SUCCESS);
    EXPECT_CODE(c, gw_recv(comm, in.data(), in.size(), 1 - c.rank, 9), GW_SUCCESS);
    EXPECT_CODE(c, gw_wait(s), GW_SUCCESS);
    CHECK_C(c, in == pattern(4096, 1 - c.rank, 9));
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, ReceiveWhosePeerNeverSendsTimesOutAndBreaksTheCommunicator) {
  JobOptions opt;
  opt.tls = GetParam();
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 2.0);
    if (comm == nullptr) return;
    if (c.rank == 1) {
      std::vector<uint8_t> in(100);
      const double t0 = now_s();
      EXPECT_CODE(c, gw_recv(comm, in.data(), in.size(), 0, 42), GW_ERR_TIMEOUT);
      const double secs = now_s() - t0;
      const std::string msg = gw_get_last_error();
      c.check(secs >= 1.9 && secs < 5.0, "timed out after " + std::to_string(secs) + " s", __LINE__);
      c.check(contains(msg.c_str(), "rank 0") && contains(msg.c_str(), "tag 42"), "names peer and tag: " + msg,
              __LINE__);
      EXPECT_CODE(c, async_error(comm), GW_ERR_TIMEOUT);
      gw_request_t r = nullptr;
      EXPECT_CODE(c, gw_irecv(comm, in.data(), in.size(), 0, 43, &r), GW_SUCCESS);
      EXPECT_CODE(c, gw_wait(r), GW_ERR_TIMEOUT);  // the broken communicator's error
    } else {
      usleep(3500 * 1000);
    }
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, PeerKilledDuringAReceiveFailsItWithRemoteWithinSeconds) {
  JobOptions opt;
  opt.tls = GetParam();
  opt.parent = [](const std::vector<pid_t>& pids, int ev) {
    char b[2];
    if (read_until(ev, b, 2, now_s() + 40) && b[0] == 'K') {
      usleep(300 * 1000);
      kill(pids[0], SIGKILL);
    }
  };
  expect_clean(run_job(opt,
                       [](Child& c) {
                         gw_comm_t comm = init_rank(c, 60);
                         if (comm == nullptr) return;
                         EXPECT_CODE(c, gw_barrier(comm), GW_SUCCESS);
                         if (c.rank == 0) {
                           c.event('K');
                           for (;;) pause();
                         }
                         std::vector<uint8_t> in(kLarge);
                         const double t0 = now_s();
                         EXPECT_CODE(c, gw_recv(comm, in.data(), in.size(), 0, 1), GW_ERR_REMOTE);
                         const double secs = now_s() - t0;
                         c.check(secs < 10, "failed after " + std::to_string(secs) + " s", __LINE__);
                         EXPECT_CODE(c, async_error(comm), GW_ERR_REMOTE);
                         EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
                       }),
               /*victim=*/0);
}

TEST_P(P2p, MessagesMoveWhileACollectiveRuns) {
  JobOptions opt;
  opt.tls = GetParam();
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    constexpr size_t kCount = 1 << 20;
    std::vector<float> x(kCount, static_cast<float>(c.rank + 1)), y(kCount, 0);
    const std::vector<uint8_t> out = pattern(1 << 20, c.rank, 3);
    std::vector<uint8_t> in(1 << 20, 0);
    if (c.rank == 0) {
      // The all-reduce waits for rank 1, which waits for this message first: the message
      // must not wait behind the all-reduce.
      gw_request_t a = nullptr, s = nullptr;
      EXPECT_CODE(
          c, gw_iallreduce(comm, x.data(), y.data(), kCount, GW_FLOAT32, GW_SUM, nullptr, nullptr, GW_ALGO_AUTO, &a),
          GW_SUCCESS);
      usleep(100 * 1000);  // the all-reduce is running
      EXPECT_CODE(c, gw_isend(comm, out.data(), out.size(), 1, 3, &s), GW_SUCCESS);
      EXPECT_CODE(c, gw_wait(s), GW_SUCCESS);
      EXPECT_CODE(c, gw_wait(a), GW_SUCCESS);
      EXPECT_CODE(c, gw_recv(comm, in.data(), in.size(), 1, 4), GW_SUCCESS);
      CHECK_C(c, in == pattern(1 << 20, 1, 4));
    } else {
      EXPECT_CODE(c, gw_recv(comm, in.data(), in.size(), 0, 3), GW_SUCCESS);
      CHECK_C(c, in == pattern(1 << 20, 0, 3));
      EXPECT_CODE(c, gw_allreduce(comm, x.data(), y.data(), kCount, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_SUCCESS);
      const std::vector<uint8_t> back = pattern(1 << 20, 1, 4);
      EXPECT_CODE(c, gw_send(comm, back.data(), back.size(), 0, 4), GW_SUCCESS);
    }
    bool right = true;
    for (float v : y) right = right && v == 3.0f;
    CHECK_C(c, right);
    CHECK_C(c, allreduce_ok(c, comm, 100));
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

struct Completion {
  std::atomic<int> calls{0};
  std::atomic<int> code{-1};
  char msg[512] = {0};
  std::thread::id thread;
};

void on_done(void* user, gw_result_t result, const char* message) {
  auto* c = static_cast<Completion*>(user);
  c->code = static_cast<int>(result);
  std::snprintf(c->msg, sizeof c->msg, "%s", message);
  c->thread = std::this_thread::get_id();
  c->calls.fetch_add(1);
}

TEST_P(P2p, WaitForTimesOutLeavingTheRequestAndOnCompleteRunsOnce) {
  JobOptions opt;
  opt.tls = GetParam();
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    const std::vector<uint8_t> out = pattern(5000, 0, 1);
    if (c.rank == 0) {
      EXPECT_CODE(c, gw_barrier(comm), GW_SUCCESS);
      EXPECT_CODE(c, gw_send(comm, out.data(), out.size(), 1, 1), GW_SUCCESS);
      EXPECT_CODE(c, gw_send(comm, out.data(), out.size(), 1, 2), GW_SUCCESS);  // too long for its receive
      EXPECT_CODE(c, gw_send(comm, out.data(), 8, 1, 3), GW_SUCCESS);
      EXPECT_CODE(c, gw_barrier(comm), GW_SUCCESS);
    } else {
      std::vector<uint8_t> in(5000, 0);
      gw_request_t r = nullptr;
      Completion done;
      EXPECT_CODE(c, gw_irecv(comm, in.data(), in.size(), 0, 1, &r), GW_SUCCESS);
      EXPECT_CODE(c, gw_request_on_complete(r, on_done, &done), GW_SUCCESS);
      EXPECT_CODE(c, gw_request_on_complete(r, on_done, &done), GW_ERR_INVALID_ARGUMENT);  // one per request
      const double t0 = now_s();
      EXPECT_CODE(c, gw_wait_for(r, 0.3), GW_ERR_TIMEOUT);
      const double secs = now_s() - t0;
      c.check(secs >= 0.25 && secs < 3, "gw_wait_for returned after " + std::to_string(secs) + " s", __LINE__);
      CHECK_C(c, done.calls.load() == 0);
      EXPECT_CODE(c, async_error(comm), GW_SUCCESS);
      EXPECT_CODE(c, gw_barrier(comm), GW_SUCCESS);  // rank 0 sends now
      EXPECT_CODE(c, gw_wait_for(r, 20.0), GW_SUCCESS);
      CHECK_C(c, in == out);
      CHECK_C(c, done.calls.load() == 1);
      CHECK_C(c, done.code.load() == GW_SUCCESS);
      CHECK_C(c, done.msg[0] == '\0');
      CHECK_C(c, done.thread != std::this_thread::get_id());  // the progress thread

      Completion bad;
      std::vector<uint8_t> small(100);
      EXPECT_CODE(c, gw_irecv(comm, small.data(), small.size(), 0, 2, &r), GW_SUCCESS);
      EXPECT_CODE(c, gw_request_on_complete(r, on_done, &bad), GW_SUCCESS);
      EXPECT_CODE(c, gw_wait(r), GW_ERR_INVALID_USAGE);
      CHECK_C(c, bad.calls.load() == 1);
      CHECK_C(c, bad.code.load() == GW_ERR_INVALID_USAGE);
      c.check(contains(bad.msg, "tag 2"), std::string("callback message: ") + bad.msg, __LINE__);

      // A third message, and a callback that must run exactly once.
      uint8_t eight[8];
      EXPECT_CODE(c, gw_irecv(comm, eight, 8, 0, 3, &r), GW_SUCCESS);
      Completion probe;
      EXPECT_CODE(c, gw_request_on_complete(r, on_done, &probe), GW_SUCCESS);
      for (int i = 0; i < 2000 && probe.calls.load() == 0; ++i) usleep(1000);
      CHECK_C(c, probe.calls.load() == 1);
      EXPECT_CODE(c, gw_wait(r), GW_SUCCESS);
      EXPECT_CODE(c, gw_barrier(comm), GW_SUCCESS);
    }
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, LateCallbackRunsAtOnceInTheCallingThread) {
  JobOptions opt;
  opt.tls = GetParam();
  opt.np = 1;
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    gw_request_t r = nullptr;
    EXPECT_CODE(c, gw_ibarrier(comm, &r), GW_SUCCESS);
    // gw_wait_for with a finished request frees it, so wait for completion through a second
    // barrier: calls run in order, so the first is done when the second is.
    EXPECT_CODE(c, gw_barrier(comm), GW_SUCCESS);
    Completion late;
    EXPECT_CODE(c, gw_request_on_complete(r, on_done, &late), GW_SUCCESS);
    CHECK_C(c, late.calls.load() == 1);
    CHECK_C(c, late.thread == std::this_thread::get_id());
    EXPECT_CODE(c, gw_wait(r), GW_SUCCESS);
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, SendToSelf) {
  JobOptions opt;
  opt.tls = GetParam();
  opt.np = 1;
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    for (size_t n : {size_t{0}, size_t{100}, kLarge}) {
      const std::vector<uint8_t> out = pattern(n, 0, 4);
      std::vector<uint8_t> in(n, 0);
      gw_request_t s = nullptr, r = nullptr;
      EXPECT_CODE(c, gw_isend(comm, out.data(), n, 0, 4, &s), GW_SUCCESS);
      EXPECT_CODE(c, gw_irecv(comm, in.data(), n, 0, 4, &r), GW_SUCCESS);
      EXPECT_CODE(c, gw_wait(r), GW_SUCCESS);
      EXPECT_CODE(c, gw_wait(s), GW_SUCCESS);
      CHECK_C(c, in == out);
    }
    uint8_t b = 0;
    EXPECT_CODE(c, gw_send(comm, &b, 1, 1, 0), GW_ERR_INVALID_ARGUMENT);
    EXPECT_CODE(c, gw_recv(comm, &b, 1, -1, 0), GW_ERR_INVALID_ARGUMENT);
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

TEST_P(P2p, DestroyWithAReceivePendingFailsItWithAborted) {
  JobOptions opt;
  opt.tls = GetParam();
  opt.np = 1;
  expect_clean(run_job(opt, [](Child& c) {
    gw_comm_t comm = init_rank(c, 30);
    if (comm == nullptr) return;
    std::vector<uint8_t> in(kLarge);
    gw_request_t r = nullptr;
    EXPECT_CODE(c, gw_irecv(comm, in.data(), in.size(), 0, 77, &r), GW_SUCCESS);
    usleep(50 * 1000);
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
    EXPECT_CODE(c, gw_wait(r), GW_ERR_ABORTED);
  }));
}

// ---- gw_comm_init_with_allgather ------------------------------------------------------------

struct RelayUser {
  Child* c;
  int calls = 0;
};

gw_result_t relay_allgather(void* user, const void* send, void* recv, size_t bytes) {
  auto* u = static_cast<RelayUser*>(user);
  ++u->calls;
  const uint64_t b = bytes;
  if (!bootstrap::write_all(u->c->to_parent, &b, sizeof b) || !bootstrap::write_all(u->c->to_parent, send, bytes) ||
      !bootstrap::read_all(u->c->from_parent, recv, bytes * static_cast<size_t>(u->c->np))) {
    return GW_ERR_SYSTEM;
  }
  return GW_SUCCESS;
}

class InitWithAllgather : public ::testing::TestWithParam<int> {};

TEST_P(InitWithAllgather, RanksConnectThroughTheCallersAllgather) {
  JobOptions opt;
  opt.np = GetParam();
  opt.relay = true;
  expect_clean(run_job(opt, [](Child& c) {
    RelayUser u{&c};
    const gw_config_t cfg = config(30);
    gw_comm_t comm = nullptr;
    EXPECT_CODE(c, gw_comm_init_with_allgather(&comm, c.np, c.rank, relay_allgather, &u, &cfg), GW_SUCCESS);
    if (comm == nullptr) return;
    CHECK_C(c, u.calls == 2);
    int rank = -1, size = -1;
    EXPECT_CODE(c, gw_comm_rank(comm, &rank), GW_SUCCESS);
    EXPECT_CODE(c, gw_comm_size(comm, &size), GW_SUCCESS);
    CHECK_C(c, rank == c.rank && size == c.np);
    CHECK_C(c, allreduce_ok(c, comm, 5000));
    // Around the ring: to the next rank, from the previous one.
    const int next = (c.rank + 1) % c.np, prev = (c.rank + c.np - 1) % c.np;
    const std::vector<uint8_t> out = pattern(70000, c.rank, 11);
    std::vector<uint8_t> in(70000, 0);
    gw_request_t s = nullptr;
    EXPECT_CODE(c, gw_isend(comm, out.data(), out.size(), next, 11, &s), GW_SUCCESS);
    EXPECT_CODE(c, gw_recv(comm, in.data(), in.size(), prev, 11), GW_SUCCESS);
    EXPECT_CODE(c, gw_wait(s), GW_SUCCESS);
    CHECK_C(c, in == pattern(70000, prev, 11));
    EXPECT_CODE(c, gw_comm_destroy(comm), GW_SUCCESS);
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, InitWithAllgather, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& i) { return "np" + std::to_string(i.param); });

gw_result_t failing_allgather(void* user, const void*, void*, size_t) {
  return static_cast<gw_result_t>(*static_cast<int*>(user));
}

// Claims a 2^40-byte address for every rank.
gw_result_t lying_allgather(void*, const void*, void* recv, size_t bytes) {
  std::memset(recv, 0, bytes);
  if (bytes == 8) static_cast<uint8_t*>(recv)[5] = 1;
  return GW_SUCCESS;
}

TEST(InitWithAllgatherErrors, TheCallbacksCodeOrMalformedDataFailsTheInit) {
  JobOptions opt;
  opt.np = 1;
  opt.relay = true;  // no unique id; nothing is relayed
  expect_clean(run_job(opt, [](Child& c) {
    const gw_config_t cfg = config(10);
    gw_comm_t comm = nullptr;
    int code = GW_ERR_REMOTE;
    EXPECT_CODE(c, gw_comm_init_with_allgather(&comm, 2, 0, failing_allgather, &code, &cfg), GW_ERR_REMOTE);
    c.check(contains(gw_get_last_error(), "allgather callback"), gw_get_last_error(), __LINE__);
    CHECK_C(c, comm == nullptr);
    code = 1234;  // not a gw_result_t
    EXPECT_CODE(c, gw_comm_init_with_allgather(&comm, 1, 0, failing_allgather, &code, &cfg), GW_ERR_SYSTEM);
    c.check(contains(gw_get_last_error(), "1234"), gw_get_last_error(), __LINE__);
    EXPECT_CODE(c, gw_comm_init_with_allgather(&comm, 3, 1, lying_allgather, nullptr, &cfg), GW_ERR_INVALID_MESSAGE);
    c.check(contains(gw_get_last_error(), "address length"), gw_get_last_error(), __LINE__);
    EXPECT_CODE(c, gw_comm_init_with_allgather(&comm, 2, 0, nullptr, nullptr, &cfg), GW_ERR_INVALID_ARGUMENT);
    EXPECT_CODE(c, gw_comm_init_with_allgather(nullptr, 2, 0, failing_allgather, &code, &cfg), GW_ERR_INVALID_ARGUMENT);
    EXPECT_CODE(c, gw_comm_init_with_allgather(&comm, 2, 2, failing_allgather, &code, &cfg), GW_ERR_INVALID_ARGUMENT);
    CHECK_C(c, comm == nullptr);
  }));
}

INSTANTIATE_TEST_SUITE_P(Transports, P2p, ::testing::Values("tcp", "sm"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace gw
