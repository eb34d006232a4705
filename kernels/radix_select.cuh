// Exact device top-k by magnitude (hd::magnitude_key), shared by the topk and dgc encoders:
// the same choice as compressors/topk_select.cpp (the k largest keys, ties at the threshold
// to the lower position, positions increasing) computed by a radix select, never a sort.
//
// Passes over the input: a histogram of the top 11 key bits (with error feedback it also
// stores residual + src into the residual, so later passes read one array); then, while the
// boundary bin is small, one marking pass that records the certain winners in a bitmask and
// gathers the boundary bin's keys into a short list whose two lower digits (10 + 10 bits) are
// resolved on that list alone. A large boundary bin takes two more histogram passes over the
// input instead. Every decision is taken on the device (kernels read the threshold from
// device memory), so nothing waits for the host. The output is a stable compaction of the
// bitmasks: per-tile counts, an exclusive scan over tiles, then a write pass that touches only
// the chosen elements.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gradwire/status.hpp"
#include "kernels/device_scratch.hpp"

namespace gw::kern {

// A whole array: position i is index i. With src and residual both set, the first pass stores
// hd::add(residual[i], src[i]) into residual (error feedback) and every later read sees that;
// with one of them null the other is read as is.
struct SelectArray {
  const float* src;
  float* residual;
  uint64_t n;

  const float* values() const { return residual != nullptr ? residual : src; }
};

// A candidate list over x: position p has key keys[p] (= magnitude_key(x[index[p]])) and
// index index[p]; indices increase with p.
template <class Idx>
struct SelectList {
  const float* x;
  const Idx* index;
  const uint32_t* keys;
  uint64_t count;
};

// Where a sparse message goes: k indices, then k values (x at those indices). With residual
// set, residual[index] becomes hd::sub(v, v) at every index sent (what the host's subtracting
// decode leaves). With kept set (device memory: dgc, whose count the host does not know),
// the values start at index + *kept instead of at value.
template <class Idx>
struct SparseOut {
  Idx* index;
  float* value;
  float* residual;
  const uint64_t* kept = nullptr;
};

// The message body of `kept` entries at payload: indices first, then values.
template <class Idx>
SparseOut<Idx> sparse_out(uint8_t* payload, uint64_t kept, float* residual) {
  return SparseOut<Idx>{reinterpret_cast<Idx*>(payload), reinterpret_cast<float*>(payload + kept * sizeof(Idx)),
                        residual};
}

// fn(uint32_t{}) or fn(uint64_t{}): the index type of a sparse message over n elements
// (compressors/sparse_layout.hpp, index_bytes).
template <class Fn>
decltype(auto) with_index_type(uint64_t n, Fn&& fn) {
  if (n <= (uint64_t{1} << 32)) return fn(uint32_t{});
  return fn(uint64_t{});
}

// Whether a selection runs, decided on the device (dgc picks one of two selections by its
// candidate count c, which only the device knows): with count set it runs when c > cap
// (over_cap) or when c <= cap, and in the latter case selects min(k, c). The default always
// runs. A gated-off selection's kernels return at once.
struct SelectGate {
  const uint64_t* count = nullptr;  // device
  uint64_t cap = 0;
  bool over_cap = false;
};

// The k (1 <= k <= n) largest by magnitude key into out, indices increasing; ties at the
// threshold go to the lower position. Enqueues on stream only. Uses scratch slots 0 to 4.
template <class Idx>
Status select_topk(const SelectArray& in, uint64_t k, const SparseOut<Idx>& out, DeviceScratch& scratch,
                   cudaStream_t stream, const SelectGate& gate = SelectGate{});
template <class Idx>
Status select_topk(const SelectList<Idx>& in, uint64_t k, const SparseOut<Idx>& out, DeviceScratch& scratch,
                   cudaStream_t stream, const SelectGate& gate = SelectGate{});

// dgc's candidate pass. T = the rank-th largest of keys[0, m) (1 <= rank <= m); then every
// index of `in` whose key is >= T, increasing, goes to cand (the first cap of them) and its
// key to cand_keys; how many there are (which may exceed cap) to *count, in device memory.
// This is `in`'s first pass (error feedback is applied here). Enqueues only. Slots 0 to 4.
template <class Idx>
Status select_at_least_kth(const uint32_t* keys, uint64_t m, uint64_t rank, const SelectArray& in, Idx* cand,
                           uint32_t* cand_keys, uint64_t cap, uint64_t* count, DeviceScratch& scratch,
                           cudaStream_t stream);

}  // namespace gw::kern
