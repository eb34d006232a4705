// Finds out, within milliseconds, that a peer process on this host has died, whatever
// transport carries its messages. UCX finds a dead peer over TCP by the connection reset, but
// over shared memory it has no such signal (its keep-alive did not fire in our tests with UCX
// 1.13): a survivor would wait for the whole timeout. So every rank states who it is (boot,
// pid namespace, pid, start time); a rank on the same host watches that process through a
// pidfd (or, without pidfd_open, by looking at /proc every 100 ms) and reports its exit.
// A rank on another host is left to the transport (connection reset, keep-alive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradwire/status.hpp"

namespace gw::transport {

struct ProcessIdentity {
  uint8_t boot_id[16] = {};  // /proc/sys/kernel/random/boot_id
  uint64_t pid_ns = 0;       // inode of /proc/self/ns/pid
  uint64_t start_ticks = 0;  // field 22 of /proc/<pid>/stat: tells a reused pid apart
  uint32_t pid = 0;

  static constexpr size_t kBytes = 40;
  static ProcessIdentity self();
  void encode(uint8_t out[kBytes]) const;
  static ProcessIdentity decode(const uint8_t in[kBytes]);
  // Whether this process can watch p (same boot and pid namespace, a real pid).
  bool same_host_as(const ProcessIdentity& p) const;
  // Whether the process still runs (meaningful only on its own host).
  bool alive() const;
};

class ProcessWatch {
 public:
  // Called once per dead peer, from the watch's own thread.
  using OnDeath = std::function<void(int rank, const std::string& why)>;

  // Watches every rank in peers that runs on this host (others are skipped); peers[self] is
  // skipped too. A watched process that is already gone is reported at once.
  static std::unique_ptr<ProcessWatch> start(const std::vector<ProcessIdentity>& peers, int self, OnDeath on_death);
  virtual ~ProcessWatch() = default;
  // How many peers are watched.
  virtual size_t watched() const = 0;
};

}  // namespace gw::transport
