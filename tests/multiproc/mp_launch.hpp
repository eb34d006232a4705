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

// Runs body on every rank and returns this process's exit code: with np > 0, np forked ranks
// (unique-id init; the first failing child's code); with np == 0, this process's rank from
// the launcher's environment.
int run_ranks(int np, const CommConfig& config, const std::function<int(Communicator&)>& body,
              std::chrono::seconds limit = std::chrono::seconds(500));

}  // namespace gw::test
