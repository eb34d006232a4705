#include "transport/transport.hpp"

#include <string>

namespace gw::transport {

Status Transport::wait(Op& op, Clock::time_point deadline, const std::function<Status()>& interrupt) {
  while (!op.finished()) {
    if (interrupt) GW_RETURN_IF_ERROR(interrupt());
    if (progress()) continue;
    if (op.finished()) break;
    if (Clock::now() >= deadline) {
      return Status(Code::kTimeout, std::string(op.is_recv ? "receive from" : "send to") + " rank " +
                                        std::to_string(op.peer) + " timed out");
    }
    wait_for_events(deadline);
  }
  if (op.current() == OpState::kFailed) return op.status;
  return Status::ok();
}

Status Transport::wait_all(Op* ops, size_t n, Clock::time_point deadline) {
  for (size_t i = 0; i < n; ++i) {
    if (ops[i].current() == OpState::kIdle) continue;
    GW_RETURN_IF_ERROR(wait(ops[i], deadline));
  }
  return Status::ok();
}

}  // namespace gw::transport
