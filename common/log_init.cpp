// The version banner and the once-per-process environment check (log.hpp).
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "common/env_vars.hpp"
#include "common/log.hpp"
#include "gradwire/version.h"
#include "gw_build_info.h"
#ifdef GW_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace gw::log {
namespace {

// NCCL's version, when the process already has it loaded (torch often has); never loads it.
std::string loaded_nccl_version() {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return "";
  std::string out;
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(dlsym(h, "ncclGetVersion"));
  int code = 0;
  if (get != nullptr && get(&code) == 0) {
    // NCCL >= 2.9 codes are MAJOR*10000 + MINOR*100 + PATCH.
    out = std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
  }
  dlclose(h);
  return out;
}

std::string make_banner() {
  std::string b = std::string("gradwire ") + GW_VERSION_STRING + " (CUDA " + (GW_BUILT_WITH_CUDA ? "yes" : "no") +
                  ", NCCL module " + (GW_BUILT_WITH_NCCL ? "yes" : "no") + ")";
#ifdef GW_HAVE_UCX
  b += std::string("; UCX ") + ucp_get_version_string();
#else
  b += "; UCX not built";
#endif
  const std::string nccl = loaded_nccl_version();
  if (!nccl.empty()) b += "; NCCL " + nccl + " (loaded)";
  return b;
}

}  // namespace

const char* version_banner() {
  thread_local std::string b;  // NCCL may be loaded since the last call
  b = make_banner();
  return b.c_str();
}

void on_first_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    detail::write_banner(version_banner());
    for (const std::string& name : env::unknown_in_environment()) {
      const std::string near = env::closest_known(name);
      GW_WARN(kEnv, "%s is set but gradwire does not read it%s%s%s", name.c_str(),
              near.empty() ? "" : " (did you mean ", near.c_str(), near.empty() ? "" : "?)");
    }
  });
}

}  // namespace gw::log
