// The device-memory codec C ABI of a library built without CUDA: every call says so.
#include <string>
#include "c_api/support.hpp"

#include "gradwire/gradwire.h"

namespace {

gw_result_t no_cuda(const char* function) {
  return gw::capi::fail(GW_ERR_UNSUPPORTED,
                        std::string(function) + ": this gradwire was built without CUDA (GW_WITH_CUDA=OFF or no nvcc)");
}

}  // namespace

extern "C" {

gw_result_t gw_cuda_device_count(int* count) {
  if (count == nullptr) return gw::capi::fail(GW_ERR_INVALID_ARGUMENT, "gw_cuda_device_count: count is null");
  *count = 0;
  return no_cuda("gw_cuda_device_count");
}

gw_result_t gw_set_device_allocator(gw_device_alloc_fn, gw_device_free_fn, void*) {
  return no_cuda("gw_set_device_allocator");
}

gw_result_t gw_ef_state_create_device(size_t, gw_ef_state_t* ef) {
  if (ef != nullptr) *ef = nullptr;
  return no_cuda("gw_ef_state_create_device");
}

gw_result_t gw_encode_device(gw_codec_t, const void*, size_t, gw_dtype_t, uint64_t, uint32_t, gw_ef_state_t, void*,
                             size_t, size_t* written, void*) {
  if (written != nullptr) *written = 0;
  return no_cuda("gw_encode_device");
}

gw_result_t gw_encode_device_async(gw_codec_t, const void*, size_t, gw_dtype_t, uint64_t, uint32_t, gw_ef_state_t,
                                   void*, size_t, size_t* max_written, void*) {
  if (max_written != nullptr) *max_written = 0;
  return no_cuda("gw_encode_device_async");
}

gw_result_t gw_decode_device(const void*, size_t, void*, size_t, gw_dtype_t, gw_decode_mode_t, void*) {
  return no_cuda("gw_decode_device");
}

}  // extern "C"

bool gw::capi::has_device_codec(uint8_t) { return false; }
