// Revoke and shrink (docs/architecture.md, "Recovery"): the communicator-level half. The
// transport agrees on the survivors and opens a new epoch among them (recover()); this file
// hands the caller a communicator over that epoch and carries the EF bookkeeping across.
#include <string>
#include <utility>
#include <vector>

#include "collectives/comm/communicator_impl.hpp"

namespace gw {

void Communicator::revoke() {
  impl_->break_with(Status(Code::kRevoked, "rank " + std::to_string(rank()) + " revoked the communicator"));
}

Result<std::unique_ptr<Communicator>> Communicator::shrink() {
  Impl& im = *impl_;
  if (im.driven_here()) return invalid_usage("shrink() called from inside a call on the same communicator");
  const auto t0 = transport::Clock::now();
  const int old_rank = rank();
  const int old_size = size();
  im.break_with(Status(Code::kRevoked, "rank " + std::to_string(old_rank) + " shrank the communicator"));
  // Everything queued before fails at once (the communicator is broken); then this thread
  // drives, so nothing else touches the transport or the EF book while it recovers.
  {
    std::unique_lock<std::mutex> lock(im.mu);
    im.cv.wait(lock, [&] { return im.stopping || (!im.running && im.queue.empty()); });
    if (im.stopping) return invalid_usage("shrink() on a communicator being destroyed");
    im.running = true;
  }
  const Impl::Driving driver(im);
  im.fail_p2p(im.broken_status());
  // Participants wait for a coordinator up to twice the timeout, then the members join.
  const auto deadline = t0 + 4 * im.config.timeout;
  auto agreed = im.tp->recover(im.config.timeout, deadline);
  if (!agreed.is_ok()) return agreed.status().with_context("shrink");
  const std::vector<int>& members = *agreed;  // the transport's ranks
  std::vector<int> node_of;
  node_of.reserve(members.size());
  for (int g : members) {
    const int mine = im.tp->local(g);  // every member was one of ours
    if (mine < 0) return internal_error("shrink: rank " + std::to_string(g) + " was not in the communicator");
    node_of.push_back(im.topo.node_of.empty() ? 0 : im.topo.node_of[static_cast<size_t>(mine)]);
  }
  const std::shared_ptr<transport::Transport>& core = im.tp->core();
  auto view = std::make_unique<transport::EpochTransport>(core, core->epoch(), members);
  GW_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, create(std::move(view), im.config, node_of));
  // No call has reached the new communicator yet: its progress thread does not touch the book.
  comm->impl_->efs = im.efs.inherited();
  GW_INFO(kInit, "shrink: rank %d of %d is rank %d of %d after %.1f ms", old_rank, old_size, comm->rank(), comm->size(),
          std::chrono::duration<double, std::milli>(transport::Clock::now() - t0).count());
  return comm;
}

}  // namespace gw
