// NCCL, opened at run time with dlopen: gradwire has no link-time dependency on it, so one
// build runs with or without NCCL installed. The types come from the <nccl.h> found at build
// time; the functions from whichever libnccl.so.2 is found at run time.
#pragma once

#include <nccl.h>

#include <string>

#include "gradwire/status.hpp"

namespace gw::nccl {

// Nonblocking communicators (ncclConfig_t::blocking = 0) and ncclCommFinalize arrived in NCCL 2.14.
constexpr int kMinVersion = 21400;

// The resolved entry points of one loaded libnccl. Lives for the whole process.
struct Library {
  std::string path;  // the file loaded (as the loader names it)
  int version = 0;   // ncclGetVersion's code, e.g. 22809 for 2.28.9
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&::ncclCommFinalize) comm_finalize = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclGetErrorString) get_error_string = nullptr;
  decltype(&::ncclGetLastError) get_last_error = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
};

// Loads NCCL once per process (the outcome, failure included, is cached). Search order:
// $GW_NCCL_LIBRARY when set (and nothing else), else "libnccl.so.2" on the loader path, else
// libnccl.so.2 in the CUDA toolkit's library directory found at build time. kUnsupported
// names every path tried and why each was refused.
Result<const Library*> load_library();

// "2.28.9" for 22809 (and the pre-2.9 encoding, 2708 -> "2.7.8").
std::string version_string(int code);

}  // namespace gw::nccl
