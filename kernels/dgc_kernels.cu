// dgc on the device, the choices of compressors/dgc_codec.cpp: small inputs (or k >= n / 4)
// take the exact top-k; otherwise a stratified sample of m keys gives the threshold that
// over-selects by 25%, one pass over the input compacts every index at or above it (with
// error feedback that pass also stores residual + src), and the host waits once, on the
// job's stream, for the candidate count c: more than cap falls back to the exact top-k of
// everything, at most k are all sent, otherwise an exact top-k runs over the candidates.
#include <algorithm>
#include <cmath>
#include <string>

#include "compressors/hd.hpp"
#include "compressors/sparse_layout.hpp"
#include "compressors/stratified.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/radix_select.cuh"

namespace gw::kern {
namespace {

constexpr uint64_t kMinSample = 256;
constexpr double kOverSelect = 1.25;
constexpr uint64_t kExactBelow = 4096;
constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 16384;

unsigned int blocks_for(uint64_t items) {
  return static_cast<unsigned int>(std::clamp<uint64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// keys[j] = magnitude key of the accumulated value at stratified_index(rs, j, n, m).
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* src, const float* residual, uint64_t n, uint64_t m, RandomStream rs,
                  uint32_t* keys) {
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

// Sends every candidate (c <= k): the list is already in index order.
template <class Idx>
__global__ void __launch_bounds__(kThreads)
    emit_all_kernel(const float* x, const Idx* cand, uint64_t c, SparseOut<Idx> out) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < c; j += stride) {
    const Idx i = cand[j];
    const float v = x[i];
    out.index[j] = i;
    out.value[j] = v;
    if (out.residual != nullptr) out.residual[i] = hd::sub(v, v);
  }
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

// Scratch slots 5 (sample keys) and 6 (candidates, their keys, their count) and the pinned
// host word; radix_select uses 0 to 4. Returns how many elements the message carries.
template <class Idx>
Result<uint64_t> sampled_select(const EncodeJob& job, const DgcPlan& p) {
  DeviceScratch& scratch = *job.scratch;
  const auto* src = static_cast<const float*>(job.src);
  GW_ASSIGN_OR_RETURN(uint32_t* sample, scratch.get<uint32_t>(5, p.m));
  const size_t cand_bytes = align_up(p.cap * sizeof(Idx));
  const size_t key_bytes = align_up(p.cap * sizeof(uint32_t));
  GW_ASSIGN_OR_RETURN(uint8_t* list, scratch.get<uint8_t>(6, cand_bytes + key_bytes + sizeof(uint64_t)));
  auto* cand = reinterpret_cast<Idx*>(list);
  auto* cand_keys = reinterpret_cast<uint32_t*>(list + cand_bytes);
  auto* count = reinterpret_cast<uint64_t*>(list + cand_bytes + key_bytes);

  const RandomStream rs{job.spec->seed, job.ctx.step, job.ctx.rank};
  sample_kernel<<<blocks_for(p.m), kThreads, 0, job.stream>>>(src, job.residual, job.n, p.m, rs, sample);
  GW_RETURN_IF_ERROR(launch_status("sample_kernel"));
  const SelectArray in{src, job.residual, job.n};
  GW_RETURN_IF_ERROR(
      select_at_least_kth<Idx>(sample, p.m, p.rank, in, cand, cand_keys, p.cap, count, scratch, job.stream));

  GW_ASSIGN_OR_RETURN(void* host, scratch.host(sizeof(uint64_t)));
  GW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, count, sizeof(uint64_t), cudaMemcpyDeviceToHost, job.stream));
  GW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(job.stream));
  const uint64_t c = *static_cast<const uint64_t*>(host);

  // The candidate pass was the input's first: the accumulated values now sit in values().
  const SelectArray acc{job.residual != nullptr ? nullptr : src, job.residual, job.n};
  const float* x = acc.values();
  if (c > p.cap) {
    GW_RETURN_IF_ERROR(
        select_topk<Idx>(acc, p.k, sparse_out<Idx>(job.payload, p.k, job.residual), scratch, job.stream));
    return p.k;
  }
  if (c <= p.k) {
    if (c > 0) {
      emit_all_kernel<<<blocks_for(c), kThreads, 0, job.stream>>>(x, cand, c,
                                                                  sparse_out<Idx>(job.payload, c, job.residual));
      GW_RETURN_IF_ERROR(launch_status("emit_all_kernel"));
    }
    return c;
  }
  const SelectList<Idx> list_in{x, cand, cand_keys, c};
  GW_RETURN_IF_ERROR(
      select_topk<Idx>(list_in, p.k, sparse_out<Idx>(job.payload, p.k, job.residual), scratch, job.stream));
  return p.k;
}

}  // namespace

Result<uint64_t> encode_dgc(const EncodeJob& job, wire::Header& header) {
  if (job.dtype != DType::kFloat32) {
    return unsupported(std::string("dgc does not take ") + dtype_name(job.dtype) + " input");
  }
  const uint64_t n = job.n;
  const uint64_t k = job.spec->k_for(n);
  Result<uint64_t> kept = with_index_type(n, [&](auto idx) -> Result<uint64_t> {
    using Idx = decltype(idx);
    if (n < kExactBelow || k * 4 >= n) {
      const SelectArray in{static_cast<const float*>(job.src), job.residual, n};
      GW_RETURN_IF_ERROR(
          select_topk<Idx>(in, k, sparse_out<Idx>(job.payload, k, job.residual), *job.scratch, job.stream));
      return k;
    }
    return sampled_select<Idx>(job, plan(*job.spec, n, k));
  });
  if (!kept) return kept.status();
  header.k = *kept;
  return detail::sparse_payload_bytes(n, *kept);
}

}  // namespace gw::kern
