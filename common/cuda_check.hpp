// CUDA runtime errors as Status values (code kCuda), naming the call that failed.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "gradwire/status.hpp"

namespace gw::kern {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  return Status(Code::kCuda, std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// After a kernel launch: the launch's own error (bad configuration, no device).
inline Status launch_status(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

}  // namespace gw::kern

#define GW_CUDA_RETURN_IF_ERROR(call) GW_RETURN_IF_ERROR(::gw::kern::cuda_status((call), #call))
