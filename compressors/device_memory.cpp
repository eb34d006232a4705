#include "compressors/device_memory.hpp"

#include <dlfcn.h>

#include <atomic>

namespace gw {
namespace {

// From the CUDA driver API (cuda.h), declared here so that no CUDA header is needed.
using PointerGetAttribute = int (*)(void* data, int attribute, unsigned long long ptr);
constexpr int kAttrMemoryType = 2;         // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttrIsManaged = 8;          // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

std::atomic<PointerGetAttribute> g_query{nullptr};

PointerGetAttribute query() {
  PointerGetAttribute fn = g_query.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // RTLD_NOLOAD: only a driver the application has loaded already; it may load it later, so
  // a miss is not remembered.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
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
