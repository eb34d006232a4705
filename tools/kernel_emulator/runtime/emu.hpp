// CPU emulation of the CUDA subset gradwire's kernels use, force-included into every
// translation unit (-include emu.hpp). Each CUDA thread is a fiber on one OS thread; the
// threads of a block are resumed round-robin, and blocks run one after another. Warp
// collectives and __syncthreads are rendezvous points that check every lane arrives with
// the same op and a full mask, so divergent collectives abort instead of hanging.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

namespace emu {
struct Idx3 {
  unsigned x = 0, y = 0, z = 0;
};
struct Thread {
  void* sp = nullptr;
  Idx3 tid;
  bool done = false;
  std::vector<char> stack;
};
struct Rendezvous {
  int arrived = 0;
  uint64_t gen = 0;
  int op = -1;
  uint64_t vals[1024], args[1024], results[1024];
};
extern Thread* current;
extern Idx3 g_block, g_grid, g_bdim;
extern std::vector<Rendezvous> g_warps;
extern Rendezvous g_block_rv;
extern uint64_t g_progress;
extern int g_nthreads;
void yield();

inline void fail(const char* what) {
  std::fprintf(stderr, "EMU FAILURE: %s (block %u thread %u)\n", what, g_block.x, current ? current->tid.x : 0u);
  std::abort();
}

enum Op { kBallot, kAll, kShfl, kShflUp, kShflDown, kReduceAdd, kMatchAny, kSync };

template <class Compute>
uint64_t collective(Rendezvous& rv, int members, int me, int op, uint64_t val, uint64_t arg, Compute compute) {
  if (rv.arrived == 0)
    rv.op = op;
  else if (rv.op != op)
    fail("lanes reached different collectives");
  rv.vals[me] = val;
  rv.args[me] = arg;
  const uint64_t gen = rv.gen;
  if (++rv.arrived == members) {
    compute(rv);
    rv.arrived = 0;
    ++rv.gen;
    ++g_progress;
  } else {
    while (rv.gen == gen) yield();
  }
  return rv.results[me];
}

inline Rendezvous& my_warp() { return g_warps[current->tid.x / 32]; }
inline int my_lane() { return current->tid.x % 32; }
inline void check_mask(unsigned mask) {
  if (mask != 0xffffffffu) fail("partial mask");
}

inline unsigned ballot(unsigned mask, bool p) {
  check_mask(mask);
  return static_cast<unsigned>(collective(my_warp(), 32, my_lane(), kBallot, p, 0, [](Rendezvous& rv) {
    uint64_t b = 0;
    for (int l = 0; l < 32; ++l) b |= (rv.vals[l] ? 1ull : 0ull) << l;
    for (int l = 0; l < 32; ++l) rv.results[l] = b;
  }));
}
// A warp exchange of any value up to 8 bytes: its bits go through collective(), and
// compute maps each lane's result from the lanes' values and arguments.
template <class T, class Compute>
T exchange(unsigned mask, T v, int op, uint64_t arg, Compute compute) {
  check_mask(mask);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = collective(my_warp(), 32, my_lane(), op, bits, arg, compute);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
template <class T>
T shfl(unsigned mask, T v, int src) {
  return exchange(mask, v, kShfl, static_cast<uint64_t>(src), [](Rendezvous& rv) {
    for (int l = 0; l < 32; ++l) {
      if (rv.args[l] >= 32) fail("shfl source lane out of range");
      rv.results[l] = rv.vals[rv.args[l]];
    }
  });
}
template <class T>
T shfl_up(unsigned mask, T v, unsigned d) {
  return exchange(mask, v, kShflUp, d, [](Rendezvous& rv) {
    for (int l = 0; l < 32; ++l) {
      if (rv.args[l] != rv.args[0]) fail("shfl_up delta differs");
      rv.results[l] = l >= static_cast<int>(rv.args[l]) ? rv.vals[l - rv.args[l]] : rv.vals[l];
    }
  });
}
template <class T>
T shfl_down(unsigned mask, T v, unsigned d) {
  return exchange(mask, v, kShflDown, d, [](Rendezvous& rv) {
    for (int l = 0; l < 32; ++l) {
      if (rv.args[l] != rv.args[0]) fail("shfl_down delta differs");
      rv.results[l] = l + rv.args[l] < 32 ? rv.vals[l + rv.args[l]] : rv.vals[l];
    }
  });
}
inline unsigned reduce_add(unsigned mask, unsigned v) {
  check_mask(mask);
  return static_cast<unsigned>(collective(my_warp(), 32, my_lane(), kReduceAdd, v, 0, [](Rendezvous& rv) {
    uint64_t s = 0;
    for (int l = 0; l < 32; ++l) s += rv.vals[l];
    for (int l = 0; l < 32; ++l) rv.results[l] = static_cast<uint32_t>(s);
  }));
}
// __match_any_sync on 32-bit values: each lane gets the mask of the lanes holding its value.
inline unsigned match_any(unsigned mask, unsigned v) {
  check_mask(mask);
  return static_cast<unsigned>(collective(my_warp(), 32, my_lane(), kMatchAny, v, 0, [](Rendezvous& rv) {
    for (int l = 0; l < 32; ++l) {
      uint64_t m = 0;
      for (int o = 0; o < 32; ++o) m |= (rv.vals[o] == rv.vals[l] ? 1ull : 0ull) << o;
      rv.results[l] = m;
    }
  }));
}
inline void syncthreads() {
  collective(g_block_rv, g_nthreads, current->tid.x, kSync, 0, 0, [](Rendezvous&) {});
}

void launch_impl(dim3 grid, dim3 block, std::function<void()> body);
// A launch is stream work: with deferred streams (cuda_runtime_api.h) it runs when something
// waits for its stream. The body captured the kernel's arguments by value at the launch, as
// CUDA copies them.
struct Launch {
  dim3 grid, block;
  cudaStream_t stream;
  template <class F>
  void operator()(F&& f) const {
    std::function<void()> body(std::forward<F>(f));
    const dim3 g = grid, b = block;
    enqueue(stream, [g, b, body] { launch_impl(g, b, body); });
  }
};
inline Launch launch(dim3 grid, dim3 block, size_t = 0, cudaStream_t stream = nullptr) {
  return Launch{grid, block, stream};
}
}  // namespace emu

#define threadIdx (emu::current->tid)
#define blockIdx (emu::g_block)
#define gridDim (emu::g_grid)
#define blockDim (emu::g_bdim)

inline unsigned __ballot_sync(unsigned m, bool p) { return emu::ballot(m, p); }
inline bool __all_sync(unsigned m, bool p) { return emu::ballot(m, p) == 0xffffffffu; }
template <class T>
T __shfl_sync(unsigned m, T v, int s) {
  return emu::shfl(m, v, s);
}
template <class T>
T __shfl_xor_sync(unsigned m, T v, int o) {
  return emu::shfl(m, v, emu::my_lane() ^ o);
}
template <class T>
T __shfl_down_sync(unsigned m, T v, unsigned d) {
  return emu::shfl_down(m, v, d);
}
template <class T>
T __shfl_up_sync(unsigned m, T v, unsigned d) {
  return emu::shfl_up(m, v, d);
}
inline unsigned __reduce_add_sync(unsigned m, unsigned v) { return emu::reduce_add(m, v); }
inline unsigned __match_any_sync(unsigned m, unsigned v) { return emu::match_any(m, v); }
inline void __syncthreads() { emu::syncthreads(); }
inline void __threadfence() {}
inline void __nanosleep(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
template <class T>
T __ldcg(const T* p) {
  return *p;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  unsigned o = *p;
  *p = o + v;
  return o;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  auto o = *p;
  *p = o + v;
  return o;
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
  unsigned o = *p;
  *p = o | v;
  return o;
}
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline double __dmul_rn(double a, double b) { return a * b; }
// Round-to-nearest single-precision ops: plain host arithmetic (SSE, -ffp-contract=off).
// A GPU's float arithmetic returns the canonical NaN (0x7fffffff) whatever NaN went in, where
// x86 keeps an operand's payload; with emu::g_canonical_nan set (sparse_harness) the
// emulated ops do as the GPU does, so host/device differences that come from NaN payloads show.
namespace emu {
extern bool g_canonical_nan;
inline float gpu_nan(float r) {
  if (!g_canonical_nan || r == r) return r;
  const unsigned u = 0x7fffffffu;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace emu
inline float __fadd_rn(float a, float b) { return emu::gpu_nan(a + b); }
inline float __fsub_rn(float a, float b) { return emu::gpu_nan(a - b); }
inline float __fmul_rn(float a, float b) { return emu::gpu_nan(a * b); }
inline float __fdiv_rn(float a, float b) { return emu::gpu_nan(a / b); }
using std::isnan;
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
