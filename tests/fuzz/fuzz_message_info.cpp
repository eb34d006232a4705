// libFuzzer harness: gw::inspect and the C ABI's gw_message_info on hostile messages, checked
// against an oracle written from docs/wire-format.md alone (not from the library's header
// code): the library must accept exactly the messages the page allows.
//
// Input: the message itself.
//
// Invariants (any violation aborts):
//   - gw_message_info (C ABI) and gw::inspect give the same verdict and the same fields;
//   - accepted <=> the oracle accepts; when accepted, the fields are the header's,
//     total_bytes is the length, nnz is count (dense, qsgd, sign) or k (sparse codecs);
//   - an accepted message minus its last byte, or plus one byte, is rejected;
//   - an accepted message of at most kMaxElems elements decodes into f32 (overwrite), with
//     no write outside the destination;
//   - coll::validate_staged (the device collectives' check of a message received into host
//     memory) accepts exactly what inspect accepts for the header's count, and never a
//     different count.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/gradwire.h"

namespace {

constexpr uint64_t kMaxElems = uint64_t{1} << 16;
constexpr size_t kHeaderBytes = 56;
constexpr size_t kCanaryBytes = 64;
constexpr uint8_t kCanary = 0xA5;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_message_info: invariant violated: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// What docs/wire-format.md says about a message: valid or not, and its element counts.
struct Oracle {
  bool valid = false;
  uint64_t count = 0;
  uint64_t nnz = 0;
};

Oracle oracle(const uint8_t* m, size_t len) {
  Oracle o;
  if (len < kHeaderBytes) return o;
  if (m[0] != 'G' || m[1] != 'W' || m[2] != 'R' || m[3] != 'E' || m[4] != 1) return o;
  const uint8_t codec = m[5], dtype = m[6], flags = m[7];
  const uint64_t n = le(m + 8, 8), k = le(m + 24, 8), seed = le(m + 32, 8), step = le(m + 40, 8);
  const uint64_t bits = le(m + 16, 4), bucket = le(m + 20, 4), payload = le(m + 48, 8);
  if (codec > 7 || dtype < 1 || dtype > 3 || n > (uint64_t{1} << 48)) return o;
  if (payload != len - kHeaderBytes) return o;
  // Flags: bit 0 is qsgd's; a field a codec does not use must be zero.
  if ((flags & ~1u) != 0 || (flags != 0 && codec != 3)) return o;
  const bool bucketed = codec == 3 || codec == 4, sparse = codec >= 5;
  if (codec == 3 && bits != 1 && bits != 2 && bits != 4 && bits != 8) return o;
  if (codec == 4 && bits != 1) return o;
  if (!bucketed && bits != 0) return o;
  if (bucketed && (bucket < 1 || bucket > (uint64_t{1} << 24))) return o;
  if (!bucketed && bucket != 0) return o;
  if (sparse && k > n) return o;
  if (!sparse && k != 0) return o;
  if (codec != 7 && (seed != 0 || step != 0)) return o;
  if (codec == 7 && n > 0 && k < 1) return o;
  if (codec >= 3 && dtype != 1) return o;  // lossy codecs carry f32 only
  uint64_t want = 0;
  switch (codec) {
    case 0: want = n * (dtype == 1 ? 4 : 2); break;
    case 1:
    case 2: want = n * 2; break;
    case 3: want = 8 * ((n + bucket - 1) / bucket) + (n * bits + 7) / 8; break;
    case 4: want = 4 * ((n + bucket - 1) / bucket) + (n + 7) / 8; break;
    case 5:
    case 6: want = k * ((n <= (uint64_t{1} << 32) ? 4 : 8) + 4); break;
    default: want = 4 * k; break;
  }
  if (payload != want) return o;
  if (codec == 5 || codec == 6) {
    const int w = n <= (uint64_t{1} << 32) ? 4 : 8;
    uint64_t prev = 0;
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t idx = le(m + kHeaderBytes + i * static_cast<uint64_t>(w), w);
      if (idx >= n || (i > 0 && idx <= prev)) return o;
      prev = idx;
    }
  }
  o.valid = true;
  o.count = n;
  o.nnz = sparse ? k : n;
  return o;
}

bool inspect_ok(const std::vector<uint8_t>& m) { return gw::inspect(m.empty() ? nullptr : m.data(), m.size()).is_ok(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The message in a buffer of its own exact size, so ASan sees any read past its end.
  std::vector<uint8_t> m(data, data + size);
  const uint8_t* mp = size > 0 ? m.data() : data;

  const gw::Result<gw::MessageInfo> info = gw::inspect(mp, size);
  gw_message_info_t ci;
  std::memset(&ci, 0, sizeof ci);
  const gw_result_t r = gw_message_info(mp, size, &ci);
  check((r == GW_SUCCESS) == info.is_ok(), "gw_message_info and gw::inspect disagree on the verdict");

  const uint64_t header_count = size >= kHeaderBytes ? le(mp + 8, 8) : 0;
  const auto staged = gw::coll::validate_staged(mp, size, header_count);
  check(staged.is_ok() == info.is_ok(), "validate_staged and inspect disagree on the verdict");
  check(!gw::coll::validate_staged(mp, size, header_count + 1).is_ok(),
        "validate_staged accepted a message for a different count");

  const Oracle o = oracle(mp, size);
  if (!info.is_ok()) {
    check(!o.valid, "a message the wire format allows was rejected");
    return 0;
  }
  check(o.valid, "a message the wire format forbids was accepted");
  check(static_cast<uint8_t>(info->codec) == mp[5] && static_cast<uint8_t>(ci.codec) == mp[5],
        "codec is not the header's");
  check(static_cast<uint8_t>(info->dtype) == mp[6] && static_cast<uint8_t>(ci.dtype) == mp[6],
        "dtype is not the header's");
  check(info->count == o.count && ci.count == o.count, "count is not the header's");
  check(info->nnz == o.nnz && ci.nnz == o.nnz, "nnz is not count (dense) or k (sparse)");
  check(info->total_bytes == size && ci.total_bytes == size, "total_bytes is not the length");
  check(staged->count == o.count && staged->codec == info->codec && staged->dtype == info->dtype &&
            staged->payload_bytes == size - kHeaderBytes,
        "validate_staged's header disagrees with inspect");

  std::vector<uint8_t> shorter(m.begin(), m.end() - 1);
  check(!inspect_ok(shorter), "an accepted message minus its last byte was accepted");
  std::vector<uint8_t> longer(m);
  longer.push_back(0);
  check(!inspect_ok(longer), "an accepted message plus a byte was accepted");

  if (o.count <= kMaxElems) {
    const size_t bytes = static_cast<size_t>(o.count) * 4;
    std::vector<uint8_t> buf(bytes + 2 * kCanaryBytes, kCanary);
    const gw::Status s =
        gw::decode(mp, size, buf.data() + kCanaryBytes, o.count, gw::DType::kFloat32, gw::DecodeMode::kOverwrite);
    check(s.is_ok(), "an accepted message does not decode into f32");
    for (size_t i = 0; i < kCanaryBytes; ++i) {
      check(buf[i] == kCanary, "write before the destination");
      check(buf[kCanaryBytes + bytes + i] == kCanary, "write after the destination");
    }
  }
  return 0;
}
