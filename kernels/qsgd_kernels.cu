// qsgd on the device, byte for byte what compressors/qsgd_codec.cpp writes.
//
// Encode: one warp per bucket (grid-stride over buckets), one pass over DRAM. The first pass
// loads acc = residual + g into registers (a bucket of up to 1024 elements; larger buckets
// are re-read from L2 in the second pass) and finds the bucket's min and max; the second
// quantizes, packs the codes and writes the new residual. A lane holds 4 elements, one Philox
// block; the lanes of one 32-bit code word are adjacent and or their codes together.
// Buckets too large and too few for a warp each to fill the device take a grid-wide path
// instead ("Large buckets" below). Decode: one thread per 4 elements.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "compressors/philox.hpp"
#include "compressors/quant_math.hpp"
#include "kernels/device_apply.cuh"
#include "kernels/device_codecs.hpp"

namespace gw::kern {
namespace {

constexpr uint32_t kScaleBytes = 8;  // min, unit
constexpr uint32_t kNoIndex = 0xffffffffu;
constexpr uint32_t kCachedElements = 1024;  // per warp, in the larger register cache

// ---- Bucket min and max, exactly as the host's sequential scan finds them. ----
// mn = mx = x[0]; then mn = std::min(mn, x[i]), mx = std::max(mx, x[i]): a NaN first
// element sticks, other NaNs are skipped, and of equal values (+0 and -0 among them) the
// first stays. Each lane scans its elements in index order with the same strict
// comparisons; lanes then combine 64-bit keys whose unsigned minimum is that result.

// Non-NaN floats ordered as unsigned integers, -0 and +0 equal (as < and > see them).
__device__ __forceinline__ uint32_t order_of(float v) {
  uint32_t u = hd::float_bits(v);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float from_order(uint32_t o) {
  return hd::bits_float((o & 0x80000000u) != 0 ? (o & 0x7fffffffu) : ~o);
}

// Key: order (inverted for max) in the high word, then the index in the bucket, then a bit
// for -0. A NaN first element's key is its bits: the high word of every other key is at
// least 0x007fffff (the order of -inf, or the inverted order of +inf), so it wins.
__device__ __forceinline__ uint64_t value_key(uint32_t order, float v, uint32_t rel) {
  const uint32_t neg_zero = hd::float_bits(v) == 0x80000000u ? 1u : 0u;
  return (static_cast<uint64_t>(order) << 32) | (static_cast<uint64_t>(rel) << 1) | neg_zero;
}

__device__ __forceinline__ float key_value(uint64_t key, bool is_max) {
  const auto high = static_cast<uint32_t>(key >> 32);
  if (high == 0) return hd::bits_float(static_cast<uint32_t>(key));
  if ((key & 1u) != 0) return -0.0f;
  return from_order(is_max ? ~high : high);
}

__device__ __forceinline__ uint64_t warp_min(uint64_t k) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const uint64_t t = __shfl_xor_sync(kFullMask, k, o);
    k = t < k ? t : k;
  }
  return k;
}

struct LaneMinMax {
  float mn = 0.0f;
  float mx = 0.0f;
  uint32_t mn_at = kNoIndex;
  uint32_t mx_at = kNoIndex;
  uint32_t nan_bits = 0;  // a NaN first element's bits (never 0)

  __device__ void add(float v, uint32_t rel) {
    if (isnan(v)) {
      if (rel == 0) nan_bits = hd::float_bits(v);
      return;
    }
    if (mn_at == kNoIndex || v < mn) {
      mn = v;
      mn_at = rel;
    }
    if (mx_at == kNoIndex || v > mx) {
      mx = v;
      mx_at = rel;
    }
  }

  __device__ uint64_t min_key() const {
    if (nan_bits != 0) return nan_bits;
    return mn_at == kNoIndex ? ~uint64_t{0} : value_key(order_of(mn), mn, mn_at);
  }
  __device__ uint64_t max_key() const {
    if (nan_bits != 0) return nan_bits;
    return mx_at == kNoIndex ? ~uint64_t{0} : value_key(~order_of(mx), mx, mx_at);
  }
};

// ---- Encode. ----

struct EncodeArgs {
  AccSource in;
  uint64_t n;
  uint64_t nb;
  uint32_t bucket;
  RandomStream rs;
  uint8_t* scales;  // the payload: nb records of (min, unit), 8-byte aligned
  CodeSink sink;
};

// Within a bucket, quad t holds the bucket's elements 4t - skip .. 4t + 3 - skip, where
// skip < 32 is how far the bucket's first row starts before it; returns which of them exist
// (0 <= element < len), as bits 0..3.
__device__ __forceinline__ uint32_t quad_mask(uint32_t t, uint32_t skip, uint32_t len) {
  uint32_t m = 0;
#pragma unroll
  for (uint32_t j = 0; j < 4; ++j) {
    if (4 * t + j - skip < len) m |= 1u << j;  // unsigned: below 0 wraps past len
  }
  return m;
}

__device__ __forceinline__ void scan_quad(LaneMinMax& mm, const float (&x)[4], uint32_t t, uint32_t m, uint32_t skip) {
#pragma unroll
  for (uint32_t j = 0; j < 4; ++j) {
    if ((m >> j & 1u) != 0) mm.add(x[j], 4 * t + j - skip);
  }
}

// One bucket as a warp sees it: elements [lo, lo + len), read from quad `first` (the start
// of the code word that holds lo) on. The arrays are not kept here but rederived from the
// kernel's arguments (constant memory) where used: with them held in registers, four of the
// kRows = 4 variants spilled under their 64-register budget (4 blocks of 256 per SM) on sm_80.
struct BucketView {
  uint64_t first;
  uint64_t lo;
  uint32_t len;
  uint32_t skip;
};

// Quantizes local quad t's elements, writes their residuals, and stores the code word from
// the lane that holds its first quad. Every lane of the warp calls it.
template <uint32_t kBits, bool kStochastic>
__device__ __forceinline__ void emit_quad(const EncodeArgs& a, const BucketView& v, const quant::QsgdScale& s,
                                          uint32_t t, uint32_t lane, const float (&x)[4]) {
  constexpr uint32_t kLevels = (1u << kBits) - 1u;
  constexpr uint32_t kQuadsPerWord = 8 / kBits;
  constexpr uint64_t kPerWord = 32 / kBits;
  const uint32_t m = quad_mask(t, v.skip, v.len);
  const uint64_t q = v.first + t;
  uint32_t piece = 0;
  if (m != 0) {
    Philox4 rnd{};
    if constexpr (kStochastic) rnd = a.rs.block(q);
    float res[4];
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {
      const float r = kStochastic ? uniform01(rnd.v[j]) : 0.5f;
      const uint32_t c = quant::qsgd_quantize(x[j], s, kLevels, r);
      res[j] = hd::sub(x[j], quant::qsgd_dequantize(c, s));
      if ((m >> j & 1u) != 0) piece |= c << (j * kBits);
    }
    if (a.in.residual != nullptr) store_floats(a.in.residual + 4 * v.first, t, m, a.in.vec, res);
  }
  uint32_t word = piece << ((lane % kQuadsPerWord) * 4 * kBits);
#pragma unroll
  for (uint32_t o = 1; o < kQuadsPerWord; o *= 2) word |= __shfl_xor_sync(kFullMask, word, o);
  const uint64_t hi = v.lo + v.len;
  if (lane % kQuadsPerWord == 0) {
    const uint64_t w = q / kQuadsPerWord;
    const uint64_t e0 = w * kPerWord;
    if (e0 < hi) put_word(a.sink, w, word, e0, e0 + kPerWord, v.lo, hi, a.n);
  }
}

// Blocks per SM that the encode kernel's registers allow (its launch bounds).
template <uint32_t kRows>
constexpr int kEncodeBlocksPerSm = kRows > 4 ? 2 : 4;

// kRows rows of 32 quads stay in registers between the passes; rows past them are re-read.
template <uint32_t kBits, bool kStochastic, uint32_t kRows>
__global__ void __launch_bounds__(kThreads, kEncodeBlocksPerSm<kRows>) encode_kernel(const EncodeArgs a) {
  constexpr uint32_t kLevels = (1u << kBits) - 1u;
  constexpr uint64_t kQuadsPerWord = 8 / kBits;
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; b < a.nb; b += stride) {
    BucketView v;
    v.lo = b * a.bucket;
    v.len = static_cast<uint32_t>(a.n - v.lo < a.bucket ? a.n - v.lo : a.bucket);
    // Rows start at the code word that holds lo, so that a word's quads are adjacent lanes.
    v.first = v.lo / (4 * kQuadsPerWord) * kQuadsPerWord;
    v.skip = static_cast<uint32_t>(v.lo - 4 * v.first);
    const uint32_t rows = (v.skip + v.len + 127) / 128;

    float cache[kRows][4];
    {  // the masks die with the loads (recomputed for the scan): fewer registers live
      uint32_t masks[kRows];
#pragma unroll
      for (uint32_t r = 0; r < kRows; ++r) masks[r] = r < rows ? quad_mask(32 * r + lane, v.skip, v.len) : 0u;
      load_acc<kRows>(a.in.shifted(4 * v.first), lane, masks, cache);
    }
    LaneMinMax mm;
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r)
      scan_quad(mm, cache[r], 32 * r + lane, r < rows ? quad_mask(32 * r + lane, v.skip, v.len) : 0u, v.skip);
    for (uint32_t r = kRows; r < rows; ++r) {
      const uint32_t t = 32 * r + lane;
      const uint32_t m = quad_mask(t, v.skip, v.len);
      float x[1][4];
      load_acc<1>(a.in.shifted(4 * v.first), t, &m, x);
      scan_quad(mm, x[0], t, m, v.skip);
    }
    const float mn = key_value(warp_min(mm.min_key()), false);
    const float mx = key_value(warp_min(mm.max_key()), true);
    const quant::QsgdScale s = quant::qsgd_scale(mn, mx, kLevels);
    if (lane == 0) *reinterpret_cast<float2*>(a.scales + kScaleBytes * b) = make_float2(s.min, s.unit);

#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      if (r < rows) emit_quad<kBits, kStochastic>(a, v, s, 32 * r + lane, lane, cache[r]);
    }
    for (uint32_t r = kRows; r < rows; ++r) {
      const uint32_t t = 32 * r + lane;
      const uint32_t m = quad_mask(t, v.skip, v.len);
      float x[1][4];
      load_acc<1>(a.in.shifted(4 * v.first), t, &m, x);
      emit_quad<kBits, kStochastic>(a, v, s, t, lane, x[0]);
    }
  }
}

// ---- Large buckets: the whole device on a few buckets. ----
// A warp per bucket leaves the GPU idle when buckets are few and large (bucket 2^24 at 64M
// elements: 4 warps). Then three grid-wide passes: blocks reduce chunks of one bucket to a
// (min, max) key pair each; a warp per bucket takes the minimum of its chunks' keys; every
// quad is quantized on its own with its bucket's scale. The keys and their minimum are those
// of the warp path (a minimum does not depend on how the elements are grouped), so the bytes
// are too. The input is read twice, as the warp path re-reads buckets this large. Needs
// bucket % 128 == 0: every 32-quad row and every code word then lies in one bucket.
constexpr uint32_t kChunkQuadsPerThread = 8;
constexpr uint32_t kChunkElements = 4 * kThreads * kChunkQuadsPerThread;

struct ChunkArgs {
  AccSource in;
  uint64_t n;
  uint32_t bucket;
  uint64_t chunks_per_bucket;
  uint64_t chunks;    // nb * chunks_per_bucket
  uint64_t* partial;  // 2 keys (min, max) per chunk
  uint64_t* keys;     // 2 keys per bucket
};

__global__ void __launch_bounds__(kThreads) chunk_minmax_kernel(const ChunkArgs a) {
  __shared__ uint64_t warp_keys[2][kWarpsPerBlock];
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warp = threadIdx.x / 32;
  for (uint64_t c = blockIdx.x; c < a.chunks; c += gridDim.x) {  // uniform across the block
    const uint64_t b = c / a.chunks_per_bucket;
    const uint64_t lo = b * a.bucket;
    const auto len = static_cast<uint32_t>(a.n - lo < a.bucket ? a.n - lo : a.bucket);
    const auto t0 = static_cast<uint32_t>((c % a.chunks_per_bucket) * (kChunkElements / 4));
    const AccSource in = a.in.shifted(lo);
    LaneMinMax mm;
    // Each thread's quads in increasing order, so its strict scan keeps the first of equals.
    for (uint32_t k = 0; k < kChunkQuadsPerThread; ++k) {
      const uint32_t t = t0 + k * kThreads + threadIdx.x;
      const uint32_t m = quad_mask(t, 0, len);
      if (m == 0) continue;
      float x[1][4] = {};
      load_acc<1>(in, t, &m, x);
      scan_quad(mm, x[0], t, m, 0);
    }
    const uint64_t kmin = warp_min(mm.min_key());
    const uint64_t kmax = warp_min(mm.max_key());
    if (lane == 0) {
      warp_keys[0][warp] = kmin;
      warp_keys[1][warp] = kmax;
    }
    __syncthreads();
    if (threadIdx.x < 2) {
      uint64_t k = warp_keys[threadIdx.x][0];
      for (int w = 1; w < kWarpsPerBlock; ++w) k = warp_keys[threadIdx.x][w] < k ? warp_keys[threadIdx.x][w] : k;
      a.partial[2 * c + threadIdx.x] = k;
    }
    __syncthreads();  // warp_keys is reused by the next chunk
  }
}

// A warp per bucket: the minimum of its chunks' key pairs.
__global__ void __launch_bounds__(kThreads) bucket_keys_kernel(const ChunkArgs a) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t nb = a.chunks / a.chunks_per_bucket;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; b < nb; b += stride) {
    uint64_t kmin = ~uint64_t{0};
    uint64_t kmax = ~uint64_t{0};
    for (uint64_t c = b * a.chunks_per_bucket + lane; c < (b + 1) * a.chunks_per_bucket; c += 32) {
      kmin = a.partial[2 * c] < kmin ? a.partial[2 * c] : kmin;
      kmax = a.partial[2 * c + 1] < kmax ? a.partial[2 * c + 1] : kmax;
    }
    kmin = warp_min(kmin);
    kmax = warp_min(kmax);
    if (lane == 0) {
      a.keys[2 * b] = kmin;
      a.keys[2 * b + 1] = kmax;
    }
  }
}

// A warp per row of 32 quads, all in one bucket; the lane at the bucket's first quad writes
// its scale record.
template <uint32_t kBits, bool kStochastic>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const EncodeArgs a, const uint64_t* keys) {
  constexpr uint32_t kLevels = (1u << kBits) - 1u;
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t rows = (a.n + 127) / 128;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t row = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; row < rows;
       row += stride) {
    const uint64_t b = 128 * row / a.bucket;
    BucketView v;
    v.lo = b * a.bucket;
    v.len = static_cast<uint32_t>(a.n - v.lo < a.bucket ? a.n - v.lo : a.bucket);
    v.first = v.lo / 4;
    v.skip = 0;
    const quant::QsgdScale s =
        quant::qsgd_scale(key_value(keys[2 * b], false), key_value(keys[2 * b + 1], true), kLevels);
    const auto t = static_cast<uint32_t>(32 * row + lane - v.first);
    if (t == 0) *reinterpret_cast<float2*>(a.scales + kScaleBytes * b) = make_float2(s.min, s.unit);
    const uint32_t m = quad_mask(t, 0, v.len);
    float x[1][4] = {};
    load_acc<1>(a.in.shifted(4 * v.first), t, &m, x);
    emit_quad<kBits, kStochastic>(a, v, s, t, lane, x[0]);
  }
}

// Whether a's buckets are better spread over the device: large, row-aligned, and too few
// for a warp each to fill it.
template <uint32_t kBits, bool kStochastic>
Result<bool> spread_buckets(const EncodeArgs& a) {
  if (a.bucket <= kCachedElements || a.bucket % 128 != 0) return false;
  GW_ASSIGN_OR_RETURN(const uint64_t wave, resident_blocks(encode_kernel<kBits, kStochastic, 8>, kThreads));
  return a.nb < wave * kWarpsPerBlock;
}

template <uint32_t kBits, bool kStochastic>
Status launch_spread(const EncodeArgs& a, DeviceScratch* scratch, cudaStream_t stream) {
  if (scratch == nullptr) return internal_error("qsgd device encode of large buckets needs scratch memory");
  ChunkArgs c{a.in, a.n, a.bucket, (a.bucket + kChunkElements - 1) / kChunkElements, 0, nullptr, nullptr};
  c.chunks = a.nb * c.chunks_per_bucket;
  GW_ASSIGN_OR_RETURN(uint64_t * keys, scratch->get<uint64_t>(1, 2 * (c.chunks + a.nb)));
  c.partial = keys;
  c.keys = keys + 2 * c.chunks;
  GW_ASSIGN_OR_RETURN(const unsigned g1, grid_for(chunk_minmax_kernel, kThreads, c.chunks, 1));
  chunk_minmax_kernel<<<g1, kThreads, 0, stream>>>(c);
  GW_RETURN_IF_ERROR(launch_status("qsgd chunk min/max kernel"));
  GW_ASSIGN_OR_RETURN(const unsigned g2, grid_for(bucket_keys_kernel, kThreads, a.nb, kWarpsPerBlock));
  bucket_keys_kernel<<<g2, kThreads, 0, stream>>>(c);
  GW_RETURN_IF_ERROR(launch_status("qsgd bucket keys kernel"));
  const auto kernel = quantize_rows_kernel<kBits, kStochastic>;
  GW_ASSIGN_OR_RETURN(const unsigned g3, grid_for(kernel, kThreads, (a.n + 127) / 128, kWarpsPerBlock));
  kernel<<<g3, kThreads, 0, stream>>>(a, c.keys);
  return launch_status("qsgd quantize kernel");
}

template <uint32_t kBits, bool kStochastic>
Status launch_encode(const EncodeArgs& a, const DeviceShape& dev, DeviceScratch* scratch, cudaStream_t stream) {
  GW_ASSIGN_OR_RETURN(const bool spread, (spread_buckets<kBits, kStochastic>(a)));
  if (spread) return launch_spread<kBits, kStochastic>(a, scratch, stream);
  const uint64_t in_bytes = static_cast<uint64_t>(a.bucket) * (a.in.b != nullptr ? 8 : 4);
  if (a.bucket <= kCachedElements / 2) {
    const auto kernel = encode_kernel<kBits, kStochastic, 4>;
    GW_ASSIGN_OR_RETURN(const unsigned grid, bucket_grid(kernel, a.nb, in_bytes, false, dev));
    kernel<<<grid, kThreads, 0, stream>>>(a);
  } else {
    const auto kernel = encode_kernel<kBits, kStochastic, 8>;
    GW_ASSIGN_OR_RETURN(const unsigned grid, bucket_grid(kernel, a.nb, in_bytes, a.bucket > kCachedElements, dev));
    kernel<<<grid, kThreads, 0, stream>>>(a);
  }
  return launch_status("qsgd encode kernel");
}

template <class Fn>
Status with_bits(uint32_t bits, Fn&& fn) {
  switch (bits) {
    case 1: return fn(std::integral_constant<uint32_t, 1>{});
    case 2: return fn(std::integral_constant<uint32_t, 2>{});
    case 4: return fn(std::integral_constant<uint32_t, 4>{});
    case 8: return fn(std::integral_constant<uint32_t, 8>{});
    default: break;
  }
  return internal_error("qsgd bit width " + std::to_string(bits) + " is not 1, 2, 4 or 8");
}

// ---- Decode. ----

struct DecodeArgs {
  const uint8_t* payload;  // the scale records
  uint32_t scale_width;
  const uint8_t* codes;
  uint32_t code_width;
  float* dst;
  uint32_t dst_width;
  uint64_t n;
  uint32_t bucket;
  BucketDiv div;
};

__device__ __forceinline__ quant::QsgdScale load_scale(const DecodeArgs& a, uint64_t b) {
  const Raw<8> r = load_raw<8>(a.payload + kScaleBytes * b, a.scale_width);
  return quant::QsgdScale{hd::bits_float(r.w[0]), hd::bits_float(r.w[1]), 0.0f};
}

// The codes of elements 4q .. 4q+3 (all below n), element j at bit j * kBits.
template <uint32_t kBits>
__device__ __forceinline__ uint32_t quad_codes(const uint8_t* codes, uint64_t q, uint32_t width) {
  if constexpr (kBits == 1) {
    return (static_cast<uint32_t>(codes[q / 2]) >> (4 * (q % 2))) & 0xfu;
  } else {
    return load_raw<kBits / 2>(codes + q * (kBits / 2), width).w[0];
  }
}

template <uint32_t kBits, DecodeMode kMode>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeArgs a) {
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  auto* dst = reinterpret_cast<uint8_t*>(a.dst);
  const uint64_t quads = (a.n + 3) / 4;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t q = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const uint64_t i0 = 4 * q;
    uint64_t b = a.div(i0);
    uint64_t next = (b + 1) * a.bucket;  // first element of the next bucket
    quant::QsgdScale s = load_scale(a, b);
    if (i0 + 4 <= a.n) {
      const uint32_t codes = quad_codes<kBits>(a.codes, q, a.code_width);
      float d[4] = {};
      if constexpr (kMode != DecodeMode::kOverwrite) load_quad<DType::kFloat32>(dst, q, a.dst_width, d);
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j) {
        if (i0 + j >= next) {
          s = load_scale(a, ++b);
          next += a.bucket;
        }
        d[j] = apply_mode<kMode>(d[j], quant::qsgd_dequantize((codes >> (j * kBits)) & kMask, s));
      }
      store_quad<DType::kFloat32>(dst, q, a.dst_width, d);
    } else {
      for (uint64_t i = i0; i < a.n; ++i) {
        if (i >= next) {
          s = load_scale(a, ++b);
          next += a.bucket;
        }
        a.dst[i] = apply_mode<kMode>(a.dst[i], quant::qsgd_dequantize(quant::get_code(a.codes, i, kBits), s));
      }
    }
  }
}

}  // namespace

Result<uint64_t> encode_qsgd(const EncodeJob& job, wire::Header& header) {
  const CodecSpec& spec = *job.spec;
  header.bits = spec.bits;
  header.bucket = spec.bucket;
  header.flags = spec.stochastic ? uint8_t{0} : wire::kFlagNearestRounding;
  const uint64_t nb = quant::bucket_count(job.n, spec.bucket);
  const uint64_t payload_bytes = nb * kScaleBytes + quant::code_bytes(job.n, spec.bits);
  if (job.n == 0) return payload_bytes;

  GW_ASSIGN_OR_RETURN(const DeviceShape dev, device_shape());
  uint8_t* codes = job.payload + nb * kScaleBytes;
  GW_ASSIGN_OR_RETURN(const CodeSink sink,
                      prepare_codes(codes, job.n, spec.bits, spec.bucket, job.scratch, job.stream));
  const EncodeArgs args{AccSource::of(job.src, job.residual),
                        job.n,
                        nb,
                        spec.bucket,
                        RandomStream{spec.seed, job.ctx.step, job.ctx.rank},
                        job.payload,
                        sink};
  GW_RETURN_IF_ERROR(with_bits(spec.bits, [&](auto kb) {
    constexpr uint32_t kBits = decltype(kb)::value;
    return spec.stochastic ? launch_encode<kBits, true>(args, dev, job.scratch, job.stream)
                           : launch_encode<kBits, false>(args, dev, job.scratch, job.stream);
  }));
  GW_RETURN_IF_ERROR(finish_codes(sink, job.stream));
  return payload_bytes;
}

Status decode_qsgd(const DecodeJob& job) {
  const wire::Header& h = *job.header;
  if (h.count == 0) return Status::ok();
  const uint64_t nb = quant::bucket_count(h.count, h.bucket);
  const uint8_t* codes = job.payload + nb * kScaleBytes;
  const DecodeArgs args{job.payload,
                        access_width(job.payload, 8),
                        codes,
                        access_width(codes, 4),
                        static_cast<float*>(job.dst),
                        access_width(job.dst, 16),
                        h.count,
                        h.bucket,
                        BucketDiv::of(h.bucket)};
  return with_bits(h.bits, [&](auto kb) {
    return with_mode(job.mode, [&](auto km) -> Status {
      const auto kernel = decode_kernel<decltype(kb)::value, decltype(km)::value>;
      GW_ASSIGN_OR_RETURN(const unsigned grid, elementwise_grid(kernel, (h.count + 3) / 4));
      kernel<<<grid, kThreads, 0, job.stream>>>(args);
      return launch_status("qsgd decode kernel");
    });
  });
}

namespace {
Result<uint64_t> encode_qsgd_row(const EncodeJob& job, wire::Header& header, const uint64_t**) {
  return encode_qsgd(job, header);
}
}  // namespace

GW_REGISTER_DEVICE_CODEC(CodecId::kQsgd, encode_qsgd_row, decode_qsgd);

}  // namespace gw::kern
