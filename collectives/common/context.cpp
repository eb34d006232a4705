#include "collectives/common/context.hpp"

#include <algorithm>
#include <string>

#include "collectives/checks/call_check.hpp"
#include "collectives/observability/timeline.hpp"

namespace gw::coll {

transport::Op* OpArena::get(size_t count) {
  if (count > count_) {
    ops_.reset(new transport::Op[count]);
    count_ = count;
  }
  for (size_t i = 0; i < count; ++i) ops_[i].state.store(static_cast<int>(transport::OpState::kIdle));
  return ops_.get();
}

// How long a failed receive waits for its peer's descriptor, which may explain the failure
// (a mismatched call sends a message of another size).
constexpr auto kExplainWait = std::chrono::seconds(1);

Status Context::check_calls() const { return check != nullptr ? check->poll() : Status::ok(); }

Status Context::verify_all_calls() const { return check != nullptr ? check->require_all(deadline) : Status::ok(); }

size_t Context::carried_len() const { return check != nullptr ? check->carried_len() : 0; }
const uint8_t* Context::carried_bytes() const { return check != nullptr ? check->carried_bytes() : nullptr; }
bool Context::ring_head_pending() const { return check != nullptr && check->ring_head_pending(); }
Status Context::take_carried(int peer, const uint8_t* msg, size_t len, size_t* header) const {
  *header = 0;
  if (check == nullptr) return Status::ok();
  const Status s = check->take_carried(peer, msg, len, header);
  if (s.code() != Code::kRemote) return s;
  // A message without a descriptor is most likely another call's data: the descriptors
  // still coming may name the mismatch.
  const Status why = check->require_all(std::min(deadline, transport::Clock::now() + kExplainWait));
  return why.code() == Code::kInvalidUsage ? why : s;
}

Status Context::wait(transport::Op& op) const {
  // Time spent waiting on the network is the "transfer" of the timeline (GW_TIMELINE).
  Timeline* tl = op.finished() ? nullptr : Timeline::current();
  const auto t0 = tl != nullptr ? Timeline::Clock::now() : Timeline::Clock::time_point();
  const Status waited = tp.wait(op, deadline, [this] { return check_calls(); });
  if (tl != nullptr) {
    tl->span("transfer", "transfer", t0, Timeline::Clock::now(),
             std::string("\"peer\": ") + std::to_string(op.peer) + ", \"recv\": " + (op.is_recv ? "true" : "false") +
                 ", \"bytes\": " + std::to_string(op.bytes));
  }
  if (waited.code() == Code::kTimeout && check != nullptr) {
    return Status(Code::kTimeout, waited.message() + check->not_started());
  }
  if (!op.finished() || check == nullptr || !op.is_recv) return waited;
  const bool failed = !waited.is_ok();
  const auto until = failed ? std::min(deadline, transport::Clock::now() + kExplainWait) : deadline;
  // A failed receive (a message of another size) is most likely a mismatched call: any
  // descriptor still coming may say so, not only this peer's (whose may ride in the data).
  const Status s = failed ? check->require_all(until) : check->require(op.peer, until);
  if (!s.is_ok() && (!failed || s.code() == Code::kInvalidUsage)) return s;
  return waited;
}

Status Context::idle(const char* waiting_for, transport::Clock::time_point until) const {
  GW_RETURN_IF_ERROR(check_calls());
  if (transport::Clock::now() >= deadline) {
    return Status(Code::kTimeout, std::string("waiting for ") + waiting_for + " timed out" +
                                      (check != nullptr ? check->not_started() : std::string()));
  }
  tp.wait_for_events(std::min(until, deadline));
  return Status::ok();
}

Status Context::wait_all(transport::Op* ops, size_t n) const {
  for (size_t i = 0; i < n; ++i) {
    if (ops[i].current() == transport::OpState::kIdle) continue;
    GW_RETURN_IF_ERROR(wait(ops[i]));
  }
  return Status::ok();
}

}  // namespace gw::coll
