// Starting the ranks of a multi-process test: from the launcher's environment (mpirun), or
// by forking N local ranks that meet through a unique id.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "gradwire/communicator.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw::test {

// Forks one child per entry of `ranks` (an entry may be any int; tests use -1 for a stranger)
// and returns each child's exit code, or 128 + signal. The child whose entry is 0 creates the
// unique id, so its rendezvous root runs there as in a real job, and passes the id to the
// others through pipes. The parent starts no thread before forking: a child forked while
// another thread holds a lock (UCX's memory hooks, the allocator) can deadlock on it.
// alarm(limit) ends a child that hangs.
std::vector<int> fork_with_unique_id(const std::vector<int>& ranks, std::chrono::milliseconds root_timeout,
                                     const std::function<int(int, const bootstrap::UniqueId&)>& body,
                                     std::chrono::seconds limit = std::chrono::seconds(120));

// Exit codes of a forked rank (fork_communicators and the tests' bodies).
constexpr int kRankOk = 0, kRankInitFailed = 10, kRankFailed = 11;

// Prints "rank R: <message>" on stderr (the parent shows the children's stderr) and returns
// kRankFailed, for a body to return.
int rank_failed(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// A call the ranks make differently (call(c, rank)), and what every rank's error must name.
struct MismatchCase {
  const char* what;
  std::function<Status(Communicator&, int rank)> call;
  std::vector<const char*> names;
};
// A rank's body for a mismatch case: kRankOk when its call failed with kInvalidUsage naming
// every one of k.names, else kRankFailed with what it got.
int expect_invalid_usage(const MismatchCase& k, Communicator& c, int rank);

// Forks np ranks that each join a communicator (unique-id init with cfg, the rendezvous
// waiting up to 30 s) and pass a first barrier (so that no rank still in its init learns of
// the others' mismatches as an init failure), then run body; each rank's exit code
// (kRankInitFailed when it could not join). node_of (np entries, or empty: one host) lays
// the ranks out on nodes through GW_HOST_ID.
std::vector<int> fork_communicators(int np, const CommConfig& cfg,
                                    const std::function<int(Communicator&, int rank, int np)>& body,
                                    std::chrono::seconds limit, const std::vector<int>& node_of = {});

// Runs body on every rank and returns this process's exit code: with np > 0, np forked ranks
// (unique-id init; the first failing child's code); with np == 0, this process's rank from
// the launcher's environment.
int run_ranks(int np, const CommConfig& config, const std::function<int(Communicator&)>& body,
              std::chrono::seconds limit = std::chrono::seconds(500));

}  // namespace gw::test
