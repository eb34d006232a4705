// Runs a body as n forked ranks, each with its own UcxTransport, for the UCX tests and the
// ping-pong tool. The parent never touches UCX: it passes worker addresses around through
// pipes made before the fork, then reaps the children, killing any that outlive the limit
// (and each child also arms alarm(), so a hang ends as a failure, never as a stuck test).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/bootstrap/fd_io.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace gw::test {

// Exit codes of the harness itself (bodies use 0 for success and small numbers for failures).
constexpr int kExitCreateFailed = 90;
constexpr int kExitExchangeFailed = 91;
constexpr int kExitConnectFailed = 92;
constexpr int kHung = -1;  // the parent killed the child at the limit

// A body gets its transport as a unique_ptr so that it can destroy it early (or never, by
// dying). What it returns becomes the child's exit code.
using RankBody = std::function<int(std::unique_ptr<transport::UcxTransport>& t, int rank, int n)>;

namespace detail {

using bootstrap::read_all;
using bootstrap::write_all;

inline bool write_blob(int fd, const std::string& s) {
  const uint32_t len = static_cast<uint32_t>(s.size());
  return write_all(fd, &len, sizeof(len)) && write_all(fd, s.data(), s.size());
}

inline bool read_blob(int fd, std::string& s) {
  uint32_t len = 0;
  if (!read_all(fd, &len, sizeof(len)) || len > (1u << 20)) return false;
  s.resize(len);
  return read_all(fd, s.data(), len);
}

}  // namespace detail

// Forks n ranks with UCX_TLS=tls (unset when tls is empty) and returns each child's exit
// code, 128+signal when a signal ended it, or kHung when the parent had to kill it.
inline std::vector<int> run_ranks(int n, const std::string& tls, const RankBody& body,
                                  std::chrono::seconds limit = std::chrono::seconds(40)) {
  std::fflush(stdout);
  std::fflush(stderr);
  signal(SIGPIPE, SIG_IGN);  // a child that died early must not take the parent with it
  std::vector<int> up(static_cast<size_t>(2 * n)), down(static_cast<size_t>(2 * n));
  for (int r = 0; r < n; ++r) {
    if (pipe(&up[static_cast<size_t>(2 * r)]) != 0 || pipe(&down[static_cast<size_t>(2 * r)]) != 0) {
      std::perror("pipe");
      std::abort();
    }
  }
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      std::abort();
    }
    if (pid == 0) {
      alarm(static_cast<unsigned>(limit.count()));
      const int to_parent = up[static_cast<size_t>(2 * r + 1)];
      const int from_parent = down[static_cast<size_t>(2 * r)];
      for (int i = 0; i < 2 * n; ++i) {
        if (up[static_cast<size_t>(i)] != to_parent) close(up[static_cast<size_t>(i)]);
        if (down[static_cast<size_t>(i)] != from_parent) close(down[static_cast<size_t>(i)]);
      }
      if (tls.empty()) {
        unsetenv("UCX_TLS");
      } else {
        setenv("UCX_TLS", tls.c_str(), 1);
      }
      auto created = transport::UcxTransport::create(r, n);
      if (!created.is_ok()) {
        std::fprintf(stderr, "rank %d: create: %s\n", r, created.status().to_string().c_str());
        _exit(kExitCreateFailed);
      }
      std::unique_ptr<transport::UcxTransport> t = std::move(created).value();
      std::vector<std::string> addresses(static_cast<size_t>(n));
      bool ok = detail::write_blob(to_parent, t->local_address());
      for (int i = 0; ok && i < n; ++i) ok = detail::read_blob(from_parent, addresses[static_cast<size_t>(i)]);
      if (!ok) _exit(kExitExchangeFailed);
      const Status s = t->connect(addresses, transport::Clock::now() + std::chrono::seconds(60));
      if (!s.is_ok()) {
        std::fprintf(stderr, "rank %d: connect: %s\n", r, s.to_string().c_str());
        _exit(kExitConnectFailed);
      }
      const int rc = body(t, r, n);
      t.reset();
      _exit(rc);
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  for (int r = 0; r < n; ++r) {
    close(up[static_cast<size_t>(2 * r + 1)]);
    close(down[static_cast<size_t>(2 * r)]);
  }
  // Address exchange: gather all, then give every rank the whole table.
  std::vector<std::string> addresses(static_cast<size_t>(n));
  bool ok = true;
  for (int r = 0; r < n && ok; ++r)
    ok = detail::read_blob(up[static_cast<size_t>(2 * r)], addresses[static_cast<size_t>(r)]);
  for (int r = 0; r < n && ok; ++r) {
    for (int i = 0; i < n && ok; ++i)
      ok = detail::write_blob(down[static_cast<size_t>(2 * r + 1)], addresses[static_cast<size_t>(i)]);
  }
  for (int r = 0; r < n; ++r) {
    close(up[static_cast<size_t>(2 * r)]);
    close(down[static_cast<size_t>(2 * r + 1)]);
  }
  // Reap, with a deadline a little past the children's own alarm.
  std::vector<int> codes(static_cast<size_t>(n), kHung);
  const auto until = std::chrono::steady_clock::now() + limit + std::chrono::seconds(5);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      pid_t& pid = pids[static_cast<size_t>(r)];
      if (pid < 0) continue;
      int status = 0;
      const pid_t got = waitpid(pid, &status, WNOHANG);
      if (got == pid) {
        codes[static_cast<size_t>(r)] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid = -1;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > until) {
      for (pid_t pid : pids) {
        if (pid > 0) {
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

}  // namespace gw::test
