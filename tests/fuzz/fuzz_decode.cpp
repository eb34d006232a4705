// libFuzzer harness: gw::decode and the C ABI's gw_decode on hostile messages, in every
// decode mode and destination dtype.
//
// Input: 3 control bytes, then the message.
//   byte 0, bits 0-1: mode (0 overwrite, 1 accumulate, 2 subtract, 3 accumulate)
//           bits 2-3: destination dtype (0 and 1 f32, 2 f16, 3 bf16)
//           bit 4:    destination count from bytes 1-2 (else the header's count when it is
//                     at most kMaxElems, which is what lets a valid message reach apply())
//   bytes 1-2: a u16 destination count (little-endian)
//
// Invariants (any violation aborts):
//   - nothing outside [dst, dst + n) changes (canaries on both sides);
//   - a rejected message leaves dst untouched, byte for byte;
//   - an accepted message is accepted by gw::inspect with count == n, total_bytes == len and
//     the header's codec and dtype; lossy codecs decode only into f32;
//   - gw_decode (C ABI) agrees with gw::decode: same verdict, same bytes;
//   - overwrite does not depend on what dst held before;
//   - into f32, accumulate gives old + overwrite(msg) and subtract old - overwrite(msg),
//     element by element (so no element is written twice: sparse indices are distinct).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gradwire/codec.hpp"
#include "gradwire/gradwire.h"

namespace {

constexpr size_t kControlBytes = 3;
constexpr uint64_t kMaxElems = uint64_t{1} << 16;
constexpr size_t kCanaryBytes = 64;
constexpr uint8_t kCanary = 0xA5;
constexpr size_t kHeaderBytes = 56;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_decode: invariant violated: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

size_t elem_size(gw::DType d) { return d == gw::DType::kFloat32 ? 4 : 2; }

// A destination of n elements with canaries on both sides, filled with a byte pattern.
struct Guarded {
  std::vector<uint8_t> buf;
  size_t bytes;

  Guarded(size_t dst_bytes, uint8_t fill) : buf(dst_bytes + 2 * kCanaryBytes, kCanary), bytes(dst_bytes) {
    std::memset(buf.data() + kCanaryBytes, fill, dst_bytes);
  }
  // Never null, even for n == 0, so that the call is not an argument error.
  uint8_t* dst() { return buf.data() + kCanaryBytes; }
  const uint8_t* dst() const { return buf.data() + kCanaryBytes; }
  void check_canaries() const {
    for (size_t i = 0; i < kCanaryBytes; ++i) {
      check(buf[i] == kCanary, "write before the destination");
      check(buf[kCanaryBytes + bytes + i] == kCanary, "write after the destination");
    }
  }
  bool same_as(const Guarded& o) const { return bytes == o.bytes && std::memcmp(dst(), o.dst(), bytes) == 0; }
};

bool is_lossy(uint8_t codec) { return codec >= 3; }

float f32_at(const Guarded& g, size_t i) {
  float f;
  std::memcpy(&f, g.dst() + 4 * i, 4);
  return f;
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kControlBytes) return 0;
  const uint8_t ctl = data[0];
  const uint64_t explicit_n = static_cast<uint64_t>(data[1]) | (static_cast<uint64_t>(data[2]) << 8);
  const uint8_t* msg = data + kControlBytes;
  const size_t len = size - kControlBytes;

  const int mode_bits = ctl & 3;
  const gw::DecodeMode mode = mode_bits == 3 ? gw::DecodeMode::kAccumulate : static_cast<gw::DecodeMode>(mode_bits);
  const int dtype_bits = (ctl >> 2) & 3;
  const gw::DType dtype = dtype_bits == 2   ? gw::DType::kFloat16
                          : dtype_bits == 3 ? gw::DType::kBFloat16
                                            : gw::DType::kFloat32;
  uint64_t n = explicit_n;
  if ((ctl & 0x10) == 0 && len >= kHeaderBytes) {
    const uint64_t header_n = load_u64(msg + 8);
    if (header_n <= kMaxElems) n = header_n;
  }
  const size_t dst_bytes = static_cast<size_t>(n) * elem_size(dtype);

  // The message in a buffer of its own exact size, so ASan sees any read past its end.
  std::vector<uint8_t> m(msg, msg + len);
  const uint8_t* mp = len > 0 ? m.data() : data;  // a valid pointer even for len == 0

  const uint8_t fill = 0x3C;  // 0x3C3C3C3C: finite in f32, f16 and bf16
  Guarded cpp(dst_bytes, fill);
  const gw::Status s = gw::decode(mp, len, cpp.dst(), n, dtype, mode);
  cpp.check_canaries();

  // The C ABI; in overwrite mode from a different starting pattern.
  Guarded c(dst_bytes, mode == gw::DecodeMode::kOverwrite ? 0xC3 : fill);
  const gw_result_t r =
      gw_decode(mp, len, c.dst(), n, static_cast<gw_dtype_t>(dtype), static_cast<gw_decode_mode_t>(mode));
  c.check_canaries();
  check((r == GW_SUCCESS) == s.is_ok(), "gw_decode and gw::decode disagree on the verdict");

  if (!s.is_ok()) {
    const Guarded untouched(dst_bytes, fill);
    check(cpp.same_as(untouched), "a rejected message changed the destination");
    if (mode != gw::DecodeMode::kOverwrite) check(c.same_as(untouched), "gw_decode changed dst on error");
    return 0;
  }
  check(c.same_as(cpp), "gw_decode and gw::decode wrote different bytes (or overwrite kept old bytes)");

  const gw::Result<gw::MessageInfo> info = gw::inspect(mp, len);
  check(info.is_ok(), "decode accepted a message that inspect rejects");
  check(info->count == n, "inspect's count differs from the destination count decode accepted");
  check(info->total_bytes == len, "inspect's total_bytes is not the message length");
  check(static_cast<uint8_t>(info->codec) == mp[5], "inspect's codec is not the header's");
  check(static_cast<uint8_t>(info->dtype) == mp[6], "inspect's dtype is not the header's");
  check(info->nnz <= info->count, "nnz exceeds count");
  if (is_lossy(mp[5])) check(dtype == gw::DType::kFloat32, "a lossy codec decoded into a half type");

  if (dtype == gw::DType::kFloat32 && mode != gw::DecodeMode::kOverwrite) {
    Guarded ovr(dst_bytes, 0x00);
    check(gw::decode(mp, len, ovr.dst(), n, dtype, gw::DecodeMode::kOverwrite).is_ok(),
          "overwrite rejects what accumulate/subtract accepted");
    ovr.check_canaries();
    const Guarded old(dst_bytes, fill);
    for (size_t i = 0; i < n; ++i) {
      const float o = f32_at(old, i), v = f32_at(ovr, i);
      const float want = mode == gw::DecodeMode::kAccumulate ? o + v : o - v;
      if (!same_float(f32_at(cpp, i), want)) fail("accumulate/subtract is not old (+/-) overwrite");
    }
  }
  return 0;
}
