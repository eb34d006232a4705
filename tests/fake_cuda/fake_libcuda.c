/* A stand-in for the CUDA driver's cuPointerGetAttribute, so that the host calls' refusal of
 * device memory can be tested on machines without a GPU: the test marks one address range
 * as device memory (managed or not) and loads this library under the driver's soname. */
#include <stddef.h>
#include <stdint.h>

static uintptr_t g_lo, g_hi;
static unsigned g_managed;

void fake_cuda_mark_device(const void* p, size_t bytes, unsigned managed) {
  g_lo = (uintptr_t)p;
  g_hi = g_lo + bytes;
  g_managed = managed;
}

int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  if (ptr < g_lo || ptr >= g_hi) return 1; /* CUDA_ERROR_INVALID_VALUE: not CUDA memory */
  if (attribute == 2) {                    /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
    *(unsigned*)data = 2;                  /* CU_MEMORYTYPE_DEVICE */
    return 0;
  }
  if (attribute == 8) { /* CU_POINTER_ATTRIBUTE_IS_MANAGED */
    *(unsigned*)data = g_managed;
    return 0;
  }
  return 1;
}
