// dgc on the device, the choices of compressors/dgc_codec.cpp: small inputs (or k >= n / 4)
// take the exact top-k; otherwise a stratified sample of m keys gives the threshold that
// over-selects by 25%, one pass over the input compacts every index at or above it (with
// error feedback that pass also stores residual + src), and the candidate count c decides,
// on the device: more than cap falls back to the exact top-k of everything, at most k are
// all sent, otherwise an exact top-k runs over the candidates. Nothing waits on the host:
// the message's length is written into its header by the device.
#include <algorithm>
#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "compressors/hd.hpp"
#include "compressors/sparse_layout.hpp"
#include "compressors/stratified.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/grid_size.cuh"
#include "kernels/precise_math.cuh"
#include "kernels/radix_select.cuh"

namespace gw::kern {
namespace {

constexpr uint64_t kMinSample = 256;
constexpr double kOverSelect = 1.25;
constexpr uint64_t kExactBelow = 4096;
constexpr int kThreads = 256;

// keys[j] = magnitude key of the accumulated value at stratified_index(rs, j, n, m).
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* src, const float* residual, uint64_t n, uint64_t m, RandomStream rs, uint32_t* keys) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += stride) {
    const uint64_t i = stratified_index(rs, j, n, m);
    float a;
    if (src != nullptr && residual != nullptr) {
      a = hd::add(residual[i], src[i]);
    } else {
      a = residual != nullptr ? residual[i] : src[i];
    }
    keys[j] = hd::magnitude_key(a);
  }
}

// How many elements the message carries: k, or every candidate when there are at most k.
__global__ void kept_kernel(const uint64_t* count, uint64_t k, uint64_t cap, uint64_t* kept) {
  if (threadIdx.x != 0) return;
  const uint64_t c = *count;
  *kept = c > cap || c > k ? k : c;
}

struct DgcPlan {
  uint64_t k;
  uint64_t m;     // samples
  uint64_t rank;  // the threshold is the rank-th largest sampled key
  uint64_t cap;   // most candidates kept before falling back to the exact top-k
};

// The host codec's arithmetic, expression for expression (doubles, same order).
DgcPlan plan(const CodecSpec& spec, uint64_t n, uint64_t k) {
  DgcPlan p{};
  p.k = k;
  p.m = std::min<uint64_t>(
      n, std::max<uint64_t>(kMinSample, static_cast<uint64_t>(std::ceil(spec.sample * static_cast<double>(n)))));
  const double want = kOverSelect * static_cast<double>(k) * static_cast<double>(p.m) / static_cast<double>(n);
  p.rank = std::clamp<uint64_t>(static_cast<uint64_t>(std::ceil(want)), 1, p.m);
  p.cap = std::min<uint64_t>(n, 4 * k + 1024);
  return p;
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Scratch slots 5 (sample keys) and 6 (candidates, their keys, their count and the kept
// count); radix_select uses 0 to 4. Both selections that can follow the candidate pass are
// enqueued, each gated on the device by the candidate count c: the exact top-k of
// everything when c > cap, else the exact top-min(k, c) of the candidates, so the host never
// waits to learn c. The candidate list is padded to cap with key 0, which no candidate has
// (their keys are >= the sampled threshold, which is above 0 unless every element is a
// candidate, and then c = n = cap and there is no padding). *kept receives how many elements
// the message carries.
template <class Idx>
Status sampled_select(const EncodeJob& job, const DgcPlan& p, const uint64_t** kept_out) {
  DeviceScratch& scratch = *job.scratch;
  const auto* src = static_cast<const float*>(job.src);
  GW_ASSIGN_OR_RETURN(uint32_t * sample, scratch.get<uint32_t>(5, p.m));
  const size_t cand_bytes = align_up(p.cap * sizeof(Idx));
  const size_t key_bytes = align_up(p.cap * sizeof(uint32_t));
  GW_ASSIGN_OR_RETURN(uint8_t * list, scratch.get<uint8_t>(6, cand_bytes + key_bytes + 2 * sizeof(uint64_t)));
  auto* cand = reinterpret_cast<Idx*>(list);
  auto* cand_keys = reinterpret_cast<uint32_t*>(list + cand_bytes);
  auto* count = reinterpret_cast<uint64_t*>(list + cand_bytes + key_bytes);
  uint64_t* kept = count + 1;
  GW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(cand_keys, 0, p.cap * sizeof(uint32_t), job.stream));

  const RandomStream rs{job.spec->seed, job.ctx.step, job.ctx.rank};
  GW_ASSIGN_OR_RETURN(const unsigned int blocks, grid_for(sample_kernel, kThreads, p.m, kThreads));
  sample_kernel<<<blocks, kThreads, 0, job.stream>>>(src, job.residual, job.n, p.m, rs, sample);
  GW_RETURN_IF_ERROR(launch_status("sample_kernel"));
  const SelectArray in{src, job.residual, job.n};
  GW_RETURN_IF_ERROR(
      select_at_least_kth<Idx>(sample, p.m, p.rank, in, cand, cand_keys, p.cap, count, scratch, job.stream));
  kept_kernel<<<1, 32, 0, job.stream>>>(count, p.k, p.cap, kept);
  GW_RETURN_IF_ERROR(launch_status("kept_kernel"));

  // The candidate pass was the input's first: the accumulated values now sit in values().
  const SelectArray acc{job.residual != nullptr ? nullptr : src, job.residual, job.n};
  GW_RETURN_IF_ERROR(select_topk<Idx>(acc, p.k, sparse_out<Idx>(job.payload, p.k, job.residual), scratch, job.stream,
                                      SelectGate{count, p.cap, true}));
  const SelectList<Idx> list_in{acc.values(), cand, cand_keys, p.cap};
  const SparseOut<Idx> out{reinterpret_cast<Idx*>(job.payload), nullptr, job.residual, kept};
  GW_RETURN_IF_ERROR(select_topk<Idx>(list_in, p.k, out, scratch, job.stream, SelectGate{count, p.cap, false}));
  *kept_out = kept;
  return Status::ok();
}

}  // namespace

Result<uint64_t> encode_dgc(const EncodeJob& job, wire::Header& header, const uint64_t** kept) {
  *kept = nullptr;
  if (job.dtype != DType::kFloat32) {
    return unsupported(std::string("dgc does not take ") + dtype_name(job.dtype) + " input");
  }
  const uint64_t n = job.n;
  const uint64_t k = job.spec->k_for(n);
  GW_RETURN_IF_ERROR(with_index_type(n, [&](auto idx) -> Status {
    using Idx = decltype(idx);
    if (n < kExactBelow || k * 4 >= n) {
      const SelectArray in{static_cast<const float*>(job.src), job.residual, n};
      return select_topk<Idx>(in, k, sparse_out<Idx>(job.payload, k, job.residual), *job.scratch, job.stream);
    }
    return sampled_select<Idx>(job, plan(*job.spec, n, k), kept);
  }));
  // With *kept set, k and the payload length are the most the message can hold; the header
  // kernel writes the real ones from *kept.
  header.k = k;
  return detail::sparse_payload_bytes(n, k);
}

// Decoded by the shared index-carrying decoder (sparse_kernels.cu).
GW_REGISTER_DEVICE_CODEC(CodecId::kDgc, encode_dgc, decode_sparse);

}  // namespace gw::kern
