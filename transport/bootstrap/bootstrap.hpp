// Bootstrap: how the ranks of a job find each other before any transport exists.
//
// NCCL-style: create_unique_id() on one process starts a rendezvous root (a background
// thread listening on a TCP port) and returns an id that carries the root's address, port and
// a random 128-bit token. The id travels to every rank by any channel (MPI, a file, torch's
// store); each rank calls rendezvous(), which connects to the root, proves it holds the
// token (and has the root prove it too; the token itself never crosses the wire), and hands
// in a blob (its transport address). When all ranks have arrived the root
// sends everyone the whole table of blobs: an all-gather in O(n) messages through the root.
//
// A connection that cannot prove it holds the token is closed and logged and cannot disturb
// the job. Every step has a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gradwire/status.hpp"

namespace gw::bootstrap {

constexpr size_t kUniqueIdBytes = 128;

// Layout (little-endian): magic "GWID" @0, version u8 @4 (=1), address family u8 @5 (4 or
// 6), port u16 @6, address 16 bytes @8 (IPv4 in the first 4), token 16 bytes @24, the rest zero.
struct UniqueId {
  uint8_t bytes[kUniqueIdBytes];
};

struct RootOptions {
  // Address the root listens on and advertises. Empty: GW_SOCKET_ADDR, else the address of
  // GW_SOCKET_IFNAME, else the first non-loopback IPv4 interface, else 127.0.0.1.
  std::string address;
  uint16_t port = 0;  // 0: any free port
  // The root gives up (and logs why) if the job has not fully arrived by then.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Starts a rendezvous root in this process (serving one job) and returns its id.
Result<UniqueId> create_unique_id(const RootOptions& options = RootOptions());

// Parses and checks an id that came from elsewhere (magic, version, family).
Status validate_unique_id(const UniqueId& id);

// Joins the job described by id as `rank` of `nranks`, contributing `blob` (at most 64 KiB);
// returns every rank's blob, indexed by rank. Fails with kTimeout if the job is not complete
// by the deadline, kInvalidArgument for a bad rank or size, kRemote if the root rejects us
// (another process already joined with this rank, or nranks disagree).
Result<std::vector<std::string>> rendezvous(const UniqueId& id, int rank, int nranks, const std::string& blob,
                                            std::chrono::milliseconds timeout);

// What a launcher told this process.
struct LaunchEnv {
  int rank = -1;
  int size = -1;
  int local_rank = -1;
  std::string launcher;  // "gradwire", "torchrun", "openmpi", "slurm", "pmi"
  std::string root_address;
  uint16_t root_port = 0;
  uint8_t token[16] = {};
};

// Reads rank and size from GW_RANK/GW_SIZE, else torchrun (RANK, WORLD_SIZE), OpenMPI
// (OMPI_COMM_WORLD_RANK/SIZE), Slurm (SLURM_PROCID/SLURM_NTASKS), PMI (PMI_RANK/PMI_SIZE).
// The root is GW_ROOT (host:port), else MASTER_ADDR with GW_PORT or MASTER_PORT + 1, else,
// when every rank is on this host, 127.0.0.1 with a port derived from the job id. The token
// is GW_TOKEN (32 hex digits) or derived from the launcher's job id.
// Security: a token derived from a job id is no secret and only keeps out strays; GW_TOKEN
// (random, shared by the job script) or the unique-id path is real authentication
// (launch_env.cpp says more). With more than one rank and neither GW_TOKEN nor a job id it is
// kInvalidArgument saying how to fix it, unless GW_INSECURE_LOCAL=1 (any process that knows
// the port may then join; logged at WARN). A malformed variable is kInvalidArgument naming it.
Result<LaunchEnv> read_launch_env();

// Env-mode rendezvous: rank 0 serves the root on env.root_port, every rank joins. (A job of
// one rank meets nobody and returns {blob} at once.) kSystem if rank 0 cannot listen there.
Result<std::vector<std::string>> rendezvous_from_env(const LaunchEnv& env, const std::string& blob,
                                                     std::chrono::milliseconds timeout);

}  // namespace gw::bootstrap
