#include "compressors/device_memory.hpp"

#include <dlfcn.h>
#include <link.h>

#include <atomic>

namespace gw {
namespace {

// From the CUDA driver API (cuda.h), declared here so that no CUDA header is needed.
using PointerGetAttribute = int (*)(void* data, int attribute, unsigned long long ptr);
constexpr int kAttrMemoryType = 2;         // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttrIsManaged = 8;          // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

std::atomic<PointerGetAttribute> g_query{nullptr};
// How many objects the process had loaded when the driver was last found missing (0: never
// looked). dlopen, even with RTLD_NOLOAD, searches the library path for a name it does not
// find loaded: tens of microseconds per buffer of every call in a process without CUDA.
std::atomic<unsigned long long> g_missed_at{0};

unsigned long long objects_loaded() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;  // the counter is the same in every entry
      },
      &adds);
  return adds;
}

PointerGetAttribute query() {
  PointerGetAttribute fn = g_query.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // RTLD_NOLOAD: only a driver the application has loaded already; it may load it later, so
  // a miss holds only until the process loads another object.
  const unsigned long long loaded = objects_loaded();
  if (loaded != 0 && g_missed_at.load(std::memory_order_relaxed) == loaded) return nullptr;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) {
    g_missed_at.store(loaded, std::memory_order_relaxed);
    return nullptr;
  }
  fn = reinterpret_cast<PointerGetAttribute>(dlsym(lib, "cuPointerGetAttribute"));
  dlclose(lib);  // drops only the reference taken above; the application's stays
  if (fn != nullptr) g_query.store(fn, std::memory_order_release);
  return fn;
}

}  // namespace

bool is_device_memory(const void* p) {
  if (p == nullptr) return false;
  const PointerGetAttribute fn = query();
  if (fn == nullptr) return false;
  const auto addr = reinterpret_cast<unsigned long long>(p);
  unsigned type = 0;
  // Fails (not initialised, or memory CUDA does not know) for plain host memory.
  if (fn(&type, kAttrMemoryType, addr) != 0 || type != kMemoryTypeDevice) return false;
  unsigned managed = 0;
  return fn(&managed, kAttrIsManaged, addr) != 0 || managed == 0;
}

}  // namespace gw
