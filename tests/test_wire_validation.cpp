// Decoders treat a message as hostile network input (docs/wire-format.md): every malformed
// message is rejected with Code::kInvalidMessage and a message, before a single byte of the
// destination is written. Byte offsets and size formulas are taken from docs/wire-format.md
// and written out here, not taken from the library's own header code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gradwire/codec.hpp"
#include "gradwire/status.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

using Msg = std::vector<uint8_t>;
using test::f32_bits;
using test::f32_from_bits;
using test::kWireHeaderBytes;

// ---- The header, per docs/wire-format.md "Header (56 bytes)". ----
constexpr size_t kOffMagic = 0;     // 4 bytes: 'G' 'W' 'R' 'E'
constexpr size_t kOffVersion = 4;   // u8: 1
constexpr size_t kOffCodec = 5;     // u8: 0..7
constexpr size_t kOffDtype = 6;     // u8: 1 f32, 2 f16, 3 bf16
constexpr size_t kOffFlags = 7;     // u8: bit 0 qsgd nearest rounding
constexpr size_t kOffCount = 8;     // u64, at most 2^48
constexpr size_t kOffBits = 16;     // u32
constexpr size_t kOffBucket = 20;   // u32, 1 to 2^24 for qsgd and sign
constexpr size_t kOffK = 24;        // u64
constexpr size_t kOffSeed = 32;     // u64
constexpr size_t kOffStep = 40;     // u64
constexpr size_t kOffPayload = 48;  // u64, bytes after the header
static_assert(kOffPayload + 8 == kWireHeaderBytes, "the header is 56 bytes");

constexpr uint8_t kCodecNone = 0, kCodecFp16 = 1, kCodecBf16 = 2, kCodecQsgd = 3, kCodecSign = 4, kCodecTopk = 5,
                  kCodecDgc = 6, kCodecRandomk = 7;
constexpr uint8_t kDtypeF32 = 1, kDtypeF16 = 2, kDtypeBf16 = 3;

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMaxCount = uint64_t{1} << 48;
constexpr uint64_t k2p32 = uint64_t{1} << 32;

uint64_t get_le(const Msg& m, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | m.at(off + static_cast<size_t>(i));
  return v;
}

void put_le(Msg& m, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) m.at(off + static_cast<size_t>(i)) = static_cast<uint8_t>(v >> (8 * i));
}

void set_u64(Msg& m, size_t off, uint64_t v) { put_le(m, off, v, 8); }
void set_u32(Msg& m, size_t off, uint32_t v) { put_le(m, off, v, 4); }
void set_f32(Msg& m, size_t off, float f) { put_le(m, off, f32_bits(f), 4); }
float get_f32(const Msg& m, size_t off) { return f32_from_bits(static_cast<uint32_t>(get_le(m, off, 4))); }

// payload_bytes := the real length after the header (so the header's own length check passes
// and the codec's size rules are what is tested).
void fix_payload_len(Msg& m) { set_u64(m, kOffPayload, m.size() - kWireHeaderBytes); }

// Bytes [from, to) of a, followed by bytes [from2, end) of b. (Plain memcpy into a sized
// vector: GCC 12 at -O3 warns falsely about vector::insert here, and the build uses -Werror.)
Msg splice(const Msg& a, size_t from, size_t to, const Msg& b, size_t from2) {
  Msg out((to - from) + (b.size() - from2));
  if (to > from) std::memcpy(out.data(), a.data() + from, to - from);
  if (b.size() > from2) std::memcpy(out.data() + (to - from), b.data() + from2, b.size() - from2);
  return out;
}

// A message written from scratch: the header at the documented offsets, then payload.
Msg build(const test::WireFields& f, const Msg& payload) {
  Msg m = splice(Msg(kWireHeaderBytes, 0), 0, kWireHeaderBytes, payload, 0);
  m[kOffMagic + 0] = 'G';
  m[kOffMagic + 1] = 'W';
  m[kOffMagic + 2] = 'R';
  m[kOffMagic + 3] = 'E';
  m[kOffVersion] = 1;
  m[kOffCodec] = f.codec;
  m[kOffDtype] = f.dtype;
  m[kOffFlags] = f.flags;
  set_u64(m, kOffCount, f.count);
  set_u32(m, kOffBits, f.bits);
  set_u32(m, kOffBucket, f.bucket);
  set_u64(m, kOffK, f.k);
  set_u64(m, kOffSeed, f.seed);
  set_u64(m, kOffStep, f.step);
  set_u64(m, kOffPayload, f.payload_bytes);
  return m;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// ---- The codecs under test. ----

struct Spec {
  std::string text;
  uint8_t codec;
};

const std::vector<Spec>& all_specs() {
  static const std::vector<Spec> specs = [] {
    std::vector<Spec> s = {{"none", kCodecNone}, {"fp16", kCodecFp16}, {"bf16", kCodecBf16}};
    for (const char* bits : {"1", "2", "4", "8"}) {
      for (const char* rounding : {"stochastic", "nearest"}) {
        s.push_back({std::string("qsgd:bits=") + bits + ",bucket=128,rounding=" + rounding + ",seed=11", kCodecQsgd});
      }
    }
    s.push_back({"sign:bucket=128", kCodecSign});
    s.push_back({"topk:ratio=0.3", kCodecTopk});
    s.push_back({"dgc:ratio=0.3", kCodecDgc});
    s.push_back({"randomk:ratio=0.3,seed=7", kCodecRandomk});
    return s;
  }();
  return specs;
}

bool is_dense(uint8_t c) { return c == kCodecNone || c == kCodecFp16 || c == kCodecBf16; }
bool is_bucketed(uint8_t c) { return c == kCodecQsgd || c == kCodecSign; }
bool is_indexed(uint8_t c) { return c == kCodecTopk || c == kCodecDgc; }

constexpr size_t kSizes[] = {1, 7, 4099};

struct Valid {
  std::string spec;
  uint8_t codec;
  size_t n;
  Msg msg;
  std::string label() const { return spec + " n=" + std::to_string(n); }
};

// One valid message per codec and awkward size, from heavy-tailed inputs without zeros.
const std::vector<Valid>& valid_messages() {
  static const std::vector<Valid> all = [] {
    std::vector<Valid> v;
    uint64_t seed = 1;
    for (const Spec& s : all_specs()) {
      auto codec = test::make_codec(s.text);
      if (codec == nullptr) continue;
      for (size_t n : kSizes) {
        const std::vector<float> x = test::gradient(n, seed++);
        v.push_back({s.text, s.codec, n, test::encode(*codec, x, /*step=*/3, /*rank=*/1)});
      }
    }
    return v;
  }();
  return all;
}

// ---- Checking rejection. ----

// A destination pattern that no decode writes by chance (and that is not a float a decoder
// would produce from these inputs).
constexpr uint8_t kPattern = 0xA5;

const char* mode_name(DecodeMode m) {
  switch (m) {
    case DecodeMode::kOverwrite: return "overwrite";
    case DecodeMode::kAccumulate: return "accumulate";
    case DecodeMode::kSubtract: return "subtract";
  }
  return "?";
}

// Whether bytes [0, len) of p still hold kPattern (memcmp: fast even in a Debug ASan build).
bool untouched(const uint8_t* p, size_t len) {
  static const std::vector<uint8_t> pattern(size_t{1} << 16, kPattern);
  for (size_t off = 0; off < len; off += pattern.size()) {
    if (std::memcmp(p + off, pattern.data(), std::min(pattern.size(), len - off)) != 0) return false;
  }
  return true;
}

size_t first_touched(const uint8_t* p, size_t len) {
  size_t i = 0;
  while (i < len && p[i] == kPattern) ++i;
  return i;
}

// The message in a heap block of exactly its length, so that ASan sees any read past it.
struct ExactCopy {
  explicit ExactCopy(const Msg& m) : len(m.size()), data(new uint8_t[m.size()]) {
    if (len > 0) std::memcpy(data.get(), m.data(), len);
  }
  size_t len;
  std::unique_ptr<uint8_t[]> data;
};

// Decodes msg into n elements of dtype, in every mode, from a destination holding kPattern;
// passes when every decode fails with kInvalidMessage and a message, and the destination is
// still all kPattern. With check_inspect, gw::inspect must reject the message too.
::testing::AssertionResult rejected(const Msg& msg, size_t n, bool check_inspect = true,
                                    DType dtype = DType::kFloat32) {
  const ExactCopy copy(msg);
  const size_t bytes = n * dtype_size(dtype);
  // One spare element so that n = 0 still passes a real pointer; it must stay untouched too.
  const size_t cap = bytes + dtype_size(dtype);
  std::unique_ptr<uint8_t[]> dst(new uint8_t[cap]);
  for (DecodeMode mode : {DecodeMode::kOverwrite, DecodeMode::kAccumulate, DecodeMode::kSubtract}) {
    std::memset(dst.get(), kPattern, cap);
    const Status s = decode(copy.data.get(), copy.len, dst.get(), n, dtype, mode);
    if (s.is_ok()) {
      return ::testing::AssertionFailure() << "decode (" << mode_name(mode) << ") accepted it";
    }
    if (s.code() != Code::kInvalidMessage) {
      return ::testing::AssertionFailure()
             << "decode (" << mode_name(mode) << ") failed with the wrong code: " << s.to_string();
    }
    if (s.message().empty()) {
      return ::testing::AssertionFailure() << "decode (" << mode_name(mode) << ") gave no message";
    }
    if (!untouched(dst.get(), cap)) {
      return ::testing::AssertionFailure() << "decode (" << mode_name(mode) << ") rejected it (" << s.message()
                                           << ") but wrote destination byte " << first_touched(dst.get(), cap);
    }
  }
  if (check_inspect) {
    const auto info = inspect(copy.data.get(), copy.len);
    if (info.is_ok()) return ::testing::AssertionFailure() << "inspect accepted it";
    if (info.status().code() != Code::kInvalidMessage || info.status().message().empty()) {
      return ::testing::AssertionFailure() << "inspect failed with " << info.status().to_string();
    }
  }
  return ::testing::AssertionSuccess();
}

// inspect() and a decode into exactly info.count elements both succeed.
::testing::AssertionResult accepted(const Msg& msg, size_t n, MessageInfo* out = nullptr) {
  const ExactCopy copy(msg);
  const auto info = inspect(copy.data.get(), copy.len);
  if (!info.is_ok()) return ::testing::AssertionFailure() << "inspect: " << info.status().to_string();
  if (info->count != n) {
    return ::testing::AssertionFailure() << "inspect says count " << info->count << ", not " << n;
  }
  if (info->total_bytes != msg.size()) {
    return ::testing::AssertionFailure() << "inspect says " << info->total_bytes << " bytes, not " << msg.size();
  }
  std::vector<float> dst(n + 1, 0.0f);
  const Status s = decode(copy.data.get(), copy.len, dst.data(), n, DType::kFloat32, DecodeMode::kOverwrite);
  if (!s.is_ok()) return ::testing::AssertionFailure() << "decode: " << s.to_string();
  if (out != nullptr) *out = *info;
  return ::testing::AssertionSuccess();
}

std::vector<float> decoded(const Msg& msg, size_t n) {
  std::vector<float> out(n, 0.0f);
  const ExactCopy copy(msg);
  const Status s = decode(copy.data.get(), copy.len, out.data(), n, DType::kFloat32, DecodeMode::kOverwrite);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

// payload_bytes as docs/wire-format.md gives it for a dense or bucketed header.
uint64_t doc_payload_bytes(const Msg& m) {
  const uint8_t codec = m.at(kOffCodec);
  const uint64_t n = get_le(m, kOffCount, 8);
  const uint64_t bits = get_le(m, kOffBits, 4);
  const uint64_t bucket = get_le(m, kOffBucket, 4);
  switch (codec) {
    case kCodecNone: return n * (m.at(kOffDtype) == kDtypeF32 ? 4 : 2);
    case kCodecFp16:
    case kCodecBf16: return 2 * n;
    case kCodecQsgd: return 8 * ceil_div(n, bucket) + ceil_div(n * bits, 8);
    case kCodecSign: return 4 * ceil_div(n, bucket) + ceil_div(n, 8);
    default: ADD_FAILURE() << "doc_payload_bytes: codec " << int{codec}; return 0;
  }
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b); }

// ---- Independent decoders of the documented payloads (for the positive controls). ----

// qsgd element i: fma(q, unit, min) with q the bits-wide code at bit offset i * bits.
float ref_qsgd(const Msg& m, uint64_t i) {
  const uint64_t n = get_le(m, kOffCount, 8);
  const uint32_t bits = static_cast<uint32_t>(get_le(m, kOffBits, 4));
  const uint32_t bucket = static_cast<uint32_t>(get_le(m, kOffBucket, 4));
  const uint64_t nb = ceil_div(n, bucket);
  const uint64_t b = i / bucket;
  const float mn = get_f32(m, kWireHeaderBytes + 8 * b);
  const float unit = get_f32(m, kWireHeaderBytes + 8 * b + 4);
  const size_t codes = kWireHeaderBytes + 8 * nb;
  const uint64_t bit = i * bits;
  const uint32_t q = (m.at(codes + bit / 8) >> (bit % 8)) & ((1u << bits) - 1u);
  return std::fma(static_cast<float>(q), unit, mn);
}

// sign element i: -scale when bit i is 1, else +scale.
float ref_sign(const Msg& m, uint64_t i) {
  const uint64_t n = get_le(m, kOffCount, 8);
  const uint32_t bucket = static_cast<uint32_t>(get_le(m, kOffBucket, 4));
  const uint64_t nb = ceil_div(n, bucket);
  const float scale = get_f32(m, kWireHeaderBytes + 4 * (i / bucket));
  const size_t bits = kWireHeaderBytes + 4 * nb;
  return ((m.at(bits + i / 8) >> (i % 8)) & 1u) != 0 ? -scale : scale;
}

// =====================================================================================
// Positive controls: the valid messages have the documented layout and decode. These also
// prove that the offsets above are the ones the library uses, so the rejections below are
// for the reason each test names.
// =====================================================================================

TEST(WireValidation, ValidMessagesHaveTheDocumentedLayoutAndDecode) {
  ASSERT_EQ(valid_messages().size(), all_specs().size() * std::size(kSizes));
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    const test::WireFields w = test::read_wire(v.msg);
    const uint64_t n = v.n;
    EXPECT_EQ(w.codec, v.codec);
    EXPECT_EQ(w.dtype, kDtypeF32);
    EXPECT_EQ(w.count, n);
    EXPECT_EQ(w.payload_bytes + kWireHeaderBytes, v.msg.size());
    uint64_t expect_payload = 0, expect_nnz = n;
    switch (v.codec) {
      case kCodecNone: expect_payload = 4 * n; break;
      case kCodecFp16:
      case kCodecBf16: expect_payload = 2 * n; break;
      case kCodecQsgd:
        EXPECT_TRUE(w.bits == 1 || w.bits == 2 || w.bits == 4 || w.bits == 8);
        EXPECT_EQ(w.bucket, 128u);
        EXPECT_EQ(w.flags, v.spec.find("nearest") != std::string::npos ? 1 : 0);
        expect_payload = 8 * ceil_div(n, w.bucket) + ceil_div(n * w.bits, 8);
        break;
      case kCodecSign:
        EXPECT_EQ(w.bits, 1u);
        EXPECT_EQ(w.bucket, 128u);
        expect_payload = 4 * ceil_div(n, w.bucket) + ceil_div(n, 8);
        break;
      case kCodecTopk:
      case kCodecDgc:
        EXPECT_GE(w.k, 1u);
        EXPECT_LE(w.k, n);
        expect_payload = w.k * (4 + 4);
        expect_nnz = w.k;
        break;
      case kCodecRandomk:
        EXPECT_EQ(w.k, test::ref_k_for_ratio(n, 0.3));
        EXPECT_EQ(w.seed, 7u);
        EXPECT_EQ(w.step, 3u);
        expect_payload = 4 * w.k;
        expect_nnz = w.k;
        break;
      default: ADD_FAILURE() << "unexpected codec byte " << int{w.codec};
    }
    EXPECT_EQ(w.payload_bytes, expect_payload);
    if (!is_bucketed(v.codec)) {
      EXPECT_EQ(w.bits, 0u);
      EXPECT_EQ(w.bucket, 0u);
    }
    if (v.codec != kCodecQsgd) {
      EXPECT_EQ(w.flags, 0);
    }
    if (!is_indexed(v.codec) && v.codec != kCodecRandomk) {
      EXPECT_EQ(w.k, 0u);
    }
    if (v.codec != kCodecRandomk) {
      EXPECT_EQ(w.seed, 0u);
      EXPECT_EQ(w.step, 0u);
    }

    MessageInfo info;
    ASSERT_TRUE(accepted(v.msg, v.n, &info));
    EXPECT_EQ(static_cast<uint8_t>(info.codec), v.codec);
    EXPECT_EQ(info.dtype, DType::kFloat32);
    EXPECT_EQ(info.nnz, expect_nnz);

    const std::vector<float> out = decoded(v.msg, v.n);
    if (v.codec == kCodecQsgd) {
      for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(out[i], ref_qsgd(v.msg, i))) << i;
    } else if (v.codec == kCodecSign) {
      for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(out[i], ref_sign(v.msg, i))) << i;
    } else if (is_indexed(v.codec)) {
      const std::vector<uint64_t> idx = test::sparse_indices(v.msg);
      ASSERT_EQ(idx.size(), w.k);
      std::vector<float> expect(n, 0.0f);
      for (uint64_t j = 0; j < w.k; ++j) expect[idx[j]] = get_f32(v.msg, kWireHeaderBytes + 4 * w.k + 4 * j);
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(f32_bits(out[i]), f32_bits(expect[i])) << i;
    } else if (v.codec == kCodecRandomk) {
      // Indices are strictly increasing, so the non-zeros in order are the payload values.
      const std::vector<uint64_t> nz = test::nonzero_positions(out);
      ASSERT_EQ(nz.size(), w.k);
      for (uint64_t j = 0; j < w.k; ++j) {
        EXPECT_EQ(f32_bits(out[nz[j]]), f32_bits(get_f32(v.msg, kWireHeaderBytes + 4 * j))) << j;
      }
    }
  }
}

TEST(WireValidation, EmptyMessagesDecodeOnlyIntoEmptyDestinations) {
  for (const Spec& s : all_specs()) {
    SCOPED_TRACE(s.text);
    auto codec = test::make_codec(s.text);
    ASSERT_NE(codec, nullptr);
    const Msg m = test::encode(*codec, {});
    ASSERT_EQ(m.size(), kWireHeaderBytes);
    EXPECT_EQ(get_le(m, kOffPayload, 8), 0u);
    EXPECT_TRUE(decode(m.data(), m.size(), nullptr, 0, DType::kFloat32, DecodeMode::kOverwrite).is_ok());
    EXPECT_TRUE(rejected(m, 1, /*check_inspect=*/false));
    EXPECT_TRUE(rejected(m, 7, /*check_inspect=*/false));
  }
}

// =====================================================================================
// The table of malformed messages.
// =====================================================================================

// Every length from 0 up to the whole message minus one byte (for long messages: the first
// 200 lengths, every 61st length and the last 64), with the header left as it was.
std::vector<size_t> truncation_lengths(size_t len) {
  std::vector<size_t> out;
  for (size_t l = 0; l < len; ++l) {
    if (len <= 600 || l < 200 || l % 61 == 0 || l + 64 >= len) out.push_back(l);
  }
  return out;
}

TEST(WireValidation, TruncatedMessagesAreRejected) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    for (size_t l : truncation_lengths(v.msg.size())) {
      const Msg m(v.msg.begin(), v.msg.begin() + static_cast<std::ptrdiff_t>(l));
      ASSERT_TRUE(rejected(m, v.n)) << "truncated to " << l << " of " << v.msg.size() << " bytes";
    }
    // Header only, payload_bytes unchanged; and header only claiming an empty payload.
    Msg header(v.msg.begin(), v.msg.begin() + kWireHeaderBytes);
    EXPECT_TRUE(rejected(header, v.n)) << "header only";
    fix_payload_len(header);
    EXPECT_TRUE(rejected(header, v.n)) << "header only, payload_bytes = 0";
    // Truncated with payload_bytes made to agree: the codec's own size rule must catch it.
    for (size_t cut : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{8}, v.msg.size() / 2}) {
      if (cut > v.msg.size() - kWireHeaderBytes || cut == 0) continue;
      Msg m(v.msg.begin(), v.msg.end() - static_cast<std::ptrdiff_t>(cut));
      fix_payload_len(m);
      EXPECT_TRUE(rejected(m, v.n)) << "cut " << cut << " bytes, payload_bytes adjusted";
    }
  }
}

TEST(WireValidation, BadMagicIsRejected) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    for (size_t i = 0; i < 4; ++i) {
      for (uint8_t x : {uint8_t{0x01}, uint8_t{0x20}, uint8_t{0xFF}}) {
        Msg m = v.msg;
        m[kOffMagic + i] = static_cast<uint8_t>(m[kOffMagic + i] ^ x);
        EXPECT_TRUE(rejected(m, v.n)) << "magic byte " << i << " ^ " << int{x};
      }
    }
    Msg m = v.msg;
    std::memcpy(m.data() + kOffMagic, "EWRG", 4);  // byte-swapped
    EXPECT_TRUE(rejected(m, v.n)) << "magic EWRG";
    std::memset(m.data() + kOffMagic, 0, 4);
    EXPECT_TRUE(rejected(m, v.n)) << "magic 0";
  }
}

TEST(WireValidation, OtherVersionsAreRejected) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    for (int version : {0, 2, 3, 0x81, 0xFF}) {
      Msg m = v.msg;
      m[kOffVersion] = static_cast<uint8_t>(version);
      EXPECT_TRUE(rejected(m, v.n)) << "version " << version;
    }
  }
}

TEST(WireValidation, UnknownCodecDtypeAndFlagsAreRejected) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    for (int codec : {8, 9, 0x10, 0x7F, 0x80, 0xFF}) {
      Msg m = v.msg;
      m[kOffCodec] = static_cast<uint8_t>(codec);
      EXPECT_TRUE(rejected(m, v.n)) << "codec " << codec;
    }
    for (int dtype : {0, 4, 5, 0x81, 0xFF}) {
      Msg m = v.msg;
      m[kOffDtype] = static_cast<uint8_t>(dtype);
      EXPECT_TRUE(rejected(m, v.n)) << "dtype " << dtype;
    }
    for (int bit = 1; bit < 8; ++bit) {
      Msg m = v.msg;
      m[kOffFlags] = static_cast<uint8_t>(m[kOffFlags] | (1u << bit));
      EXPECT_TRUE(rejected(m, v.n)) << "flag bit " << bit;
    }
    Msg m = v.msg;
    m[kOffFlags] = 0xFF;
    EXPECT_TRUE(rejected(m, v.n)) << "flags 0xFF";
    if (v.codec != kCodecQsgd) {
      // Bit 0 means something to qsgd only; for every other codec it is an unused field.
      m = v.msg;
      m[kOffFlags] = 0x01;
      EXPECT_TRUE(rejected(m, v.n)) << "flag bit 0 on a codec that is not qsgd";
    }
  }
}

TEST(WireValidation, ElementCountOutOfRangeIsRejected) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    // Past the 2^48 limit: the header alone is invalid.
    for (uint64_t count : {kMaxCount + 1, kMaxCount * 2, uint64_t{1} << 62, uint64_t{1} << 63, kU64Max - 55,
                           kU64Max - 1, kU64Max, static_cast<uint64_t>(std::numeric_limits<size_t>::max())}) {
      Msg m = v.msg;
      set_u64(m, kOffCount, count);
      EXPECT_TRUE(rejected(m, v.n)) << "count " << count;
    }
    // Within the limit but not what the payload holds (dense and bucketed payloads are a
    // function of count) or not what the destination holds: decode must refuse either way.
    for (uint64_t count :
         {uint64_t{0}, uint64_t{v.n} - 1, uint64_t{v.n} + 1, uint64_t{v.n} * 2, k2p32, k2p32 + 1, kMaxCount}) {
      if (count == v.n) continue;
      Msg m = v.msg;
      set_u64(m, kOffCount, count);
      // inspect must refuse it too when the documented size for that count differs.
      const bool size_differs =
          (is_dense(v.codec) || is_bucketed(v.codec)) && doc_payload_bytes(m) != m.size() - kWireHeaderBytes;
      EXPECT_TRUE(rejected(m, v.n, /*check_inspect=*/size_differs)) << "count " << count;
    }
  }
}

TEST(WireValidation, PayloadLengthThatDisagreesIsRejected) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    const uint64_t pb = v.msg.size() - kWireHeaderBytes;
    for (uint64_t claim :
         {pb + 1, pb - 1, uint64_t{0}, pb + 8, pb * 2, uint64_t{v.msg.size()}, pb + k2p32, uint64_t{1} << 63,
          kU64Max - 56, kU64Max - 55, kU64Max - 54, kU64Max - pb, kU64Max - 1, kU64Max}) {
      if (claim == pb) continue;
      Msg m = v.msg;
      set_u64(m, kOffPayload, claim);
      EXPECT_TRUE(rejected(m, v.n)) << "payload_bytes " << claim << " for " << pb << " real bytes";
    }
  }
}

TEST(WireValidation, TrailingBytesAreRejected) {
  std::mt19937_64 rng(17);
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    for (size_t extra : {size_t{1}, size_t{3}, size_t{4}, size_t{8}, size_t{1024}}) {
      Msg m = v.msg;
      for (size_t i = 0; i < extra; ++i) m.push_back(static_cast<uint8_t>(rng()));
      EXPECT_TRUE(rejected(m, v.n)) << extra << " trailing bytes, header unchanged";
      fix_payload_len(m);
      EXPECT_TRUE(rejected(m, v.n)) << extra << " trailing bytes, payload_bytes adjusted";
      // Zero padding is no more acceptable than garbage.
      Msg z = v.msg;
      z.resize(z.size() + extra, 0);
      fix_payload_len(z);
      EXPECT_TRUE(rejected(z, v.n)) << extra << " zero bytes, payload_bytes adjusted";
    }
  }
}

TEST(WireValidation, FieldsACodecDoesNotUseMustBeZero) {
  struct Field {
    const char* name;
    size_t off;
    int bytes;
  };
  const Field kBits{"bits", kOffBits, 4}, kBucket{"bucket", kOffBucket, 4}, kK{"k", kOffK, 8},
      kSeed{"seed", kOffSeed, 8}, kStep{"step", kOffStep, 8};
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    std::vector<Field> unused;
    if (is_dense(v.codec)) unused = {kBits, kBucket, kK, kSeed, kStep};
    if (is_bucketed(v.codec)) unused = {kK, kSeed, kStep};
    if (is_indexed(v.codec)) unused = {kBits, kBucket, kSeed, kStep};
    if (v.codec == kCodecRandomk) unused = {kBits, kBucket};
    ASSERT_FALSE(unused.empty());
    for (const Field& f : unused) {
      for (uint64_t value : {uint64_t{1}, uint64_t{1} << (8 * f.bytes - 1)}) {
        Msg m = v.msg;
        put_le(m, f.off, value, f.bytes);
        EXPECT_TRUE(rejected(m, v.n)) << f.name << " = " << value;
      }
    }
  }
}

TEST(WireValidation, ElementTypeRules) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    if (v.codec == kCodecFp16 || v.codec == kCodecBf16) {
      // The payload is f16/bf16 whatever the input was: another input dtype is still valid
      // (positive control for the dtype offset) and decodes to the same values.
      const std::vector<float> ref = decoded(v.msg, v.n);
      for (uint8_t dt : {kDtypeF16, kDtypeBf16}) {
        Msg m = v.msg;
        m[kOffDtype] = dt;
        ASSERT_TRUE(accepted(m, v.n)) << "dtype " << int{dt};
        const std::vector<float> out = decoded(m, v.n);
        for (size_t i = 0; i < v.n; ++i) ASSERT_EQ(f32_bits(out[i]), f32_bits(ref[i])) << i;
      }
    } else if (v.codec == kCodecNone) {
      // none carries the input dtype: f16 claims 2-byte elements, which 4-byte ones are not.
      for (uint8_t dt : {kDtypeF16, kDtypeBf16}) {
        Msg m = v.msg;
        m[kOffDtype] = dt;
        EXPECT_TRUE(rejected(m, v.n)) << "dtype " << int{dt};
      }
    } else if (is_indexed(v.codec) || v.codec == kCodecRandomk) {
      for (uint8_t dt : {kDtypeF16, kDtypeBf16}) {
        Msg m = v.msg;
        m[kOffDtype] = dt;
        EXPECT_TRUE(rejected(m, v.n)) << "sparse message with dtype " << int{dt};
      }
    }
  }
  // Decoding rejects invalid messages before it looks at the destination dtype: a dense
  // message is checked the same way when the destination is f16 or bf16.
  for (const Valid& v : valid_messages()) {
    if (!is_dense(v.codec)) continue;
    SCOPED_TRACE(v.label());
    Msg m = v.msg;
    set_u64(m, kOffPayload, get_le(m, kOffPayload, 8) + 1);
    EXPECT_TRUE(rejected(m, v.n, true, DType::kFloat16));
    EXPECT_TRUE(rejected(m, v.n, true, DType::kBFloat16));
    m = v.msg;
    m.pop_back();
    fix_payload_len(m);
    EXPECT_TRUE(rejected(m, v.n, true, DType::kBFloat16));
  }
}

TEST(WireValidation, DestinationCountMustMatch) {
  for (const Valid& v : valid_messages()) {
    SCOPED_TRACE(v.label());
    ASSERT_TRUE(accepted(v.msg, v.n));
    for (size_t n : {size_t{0}, v.n - 1, v.n + 1, v.n * 2, v.n + 4096}) {
      if (n == v.n) continue;
      // The message itself is valid, so inspect accepts it; only the destination is wrong.
      EXPECT_TRUE(rejected(v.msg, n, /*check_inspect=*/false)) << "destination of " << n;
    }
  }
}

TEST(WireValidation, QsgdParameters) {
  for (const Valid& v : valid_messages()) {
    if (v.codec != kCodecQsgd) continue;
    SCOPED_TRACE(v.label());
    const uint64_t n = v.n;
    const uint32_t bits = static_cast<uint32_t>(get_le(v.msg, kOffBits, 4));
    const uint32_t bucket = static_cast<uint32_t>(get_le(v.msg, kOffBucket, 4));
    const uint64_t nb = ceil_div(n, bucket);
    for (uint32_t b : {0u, 3u, 5u, 6u, 7u, 9u, 12u, 16u, 32u, 64u, 0x80000000u, kU32Max}) {
      Msg m = v.msg;
      set_u32(m, kOffBits, b);
      EXPECT_TRUE(rejected(m, v.n)) << "bits " << b << ", payload unchanged";
      if (b <= 64) {
        // The payload resized to what the formula gives for that width: still not allowed.
        m.resize(kWireHeaderBytes + 8 * nb + ceil_div(n * b, 8), 0x3C);
        fix_payload_len(m);
        EXPECT_TRUE(rejected(m, v.n)) << "bits " << b << ", payload sized for it";
      }
    }
    // Another allowed width with the payload unchanged: the size no longer agrees.
    for (uint32_t b : {1u, 2u, 4u, 8u}) {
      if (b == bits) continue;
      Msg m = v.msg;
      set_u32(m, kOffBits, b);
      const uint64_t want = 8 * nb + ceil_div(n * b, 8);
      if (want == m.size() - kWireHeaderBytes) continue;  // n = 1 with 1, 2 or 4 bits
      EXPECT_TRUE(rejected(m, v.n)) << "bits " << b << " with a payload sized for " << bits;
    }
    for (uint32_t bk : {0u, (1u << 24) + 1, 0x80000000u, kU32Max}) {
      Msg m = v.msg;
      set_u32(m, kOffBucket, bk);
      EXPECT_TRUE(rejected(m, v.n)) << "bucket " << bk;
      if (bk != 0) {
        // Payload sized as the formula would have it for that bucket: still out of range.
        m.resize(kWireHeaderBytes + 8 * ceil_div(n, bk) + ceil_div(n * bits, 8), 0);
        fix_payload_len(m);
        EXPECT_TRUE(rejected(m, v.n)) << "bucket " << bk << ", payload sized for it";
      }
    }
    if (nb > 1) {
      // An allowed bucket whose bucket count differs: the payload size disagrees.
      Msg m = v.msg;
      set_u32(m, kOffBucket, 1u << 24);
      EXPECT_TRUE(rejected(m, v.n)) << "bucket 2^24 with " << nb << " scale records";
    }
    // Positive control: the largest bucket with a payload rebuilt for one bucket is valid, and
    // decodes to fma(q, unit, min) with the first bucket's scale.
    {
      // The header, the first scale record, then all the codes.
      Msg m = splice(v.msg, 0, kWireHeaderBytes + 8, v.msg, kWireHeaderBytes + 8 * nb);
      set_u32(m, kOffBucket, 1u << 24);
      fix_payload_len(m);
      ASSERT_TRUE(accepted(m, v.n)) << "one bucket of 2^24";
      const std::vector<float> out = decoded(m, v.n);
      for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(out[i], ref_qsgd(m, i))) << i;
    }
    // Bit 0 of flags is informational: toggling it changes nothing in the decode.
    {
      Msg m = v.msg;
      m[kOffFlags] = static_cast<uint8_t>(m[kOffFlags] ^ 1u);
      ASSERT_TRUE(accepted(m, v.n)) << "flag bit 0 toggled";
      const std::vector<float> a = decoded(v.msg, v.n), b = decoded(m, v.n);
      for (size_t i = 0; i < v.n; ++i) ASSERT_EQ(f32_bits(a[i]), f32_bits(b[i])) << i;
    }
  }
}

TEST(WireValidation, SignParameters) {
  for (const Valid& v : valid_messages()) {
    if (v.codec != kCodecSign) continue;
    SCOPED_TRACE(v.label());
    for (uint32_t b : {0u, 2u, 4u, 8u, kU32Max}) {
      Msg m = v.msg;
      set_u32(m, kOffBits, b);
      EXPECT_TRUE(rejected(m, v.n)) << "bits " << b;
    }
    for (uint32_t bk : {0u, (1u << 24) + 1, kU32Max}) {
      Msg m = v.msg;
      set_u32(m, kOffBucket, bk);
      EXPECT_TRUE(rejected(m, v.n)) << "bucket " << bk;
    }
    // Positive control: bucket 2^24 with a payload rebuilt for one scale is valid.
    const uint64_t nb = ceil_div(v.n, 128);
    Msg m = splice(v.msg, 0, kWireHeaderBytes + 4, v.msg, kWireHeaderBytes + 4 * nb);
    set_u32(m, kOffBucket, 1u << 24);
    fix_payload_len(m);
    ASSERT_TRUE(accepted(m, v.n));
    const std::vector<float> out = decoded(m, v.n);
    for (uint64_t i = 0; i < v.n; ++i) ASSERT_TRUE(same_float(out[i], ref_sign(m, i))) << i;
  }
}

// A topk message written from scratch: indices of the given width, then values.
Msg sparse_message(uint8_t codec, uint64_t count, const std::vector<uint64_t>& idx, int width, uint64_t k_claim) {
  test::WireFields f;
  f.codec = codec;
  f.dtype = kDtypeF32;
  f.count = count;
  f.k = k_claim;
  Msg payload(idx.size() * static_cast<size_t>(width) + 4 * idx.size(), 0);
  for (size_t j = 0; j < idx.size(); ++j) put_le(payload, j * static_cast<size_t>(width), idx[j], width);
  for (size_t j = 0; j < idx.size(); ++j) {
    put_le(payload, idx.size() * static_cast<size_t>(width) + 4 * j, f32_bits(0.5f + static_cast<float>(j)), 4);
  }
  f.payload_bytes = payload.size();
  return build(f, payload);
}

TEST(WireValidation, SparseIndicesAreChecked) {
  for (const Valid& v : valid_messages()) {
    if (!is_indexed(v.codec)) continue;
    SCOPED_TRACE(v.label());
    const uint64_t n = v.n;
    const uint64_t k = get_le(v.msg, kOffK, 8);
    ASSERT_GE(k, 1u);
    auto index_off = [&](uint64_t j) { return kWireHeaderBytes + 4 * j; };
    // An index at or past n, first, middle and last.
    for (uint64_t j : {uint64_t{0}, k / 2, k - 1}) {
      for (uint64_t bad : {n, n + 1, uint64_t{kU32Max}}) {
        Msg m = v.msg;
        put_le(m, index_off(j), bad, 4);
        EXPECT_TRUE(rejected(m, v.n)) << "index " << bad << " at position " << j;
      }
    }
    if (k >= 2) {
      for (uint64_t j : {uint64_t{1}, k / 2 == 0 ? 1 : k / 2, k - 1}) {
        const uint64_t prev = get_le(v.msg, index_off(j - 1), 4);
        const uint64_t cur = get_le(v.msg, index_off(j), 4);
        ASSERT_LT(prev, cur) << "the encoder's indices are strictly increasing";
        Msg rep = v.msg;
        put_le(rep, index_off(j), prev, 4);  // repeated
        EXPECT_TRUE(rejected(rep, v.n)) << "repeated index at position " << j;
        Msg swap = v.msg;  // decreasing
        put_le(swap, index_off(j - 1), cur, 4);
        put_le(swap, index_off(j), prev, 4);
        EXPECT_TRUE(rejected(swap, v.n)) << "decreasing indices at position " << j;
      }
      // Reversed order: every neighbour pair decreases.
      Msg rev = v.msg;
      for (uint64_t j = 0; j < k; ++j) put_le(rev, index_off(j), get_le(v.msg, index_off(k - 1 - j), 4), 4);
      EXPECT_TRUE(rejected(rev, v.n)) << "reversed indices";
    }
    // k > n with a payload of the matching size.
    {
      std::vector<uint64_t> idx(n + 1);
      for (uint64_t j = 0; j <= n; ++j) idx[j] = j;
      EXPECT_TRUE(rejected(sparse_message(v.codec, n, idx, 4, n + 1), v.n)) << "k = n + 1";
    }
    // k whose payload size k * 8 wraps around 2^64 to the bytes actually present.
    {
      const Msg m = sparse_message(v.codec, n, {0}, 4, (uint64_t{1} << 61) + 1);
      EXPECT_TRUE(rejected(m, v.n)) << "k = 2^61 + 1 (k * 8 wraps to 8)";
    }
    // k that disagrees with the payload.
    for (uint64_t claim : {k + 1, k - 1}) {
      if (claim > n) continue;
      Msg m = v.msg;
      set_u64(m, kOffK, claim);
      EXPECT_TRUE(rejected(m, v.n)) << "k = " << claim << " with a payload for " << k;
    }
  }
}

TEST(WireValidation, SparseIndexWidthAndHugeCounts) {
  for (uint8_t codec : {kCodecTopk, kCodecDgc}) {
    SCOPED_TRACE(int{codec});
    // count = 2^32: indices are u32, and 2^32 - 1 is the largest valid one.
    {
      const Msg ok = sparse_message(codec, k2p32, {0, 5, kU32Max}, 4, 3);
      const ExactCopy copy(ok);
      const auto r = inspect(copy.data.get(), copy.len);
      ASSERT_TRUE(r.is_ok()) << "count 2^32 with u32 indices: " << r.status().to_string();
      EXPECT_EQ(r->count, k2p32);
      EXPECT_EQ(r->nnz, 3u);
      EXPECT_TRUE(rejected(ok, 7, /*check_inspect=*/false)) << "count 2^32 into 7 elements";
      EXPECT_TRUE(rejected(sparse_message(codec, k2p32, {0, 5, kU32Max}, 8, 3), 7)) << "u64 indices at 2^32";
    }
    // count = 2^32 + 1: indices are u64.
    {
      const Msg ok = sparse_message(codec, k2p32 + 1, {1, k2p32}, 8, 2);
      const ExactCopy copy(ok);
      const auto r = inspect(copy.data.get(), copy.len);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_EQ(r->count, k2p32 + 1);
      EXPECT_EQ(r->nnz, 2u);
      EXPECT_TRUE(rejected(ok, 7, /*check_inspect=*/false)) << "count 2^32 + 1 into 7 elements";
      EXPECT_TRUE(rejected(sparse_message(codec, k2p32 + 1, {1, 2}, 4, 2), 7)) << "u32 indices past 2^32";
      EXPECT_TRUE(rejected(sparse_message(codec, k2p32 + 1, {1, k2p32 + 1}, 8, 2), 7)) << "index = count";
      EXPECT_TRUE(rejected(sparse_message(codec, k2p32 + 1, {1, kU64Max}, 8, 2), 7)) << "index 2^64 - 1";
      EXPECT_TRUE(rejected(sparse_message(codec, k2p32 + 1, {k2p32, k2p32}, 8, 2), 7)) << "repeated u64";
      EXPECT_TRUE(rejected(sparse_message(codec, k2p32 + 1, {k2p32, 1}, 8, 2), 7)) << "decreasing u64";
    }
    // The 2^48 limit: exactly 2^48 is a valid (if useless here) message, 2^48 + 1 is not.
    {
      const Msg at = sparse_message(codec, kMaxCount, {kMaxCount - 1}, 8, 1);
      const ExactCopy copy(at);
      EXPECT_TRUE(inspect(copy.data.get(), copy.len).is_ok()) << "count 2^48";
      EXPECT_TRUE(rejected(at, 7, /*check_inspect=*/false)) << "count 2^48 into 7 elements";
      EXPECT_TRUE(rejected(sparse_message(codec, kMaxCount + 1, {3}, 8, 1), 7)) << "count 2^48 + 1";
      EXPECT_TRUE(rejected(sparse_message(codec, kU64Max, {3}, 8, 1), 7)) << "count 2^64 - 1";
    }
  }
}

TEST(WireValidation, RandomkParameters) {
  for (const Valid& v : valid_messages()) {
    if (v.codec != kCodecRandomk) continue;
    SCOPED_TRACE(v.label());
    const uint64_t n = v.n;
    const uint64_t k = get_le(v.msg, kOffK, 8);
    // k = 0 for a non-empty tensor, k > n (payload sized for it), k disagreeing with the payload.
    Msg m = v.msg;
    set_u64(m, kOffK, 0);
    EXPECT_TRUE(rejected(m, v.n)) << "k = 0, payload unchanged";
    m.resize(kWireHeaderBytes);
    fix_payload_len(m);
    EXPECT_TRUE(rejected(m, v.n)) << "k = 0, empty payload";
    m = v.msg;
    set_u64(m, kOffK, n + 1);
    m.resize(kWireHeaderBytes + 4 * (n + 1), 0x11);
    fix_payload_len(m);
    EXPECT_TRUE(rejected(m, v.n)) << "k = n + 1";
    for (uint64_t claim : {k + 1, k - 1}) {
      if (claim == 0 || claim > n) continue;
      m = v.msg;
      set_u64(m, kOffK, claim);
      EXPECT_TRUE(rejected(m, v.n)) << "k = " << claim << " with a payload for " << k;
    }
    // k * 4 wrapping around 2^64 to the real payload size.
    m = v.msg;
    m.resize(kWireHeaderBytes + 4);
    set_u64(m, kOffK, (uint64_t{1} << 62) + 1);
    fix_payload_len(m);
    EXPECT_TRUE(rejected(m, v.n)) << "k = 2^62 + 1 (k * 4 wraps to 4)";
    // Positive control: seed and step are free; another stream moves the values elsewhere.
    m = v.msg;
    set_u64(m, kOffSeed, 0x0123456789ABCDEFull);
    set_u64(m, kOffStep, kU64Max);
    ASSERT_TRUE(accepted(m, v.n)) << "other seed and step";
    EXPECT_EQ(test::nonzero_positions(decoded(m, v.n)).size(), k);
  }
  // A randomk message for a huge tensor is valid, but never decodes into a small buffer.
  test::WireFields f;
  f.codec = kCodecRandomk;
  f.dtype = kDtypeF32;
  f.count = kMaxCount;
  f.k = 1;
  f.payload_bytes = 4;
  const Msg huge = build(f, Msg(4, 0x40));
  const ExactCopy copy(huge);
  EXPECT_TRUE(inspect(copy.data.get(), copy.len).is_ok());
  EXPECT_TRUE(rejected(huge, 7, /*check_inspect=*/false));
  f.count = kMaxCount + 1;
  EXPECT_TRUE(rejected(build(f, Msg(4, 0x40)), 7));
}

TEST(WireValidation, NullMessageIsAnArgumentError) {
  float dst[4] = {1, 2, 3, 4};
  const Status s = decode(nullptr, 0, dst, 4, DType::kFloat32, DecodeMode::kOverwrite);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_FALSE(s.message().empty());
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[3], 4.0f);
  EXPECT_FALSE(inspect(nullptr, 100).is_ok());
}

// =====================================================================================
// Non-finite scales. The format allows any f32 scale: the documented encoder itself writes
// infinite or NaN ones for inputs with infinities or NaNs (unit = max/L - min/L when
// (max - min)/L is not finite; a NaN first element becomes min). So a decoder accepts them
// and computes exactly what the page says: fma(q, unit, min) for qsgd, +-scale for sign.
// =====================================================================================

TEST(WireValidation, NonFiniteScalesDecodeAsDocumented) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::numeric_limits<float>::signaling_NaN();
  const std::vector<std::pair<float, float>> qsgd_scales = {
      {nan, 0.5f},  {0.25f, nan}, {inf, 0.0f}, {-inf, 0.0f}, {-inf, 1.0f}, {0.0f, inf},
      {1.0f, -inf}, {inf, -inf},  {nan, nan},  {snan, 1.0f}, {-0.0f, inf}, {3.4e38f, 3.4e38f}};
  for (const Valid& v : valid_messages()) {
    if (v.codec != kCodecQsgd && v.codec != kCodecSign) continue;
    SCOPED_TRACE(v.label());
    const uint64_t nb = ceil_div(v.n, 128);
    if (v.codec == kCodecQsgd) {
      for (const auto& [mn, unit] : qsgd_scales) {
        Msg m = v.msg;
        for (uint64_t b = 0; b < nb; ++b) {
          set_f32(m, kWireHeaderBytes + 8 * b, mn);
          set_f32(m, kWireHeaderBytes + 8 * b + 4, unit);
        }
        ASSERT_TRUE(accepted(m, v.n)) << "min " << mn << " unit " << unit;
        std::vector<float> out = decoded(m, v.n);
        for (uint64_t i = 0; i < v.n; ++i) {
          ASSERT_TRUE(same_float(out[i], ref_qsgd(m, i))) << i << ": " << out[i] << " vs " << ref_qsgd(m, i);
        }
        // Accumulating and subtracting non-finite values is fine too.
        std::vector<float> acc(v.n, 1.0f);
        EXPECT_TRUE(decode(m.data(), m.size(), acc.data(), v.n, DType::kFloat32, DecodeMode::kAccumulate).is_ok());
        EXPECT_TRUE(decode(m.data(), m.size(), acc.data(), v.n, DType::kFloat32, DecodeMode::kSubtract).is_ok());
      }
    } else {
      for (float scale : {nan, inf, -inf, snan, -0.0f, 3.4e38f}) {
        Msg m = v.msg;
        set_f32(m, kWireHeaderBytes + 4 * (nb - 1), scale);
        ASSERT_TRUE(accepted(m, v.n)) << "scale " << scale;
        const std::vector<float> out = decoded(m, v.n);
        for (uint64_t i = 0; i < v.n; ++i) ASSERT_TRUE(same_float(out[i], ref_sign(m, i))) << i;
      }
    }
  }
}

TEST(WireValidation, NonFiniteInputsEncodeToMessagesThatDecode) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Spec& s : all_specs()) {
    SCOPED_TRACE(s.text);
    auto codec = test::make_codec(s.text);
    ASSERT_NE(codec, nullptr);
    for (size_t n : kSizes) {
      std::vector<float> x = test::gradient(n, 99 + n);
      x[0] = nan;  // a NaN first element sticks as a bucket's min in qsgd
      if (n > 1) x[n - 1] = inf;
      if (n > 3) x[n / 2] = -inf;
      const Msg m = test::encode(*codec, x);
      ASSERT_TRUE(accepted(m, n)) << "n=" << n;
      const std::vector<float> out = decoded(m, n);
      if (s.codec == kCodecQsgd) {
        for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(out[i], ref_qsgd(m, i))) << i;
      } else if (s.codec == kCodecSign) {
        for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(out[i], ref_sign(m, i))) << i;
      }
    }
  }
}

// =====================================================================================
// Random mutation: flips, byte writes, header fields set to boundary values, truncation and
// extension of valid messages. A decode either succeeds or fails with kInvalidMessage and an
// untouched destination; inspect agrees with decode; and whatever inspect accepts decodes
// into a destination of the size it names (run under ASan + UBSan in CI).
// =====================================================================================

uint64_t interesting(std::mt19937_64& rng, uint64_t n, uint64_t current) {
  const uint64_t values[] = {0,
                             1,
                             2,
                             3,
                             7,
                             8,
                             n - 1,
                             n,
                             n + 1,
                             current - 1,
                             current + 1,
                             127,
                             128,
                             255,
                             256,
                             1u << 24,
                             (1u << 24) + 1,
                             kU32Max,
                             k2p32,
                             k2p32 + 1,
                             kMaxCount,
                             kMaxCount + 1,
                             uint64_t{1} << 61,
                             uint64_t{1} << 62,
                             uint64_t{1} << 63,
                             kU64Max - 55,
                             kU64Max,
                             rng()};
  return values[rng() % std::size(values)];
}

void mutate(Msg& m, std::mt19937_64& rng, uint64_t n) {
  switch (rng() % 10) {
    case 0:  // flip a bit anywhere
      if (!m.empty()) {
        const size_t i = rng() % m.size();
        m[i] = static_cast<uint8_t>(m[i] ^ (1u << (rng() % 8)));
      }
      break;
    case 1:  // write a random byte anywhere
      if (!m.empty()) m[rng() % m.size()] = static_cast<uint8_t>(rng());
      break;
    case 2:  // flip a bit in the header
      if (m.size() >= kWireHeaderBytes) {
        const size_t i = rng() % kWireHeaderBytes;
        m[i] = static_cast<uint8_t>(m[i] ^ (1u << (rng() % 8)));
      }
      break;
    case 3:  // truncate
      m.resize(m.empty() ? 0 : rng() % m.size());
      break;
    case 4:  // extend
      for (size_t e = 1 + rng() % 16; e > 0; --e) m.push_back(static_cast<uint8_t>(rng()));
      break;
    case 5:  // a header field set to a boundary value
      if (m.size() >= kWireHeaderBytes) {
        static const std::pair<size_t, int> kFields[] = {{kOffCount, 8}, {kOffBits, 4}, {kOffBucket, 4}, {kOffK, 8},
                                                         {kOffSeed, 8},  {kOffStep, 8}, {kOffPayload, 8}};
        const auto [off, bytes] = kFields[rng() % std::size(kFields)];
        put_le(m, off, interesting(rng, n, get_le(m, off, bytes)), bytes);
      }
      break;
    case 6:  // one of the small header bytes set to a neighbouring or random value
      if (m.size() >= kWireHeaderBytes) {
        const size_t off = kOffCodec + rng() % 3;  // codec, dtype, flags
        m[off] = static_cast<uint8_t>(rng() % 3 == 0 ? rng() : m[off] + (rng() % 2 ? 1 : -1));
      }
      break;
    case 7:  // a payload word (an index, a scale) set to a boundary value
      if (m.size() >= kWireHeaderBytes + 4) {
        const size_t words = (m.size() - kWireHeaderBytes) / 4;
        const size_t w = kWireHeaderBytes + 4 * (rng() % std::min<size_t>(words, 64));
        put_le(m, w, interesting(rng, n, get_le(m, w, 4)), 4);
      }
      break;
    case 8:  // swap two payload words (index order)
      if (m.size() >= kWireHeaderBytes + 8) {
        const size_t words = std::min<size_t>((m.size() - kWireHeaderBytes) / 4, 64);
        const size_t a = kWireHeaderBytes + 4 * (rng() % words), b = kWireHeaderBytes + 4 * (rng() % words);
        for (size_t i = 0; i < 4; ++i) std::swap(m[a + i], m[b + i]);
      }
      break;
    default:  // a header field copied from another valid header position
      if (m.size() >= kWireHeaderBytes) set_u64(m, kOffK, get_le(m, kOffCount, 8) + (rng() % 3) - 1);
      break;
  }
}

struct FuzzTally {
  size_t accepted = 0;
  size_t rejected = 0;
};

void check_mutant(const Msg& msg, size_t n, std::mt19937_64& rng, FuzzTally& tally) {
  const ExactCopy copy(msg);
  const DecodeMode mode = static_cast<DecodeMode>(rng() % 3);
  std::vector<float> dst(n);
  std::memset(dst.data(), kPattern, n * sizeof(float));
  const Status s = decode(copy.data.get(), copy.len, dst.data(), n, DType::kFloat32, mode);
  const auto info = inspect(copy.data.get(), copy.len);
  if (s.is_ok()) {
    ++tally.accepted;
    ASSERT_TRUE(info.is_ok()) << "decode accepted what inspect rejects: " << info.status().to_string();
    ASSERT_EQ(info->count, n);
  } else {
    ++tally.rejected;
    ASSERT_EQ(s.code(), Code::kInvalidMessage) << s.to_string();
    ASSERT_FALSE(s.message().empty());
    const auto* bytes = reinterpret_cast<const uint8_t*>(dst.data());
    ASSERT_TRUE(untouched(bytes, n * sizeof(float)))
        << "rejected (" << s.message() << ") yet wrote byte " << first_touched(bytes, n * sizeof(float));
    // The only reason for decode to refuse what inspect accepts is the destination size.
    if (info.is_ok()) {
      ASSERT_NE(info->count, n) << s.to_string();
    }
  }
  if (info.is_ok()) {
    ASSERT_EQ(info->total_bytes, msg.size());
    ASSERT_LE(info->nnz, info->count);
    // Whatever passes validation must decode safely into exactly the size it claims.
    if (info->count != n && info->count <= (uint64_t{1} << 16)) {
      std::vector<float> exact(info->count, 1.0f);
      const Status t = decode(copy.data.get(), copy.len, exact.data(), exact.size(), DType::kFloat32,
                              static_cast<DecodeMode>(rng() % 3));
      ASSERT_TRUE(t.is_ok()) << "inspect accepted a message of " << info->count
                             << " elements that does not decode into that many: " << t.to_string();
    }
  } else {
    ASSERT_EQ(info.status().code(), Code::kInvalidMessage) << info.status().to_string();
  }
}

TEST(WireValidation, RandomMutationsNeverCrashAndNeverWriteOnError) {
  std::mt19937_64 rng(0x67726164776972ull);  // fixed: failures reproduce
  uint64_t seed = 500;
  for (const Spec& s : all_specs()) {
    auto codec = test::make_codec(s.text);
    ASSERT_NE(codec, nullptr);
    for (const auto& [n, iterations] : {std::pair<size_t, int>{7, 4000}, std::pair<size_t, int>{4099, 400}}) {
      SCOPED_TRACE(s.text + " n=" + std::to_string(n));
      const Msg base = test::encode(*codec, test::gradient(n, seed++), /*step=*/5, /*rank=*/2);
      ASSERT_FALSE(base.empty());
      FuzzTally tally;
      for (int it = 0; it < iterations; ++it) {
        Msg m = base;
        for (int j = 1 + static_cast<int>(rng() % 3); j > 0; --j) mutate(m, rng, n);
        // Half the time make payload_bytes agree, so that the codec validators are reached.
        if (rng() % 2 == 0 && m.size() >= kWireHeaderBytes) fix_payload_len(m);
        check_mutant(m, n, rng, tally);
        if (::testing::Test::HasFatalFailure()) {
          ADD_FAILURE() << "iteration " << it;
          return;
        }
      }
      // The loop exercised both outcomes (a mutation loop that only ever hit one would prove
      // little about the other).
      EXPECT_GT(tally.accepted, 0u);
      EXPECT_GT(tally.rejected, 0u);
    }
  }
}

}  // namespace
}  // namespace gw
