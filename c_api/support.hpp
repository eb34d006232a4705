// How the C ABI turns Status values and exceptions into result codes and the thread-local
// last-error message. Every exported function body runs inside gw::capi::guard().
#pragma once

#include <exception>
#include <new>
#include <string>

#include "gradwire/gradwire.h"
#include "gradwire/status.hpp"

namespace gw::capi {

// Records the message for gw_get_last_error() and returns the matching code.
gw_result_t fail(const Status& status);
gw_result_t fail(gw_result_t code, const std::string& message);
void clear_last_error();
const char* last_error();

template <class Fn>
gw_result_t guard(const char* function, Fn&& fn) noexcept {
  try {
    clear_last_error();
    const Status s = fn();
    return s.is_ok() ? GW_SUCCESS : fail(s.with_context(function));
  } catch (const std::bad_alloc&) {
    return fail(GW_ERR_OUT_OF_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(GW_ERR_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) {
    return fail(GW_ERR_INTERNAL, std::string(function) + ": unknown exception");
  }
}

// Whether this build runs the codec on device memory (c_api/device.cpp, device_no_cuda.cpp).
bool has_device_codec(uint8_t codec_id);

inline Status null_arg(const char* name) { return invalid_argument(std::string(name) + " is null"); }

}  // namespace gw::capi
