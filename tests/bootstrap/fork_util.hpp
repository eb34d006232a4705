// Helpers for the bootstrap tests: forked ranks with a watchdog, raw loopback sockets, and the
// blobs the ranks contribute.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace gw::bootstrap::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Exit code of a child the watchdog had to kill.
constexpr int kKilled = 200;

// Threads of this process.
inline int thread_count() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// Forks only from a single-threaded process: a child forked while another thread holds a lock
// (the sanitizers' allocator, say) can deadlock on it. Root threads of earlier tests have
// ended by now or end within moments.
inline void wait_single_threaded() {
  const auto until = Clock::now() + seconds(10);
  while (thread_count() > 1 && Clock::now() < until) std::this_thread::sleep_for(milliseconds(2));
  if (thread_count() > 1) std::fprintf(stderr, "warning: forking with %d threads\n", thread_count());
}

// Forks a child that runs fn() and _exits with its result; alarm() kills it if it hangs.
inline pid_t spawn(const std::function<int()>& fn, unsigned alarm_s = 20) {
  wait_single_threaded();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(alarm_s);
    int code = 99;
    try {
      code = fn();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  return pid;
}

// Waits for a child until the deadline, then kills it. Returns its exit code, 128 + signal,
// or kKilled.
inline int wait_child(pid_t pid, Clock::time_point deadline) {
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return kKilled;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
}

// Runs fn(i) for i in [0, n) in forked children; returns their exit codes.
inline std::vector<int> run_forked(int n, const std::function<int(int)>& fn, seconds limit = seconds(20)) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i)
    pids.push_back(spawn([&fn, i] { return fn(i); }, static_cast<unsigned>(limit.count() + 5)));
  const auto deadline = Clock::now() + limit;
  std::vector<int> codes;
  for (pid_t p : pids) codes.push_back(wait_child(p, deadline));
  return codes;
}

// A blob for `rank`: empty, 64 KiB, or in between, with every byte value represented.
inline std::string blob_for(int rank, int salt = 0) {
  size_t len = 0;
  switch (rank % 4) {
    case 0: len = 0; break;
    case 1: len = 64 * 1024; break;
    case 2: len = 1 + static_cast<size_t>(rank) * 37; break;
    default: len = 4096 + static_cast<size_t>(rank); break;
  }
  std::string b(len, '\0');
  for (size_t i = 0; i < len; ++i) b[i] = static_cast<char>((rank * 131 + salt * 17 + static_cast<int>(i) * 7) & 0xff);
  return b;
}

// A blocking TCP connection to 127.0.0.1:port (or -1).
inline int raw_connect(uint16_t port, const char* host = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host, &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool raw_send(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t w = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 5000) <= 0) return false;
      continue;
    }
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// Reads until the peer closes (true, with what it sent) or the wait runs out (false).
inline bool read_to_eof(int fd, std::string* got, milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0) return true;
    if (r < 0) return errno == ECONNRESET;
    if (got != nullptr) got->append(buf, static_cast<size_t>(r));
  }
}

// "127.0.0.1:port" of this end of a connection.
inline std::string local_name(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}

// A port that was free on 127.0.0.1 a moment ago.
inline uint16_t free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace gw::bootstrap::testing
