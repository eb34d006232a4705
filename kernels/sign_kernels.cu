// sign on the device, byte for byte what compressors/sign_codec.cpp writes.
//
// Encode: one warp per bucket (grid-stride over buckets), one pass over DRAM. Lane l takes
// element 32w + l of each code word w the bucket touches, so a ballot is the word. The
// first pass keeps acc = residual + g in registers (a bucket of up to 1024 elements; larger
// ones are re-read from L2) and sums magnitudes in the wire format's canonical order: each
// lane adds its elements in index order, a rotation puts the bucket's elements l, l+32, ...
// on lane l, and a shuffle-down fold finishes. The second pass writes bits and residuals.
// Buckets too large and too few for a warp each write their bits across the device
// ("Large buckets" below). Decode: one thread per 4 elements.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "compressors/quant_math.hpp"
#include "kernels/device_apply.cuh"
#include "kernels/device_codecs.hpp"

namespace gw::kern {
namespace {

constexpr uint32_t kScaleBytes = 4;
constexpr uint32_t kCachedElements = 1024;  // per warp, in the larger register cache

// quant::sign_value as a flip of the sign bit, which is what the host's negation does.
__device__ __forceinline__ float signed_scale(float scale, uint32_t bit) {
  return hd::bits_float(hd::float_bits(scale) ^ (bit << 31));
}

// ---- Encode. ----

struct EncodeArgs {
  AccSource in;
  uint64_t n;
  uint64_t nb;
  uint32_t bucket;
  float* scales;  // the payload: nb floats
  CodeSink sink;
};

// One bucket as a warp sees it: elements [lo, lo + len), read through `in` from code word
// `first` on; element e = 32r + lane of those words is the bucket's element e - skip.
struct BucketView {
  AccSource in;
  uint64_t first;
  uint64_t lo;
  uint32_t len;
  uint32_t skip;

  __device__ bool has(uint32_t e) const { return e - skip < len; }  // unsigned: below 0 wraps
};

// Code word `first + r`: writes the residuals and returns the word. Every lane of the warp
// calls it.
__device__ __forceinline__ uint32_t emit_word(const BucketView& v, float scale, uint32_t r, uint32_t lane, float x) {
  const uint32_t e = 32 * r + lane;
  const bool active = v.has(e);
  const uint32_t bit = active ? quant::sign_bit(x) : 0u;
  if (active && v.in.residual != nullptr) v.in.residual[e] = hd::sub(x, signed_scale(scale, bit));
  return __ballot_sync(kFullMask, bit != 0);
}

__device__ __forceinline__ void put_bucket_word(const EncodeArgs& a, const BucketView& v, uint32_t r, uint32_t word) {
  const uint64_t w = v.first + r;
  put_word(a.sink, w, word, 32 * w, 32 * w + 32, v.lo, v.lo + v.len, a.n);
}

// Blocks per SM that the encode kernel's registers allow (its launch bounds).
template <uint32_t kRows>
constexpr int kEncodeBlocksPerSm = kRows > 16 ? 2 : 3;

// kRows code words' elements stay in registers between the passes; words past them are
// re-read.
template <uint32_t kRows>
__global__ void __launch_bounds__(kThreads, kEncodeBlocksPerSm<kRows>) encode_kernel(const EncodeArgs a) {
  static_assert(kRows <= 32, "a lane stores one cached word");
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; b < a.nb; b += stride) {
    BucketView v;
    v.lo = b * a.bucket;
    v.len = static_cast<uint32_t>(a.n - v.lo < a.bucket ? a.n - v.lo : a.bucket);
    v.first = v.lo / 32;
    v.skip = static_cast<uint32_t>(v.lo % 32);
    v.in = a.in.shifted(32 * v.first);
    const uint32_t words = (v.skip + v.len + 31) / 32;

    // All loads of `a`, then those of `b` 16 words at a time, before the first add.
    float cache[kRows];
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      const uint32_t e = 32 * r + lane;
      cache[r] = r < words && v.has(e) ? v.in.a[e] : 0.0f;
    }
    if (v.in.b != nullptr) {
#pragma unroll
      for (uint32_t c = 0; c < kRows; c += 16) {
        float y[16];
#pragma unroll
        for (uint32_t k = 0; k < 16; ++k) {
          const uint32_t e = 32 * (c + k) + lane;
          y[k] = c + k < words && v.has(e) ? v.in.b[e] : 0.0f;
        }
#pragma unroll
        for (uint32_t k = 0; k < 16; ++k) cache[c + k] = hd::add(cache[c + k], y[k]);
      }
    }
    float sum = 0.0f;
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      if (r < words && v.has(32 * r + lane)) sum = hd::add(sum, fabsf(cache[r]));
    }
    for (uint32_t r = kRows; r < words; ++r) {
      const uint32_t e = 32 * r + lane;
      if (v.has(e)) sum = hd::add(sum, fabsf(v.in.load(e)));
    }
    // Lane l summed the bucket's elements = l - skip (mod 32); the canonical lane c sums
    // elements c, c + 32, ...: rotate, then fold as quant::fold_lanes does.
    sum = __shfl_sync(kFullMask, sum, (lane + v.skip) % 32);
#pragma unroll
    for (int w = 16; w > 0; w /= 2) sum = hd::add(sum, __shfl_down_sync(kFullMask, sum, w));
    const float scale = hd::div(__shfl_sync(kFullMask, sum, 0), static_cast<float>(v.len));
    if (lane == 0) a.scales[b] = scale;

    // Lane r stores word r of the cached ones, so that the words go out in one store.
    uint32_t mine = 0;
#pragma unroll
    for (uint32_t r = 0; r < kRows; ++r) {
      if (r < words) {
        const uint32_t word = emit_word(v, scale, r, lane, cache[r]);
        if (lane == r) mine = word;
      }
    }
    if (lane < words && lane < kRows) put_bucket_word(a, v, lane, mine);
    for (uint32_t r = kRows; r < words; ++r) {
      const uint32_t e = 32 * r + lane;
      const uint32_t word = emit_word(v, scale, r, lane, v.has(e) ? v.in.load(e) : 0.0f);
      if (lane == 0) put_bucket_word(a, v, r, word);
    }
  }
}

// ---- Decode. ----

struct DecodeArgs {
  const uint8_t* payload;  // the scales
  uint32_t scale_width;
  const uint8_t* codes;
  float* dst;
  uint32_t dst_width;
  uint64_t n;
  uint32_t bucket;
  BucketDiv div;
};

__device__ __forceinline__ float load_scale(const DecodeArgs& a, uint64_t b) {
  return hd::bits_float(load_raw<4>(a.payload + kScaleBytes * b, a.scale_width).w[0]);
}

template <DecodeMode kMode>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeArgs a) {
  auto* dst = reinterpret_cast<uint8_t*>(a.dst);
  const uint64_t quads = (a.n + 3) / 4;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t q = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads; q += stride) {
    const uint64_t i0 = 4 * q;
    uint64_t b = a.div(i0);
    uint64_t next = (b + 1) * a.bucket;  // first element of the next bucket
    float scale = load_scale(a, b);
    // The quad's 4 bits; their byte exists even when the quad runs past n.
    const uint32_t bits = (static_cast<uint32_t>(a.codes[q / 2]) >> (4 * (q % 2))) & 0xfu;
    if (i0 + 4 <= a.n) {
      float d[4] = {};
      if constexpr (kMode != DecodeMode::kOverwrite) load_quad<DType::kFloat32>(dst, q, a.dst_width, d);
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j) {
        if (i0 + j >= next) {
          scale = load_scale(a, ++b);
          next += a.bucket;
        }
        d[j] = apply_mode<kMode>(d[j], signed_scale(scale, bits >> j & 1u));
      }
      store_quad<DType::kFloat32>(dst, q, a.dst_width, d);
    } else {
      for (uint64_t i = i0; i < a.n; ++i) {
        if (i >= next) {
          scale = load_scale(a, ++b);
          next += a.bucket;
        }
        a.dst[i] = apply_mode<kMode>(a.dst[i], signed_scale(scale, bits >> (i - i0) & 1u));
      }
    }
  }
}

// ---- Large buckets: the bits over the whole device. ----
// Buckets too large and too few for a warp each to fill the device (bucket 2^24 at 64M
// elements: 4 warps) keep a warp per bucket for the mean only, and write bits and residuals
// with a warp per code word across the device. The mean cannot be spread: the wire format's
// canonical order makes lane l's sum one chain of bucket/32 dependent adds, and any other
// grouping of them rounds differently (docs/architecture.md). Needs bucket % 32 == 0, so a
// bucket starts at a code word (skip 0: lane l sums the canonical lane l, no rotation).
__global__ void __launch_bounds__(kThreads) bucket_mean_kernel(const EncodeArgs a) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; b < a.nb; b += stride) {
    const uint64_t lo = b * a.bucket;
    const auto len = static_cast<uint32_t>(a.n - lo < a.bucket ? a.n - lo : a.bucket);
    const AccSource in = a.in.shifted(lo);
    // kDepth loads in flight per lane and array before their adds: one warp must stream
    // the whole bucket, and the adds are a chain the loads must not wait on one by one.
    constexpr uint32_t kDepth = 16;
    float sum = 0.0f;
    uint32_t e = lane;
    for (; e + 32 * (kDepth - 1) < len; e += 32 * kDepth) {
      float x[kDepth];
#pragma unroll
      for (uint32_t k = 0; k < kDepth; ++k) x[k] = in.a[e + 32 * k];
      if (in.b != nullptr) {
        float y[kDepth];
#pragma unroll
        for (uint32_t k = 0; k < kDepth; ++k) y[k] = in.b[e + 32 * k];
#pragma unroll
        for (uint32_t k = 0; k < kDepth; ++k) x[k] = hd::add(x[k], y[k]);
      }
#pragma unroll
      for (uint32_t k = 0; k < kDepth; ++k) sum = hd::add(sum, fabsf(x[k]));
    }
    for (; e < len; e += 32) sum = hd::add(sum, fabsf(in.load(e)));
#pragma unroll
    for (int w = 16; w > 0; w /= 2) sum = hd::add(sum, __shfl_down_sync(kFullMask, sum, w));
    if (lane == 0) a.scales[b] = hd::div(sum, static_cast<float>(len));
  }
}

// A warp per code word, after bucket_mean_kernel in stream order.
__global__ void __launch_bounds__(kThreads) word_bits_kernel(const EncodeArgs a) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t words = (a.n + 31) / 32;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t w = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; w < words; w += stride) {
    const uint64_t b = 32 * w / a.bucket;
    BucketView v;
    v.lo = b * a.bucket;
    v.len = static_cast<uint32_t>(a.n - v.lo < a.bucket ? a.n - v.lo : a.bucket);
    v.first = v.lo / 32;
    v.skip = 0;
    v.in = a.in.shifted(v.lo);
    const auto r = static_cast<uint32_t>(w - v.first);
    const uint32_t e = 32 * r + lane;
    const uint32_t word = emit_word(v, a.scales[b], r, lane, v.has(e) ? v.in.load(e) : 0.0f);
    if (lane == 0) put_bucket_word(a, v, r, word);
  }
}

}  // namespace

Result<uint64_t> encode_sign(const EncodeJob& job, wire::Header& header) {
  const uint32_t bucket = job.spec->bucket;
  header.bits = 1;
  header.bucket = bucket;
  const uint64_t nb = quant::bucket_count(job.n, bucket);
  const uint64_t payload_bytes = nb * kScaleBytes + quant::code_bytes(job.n, 1);
  if (job.n == 0) return payload_bytes;

  GW_ASSIGN_OR_RETURN(const DeviceShape dev, device_shape());
  uint8_t* codes = job.payload + nb * kScaleBytes;
  GW_ASSIGN_OR_RETURN(const CodeSink sink, prepare_codes(codes, job.n, 1, bucket, job.scratch, job.stream));
  const EncodeArgs args{AccSource::of(job.src, job.residual),  job.n, nb, bucket,
                        reinterpret_cast<float*>(job.payload), sink};
  const uint64_t in_bytes = static_cast<uint64_t>(bucket) * (args.in.b != nullptr ? 8 : 4);
  bool spread = false;
  if (bucket > kCachedElements && bucket % 32 == 0) {
    GW_ASSIGN_OR_RETURN(const uint64_t wave, resident_blocks(encode_kernel<32>, kThreads));
    spread = nb < wave * kWarpsPerBlock;
  }
  if (spread) {
    GW_ASSIGN_OR_RETURN(const unsigned g1, grid_for(bucket_mean_kernel, kThreads, nb, kWarpsPerBlock));
    bucket_mean_kernel<<<g1, kThreads, 0, job.stream>>>(args);
    GW_RETURN_IF_ERROR(launch_status("sign mean kernel"));
    GW_ASSIGN_OR_RETURN(const unsigned g2, grid_for(word_bits_kernel, kThreads, (job.n + 31) / 32, kWarpsPerBlock));
    word_bits_kernel<<<g2, kThreads, 0, job.stream>>>(args);
  } else if (bucket <= kCachedElements / 2) {
    const auto kernel = encode_kernel<16>;
    GW_ASSIGN_OR_RETURN(const unsigned grid, bucket_grid(kernel, nb, in_bytes, false, dev));
    kernel<<<grid, kThreads, 0, job.stream>>>(args);
  } else {
    const auto kernel = encode_kernel<32>;
    GW_ASSIGN_OR_RETURN(const unsigned grid, bucket_grid(kernel, nb, in_bytes, bucket > kCachedElements, dev));
    kernel<<<grid, kThreads, 0, job.stream>>>(args);
  }
  GW_RETURN_IF_ERROR(launch_status("sign encode kernel"));
  GW_RETURN_IF_ERROR(finish_codes(sink, job.stream));
  return payload_bytes;
}

Status decode_sign(const DecodeJob& job) {
  const wire::Header& h = *job.header;
  if (h.count == 0) return Status::ok();
  const uint64_t nb = quant::bucket_count(h.count, h.bucket);
  const DecodeArgs args{job.payload,
                        access_width(job.payload, 4),
                        job.payload + nb * kScaleBytes,
                        static_cast<float*>(job.dst),
                        access_width(job.dst, 16),
                        h.count,
                        h.bucket,
                        BucketDiv::of(h.bucket)};
  return with_mode(job.mode, [&](auto km) -> Status {
    const auto kernel = decode_kernel<decltype(km)::value>;
    GW_ASSIGN_OR_RETURN(const unsigned grid, elementwise_grid(kernel, (h.count + 3) / 4));
    kernel<<<grid, kThreads, 0, job.stream>>>(args);
    return launch_status("sign decode kernel");
  });
}

namespace {
Result<uint64_t> encode_sign_row(const EncodeJob& job, wire::Header& header, const uint64_t**) {
  return encode_sign(job, header);
}
}  // namespace

GW_REGISTER_DEVICE_CODEC(CodecId::kSign, encode_sign_row, decode_sign);

}  // namespace gw::kern
