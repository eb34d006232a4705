#include "collectives/algorithms/hierarchical/node_shm.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/common/step_ranges.hpp"
#include "common/log.hpp"

namespace gw::coll {
namespace {

constexpr size_t kRound = size_t{2} << 20;

struct Announce {
  uint8_t ok;
  char name[63];
};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Creates and maps a segment of bytes (posix_fallocate reserves the pages: a full /dev/shm is
// an error here, not a SIGBUS later).
uint8_t* create(const char* name, size_t bytes, std::string* why) {
  const int fd = ::shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return *why = errno_text("shm_open"), nullptr;
  void* p = MAP_FAILED;
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    errno = rc;
    *why = errno_text("posix_fallocate");
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) *why = errno_text("mmap");
  }
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

uint8_t* open_existing(const char* name, size_t bytes, std::string* why) {
  const int fd = ::shm_open(name, O_RDWR, 0600);
  if (fd < 0) return *why = errno_text("shm_open"), nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    *why = "the segment is smaller than announced";
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) *why = errno_text("mmap");
  }
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

Context at_step(const Context& c, uint32_t step_base) {
  Context x = c;
  x.step_base = step_base;
  return x;
}

}  // namespace

NodeShm::~NodeShm() { unmap(); }

void NodeShm::unmap() {
  if (base_ != nullptr) ::munmap(base_, cap_);
  base_ = nullptr;
  cap_ = 0;
}

Result<uint8_t*> NodeShm::map(Context& in_node, size_t bytes) {
  if (bytes <= cap_) return base_;
  if (disabled_) return static_cast<uint8_t*>(nullptr);
  unmap();
  const size_t want = (bytes + kRound - 1) / kRound * kRound;
  Announce a{};
  std::string why;
  uint8_t* mine = nullptr;
  if (in_node.rank == 0) {
    std::random_device rd;
    std::snprintf(a.name, sizeof a.name, "/gw-%d-%u-%08x", static_cast<int>(::getpid()), generation_++, rd());
    mine = create(a.name, want, &why);
    a.ok = mine != nullptr ? 1 : 0;
  }
  Context announce = at_step(in_node, kNodeShmAnnounceStep);
  GW_RETURN_IF_ERROR(broadcast(announce, &a, sizeof a, 0));
  a.name[sizeof a.name - 1] = '\0';
  if (in_node.rank != 0 && a.ok != 0) mine = open_existing(a.name, want, &why);
  // Every rank's verdict to local rank 0, its decision to every rank; then the name goes.
  uint8_t ok = mine != nullptr ? 1 : 0;
  Context flags = at_step(in_node, kNodeShmFlagStep);
  if (in_node.rank == 0) {
    std::vector<uint8_t> got(static_cast<size_t>(in_node.size), 1);
    transport::Op* recvs = in_node.scratch.recvs.get(static_cast<size_t>(in_node.size));
    for (int r = 1; r < in_node.size; ++r) {
      GW_RETURN_IF_ERROR(in_node.tp.irecv(r, flags.tag(0, 0), &got[static_cast<size_t>(r)], 1, recvs[r]));
    }
    for (int r = 1; r < in_node.size; ++r) GW_RETURN_IF_ERROR(flags.wait(recvs[r]));
    for (int r = 1; r < in_node.size; ++r) ok = static_cast<uint8_t>(ok & got[static_cast<size_t>(r)]);
    if (a.ok != 0) ::shm_unlink(a.name);
  } else {
    transport::Op* sends = in_node.scratch.sends.get(1);
    GW_RETURN_IF_ERROR(in_node.tp.isend(0, flags.tag(0, 0), &ok, 1, sends[0]));
    GW_RETURN_IF_ERROR(flags.wait(sends[0]));
  }
  Context decision = at_step(in_node, kNodeShmDecisionStep);
  GW_RETURN_IF_ERROR(broadcast(decision, &ok, 1, 0));
  if (ok == 0) {
    if (mine != nullptr) ::munmap(mine, want);
    disabled_ = true;
    GW_WARN(kColl,
            "no shared memory among this node's ranks (%s): the hierarchical all-reduce's legs inside the node go "
            "through the transport",
            why.empty() ? "another local rank could not map it" : why.c_str());
    return static_cast<uint8_t*>(nullptr);
  }
  base_ = mine;
  cap_ = want;
  return base_;
}

}  // namespace gw::coll
