#include "compressors/topk_select.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "compressors/element_io.hpp"
#include "compressors/hd.hpp"
#include "compressors/host_simd.hpp"

namespace gw::detail {
namespace {

constexpr int kTopBits = 11;  // bits 20..30 of the 31-bit magnitude key
constexpr int kMidBits = 10;  // bits 10..19
constexpr int kLowBits = 10;  // bits 0..9
constexpr uint32_t kTopBins = 1u << kTopBits;
constexpr uint32_t kSubBins = 1u << 10;
constexpr int kTopShift = kMidBits + kLowBits;
constexpr int kSubHists = 4;         // interleaved copies of the top histogram
constexpr uint64_t kScanBlock = 16;  // elements per block of the selecting pass

inline uint32_t top_bin(float v) { return hd::magnitude_key(v) >> kTopShift; }

// hist[b] = number of elements whose key has top bits b. Four sub-histograms take
// consecutive elements in turn, so a run of equal bins (common: gradients crowd into a few
// exponents) does not serialize on one counter's load-increment-store; their 32-bit
// counters are folded into hist every 2^30 elements.
void top_histogram(const float* x, uint64_t n, uint64_t* hist, uint32_t* sub) {
  std::memset(hist, 0, kTopBins * sizeof(uint64_t));
  constexpr uint64_t kChunk = uint64_t{1} << 30;
  for (uint64_t c0 = 0; c0 < n; c0 += kChunk) {
    const uint64_t c1 = std::min(n, c0 + kChunk);
    std::memset(sub, 0, kSubHists * kTopBins * sizeof(uint32_t));
    uint64_t i = c0;
    for (; i + kSubHists <= c1; i += kSubHists) {
      for (int h = 0; h < kSubHists; ++h) ++sub[h * kTopBins + top_bin(x[i + h])];
    }
    for (; i < c1; ++i) ++sub[top_bin(x[i])];
    for (uint32_t b = 0; b < kTopBins; ++b) {
      uint64_t total = 0;
      for (int h = 0; h < kSubHists; ++h) total += sub[h * kTopBins + b];
      hist[b] += total;
    }
  }
}

// Appends, in index order, the positions with top bin above `top` to winners and those
// with top bin equal to `top` to cand. Blocks of kScanBlock elements with no key at or above
// the boundary bin (most of them when k is small) cost one vectorized compare; the others
// append without branches (each array needs room for its final count plus one).
template <class Idx>
void split_by_top_bin(const float* x, uint64_t n, uint32_t top, Idx* winners, uint64_t& nw, Idx* cand, uint64_t& nc) {
  const uint32_t top_key = top << kTopShift;  // key >= top_key <=> bin >= top
  uint64_t w = 0, c = 0;
  auto append = [&](uint64_t i) {
    const uint32_t bin = top_bin(x[i]);
    winners[w] = static_cast<Idx>(i);
    w += bin > top ? 1 : 0;
    cand[c] = static_cast<Idx>(i);
    c += bin == top ? 1 : 0;
  };
  uint64_t i = 0;
  for (; i + kScanBlock <= n; i += kScanBlock) {
    uint32_t hit = 0;
    for (uint64_t j = 0; j < kScanBlock; ++j) hit |= hd::magnitude_key(x[i + j]) >= top_key ? 1u : 0u;
    if (hit == 0) continue;
    for (uint64_t j = 0; j < kScanBlock; ++j) append(i + j);
  }
  for (; i < n; ++i) append(i);
  nw = w;
  nc = c;
}

// Finds the bin, scanning from the top, that holds the want-th largest; sets above to the
// count in higher bins.
uint32_t boundary_bin(const uint64_t* hist, uint32_t bins, uint64_t want, uint64_t& above) {
  above = 0;
  for (uint32_t b = bins; b-- > 0;) {
    if (above + hist[b] >= want) return b;
    above += hist[b];
  }
  return 0;  // unreachable while want <= total
}

// Resolves the exact threshold key inside cand (all with the same top bits) for `want`
// winners; returns the threshold and how many of the keys equal to it are taken.
template <class Idx>
uint32_t resolve_threshold(const float* x, const Idx* cand, uint64_t c, uint32_t top, uint64_t want,
                           uint64_t& ties_taken) {
  uint64_t hist[kSubBins];
  std::memset(hist, 0, sizeof hist);
  for (uint64_t i = 0; i < c; ++i) ++hist[(hd::magnitude_key(x[cand[i]]) >> kLowBits) & (kSubBins - 1)];
  uint64_t above = 0;
  const uint32_t mid = boundary_bin(hist, kSubBins, want, above);
  want -= above;
  const uint32_t prefix = (top << (kMidBits + kLowBits)) | (mid << kLowBits);
  std::memset(hist, 0, sizeof hist);
  for (uint64_t i = 0; i < c; ++i) {
    const uint32_t key = hd::magnitude_key(x[cand[i]]);
    if ((key >> kLowBits) == (prefix >> kLowBits)) ++hist[key & (kSubBins - 1)];
  }
  const uint32_t low = boundary_bin(hist, kSubBins, want, above);
  ties_taken = want - above;
  return prefix | low;
}

// Keeps, in order, the candidates above the threshold and the first ties_taken equal to it.
template <class Idx>
uint64_t filter_candidates(const float* x, Idx* cand, uint64_t c, uint32_t threshold, uint64_t ties_taken) {
  uint64_t kept = 0;
  for (uint64_t i = 0; i < c; ++i) {
    const uint32_t key = hd::magnitude_key(x[cand[i]]);
    if (key > threshold || (key == threshold && ties_taken > 0)) {
      if (key == threshold) --ties_taken;
      cand[kept++] = cand[i];
    }
  }
  return kept;
}

template <class Idx>
void merge_sorted(const Idx* a, uint64_t na, const Idx* b, uint64_t nb, Idx* out) {
  std::merge(a, a + na, b, b + nb, out);
}

}  // namespace

template <class Idx>
void select_topk(const float* x, uint64_t n, uint64_t k, Idx* out, Workspace& ws) {
  if (k == 0) return;
  if (k == n) {
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<Idx>(i);
    return;
  }
  // Slot 1: the histogram, then the sub-histograms' 32-bit counters.
  auto* hist = ws.get<uint64_t>(1, kTopBins + kSubHists * kTopBins / 2);
  top_histogram(x, n, hist, reinterpret_cast<uint32_t*>(hist + kTopBins));
  uint64_t above = 0;
  const uint32_t top = boundary_bin(hist, kTopBins, k, above);
  const uint64_t in_bin = hist[top];

  Idx* winners = ws.get<Idx>(2, above + 1);
  Idx* cand = ws.get<Idx>(3, in_bin + 1);
  uint64_t nw = 0, nc = 0;
  split_by_top_bin(x, n, top, winners, nw, cand, nc);
  uint64_t ties = 0;
  const uint32_t threshold = resolve_threshold(x, cand, nc, top, k - above, ties);
  nc = filter_candidates(x, cand, nc, threshold, ties);
  merge_sorted(winners, nw, cand, nc, out);
}

template <class Idx>
void select_topk_among(const float* x, const Idx* cand, uint64_t c, uint64_t k, Idx* out, Workspace& ws) {
  if (k == 0) return;
  if (k >= c) {
    std::copy(cand, cand + c, out);
    return;
  }
  uint64_t hist[kTopBins];
  std::memset(hist, 0, sizeof hist);
  for (uint64_t i = 0; i < c; ++i) ++hist[hd::magnitude_key(x[cand[i]]) >> (kMidBits + kLowBits)];
  uint64_t above = 0;
  const uint32_t top = boundary_bin(hist, kTopBins, k, above);
  Idx* winners = ws.get<Idx>(2, above + 1);
  Idx* bin = ws.get<Idx>(3, hist[top] + 1);
  uint64_t nw = 0, nb = 0;
  for (uint64_t i = 0; i < c; ++i) {
    const uint32_t b = hd::magnitude_key(x[cand[i]]) >> (kMidBits + kLowBits);
    if (b > top) winners[nw++] = cand[i];
    if (b == top) bin[nb++] = cand[i];
  }
  uint64_t ties = 0;
  const uint32_t threshold = resolve_threshold(x, bin, nb, top, k - above, ties);
  nb = filter_candidates(x, bin, nb, threshold, ties);
  merge_sorted(winners, nw, bin, nb, out);
}

namespace {

// The last elements, one at a time, from position i with c already collected.
template <class Idx>
GW_INLINE_HOT uint64_t append_tail(const float* x, uint64_t i, uint64_t n, uint32_t lo, Idx* cand, uint64_t c,
                                   uint64_t cap) {
  for (; i < n; ++i) {
    cand[c] = static_cast<Idx>(i);
    c += hd::magnitude_key(x[i]) >= lo ? 1 : 0;
    if (c > cap) return c;
  }
  return c;
}

// acc += add over [i, n), one element at a time, collecting from the sums as append_tail does
// until there are more than cap (then only adding).
template <class Idx>
GW_INLINE_HOT uint64_t add_tail(float* acc, const float* add, uint64_t i, uint64_t n, uint32_t lo, Idx* cand,
                                uint64_t c, uint64_t cap) {
  for (; i < n; ++i) {
    const float v = acc[i] + add[i];
    acc[i] = v;
    if (c <= cap) {
      cand[c] = static_cast<Idx>(i);
      c += hd::magnitude_key(v) >= lo ? 1 : 0;
    }
  }
  return c;
}

template <class Idx>
GW_INLINE_HOT uint64_t add_collect_generic(float* acc, const float* add, uint64_t n, uint32_t lo, Idx* cand,
                                           uint64_t cap) {
  return add_tail(acc, add, 0, n, lo, cand, 0, cap);
}

// The collecting pass without vector instructions. Blocks of kScanBlock with no key at or
// above lo (most of them, when lo is near the threshold) cost one compare each; the others
// append without branches.
template <class Idx>
GW_INLINE_HOT uint64_t collect_block_scan(const float* x, uint64_t n, uint32_t lo, Idx* cand, uint64_t cap) {
  uint64_t c = 0;
  uint64_t i = 0;
  for (; i + kScanBlock <= n; i += kScanBlock) {
    uint32_t hit = 0;
    for (uint64_t j = 0; j < kScanBlock; ++j) hit |= hd::magnitude_key(x[i + j]) >= lo ? 1u : 0u;
    if (hit == 0) continue;
    for (uint64_t j = 0; j < kScanBlock; ++j) {
      cand[c] = static_cast<Idx>(i + j);
      c += hd::magnitude_key(x[i + j]) >= lo ? 1 : 0;
    }
    if (c > cap) return c;
  }
  return append_tail(x, i, n, lo, cand, c, cap);
}

#if defined(GW_HOST_X86_SIMD)
// The same pass with explicit vectors (the compiler keeps the generic one scalar): a compare
// of 8 or 16 keys, and the positions that pass appended in order.
template <class Idx>
inline uint64_t append_bits(uint32_t bits, uint64_t base, Idx* cand, uint64_t c) {
  while (bits != 0) {
    cand[c++] = static_cast<Idx>(base + static_cast<uint64_t>(__builtin_ctz(bits)));
    bits &= bits - 1;
  }
  return c;
}

// Appends positions base + (set bits of m), in order: one compress-store for 32-bit indices.
template <class Idx>
GW_TARGET_AVX512 inline uint64_t append_mask16(__mmask16 m, uint64_t base, Idx* cand, uint64_t c) {
  if constexpr (sizeof(Idx) == 4) {
    // Idx is 32-bit only for n <= 2^32, so base + 15 fits.
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)), iota);
    _mm512_mask_compressstoreu_epi32(cand + c, m, pos);
    return c + static_cast<uint64_t>(__builtin_popcount(m));
  } else {
    return append_bits(m, base, cand, c);
  }
}

// Which of 8 (16) floats, given as their bits, have a magnitude key (hd::magnitude_key: one
// key for every NaN) at least lo. For AVX2, below = lo - 1: keys are under 2^31, so a signed
// compare with it is key >= lo (lo = 0: all).
GW_TARGET_AVX2 inline uint32_t at_least8(__m256i bits, __m256i below) {
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(static_cast<int>(hd::kInfinityKey)));
  const __m256i keys = _mm256_blendv_epi8(abs, _mm256_set1_epi32(static_cast<int>(hd::kNanKey)), nan);
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(keys, below))));
}
GW_TARGET_AVX512 inline __mmask16 at_least16(__m512i bits, __m512i lo) {
  const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(static_cast<int>(hd::kInfinityKey)));
  const __m512i keys = _mm512_mask_mov_epi32(abs, nan, _mm512_set1_epi32(static_cast<int>(hd::kNanKey)));
  return _mm512_cmpge_epu32_mask(keys, lo);
}

template <class Idx>
GW_TARGET_AVX2 uint64_t collect_avx2(const float* x, uint64_t n, uint32_t lo, Idx* cand, uint64_t cap) {
  const __m256i below = _mm256_set1_epi32(static_cast<int>(lo) - 1);
  uint64_t c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint32_t bits = at_least8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), below);
    if (bits == 0) continue;
    c = append_bits(bits, i, cand, c);
    if (c > cap) return c;
  }
  return append_tail(x, i, n, lo, cand, c, cap);
}

template <class Idx>
GW_TARGET_AVX512 uint64_t collect_avx512(const float* x, uint64_t n, uint32_t lo, Idx* cand, uint64_t cap) {
  const __m512i lov = _mm512_set1_epi32(static_cast<int>(lo));
  uint64_t c = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 m = at_least16(_mm512_loadu_si512(x + i), lov);
    if (m == 0) continue;
    c = append_mask16(m, i, cand, c);
    if (c > cap) return c;
  }
  return append_tail(x, i, n, lo, cand, c, cap);
}

template <class Idx>
GW_TARGET_AVX2 uint64_t add_collect_avx2(float* acc, const float* add, uint64_t n, uint32_t lo, Idx* cand,
                                         uint64_t cap) {
  const __m256i below = _mm256_set1_epi32(static_cast<int>(lo) - 1);
  uint64_t c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_loadu_ps(add + i));
    _mm256_storeu_ps(acc + i, v);
    if (c > cap) continue;
    const uint32_t bits = at_least8(_mm256_castps_si256(v), below);
    if (bits != 0) c = append_bits(bits, i, cand, c);
  }
  return add_tail(acc, add, i, n, lo, cand, c, cap);
}

template <class Idx>
GW_TARGET_AVX512 uint64_t add_collect_avx512(float* acc, const float* add, uint64_t n, uint32_t lo, Idx* cand,
                                             uint64_t cap) {
  const __m512i lov = _mm512_set1_epi32(static_cast<int>(lo));
  uint64_t c = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_add_ps(_mm512_loadu_ps(acc + i), _mm512_loadu_ps(add + i));
    _mm512_storeu_ps(acc + i, v);
    if (c > cap) continue;
    const __mmask16 m = at_least16(_mm512_castps_si512(v), lov);
    if (m != 0) c = append_mask16(m, i, cand, c);
  }
  return add_tail(acc, add, i, n, lo, cand, c, cap);
}
#endif

}  // namespace

template <class Idx>
uint64_t collect_at_least(const float* x, uint64_t n, uint32_t lo, Idx* cand, uint64_t cap) {
#if defined(GW_HOST_X86_SIMD)
  switch (host_simd()) {
    case HostSimd::kAvx512: return collect_avx512(x, n, lo, cand, cap);
    case HostSimd::kAvx2: return collect_avx2(x, n, lo, cand, cap);
    case HostSimd::kBaseline: break;
  }
#endif
  return collect_block_scan(x, n, lo, cand, cap);
}

template <class Idx>
uint64_t add_and_collect_at_least(float* acc, const float* add, uint64_t n, uint32_t lo, Idx* cand, uint64_t cap) {
#if defined(GW_HOST_X86_SIMD)
  switch (host_simd()) {
    case HostSimd::kAvx512: return add_collect_avx512(acc, add, n, lo, cand, cap);
    case HostSimd::kAvx2: return add_collect_avx2(acc, add, n, lo, cand, cap);
    case HostSimd::kBaseline: break;
  }
#endif
  return add_collect_generic(acc, add, n, lo, cand, cap);
}

template <class Idx>
void select_topk_sampled(float* x, const float* add, uint64_t n, uint64_t k, Idx* out, Workspace& ws) {
  constexpr uint64_t kMaxSample = 1u << 16;
  constexpr double kWantHits = 64.0;  // expected sample elements above the threshold
  auto exact = [&] {
    if (add != nullptr) add_into(x, add, n);
    select_topk(x, n, k, out, ws);
  };
  if (k == 0 || k * 8 > n) return exact();
  const double frac = static_cast<double>(k) / static_cast<double>(n);
  const uint64_t m = std::min<uint64_t>({n / 8, kMaxSample, static_cast<uint64_t>(kWantHits / frac) + 1});
  const double hits = frac * static_cast<double>(m);
  if (hits < 8.0) return exact();  // too few winners for a sample this size to place the threshold
  // Sample j from stride j, at an offset that varies with j (a periodic gradient layout
  // must not line up with the samples); deterministic, so the time is reproducible. With
  // add, the sampled value is the sum the pass below will store.
  uint32_t* keys = ws.get<uint32_t>(5, m);
  const uint64_t stride = n / m;
  for (uint64_t j = 0; j < m; ++j) {
    const uint64_t at = j * stride + (j * 2654435761u) % stride;
    keys[j] = hd::magnitude_key(add != nullptr ? x[at] + add[at] : x[at]);
  }
  // Rank of the key to collect from: 1.25x the expected winners plus 3 standard deviations,
  // so that fewer than k reach it only about once in a thousand calls.
  const uint64_t r = std::min<uint64_t>(m, static_cast<uint64_t>(std::ceil(1.25 * hits + 3.0 * std::sqrt(hits))));
  std::nth_element(keys, keys + (r - 1), keys + m, std::greater<uint32_t>());
  const uint32_t lo = keys[r - 1];
  const uint64_t cap = 4 * k + 1024;
  Idx* cand = ws.get<Idx>(4, cap + kCollectSlack);
  const uint64_t c =
      add != nullptr ? add_and_collect_at_least(x, add, n, lo, cand, cap) : collect_at_least(x, n, lo, cand, cap);
  if (c >= k && c <= cap) {
    select_topk_among(x, cand, c, k, out, ws);
  } else {
    select_topk(x, n, k, out, ws);  // x holds the sums by now
  }
}

template <class Idx>
void select_topk_sampled(const float* x, uint64_t n, uint64_t k, Idx* out, Workspace& ws) {
  select_topk_sampled(const_cast<float*>(x), nullptr, n, k, out, ws);  // x is only read without add
}

template uint64_t collect_at_least<uint32_t>(const float*, uint64_t, uint32_t, uint32_t*, uint64_t);
template uint64_t collect_at_least<uint64_t>(const float*, uint64_t, uint32_t, uint64_t*, uint64_t);
template uint64_t add_and_collect_at_least<uint32_t>(float*, const float*, uint64_t, uint32_t, uint32_t*, uint64_t);
template uint64_t add_and_collect_at_least<uint64_t>(float*, const float*, uint64_t, uint32_t, uint64_t*, uint64_t);
template void select_topk_sampled<uint32_t>(const float*, uint64_t, uint64_t, uint32_t*, Workspace&);
template void select_topk_sampled<uint64_t>(const float*, uint64_t, uint64_t, uint64_t*, Workspace&);
template void select_topk_sampled<uint32_t>(float*, const float*, uint64_t, uint64_t, uint32_t*, Workspace&);
template void select_topk_sampled<uint64_t>(float*, const float*, uint64_t, uint64_t, uint64_t*, Workspace&);
template void select_topk<uint32_t>(const float*, uint64_t, uint64_t, uint32_t*, Workspace&);
template void select_topk<uint64_t>(const float*, uint64_t, uint64_t, uint64_t*, Workspace&);
template void select_topk_among<uint32_t>(const float*, const uint32_t*, uint64_t, uint64_t, uint32_t*, Workspace&);
template void select_topk_among<uint64_t>(const float*, const uint64_t*, uint64_t, uint64_t, uint64_t*, Workspace&);

}  // namespace gw::detail
