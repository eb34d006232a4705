// The stand-in accelerator's C ABI (include/gradwire/standin.h).
#include "gradwire/standin.h"

#include <cstring>
#include <memory>
#include <string>

#include "c_api/exit.hpp"
#include "c_api/handles.hpp"
#include "c_api/support.hpp"
#include "collectives/algorithms/device/standin/standin_backend.hpp"
#include "gradwire/communicator.hpp"

namespace {

using gw::Status;
using gw::capi::guard;
using gw::capi::null_arg;
using gw::coll::StandInArena;
using gw::coll::StandInStream;

StandInStream& stream_of(gw_standin_stream_t s) { return StandInStream::of(s); }

gw_standin_stream_t& current_stream() {
  static thread_local gw_standin_stream_t s = nullptr;
  return s;
}

Status check_delay(int max_delay_us) {
  if (max_delay_us < 0 || max_delay_us > 1000000) {
    return gw::invalid_argument("max_delay_us " + std::to_string(max_delay_us) + " is not in [0, 1000000]");
  }
  return Status::ok();
}

}  // namespace

extern "C" {

gw_result_t gw_standin_stream_create(int max_delay_us, uint64_t seed, gw_standin_stream_t* stream) {
  return guard("gw_standin_stream_create", [&]() -> Status {
    if (stream == nullptr) return null_arg("stream");
    *stream = nullptr;
    GW_RETURN_IF_ERROR(check_delay(max_delay_us));
    *stream = reinterpret_cast<gw_standin_stream_t>(new StandInStream(max_delay_us, seed));
    return Status::ok();
  });
}

gw_result_t gw_standin_stream_destroy(gw_standin_stream_t stream) {
  return guard("gw_standin_stream_destroy", [&]() -> Status {
    if (stream == nullptr) return null_arg("stream (the default stream is never destroyed)");
    delete reinterpret_cast<StandInStream*>(stream);
    return Status::ok();
  });
}

gw_result_t gw_standin_stream_enqueue(gw_standin_stream_t stream, gw_standin_fn fn, void* arg) {
  return guard("gw_standin_stream_enqueue", [&]() -> Status {
    if (fn == nullptr) return null_arg("fn");
    stream_of(stream).enqueue([fn, arg] { fn(arg); });
    return Status::ok();
  });
}

gw_result_t gw_standin_memcpy_async(void* dst, const void* src, size_t bytes, gw_standin_stream_t stream) {
  return guard("gw_standin_memcpy_async", [&]() -> Status {
    if (bytes == 0) return Status::ok();
    if (dst == nullptr) return null_arg("dst");
    if (src == nullptr) return null_arg("src");
    stream_of(stream).enqueue([=] { std::memmove(dst, src, bytes); });
    return Status::ok();
  });
}

gw_result_t gw_standin_stream_synchronize(gw_standin_stream_t stream) {
  return guard("gw_standin_stream_synchronize", [&]() -> Status {
    stream_of(stream).synchronize();
    return Status::ok();
  });
}

gw_result_t gw_standin_stream_query(gw_standin_stream_t stream, int* idle) {
  return guard("gw_standin_stream_query", [&]() -> Status {
    if (idle == nullptr) return null_arg("idle");
    StandInStream& s = stream_of(stream);
    *idle = s.reached(s.position()) ? 1 : 0;
    return Status::ok();
  });
}

gw_result_t gw_standin_event_record(gw_standin_stream_t stream, uint64_t* event) {
  return guard("gw_standin_event_record", [&]() -> Status {
    if (event == nullptr) return null_arg("event");
    *event = stream_of(stream).position();
    return Status::ok();
  });
}

gw_result_t gw_standin_stream_wait_event(gw_standin_stream_t waiter, gw_standin_stream_t stream, uint64_t event) {
  return guard("gw_standin_stream_wait_event", [&]() -> Status {
    StandInStream* s = &stream_of(stream);
    if (s == &stream_of(waiter)) return Status::ok();  // a stream is ordered after itself
    stream_of(waiter).enqueue([s, event] { s->wait_reached(event); });
    return Status::ok();
  });
}

gw_result_t gw_standin_event_synchronize(gw_standin_stream_t stream, uint64_t event) {
  return guard("gw_standin_event_synchronize", [&]() -> Status {
    stream_of(stream).wait_reached(event);
    return Status::ok();
  });
}

gw_result_t gw_standin_malloc(size_t bytes, void** ptr) {
  return guard("gw_standin_malloc", [&]() -> Status {
    if (ptr == nullptr) return null_arg("ptr");
    *ptr = nullptr;
    if (bytes > (size_t{1} << 40)) return gw::invalid_argument("bytes " + std::to_string(bytes) + " is above 1 TiB");
    *ptr = StandInArena::get().alloc(bytes);
    return Status::ok();
  });
}

gw_result_t gw_standin_free(void* ptr) {
  return guard("gw_standin_free", [&]() -> Status {
    if (ptr != nullptr && !StandInArena::get().contains(ptr, 1)) {
      return gw::invalid_argument("ptr is not stand-in memory from gw_standin_malloc");
    }
    StandInArena::get().free(ptr);
    return Status::ok();
  });
}

gw_result_t gw_standin_contains(const void* ptr, size_t bytes, int* yes) {
  return guard("gw_standin_contains", [&]() -> Status {
    if (yes == nullptr) return null_arg("yes");
    *yes = ptr != nullptr && StandInArena::get().contains(ptr, bytes > 0 ? bytes : 1) ? 1 : 0;
    return Status::ok();
  });
}

gw_result_t gw_standin_set_current_stream(gw_standin_stream_t stream) {
  return guard("gw_standin_set_current_stream", [&]() -> Status {
    current_stream() = stream;
    return Status::ok();
  });
}

gw_result_t gw_standin_current_stream(gw_standin_stream_t* stream) {
  return guard("gw_standin_current_stream", [&]() -> Status {
    if (stream == nullptr) return null_arg("stream");
    *stream = current_stream();
    return Status::ok();
  });
}

gw_result_t gw_standin_live_bytes(size_t* bytes) {
  return guard("gw_standin_live_bytes", [&]() -> Status {
    if (bytes == nullptr) return null_arg("bytes");
    *bytes = StandInArena::get().live_bytes();
    return Status::ok();
  });
}

gw_result_t gw_comm_use_standin(gw_comm_t comm, int max_delay_us, uint64_t seed) {
  return guard("gw_comm_use_standin", [&]() -> Status {
    if (comm == nullptr) return null_arg("comm");
    if (comm->comm == nullptr) return Status(gw::Code::kInvalidUsage, "the communicator was closed");
    GW_RETURN_IF_ERROR(check_delay(max_delay_us));
    return comm->comm->use_device_backend(std::make_unique<gw::coll::StandInBackend>(seed, max_delay_us));
  });
}

gw_result_t gw_standin_ef_state_create(size_t count, gw_ef_state_t* ef) {
  return guard("gw_standin_ef_state_create", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    *ef = nullptr;
    if (count > (size_t{1} << 38)) return gw::invalid_argument("count " + std::to_string(count) + " is too large");
    auto* state = new gw_ef_state_s(0);
    state->device = std::make_unique<gw::coll::StandInEf>(count);
    *ef = state;
    return Status::ok();
  });
}

}  // extern "C"
