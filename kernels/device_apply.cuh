// What the dense, qsgd and sign kernels share: element types as raw bits, loads and stores
// of any alignment, the error-feedback input, decode modes, code-word stores and grid sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.hpp"
#include "compressors/half.hpp"
#include "compressors/quant_math.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/status.hpp"
#include "kernels/device_scratch.hpp"
#include "kernels/grid_size.cuh"
#include "kernels/precise_math.cuh"

namespace gw::kern {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;

// ---- Elements as raw bits (the low bytes of a uint32_t). ----

template <DType kType>
struct Elem;

template <>
struct Elem<DType::kFloat32> {
  static constexpr int kBytes = 4;
  __device__ static float to_float(uint32_t b) { return hd::bits_float(b); }
  __device__ static uint32_t from_float(float f) { return hd::float_bits(f); }
};

template <>
struct Elem<DType::kFloat16> {
  static constexpr int kBytes = 2;
  __device__ static float to_float(uint32_t b) { return hd::half_to_float(static_cast<uint16_t>(b)); }
  __device__ static uint32_t from_float(float f) { return hd::float_to_half(f); }
};

template <>
struct Elem<DType::kBFloat16> {
  static constexpr int kBytes = 2;
  __device__ static float to_float(uint32_t b) { return hd::bf16_to_float(static_cast<uint16_t>(b)); }
  __device__ static uint32_t from_float(float f) { return hd::float_to_bf16(f); }
};

template <class Fn>
decltype(auto) with_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16: return fn(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kBFloat16: return fn(std::integral_constant<DType, DType::kBFloat16>{});
    default: break;  // float32; callers check the dtype is one codecs take
  }
  return fn(std::integral_constant<DType, DType::kFloat32>{});
}

// ---- Loads and stores of N bytes (1, 2, 4, 8 or 16) as little-endian 32-bit words. ----
// `width` is a power of two that divides the address (1: any address); it picks the widest
// accesses that are safe, so a payload at an odd offset still decodes.

template <int N>
struct Raw {
  uint32_t w[N >= 4 ? N / 4 : 1];
};

// The largest power of two up to max_width that divides p's address (max_width for null).
inline uint32_t access_width(const void* p, uint32_t max_width) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t w = max_width;
  while (w > 1 && a % w != 0) w /= 2;
  return w;
}

template <int N>
__device__ __forceinline__ Raw<N> load_raw(const uint8_t* p, uint32_t width) {
  Raw<N> r{};
  if constexpr (N == 16) {
    if (width >= 16) {
      const uint4 v = *reinterpret_cast<const uint4*>(p);
      r.w[0] = v.x;
      r.w[1] = v.y;
      r.w[2] = v.z;
      r.w[3] = v.w;
      return r;
    }
  }
  if constexpr (N >= 8) {
    if (width >= 8) {
#pragma unroll
      for (int k = 0; k < N / 8; ++k) {
        const uint2 v = reinterpret_cast<const uint2*>(p)[k];
        r.w[2 * k] = v.x;
        r.w[2 * k + 1] = v.y;
      }
      return r;
    }
  }
  if constexpr (N >= 4) {
    if (width >= 4) {
#pragma unroll
      for (int k = 0; k < N / 4; ++k) r.w[k] = reinterpret_cast<const uint32_t*>(p)[k];
      return r;
    }
  }
  if constexpr (N >= 2) {
    if (width >= 2) {
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        r.w[k / 2] |= static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[k]) << (16 * (k % 2));
      }
      return r;
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) r.w[k / 4] |= static_cast<uint32_t>(p[k]) << (8 * (k % 4));
  return r;
}

template <int N>
__device__ __forceinline__ void store_raw(uint8_t* p, uint32_t width, const Raw<N>& r) {
  if constexpr (N == 16) {
    if (width >= 16) {
      *reinterpret_cast<uint4*>(p) = make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]);
      return;
    }
  }
  if constexpr (N >= 8) {
    if (width >= 8) {
#pragma unroll
      for (int k = 0; k < N / 8; ++k) reinterpret_cast<uint2*>(p)[k] = make_uint2(r.w[2 * k], r.w[2 * k + 1]);
      return;
    }
  }
  if constexpr (N >= 4) {
    if (width >= 4) {
#pragma unroll
      for (int k = 0; k < N / 4; ++k) reinterpret_cast<uint32_t*>(p)[k] = r.w[k];
      return;
    }
  }
  if constexpr (N >= 2) {
    if (width >= 2) {
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        reinterpret_cast<uint16_t*>(p)[k] = static_cast<uint16_t>(r.w[k / 2] >> (16 * (k % 2)));
      }
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) p[k] = static_cast<uint8_t>(r.w[k / 4] >> (8 * (k % 4)));
}

// Elements 4q .. 4q+3 of an array of kType at base, as floats (and back).
template <DType kType>
__device__ __forceinline__ void load_quad(const uint8_t* base, uint64_t q, uint32_t width, float (&v)[4]) {
  using E = Elem<kType>;
  const Raw<4 * E::kBytes> r = load_raw<4 * E::kBytes>(base + q * 4 * E::kBytes, width);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (E::kBytes == 4) {
      v[j] = E::to_float(r.w[j]);
    } else {
      v[j] = E::to_float((r.w[j / 2] >> (16 * (j % 2))) & 0xffffu);
    }
  }
}

template <DType kType>
__device__ __forceinline__ void store_quad(uint8_t* base, uint64_t q, uint32_t width, const float (&v)[4]) {
  using E = Elem<kType>;
  Raw<4 * E::kBytes> r{};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (E::kBytes == 4) {
      r.w[j] = E::from_float(v[j]);
    } else {
      r.w[j / 2] |= E::from_float(v[j]) << (16 * (j % 2));
    }
  }
  store_raw<4 * E::kBytes>(base + q * 4 * E::kBytes, width, r);
}

template <DType kType>
__device__ __forceinline__ float load_elem(const uint8_t* base, uint64_t i, uint32_t width) {
  using E = Elem<kType>;
  return E::to_float(load_raw<E::kBytes>(base + i * E::kBytes, width).w[0]);
}

template <DType kType>
__device__ __forceinline__ void store_elem(uint8_t* base, uint64_t i, uint32_t width, float v) {
  using E = Elem<kType>;
  store_raw<E::kBytes>(base + i * E::kBytes, width, Raw<E::kBytes>{{E::from_float(v)}});
}

// ---- The float32 input of an encode with or without error feedback. ----
// acc = a + b: a is the residual (or g when there is none), b is g when both exist, else
// null. The new residual goes to `residual`. Quads are float4 accesses when every pointer
// is 16-byte aligned, else four float accesses.

struct AccSource {
  const float* a;
  const float* b;
  float* residual;
  bool vec;

  static AccSource of(const void* src, float* residual) {
    const auto* g = static_cast<const float*>(src);
    const AccSource in{residual != nullptr ? residual : g, residual != nullptr ? g : nullptr, residual,
                       access_width(g, 16) == 16 && access_width(residual, 16) == 16};
    return in;
  }

  // The same arrays from element k on (k a multiple of 4 keeps the alignment).
  __device__ AccSource shifted(uint64_t k) const {
    return AccSource{a + k, b != nullptr ? b + k : nullptr, residual != nullptr ? residual + k : nullptr, vec};
  }

  __device__ float load(uint64_t i) const { return b == nullptr ? a[i] : hd::add(a[i], b[i]); }
};

// Elements 4t + j of p for the bits j set in m (0xf: all four).
__device__ __forceinline__ void load_floats(const float* p, uint64_t t, uint32_t m, bool vec, float (&x)[4]) {
  if (m == 0xfu && vec) {
    const float4 v = reinterpret_cast<const float4*>(p)[t];
    x[0] = v.x;
    x[1] = v.y;
    x[2] = v.z;
    x[3] = v.w;
    return;
  }
#pragma unroll
  for (uint32_t j = 0; j < 4; ++j) {
    if ((m >> j & 1u) != 0) x[j] = p[4 * t + j];
  }
}

__device__ __forceinline__ void store_floats(float* p, uint64_t t, uint32_t m, bool vec, const float (&x)[4]) {
  if (m == 0xfu && vec) {
    reinterpret_cast<float4*>(p)[t] = make_float4(x[0], x[1], x[2], x[3]);
    return;
  }
#pragma unroll
  for (uint32_t j = 0; j < 4; ++j) {
    if ((m >> j & 1u) != 0) p[4 * t + j] = x[j];
  }
}

// Quads t0 + 32k of p (k < kQuads) into x[k], the elements m[k] names (m[k] = 0: none).
template <int kQuads>
__device__ __forceinline__ void load_quads(const float* p, uint64_t t0, const uint32_t* m, bool vec, float (*x)[4]) {
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    x[k][0] = x[k][1] = x[k][2] = x[k][3] = 0.0f;
    if (m[k] != 0) load_floats(p, t0 + 32 * k, m[k], vec, x[k]);
  }
}

// acc of the quads t0 + 32k (k < kQuads, elements m[k]) into x[k]. Every load of `a` is
// issued before the first add, and those of `b` in groups of 4 quads, so a lane keeps many
// loads in flight.
template <int kQuads>
__device__ __forceinline__ void load_acc(const AccSource& in, uint64_t t0, const uint32_t* m, float (*x)[4]) {
  load_quads<kQuads>(in.a, t0, m, in.vec, x);
  if (in.b == nullptr) return;
  constexpr int kGroup = kQuads < 4 ? kQuads : 4;
#pragma unroll
  for (int c = 0; c < kQuads; c += kGroup) {
    float y[kGroup][4];
    load_quads<kGroup>(in.b, t0 + 32 * c, m + c, in.vec, y);
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
#pragma unroll
      for (int j = 0; j < 4; ++j) x[c + k][j] = hd::add(x[c + k][j], y[k][j]);
    }
  }
}

// ---- Decode modes on float32, as the host's apply_dense does them. ----

template <DecodeMode kMode>
__device__ __forceinline__ float apply_mode(float d, float v) {
  if constexpr (kMode == DecodeMode::kAccumulate) return hd::add(d, v);
  if constexpr (kMode == DecodeMode::kSubtract) return hd::sub(d, v);
  return v;
}

template <class Fn>
Status with_mode(DecodeMode mode, Fn&& fn) {
  switch (mode) {
    case DecodeMode::kOverwrite: return fn(std::integral_constant<DecodeMode, DecodeMode::kOverwrite>{});
    case DecodeMode::kAccumulate: return fn(std::integral_constant<DecodeMode, DecodeMode::kAccumulate>{});
    case DecodeMode::kSubtract: return fn(std::integral_constant<DecodeMode, DecodeMode::kSubtract>{});
  }
  return internal_error("unknown decode mode");
}

// ---- Bucket of an element without a 64-bit division: i < 2^48 and bucket <= 2^24 keep the
// double quotient within 1 of the true one, which one correction step fixes. ----

struct BucketDiv {
  uint64_t bucket;
  double inv;

  static BucketDiv of(uint32_t bucket) { return BucketDiv{bucket, 1.0 / static_cast<double>(bucket)}; }

  __device__ uint64_t operator()(uint64_t i) const {
    uint64_t b = static_cast<uint64_t>(__dmul_rn(static_cast<double>(i), inv));
    if (b * bucket > i) {
      --b;
    } else if ((b + 1) * bucket <= i) {
      ++b;
    }
    return b;
  }
};

// ---- Code words of the bucketed payloads (qsgd, sign). ----
// Word w is bytes 4w .. 4w+3 of the codes area (4-byte aligned) and holds elements
// [w * per_word, (w + 1) * per_word). A word inside one bucket is stored whole. When a
// bucket's bits do not fill whole words, a word can hold elements of several buckets:
// then the area is zeroed first and each bucket or-s its bits in. The last word may run past
// the payload: its owner stores only the bytes that exist, or, when several buckets share
// it, they or into a scratch word whose bytes are copied over afterwards.

struct CodeSink {
  uint32_t* words;
  uint64_t code_bytes;
  uint64_t tail_word;      // the shared, partial last word, when tail_scratch is set
  uint32_t* tail_scratch;  // null when there is no such word
};

// Word w, elements [e0, e1), with the bits of the bucket [lo, hi) of n elements (zero
// outside it).
__device__ __forceinline__ void put_word(const CodeSink& s, uint64_t w, uint32_t word, uint64_t e0, uint64_t e1,
                                         uint64_t lo, uint64_t hi, uint64_t n) {
  if (e0 >= lo && e1 <= hi) {
    s.words[w] = word;
    return;
  }
  if (e0 < lo || hi < n) {  // another bucket owns part of this word
    atomicOr(s.tail_scratch != nullptr && w == s.tail_word ? s.tail_scratch : s.words + w, word);
    return;
  }
  const uint64_t left = s.code_bytes - 4 * w;  // the last word, this bucket's alone
  if (left >= 4) {
    s.words[w] = word;
    return;
  }
  auto* bytes = reinterpret_cast<uint8_t*>(s.words + w);
  for (uint64_t k = 0; k < left; ++k) bytes[k] = static_cast<uint8_t>(word >> (8 * k));
}

// Zeroes the codes area when buckets share words, and sets up the scratch word when they
// share the partial last one. Enqueued on stream before the encode kernel.
inline Result<CodeSink> prepare_codes(uint8_t* codes, uint64_t n, uint32_t bits, uint32_t bucket,
                                      DeviceScratch* scratch, cudaStream_t stream) {
  CodeSink sink{reinterpret_cast<uint32_t*>(codes), quant::code_bytes(n, bits), 0, nullptr};
  if (static_cast<uint64_t>(bucket) * bits % 32 == 0) return sink;
  GW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(codes, 0, sink.code_bytes, stream));
  const uint64_t last = (n * bits - 1) / 32;
  const uint64_t last_bucket_lo = (quant::bucket_count(n, bucket) - 1) * bucket;
  const bool partial = 4 * last + 4 > sink.code_bytes;
  const bool shared = last * (32 / bits) < last_bucket_lo;
  if (!partial || !shared) return sink;
  if (scratch == nullptr) return internal_error("device encode needs scratch memory");
  Result<uint32_t*> word = scratch->get<uint32_t>(0, 1);
  if (!word) return word.status();
  GW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(*word, 0, sizeof(uint32_t), stream));
  sink.tail_word = last;
  sink.tail_scratch = *word;
  return sink;
}

// After the encode kernel: the bytes of a scratch last word into the payload.
inline Status finish_codes(const CodeSink& sink, cudaStream_t stream) {
  if (sink.tail_scratch == nullptr) return Status::ok();
  return cuda_status(cudaMemcpyAsync(sink.words + sink.tail_word, sink.tail_scratch,
                                     sink.code_bytes - 4 * sink.tail_word, cudaMemcpyDeviceToDevice, stream),
                     "cudaMemcpyAsync (last code word)");
}

// ---- Grid sizes. ----

struct DeviceShape {
  uint64_t sms;
  uint64_t l2_bytes;
};

inline Result<DeviceShape> device_shape() {
  int dev = 0;
  int sms = 0;
  int l2 = 0;
  GW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  GW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  return DeviceShape{sms > 0 ? static_cast<uint64_t>(sms) : 1, l2 > 0 ? static_cast<uint64_t>(l2) : 0};
}

// Blocks of kThreads for a grid-stride loop of `kernel` over `items` (one per thread): at
// most one wave of it (grid_size.cuh).
template <class Kernel>
Result<unsigned> elementwise_grid(Kernel kernel, uint64_t items) {
  return grid_for(kernel, kThreads, items, kThreads);
}

// Blocks for a warp-per-bucket `kernel` over nb buckets of bucket_bytes (input bytes per
// bucket): one wave of it. When the second pass re-reads a bucket (larger than the registers
// hold), the buckets in flight are kept to half the L2 so that the re-read does not reach
// DRAM.
template <class Kernel>
Result<unsigned> bucket_grid(Kernel kernel, uint64_t nb, uint64_t bucket_bytes, bool rereads, const DeviceShape& dev) {
  GW_ASSIGN_OR_RETURN(const uint64_t wave, resident_blocks(kernel, kThreads));
  uint64_t warps = wave * kWarpsPerBlock;
  if (rereads) {
    uint64_t fit = dev.l2_bytes / 2 / (bucket_bytes > 0 ? bucket_bytes : 1);
    if (fit < dev.sms * 4) fit = dev.sms * 4;
    if (fit < warps) warps = fit;
  }
  if (nb < warps) warps = nb;
  const uint64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(blocks == 0 ? 1 : blocks);
}

}  // namespace gw::kern
