#include "transport/process_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.hpp"
#include "transport/bootstrap/frames.hpp"

namespace gw::transport {
namespace {

using bootstrap::frames::get_u64;
using bootstrap::frames::put_u64;

constexpr int kPollMs = 100;  // /proc look-ups for peers without a pidfd

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Start time of pid in clock ticks since boot, or 0 when the process does not exist.
uint64_t start_ticks_of(uint32_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return 0;
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // Fields after the name start at 3 (state); starttime is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  // A zombie (state Z) has exited: it is dead for us.
  const size_t state_at = line.find_first_not_of(' ', close + 1);
  if (state_at != std::string::npos && (line[state_at] == 'Z' || line[state_at] == 'X')) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

class ProcessWatchImpl final : public ProcessWatch {
 public:
  struct Peer {
    int rank;
    ProcessIdentity id;
    int fd;  // pidfd, or -1: look at /proc
    bool reported = false;
  };

  ProcessWatchImpl(std::vector<Peer> peers, OnDeath on_death)
      : peers_(std::move(peers)), on_death_(std::move(on_death)) {
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    thread_ = std::thread([this] { loop(); });
  }
  ~ProcessWatchImpl() override {
    const uint64_t one = 1;
    if (stop_fd_ >= 0 && write(stop_fd_, &one, sizeof one) < 0) { /* the thread checks stop_ too */
    }
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (Peer& p : peers_) {
      if (p.fd >= 0) close(p.fd);
    }
    if (stop_fd_ >= 0) close(stop_fd_);
  }
  size_t watched() const override { return peers_.size(); }

 private:
  void report(Peer& p, const char* how) {
    if (p.reported) return;
    p.reported = true;
    char why[160];
    std::snprintf(why, sizeof why, "rank %d (pid %u on this host) %s", p.rank, p.id.pid, how);
    GW_INFO(kTransport, "watch: %s", why);
    on_death_(p.rank, why);
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<Peer*> owners;
    bool any_polled = false;
    for (Peer& p : peers_) {
      if (p.fd >= 0) {
        fds.push_back({p.fd, POLLIN, 0});
        owners.push_back(&p);
      } else {
        any_polled = true;
      }
    }
    if (stop_fd_ >= 0) fds.push_back({stop_fd_, POLLIN, 0});
    while (!stop_) {
      for (pollfd& f : fds) f.revents = 0;
      const int n = poll(fds.data(), fds.size(), any_polled || stop_fd_ < 0 ? kPollMs : -1);
      if (stop_) return;
      if (n < 0 && errno != EINTR) return;
      for (size_t i = 0; i < owners.size(); ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          report(*owners[i], "exited");
          fds[i].fd = -1;  // poll ignores negative fds
        }
      }
      if (any_polled) {
        for (Peer& p : peers_) {
          if (p.fd < 0 && !p.reported && start_ticks_of(p.id.pid) != p.id.start_ticks) report(p, "exited");
        }
      }
    }
  }

  std::vector<Peer> peers_;
  OnDeath on_death_;
  int stop_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

ProcessIdentity ProcessIdentity::self() {
  ProcessIdentity id;
  id.pid = static_cast<uint32_t>(getpid());
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string text;
  if (boot && std::getline(boot, text)) {
    size_t b = 0;
    for (size_t i = 0; i + 1 < text.size() && b < 16;) {
      const int hi = hex_digit(text[i]);
      if (hi < 0) {
        ++i;
        continue;
      }
      const int lo = hex_digit(text[i + 1]);
      if (lo < 0) break;
      id.boot_id[b++] = static_cast<uint8_t>(hi << 4 | lo);
      i += 2;
    }
  }
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) == 0) id.pid_ns = static_cast<uint64_t>(st.st_ino);
  id.start_ticks = start_ticks_of(id.pid);
  return id;
}

void ProcessIdentity::encode(uint8_t out[kBytes]) const {
  std::memcpy(out, boot_id, 16);
  put_u64(out + 16, pid_ns);
  put_u64(out + 24, start_ticks);
  put_u64(out + 32, pid);
}

ProcessIdentity ProcessIdentity::decode(const uint8_t in[kBytes]) {
  ProcessIdentity id;
  std::memcpy(id.boot_id, in, 16);
  id.pid_ns = get_u64(in + 16);
  id.start_ticks = get_u64(in + 24);
  const uint64_t pid = get_u64(in + 32);
  id.pid = pid <= 0x7fffffff ? static_cast<uint32_t>(pid) : 0;
  return id;
}

bool ProcessIdentity::alive() const { return start_ticks != 0 && start_ticks_of(pid) == start_ticks; }

bool ProcessIdentity::same_host_as(const ProcessIdentity& p) const {
  static const uint8_t kZero[16] = {};
  return p.pid > 0 && p.start_ticks > 0 && pid_ns != 0 && p.pid_ns == pid_ns && std::memcmp(boot_id, kZero, 16) != 0 &&
         std::memcmp(p.boot_id, boot_id, 16) == 0;
}

std::unique_ptr<ProcessWatch> ProcessWatch::start(const std::vector<ProcessIdentity>& peers, int self,
                                                  OnDeath on_death) {
  const ProcessIdentity me = ProcessIdentity::self();
  std::vector<ProcessWatchImpl::Peer> watched;
  std::vector<std::pair<int, uint32_t>> gone;
  for (size_t r = 0; r < peers.size(); ++r) {
    const int rank = static_cast<int>(r);
    if (rank == self || !me.same_host_as(peers[r]) || peers[r].pid == me.pid) continue;
    int fd = -1;
#ifdef SYS_pidfd_open
    fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(peers[r].pid), 0));
#endif
    // Checked after the pidfd is open, so the pidfd cannot belong to a newer process that
    // reused the pid.
    if (start_ticks_of(peers[r].pid) != peers[r].start_ticks) {
      if (fd >= 0) close(fd);
      gone.emplace_back(rank, peers[r].pid);
      continue;
    }
    watched.push_back({rank, peers[r], fd < 0 ? -1 : fd});
  }
  for (const auto& [rank, pid] : gone) {
    char why[128];
    std::snprintf(why, sizeof why, "rank %d (pid %u on this host) is not running", rank, pid);
    on_death(rank, why);
  }
  if (watched.empty()) return nullptr;
  return std::make_unique<ProcessWatchImpl>(std::move(watched), std::move(on_death));
}

}  // namespace gw::transport
