#include "emu.hpp"

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

extern "C" void emu_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
)");

namespace emu {
int g_sms = std::getenv("EMU_SMS") ? std::atoi(std::getenv("EMU_SMS")) : 3;
long g_allocs = 0;
long g_syncs = 0;
long g_launches = 0;
int g_l2 = 1 << 16;
int g_mempools =
    std::getenv("EMU_NO_MEMPOOLS") != nullptr && std::strcmp(std::getenv("EMU_NO_MEMPOOLS"), "1") == 0 ? 0 : 1;
bool g_strict_memory = false;
bool g_canonical_nan = false;
int g_event_delay = std::getenv("EMU_EVENT_DELAY") ? std::atoi(std::getenv("EMU_EVENT_DELAY")) : 1;
Thread* current = nullptr;
Idx3 g_block, g_grid, g_bdim;
std::vector<Rendezvous> g_warps;
Rendezvous g_block_rv;
uint64_t g_progress = 0;
static std::function<void()>* g_body = nullptr;
int g_nthreads = 0;
static void* sched_sp = nullptr;
static const void* main_bottom = nullptr;
static size_t main_size = 0;

static void to_scheduler(bool exiting) {
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, main_bottom, main_size);
#endif
  emu_switch(&current->sp, sched_sp);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  (void)exiting;
}

void yield() { to_scheduler(false); }

static void fiber_entry() {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &main_bottom, &main_size);
#endif
  (*g_body)();
  current->done = true;
  ++g_progress;
  to_scheduler(true);
  std::abort();
}

static void run(Thread& t) {
  current = &t;
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, t.stack.data(), t.stack.size());
#endif
  emu_switch(&sched_sp, t.sp);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

static void init_fiber(Thread& t) {
#if EMU_ASAN
  __asan_unpoison_memory_region(t.stack.data(), t.stack.size());
#endif
  uintptr_t top = reinterpret_cast<uintptr_t>(t.stack.data() + t.stack.size()) & ~uintptr_t{15};
  auto* w = reinterpret_cast<uintptr_t*>(top);
  w[-1] = 0;
  w[-2] = reinterpret_cast<uintptr_t>(&fiber_entry);
  for (int r = 3; r <= 8; ++r) w[-r] = 0;
  t.sp = w - 8;
}

// Launches from several host threads (each communicator's progress thread) run one at a
// time: the scheduler state above, the fiber stacks and every kernel's __shared__ arrays
// (function-local statics) are process-wide.
static std::mutex g_launch_mu;

void launch_impl(dim3 grid, dim3 block, std::function<void()> body) {
  if (block.y != 1 || block.z != 1 || grid.y != 1 || grid.z != 1) {
    std::fprintf(stderr, "1-D only\n");
    std::abort();
  }
  if (block.x % 32 != 0 || block.x > 1024 || grid.x == 0) {
    std::fprintf(stderr, "bad launch %u x %u\n", grid.x, block.x);
    std::abort();
  }
  std::lock_guard<std::mutex> lock(g_launch_mu);
  ++g_launches;
  g_body = &body;
  g_grid = Idx3{grid.x, 1, 1};
  g_bdim = Idx3{block.x, 1, 1};
  g_nthreads = static_cast<int>(block.x);
  static std::vector<Thread> threads(1024);
  for (unsigned i = 0; i < block.x; ++i)
    if (threads[i].stack.empty()) threads[i].stack.resize(256 * 1024);
  for (unsigned b = 0; b < grid.x; ++b) {
    g_block = Idx3{b, 0, 0};
    g_warps.assign(block.x / 32, Rendezvous{});
    g_block_rv = Rendezvous{};
    for (unsigned i = 0; i < block.x; ++i) {
      threads[i].done = false;
      threads[i].tid = Idx3{i, 0, 0};
      init_fiber(threads[i]);
    }
    for (;;) {
      bool live = false;
      const uint64_t before = g_progress;
      for (unsigned i = 0; i < block.x; ++i) {
        if (threads[i].done) continue;
        live = true;
        run(threads[i]);
      }
      current = nullptr;
      if (!live) break;
      if (g_progress == before) {
        std::fprintf(stderr, "EMU FAILURE: deadlock in block %u\n", b);
        std::abort();
      }
    }
  }
}

// ---- Memory: tracked device and pinned allocations. ----

namespace {

enum class Kind { kDevice, kPinned };
struct Block {
  size_t bytes;
  Kind kind;
};
// Made on first use and never destroyed: static objects of the harnesses allocate and free
// device memory during static initialisation and at exit.
std::mutex& mem_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<uintptr_t, Block>& blocks() {  // by start address
  static auto* b = new std::map<uintptr_t, Block>;
  return *b;
}

[[noreturn]] void mem_fail(const char* what, const void* p, size_t n) {
  std::fprintf(stderr, "EMU FAILURE: %s (pointer %p, %zu bytes)\n", what, p, n);
  std::abort();
}

// The block holding p (the caller holds mem_mu()); blocks().end() when none.
std::map<uintptr_t, Block>::iterator find_block(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks().upper_bound(a);
  if (it == blocks().begin()) return blocks().end();
  --it;
  return a < it->first + it->second.bytes ? it : blocks().end();
}

void* alloc(size_t n, Kind kind) {
  if (n == 0) return nullptr;
  void* p = std::malloc(n);
  if (p == nullptr) return nullptr;
  if (kind == Kind::kDevice) std::memset(p, 0xA5, n);  // unwritten device memory reads as garbage
  std::lock_guard<std::mutex> lock(mem_mu());
  if (kind == Kind::kDevice) ++g_allocs;
  blocks()[reinterpret_cast<uintptr_t>(p)] = Block{n, kind};
  return p;
}

void release(void* p, Kind kind, const char* call) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mem_mu());
    auto it = blocks().find(reinterpret_cast<uintptr_t>(p));
    if (it == blocks().end() || it->second.kind != kind) {
      char what[128];
      std::snprintf(what, sizeof what, "%s of memory it did not allocate (or freed already)", call);
      mem_fail(what, p, 0);
    }
    blocks().erase(it);
  }
  std::free(p);
}

// Device memory holding [p, p + n): true; memory outside every device block: false; a range
// that starts in a device block and runs past its end aborts.
bool device_range(const void* p, size_t n, const char* what) {
  std::lock_guard<std::mutex> lock(mem_mu());
  auto it = find_block(p);
  if (it == blocks().end() || it->second.kind != Kind::kDevice) return false;
  if (reinterpret_cast<uintptr_t>(p) + n > it->first + it->second.bytes) mem_fail(what, p, n);
  return true;
}

}  // namespace

static std::atomic<int> g_hot{0};
static std::atomic<long> g_hot_allowed{0};
static std::atomic<long> g_hot_used{0};
static const char* g_hot_what = "";

static thread_local int t_exempt = 0;
Exempt::Exempt() { ++t_exempt; }
Exempt::~Exempt() { --t_exempt; }

// The waits a device without memory pools makes by design (kern::stream_alloc/_release).
static bool pool_fallback_wait(const char* name) {
  return g_mempools == 0 && (std::strcmp(name, "cudaMalloc") == 0 || std::strcmp(name, "cudaFree") == 0 ||
                             std::strcmp(name, "cudaStreamSynchronize") == 0);
}

void blocking_call(const char* name) {
  if (g_hot.load() == 0 || t_exempt > 0 || pool_fallback_wait(name)) return;
  if (g_hot_used.fetch_add(1) + 1 > g_hot_allowed.load()) {
    std::fprintf(stderr, "EMU FAILURE: %s waits for the device inside %s (%ld waits allowed there)\n", name, g_hot_what,
                 g_hot_allowed.load());
    std::abort();
  }
}

HotPath::HotPath(const char* what, long allowed) {
  if (g_hot.fetch_add(1) != 0) {
    std::fprintf(stderr, "EMU FAILURE: nested HotPath %s\n", what);
    std::abort();
  }
  g_hot_what = what;
  g_hot_allowed = allowed;
  g_hot_used = 0;
}
HotPath::~HotPath() { g_hot.fetch_sub(1); }
long HotPath::used() const { return g_hot_used.load(); }

bool pageable(const void* p) {
  std::lock_guard<std::mutex> lock(mem_mu());
  return find_block(p) == blocks().end();
}

cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (!g_strict_memory || n == 0) return cudaSuccess;
  const bool d = device_range(dst, n, "cudaMemcpy destination runs past the end of its device allocation");
  const bool s = device_range(src, n, "cudaMemcpy source runs past the end of its device allocation");
  bool want_d = d, want_s = s;
  switch (kind) {
    case cudaMemcpyHostToHost:
      want_d = false;
      want_s = false;
      break;
    case cudaMemcpyHostToDevice:
      want_d = true;
      want_s = false;
      break;
    case cudaMemcpyDeviceToHost:
      want_d = false;
      want_s = true;
      break;
    case cudaMemcpyDeviceToDevice:
      want_d = true;
      want_s = true;
      break;
    case cudaMemcpyDefault: break;
  }
  if (d != want_d)
    mem_fail(d ? "cudaMemcpy kind names host memory as destination, but it is device memory"
               : "cudaMemcpy kind names device memory as destination, but it is not",
             dst, n);
  if (s != want_s)
    mem_fail(s ? "cudaMemcpy kind names host memory as source, but it is device memory"
               : "cudaMemcpy kind names device memory as source, but it is not",
             src, n);
  return cudaSuccess;
}

cudaError_t check_set(void* p, size_t n) {
  if (!g_strict_memory || n == 0) return cudaSuccess;
  if (!device_range(p, n, "cudaMemset runs past the end of its device allocation")) {
    mem_fail("cudaMemset of memory that is not device memory", p, n);
  }
  return cudaSuccess;
}

}  // namespace emu

struct CUmemPoolHandle_st {
  int device;
};
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (emu::g_mempools == 0) return cudaErrorNotSupported;
  if (pool == nullptr || props == nullptr || props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice || props->location.id != 0) {
    return cudaErrorInvalidValue;
  }
  // Pools live as long as the context (the process): static storage, so that one left for
  // the context's end is no leak.
  static CUmemPoolHandle_st handles[64];
  static std::atomic<int> made{0};
  const int i = made.fetch_add(1);
  if (i >= 64) return cudaErrorMemoryAllocation;
  *pool = &handles[i];
  return cudaSuccess;
}
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { return pool == nullptr ? cudaErrorInvalidValue : cudaSuccess; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return pool == nullptr || attr != cudaMemPoolAttrReleaseThreshold || value == nullptr ? cudaErrorInvalidValue
                                                                                        : cudaSuccess;
}
// Stream-ordered: neither waits for the device, on a real GPU either.
cudaError_t cudaMallocFromPoolAsync(void** p, size_t n, cudaMemPool_t pool, cudaStream_t) {
  if (emu::g_mempools == 0) return cudaErrorNotSupported;
  if (pool == nullptr) return cudaErrorInvalidValue;
  *p = emu::alloc(n, emu::Kind::kDevice);
  return *p != nullptr || n == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaMalloc(void** p, size_t n) {
  emu::blocking_call("cudaMalloc");
  *p = emu::alloc(n, emu::Kind::kDevice);
  return *p != nullptr || n == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  emu::blocking_call("cudaFree");
  emu::sync_all();  // cudaFree waits for the device
  emu::release(p, emu::Kind::kDevice, "cudaFree");
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) {
  return emu::g_mempools == 0 ? cudaErrorNotSupported : cudaMalloc(p, n);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (emu::g_mempools == 0) return cudaErrorNotSupported;
  emu::enqueue(s, [p] { emu::release(p, emu::Kind::kDevice, "cudaFreeAsync"); });
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  emu::blocking_call("cudaHostAlloc");
  *p = emu::alloc(n, emu::Kind::kPinned);
  return *p != nullptr || n == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) {
  emu::blocking_call("cudaFreeHost");
  emu::sync_all();
  emu::release(p, emu::Kind::kPinned, "cudaFreeHost");
  return cudaSuccess;
}

// As CUDA 11 and later: device 0 for device allocations (interior pointers included), host
// for pinned ones, unregistered (still cudaSuccess) for any other address.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  if (attr == nullptr) return cudaErrorInvalidValue;
  *attr = cudaPointerAttributes{cudaMemoryTypeUnregistered, -2, nullptr, nullptr};
  std::lock_guard<std::mutex> lock(emu::mem_mu());
  auto it = emu::find_block(p);
  if (it == emu::blocks().end()) return cudaSuccess;
  if (it->second.kind == emu::Kind::kDevice) {
    *attr = cudaPointerAttributes{cudaMemoryTypeDevice, 0, const_cast<void*>(p), nullptr};
  } else {
    *attr = cudaPointerAttributes{cudaMemoryTypeHost, 0, const_cast<void*>(p), const_cast<void*>(p)};
  }
  return cudaSuccess;
}

// ---- Streams and events. ----
// Without deferral work is done when its call returns and these only keep state. With it
// (emu::g_defer) each created stream keeps a queue; ops run in queue order, one at a time
// process-wide (g_stream_mu, recursive: a wait op runs another stream's queue).

struct CUstream_st {
  unsigned flags;
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0;  // ops ever queued
  uint64_t done = 0;    // ops run (or running)
};
struct CUevent_st {
  unsigned flags;
  int not_ready;                  // queries left that report cudaErrorNotReady
  CUstream_st* stream = nullptr;  // deferred: the stream of the last record, and
  uint64_t seq = 0;               // how many of its ops precede the record
};

namespace emu {
bool g_defer = std::getenv("EMU_DEFER_STREAMS") != nullptr && std::atoi(std::getenv("EMU_DEFER_STREAMS")) != 0;
namespace {
std::recursive_mutex& stream_mu() {
  static auto* m = new std::recursive_mutex;
  return *m;
}
// Live streams (for the legacy stream's implicit waits) and destroyed ones, kept so that an
// event recorded on a destroyed stream still answers (its queue ran at destruction).
std::set<CUstream_st*>& live_streams() {
  static auto* s = new std::set<CUstream_st*>;
  return *s;
}
std::vector<CUstream_st*>& dead_streams() {
  static auto* s = new std::vector<CUstream_st*>;
  return *s;
}
void run_until(CUstream_st* s, uint64_t seq) {  // the caller holds stream_mu()
  while (s->done < seq && !s->queue.empty()) {
    std::function<void()> op = std::move(s->queue.front());
    s->queue.pop_front();
    ++s->done;
    op();
  }
}
void run_blocking_streams() {  // what work on the legacy stream waits for
  for (CUstream_st* t : live_streams()) {
    if (t->flags != cudaStreamNonBlocking) run_until(t, t->queued);
  }
}
}  // namespace

void enqueue(cudaStream_t s, std::function<void()> fn) {
  if (!g_defer) {
    fn();
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(stream_mu());
  if (s == nullptr) {
    run_blocking_streams();
    fn();
    return;
  }
  s->queue.push_back(std::move(fn));
  ++s->queued;
}

void sync_stream(cudaStream_t s) {
  if (!g_defer) return;
  std::lock_guard<std::recursive_mutex> lock(stream_mu());
  if (s == nullptr) {
    run_blocking_streams();
  } else {
    run_until(s, s->queued);
  }
}

void sync_all() {
  if (!g_defer) return;
  std::lock_guard<std::recursive_mutex> lock(stream_mu());
  for (CUstream_st* t : live_streams()) run_until(t, t->queued);
}
}  // namespace emu

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st{flags, {}, 0, 0};
  std::lock_guard<std::recursive_mutex> lock(emu::stream_mu());
  emu::live_streams().insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  std::lock_guard<std::recursive_mutex> lock(emu::stream_mu());
  emu::run_until(s, s->queued);  // CUDA lets queued work finish
  emu::live_streams().erase(s);
  emu::dead_streams().push_back(s);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  if (!emu::g_defer || e->stream == nullptr) return cudaSuccess;
  CUstream_st* producer = e->stream;
  const uint64_t seq = e->seq;
  emu::enqueue(s, [producer, seq] {
    std::lock_guard<std::recursive_mutex> lock(emu::stream_mu());
    emu::run_until(producer, seq);
  });
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  *e = new CUevent_st{flags, 0};
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  e->not_ready = emu::g_event_delay;
  e->stream = nullptr;
  if (emu::g_defer && s != nullptr) {
    std::lock_guard<std::recursive_mutex> lock(emu::stream_mu());
    e->stream = s;
    e->seq = s->queued;
  } else if (emu::g_defer) {
    emu::sync_stream(nullptr);  // the legacy stream's record follows the blocking streams' work
  }
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  if (e->not_ready > 0) {
    --e->not_ready;
    return cudaErrorNotReady;
  }
  // Deferred: a GPU finishes what it was given in the end; asked again, the work has run.
  if (e->stream != nullptr) {
    std::lock_guard<std::recursive_mutex> lock(emu::stream_mu());
    emu::run_until(e->stream, e->seq);
  }
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  emu::blocking_call("cudaEventSynchronize");
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  e->not_ready = 0;
  if (e->stream != nullptr) {
    std::lock_guard<std::recursive_mutex> lock(emu::stream_mu());
    emu::run_until(e->stream, e->seq);
  }
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  delete e;
  return cudaSuccess;
}
