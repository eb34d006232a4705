// Philox-4x32-10 (Salmon et al., SC'11): a counter-based generator, so any element's
// random word can be computed independently, in any order, on host or device.
// gradwire's stream: key = (lo32(seed), hi32(seed) ^ hi32(step)),
// counter = (lo32(block), hi32(block), rank, lo32(step)); block = index / 4 and the
// element takes word index % 4 of that block. See docs/wire-format.md.
#pragma once

#include <cstdint>

#include "compressors/hd.hpp"
#include "compressors/host_simd.hpp"

namespace gw {

struct Philox4 {
  uint32_t v[4];
};

GW_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

GW_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, ctr.v[0], hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Rank value reserved for streams that every rank must share (random-k indices).
constexpr uint32_t kSharedStreamRank = 0xFFFFFFFFu;

struct RandomStream {
  uint64_t seed;
  uint64_t step;
  uint32_t rank;

  // The four words of block `block`.
  GW_HD Philox4 block(uint64_t block_index) const {
    const Philox4 ctr{{static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32), rank,
                       static_cast<uint32_t>(step)}};
    return philox4x32_10(ctr, static_cast<uint32_t>(seed),
                         static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(step >> 32));
  }
  GW_HD uint32_t word(uint64_t index) const { return block(index >> 2).v[index & 3]; }
};

// Uniform float in [0, 1) from the top 24 bits of a word: exact in fp32.
GW_HD float uniform01(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }

}  // namespace gw

namespace gw {

// ---- Host-only helpers below: bulk generation for the CPU codecs. ----
//
// philox_fill writes the words of many consecutive blocks. It gives exactly the words of
// RandomStream::block; on x86-64 it runs 4, 8 or 16 blocks side by side in SSE2, AVX2 or
// AVX-512 registers (32 x 32 -> 64-bit multiplies with pmuludq on the even and odd lanes),
// which is what makes stochastic rounding affordable on the host.

namespace philox_detail {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

struct Keys {
  uint32_t k0, k1, rank, step_lo;
};

inline Keys keys_of(const RandomStream& rs) {
  return Keys{static_cast<uint32_t>(rs.seed),
              static_cast<uint32_t>(rs.seed >> 32) ^ static_cast<uint32_t>(rs.step >> 32), rs.rank,
              static_cast<uint32_t>(rs.step)};
}

// Counter words 0 and 1 (the 64-bit block index) of lanes-many consecutive blocks.
template <int kLanes>
inline void block_indices(uint64_t first_block, uint32_t* lo, uint32_t* hi) {
  for (int j = 0; j < kLanes; ++j) {
    const uint64_t index = first_block + static_cast<uint64_t>(j);
    lo[j] = static_cast<uint32_t>(index);
    hi[j] = static_cast<uint32_t>(index >> 32);
  }
}

#if defined(GW_HOST_X86_SIMD)

// Each function: `groups` groups of L consecutive blocks from first_block, 4 * L words each,
// written in block order (word w of block b at out[4 * b + w]).
inline void fill_sse2(const Keys& key, uint64_t first_block, uint32_t* out, uint64_t groups) {
  const __m128i m0 = _mm_set1_epi32(static_cast<int>(kMul0));
  const __m128i m1 = _mm_set1_epi32(static_cast<int>(kMul1));
  const __m128i lo_mask = _mm_set1_epi64x(0xffffffffll);
  const __m128i hi_mask = _mm_slli_epi64(lo_mask, 32);
  for (uint64_t g = 0; g < groups; ++g) {
    alignas(16) uint32_t a0[4], a1[4];
    block_indices<4>(first_block + 4 * g, a0, a1);
    __m128i c0 = _mm_load_si128(reinterpret_cast<const __m128i*>(a0));
    __m128i c1 = _mm_load_si128(reinterpret_cast<const __m128i*>(a1));
    __m128i c2 = _mm_set1_epi32(static_cast<int>(key.rank));
    __m128i c3 = _mm_set1_epi32(static_cast<int>(key.step_lo));
    uint32_t k0 = key.k0, k1 = key.k1;
    for (int round = 0; round < 10; ++round) {
      // Products of the even lanes (pe) and the odd lanes (po), 64 bits each.
      const __m128i pe0 = _mm_mul_epu32(c0, m0), po0 = _mm_mul_epu32(_mm_srli_epi64(c0, 32), m0);
      const __m128i pe1 = _mm_mul_epu32(c2, m1), po1 = _mm_mul_epu32(_mm_srli_epi64(c2, 32), m1);
      const __m128i hi0 = _mm_or_si128(_mm_srli_epi64(pe0, 32), _mm_and_si128(po0, hi_mask));
      const __m128i lo0 = _mm_or_si128(_mm_and_si128(pe0, lo_mask), _mm_slli_epi64(po0, 32));
      const __m128i hi1 = _mm_or_si128(_mm_srli_epi64(pe1, 32), _mm_and_si128(po1, hi_mask));
      const __m128i lo1 = _mm_or_si128(_mm_and_si128(pe1, lo_mask), _mm_slli_epi64(po1, 32));
      c0 = _mm_xor_si128(_mm_xor_si128(hi1, c1), _mm_set1_epi32(static_cast<int>(k0)));
      c2 = _mm_xor_si128(_mm_xor_si128(hi0, c3), _mm_set1_epi32(static_cast<int>(k1)));
      c1 = lo1;
      c3 = lo0;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    // Transpose 4 words x 4 blocks into block order.
    const __m128i t0 = _mm_unpacklo_epi32(c0, c1), t1 = _mm_unpackhi_epi32(c0, c1);
    const __m128i t2 = _mm_unpacklo_epi32(c2, c3), t3 = _mm_unpackhi_epi32(c2, c3);
    auto* o = reinterpret_cast<__m128i*>(out + 16 * g);
    _mm_storeu_si128(o + 0, _mm_unpacklo_epi64(t0, t2));
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi64(t0, t2));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi64(t1, t3));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi64(t1, t3));
  }
}

__attribute__((target("avx2"))) inline void fill_avx2(const Keys& key, uint64_t first_block, uint32_t* out,
                                                      uint64_t groups) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kMul0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kMul1));
  for (uint64_t g = 0; g < groups; ++g) {
    alignas(32) uint32_t a0[8], a1[8];
    block_indices<8>(first_block + 8 * g, a0, a1);
    __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a0));
    __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a1));
    __m256i c2 = _mm256_set1_epi32(static_cast<int>(key.rank));
    __m256i c3 = _mm256_set1_epi32(static_cast<int>(key.step_lo));
    uint32_t k0 = key.k0, k1 = key.k1;
    for (int round = 0; round < 10; ++round) {
      const __m256i pe0 = _mm256_mul_epu32(c0, m0);
      const __m256i po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
      const __m256i pe1 = _mm256_mul_epu32(c2, m1);
      const __m256i po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
      const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
      const __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
      const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
      const __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
      c1 = lo1;
      c3 = lo0;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    // Per 128-bit half h: u_k holds block 4h + k; then gather halves into block order.
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    auto* o = reinterpret_cast<__m256i*>(out + 32 * g);
    _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
}

// GCC 12 reports the AVX-512 intrinsics' own _mm512_undefined_* operands as maybe
// uninitialized once they are inlined (GCC PR 105593); nothing here reads them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
__attribute__((target("avx512f"))) inline void fill_avx512(const Keys& key, uint64_t first_block, uint32_t* out,
                                                           uint64_t groups) {
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kMul0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kMul1));
  for (uint64_t g = 0; g < groups; ++g) {
    alignas(64) uint32_t a0[16], a1[16];
    block_indices<16>(first_block + 16 * g, a0, a1);
    __m512i c0 = _mm512_load_si512(a0);
    __m512i c1 = _mm512_load_si512(a1);
    __m512i c2 = _mm512_set1_epi32(static_cast<int>(key.rank));
    __m512i c3 = _mm512_set1_epi32(static_cast<int>(key.step_lo));
    uint32_t k0 = key.k0, k1 = key.k1;
    for (int round = 0; round < 10; ++round) {
      const __m512i pe0 = _mm512_mul_epu32(c0, m0);
      const __m512i po0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
      const __m512i pe1 = _mm512_mul_epu32(c2, m1);
      const __m512i po1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
      const __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe0, 32), po0);
      const __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, pe0, _mm512_slli_epi64(po0, 32));
      const __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe1, 32), po1);
      const __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, pe1, _mm512_slli_epi64(po1, 32));
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
      c1 = lo1;
      c3 = lo0;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    // Per 128-bit quarter q: u_k holds block 4q + k; then gather quarters into block order.
    const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
    const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    const __m512i s0 = _mm512_shuffle_i32x4(u0, u1, 0x44), s1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
    const __m512i s2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), s3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
    uint32_t* o = out + 64 * g;
    _mm512_storeu_si512(o + 0, _mm512_shuffle_i32x4(s0, s1, 0x88));
    _mm512_storeu_si512(o + 16, _mm512_shuffle_i32x4(s0, s1, 0xDD));
    _mm512_storeu_si512(o + 32, _mm512_shuffle_i32x4(s2, s3, 0x88));
    _mm512_storeu_si512(o + 48, _mm512_shuffle_i32x4(s2, s3, 0xDD));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // GW_HOST_X86_SIMD

}  // namespace philox_detail

// The random words of elements [first, first + count) into out, where first is a multiple
// of 4: out gets whole blocks, 4 * ceil(count / 4) words, word w of block first / 4 + b at
// out[4 * b + w].
inline void philox_fill(const RandomStream& rs, uint64_t first, uint32_t* out, uint64_t count) {
  const uint64_t blocks = (count + 3) / 4;
  const uint64_t first_block = first >> 2;
  uint64_t b = 0;
#if defined(GW_HOST_X86_SIMD)
  const philox_detail::Keys key = philox_detail::keys_of(rs);
  switch (host_simd()) {
    case HostSimd::kAvx512:
      philox_detail::fill_avx512(key, first_block, out, blocks / 16);
      b = blocks / 16 * 16;
      break;
    case HostSimd::kAvx2:
      philox_detail::fill_avx2(key, first_block, out, blocks / 8);
      b = blocks / 8 * 8;
      break;
    case HostSimd::kBaseline: break;
  }
  philox_detail::fill_sse2(key, first_block + b, out + 4 * b, (blocks - b) / 4);
  b += (blocks - b) / 4 * 4;
#endif
  for (; b < blocks; ++b) {
    const Philox4 r = rs.block(first_block + b);
    out[4 * b + 0] = r.v[0];
    out[4 * b + 1] = r.v[1];
    out[4 * b + 2] = r.v[2];
    out[4 * b + 3] = r.v[3];
  }
}

}  // namespace gw
