// The codec kernels match the host codecs bit for bit only with IEEE single precision on the
// device: denormals kept (-ftz=false), division and square root correctly rounded
// (-prec-div=true, -prec-sqrt=true) and no multiply-add contraction (-fmad=false).
// kernels/CMakeLists.txt sets the four explicitly. nvcc lets explicit values win over
// --use_fast_math wherever it stands on the line, so a user's fast math changes nothing here;
// a contrary explicit flag after ours (NVCC_APPEND_FLAGS=-ftz=true, a per-source option) wins
// with an nvcc warning, and this header then fails the build instead of changing bytes.
//
// nvcc 13 defines no macro for these flags (nvcc -E -dM shows none under --use_fast_math,
// -ftz=true, -fmad=true, -prec-div=false), so #if cannot see them. NVVM's reflection can:
// __nvvm_reflect("__CUDA_FTZ") and friends fold to the flags' values at compile time, so the
// call below to a function defined nowhere survives only when a flag is wrong, and ptxas
// (nvlink with -rdc) stops with "Unresolved extern function '<its name>'". -fmad has no
// reflection; the shared math uses explicit __fmul_rn/__fadd_rn, which are never contracted.
#pragma once

#if defined(__CUDACC__)
#if defined(__CUDA_ARCH__)
extern "C" __device__ int __nvvm_reflect(const char*);
extern "C" __device__ void gradwire_codec_kernels_need_ftz_false_prec_div_true_prec_sqrt_true__no_use_fast_math();
#endif

namespace {
// Never launched: compiled into every file that includes this header, so the check runs
// whether or not that file's kernels happen to use the affected operations.
__global__ void gw_precise_math_guard() {
#if defined(__CUDA_ARCH__)
  if (__nvvm_reflect("__CUDA_FTZ") != 0 || __nvvm_reflect("__CUDA_PREC_DIV") == 0 ||
      __nvvm_reflect("__CUDA_PREC_SQRT") == 0)
    gradwire_codec_kernels_need_ftz_false_prec_div_true_prec_sqrt_true__no_use_fast_math();
#endif
}
}  // namespace
#endif
