// Which node a process runs on, as every rank states it at bootstrap: a host identity that
// tells apart the hosts of a cluster and the network namespaces of one host (the cluster in
// a box of scripts/cluster), and the launcher's own idea of local ranks, kept as a hint.
#pragma once

#include <string>

#include "gradwire/status.hpp"

namespace gw::topo {

struct HostInfo {
  std::string id;            // equal on ranks that share a node (host_identity())
  int hint_local_rank = -1;  // the launcher's, or -1
  int hint_local_size = -1;
  std::string hint_source;  // the variables the hint came from ("" when none)
};

// GW_HOST_ID when set (a job whose nodes the default cannot tell apart, or a test that lays
// ranks out on one host); else hostname, kernel boot id and the inodes of this process's
// network and IPC namespaces. Ranks with equal identities share memory and loopback; ranks in
// different network namespaces are treated as different nodes even on one kernel, since
// between them traffic is meant to cross (emulated) links.
std::string host_identity();
// host_identity() and the first launcher hint found: GW_LOCAL_RANK/GW_LOCAL_SIZE,
// OMPI_COMM_WORLD_LOCAL_RANK/_SIZE, LOCAL_RANK/LOCAL_WORLD_SIZE, MPI_LOCALRANKID/
// MPI_LOCALNRANKS, SLURM_LOCALID/SLURM_NTASKS_PER_NODE (a malformed value: no hint).
HostInfo local_host_info();

// The bytes a rank sends ahead of its transport address, and their parser (untrusted input:
// kRemote, "rank N sent a malformed address", when malformed). consumed: how many bytes the
// record took.
std::string encode_host_info(const HostInfo& h);
Result<HostInfo> parse_host_info(const std::string& blob, int rank, size_t* consumed);

}  // namespace gw::topo
