#include <algorithm>
#include <string>

#include "collectives/algorithms/device/device_algorithms.hpp"

namespace gw::coll {

// How long an idle progress thread sleeps in the transport while device work is pending: a
// staged copy of one chunk takes tens of microseconds.
constexpr std::chrono::microseconds kDevicePoll{50};

Status FenceQueue::run_ready(DeviceBackend& dev, bool* ran) {
  *ran = false;
  while (!q_.empty()) {
    GW_ASSIGN_OR_RETURN(bool reached, dev.reached(q_.front().fence));
    if (!reached) break;
    Entry e = std::move(q_.front());
    q_.pop_front();
    GW_RETURN_IF_ERROR(e.step());
    *ran = true;
  }
  return Status::ok();
}

Status idle(Context& c, bool device_pending, const char* waiting_for) {
  return c.idle(waiting_for, device_pending ? transport::Clock::now() + kDevicePoll : c.deadline);
}

Status wait_fence(Context& c, DeviceBackend& dev, DeviceBackend::Fence fence) {
  while (true) {
    GW_ASSIGN_OR_RETURN(bool reached, dev.reached(fence));
    if (reached) return Status::ok();
    if (c.tp.progress()) continue;
    GW_RETURN_IF_ERROR(idle(c, true, "the device"));
  }
}

Status drain(Context& c, DeviceBackend& dev) {
  GW_ASSIGN_OR_RETURN(DeviceBackend::Fence f, dev.fence());
  return wait_fence(c, dev, f);
}

Result<wire::Header> validate_staged(const uint8_t* msg, size_t len, uint64_t n) {
  GW_ASSIGN_OR_RETURN(MessageInfo info, inspect(msg, len));
  if (info.count != n) {
    return invalid_message("message decodes to " + std::to_string(info.count) + " elements but the destination holds " +
                           std::to_string(n));
  }
  return wire::read_header(msg, len);
}

}  // namespace gw::coll
