// What happens when things go wrong between real processes: a peer dies mid-collective, a
// stranger without the token knocks, a rank never arrives. Nothing may hang.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Forks the children (rank 0 creates the id) and runs fn(rank, id) in each.
std::vector<int> run_children(const std::vector<int>& ranks,
                              const std::function<int(int, const bootstrap::UniqueId&)>& fn,
                              seconds limit = seconds(60)) {
  return test::fork_with_unique_id(ranks, seconds(30), fn, limit);
}

Result<std::unique_ptr<Communicator>> join(const bootstrap::UniqueId& id, int rank, int n, milliseconds timeout) {
  CommConfig cfg;
  cfg.timeout = timeout;
  return coll::init_communicator(
      rank, n, [&](const std::string& blob) { return bootstrap::rendezvous(id, rank, n, blob, timeout); }, cfg);
}

// Exit codes the children use.
constexpr int kOk = 0, kInitFailed = 10, kUnexpectedSuccess = 11, kWrongCode = 12, kTooSlow = 13, kNotBroken = 14;

TEST(Failures, KilledPeerFailsTheOthersWithinTheTimeout) {
  const auto codes = run_children({0, 1, 2}, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join(id, rank, 3, milliseconds(4000));
    if (!comm.is_ok()) return kInitFailed;
    std::vector<float> x(1 << 20, 1.0f);
    if (!(*comm)->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok()) {
      return kInitFailed;
    }
    if (rank == 2) raise(SIGKILL);  // dies before the second collective
    const auto start = std::chrono::steady_clock::now();
    const Status s =
        (*comm)->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
    const auto took = std::chrono::steady_clock::now() - start;
    if (s.is_ok()) return kUnexpectedSuccess;
    if (s.code() != Code::kRemote && s.code() != Code::kTimeout && s.code() != Code::kAborted) return kWrongCode;
    if (took > seconds(10)) return kTooSlow;
    if ((*comm)->error().is_ok()) return kNotBroken;
    // A broken communicator fails at once from then on.
    if ((*comm)->barrier().is_ok()) return kUnexpectedSuccess;
    return kOk;
  });
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
}

TEST(Failures, StrangerWithoutTheTokenCannotJoinOrDisturb) {
  const auto codes = run_children({-1, 0, 1}, [&](int rank, const bootstrap::UniqueId& id) {
    if (rank < 0) {
      // The port is at bytes 6..7 of the id, little-endian (bootstrap.hpp).
      const uint16_t port = static_cast<uint16_t>(id.bytes[6] | (id.bytes[7] << 8));
      // The stranger: a connection that says hello with a forged token, and one that is silent.
      for (int attempt = 0; attempt < 2; ++attempt) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && attempt == 0) {
          uint8_t junk[256];
          for (size_t i = 0; i < sizeof junk; ++i) junk[i] = static_cast<uint8_t>(i * 13);
          ssize_t w = write(fd, junk, sizeof junk);
          (void)w;
        }
        usleep(200000);
        close(fd);
      }
      return kOk;
    }
    usleep(100000);  // let the stranger knock first
    auto comm = join(id, rank, 2, milliseconds(10000));
    if (!comm.is_ok()) return kInitFailed;
    std::vector<float> x(1000, 2.0f);
    if (!(*comm)->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok()) {
      return kInitFailed;
    }
    return x[999] == 4.0f ? kOk : kWrongCode;
  });
  for (int c : codes) EXPECT_EQ(c, kOk);
}

TEST(Failures, RankThatNeverArrivesTimesTheInitOut) {
  const auto codes = run_children({0, 1}, [&](int rank, const bootstrap::UniqueId& id) {
    const auto start = std::chrono::steady_clock::now();
    auto comm = join(id, rank, 3, milliseconds(1500));  // rank 2 never comes
    const auto took = std::chrono::steady_clock::now() - start;
    if (comm.is_ok()) return kUnexpectedSuccess;
    if (comm.status().code() != Code::kTimeout && comm.status().code() != Code::kRemote) return kWrongCode;
    return took < seconds(8) ? kOk : kTooSlow;
  });
  for (int c : codes) EXPECT_EQ(c, kOk);
}

TEST(Failures, AbortFromAnotherThreadEndsAWaitOnAPeer) {
  const auto codes = run_children({0, 1}, [&](int rank, const bootstrap::UniqueId& id) {
    auto comm = join(id, rank, 2, milliseconds(30000));
    if (!comm.is_ok()) return kInitFailed;
    if (rank == 1) {
      // Never joins the collective. Idle, it still learns of rank 0's abort from its last
      // words (the idle progress thread drives the transport): the asynchronous error, at once.
      const auto start = std::chrono::steady_clock::now();
      Status heard;
      while (heard.is_ok() && std::chrono::steady_clock::now() - start < seconds(5)) {
        heard = (*comm)->error();
        std::this_thread::sleep_for(milliseconds(10));
      }
      if (heard.is_ok()) return kNotBroken;
      if (heard.code() != Code::kRemote || heard.message().find("stopped the job: aborted") == std::string::npos) {
        return kWrongCode;
      }
      return std::chrono::steady_clock::now() - start < seconds(2) ? kOk : kTooSlow;
    }
    Communicator* c = comm->get();
    std::thread aborter([c] {
      std::this_thread::sleep_for(milliseconds(300));
      c->abort("test");
    });
    std::vector<float> x(1000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    const Status s = c->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr);
    aborter.join();
    if (s.code() != Code::kAborted) return kWrongCode;
    return std::chrono::steady_clock::now() - start < seconds(5) ? kOk : kTooSlow;
  });
  for (int c : codes) EXPECT_EQ(c, kOk);
}

TEST(Failures, InitCompletesWhileRanksAreBusyElsewhere) {
  // Ranks that return from init and then block in something else (a torch barrier, say)
  // must not leave a peer's init waiting for their answers. Here every rank, once its init
  // has returned, waits outside gradwire (a barrier of files) for every other rank's init.
  char dir[] = "/tmp/gw-init-barrier-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string where = dir;
  const auto codes = run_children({0, 1, 2, 3}, [&](int rank, const bootstrap::UniqueId& id) {
    setenv("UCX_TLS", "tcp,self", 1);  // where UCX's connection wire-up needs the peer's answers
    auto comm = join(id, rank, 4, milliseconds(20000));
    if (!comm.is_ok()) return kInitFailed;
    std::fclose(std::fopen((where + "/" + std::to_string(rank)).c_str(), "w"));
    const auto until = std::chrono::steady_clock::now() + seconds(10);
    for (int q = 0; q < 4; ++q) {
      while (access((where + "/" + std::to_string(q)).c_str(), F_OK) != 0) {
        if (std::chrono::steady_clock::now() > until) return kTooSlow;
        usleep(10000);
      }
    }
    std::vector<float> x(10, 1.0f);
    if (!(*comm)->allreduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, nullptr, nullptr).is_ok()) {
      return kInitFailed;
    }
    return x[9] == 4.0f ? kOk : kWrongCode;
  });
  for (int c : codes) EXPECT_EQ(c, kOk);
  for (int q = 0; q < 4; ++q) unlink((where + "/" + std::to_string(q)).c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace gw
