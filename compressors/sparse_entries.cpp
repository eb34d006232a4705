#include "compressors/sparse_entries.hpp"

#include <cstring>
#include <string>

#include "compressors/payload_io.hpp"
#include "compressors/sparse_layout.hpp"
#include "compressors/stratified.hpp"
#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"

namespace gw::detail {
namespace {

uint8_t* write_dense_header(uint64_t n, uint8_t* out) {
  wire::Header h;
  h.codec = CodecId::kNone;
  h.dtype = DType::kFloat32;
  h.count = n;
  h.payload_bytes = n * sizeof(float);
  wire::write_header(h, out);
  return out + wire::kHeaderBytes;
}

// The header of k pairs; returns where the indices go (the values follow k indices later).
uint8_t* write_sparse_header(uint64_t n, uint64_t k, uint8_t* out) {
  wire::Header h;
  h.codec = CodecId::kTopk;
  h.dtype = DType::kFloat32;
  h.count = n;
  h.k = k;
  h.payload_bytes = sparse_payload_bytes(n, k);
  wire::write_header(h, out);
  return out + wire::kHeaderBytes;
}

void store_index(uint8_t* payload, uint64_t i, uint32_t width, uint64_t v) {
  if (width == 4) {
    store_le(payload, i, static_cast<uint32_t>(v));
  } else {
    store_le(payload, i, v);
  }
}

// Calls f with a functor giving v's i-th index, specialised on how v stores them (the merges
// touch every entry twice: a branch per index would cost more than the merge itself).
template <class F>
void with_indices(const EntryView& v, F&& f) {
  if (v.dense) {
    f([](uint64_t i) { return i; });
  } else if (v.derived) {
    f([&v](uint64_t i) { return stratified_index(v.stream, i, v.n, v.k); });
  } else if (v.width == 4) {
    f([p = v.idx](uint64_t i) { return uint64_t{load_le<uint32_t>(p, i)}; });
  } else {
    f([p = v.idx](uint64_t i) { return load_le<uint64_t>(p, i); });
  }
}

// Entries of the union of lo's and hi's indices.
uint64_t union_size(const EntryView& lo, const EntryView& hi) {
  uint64_t u = 0;
  with_indices(lo, [&](auto li) {
    with_indices(hi, [&](auto hj) {
      uint64_t i = 0, j = 0;
      while (i < lo.k && j < hi.k) {
        const uint64_t a = li(i), b = hj(j);
        i += a <= b;
        j += b <= a;
        ++u;
      }
      u += (lo.k - i) + (hi.k - j);
    });
  });
  return u;
}

// Calls emit(index, value) for every index of the union in increasing order, summing lo's
// value first where both have it.
template <class Emit>
void walk_union(const EntryView& lo, const EntryView& hi, Emit&& emit) {
  with_indices(lo, [&](auto li) {
    with_indices(hi, [&](auto hj) {
      uint64_t i = 0, j = 0;
      while (i < lo.k && j < hi.k) {
        const uint64_t a = li(i), b = hj(j);
        if (a < b) {
          emit(a, lo.value(i++));
        } else if (b < a) {
          emit(b, hi.value(j++));
        } else {
          emit(a, lo.value(i++) + hi.value(j++));
        }
      }
      for (; i < lo.k; ++i) emit(li(i), lo.value(i));
      for (; j < hi.k; ++j) emit(hj(j), hi.value(j));
    });
  });
}

// dense (a dense view) op sparse into out's dense payload; lo_dense: the dense one is lo.
size_t merge_dense_sparse(const EntryView& dense, const EntryView& sparse, bool lo_dense, uint8_t* out) {
  uint8_t* payload = write_dense_header(dense.n, out);
  if (dense.n > 0) std::memmove(payload, dense.val, dense.n * sizeof(float));
  with_indices(sparse, [&](auto index) {
    for (uint64_t j = 0; j < sparse.k; ++j) {
      const uint64_t at = index(j);
      const float d = load_le<float>(payload, at), s = sparse.value(j);
      store_le(payload, at, lo_dense ? d + s : s + d);
    }
  });
  return static_cast<size_t>(dense_message_bytes(dense.n));
}

}  // namespace

uint64_t EntryView::index(uint64_t i) const {
  if (dense) return i;
  if (derived) return stratified_index(stream, i, n, k);
  return load_index(idx, i, width);
}

uint64_t sparse_message_bytes(uint64_t n, uint64_t k) { return wire::kHeaderBytes + sparse_payload_bytes(n, k); }
uint64_t dense_message_bytes(uint64_t n) { return wire::kHeaderBytes + n * sizeof(float); }
uint64_t max_entries_message_bytes(uint64_t n) { return dense_message_bytes(n); }
bool pairs_smaller(uint64_t n, uint64_t k) { return sparse_message_bytes(n, k) < dense_message_bytes(n); }
uint64_t entries_message_bytes(uint64_t n, uint64_t k) {
  return pairs_smaller(n, k) ? sparse_message_bytes(n, k) : dense_message_bytes(n);
}

Result<EntryView> view_entries(const uint8_t* msg, size_t len, uint64_t n) {
  GW_ASSIGN_OR_RETURN(MessageInfo info, inspect(msg, len));
  GW_ASSIGN_OR_RETURN(wire::Header h, wire::read_header(msg, len));
  if (h.dtype != DType::kFloat32) return invalid_message("a sparse all-reduce message must carry float32");
  if (info.count != n) {
    return invalid_message("message of " + std::to_string(info.count) + " elements, expected " + std::to_string(n));
  }
  const uint8_t* payload = msg + wire::kHeaderBytes;
  EntryView v;
  v.n = n;
  switch (h.codec) {
    case CodecId::kNone:
      v.dense = true;
      v.k = n;
      v.val = payload;
      return v;
    case CodecId::kTopk:
    case CodecId::kDgc:
      v.k = h.k;
      v.width = index_bytes(n);
      v.idx = payload;
      v.val = payload + h.k * v.width;
      return v;
    case CodecId::kRandomk:
      v.derived = true;
      v.k = h.k;
      v.val = payload;
      v.stream = RandomStream{h.seed, h.step, kSharedStreamRank};
      return v;
    default:
      return invalid_message(std::string("a ") + codec_name(h.codec) +
                             " message has no entries to merge (expected topk, dgc, randomk or none)");
  }
}

EntryView view_written(const uint8_t* msg, uint64_t n) {
  EntryView v;
  v.n = n;
  const uint8_t* payload = msg + wire::kHeaderBytes;
  if (static_cast<CodecId>(msg[5]) == CodecId::kNone) {
    v.dense = true;
    v.k = n;
    v.val = payload;
    return v;
  }
  v.k = wire::load_u64(msg + wire::kKAt);
  v.width = index_bytes(n);
  v.idx = payload;
  v.val = payload + v.k * v.width;
  return v;
}

size_t merge_entries(const EntryView& lo, const EntryView& hi, uint8_t* out) {
  const uint64_t n = lo.n;
  if (lo.dense && hi.dense) {
    uint8_t* payload = write_dense_header(n, out);
    for (uint64_t i = 0; i < n; ++i) store_le(payload, i, lo.value(i) + hi.value(i));
    return static_cast<size_t>(dense_message_bytes(n));
  }
  if (lo.dense) return merge_dense_sparse(lo, hi, true, out);
  if (hi.dense) return merge_dense_sparse(hi, lo, false, out);
  const uint64_t u = union_size(lo, hi);
  if (pairs_smaller(n, u)) {
    uint8_t* payload = write_sparse_header(n, u, out);
    const uint32_t width = index_bytes(n);
    uint8_t* values = payload + u * width;
    uint64_t at = 0;
    walk_union(lo, hi, [&](uint64_t index, float value) {
      store_index(payload, at, width, index);
      store_le(values, at++, value);
    });
    return static_cast<size_t>(sparse_message_bytes(n, u));
  }
  uint8_t* payload = write_dense_header(n, out);
  if (n > 0) std::memset(payload, 0, n * sizeof(float));
  walk_union(lo, hi, [&](uint64_t index, float value) { store_le(payload, index, value); });
  return static_cast<size_t>(dense_message_bytes(n));
}

size_t rewrite_entries(const EntryView& v, uint8_t* out) {
  const EntryView none{false, false, v.n, 0, index_bytes(v.n), nullptr, nullptr, RandomStream{}};
  if (v.dense) return merge_dense_sparse(v, none, true, out);
  return merge_entries(v, none, out);
}

void expand_entries(const EntryView& v, float* dst, bool zeroed) {
  if (v.dense) {
    if (v.n > 0) std::memcpy(dst, v.val, v.n * sizeof(float));
    return;
  }
  if (!zeroed && v.n > 0) std::memset(dst, 0, v.n * sizeof(float));
  with_indices(v, [&](auto index) {
    for (uint64_t i = 0; i < v.k; ++i) dst[index(i)] = v.value(i);
  });
}

}  // namespace gw::detail
