// Stand-in CUDA runtime for the CPU kernel emulator: device memory is host memory. By default
// every call completes before it returns, so streams and events have nothing to order. With
// deferred streams ($EMU_DEFER_STREAMS=1, or emu::g_defer) work queued on a stream runs only
// when something waits for it (see emu::enqueue), so a missing wait reads stale data. The calls
// that allocate, free or classify memory live in emu.cpp: device allocations (cudaMalloc,
// cudaMallocAsync) and pinned ones (cudaHostAlloc) are tracked, so cudaPointerGetAttributes
// tells device memory from host memory as the real runtime does, and freeing memory with the
// wrong call (or twice) aborts with EMU FAILURE.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorNotSupported = 801,
};
using cudaError = cudaError_t;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrL2CacheSize = 38, cudaDevAttrMemoryPoolsSupported = 115 };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
constexpr unsigned cudaHostAllocDefault = 0;
constexpr unsigned cudaHostAllocPortable = 1;
constexpr unsigned cudaHostAllocMapped = 2;
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2
};
constexpr unsigned long long cudaEnableDefault = 0;
constexpr unsigned cudaStreamDefault = 0;
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0;
constexpr unsigned cudaEventBlockingSync = 1;
constexpr unsigned cudaEventDisableTiming = 2;
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
// Vector types with CUDA's alignment, so a misaligned vector access is caught by UBSan here
// as it would fault on a GPU.
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
inline float2 make_float2(float a, float b) { return float2{a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
namespace emu {
extern int g_sms;       // reported multiprocessor count ($EMU_SMS, default 3; harnesses vary it)
extern int g_l2;        // reported L2 size in bytes
// cudaDevAttrMemoryPoolsSupported: 1, or 0 with $EMU_NO_MEMPOOLS=1. At 0 the pool and
// stream-ordered calls fail with cudaErrorNotSupported, as on a device without pools, and
// the fallback's own waits (cudaMalloc, cudaStreamSynchronize, cudaFree) are allowed on hot
// paths; every other wait there still aborts.
extern int g_mempools;
extern long g_allocs;   // cudaMalloc and cudaMallocAsync calls
extern long g_syncs;    // cudaStreamSynchronize calls
extern long g_launches; // kernel launches
// When set (collectives_harness), cudaMemcpy*/cudaMemset* check that the side their kind
// names as device memory is a tracked device allocation and the host side is not one. Off
// by default: quant_harness and sparse_harness hand the kernels mmap'd host buffers.
extern bool g_strict_memory;
// Queries that report cudaErrorNotReady after each cudaEventRecord ($EMU_EVENT_DELAY,
// default 1), so the callers' "not reached yet" paths run; the work itself is already done.
extern int g_event_delay;
// Deferred streams: as late as CUDA allows. Work on a created stream waits in its queue until
// a cudaStreamSynchronize of it, a cudaEventSynchronize/cudaEventQuery of an event recorded
// after it, a cudaStreamWaitEvent of such an event reached by another stream's queue, the
// stream's destruction, or (for streams made without cudaStreamNonBlocking) work or a
// blocking call on the legacy default stream. Work on the legacy stream runs at once, after
// the blocking streams' queues. Pageable host memory behaves as CUDA makes it: a copy from it
// first waits for the stream, a copy into it waits for the copy. Without deferral
// (the default) enqueue runs fn at once.
extern bool g_defer;
void enqueue(cudaStream_t s, std::function<void()> fn);
void sync_stream(cudaStream_t s);  // everything queued on s (the legacy stream: see above)
void sync_all();                   // every stream (cudaDeviceSynchronize, cudaFree)
cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind);
cudaError_t check_set(void* p, size_t n);
// Calls that make the host wait for the device on a real GPU (synchronize calls, cudaFree,
// cudaMalloc, cudaHostAlloc, cudaFreeHost, blocking cudaMemcpy/cudaMemset, a cudaMemcpyAsync
// into pageable host memory) report here. Inside a HotPath (set by a harness around code that
// must only enqueue: encodes, collectives in steady state) each one beyond the scope's
// allowance aborts with EMU FAILURE naming the call. Process-wide, since collectives run on
// their progress threads.
void blocking_call(const char* name);
bool pageable(const void* p);  // host memory the runtime did not allocate (not pinned, not device)
class HotPath {
 public:
  explicit HotPath(const char* what, long allowed = 0);
  ~HotPath();
  long used() const;
  HotPath(const HotPath&) = delete;
  HotPath& operator=(const HotPath&) = delete;
};
// The harness's own uploads and downloads on this thread, not counted against a HotPath.
class Exempt {
 public:
  Exempt();
  ~Exempt();
  Exempt(const Exempt&) = delete;
  Exempt& operator=(const Exempt&) = delete;
};
}
struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;
enum cudaMemAllocationType { cudaMemAllocationTypeInvalid = 0, cudaMemAllocationTypePinned = 1 };
enum cudaMemLocationType { cudaMemLocationTypeInvalid = 0, cudaMemLocationTypeDevice = 1 };
struct cudaMemLocation { cudaMemLocationType type; int id; };
struct cudaMemPoolProps {
  cudaMemAllocationType allocType;
  int handleTypes;
  cudaMemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMallocFromPoolAsync(void** p, size_t n, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t cudaMalloc(void** p, size_t n);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void* p);
// Pinned memory is host memory here: its device address is its host address (UVA).
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) {
  *d = h;
  return cudaSuccess;
}
// No driver here: no stream memory operations (the backend polls with a kernel instead).
inline cudaError_t cudaGetDriverEntryPointByVersion(const char*, void** fn, unsigned, unsigned long long,
                                                    cudaDriverEntryPointQueryResult* found) {
  *fn = nullptr;
  if (found != nullptr) *found = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
  }
  return "cudaErrorEmu";
}
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t stream = nullptr) {
  if (cudaError_t e = emu::check_set(p, n)) return e;
  if (n > 0) emu::enqueue(stream, [p, v, n] { std::memset(p, v, n); });
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
  emu::blocking_call("cudaMemset");
  emu::sync_stream(nullptr);
  return cudaMemsetAsync(p, v, n);
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
  if (cudaError_t e = emu::check_copy(d, s, n, kind)) return e;
  if (n == 0) return cudaSuccess;
  const bool into_pageable = kind == cudaMemcpyDeviceToHost && emu::pageable(d);
  if (into_pageable) emu::blocking_call("cudaMemcpyAsync into pageable memory");
  // From pageable memory CUDA copies the source before it returns, after the stream's work.
  if (kind == cudaMemcpyHostToDevice && emu::pageable(s)) {
    emu::sync_stream(stream);
    std::memcpy(d, s, n);
    return cudaSuccess;
  }
  emu::enqueue(stream, [d, s, n] { std::memcpy(d, s, n); });
  if (into_pageable) emu::sync_stream(stream);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind kind) {
  emu::blocking_call("cudaMemcpy");
  if (cudaError_t e = emu::check_copy(d, s, n, kind)) return e;
  emu::sync_stream(nullptr);
  if (n > 0) std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  __atomic_fetch_add(&emu::g_syncs, 1, __ATOMIC_RELAXED);
  emu::blocking_call("cudaStreamSynchronize");
  emu::sync_stream(stream);
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  emu::blocking_call("cudaDeviceSynchronize");
  emu::sync_all();
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrL2CacheSize ? emu::g_l2 : a == cudaDevAttrMemoryPoolsSupported ? emu::g_mempools : emu::g_sms;
  return cudaSuccess;
}
// Occupancy: every kernel fits $EMU_BLOCKS_PER_SM blocks per SM (default 4; 0 is allowed, as a
// real device answers for a kernel that cannot launch), so callers size grids from the query.
template <class Kernel>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int block_size, size_t) {
  static const int per_sm = [] {
    const char* s = std::getenv("EMU_BLOCKS_PER_SM");
    const int v = s != nullptr ? std::atoi(s) : 4;
    return v >= 0 ? v : 4;
  }();
  if (blocks == nullptr || block_size <= 0 || block_size > 1024) return cudaErrorInvalidValue;
  *blocks = per_sm;
  return cudaSuccess;
}
