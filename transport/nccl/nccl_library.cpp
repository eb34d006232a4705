#include "transport/nccl/nccl_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace gw::nccl {
namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlerror";
}

template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& why) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr) why = std::string("missing symbol ") + name + " (" + dl_error() + ")";
  return fn != nullptr;
}

// Opens one candidate and fills lib; on failure says why in `why` and leaves nothing open.
bool try_open(const std::string& path, Library& lib, std::string& why) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    why = dl_error();
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // named once is enough
    return false;
  }
  Library l;
  l.path = path;
  link_map* map = nullptr;  // the file the loader picked, for messages
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name[0] != '\0') {
    l.path = map->l_name;
  }
  const bool ok =
      resolve(handle, "ncclGetVersion", l.get_version, why) &&
      resolve(handle, "ncclGetUniqueId", l.get_unique_id, why) &&
      resolve(handle, "ncclCommInitRankConfig", l.comm_init_rank_config, why) &&
      resolve(handle, "ncclCommGetAsyncError", l.comm_get_async_error, why) &&
      resolve(handle, "ncclCommFinalize", l.comm_finalize, why) &&
      resolve(handle, "ncclCommDestroy", l.comm_destroy, why) && resolve(handle, "ncclCommAbort", l.comm_abort, why) &&
      resolve(handle, "ncclGetErrorString", l.get_error_string, why) &&
      resolve(handle, "ncclGetLastError", l.get_last_error, why) &&
      resolve(handle, "ncclAllReduce", l.all_reduce, why) && resolve(handle, "ncclAllGather", l.all_gather, why) &&
      resolve(handle, "ncclReduceScatter", l.reduce_scatter, why) && resolve(handle, "ncclBroadcast", l.broadcast, why);
  if (ok && l.get_version(&l.version) != ncclSuccess) {
    why = "ncclGetVersion failed";
  } else if (ok && l.version < kMinVersion) {
    why = "NCCL " + version_string(l.version) + " is too old: gradwire needs " + version_string(kMinVersion) +
          " or newer (nonblocking communicators)";
  } else if (ok) {
    lib = std::move(l);  // the handle stays open for the life of the process
    return true;
  }
  dlclose(handle);
  return false;
}

Status open_first(Library& lib) {
  std::vector<std::string> candidates;
  const char* env = std::getenv("GW_NCCL_LIBRARY");
  const bool from_env = env != nullptr && env[0] != '\0';
  if (from_env) {
    candidates.emplace_back(env);
  } else {
    candidates.emplace_back("libnccl.so.2");
#ifdef GW_NCCL_FALLBACK_DIR
    const std::string dir = GW_NCCL_FALLBACK_DIR;
    if (!dir.empty()) candidates.push_back(dir + "/libnccl.so.2");
#endif
  }
  std::string tried;
  for (const std::string& path : candidates) {
    std::string why;
    if (try_open(path, lib, why)) return Status::ok();
    tried += (tried.empty() ? "" : "; ") + path + ": " + why;
  }
  return unsupported(std::string("NCCL not loaded") + (from_env ? " (from GW_NCCL_LIBRARY)" : "") + ": tried " + tried);
}

}  // namespace

Result<const Library*> load_library() {
  struct Loaded {
    Library lib;
    Status status;
  };
  // Never freed: communicators destroyed during static destruction still need the pointers.
  static Loaded* loaded = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    loaded = new Loaded;
    loaded->status = open_first(loaded->lib);
  });
  if (!loaded->status.is_ok()) return loaded->status;
  return static_cast<const Library*>(&loaded->lib);
}

std::string version_string(int code) {
  // NCCL_VERSION: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9 on.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

}  // namespace gw::nccl
