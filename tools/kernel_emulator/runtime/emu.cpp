#include "emu.hpp"
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

void launch_impl(dim3 grid, dim3 block, std::function<void()> body) {
  if (block.y != 1 || block.z != 1 || grid.y != 1 || grid.z != 1) { std::fprintf(stderr, "1-D only\n"); std::abort(); }
  if (block.x % 32 != 0 || block.x > 1024 || grid.x == 0) { std::fprintf(stderr, "bad launch %u x %u\n", grid.x, block.x); std::abort(); }
  ++g_launches;
  g_body = &body;
  g_grid = Idx3{grid.x, 1, 1};
  g_bdim = Idx3{block.x, 1, 1};
  g_nthreads = static_cast<int>(block.x);
  static std::vector<Thread> threads(1024);
  for (unsigned i = 0; i < block.x; ++i) if (threads[i].stack.empty()) threads[i].stack.resize(256 * 1024);
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
      if (g_progress == before) { std::fprintf(stderr, "EMU FAILURE: deadlock in block %u\n", b); std::abort(); }
    }
  }
}
}  // namespace emu
