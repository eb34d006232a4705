#include "compressors/topk_select.hpp"

#include <algorithm>
#include <cstring>

#include "compressors/hd.hpp"

namespace gw::detail {
namespace {

constexpr int kTopBits = 11;   // bits 20..30 of the 31-bit magnitude key
constexpr int kMidBits = 10;   // bits 10..19
constexpr int kLowBits = 10;   // bits 0..9
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
void split_by_top_bin(const float* x, uint64_t n, uint32_t top, Idx* winners, uint64_t& nw,
                      Idx* cand, uint64_t& nc) {
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
    for (uint64_t j = 0; j < kScanBlock; ++j)
      hit |= hd::magnitude_key(x[i + j]) >= top_key ? 1u : 0u;
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
uint64_t filter_candidates(const float* x, Idx* cand, uint64_t c, uint32_t threshold,
                           uint64_t ties_taken) {
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
void select_topk_among(const float* x, const Idx* cand, uint64_t c, uint64_t k, Idx* out,
                       Workspace& ws) {
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

template void select_topk<uint32_t>(const float*, uint64_t, uint64_t, uint32_t*, Workspace&);
template void select_topk<uint64_t>(const float*, uint64_t, uint64_t, uint64_t*, Workspace&);
template void select_topk_among<uint32_t>(const float*, const uint32_t*, uint64_t, uint64_t,
                                          uint32_t*, Workspace&);
template void select_topk_among<uint64_t>(const float*, const uint64_t*, uint64_t, uint64_t,
                                          uint64_t*, Workspace&);

}  // namespace gw::detail
