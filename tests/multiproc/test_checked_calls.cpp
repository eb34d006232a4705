// The checked collectives between real processes over real UCX (TCP and shared memory), through
// the C ABI: ranks whose calls do not match, sizes no buffer can have, peers that die or freeze
// (mid-call, between calls, during init), a rank that never comes, two threads in one
// communicator, and a token-holding peer that hands in a garbage address.
//
// Every test forks its ranks (rank 0 calls gw_get_unique_id after the fork and passes the id
// through pipes; the parent starts nothing of gradwire's, it only reads gw_get_error_string's
// table). Each child writes a Report (each call's
// code, start and end time on CLOCK_MONOTONIC, which every process on the host shares, and
// gw_get_last_error()) into its own pipe; the parent asserts on it: the exact code on EVERY
// rank, what the message names, how fast, and that no child died of a signal (except a victim
// the test killed on purpose).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "gradwire/gradwire.h"
#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/fd_io.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace gw {
namespace {

// ---- the harness ---------------------------------------------------------------------------

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One call as a rank saw it.
struct Outcome {
  int code;  // gw_result_t; -1: the rank never made this call
  double start, end;
  char msg[640];
  double secs() const { return end - start; }
};

constexpr int kSlots = 16;
constexpr uint32_t kReportMagic = 0x43484b52;

// What a child sends back: outcomes by slot (each test names its slots) and values.
struct Report {
  uint32_t magic;
  int rank;
  Outcome o[kSlots];
  long long v[20];
};

// Runs fn (a gradwire call on this thread) and records it in rep.o[slot].
template <class F>
gw_result_t timed(Report& rep, int slot, F&& fn) {
  Outcome& o = rep.o[slot];
  o.start = now_s();
  const gw_result_t r = fn();
  o.end = now_s();
  o.code = static_cast<int>(r);
  std::snprintf(o.msg, sizeof o.msg, "%s", r == GW_SUCCESS ? "" : gw_get_last_error());
  return r;
}

const char* code_name(int code) {
  if (code < 0) return "(not reached)";
  return gw_get_error_string(static_cast<gw_result_t>(code));  // a static table: no threads
}

std::string show(const Outcome& o) {
  char head[96];
  std::snprintf(head, sizeof head, "%s in %.3f s", code_name(o.code), o.secs());
  return std::string(head) + (o.msg[0] != '\0' ? std::string(": ") + o.msg : std::string());
}

// Events a child sends the parent through one shared pipe: 2 bytes, kind and rank.
void send_event(int fd, char kind, int rank) {
  const char b[2] = {kind, static_cast<char>(rank)};
  if (write(fd, b, 2) != 2) _exit(97);
}

// What the body of a child gets.
struct Child {
  int rank = -1;
  int np = 0;
  std::vector<gw_unique_id_t> ids;
  Report rep{};
  int event_fd = -1;
  int report_fd = -1;
  bool sent = false;
  // Sends the report (and a 'D' event) now; the runner does it after the body otherwise.
  void report() {
    if (sent) return;
    sent = true;
    if (!bootstrap::write_all(report_fd, &rep, sizeof rep)) _exit(98);
    send_event(event_fd, 'D', rank);
  }
  void event(char kind) { send_event(event_fd, kind, rank); }
};

// The parent's view of the children's events.
class Events {
 public:
  explicit Events(int fd) : fd_(fd) {}
  // Waits (at most timeout_s) for an event of kind from rank (-1: any); true if it came.
  bool wait(char kind, int rank, double timeout_s, int* who = nullptr) {
    const double until = now_s() + timeout_s;
    for (;;) {
      for (size_t i = 0; i < seen_.size(); ++i) {
        if (seen_[i].first == kind && (rank < 0 || seen_[i].second == rank)) {
          if (who != nullptr) *who = seen_[i].second;
          seen_.erase(seen_.begin() + static_cast<long>(i));
          return true;
        }
      }
      const double left = until - now_s();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
      char b[2];
      const ssize_t n = read(fd_, b, 2);
      if (n == 2) {
        seen_.emplace_back(b[0], static_cast<int>(b[1]));
      } else if (n == 0) {
        return false;  // every writer is gone
      }
    }
  }

 private:
  int fd_;
  std::vector<std::pair<char, int>> seen_;
};

struct RankResult {
  pid_t pid = -1;
  int status = 0;
  bool hung = false;  // the runner had to kill it at the limit
  bool reported = false;
  Report rep{};
  bool clean() const { return !hung && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool killed_by(int sig) const { return !hung && WIFSIGNALED(status) && WTERMSIG(status) == sig; }
  std::string how() const {
    if (hung) return "hung (killed by the runner at the limit)";
    if (WIFSIGNALED(status)) return std::string("died of signal ") + strsignal(WTERMSIG(status));
    return "exited with " + std::to_string(WEXITSTATUS(status));
  }
};

using Body = std::function<void(Child&)>;
using ParentAction = std::function<void(const std::vector<pid_t>&, Events&)>;

struct JobOptions {
  int np = 2;
  std::string tls = "tcp";
  int ids = 1;       // unique ids rank 0 makes (one per communicator the job creates)
  int limit_s = 40;  // alarm() in every child; the runner kills what is left 10 s later
  std::vector<std::pair<std::string, std::string>> env;
  ParentAction parent;  // runs in the parent while the children run
};

// Forks np children, runs body in each, and returns what each did and reported.
std::vector<RankResult> run_job(const JobOptions& opt, const Body& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  signal(SIGPIPE, SIG_IGN);
  const int np = opt.np;
  std::vector<int> id_pipes(2 * static_cast<size_t>(np)), rep_pipes(2 * static_cast<size_t>(np));
  int ev[2];
  if (pipe(ev) != 0) std::abort();
  for (int i = 0; i < np; ++i) {
    if (pipe(&id_pipes[2 * static_cast<size_t>(i)]) != 0 || pipe(&rep_pipes[2 * static_cast<size_t>(i)]) != 0)
      std::abort();
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < np; ++i) {
    const pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      alarm(static_cast<unsigned>(opt.limit_s));
      setenv("UCX_TLS", (opt.tls + ",self").c_str(), 1);
      for (const auto& kv : opt.env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      Child c;
      c.rank = i;
      c.np = np;
      c.event_fd = ev[1];
      c.report_fd = rep_pipes[2 * static_cast<size_t>(i) + 1];
      c.rep.magic = kReportMagic;
      c.rep.rank = i;
      for (Outcome& o : c.rep.o) o.code = -1;
      c.ids.resize(static_cast<size_t>(opt.ids));
      if (i == 0) {
        for (gw_unique_id_t& id : c.ids) {
          if (gw_get_unique_id(&id) != GW_SUCCESS) {
            std::fprintf(stderr, "gw_get_unique_id: %s\n", gw_get_last_error());
            _exit(95);
          }
        }
        for (int j = 1; j < np; ++j) {
          if (!bootstrap::write_all(id_pipes[2 * static_cast<size_t>(j) + 1], c.ids.data(),
                                    c.ids.size() * sizeof(gw_unique_id_t))) {
            _exit(96);
          }
        }
      } else if (!bootstrap::read_all(id_pipes[2 * static_cast<size_t>(i)], c.ids.data(),
                                      c.ids.size() * sizeof(gw_unique_id_t))) {
        _exit(96);
      }
      body(c);
      c.report();
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(ev[1]);
  for (int i = 0; i < np; ++i) {
    close(id_pipes[2 * static_cast<size_t>(i)]);
    close(id_pipes[2 * static_cast<size_t>(i) + 1]);
    close(rep_pipes[2 * static_cast<size_t>(i) + 1]);
  }
  Events events(ev[0]);
  if (opt.parent) opt.parent(pids, events);

  std::vector<RankResult> out(static_cast<size_t>(np));
  const double until = now_s() + opt.limit_s + 10;
  int left = np;
  for (int i = 0; i < np; ++i) out[static_cast<size_t>(i)].pid = pids[static_cast<size_t>(i)];
  std::vector<bool> done(static_cast<size_t>(np), false);
  while (left > 0) {
    for (int i = 0; i < np; ++i) {
      if (done[static_cast<size_t>(i)]) continue;
      int st = 0;
      if (waitpid(pids[static_cast<size_t>(i)], &st, WNOHANG) == pids[static_cast<size_t>(i)]) {
        out[static_cast<size_t>(i)].status = st;
        done[static_cast<size_t>(i)] = true;
        --left;
      } else if (now_s() > until) {
        kill(pids[static_cast<size_t>(i)], SIGKILL);
        waitpid(pids[static_cast<size_t>(i)], &st, 0);
        out[static_cast<size_t>(i)].status = st;
        out[static_cast<size_t>(i)].hung = true;
        done[static_cast<size_t>(i)] = true;
        --left;
      }
    }
    if (left > 0) usleep(2000);
  }
  for (int i = 0; i < np; ++i) {
    const int fd = rep_pipes[2 * static_cast<size_t>(i)];
    fcntl(fd, F_SETFL, O_NONBLOCK);
    RankResult& r = out[static_cast<size_t>(i)];
    auto* p = reinterpret_cast<char*>(&r.rep);
    size_t got = 0;
    while (got < sizeof r.rep) {
      const ssize_t n = read(fd, p + got, sizeof r.rep - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    r.reported = got == sizeof r.rep && r.rep.magic == kReportMagic;
    close(fd);
  }
  close(ev[0]);
  return out;
}

// Every rank but the victims exited normally and reported; the victims died of victim_signal.
void expect_clean(const std::vector<RankResult>& rs, const std::vector<int>& victims = {},
                  int victim_signal = SIGKILL) {
  for (size_t i = 0; i < rs.size(); ++i) {
    bool victim = false;
    for (int v : victims) victim = victim || v == static_cast<int>(i);
    if (victim) {
      EXPECT_TRUE(rs[i].killed_by(victim_signal)) << "victim rank " << i << " " << rs[i].how();
    } else {
      EXPECT_TRUE(rs[i].clean()) << "rank " << i << " " << rs[i].how();
      EXPECT_TRUE(rs[i].reported) << "rank " << i << " sent no report";
    }
  }
}

bool contains(const char* msg, const std::string& what) { return std::strstr(msg, what.c_str()) != nullptr; }

std::string rank_word(int r) { return "rank " + std::to_string(r); }

gw_config_t config(double timeout_s) {
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  cfg.timeout_s = timeout_s;
  return cfg;
}

// Joins a job through the C ABI, recording the init in slot.
gw_comm_t init_rank(Child& c, int slot, double timeout_s, int id_index = 0) {
  const gw_config_t cfg = config(timeout_s);
  gw_comm_t comm = nullptr;
  if (timed(c.rep, slot, [&] {
        return gw_comm_init_rank(&comm, c.np, c.ids[static_cast<size_t>(id_index)], c.rank, &cfg);
      }) != GW_SUCCESS) {
    return nullptr;
  }
  return comm;
}

// fp32 data whose sum over np ranks is exact: rank + 1 + (i % 7).
void fill(std::vector<float>& x, int rank) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 7));
}
bool sum_ok(const std::vector<float>& y, size_t count, int np) {
  for (size_t i = 0; i < count; ++i) {
    if (y[i] != static_cast<float>(np * (np + 1) / 2 + np * static_cast<int>(i % 7))) return false;
  }
  return true;
}

// A plain all-reduce every rank makes: true if it returned the right sum.
gw_result_t plain_allreduce(gw_comm_t comm, Child& c, int slot, size_t count, bool* right) {
  std::vector<float> x(count), y(count, -1.0f);
  fill(x, c.rank);
  const gw_result_t r = timed(
      c.rep, slot, [&] { return gw_allreduce(comm, x.data(), y.data(), count, GW_FLOAT32, GW_SUM, nullptr, nullptr); });
  *right = r == GW_SUCCESS && sum_ok(y, count, c.np);
  return r;
}

gw_result_t async_error(gw_comm_t comm) {
  gw_result_t e = GW_ERR_INTERNAL;
  if (gw_comm_get_async_error(comm, &e) != GW_SUCCESS) return GW_ERR_INTERNAL;
  return e;
}

class CheckedCalls : public ::testing::TestWithParam<std::string> {};

// ---- mismatched calls ----------------------------------------------------------------------

enum class Mis {
  kCount,
  kCountFp16,
  kOp,
  kAlgo,
  kCodec,
  kRoot,
  kKind,
  kBarrierBroadcast,
  kDenseAlgo,
  kHalvingAlgo,
  kSparseAlgo,
  kRabenseifnerAlgo,
  kRingCounts,
  kLargeRingVsRabenseifner
};
const char* mis_name(Mis m) {
  switch (m) {
    case Mis::kCount: return "Count1000vs1001";
    case Mis::kCountFp16: return "Fp16Count10vs11";
    case Mis::kOp: return "SumVsAvg";
    case Mis::kAlgo: return "CompressedRingVsScatterReduce";
    case Mis::kCodec: return "QsgdVsTopk";
    case Mis::kRoot: return "EveryRankItsOwnBroadcastRoot";
    case Mis::kKind: return "AllgatherVsAllreduce";
    case Mis::kBarrierBroadcast: return "BarrierVsBroadcast";
    case Mis::kDenseAlgo: return "RingVsRecursiveDoubling";
    case Mis::kHalvingAlgo: return "HalvingDoublingVsScatterReduce";
    case Mis::kSparseAlgo: return "SparseDoublingVsSparseAllgather";
    case Mis::kRabenseifnerAlgo: return "RabenseifnerVsRing";
    case Mis::kRingCounts: return "RingCount100000vs50000";
    case Mis::kLargeRingVsRabenseifner: return "LargeRingVsRabenseifner";
  }
  return "?";
}

// Slots and values of a mismatch child.
enum { kInit = 0, kControl = 1, kControl2 = 2, kMismatch = 3, kNext = 4 };
enum { kControlRight = 0, kAsyncAfter = 1, kPolicyQsgd = 2, kLastAlgo = 3, kPolicyTopk = 4 };

constexpr size_t kCompressedCount = 100000;      // 400 KB: past the dense threshold, so codecs run
constexpr size_t kLargeCount = size_t{4} << 20;  // 16 MiB of floats
const uint16_t kHalfOf[6] = {0, 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500};  // fp16 0.0 .. 5.0

bool near(const std::vector<float>& y, size_t count, float want) {
  for (size_t i = 0; i < count; ++i) {
    if (std::fabs(y[i] - want) > 1e-3f * want) return false;
  }
  return true;
}

void mismatch_child(Mis m, int odd, Child& c) {
  gw_comm_t comm = init_rank(c, kInit, 20.0);
  if (comm == nullptr) return;
  const int rank = c.rank, np = c.np;
  const bool me_odd = rank == odd;
  Report& rep = c.rep;
  bool right = false;
  std::vector<float> x(kCompressedCount), y(kCompressedCount);
  fill(x, rank);
  gw_codec_t qsgd = nullptr, topk = nullptr;
  gw_codec_create("qsgd:bits=8", &qsgd);
  gw_codec_create("topk:ratio=0.01", &topk);
  std::vector<uint8_t> bytes(64 * 4096), all(64 * 4096 * 3);
  auto allreduce = [&](size_t count, gw_red_op_t op) {
    return gw_allreduce(comm, x.data(), y.data(), count, GW_FLOAT32, op, nullptr, nullptr);
  };
  auto bcast_ok = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (bytes[i] != static_cast<uint8_t>(i * 7 + 3)) return false;
    }
    return true;
  };
  auto bcast = [&](size_t n, int root) {
    for (size_t i = 0; i < n; ++i) bytes[i] = rank == root ? static_cast<uint8_t>(i * 7 + 3) : 0;
    return gw_broadcast(comm, bytes.data(), n, root);
  };
  auto allgather = [&](size_t n) {
    std::memset(bytes.data(), rank + 1, n);
    return gw_allgather(comm, bytes.data(), all.data(), n);
  };
  auto allgather_ok = [&](size_t n) {
    for (int r = 0; r < np; ++r) {
      for (size_t i = 0; i < n; ++i) {
        if (all[static_cast<size_t>(r) * n + i] != r + 1) return false;
      }
    }
    return true;
  };
  switch (m) {
    case Mis::kCount:
      right = timed(rep, kControl, [&] { return allreduce(1000, GW_SUM); }) == GW_SUCCESS && sum_ok(y, 1000, np);
      timed(rep, kMismatch, [&] { return allreduce(me_odd ? 1001 : 1000, GW_SUM); });
      break;
    case Mis::kCountFp16: {
      std::vector<uint16_t> hx(11, kHalfOf[1]), hy(11, 0);
      right = timed(rep, kControl, [&] {
                return gw_allreduce(comm, hx.data(), hy.data(), 10, GW_FLOAT16, GW_SUM, nullptr, nullptr);
              }) == GW_SUCCESS;
      for (size_t i = 0; i < 10; ++i) right = right && hy[i] == kHalfOf[np];
      timed(rep, kMismatch, [&] {
        return gw_allreduce(comm, hx.data(), hy.data(), me_odd ? 11 : 10, GW_FLOAT16, GW_SUM, nullptr, nullptr);
      });
      break;
    }
    case Mis::kOp:
      right = timed(rep, kControl, [&] { return allreduce(1000, GW_SUM); }) == GW_SUCCESS && sum_ok(y, 1000, np);
      timed(rep, kMismatch, [&] { return allreduce(1000, me_odd ? GW_AVG : GW_SUM); });
      break;
    case Mis::kAlgo:
    case Mis::kHalvingAlgo:
    case Mis::kSparseAlgo:
    case Mis::kCodec: {
      // Constant data: qsgd represents it exactly, so the sum is np (np + 1) / 2 within rounding.
      std::fill(x.begin(), x.end(), static_cast<float>(rank + 1));
      gw_algo_t pick = GW_ALGO_AUTO;
      gw_allreduce_algo(comm, kCompressedCount, GW_FLOAT32, qsgd, &pick);
      rep.v[kPolicyQsgd] = pick;
      gw_allreduce_algo(comm, kCompressedCount, GW_FLOAT32, topk, &pick);
      rep.v[kPolicyTopk] = pick;
      right =
          timed(rep, kControl,
                [&] {
                  return gw_allreduce(comm, x.data(), y.data(), kCompressedCount, GW_FLOAT32, GW_SUM, qsgd, nullptr);
                }) == GW_SUCCESS &&
          near(y, kCompressedCount, static_cast<float>(np * (np + 1) / 2));
      gw_comm_stats_t st;
      std::memset(&st, 0, sizeof st);
      st.size = sizeof st;
      if (gw_comm_get_stats(comm, &st) == GW_SUCCESS) rep.v[kLastAlgo] = st.last_algo;
      if (m == Mis::kAlgo || m == Mis::kHalvingAlgo) {
        const gw_algo_t odd_algo = m == Mis::kAlgo ? GW_ALGO_COMPRESSED_RING : GW_ALGO_HALVING_DOUBLING;
        timed(rep, kMismatch, [&] {
          return me_odd ? gw_allreduce_ex(comm, x.data(), y.data(), kCompressedCount, GW_FLOAT32, GW_SUM, qsgd, nullptr,
                                          odd_algo)
                        : gw_allreduce(comm, x.data(), y.data(), kCompressedCount, GW_FLOAT32, GW_SUM, qsgd, nullptr);
        });
      } else if (m == Mis::kSparseAlgo) {
        timed(rep, kMismatch, [&] {
          return gw_allreduce_ex(comm, x.data(), y.data(), kCompressedCount, GW_FLOAT32, GW_SUM, topk, nullptr,
                                 me_odd ? GW_ALGO_SPARSE_DOUBLING : GW_ALGO_AUTO);
        });
      } else {
        timed(rep, kMismatch, [&] {
          return gw_allreduce(comm, x.data(), y.data(), kCompressedCount, GW_FLOAT32, GW_SUM, me_odd ? topk : qsgd,
                              nullptr);
        });
      }
      break;
    }
    case Mis::kRoot:
      right = timed(rep, kControl, [&] { return bcast(4096, 0); }) == GW_SUCCESS && bcast_ok(4096);
      timed(rep, kMismatch, [&] { return bcast(64, rank); });
      break;
    case Mis::kKind:
      right = timed(rep, kControl, [&] { return allgather(4000); }) == GW_SUCCESS && allgather_ok(4000);
      right =
          right && timed(rep, kControl2, [&] { return allreduce(1000, GW_SUM); }) == GW_SUCCESS && sum_ok(y, 1000, np);
      timed(rep, kMismatch, [&] { return me_odd ? allgather(4000) : allreduce(1000, GW_SUM); });
      break;
    case Mis::kDenseAlgo:
      // Different algorithms, so different data edges: the odd rank waits on a ring
      // neighbour, the others on recursive doubling's partners.
      right = timed(rep, kControl, [&] { return allreduce(1000, GW_SUM); }) == GW_SUCCESS && sum_ok(y, 1000, np);
      timed(rep, kMismatch, [&] {
        return me_odd
                   ? gw_allreduce_ex(comm, x.data(), y.data(), 1000, GW_FLOAT32, GW_SUM, nullptr, nullptr, GW_ALGO_RING)
                   : allreduce(1000, GW_SUM);
      });
      break;
    case Mis::kRabenseifnerAlgo:
      // 100000 elements: chunks of the halving and doubling steps against the ring's.
      right = timed(rep, kControl, [&] { return allreduce(1000, GW_SUM); }) == GW_SUCCESS && sum_ok(y, 1000, np);
      timed(rep, kMismatch, [&] {
        return gw_allreduce_ex(comm, x.data(), y.data(), kCompressedCount, GW_FLOAT32, GW_SUM, nullptr, nullptr,
                               me_odd ? GW_ALGO_RABENSEIFNER : GW_ALGO_RING);
      });
      break;
    case Mis::kRingCounts:
      // Both dense rings, whose first chunks (which carry the descriptor) differ by more than
      // the room a receiver keeps: the odd rank cannot read its neighbour's first message.
      right = timed(rep, kControl, [&] { return allreduce(1000, GW_SUM); }) == GW_SUCCESS && sum_ok(y, 1000, np);
      timed(rep, kMismatch, [&] {
        return gw_allreduce_ex(comm, x.data(), y.data(), me_odd ? kCompressedCount / 2 : kCompressedCount, GW_FLOAT32,
                               GW_SUM, nullptr, nullptr, GW_ALGO_RING);
      });
      break;
    case Mis::kLargeRingVsRabenseifner: {
      // 16 MiB in chunks of 8 MiB (GW_CHUNK_BYTES): the ring's first message, which carries
      // its descriptor, goes by UCX's rendezvous, and the other side reads its head anyway.
      std::vector<float> big(kLargeCount, 1.0f), out(kLargeCount);
      right = timed(rep, kControl, [&] { return allreduce(1000, GW_SUM); }) == GW_SUCCESS && sum_ok(y, 1000, np);
      timed(rep, kMismatch, [&] {
        return gw_allreduce_ex(comm, big.data(), out.data(), kLargeCount, GW_FLOAT32, GW_SUM, nullptr, nullptr,
                               me_odd ? GW_ALGO_RABENSEIFNER : GW_ALGO_RING);
      });
      break;
    }
    case Mis::kBarrierBroadcast:
      right = timed(rep, kControl, [&] { return gw_barrier(comm); }) == GW_SUCCESS;
      right = right && timed(rep, kControl2, [&] { return bcast(64, 0); }) == GW_SUCCESS && bcast_ok(64);
      timed(rep, kMismatch, [&] { return me_odd ? gw_barrier(comm) : bcast(64, 0); });
      break;
  }
  rep.v[kControlRight] = right ? 1 : 0;
  timed(rep, kNext, [&] { return allreduce(16, GW_SUM); });
  rep.v[kAsyncAfter] = async_error(comm);
  gw_comm_destroy(comm);
  gw_codec_destroy(qsgd);
  gw_codec_destroy(topk);
}

// How rank r's side of the mismatch must read: the collective it called and a regex for the
// fields that differ (call_descriptor.cpp's format: " count=1001", " op=avg", ...).
std::pair<std::string, std::string> expected_side(Mis m, int r, int odd) {
  const bool o = r == odd;
  switch (m) {
    case Mis::kCount: return {"allreduce", o ? " count=1001" : " count=1000"};
    case Mis::kCountFp16: return {"allreduce", o ? " count=11" : " count=10"};
    case Mis::kOp: return {"allreduce", o ? " op=avg" : " op=sum"};
    case Mis::kAlgo: return {"allreduce", o ? " algo=compressed_ring" : " algo=scatter_reduce"};
    case Mis::kCodec:
      return {"allreduce", o ? R"( codec=topk:\S*ratio=0\.01\S* algo=sparse_allgather)"
                             : R"( codec=qsgd:\S*bits=8\S* algo=scatter_reduce)"};
    case Mis::kRoot: return {"broadcast", " root=" + std::to_string(r)};
    case Mis::kKind:
      return o ? std::make_pair(std::string("allgather"), std::string(".*bytes=4000.*"))
               : std::make_pair(std::string("allreduce"), std::string(".*count=1000.*"));
    case Mis::kBarrierBroadcast:
      return o ? std::make_pair(std::string("barrier"), std::string(".*"))
               : std::make_pair(std::string("broadcast"), std::string(".*bytes=64.*root=0.*"));
    case Mis::kDenseAlgo: return {"allreduce", o ? " algo=ring" : " algo=recursive_doubling"};
    case Mis::kHalvingAlgo: return {"allreduce", o ? " algo=halving_doubling" : " algo=scatter_reduce"};
    case Mis::kSparseAlgo: return {"allreduce", o ? " algo=sparse_doubling" : " algo=sparse_allgather"};
    case Mis::kRabenseifnerAlgo: return {"allreduce", o ? " algo=rabenseifner" : " algo=ring"};
    case Mis::kLargeRingVsRabenseifner: return {"allreduce", o ? " algo=rabenseifner" : " algo=ring"};
    case Mis::kRingCounts:
      // Found from the odd rank's smaller message, only the counts; by the odd rank, its own
      // call in full and what its neighbour's too long first message says.
      return {"allreduce", o ? "( count=50000| count=50000 dtype=float32 op=sum codec=none algo=ring)"
                             : R"(( count=100000| algo=ring \(its first message of call #\d+ is longer than the \d+ )"
                               R"(bytes this rank's call expects: more elements or a wider dtype\)))"};
  }
  return {"?", "?"};
}

class Mismatch : public ::testing::TestWithParam<std::tuple<std::string, int, Mis>> {};

TEST_P(Mismatch, EveryRankFailsWithInvalidUsageNamingBothSides) {
  const std::string tls = std::get<0>(GetParam());
  const int np = std::get<1>(GetParam());
  const Mis m = std::get<2>(GetParam());
  // Which rank differs: rank 1 of 2; of 3, each rank in turn (rank 0 hosts the rendezvous
  // and is broadcast's root, rank 1 has two ring neighbours, rank 2 is last).
  const int odd = m == Mis::kRoot ? -1 : np == 2 ? 1 : static_cast<int>(m) % 3;
  JobOptions opt;
  opt.np = np;
  opt.tls = tls;
  opt.env = {{"GW_TUNE", "0"}};
  if (m == Mis::kLargeRingVsRabenseifner) opt.env.push_back({"GW_CHUNK_BYTES", "8388608"});
  const auto rs = run_job(opt, [&](Child& c) { mismatch_child(m, odd, c); });
  expect_clean(rs);
  const std::regex shape(R"(mismatched collective calls: rank (\d+) called (\w+)(.*), rank (\d+) called (\w+)(.*)$)");
  int reached = 0;  // ranks that made the mismatched call
  for (int r = 0; r < np; ++r) {
    const Report& rep = rs[static_cast<size_t>(r)].rep;
    SCOPED_TRACE("rank " + std::to_string(r) + (r == odd ? " (the odd one)" : ""));
    ASSERT_EQ(rep.o[kInit].code, GW_SUCCESS) << show(rep.o[kInit]);
    // The control: the same calls on every rank work and give the right results. A rank
    // still finishing the control (its last data in flight) when a faster one has already
    // found the mismatch in the next call fails the control with that finding instead: the
    // longer the chain (a broadcast over 5 ranks), the likelier. Never a wrong result.
    auto control_ok = [&](const Outcome& o) {
      if (o.code == GW_SUCCESS) return true;
      return o.code == GW_ERR_INVALID_USAGE && contains(o.msg, "stopped the job") &&
             contains(o.msg, "mismatched collective calls");
    };
    EXPECT_TRUE(control_ok(rep.o[kControl])) << show(rep.o[kControl]);
    const bool two_controls = m == Mis::kKind || m == Mis::kBarrierBroadcast;
    const bool controls_done =
        rep.o[kControl].code == GW_SUCCESS && (!two_controls || rep.o[kControl2].code == GW_SUCCESS);
    reached += controls_done ? 1 : 0;
    if (m == Mis::kKind || m == Mis::kBarrierBroadcast) {
      EXPECT_TRUE(control_ok(rep.o[kControl2])) << show(rep.o[kControl2]);
    }
    if (!controls_done) continue;  // broken before its mismatched call: nothing more to see
    EXPECT_EQ(rep.v[kControlRight], 1) << "the matching control call returned wrong data";
    if (m == Mis::kAlgo || m == Mis::kCodec || m == Mis::kHalvingAlgo || m == Mis::kSparseAlgo) {
      // GW_TUNE=0: the policy's pick is what runs; the control ran scatter_reduce, so the
      // compressed path was really taken.
      EXPECT_EQ(rep.v[kPolicyQsgd], GW_ALGO_SCATTER_REDUCE);
      EXPECT_EQ(rep.v[kPolicyTopk], GW_ALGO_SPARSE_ALLGATHER);
      EXPECT_EQ(rep.v[kLastAlgo], GW_ALGO_SCATTER_REDUCE);
    }
    // The mismatched call: INVALID_USAGE on every rank, whether it found the mismatch itself
    // or learned it from a peer ("rank N stopped the job: mismatched collective calls: ...").
    const Outcome& mis = rep.o[kMismatch];
    EXPECT_EQ(mis.code, GW_ERR_INVALID_USAGE) << show(mis);
    EXPECT_LT(mis.secs(), 5.0) << show(mis);
    // The communicator is broken: the next call fails at once with the same error.
    EXPECT_EQ(rep.o[kNext].code, GW_ERR_INVALID_USAGE) << show(rep.o[kNext]);
    EXPECT_LT(rep.o[kNext].secs(), 0.5) << show(rep.o[kNext]);
    EXPECT_EQ(rep.v[kAsyncAfter], GW_ERR_INVALID_USAGE);
    std::cmatch g;
    const bool parsed = std::regex_search(mis.msg, g, shape);
    EXPECT_TRUE(parsed) << "not a mismatch message: " << show(mis);
    if (!parsed) continue;
    const int a = std::stoi(g[1].str()), b = std::stoi(g[4].str());
    EXPECT_NE(a, b) << mis.msg;
    EXPECT_TRUE(a == odd || b == odd || m == Mis::kRoot) << "the message does not name the odd rank: " << mis.msg;
    for (const auto& side : {std::make_tuple(a, g[2].str(), g[3].str()), std::make_tuple(b, g[5].str(), g[6].str())}) {
      const auto want = expected_side(m, std::get<0>(side), odd);
      EXPECT_EQ(std::get<1>(side), want.first) << "rank " << std::get<0>(side) << " side of: " << mis.msg;
      EXPECT_TRUE(std::regex_match(std::get<2>(side), std::regex(want.second)))
          << "rank " << std::get<0>(side) << " fields '" << std::get<2>(side) << "' do not match '" << want.second
          << "' in: " << mis.msg;
    }
    // A rank that found it itself names itself as the second side.
    if (!contains(mis.msg, "stopped the job")) {
      EXPECT_EQ(b, r) << mis.msg;
    }
  }
  EXPECT_GE(reached, 2) << "the mismatch was found before the ranks that differ made their calls";
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, Mismatch,
    ::testing::Combine(::testing::Values("tcp", "sm"), ::testing::Values(2, 3, 5),
                       ::testing::Values(Mis::kCount, Mis::kCountFp16, Mis::kOp, Mis::kAlgo, Mis::kCodec, Mis::kRoot,
                                         Mis::kKind, Mis::kBarrierBroadcast, Mis::kDenseAlgo, Mis::kHalvingAlgo,
                                         Mis::kSparseAlgo, Mis::kRabenseifnerAlgo, Mis::kRingCounts,
                                         Mis::kLargeRingVsRabenseifner)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int, Mis>>& i) {
      return std::get<0>(i.param) + "_np" + std::to_string(std::get<1>(i.param)) + "_" + mis_name(std::get<2>(i.param));
    });

// ---- sizes no buffer can have --------------------------------------------------------------

TEST_P(CheckedCalls, ImpossibleSizesFailOnTheCallingRankAloneAndLeaveTheCommunicatorUsable) {
  constexpr int kBad = 1;  // of 3: the allgather's bytes * nranks overflows
  constexpr int kGood = 13, kGoodBroadcast = 14;
  constexpr size_t kMax = SIZE_MAX;
  struct Case {
    const char* what;
    std::function<gw_result_t(gw_comm_t, float*, gw_codec_t)> call;
  };
  const std::vector<Case> cases = {
      {"allreduce SIZE_MAX fp32",
       [](gw_comm_t c, float* b, gw_codec_t) {
         return gw_allreduce(c, b, b, kMax, GW_FLOAT32, GW_SUM, nullptr, nullptr);
       }},
      {"allreduce SIZE_MAX/2 fp32",
       [](gw_comm_t c, float* b, gw_codec_t) {
         return gw_allreduce(c, b, b, kMax / 2, GW_FLOAT32, GW_SUM, nullptr, nullptr);
       }},
      {"allreduce SIZE_MAX/4+1 fp32 (bytes wrap to 4)",
       [](gw_comm_t c, float* b, gw_codec_t) {
         return gw_allreduce(c, b, b, kMax / 4 + 1, GW_FLOAT32, GW_SUM, nullptr, nullptr);
       }},
      {"allreduce SIZE_MAX/2+1 fp16 (bytes wrap to 0)",
       [](gw_comm_t c, float* b, gw_codec_t) {
         return gw_allreduce(c, b, b, kMax / 2 + 1, GW_FLOAT16, GW_SUM, nullptr, nullptr);
       }},
      {"allreduce 2^48 fp32",
       [](gw_comm_t c, float* b, gw_codec_t) {
         return gw_allreduce(c, b, b, size_t{1} << 48, GW_FLOAT32, GW_SUM, nullptr, nullptr);
       }},
      {"allreduce 2^46+1 fp32 (4 bytes past 2^48)",
       [](gw_comm_t c, float* b, gw_codec_t) {
         return gw_allreduce(c, b, b, (size_t{1} << 46) + 1, GW_FLOAT32, GW_SUM, nullptr, nullptr);
       }},
      {"allreduce_ex SIZE_MAX/4+1 with qsgd",
       [](gw_comm_t c, float* b, gw_codec_t q) {
         return gw_allreduce_ex(c, b, b, kMax / 4 + 1, GW_FLOAT32, GW_SUM, q, nullptr, GW_ALGO_SCATTER_REDUCE);
       }},
      {"allgather SIZE_MAX/2 bytes (x 3 ranks overflows)",
       [](gw_comm_t c, float* b, gw_codec_t) { return gw_allgather(c, b, b, kMax / 2); }},
      {"broadcast SIZE_MAX bytes", [](gw_comm_t c, float* b, gw_codec_t) { return gw_broadcast(c, b, kMax, 0); }},
      {"sparse_allgather_dense count SIZE_MAX",
       [](gw_comm_t c, float* b, gw_codec_t) { return gw_sparse_allgather_dense(c, b, 16, b, kMax); }},
      {"sparse_allgather len SIZE_MAX",
       [](gw_comm_t c, float* b, gw_codec_t) {
         size_t lengths[3];
         return gw_sparse_allgather(c, b, kMax, b, 64, lengths);
       }},
      {"iallreduce SIZE_MAX fp32 (the call or its wait)",
       [](gw_comm_t c, float* b, gw_codec_t) {
         gw_request_t req = nullptr;
         gw_result_t r = gw_iallreduce(c, b, b, kMax, GW_FLOAT32, GW_SUM, nullptr, nullptr, GW_ALGO_AUTO, &req);
         if (r == GW_SUCCESS) r = gw_wait(req);
         return r;
       }},
  };
  static_assert(kGood >= 12, "slots");
  JobOptions opt;
  opt.np = 3;
  opt.tls = GetParam();
  const auto rs = run_job(opt, [&](Child& c) {
    gw_comm_t comm = init_rank(c, kInit, 20.0);
    if (comm == nullptr) return;
    gw_codec_t qsgd = nullptr;
    gw_codec_create("qsgd:bits=8", &qsgd);
    if (c.rank == kBad) {
      std::vector<float> small(64, 1.0f);  // all the memory these calls may touch: none of it
      for (size_t i = 0; i < cases.size(); ++i) {
        timed(c.rep, 1 + static_cast<int>(i), [&] { return cases[i].call(comm, small.data(), qsgd); });
      }
      c.rep.v[1] = async_error(comm);
    }
    bool right = false;
    plain_allreduce(comm, c, kGood, 1000, &right);
    c.rep.v[0] = right ? 1 : 0;
    std::vector<uint8_t> b(256);
    for (size_t i = 0; i < b.size(); ++i) b[i] = c.rank == kBad ? static_cast<uint8_t>(i ^ 0x5a) : 0;
    timed(c.rep, kGoodBroadcast, [&] { return gw_broadcast(comm, b.data(), b.size(), kBad); });
    bool same = true;
    for (size_t i = 0; i < b.size(); ++i) same = same && b[i] == static_cast<uint8_t>(i ^ 0x5a);
    c.rep.v[2] = same ? 1 : 0;
    gw_comm_destroy(comm);
    gw_codec_destroy(qsgd);
  });
  expect_clean(rs);
  for (int r = 0; r < 3; ++r) {
    const Report& rep = rs[static_cast<size_t>(r)].rep;
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(rep.o[kInit].code, GW_SUCCESS) << show(rep.o[kInit]);
    if (r == kBad) {
      for (size_t i = 0; i < cases.size(); ++i) {
        const Outcome& o = rep.o[1 + i];
        EXPECT_EQ(o.code, GW_ERR_INVALID_ARGUMENT) << cases[i].what << ": " << show(o);
        EXPECT_LT(o.secs(), 0.1) << cases[i].what << ": " << show(o);
        EXPECT_TRUE(contains(o.msg, "larger than any buffer")) << cases[i].what << ": " << show(o);
      }
      EXPECT_EQ(rep.v[1], GW_SUCCESS) << "the communicator broke";
    }
    // Nothing was sent: every rank's next call pairs with the others' and is right.
    EXPECT_EQ(rep.o[kGood].code, GW_SUCCESS) << show(rep.o[kGood]);
    EXPECT_EQ(rep.v[0], 1) << "wrong sum after the refused calls";
    EXPECT_EQ(rep.o[kGoodBroadcast].code, GW_SUCCESS) << show(rep.o[kGoodBroadcast]);
    EXPECT_EQ(rep.v[2], 1) << "wrong broadcast after the refused calls";
  }
}

// ---- dead peers ----------------------------------------------------------------------------

// Survivors' slots: the call that failed, and how many calls succeeded before it.
enum { kFailed = 1 };
enum { kCallsOk = 0, kKillTime = 1 };

// Calls all-reduces until one fails (at most max_calls), recording the failing one; before(k)
// and after(k, seconds) run around call k when given.
void call_until_failure(gw_comm_t comm, Child& c, size_t count, int max_calls,
                        const std::function<void(int)>& before = nullptr,
                        const std::function<void(int, double)>& after = nullptr) {
  std::vector<float> x(count, 1.0f);
  for (int k = 0; k < max_calls; ++k) {
    if (before) before(k);
    const gw_result_t r = timed(c.rep, kFailed, [&] {
      return gw_allreduce(comm, x.data(), x.data(), count, GW_FLOAT32, GW_SUM, nullptr, nullptr);
    });
    if (r != GW_SUCCESS) return;
    ++c.rep.v[kCallsOk];
    if (after) after(k, c.rep.o[kFailed].secs());
    std::fill(x.begin(), x.end(), 1.0f);
  }
}

// Prints what every rank's slot says (the report quotes these lines).
void log_outcomes(const std::vector<RankResult>& rs, int slot, const std::string& label) {
  for (size_t r = 0; r < rs.size(); ++r) {
    if (!rs[r].reported) continue;
    std::printf("  %s: rank %zu: %s\n", label.c_str(), r, show(rs[r].rep.o[slot]).c_str());
  }
}

// Memory the parent and the children share (made before the fork).
template <class T>
T* shared_memory() {
  void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  return new (p) T();
}

// Every survivor failed with code within limit_s of the kill, naming the victim.
void expect_survivors_failed(const std::vector<RankResult>& rs, int victim, double killed_at, int code, double limit_s,
                             const std::string& what) {
  for (size_t r = 0; r < rs.size(); ++r) {
    if (static_cast<int>(r) == victim) continue;
    const Outcome& o = rs[r].rep.o[kFailed];
    SCOPED_TRACE(what + ": survivor rank " + std::to_string(r) + ", victim rank " + std::to_string(victim));
    EXPECT_EQ(o.code, code) << show(o);
    EXPECT_LT(o.end - killed_at, limit_s) << show(o);
    EXPECT_TRUE(contains(o.msg, rank_word(victim))) << "the message does not name the victim: " << show(o);
  }
}

// LIBRARY (or UCX 1.13.1) BUG, seen once in about 60 runs of this test over TCP, with the whole
// file running: a survivor (rank 2, victim rank 0 killed 22 ms into a 34 ms call) died of
// SIGABRT inside UCX: "uct_iface.h:884 Assertion `comp->count > 0' failed ... status=-80"
// (UCS_ERR_ENDPOINT_TIMEOUT) in uct_tcp_iface_progress <- ucp_worker_progress <-
// UcxTransportImpl::drive() (ucx_transport.cpp:765) <- Transport::wait, on the progress thread,
// after its peer's connection failed. expect_clean() catches it ("rank 2 died of signal Aborted").
TEST_P(CheckedCalls, PeerKilledInsideALargeAllreduceFailsTheOthersWithRemoteWithin2s) {
  constexpr size_t kCount = size_t{4} << 20;  // 16 MiB of floats per rank
  // The victim makes two calls (the second one tells how long a call takes: some 10-40 ms
  // here), then the parent kills it this far into its third.
  const double fractions[5] = {0.05, 0.25, 0.45, 0.65, 0.85};
  struct Shared {
    std::atomic<int> done{0};         // calls the victim has finished
    std::atomic<double> call_s{0.0};  // how long its second call took
  };
  Shared* sh = shared_memory<Shared>();
  for (int rep = 0; rep < 5; ++rep) {
    const int victim = rep % 3;  // rank 0, which hosted the rendezvous, too
    sh->done = 0;
    sh->call_s = 0.0;
    double killed_at = 0, delay_s = 0;
    bool signalled = false;
    JobOptions opt;
    opt.np = 3;
    opt.tls = GetParam();
    opt.parent = [&](const std::vector<pid_t>& pids, Events& ev) {
      signalled = ev.wait('G', victim, 30);
      delay_s = fractions[rep] * sh->call_s.load();
      usleep(static_cast<useconds_t>(delay_s * 1e6));
      killed_at = now_s();
      kill(pids[static_cast<size_t>(victim)], SIGKILL);
    };
    const auto rs = run_job(opt, [&](Child& c) {
      gw_comm_t comm = init_rank(c, kInit, 20.0);
      if (comm == nullptr) return;
      const bool v = c.rank == victim;
      call_until_failure(
          comm, c, kCount, 20,
          [&](int k) {
            if (v && k == 2) c.event('G');
          },
          [&](int k, double secs) {
            if (!v) return;
            if (k == 1) sh->call_s = secs;
            sh->done.fetch_add(1);
          });
      gw_comm_destroy(comm);
    });
    const int victim_done = sh->done.load();
    char what[160];
    std::snprintf(what, sizeof what, "run %d: victim rank %d killed %.1f ms into call %d (a call takes %.1f ms)", rep,
                  victim, delay_s * 1e3, victim_done, sh->call_s.load() * 1e3);
    std::printf("%s\n", what);
    log_outcomes(rs, kFailed, "killed mid-call");
    SCOPED_TRACE(what);
    ASSERT_TRUE(signalled);
    expect_clean(rs, {victim});
    EXPECT_GE(victim_done, 2) << "the victim died before its third call";
    for (size_t r = 0; r < 3; ++r) {
      if (static_cast<int>(r) == victim) continue;
      EXPECT_EQ(rs[r].rep.o[kInit].code, GW_SUCCESS) << show(rs[r].rep.o[kInit]);
      // The survivors finished about the calls the victim finished: one more if the victim
      // died after its last send of a call but before it returned; one fewer if it returned
      // from a call that a survivor had not finished yet (its death then fails that call
      // there: seen under load, over shared memory). Never a call the victim was not in.
      EXPECT_GE(rs[r].rep.v[kCallsOk], victim_done - 1) << "rank " << r;
      EXPECT_LE(rs[r].rep.v[kCallsOk], victim_done + 1) << "rank " << r;
    }
    expect_survivors_failed(rs, victim, killed_at, GW_ERR_REMOTE, 2.0, "killed mid-call");
  }
  munmap(sh, sizeof *sh);
}

TEST_P(CheckedCalls, PeerKilledBetweenCallsFailsTheOthersWithRemoteWithin2s) {
  // Victim 1 dies while the survivors already wait in their next call; victim 2 dies while
  // every rank is between calls (the survivors call 300 ms later: the call fails at once).
  for (const int victim : {1, 2}) {
    const bool survivors_idle = victim == 2;
    double killed_at = 0;
    bool signalled = false;
    JobOptions opt;
    opt.np = 3;
    opt.tls = GetParam();
    opt.parent = [&](const std::vector<pid_t>& pids, Events& ev) {
      signalled = ev.wait('B', victim, 30);
      usleep(survivors_idle ? 20000 : 100000);
      killed_at = now_s();
      kill(pids[static_cast<size_t>(victim)], SIGKILL);
    };
    const auto rs = run_job(opt, [&](Child& c) {
      gw_comm_t comm = init_rank(c, kInit, 20.0);
      if (comm == nullptr) return;
      call_until_failure(comm, c, 1000, 2);
      if (c.rank == victim) {
        c.event('B');
        pause();  // killed here
      }
      if (survivors_idle) usleep(300000);
      call_until_failure(comm, c, 1000, 5);
      gw_comm_destroy(comm);
    });
    SCOPED_TRACE(survivors_idle ? "survivors between calls" : "survivors inside their next call");
    log_outcomes(rs, kFailed,
                 survivors_idle ? "killed between calls, survivors idle" : "killed between calls, survivors waiting");
    ASSERT_TRUE(signalled);
    expect_clean(rs, {victim});
    for (size_t r = 0; r < 3; ++r) {
      if (static_cast<int>(r) != victim) {
        EXPECT_EQ(rs[r].rep.v[kCallsOk], 2) << "rank " << r;
      }
    }
    expect_survivors_failed(rs, victim, killed_at, GW_ERR_REMOTE, survivors_idle ? 0.5 : 2.0, "killed between calls");
    if (survivors_idle) {
      for (size_t r = 0; r < 3; ++r) {
        if (static_cast<int>(r) != victim) {
          EXPECT_LT(rs[r].rep.o[kFailed].secs(), 0.1) << show(rs[r].rep.o[kFailed]);
        }
      }
    }
  }
}

// The victim joins through the library's own init, with an address exchange that kills (or
// stops) this process right after the rendezvous returned: the survivors hold its address
// and are inside init, connecting.
void init_then_signal(Child& c, int sig, double timeout_s) {
  CommConfig cfg;
  cfg.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  bootstrap::UniqueId uid;
  std::memcpy(uid.bytes, c.ids[0].internal, sizeof uid.bytes);
  auto made = coll::init_communicator(
      c.rank, c.np,
      [&](const std::string& blob) {
        auto table = bootstrap::rendezvous(uid, c.rank, c.np, blob, cfg.timeout);
        raise(sig);
        return table;
      },
      cfg);
  (void)made;
}

// The victim dies after the rendezvous, while the survivors create their endpoints or say
// hello: the process watch starts before any endpoint exists, and an endpoint to a dead peer
// is GW_ERR_REMOTE naming it (it was GW_ERR_SYSTEM after 2 s inside UCX when the victim was
// gone before ucp_ep_create).
TEST_P(CheckedCalls, PeerKilledDuringInitAfterItsRendezvousFailsTheOthersWithRemoteWithin2s) {
  constexpr int kVictim = 2;
  JobOptions opt;
  opt.np = 3;
  opt.tls = GetParam();
  const auto rs = run_job(opt, [&](Child& c) {
    if (c.rank == kVictim) {
      c.rep.o[kFailed].start = now_s();
      init_then_signal(c, SIGKILL, 5.0);
      return;
    }
    gw_comm_t comm = nullptr;
    const gw_config_t cfg = config(5.0);
    timed(c.rep, kFailed, [&] { return gw_comm_init_rank(&comm, c.np, c.ids[0], c.rank, &cfg); });
    if (comm != nullptr) gw_comm_destroy(comm);
  });
  log_outcomes(rs, kFailed, "killed after its rendezvous");
  expect_clean(rs, {kVictim});
  for (int r = 0; r < 2; ++r) {
    const Outcome& o = rs[static_cast<size_t>(r)].rep.o[kFailed];
    SCOPED_TRACE("survivor rank " + std::to_string(r));
    EXPECT_EQ(o.code, GW_ERR_REMOTE) << show(o);
    EXPECT_LT(o.secs(), 2.0) << show(o);
    EXPECT_TRUE(contains(o.msg, rank_word(kVictim))) << show(o);
  }
}

TEST_P(CheckedCalls, PeerKilledAtSomePointOfInitFailsTheOthersFastOrAtTheInitTimeout) {
  // The parent kills the victim 1, 6 or 30 ms after it called gw_comm_init_rank (a whole init
  // takes some 10-20 ms over TCP here, longer over shared memory). Three outcomes are right, depending on how far it
  // got:
  //  - it had not joined the rendezvous: the table never comes, the others time out (TIMEOUT
  //    at the init timeout);
  //  - it had joined: the others see it die inside their init (REMOTE naming it, < 2 s);
  //  - it had finished its init (it then waits in pause()): the others' init succeeds and
  //    their first all-reduce fails (REMOTE naming it, < 2 s).
  // Rank 0 hosts the rendezvous root: it stays 0.5 s after its init failed, so that the root
  // does not vanish before rank 2's own deadline (rank 2 would see REMOTE "the root closed
  // the connection" instead of its TIMEOUT).
  constexpr int kVictim = 1;
  constexpr double kTimeout = 2.0;
  constexpr int kAfter = 2;  // slot: the survivors' all-reduce after a successful init
  for (const int delay_us : {1000, 6000, 30000}) {
    double killed_at = 0;
    JobOptions opt;
    opt.np = 3;
    opt.tls = GetParam();
    opt.parent = [&](const std::vector<pid_t>& pids, Events& ev) {
      ev.wait('I', kVictim, 30);
      usleep(static_cast<useconds_t>(delay_us));
      killed_at = now_s();
      kill(pids[kVictim], SIGKILL);
    };
    const auto rs = run_job(opt, [&](Child& c) {
      if (c.rank == kVictim) c.event('I');
      gw_comm_t comm = nullptr;
      const gw_config_t cfg = config(kTimeout);
      timed(c.rep, kFailed, [&] { return gw_comm_init_rank(&comm, c.np, c.ids[0], c.rank, &cfg); });
      if (c.rank == kVictim) pause();
      if (comm != nullptr) {
        bool right = false;
        plain_allreduce(comm, c, kAfter, 1000, &right);
        gw_comm_destroy(comm);
      } else if (c.rank == 0) {
        usleep(500000);
      }
    });
    const std::string label = "killed " + std::to_string(delay_us / 1000) + " ms into init";
    log_outcomes(rs, kFailed, label);
    log_outcomes(rs, kAfter, label + ", then all-reduce");
    SCOPED_TRACE(label);
    expect_clean(rs, {kVictim});
    for (int r : {0, 2}) {
      const Outcome& init = rs[static_cast<size_t>(r)].rep.o[kFailed];
      const Outcome& o = init.code == GW_SUCCESS ? rs[static_cast<size_t>(r)].rep.o[kAfter] : init;
      SCOPED_TRACE("survivor rank " + std::to_string(r) + ": init " + show(init));
      if (o.code == GW_ERR_TIMEOUT && init.code != GW_SUCCESS) {
        EXPECT_GT(o.secs(), kTimeout - 0.2) << show(o);
        EXPECT_LT(o.secs(), kTimeout + 1.0) << show(o);
      } else {
        EXPECT_EQ(o.code, GW_ERR_REMOTE) << show(o);
        EXPECT_LT(o.end - killed_at, 2.0) << show(o);
        EXPECT_TRUE(contains(o.msg, rank_word(kVictim))) << show(o);
      }
    }
  }
}

// ---- frozen peers and ranks that never come ------------------------------------------------

// Rank 2 of 3 is stopped (SIGSTOP) between calls, with the communicator timeout at 3 s; the
// others make their next call; the parent kills rank 2 once they have reported. Two tests
// look at one run per transport (made by whichever runs first in this process).
constexpr int kFrozen = 2;
constexpr double kFrozenTimeout = 3.0;
struct FrozenRun {
  std::vector<RankResult> rs;
  double stopped_at = 0;
};
const FrozenRun& frozen_run(const std::string& tls) {
  static std::map<std::string, FrozenRun> runs;
  auto it = runs.find(tls);
  if (it != runs.end()) return it->second;
  FrozenRun run;
  JobOptions opt;
  opt.np = 3;
  opt.tls = tls;
  opt.parent = [&](const std::vector<pid_t>& pids, Events& ev) {
    if (ev.wait('S', kFrozen, 30)) {
      run.stopped_at = now_s();
      kill(pids[kFrozen], SIGSTOP);
    }
    ev.wait('D', 0, 30);
    ev.wait('D', 1, 30);
    kill(pids[kFrozen], SIGKILL);
  };
  run.rs = run_job(opt, [&](Child& c) {
    gw_comm_t comm = init_rank(c, kInit, kFrozenTimeout);
    if (comm == nullptr) return;
    call_until_failure(comm, c, 1000, 2);
    if (c.rank == kFrozen) {
      c.event('S');
      pause();  // stopped, then killed
    }
    call_until_failure(comm, c, 1000, 1);
    gw_comm_destroy(comm);
  });
  log_outcomes(run.rs, kFailed, "frozen between calls");
  return runs[tls] = std::move(run);
}

TEST_P(CheckedCalls, FrozenPeerTimesTheOthersOutAfterTheTimeout) {
  const FrozenRun& run = frozen_run(GetParam());
  expect_clean(run.rs, {kFrozen});
  ASSERT_GT(run.stopped_at, 0);
  for (int r = 0; r < 2; ++r) {
    const Outcome& o = run.rs[static_cast<size_t>(r)].rep.o[kFailed];
    SCOPED_TRACE("survivor rank " + std::to_string(r));
    EXPECT_EQ(run.rs[static_cast<size_t>(r)].rep.v[kCallsOk], 2);
    // A stopped process is alive: no pidfd fires, no connection resets. Each survivor's own
    // deadline passes (TIMEOUT), or it hears a peer's abort first, whose TIMEOUT code is kept
    // ("rank N stopped the job: timeout: ..."): TIMEOUT either way (observed: always).
    EXPECT_EQ(o.code, GW_ERR_TIMEOUT) << show(o);
    EXPECT_GT(o.secs(), kFrozenTimeout - 0.2) << show(o);
    EXPECT_LT(o.end - run.stopped_at, kFrozenTimeout + 1.0) << show(o);
  }
}

// Every survivor's message names the frozen rank 2, even the one whose own wait was on a
// healthy rank (rank 1 waits on rank 0, which waits on rank 2): a timeout lists the ranks whose
// call descriptor never came ("rank 2 has not started this call"), and a survivor that learns
// of the timeout from a peer gets that peer's message.
TEST_P(CheckedCalls, FrozenPeerIsNamedByEverySurvivor) {
  const FrozenRun& run = frozen_run(GetParam());
  for (int r = 0; r < 2; ++r) {
    const Outcome& o = run.rs[static_cast<size_t>(r)].rep.o[kFailed];
    SCOPED_TRACE("survivor rank " + std::to_string(r));
    ASSERT_EQ(o.code, GW_ERR_TIMEOUT) << show(o);
    EXPECT_TRUE(contains(o.msg, rank_word(kFrozen))) << "the frozen rank is not named: " << show(o);
  }
}

// Ranks 0 and 1 both end their init with GW_ERR_TIMEOUT, at the first deadline among them:
// a rank that started late (a loaded machine starts processes up to a second apart) is told
// by the other, so the lower bound counts from the earliest start; the upper from its own.
void expect_timed_out_together(const std::vector<RankResult>& rs, double timeout) {
  const double first_start = std::min(rs[0].rep.o[kFailed].start, rs[1].rep.o[kFailed].start);
  for (int r = 0; r < 2; ++r) {
    const Outcome& o = rs[static_cast<size_t>(r)].rep.o[kFailed];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.code, GW_ERR_TIMEOUT) << show(o);
    EXPECT_GT(o.end - first_start, timeout - 0.2) << show(o);
    EXPECT_LT(o.secs(), timeout + 1.0) << show(o);
  }
}

TEST_P(CheckedCalls, RankThatNeverCallsInitTimesTheOthersOut) {
  constexpr double kTimeout = 2.0;
  JobOptions opt;
  opt.np = 3;
  opt.tls = GetParam();
  const auto rs = run_job(opt, [&](Child& c) {
    if (c.rank == 2) return;  // never calls init
    gw_comm_t comm = nullptr;
    const gw_config_t cfg = config(kTimeout);
    timed(c.rep, kFailed, [&] { return gw_comm_init_rank(&comm, c.np, c.ids[0], c.rank, &cfg); });
    if (comm != nullptr) gw_comm_destroy(comm);
    // Rank 0 hosts the rendezvous root; leaving at once could close it before rank 1's own
    // deadline, which would then see REMOTE ("the root closed the connection") instead.
    if (c.rank == 0) usleep(500000);
  });
  log_outcomes(rs, kFailed, "rank 2 never calls init");
  expect_clean(rs);
  expect_timed_out_together(rs, kTimeout);
}

TEST_P(CheckedCalls, PeerStoppedRightAfterItsRendezvousTimesTheInitOut) {
  constexpr int kVictim = 2;
  constexpr double kTimeout = 2.0;
  JobOptions opt;
  opt.np = 3;
  opt.tls = GetParam();
  opt.parent = [&](const std::vector<pid_t>& pids, Events& ev) {
    ev.wait('D', 0, 30);
    ev.wait('D', 1, 30);
    kill(pids[kVictim], SIGKILL);
  };
  const auto rs = run_job(opt, [&](Child& c) {
    if (c.rank == kVictim) {
      init_then_signal(c, SIGSTOP, 30.0);
      pause();
      return;
    }
    gw_comm_t comm = nullptr;
    const gw_config_t cfg = config(kTimeout);
    timed(c.rep, kFailed, [&] { return gw_comm_init_rank(&comm, c.np, c.ids[0], c.rank, &cfg); });
    if (comm != nullptr) gw_comm_destroy(comm);
  });
  log_outcomes(rs, kFailed, "stopped after its rendezvous");
  expect_clean(rs, {kVictim});
  expect_timed_out_together(rs, kTimeout);
}

// ---- two threads -----------------------------------------------------------------------------

constexpr int kThreadCalls = 200;
constexpr size_t kThreadCount = 256;
// v[kCodes + code]: errors by code; kWrongFirst: a wrong sum on a call that started before the
// other thread's first call on this rank returned (it may not have entered the library yet, so
// nothing could have shown two threads); kAfterError: a call that started after this rank's
// first failed call had returned and still succeeded (the break is sticky: never).
enum { kOk = 0, kWrong = 1, kCodes = 2, kAfterError = 16, kWrongFirst = 17, kThreadCounters = 18 };
static_assert(kCodes + GW_NUM_RESULTS <= kAfterError && kThreadCounters <= 20,
              "the counters overlap or overflow Report::v");

// Thread t of a rank sends (t + 1) * 100 + rank: its sum over np ranks is its own.
float thread_sum(int t, int np) { return static_cast<float>(np * (t + 1) * 100 + np * (np - 1) / 2); }

// first_error and first_wrong record the first failed call and the first wrong sum.
// first_return[t]: when thread t's first call returned (0 until then); failed: when this rank's
// first failed call returned (0 until then). Null where the threads have communicators of their own.
void thread_calls(gw_comm_t comm, int t, int rank, int np, std::atomic<int>& go, long long* counts,
                  Outcome* first_error, Outcome* first_wrong, std::atomic<double>* first_return,
                  std::atomic<double>* failed) {
  std::vector<float> x(kThreadCount), y(kThreadCount);
  go.fetch_add(1);
  while (go.load() < 2) {}
  for (int k = 0; k < kThreadCalls; ++k) {
    std::fill(x.begin(), x.end(), static_cast<float>((t + 1) * 100 + rank));
    std::fill(y.begin(), y.end(), -1.0f);
    const double t0 = now_s();
    const bool after_error = failed != nullptr && failed->load() != 0.0;
    const gw_result_t r = gw_allreduce(comm, x.data(), y.data(), kThreadCount, GW_FLOAT32, GW_SUM, nullptr, nullptr);
    if (first_return != nullptr && k == 0) first_return[t].store(now_s());
    if (r == GW_SUCCESS) {
      bool right = true;
      for (float v : y) right = right && v == thread_sum(t, np);
      const double other = first_return != nullptr ? first_return[1 - t].load() : 0.0;
      const bool unseen = first_return != nullptr && (other == 0.0 || t0 < other);
      if (after_error) ++counts[kAfterError];
      ++counts[right ? kOk : (unseen ? kWrongFirst : kWrong)];
      if (!right && first_wrong->code < 0) {
        first_wrong->code = GW_SUCCESS;
        first_wrong->start = t0;
        first_wrong->end = now_s();
        std::snprintf(first_wrong->msg, sizeof first_wrong->msg,
                      "thread %d, its call %d of %d succeeded with %g (its sum is %g, the other thread's %g)", t, k,
                      kThreadCalls, static_cast<double>(y[0]), static_cast<double>(thread_sum(t, np)),
                      static_cast<double>(thread_sum(1 - t, np)));
      }
    } else {
      if (failed != nullptr) {
        double none = 0.0;
        failed->compare_exchange_strong(none, now_s());
      }
      ++counts[kCodes + static_cast<int>(r)];
      if (first_error->code < 0) {
        first_error->code = static_cast<int>(r);
        first_error->start = t0;
        first_error->end = now_s();
        std::snprintf(first_error->msg, sizeof first_error->msg, "%s", gw_get_last_error());
      }
    }
  }
}

// A limit of the design (docs/architecture.md, "Communicators"): a rank sees two threads only
// once the second has called. Until then (rank 0: thread 0 alone, rank 1: thread 1 alone,
// while the other thread waits for a core; seen in about 1 run in 30 on this oversubscribed
// machine) calls of the same shape have the same descriptor and pair up crosswise: nothing on
// the wire tells them apart. A crosswise pair can succeed on one rank and fail on the other
// (which saw its second thread mid-call, after its data had left; seen once in CI). So a wrong
// sum is tolerated only on calls that started before the other thread's first call on that rank
// returned (the earliest it is certain to have entered; counted, printed). Once seen, the break
// is sticky: no call started after a rank's first failure returned succeeds.
TEST_P(CheckedCalls, TwoThreadsInOneCommunicatorBreakItOnceSeen) {
  JobOptions opt;
  opt.np = 2;
  opt.tls = GetParam();
  const auto rs = run_job(opt, [&](Child& c) {
    gw_comm_t comm = init_rank(c, kInit, 20.0);
    if (comm == nullptr) return;
    std::atomic<int> go{0};
    std::atomic<double> first_return[2] = {{0.0}, {0.0}};
    std::atomic<double> failed{0.0};
    long long counts[2][kThreadCounters] = {};
    std::thread a(thread_calls, comm, 0, c.rank, c.np, std::ref(go), counts[0], &c.rep.o[1], &c.rep.o[4], first_return,
                  &failed);
    std::thread b(thread_calls, comm, 1, c.rank, c.np, std::ref(go), counts[1], &c.rep.o[2], &c.rep.o[5], first_return,
                  &failed);
    a.join();
    b.join();
    for (int i = 0; i < kThreadCounters; ++i) c.rep.v[i] = counts[0][i] + counts[1][i];
    gw_comm_destroy(comm);
  });
  expect_clean(rs);
  long long invalid_usage = 0;
  for (int r = 0; r < 2; ++r) {
    const Report& rep = rs[static_cast<size_t>(r)].rep;
    SCOPED_TRACE("rank " + std::to_string(r));
    if (rep.o[kInit].code != GW_SUCCESS) {
      // The peer finished its init first, saw two threads and broke the job: its last words
      // reached this rank while its init was still connecting.
      EXPECT_EQ(rep.o[kInit].code, GW_ERR_INVALID_USAGE) << show(rep.o[kInit]);
      EXPECT_TRUE(contains(rep.o[kInit].msg, "two threads")) << show(rep.o[kInit]);
      invalid_usage += 1;
      continue;
    }
    EXPECT_EQ(rep.v[kWrong], 0) << "a call succeeded with a wrong sum after both threads had been inside: "
                                << rep.o[4].msg << " " << rep.o[5].msg;
    EXPECT_EQ(rep.v[kAfterError], 0) << "a call started after a failure had returned, and succeeded";
    long long errors = 0;
    for (int code = 1; code < static_cast<int>(GW_NUM_RESULTS); ++code) errors += rep.v[kCodes + code];
    EXPECT_EQ(rep.v[kOk] + rep.v[kWrong] + rep.v[kWrongFirst] + errors, 2 * kThreadCalls);
    // Every failure is the refusal itself, or a peer's ("rank N stopped the job: two threads
    // ..."), whose INVALID_USAGE is kept.
    EXPECT_EQ(errors, rep.v[kCodes + GW_ERR_INVALID_USAGE])
        << "thread 0: " << show(rep.o[1]) << "; thread 1: " << show(rep.o[2]);
    invalid_usage += rep.v[kCodes + GW_ERR_INVALID_USAGE];
    for (int t = 1; t <= 2; ++t) {
      if (rep.o[t].code >= 0) {
        EXPECT_TRUE(contains(rep.o[t].msg, "two threads")) << show(rep.o[t]);
      }
    }
    std::printf(
        "rank %d: %lld right, %lld wrong (%lld before the other thread's first call), %lld INVALID_USAGE of %d calls\n",
        r, rep.v[kOk], rep.v[kWrong] + rep.v[kWrongFirst], rep.v[kWrongFirst], rep.v[kCodes + GW_ERR_INVALID_USAGE],
        2 * kThreadCalls);
  }
  EXPECT_GT(invalid_usage, 0) << "two threads made 200 calls each at once and no call was refused";
}

TEST_P(CheckedCalls, TwoThreadsEachWithItsOwnCommunicatorWork) {
  JobOptions opt;
  opt.np = 2;
  opt.tls = GetParam();
  opt.ids = 2;
  const auto rs = run_job(opt, [&](Child& c) {
    gw_comm_t comms[2] = {init_rank(c, kInit, 20.0, 0), init_rank(c, 3, 20.0, 1)};
    if (comms[0] == nullptr || comms[1] == nullptr) return;
    std::atomic<int> go{0};
    long long counts[2][kThreadCounters] = {};
    std::thread a(thread_calls, comms[0], 0, c.rank, c.np, std::ref(go), counts[0], &c.rep.o[1], &c.rep.o[4], nullptr,
                  nullptr);
    std::thread b(thread_calls, comms[1], 1, c.rank, c.np, std::ref(go), counts[1], &c.rep.o[2], &c.rep.o[5], nullptr,
                  nullptr);
    a.join();
    b.join();
    for (int i = 0; i < kThreadCounters; ++i) c.rep.v[i] = counts[0][i] + counts[1][i];
    gw_comm_destroy(comms[0]);
    gw_comm_destroy(comms[1]);
  });
  expect_clean(rs);
  for (int r = 0; r < 2; ++r) {
    const Report& rep = rs[static_cast<size_t>(r)].rep;
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(rep.o[kInit].code, GW_SUCCESS) << show(rep.o[kInit]);
    ASSERT_EQ(rep.o[3].code, GW_SUCCESS) << show(rep.o[3]);
    EXPECT_EQ(rep.v[kOk], 2 * kThreadCalls) << "thread 0: " << show(rep.o[1]) << "; thread 1: " << show(rep.o[2]);
    EXPECT_EQ(rep.v[kWrong], 0);
  }
}

// ---- a token-holding peer with a garbage address ---------------------------------------------

enum class Garbage { kRandom, kEmpty, kTruncated, kHeaderThenRandom };
const char* garbage_name(Garbage g) {
  switch (g) {
    case Garbage::kRandom: return "RandomBytes";
    case Garbage::kEmpty: return "EmptyBlob";
    case Garbage::kTruncated: return "TruncatedRealAddress";
    case Garbage::kHeaderThenRandom: return "RealHeaderRandomUcxAddress";
  }
  return "?";
}

class MalformedAddress : public ::testing::TestWithParam<std::tuple<std::string, Garbage>> {};

TEST_P(MalformedAddress, RealRanksFailTheirInitWithRemoteNamingTheRank) {
  constexpr int kRogue = 2;
  constexpr double kTimeout = 5.0;
  const Garbage g = std::get<1>(GetParam());
  JobOptions opt;
  opt.np = 3;
  opt.tls = std::get<0>(GetParam());
  opt.parent = [&](const std::vector<pid_t>& pids, Events& ev) {
    ev.wait('D', 0, 30);
    ev.wait('D', 1, 30);
    kill(pids[kRogue], SIGKILL);  // it waits, alive, until the real ranks have answered
  };
  const auto rs = run_job(opt, [&](Child& c) {
    if (c.rank != kRogue) {
      gw_comm_t comm = nullptr;
      const gw_config_t cfg = config(kTimeout);
      timed(c.rep, kFailed, [&] { return gw_comm_init_rank(&comm, c.np, c.ids[0], c.rank, &cfg); });
      if (comm != nullptr) gw_comm_destroy(comm);
      return;
    }
    // The rogue holds the id (and so the token) and speaks the real rendezvous protocol.
    std::mt19937 rng(static_cast<unsigned>(static_cast<int>(g) * 7919 + 17));
    auto random_bytes = [&](size_t n) {
      std::string s(n, '\0');
      for (char& ch : s) ch = static_cast<char>(rng());
      return s;
    };
    std::string blob;
    std::unique_ptr<transport::UcxTransport> tp;
    constexpr size_t kHeader = 45;  // "GWUA", version, process identity (ucx_transport.cpp)
    switch (g) {
      case Garbage::kRandom: blob = random_bytes(300); break;
      case Garbage::kEmpty: break;
      case Garbage::kTruncated:
      case Garbage::kHeaderThenRandom: {
        auto made = transport::UcxTransport::create(c.rank, c.np);
        if (!made.is_ok()) {
          std::fprintf(stderr, "rogue: %s\n", made.status().to_string().c_str());
          _exit(90);
        }
        tp = std::move(made).value();
        const std::string real = tp->local_address();
        c.rep.v[1] = static_cast<long long>(real.size());
        if (g == Garbage::kTruncated) {
          blob = real.substr(0, kHeader + (real.size() - kHeader) / 2);
        } else {
          blob = real.substr(0, kHeader) + random_bytes(real.size() - kHeader);
        }
        break;
      }
    }
    bootstrap::UniqueId uid;
    std::memcpy(uid.bytes, c.ids[0].internal, sizeof uid.bytes);
    auto table = bootstrap::rendezvous(uid, c.rank, c.np, blob, std::chrono::milliseconds(10000));
    c.rep.v[0] = table.is_ok() ? 1 : 0;
    c.report();
    pause();
  });
  log_outcomes(rs, kFailed, garbage_name(g));
  expect_clean(rs, {kRogue});
  // The rogue joined with the right token: the real ranks hold its blob from the table (their
  // messages below say so). Its own table may not arrive: rank 0's process, which hosts the
  // root, can exit first once its init has failed.
  for (int r = 0; r < 2; ++r) {
    const Outcome& o = rs[static_cast<size_t>(r)].rep.o[kFailed];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.code, GW_ERR_REMOTE) << show(o);
    EXPECT_LT(o.secs(), 2.0) << show(o);
    EXPECT_TRUE(contains(o.msg, "rank 2 sent a malformed address")) << show(o);
  }
}

INSTANTIATE_TEST_SUITE_P(Blobs, MalformedAddress,
                         ::testing::Combine(::testing::Values("tcp", "sm"),
                                            ::testing::Values(Garbage::kRandom, Garbage::kEmpty, Garbage::kTruncated,
                                                              Garbage::kHeaderThenRandom)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, Garbage>>& i) {
                           return std::get<0>(i.param) + "_" + garbage_name(std::get<1>(i.param));
                         });

INSTANTIATE_TEST_SUITE_P(Transports, CheckedCalls, ::testing::Values("tcp", "sm"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace gw
