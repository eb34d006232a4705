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

}  // namespace

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
