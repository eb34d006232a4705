// Messages of n float32 elements read as (index, value) entries and merged: the sparse
// all-reduce (collectives/algorithms/host/sparse_doubling_allreduce.cpp) sums two ranks'
// sparse messages into one and sends that on, switching to a dense message where the union
// of their indices is denser than a dense buffer's bytes (SparCML, SC'19).
//
// What it writes are ordinary wire messages (docs/wire-format.md): a topk-layout message
// (codec topk, k = the entries) or a dense one (codec none, float32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "compressors/philox.hpp"
#include "gradwire/status.hpp"

namespace gw::detail {

// A validated message, read as entries in increasing index order.
struct EntryView {
  bool dense = false;    // codec none: every element, entry i is element i
  bool derived = false;  // randomk: indices from the shared stream, not the payload
  uint64_t n = 0;        // elements the message decodes to
  uint64_t k = 0;        // entries (n when dense)
  uint32_t width = 4;    // bytes of an index in the payload
  const uint8_t* idx = nullptr;
  const uint8_t* val = nullptr;
  RandomStream stream{};  // derived only

  uint64_t index(uint64_t i) const;
  float value(uint64_t i) const {
    float v;
    std::memcpy(&v, val + i * sizeof(float), sizeof v);
    return v;
  }
};

// msg validated whole (as decode would) as a float32 message of exactly n elements that adds
// entry by entry: topk, dgc, randomk, or none. Anything else is an error naming it.
Result<EntryView> view_entries(const uint8_t* msg, size_t len, uint64_t n);

// The view of a message merge_entries or rewrite_entries wrote here (trusted: read, not
// validated again).
EntryView view_written(const uint8_t* msg, uint64_t n);

// Bytes of a message holding k entries of n: as index/value pairs, and dense.
uint64_t sparse_message_bytes(uint64_t n, uint64_t k);
uint64_t dense_message_bytes(uint64_t n);
// Whether k entries of n go as index/value pairs (fewer bytes than dense), the rule every
// merge follows; and the bytes of the message it writes for them.
bool pairs_smaller(uint64_t n, uint64_t k);
uint64_t entries_message_bytes(uint64_t n, uint64_t k);
// The largest message merge_entries or rewrite_entries writes for n elements.
uint64_t max_entries_message_bytes(uint64_t n);

// Writes lo + hi (each common index summed lo's value first, so that both partners of an
// exchange get the same bits) into out: as pairs while they take fewer bytes than a dense
// message, else dense. Returns the bytes written. lo and hi must have the same n.
size_t merge_entries(const EntryView& lo, const EntryView& hi, uint8_t* out);
// v alone, in the same form merge_entries would choose (a randomk message gets its indices).
size_t rewrite_entries(const EntryView& v, uint8_t* out);
// dst (v.n floats) = v, zero where v has no entry (zeroed: dst is all zeros already).
void expand_entries(const EntryView& v, float* dst, bool zeroed = false);

}  // namespace gw::detail
