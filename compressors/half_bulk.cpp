#include "compressors/half_bulk.hpp"

#include <cstring>

#include "compressors/half.hpp"
#include "compressors/host_simd.hpp"

#if defined(GW_HOST_X86_SIMD)
#include <cpuid.h>
#endif

namespace gw::detail {
namespace {

void floats_to_halves_scalar(const float* in, uint8_t* out, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = hd::float_to_half(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void halves_to_floats_scalar(const uint8_t* in, float* out, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = hd::half_to_float(h);
  }
}

void floats_to_halves_sr_scalar(const float* in, const uint32_t* words, uint8_t* out, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = hd::float_to_half_sr(in[i], words[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void floats_to_bf16_sr_scalar(const float* in, const uint32_t* words, uint8_t* out, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t b = hd::float_to_bf16_sr(in[i], words[i]);
    std::memcpy(out + 2 * i, &b, 2);
  }
}

// Random words a tile at a time (philox_fill's batches), then the rounding of that tile.
constexpr uint64_t kSrTile = 1024;

template <class Round>
void round_tiles(const float* in, uint8_t* out, uint64_t n, const RandomStream& rs, uint64_t first, Round round) {
  alignas(64) uint32_t words[kSrTile];
  for (uint64_t lo = 0; lo < n; lo += kSrTile) {
    const uint64_t len = n - lo < kSrTile ? n - lo : kSrTile;
    philox_fill(rs, first + lo, words, len);
    round(in + lo, words, out + 2 * lo, len);
  }
}

#if defined(GW_HOST_X86_SIMD)
// F16C rounds finite values to nearest even exactly as float_to_half does, and widens finite
// halves exactly. It treats NaNs differently (it quiets a signaling NaN when widening), so
// any group of 8 that holds a NaN or an infinity takes the scalar path.
__attribute__((target("avx2,f16c"))) void floats_to_halves_f16c(const float* in, uint8_t* out, uint64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
    // a >= inf, as signed compare: a > inf - 1 (a is non-negative).
    const __m256i special = _mm256_cmpgt_epi32(a, _mm256_sub_epi32(inf, _mm256_set1_epi32(1)));
    if (!_mm256_testz_si256(special, special)) {
      floats_to_halves_scalar(in + i, out + 2 * i, 8);
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  floats_to_halves_scalar(in + i, out + 2 * i, n - i);
}

__attribute__((target("avx2,f16c"))) void halves_to_floats_f16c(const uint8_t* in, float* out, uint64_t n) {
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m128i e = _mm_and_si128(h, exp_mask);
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(e, exp_mask)) != 0) {
      halves_to_floats_scalar(in + 2 * i, out + i, 8);
      continue;
    }
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  halves_to_floats_scalar(in + 2 * i, out + i, n - i);
}

// Stochastic rounding in 32-bit lanes: half.hpp's functions with every branch a blend. Lane
// results are below 2^16, so packus (signed 32 -> unsigned 16) is exact; its per-128-bit
// interleave is undone by the permute.
__attribute__((target("avx2"))) inline void store_packed(uint8_t* out, __m256i a, __m256i b) {
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
}

__attribute__((target("avx2"))) inline __m256i bf16_sr8(__m256i x, __m256i r) {
  const __m256i hi = _mm256_srli_epi32(x, 16);
  // (r >> 16) < (x & 0xffff): both below 2^16, so the signed compare is the unsigned one.
  const __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(r, 16));
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(_mm256_sub_epi32(hi, up), _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

__attribute__((target("avx2"))) inline __m256i half_sr8(__m256i x, __m256i r) {
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000));
  // Normal result: rebias, and round up when (r >> 19) < the 13 dropped bits.
  const __m256i up_n = _mm256_cmpgt_epi32(_mm256_and_si256(abs, _mm256_set1_epi32(0x1fff)), _mm256_srli_epi32(r, 19));
  const __m256i h_n =
      _mm256_sub_epi32(_mm256_sub_epi32(_mm256_srli_epi32(abs, 13), _mm256_set1_epi32(112 << 10)), up_n);
  // Subnormal result: mant / 2^shift in 32.32 fixed point. Variable shifts by 32 or more (or
  // by a "negative" count) give 0, which is what each term needs out of its range.
  const __m256i e = _mm256_srli_epi32(abs, 23);
  const __m256i implicit = _mm256_and_si256(_mm256_cmpgt_epi32(e, _mm256_setzero_si256()), _mm256_set1_epi32(0x800000));
  const __m256i mant = _mm256_or_si256(_mm256_and_si256(abs, _mm256_set1_epi32(0x7fffff)), implicit);
  const __m256i shift = _mm256_sub_epi32(_mm256_set1_epi32(126), _mm256_max_epi32(e, _mm256_set1_epi32(1)));
  const __m256i whole = _mm256_srlv_epi32(mant, shift);
  const __m256i frac = _mm256_or_si256(_mm256_sllv_epi32(mant, _mm256_sub_epi32(_mm256_set1_epi32(32), shift)),
                                       _mm256_srlv_epi32(mant, _mm256_sub_epi32(shift, _mm256_set1_epi32(32))));
  const __m256i bias = _mm256_set1_epi32(static_cast<int>(0x80000000u));  // unsigned r < frac
  const __m256i up_s = _mm256_cmpgt_epi32(_mm256_xor_si256(frac, bias), _mm256_xor_si256(r, bias));
  __m256i h =
      _mm256_blendv_epi8(h_n, _mm256_sub_epi32(whole, up_s), _mm256_cmpgt_epi32(_mm256_set1_epi32(0x38800000), abs));
  h = _mm256_blendv_epi8(h, _mm256_set1_epi32(0x7c00), _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x477fffff)));
  const __m256i nan = _mm256_or_si256(_mm256_set1_epi32(0x7e00),
                                      _mm256_and_si256(_mm256_srli_epi32(abs, 13), _mm256_set1_epi32(0x3ff)));
  h = _mm256_blendv_epi8(h, nan, _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000)));
  return _mm256_or_si256(h, sign);
}

// The random words are made where they are used: Philox-4x32-10 on 8 blocks per register
// (lane j holds block j's counter word), kInterleave such groups side by side. One group's
// ten rounds are a chain of dependent multiplies; several chains keep the multiplier busy.
// Rounding philox_fill's words (one group at a time, then a pass over them) ran at 57% of
// this speed on a 2-core EPYC VM (AVX2). Same words as RandomStream::block (tests check it).
constexpr int kInterleave = 8;
constexpr uint64_t kFusedElems = 32 * kInterleave;

template <bool kHalf>
__attribute__((target("avx2"))) void round_sr_avx2(const float* in, uint8_t* out, uint64_t n, const RandomStream& rs,
                                                   uint64_t first) {
  const philox_detail::Keys key = philox_detail::keys_of(rs);
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(philox_detail::kMul0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(philox_detail::kMul1));
  uint64_t i = 0;
  for (; i + kFusedElems <= n; i += kFusedElems) {
    __m256i c0[kInterleave], c1[kInterleave], c2[kInterleave], c3[kInterleave];
    for (int g = 0; g < kInterleave; ++g) {
      alignas(32) uint32_t lo[8], hi[8];
      philox_detail::block_indices<8>((first + i) / 4 + 8 * static_cast<uint64_t>(g), lo, hi);
      c0[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
      c1[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
      c2[g] = _mm256_set1_epi32(static_cast<int>(key.rank));
      c3[g] = _mm256_set1_epi32(static_cast<int>(key.step_lo));
    }
    uint32_t k0 = key.k0, k1 = key.k1;
    for (int round = 0; round < 10; ++round) {
      const __m256i key0 = _mm256_set1_epi32(static_cast<int>(k0));
      const __m256i key1 = _mm256_set1_epi32(static_cast<int>(k1));
      for (int g = 0; g < kInterleave; ++g) {
        // Products of the even lanes (pe) and the odd lanes (po), 64 bits each.
        const __m256i pe0 = _mm256_mul_epu32(c0[g], m0);
        const __m256i po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0[g], 32), m0);
        const __m256i pe1 = _mm256_mul_epu32(c2[g], m1);
        const __m256i po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2[g], 32), m1);
        const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
        const __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
        const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
        const __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
        c0[g] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[g]), key0);
        c2[g] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[g]), key1);
        c1[g] = lo1;
        c3[g] = lo0;
      }
      k0 += philox_detail::kWeyl0;
      k1 += philox_detail::kWeyl1;
    }
    for (int g = 0; g < kInterleave; ++g) {
      // Transpose 4 words x 8 blocks into element order: w[k] holds elements 8k .. 8k+7.
      const __m256i t0 = _mm256_unpacklo_epi32(c0[g], c1[g]), t1 = _mm256_unpackhi_epi32(c0[g], c1[g]);
      const __m256i t2 = _mm256_unpacklo_epi32(c2[g], c3[g]), t3 = _mm256_unpackhi_epi32(c2[g], c3[g]);
      const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
      const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
      const __m256i w[4] = {_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u2, u3, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31), _mm256_permute2x128_si256(u2, u3, 0x31)};
      const float* x = in + i + 32 * static_cast<uint64_t>(g);
      uint8_t* o = out + 2 * (i + 32 * static_cast<uint64_t>(g));
      __m256i h[4];
      for (int k = 0; k < 4; ++k) {
        const __m256i xk = _mm256_castps_si256(_mm256_loadu_ps(x + 8 * k));
        if constexpr (kHalf) {
          h[k] = half_sr8(xk, w[k]);
        } else {
          h[k] = bf16_sr8(xk, w[k]);
        }
      }
      store_packed(o, h[0], h[1]);
      store_packed(o + 32, h[2], h[3]);
    }
  }
  round_tiles(in + i, out + 2 * i, n - i, rs, first + i, kHalf ? floats_to_halves_sr_scalar : floats_to_bf16_sr_scalar);
}

// CPUID.1:ECX bit 29. clang 14 does not know "f16c" as a __builtin_cpu_supports name, so
// the bit is read directly. The OS saving AVX state is already implied: host_simd() above
// baseline means the AVX2 check passed, and that one includes OSXSAVE/XGETBV.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 29)) != 0;
}

bool have_f16c() {
  static const bool yes = host_simd() != HostSimd::kBaseline && cpu_has_f16c();
  return yes;
}
#endif

#if defined(GW_HOST_X86_SIMD)
bool have_avx2() { return host_simd() != HostSimd::kBaseline; }
#endif

}  // namespace

void floats_to_halves_sr(const float* in, uint8_t* out, uint64_t n, const RandomStream& rs, uint64_t first) {
#if defined(GW_HOST_X86_SIMD)
  if (have_avx2()) return round_sr_avx2<true>(in, out, n, rs, first);
#endif
  round_tiles(in, out, n, rs, first, floats_to_halves_sr_scalar);
}

void floats_to_bf16_sr(const float* in, uint8_t* out, uint64_t n, const RandomStream& rs, uint64_t first) {
#if defined(GW_HOST_X86_SIMD)
  if (have_avx2()) return round_sr_avx2<false>(in, out, n, rs, first);
#endif
  round_tiles(in, out, n, rs, first, floats_to_bf16_sr_scalar);
}

void floats_to_halves(const float* in, uint8_t* out, uint64_t n) {
#if defined(GW_HOST_X86_SIMD)
  if (have_f16c()) return floats_to_halves_f16c(in, out, n);
#endif
  floats_to_halves_scalar(in, out, n);
}

void halves_to_floats(const uint8_t* in, float* out, uint64_t n) {
#if defined(GW_HOST_X86_SIMD)
  if (have_f16c()) return halves_to_floats_f16c(in, out, n);
#endif
  halves_to_floats_scalar(in, out, n);
}

}  // namespace gw::detail
