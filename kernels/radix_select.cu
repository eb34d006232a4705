#include "kernels/radix_select.cuh"

#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "common/cuda_check.hpp"
#include "compressors/hd.hpp"
#include "kernels/grid_size.cuh"
#include "kernels/precise_math.cuh"

namespace gw::kern {
namespace {

using ull = unsigned long long;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlocksPerSm = 4;  // at least this many blocks of the histogram kernels fit an SM
constexpr int kUnroll = 8;       // independent loads in flight per thread
constexpr uint32_t kFullMask = 0xffffffffu;

// Key digits: bits 20..30 (top), 10..19 (mid), 0..9 (low), as in compressors/topk_select.cpp.
constexpr uint32_t kTopBins = 1u << 11;
constexpr uint32_t kSubBins = 1u << 10;
constexpr int kTopShift = 20;
constexpr int kMidShift = 10;

// Marks: bit b of word w is position 32 w + b; a tile is one warp's 32 words.
constexpr uint64_t kWordBits = 32;
constexpr uint64_t kTileElems = 32 * kWordBits;

// Per-block shared counters are 32-bit; no block may count more than this many elements.
constexpr uint64_t kMaxPerBlock = uint64_t{1} << 30;

constexpr uint32_t kModeFull = 1;    // two more histogram passes over the input
constexpr uint32_t kModeGather = 2;  // the boundary bin is gathered and resolved on its own

// The histogram kernels, each with its own count of finished blocks.
enum DoneSlot { kDoneTop, kDoneMid, kDoneLow, kDoneCandMid, kDoneCandLow, kDoneSlots };

// Boundary bin, threshold and the histograms of one selection; zeroed before each.
struct SelectState {
  uint32_t skip;  // set by the gate: this selection does nothing
  uint32_t mode;
  uint32_t top;        // boundary bin of the top digit
  uint32_t prefix;     // top and mid digits of the threshold
  uint32_t threshold;  // the k-th largest key
  // The marking rule: key >= sure_from is chosen; cand_from <= key < sure_from is a
  // candidate (gather mode) or equal to the threshold (full mode).
  uint32_t sure_from;
  uint32_t cand_from;
  unsigned int done[kDoneSlots];
  ull k;           // how many to select (the gate may lower it)
  ull want;        // still wanted at the current digit
  ull ties;        // keys equal to the threshold that are taken (the lowest positions)
  ull cand_count;  // gathered candidates
  ull hist_top[kTopBins];
  ull hist_mid[kSubBins];
  ull hist_low[kSubBins];
};

struct TileCount {
  ull sure;
  ull eq;
};

struct TileSum {
  __host__ __device__ TileCount operator()(const TileCount& a, const TileCount& b) const {
    return TileCount{a.sure + b.sure, a.eq + b.eq};
  }
};

struct Marks {
  uint32_t* sure;    // chosen for certain
  uint32_t* eq;      // equal to the threshold (taken from the lowest position up)
  TileCount* tiles;  // per-tile popcounts of sure and eq
  ull words;
  ull num_tiles;
};

// ---- element sources: key(i) for the passes, index(p) and value(p) for the output ----

struct ArraySrc {
  static constexpr bool kPure = true;
  const float* x;
  __device__ uint32_t key(ull i) const { return hd::magnitude_key(x[i]); }
  __device__ ull index(ull p) const { return p; }
  __device__ float value(ull p) const { return x[p]; }
};

// First pass with error feedback: stores residual + src into residual as it reads.
struct AccumSrc {
  static constexpr bool kPure = false;
  const float* src;
  float* residual;
  __device__ uint32_t key(ull i) const {
    const float a = hd::add(residual[i], src[i]);
    residual[i] = a;
    return hd::magnitude_key(a);
  }
};

struct KeySrc {
  static constexpr bool kPure = true;
  const uint32_t* keys;
  __device__ uint32_t key(ull i) const { return keys[i]; }
};

template <class Idx>
struct ListSrc {
  const float* x;
  const Idx* list;
  __device__ ull index(ull p) const { return list[p]; }
  __device__ float value(ull p) const { return x[list[p]]; }
};

// ---- warp and block helpers ----

__device__ __forceinline__ uint32_t lane_id() { return threadIdx.x & 31; }

__device__ __forceinline__ ull warp_inclusive_sum(ull v) {
  for (int d = 1; d < 32; d <<= 1) {
    const ull t = __shfl_up_sync(kFullMask, v, d);
    if (lane_id() >= static_cast<uint32_t>(d)) v += t;
  }
  return v;
}

__device__ __forceinline__ uint32_t warp_exclusive_sum(uint32_t v) {
  uint32_t incl = v;
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t t = __shfl_up_sync(kFullMask, incl, d);
    if (lane_id() >= static_cast<uint32_t>(d)) incl += t;
  }
  return incl - v;
}

// Adds one to hist[bin] for each lane that takes part. Gradients crowd into a few bins (all
// zero in the worst case), so the lanes of a warp that hit one bin add their count once,
// from the lowest of them, rather than serializing one atomic each on a shared word.
// Call with the whole warp.
__device__ __forceinline__ void hist_add(uint32_t* hist, uint32_t bin, bool take) {
  if (__ballot_sync(kFullMask, take) == 0) return;
  constexpr uint32_t kNoBin = 0xffffffffu;  // bins are below 2^11
  const uint32_t peers = __match_any_sync(kFullMask, take ? bin : kNoBin);
  if (take && lane_id() == static_cast<uint32_t>(__ffs(peers) - 1)) atomicAdd(&hist[bin], __popc(peers));
}

__device__ void flush_hist(const uint32_t* shared_hist, ull* hist, uint32_t bins) {
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < bins; b += blockDim.x) {
    if (shared_hist[b] != 0) atomicAdd(&hist[b], static_cast<ull>(shared_hist[b]));
  }
}

// True in the block that finishes last; that block then sees every other block's atomics
// (each thread fences its own; the fences around the counter make its increment a release
// and its read an acquire).
__device__ bool last_block_done(unsigned int* done) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(done, 1u) == gridDim.x - 1;
    __threadfence();
  }
  __syncthreads();
  return last;
}

// Scanning bins from the top, the bin where the running count reaches want; *above gets the
// count in the bins above it. One warp, all lanes; want <= the histogram's total.
__device__ uint32_t find_boundary(const ull* hist, uint32_t bins, ull want, ull* above) {
  const uint32_t lane = lane_id();
  const uint32_t per = bins / 32;  // lane l sums the l-th segment from the top
  const uint32_t seg_end = bins - lane * per;
  ull sum = 0;
  for (uint32_t b = seg_end - per; b < seg_end; ++b) sum += __ldcg(hist + b);
  const ull incl = warp_inclusive_sum(sum);
  const uint32_t reached = __ballot_sync(kFullMask, incl >= want);
  const uint32_t seg = reached != 0 ? __ffs(reached) - 1 : 31;
  ull base = __shfl_sync(kFullMask, incl - sum, seg);
  const uint32_t end = bins - seg * per;
  for (uint32_t r = 0; r < per; r += 32) {
    const uint32_t b = end - 1 - r - lane;
    const ull h = __ldcg(hist + b);
    const ull run = warp_inclusive_sum(h);
    const uint32_t hit = __ballot_sync(kFullMask, base + run >= want);
    if (hit != 0) {
      const uint32_t j = __ffs(hit) - 1;
      *above = base + __shfl_sync(kFullMask, run - h, j);
      return end - 1 - r - j;
    }
    base += __shfl_sync(kFullMask, run, 31);
  }
  *above = base;  // not reached while want <= total
  return 0;
}

// The finishing steps of each digit, run by warp 0 of the last block.
__device__ void finish_top(SelectState* st, ull gather_cap) {
  const ull k = st->k;
  ull above = 0;
  const uint32_t bin = find_boundary(st->hist_top, kTopBins, k, &above);
  if (lane_id() != 0) return;
  st->top = bin;
  st->want = k - above;
  st->mode = __ldcg(&st->hist_top[bin]) <= gather_cap ? kModeGather : kModeFull;
  st->sure_from = (bin + 1) << kTopShift;
  st->cand_from = bin << kTopShift;
}

__device__ void finish_mid(SelectState* st) {
  const ull want = st->want;
  ull above = 0;
  const uint32_t bin = find_boundary(st->hist_mid, kSubBins, want, &above);
  if (lane_id() != 0) return;
  st->prefix = (st->top << (kTopShift - kMidShift)) | bin;
  st->want = want - above;
}

__device__ void finish_low(SelectState* st) {
  const ull want = st->want;
  ull above = 0;
  const uint32_t bin = find_boundary(st->hist_low, kSubBins, want, &above);
  if (lane_id() != 0) return;
  const uint32_t t = (st->prefix << kMidShift) | bin;
  st->threshold = t;
  st->ties = want - above;
  st->sure_from = t + 1;  // t <= 0x7fffffff, so no overflow
  st->cand_from = t;
}

// The histogram passes' walk over keys [0, count): each warp takes chunks of 32 * kUnroll
// keys (grid-stride), issues all kUnroll loads before using any, then calls
// fn(key, in_range) for each, every lane of the warp together (hist_add votes across it).
template <class Src, class Fn>
__device__ __forceinline__ void for_each_key(const Src& src, ull count, Fn&& fn) {
  const ull warp = (static_cast<ull>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const ull warps = static_cast<ull>(gridDim.x) * blockDim.x / 32;
  constexpr ull kChunk = 32 * kUnroll;
  for (ull base = warp * kChunk; base < count; base += warps * kChunk) {
    uint32_t key[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const ull i = base + u * 32 + lane_id();
      key[u] = i < count ? src.key(i) : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fn(key[u], base + u * 32 + lane_id() < count);
  }
}

// ---- kernels ----

// hist_top of all keys; the last block finds the boundary bin for k and picks the mode.
template <class Src>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    top_hist_kernel(Src src, ull count, SelectState* st, ull gather_cap) {
  if (st->skip != 0) return;  // the same for every block: nobody counts, nobody finishes
  __shared__ uint32_t hist[kTopBins];
  for (uint32_t b = threadIdx.x; b < kTopBins; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  for_each_key(src, count, [&](uint32_t key, bool in) { hist_add(hist, key >> kTopShift, in); });
  flush_hist(hist, st->hist_top, kTopBins);
  if (last_block_done(&st->done[kDoneTop]) && threadIdx.x < 32) finish_top(st, gather_cap);
}

// The mid (level 2) or low (level 3) digit's histogram over the keys that match the digits
// found so far, when the state's mode is `mode` (never in a skipped selection: its mode stays
// 0); over st->cand_count keys when count_in_state. The last block finds that digit's
// boundary.
template <class Src>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    sub_hist_kernel(Src src, ull count, SelectState* st, int level, uint32_t mode, bool count_in_state, int done_slot) {
  if (st->mode != mode) return;
  if (count_in_state) count = st->cand_count;
  __shared__ uint32_t hist[kSubBins];
  for (uint32_t b = threadIdx.x; b < kSubBins; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  const int match_shift = level == 2 ? kTopShift : kMidShift;
  const uint32_t match = level == 2 ? st->top : st->prefix;
  const int bin_shift = level == 2 ? kMidShift : 0;
  for_each_key(src, count, [&](uint32_t key, bool in) {
    hist_add(hist, (key >> bin_shift) & (kSubBins - 1), in && (key >> match_shift) == match);
  });
  ull* global_hist = level == 2 ? st->hist_mid : st->hist_low;
  flush_hist(hist, global_hist, kSubBins);
  if (!last_block_done(&st->done[done_slot]) || threadIdx.x >= 32) return;
  if (level == 2) {
    finish_mid(st);
  } else {
    finish_low(st);
  }
}

// One warp's tile: lane w ends with the bitmask words of positions 32 w .. 32 w + 31, `sure`
// for key >= sure_from and `low` for cand_from <= key < sure_from.
template <class Src>
__device__ void mark_tile(const Src& src, ull count, ull tile, uint32_t sure_from, uint32_t cand_from, uint32_t& sure,
                          uint32_t& low) {
  const ull base = tile * kTileElems;
#pragma unroll
  for (int c = 0; c < 32; c += kUnroll) {
    uint32_t key[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const ull i = base + (c + u) * kWordBits + lane_id();
      key[u] = i < count ? src.key(i) : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool in = base + (c + u) * kWordBits + lane_id() < count;
      const uint32_t s = __ballot_sync(kFullMask, in && key[u] >= sure_from);
      const uint32_t l = __ballot_sync(kFullMask, in && key[u] >= cand_from && key[u] < sure_from);
      if (lane_id() == static_cast<uint32_t>(c + u)) {
        sure = s;
        low = l;
      }
    }
  }
}

// Appends the positions (and keys) set in `low` to the gathered list: one global atomic per
// block and round, so that the list's counter is not a hot spot. The whole block calls it.
template <class Src, class Idx>
__device__ void gather_candidates(const Src& src, ull tile, uint32_t low, SelectState* st, Idx* pos_out,
                                  uint32_t* key_out, ull cap) {
  __shared__ uint32_t warp_offset[kWarps];
  __shared__ ull block_base;
  const uint32_t lane = lane_id(), warp = threadIdx.x / 32;
  const uint32_t n = __popc(low);
  const uint32_t offset = warp_exclusive_sum(n);
  if (lane == 31) warp_offset[warp] = offset + n;
  __syncthreads();
  if (threadIdx.x == 0) {
    ull total = 0;
    for (int w = 0; w < kWarps; ++w) {
      const uint32_t c = warp_offset[w];
      warp_offset[w] = static_cast<uint32_t>(total);
      total += c;
    }
    block_base = total != 0 ? atomicAdd(&st->cand_count, total) : 0;
  }
  __syncthreads();
  ull pos = block_base + warp_offset[warp] + offset;
  for (uint32_t bits = low; bits != 0; bits &= bits - 1, ++pos) {
    const ull i = tile * kTileElems + lane * kWordBits + (__ffs(bits) - 1);
    if (pos < cap) {
      pos_out[pos] = static_cast<Idx>(i);
      key_out[pos] = src.key(i);
    }
  }
  __syncthreads();  // warp_offset is reused by the next round
}

// Writes the bitmasks and per-tile counts by the state's rule. In gather mode (only when
// kMayGather) the `low` elements go to the gathered list and eq stays zero for now.
template <class Src, class Idx, bool kMayGather>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    mark_kernel(Src src, ull count, SelectState* st, Marks marks, Idx* gather_pos, uint32_t* gather_keys,
                ull gather_cap) {
  static_assert(!kMayGather || Src::kPure, "gathering reads a key a second time");
  if (st->skip != 0) return;
  const bool gather = kMayGather && st->mode == kModeGather;
  const uint32_t sure_from = st->sure_from;
  const uint32_t cand_from = st->cand_from;
  const uint32_t lane = lane_id();
  const ull rounds = (marks.num_tiles + kWarps - 1) / kWarps;
  for (ull r = blockIdx.x; r < rounds; r += gridDim.x) {
    const ull tile = r * kWarps + threadIdx.x / 32;
    uint32_t sure = 0, low = 0;
    if (tile < marks.num_tiles) {
      mark_tile(src, count, tile, sure_from, cand_from, sure, low);
      const uint32_t eq = gather ? 0 : low;
      const ull word = tile * 32 + lane;
      if (word < marks.words) {
        marks.sure[word] = sure;
        marks.eq[word] = eq;
      }
      const uint32_t nsure = __reduce_add_sync(kFullMask, __popc(sure));
      const uint32_t neq = __reduce_add_sync(kFullMask, __popc(eq));
      if (lane == 0) marks.tiles[tile] = TileCount{nsure, neq};
    }
    if constexpr (kMayGather) {
      if (gather) gather_candidates(src, tile, low, st, gather_pos, gather_keys, gather_cap);
    }
  }
}

// Gather mode (never in a skipped selection): sets the gathered candidates' bits once the
// threshold is known.
template <class Idx>
__global__ void __launch_bounds__(kThreads) patch_kernel(const SelectState* st, Marks marks, const Idx* gather_pos,
                                                         const uint32_t* gather_keys, ull gather_cap) {
  if (st->mode != kModeGather) return;
  const ull n = min(st->cand_count, gather_cap);
  const uint32_t t = st->threshold;
  const ull stride = static_cast<ull>(gridDim.x) * blockDim.x;
  for (ull j = static_cast<ull>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
    const uint32_t key = gather_keys[j];
    if (key < t) continue;
    const ull p = gather_pos[j];
    const uint32_t bit = 1u << (p % kWordBits);
    if (key > t) {
      atomicOr(&marks.sure[p / kWordBits], bit);
      atomicAdd(&marks.tiles[p / kTileElems].sure, 1ull);
    } else {
      atomicOr(&marks.eq[p / kWordBits], bit);
      atomicAdd(&marks.tiles[p / kTileElems].eq, 1ull);
    }
  }
}

// The lowest n set bits of bits.
__device__ __forceinline__ uint32_t lowest_set_bits(uint32_t bits, uint32_t n) {
  if (n >= static_cast<uint32_t>(__popc(bits))) return bits;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < n; ++i) {
    kept |= bits & (0u - bits);
    bits &= bits - 1;
  }
  return kept;
}

// Emits the chosen positions in increasing order: every sure bit, and eq bits while fewer
// than `ties` eq bits come before them. A warp per tile, a lane per word. With total set,
// stores the number chosen there.
template <class Emit>
__global__ void __launch_bounds__(kThreads) write_kernel(Emit emit, const SelectState* st, Marks marks,
                                                         const TileCount* before, bool take_all_ties, ull* total) {
  if (st->skip != 0) return;
  const ull ties = take_all_ties ? ~0ull : st->ties;
  const uint32_t lane = lane_id();
  const ull warps = static_cast<ull>(gridDim.x) * blockDim.x / 32;
  for (ull t = (static_cast<ull>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; t < marks.num_tiles; t += warps) {
    const TileCount here = marks.tiles[t];
    const TileCount pre = before[t];
    if (total != nullptr && t == marks.num_tiles - 1 && lane == 0) {
      *total = pre.sure + here.sure + min(pre.eq + here.eq, ties);
    }
    if (here.sure == 0 && (here.eq == 0 || pre.eq >= ties)) continue;
    const ull word = t * 32 + lane;
    uint32_t sure = 0, eq = 0;
    if (word < marks.words) {
      sure = marks.sure[word];
      eq = marks.eq[word];
    }
    const uint32_t nsure = __popc(sure), neq = __popc(eq);
    const uint32_t sure_before = warp_exclusive_sum(nsure);
    const ull eq_before = pre.eq + warp_exclusive_sum(neq);
    const ull room = ties > eq_before ? ties - eq_before : 0;
    const uint32_t take = room < neq ? static_cast<uint32_t>(room) : neq;
    ull pos = pre.sure + sure_before + min(eq_before, ties);
    for (uint32_t bits = sure | lowest_set_bits(eq, take); bits != 0; bits &= bits - 1, ++pos) {
      emit(pos, t * kTileElems + lane * kWordBits + (__ffs(bits) - 1));
    }
  }
}

template <class Idx, class Src>
struct PayloadEmit {
  Src src;
  SparseOut<Idx> out;
  __device__ void operator()(ull pos, ull p) const {
    const ull i = src.index(p);
    const float v = src.value(p);
    out.index[pos] = static_cast<Idx>(i);
    float* values = out.kept != nullptr ? reinterpret_cast<float*>(out.index + *out.kept) : out.value;
    values[pos] = v;
    if (out.residual != nullptr) out.residual[i] = hd::sub(v, v);
  }
};

template <class Idx>
struct CandidateEmit {
  const float* x;
  Idx* cand;
  uint32_t* keys;
  ull cap;
  __device__ void operator()(ull pos, ull p) const {
    if (pos >= cap) return;
    cand[pos] = static_cast<Idx>(p);
    keys[pos] = hd::magnitude_key(x[p]);
  }
};

// Zeroes the state of one selection and applies its gate: how many to select, and whether
// this selection runs at all. One block.
__global__ void __launch_bounds__(kThreads) init_state_kernel(SelectState* st, ull k, SelectGate gate) {
  static_assert(sizeof(SelectState) % sizeof(uint32_t) == 0, "the state is zeroed by words");
  auto* words = reinterpret_cast<uint32_t*>(st);
  for (uint32_t i = threadIdx.x; i < sizeof(SelectState) / sizeof(uint32_t); i += blockDim.x) words[i] = 0;
  __syncthreads();
  if (threadIdx.x != 0) return;
  ull want = k;
  bool run = true;
  if (gate.count != nullptr) {
    const ull c = *gate.count;
    run = (c > gate.cap) == gate.over_cap;
    if (!gate.over_cap && c < want) want = c;
  }
  st->k = want;
  st->skip = run && want > 0 ? 0 : 1;
}

// ---- host side ----

// Blocks for a grid-stride histogram pass of `kernel` over count keys: enough for the work,
// at most the wave the occupancy query says fits the device (more would only queue behind
// it), and enough that no block counts more than kMaxPerBlock.
template <class Kernel>
Result<unsigned int> pass_blocks(Kernel kernel, ull count) {
  GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(kernel, kThreads, count, ull{kThreads} * kUnroll));
  return std::max<unsigned int>(blocks, static_cast<unsigned int>((count + kMaxPerBlock - 1) / kMaxPerBlock));
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Device memory of one selection over count positions (slots 0 to 4).
template <class Idx>
struct Work {
  SelectState* st = nullptr;
  Marks marks{};
  TileCount* before = nullptr;
  void* scan_temp = nullptr;
  size_t scan_bytes = 0;
  Idx* gather_pos = nullptr;
  uint32_t* gather_keys = nullptr;
  ull gather_cap = 0;
};

template <class Idx>
Result<Work<Idx>> prepare(ull count, ull gather_cap, ull k, const SelectGate& gate, DeviceScratch& scratch,
                          cudaStream_t stream) {
  Work<Idx> w;
  GW_ASSIGN_OR_RETURN(w.st, scratch.get<SelectState>(0, 1));
  w.marks.words = (count + kWordBits - 1) / kWordBits;
  w.marks.num_tiles = (count + kTileElems - 1) / kTileElems;
  const size_t mask_bytes = align_up(w.marks.words * sizeof(uint32_t));
  GW_ASSIGN_OR_RETURN(uint8_t * masks, scratch.get<uint8_t>(1, 2 * mask_bytes));
  w.marks.sure = reinterpret_cast<uint32_t*>(masks);
  w.marks.eq = reinterpret_cast<uint32_t*>(masks + mask_bytes);
  GW_ASSIGN_OR_RETURN(TileCount * tiles, scratch.get<TileCount>(2, 2 * w.marks.num_tiles));
  w.marks.tiles = tiles;
  w.before = tiles + w.marks.num_tiles;
  if (gather_cap > 0) {
    const size_t pos_bytes = align_up(gather_cap * sizeof(Idx));
    GW_ASSIGN_OR_RETURN(uint8_t * g, scratch.get<uint8_t>(3, pos_bytes + gather_cap * sizeof(uint32_t)));
    w.gather_pos = reinterpret_cast<Idx*>(g);
    w.gather_keys = reinterpret_cast<uint32_t*>(g + pos_bytes);
    w.gather_cap = gather_cap;
  }
  GW_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveScan(nullptr, w.scan_bytes, w.marks.tiles, w.before, TileSum{},
                                                         TileCount{0, 0}, w.marks.num_tiles, stream));
  GW_ASSIGN_OR_RETURN(w.scan_temp, scratch.get<uint8_t>(4, w.scan_bytes));
  init_state_kernel<<<1, kThreads, 0, stream>>>(w.st, k, gate);
  GW_RETURN_IF_ERROR(launch_status("init_state_kernel"));
  return w;
}

// The three digits by full histogram passes (the second and third run only in full mode).
template <class FirstSrc, class Src>
Status find_threshold(const FirstSrc& first, const Src& src, ull count, ull gather_cap, SelectState* st,
                      cudaStream_t stream) {
  GW_ASSIGN_OR_RETURN(const unsigned int top_blocks, pass_blocks(top_hist_kernel<FirstSrc>, count));
  top_hist_kernel<<<top_blocks, kThreads, 0, stream>>>(first, count, st, gather_cap);
  GW_RETURN_IF_ERROR(launch_status("top_hist_kernel"));
  GW_ASSIGN_OR_RETURN(const unsigned int blocks, pass_blocks(sub_hist_kernel<Src>, count));
  sub_hist_kernel<<<blocks, kThreads, 0, stream>>>(src, count, st, 2, kModeFull, false, kDoneMid);
  GW_RETURN_IF_ERROR(launch_status("sub_hist_kernel (mid)"));
  sub_hist_kernel<<<blocks, kThreads, 0, stream>>>(src, count, st, 3, kModeFull, false, kDoneLow);
  return launch_status("sub_hist_kernel (low)");
}

// Marks by the state's rule, then the exclusive scan over tiles.
template <class Src, class Idx, bool kMayGather>
Status mark(const Src& src, ull count, const Work<Idx>& w, cudaStream_t stream) {
  GW_ASSIGN_OR_RETURN(const unsigned int blocks,
                      grid_for(mark_kernel<Src, Idx, kMayGather>, kThreads, w.marks.num_tiles, kWarps));
  mark_kernel<Src, Idx, kMayGather>
      <<<blocks, kThreads, 0, stream>>>(src, count, w.st, w.marks, w.gather_pos, w.gather_keys, w.gather_cap);
  return launch_status("mark_kernel");
}

template <class Idx>
Status resolve_gathered(const Work<Idx>& w, cudaStream_t stream) {
  const KeySrc keys{w.gather_keys};
  GW_ASSIGN_OR_RETURN(const unsigned int blocks, pass_blocks(sub_hist_kernel<KeySrc>, w.gather_cap));
  sub_hist_kernel<<<blocks, kThreads, 0, stream>>>(keys, 0, w.st, 2, kModeGather, true, kDoneCandMid);
  GW_RETURN_IF_ERROR(launch_status("sub_hist_kernel (gathered mid)"));
  sub_hist_kernel<<<blocks, kThreads, 0, stream>>>(keys, 0, w.st, 3, kModeGather, true, kDoneCandLow);
  GW_RETURN_IF_ERROR(launch_status("sub_hist_kernel (gathered low)"));
  GW_ASSIGN_OR_RETURN(const unsigned int patch_blocks, grid_for(patch_kernel<Idx>, kThreads, w.gather_cap, kThreads));
  patch_kernel<<<patch_blocks, kThreads, 0, stream>>>(w.st, w.marks, w.gather_pos, w.gather_keys, w.gather_cap);
  return launch_status("patch_kernel");
}

template <class Emit, class Idx>
Status scan_and_write(const Emit& emit, const Work<Idx>& w, bool take_all_ties, ull* total, cudaStream_t stream) {
  size_t bytes = w.scan_bytes;
  GW_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveScan(w.scan_temp, bytes, w.marks.tiles, w.before, TileSum{},
                                                         TileCount{0, 0}, w.marks.num_tiles, stream));
  GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(write_kernel<Emit>, kThreads, w.marks.num_tiles, kWarps));
  write_kernel<<<blocks, kThreads, 0, stream>>>(emit, w.st, w.marks, w.before, take_all_ties, total);
  return launch_status("write_kernel");
}

// Gathering the boundary bin pays while it is a small part of the input; past this it takes
// the two extra histogram passes instead of more memory.
ull gather_cap_for(ull n) { return std::min<ull>(n, std::max<ull>(ull{1} << 16, n / 16)); }

}  // namespace

template <class Idx>
Status select_topk(const SelectArray& in, uint64_t k, const SparseOut<Idx>& out, DeviceScratch& scratch,
                   cudaStream_t stream, const SelectGate& gate) {
  if (k == 0) return Status::ok();
  const ull n = in.n;
  GW_ASSIGN_OR_RETURN(Work<Idx> w, prepare<Idx>(n, gather_cap_for(n), k, gate, scratch, stream));
  const ArraySrc x{in.values()};
  if (in.src != nullptr && in.residual != nullptr) {
    GW_RETURN_IF_ERROR(find_threshold(AccumSrc{in.src, in.residual}, x, n, w.gather_cap, w.st, stream));
  } else {
    GW_RETURN_IF_ERROR(find_threshold(x, x, n, w.gather_cap, w.st, stream));
  }
  GW_RETURN_IF_ERROR((mark<ArraySrc, Idx, true>(x, n, w, stream)));
  GW_RETURN_IF_ERROR(resolve_gathered(w, stream));
  return scan_and_write(PayloadEmit<Idx, ArraySrc>{x, out}, w, false, nullptr, stream);
}

template <class Idx>
Status select_topk(const SelectList<Idx>& in, uint64_t k, const SparseOut<Idx>& out, DeviceScratch& scratch,
                   cudaStream_t stream, const SelectGate& gate) {
  if (k == 0) return Status::ok();
  // Lists are short (dgc's candidates): no gathering, three histogram passes over the keys.
  GW_ASSIGN_OR_RETURN(Work<Idx> w, prepare<Idx>(in.count, 0, k, gate, scratch, stream));
  const KeySrc keys{in.keys};
  GW_RETURN_IF_ERROR(find_threshold(keys, keys, in.count, 0, w.st, stream));
  GW_RETURN_IF_ERROR((mark<KeySrc, Idx, false>(keys, in.count, w, stream)));
  return scan_and_write(PayloadEmit<Idx, ListSrc<Idx>>{ListSrc<Idx>{in.x, in.index}, out}, w, false, nullptr, stream);
}

template <class Idx>
Status select_at_least_kth(const uint32_t* keys, uint64_t m, uint64_t rank, const SelectArray& in, Idx* cand,
                           uint32_t* cand_keys, uint64_t cap, uint64_t* count, DeviceScratch& scratch,
                           cudaStream_t stream) {
  const ull n = in.n;
  GW_ASSIGN_OR_RETURN(Work<Idx> w, prepare<Idx>(n, 0, rank, SelectGate{}, scratch, stream));
  const KeySrc sample{keys};
  // Full mode over the sample: the state ends with sure_from = T + 1 and cand_from = T, so
  // the marks split key > T (sure) and key == T (eq); all of both are written out.
  GW_RETURN_IF_ERROR(find_threshold(sample, sample, m, 0, w.st, stream));
  const ArraySrc x{in.values()};
  if (in.src != nullptr && in.residual != nullptr) {
    GW_RETURN_IF_ERROR((mark<AccumSrc, Idx, false>(AccumSrc{in.src, in.residual}, n, w, stream)));
  } else {
    GW_RETURN_IF_ERROR((mark<ArraySrc, Idx, false>(x, n, w, stream)));
  }
  return scan_and_write(CandidateEmit<Idx>{x.x, cand, cand_keys, cap}, w, true, reinterpret_cast<ull*>(count), stream);
}

template Status select_topk<uint32_t>(const SelectArray&, uint64_t, const SparseOut<uint32_t>&, DeviceScratch&,
                                      cudaStream_t, const SelectGate&);
template Status select_topk<uint64_t>(const SelectArray&, uint64_t, const SparseOut<uint64_t>&, DeviceScratch&,
                                      cudaStream_t, const SelectGate&);
template Status select_topk<uint32_t>(const SelectList<uint32_t>&, uint64_t, const SparseOut<uint32_t>&, DeviceScratch&,
                                      cudaStream_t, const SelectGate&);
template Status select_topk<uint64_t>(const SelectList<uint64_t>&, uint64_t, const SparseOut<uint64_t>&, DeviceScratch&,
                                      cudaStream_t, const SelectGate&);
template Status select_at_least_kth<uint32_t>(const uint32_t*, uint64_t, uint64_t, const SelectArray&, uint32_t*,
                                              uint32_t*, uint64_t, uint64_t*, DeviceScratch&, cudaStream_t);
template Status select_at_least_kth<uint64_t>(const uint32_t*, uint64_t, uint64_t, const SelectArray&, uint64_t*,
                                              uint32_t*, uint64_t, uint64_t*, DeviceScratch&, cudaStream_t);

}  // namespace gw::kern
