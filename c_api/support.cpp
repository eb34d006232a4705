#include "c_api/support.hpp"

namespace gw::capi {
namespace {

thread_local std::string t_last_error;

}  // namespace

gw_result_t fail(gw_result_t code, const std::string& message) {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();
  }
  return code;
}

gw_result_t fail(const Status& status) { return fail(static_cast<gw_result_t>(status.code()), status.message()); }

void clear_last_error() { t_last_error.clear(); }

const char* last_error() { return t_last_error.c_str(); }

}  // namespace gw::capi

extern "C" {

const char* gw_get_last_error(void) { return gw::capi::last_error(); }

const char* gw_get_error_string(gw_result_t result) {
  if (static_cast<int>(result) < 0 || result >= GW_NUM_RESULTS) return "unknown result code";
  return gw::code_name(static_cast<gw::Code>(result));
}

gw_result_t gw_get_version(int* version) {
  if (version == nullptr) return gw::capi::fail(GW_ERR_INVALID_ARGUMENT, "gw_get_version: version is null");
  *version = GW_VERSION_CODE;
  return GW_SUCCESS;
}

}  // extern "C"
