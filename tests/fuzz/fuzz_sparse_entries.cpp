// libFuzzer harness: the sparse all-reduce's merging (compressors/sparse_entries.hpp) on
// hostile messages, as sparse doubling takes them from a peer.
//
// Input: 5 control bytes, then two messages a and b.
//   bytes 0-1: the element count n - 1 (u16, little-endian)
//   byte 2:    bit 0: a is replaced by a real top-k encode, bit 1: b too (k from bits 2-7),
//              of floats made from the input's bytes, so that merges are reached
//   bytes 3-4: a's length (u16); b is the rest
//
// Invariants (any violation aborts):
//   - view_entries accepts a message only if gw::inspect does, with count n, and then every
//     index is below n and strictly increasing;
//   - merge_entries of two accepted messages writes at most max_entries_message_bytes(n), a
//     message view_entries accepts, whose expansion is a's plus b's element by element, a's
//     value first (bit for bit), and as pairs only while pairs are smaller than dense;
//   - rewrite_entries of an accepted message expands to what the message expands to.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "compressors/sparse_entries.hpp"
#include "gradwire/codec.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_sparse_entries: invariant violated: %s\n", what);
  std::abort();
}

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// A real top-k message of n floats made from seed bytes.
std::vector<uint8_t> topk_message(const uint8_t* seed, size_t seed_len, uint64_t n, uint32_t k) {
  std::vector<float> x(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t b = seed_len > 0 ? seed[i % seed_len] : 0;
    x[i] = static_cast<float>(static_cast<int>(b) - 128) * 0.25f;
  }
  auto codec = gw::Codec::create("topk:k=" + std::to_string(k));
  if (!codec.is_ok()) fail("topk codec");
  std::vector<uint8_t> out((*codec)->max_encoded_bytes(n, gw::DType::kFloat32));
  auto len = (*codec)->encode(x.data(), n, gw::DType::kFloat32, gw::EncodeContext{}, out.data(), out.size());
  if (!len.is_ok()) fail("topk encode");
  out.resize(*len);
  return out;
}

// v expanded, and which elements it has an entry for.
void expand(const gw::detail::EntryView& v, std::vector<float>& values, std::vector<uint8_t>& has) {
  values.assign(v.n, 0.0f);
  has.assign(v.n, 0);
  gw::detail::expand_entries(v, values.data());
  for (uint64_t i = 0; i < v.k; ++i) {
    const uint64_t at = v.index(i);
    if (at >= v.n) fail("an accepted index out of range");
    if (i > 0 && at <= v.index(i - 1)) fail("accepted indices not strictly increasing");
    has[at] = 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const uint64_t n = uint64_t{u16(data)} % 2048 + 1;
  const uint8_t ctl = data[2];
  const size_t rest = size - 5;
  const size_t la = u16(data + 3) < rest ? u16(data + 3) : rest;
  const uint8_t* body = data + 5;
  std::vector<uint8_t> a(body, body + la), b(body + la, body + rest);
  const uint32_t k = 1 + (ctl >> 2);
  if (ctl & 1) a = topk_message(body, rest, n, k);
  if (ctl & 2) b = topk_message(body + la, rest - la, n, k + 3);

  using gw::detail::EntryView;
  auto va = gw::detail::view_entries(a.data(), a.size(), n);
  auto vb = gw::detail::view_entries(b.data(), b.size(), n);
  for (const auto* pair : {&a, &b}) {
    const auto& m = *pair;
    const auto v = gw::detail::view_entries(m.data(), m.size(), n);
    const auto info = gw::inspect(m.data(), m.size());
    if (v.is_ok() && (!info.is_ok() || info->count != n)) fail("view_entries accepted what inspect refuses");
  }
  std::vector<float> ea, eb, er;
  std::vector<uint8_t> ha, hb, hr;
  if (va.is_ok()) {
    expand(*va, ea, ha);
    std::vector<uint8_t> out(gw::detail::max_entries_message_bytes(n));
    const size_t l = gw::detail::rewrite_entries(*va, out.data());
    if (l > out.size()) fail("rewrite wrote past its bound");
    auto vr = gw::detail::view_entries(out.data(), l, n);
    if (!vr.is_ok()) fail("a rewritten message is refused");
    expand(*vr, er, hr);
    if (std::memcmp(er.data(), ea.data(), n * sizeof(float)) != 0) fail("rewrite changed the values");
  }
  if (!va.is_ok() || !vb.is_ok()) return 0;
  expand(*vb, eb, hb);
  std::vector<uint8_t> out(gw::detail::max_entries_message_bytes(n));
  const size_t l = gw::detail::merge_entries(*va, *vb, out.data());
  if (l > out.size()) fail("merge wrote past its bound");
  auto vm = gw::detail::view_entries(out.data(), l, n);
  if (!vm.is_ok()) fail("a merged message is refused");
  expand(*vm, er, hr);
  uint64_t entries = 0;
  for (uint64_t i = 0; i < n; ++i) {
    float want = 0.0f;
    if (ha[i] && hb[i]) {
      want = ea[i] + eb[i];
    } else if (ha[i]) {
      want = ea[i];
    } else if (hb[i]) {
      want = eb[i];
    }
    // (A dense message has an entry for every element.)
    if (std::memcmp(&want, &er[i], sizeof want) != 0) fail("the merge is not a + b");
    entries += (ha[i] || hb[i]) ? 1 : 0;
  }
  if (!vm->dense && vm->k != entries) fail("the merged pairs are not the union of the indices");
  if (!vm->dense && !gw::detail::pairs_smaller(n, vm->k)) {
    fail("pairs where a dense message is smaller");
  }
  return 0;
}
