// The table of codecs. One CodecEntry is everything the library knows about a codec: its name
// and wire id, the spec keys it takes (how each is read, checked, defaulted, stored in a
// CodecSpec and printed), how the combination is checked, what it can do, and how it is built,
// validated and applied on the host. Each codec's file registers its own entry with
// GW_REGISTER_CODEC; the device half registers from its kernel file with
// GW_REGISTER_DEVICE_CODEC (kernels/device_codecs.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>

#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/status.hpp"

namespace gw::detail {

// One spec key besides "ef" (which every codec takes): how it is read and checked, where it
// lands in CodecSpec, its default and when to_string prints it. Built with the constexpr
// helpers below, e.g. unsigned_param("bucket", &CodecSpec::bucket, 1, 1u << 24, "1 to 16777216").
struct SpecParam {
  enum class Kind : uint8_t {
    kUnsigned,  // an integer in [min, max], or one of values[] when n_values > 0
    kReal,      // a finite number in (lo, hi]
    kChoice,    // one of two words: choices[0] stores false, choices[1] true
  };
  const char* key = nullptr;
  Kind kind = Kind::kUnsigned;
  // The accepted range as error messages state it ("1 to 16777216").
  const char* expected = nullptr;
  // Where the value lands: the one pointer the kind (and the field's width) names.
  uint32_t CodecSpec::*u32 = nullptr;
  uint64_t CodecSpec::*u64 = nullptr;
  double CodecSpec::*real = nullptr;
  bool CodecSpec::*flag = nullptr;
  uint64_t min = 0;
  uint64_t max = UINT64_MAX;
  uint64_t values[4] = {};
  uint8_t n_values = 0;
  double lo = 0.0;
  double hi = 0.0;
  const char* choices[2] = {nullptr, nullptr};
  // Stored when the key is not given (kChoice: nonzero stores true).
  bool has_default = false;
  double default_value = 0.0;
  // Whether to_string prints the key for this spec; null: always.
  bool (*shown)(const CodecSpec& spec) = nullptr;

  constexpr SpecParam with_default(double v) const {
    SpecParam p = *this;
    p.has_default = true;
    p.default_value = v;
    return p;
  }
  constexpr SpecParam one_of(uint64_t a, uint64_t b, uint64_t c, uint64_t d) const {
    SpecParam p = *this;
    p.values[0] = a;
    p.values[1] = b;
    p.values[2] = c;
    p.values[3] = d;
    p.n_values = 4;
    return p;
  }
  constexpr SpecParam shown_when(bool (*when)(const CodecSpec&)) const {
    SpecParam p = *this;
    p.shown = when;
    return p;
  }
};

// An unsigned key stored in a uint32_t or uint64_t field of CodecSpec.
template <class Field>
constexpr SpecParam unsigned_param(const char* key, Field CodecSpec::*field, uint64_t min, uint64_t max,
                                   const char* expected) {
  static_assert(std::is_same_v<Field, uint32_t> || std::is_same_v<Field, uint64_t>,
                "an unsigned spec key is stored in a uint32_t or uint64_t field");
  SpecParam p;
  p.key = key;
  p.kind = SpecParam::Kind::kUnsigned;
  p.expected = expected;
  if constexpr (std::is_same_v<Field, uint32_t>) {
    p.u32 = field;
  } else {
    p.u64 = field;
  }
  p.min = min;
  p.max = max;
  return p;
}
// A number in (lo, hi].
constexpr SpecParam real_param(const char* key, double CodecSpec::*field, double lo, double hi, const char* expected) {
  SpecParam p;
  p.key = key;
  p.kind = SpecParam::Kind::kReal;
  p.expected = expected;
  p.real = field;
  p.lo = lo;
  p.hi = hi;
  return p;
}
constexpr SpecParam choice_param(const char* key, bool CodecSpec::*field, const char* if_false, const char* if_true,
                                 const char* expected) {
  SpecParam p;
  p.key = key;
  p.kind = SpecParam::Kind::kChoice;
  p.expected = expected;
  p.flag = field;
  p.choices[0] = if_false;
  p.choices[1] = if_true;
  return p;
}

// What a codec can do. Values match GW_CODEC_CAP_* in gradwire.h.
enum CodecCaps : uint32_t {
  kCapLossy = 1u << 0,          // decode(encode(x)) may differ from x
  kCapErrorFeedback = 1u << 1,  // ef=1 is meaningful (the residual can shrink)
  kCapSparse = 1u << 2,         // keeps k of n elements (CodecSpec::k_for)
  kCapIndices = 1u << 3,        // the payload carries the kept elements' indices
  kCapAnyDtype = 1u << 4,       // takes and decodes into every floating dtype, not float32 only
};

struct CodecEntry {
  CodecId id;
  const char* name;
  const SpecParam* params;
  size_t n_params;
  // Checks the combination of keys and fills what depends on several (after defaults); null
  // when any combination is fine.
  Status (*finish)(CodecSpec& spec);
  uint32_t caps;
  std::unique_ptr<Codec> (*make)(const CodecSpec& spec);
  // Checks the codec parameters of a header and everything in the payload that could make
  // apply() misbehave (lengths, index order and range); sets nnz. Reads, never writes; reads
  // the payload only for the index-carrying codecs, so the device decoder may pass a null
  // payload for the others.
  Status (*validate)(const wire::Header& header, const uint8_t* payload, uint64_t& nnz);
  // Writes the decoded values into dst; called only after validate() succeeded.
  void (*apply)(const wire::Header& header, const uint8_t* payload, void* dst, DType dtype, DecodeMode mode);
  // Specs codec_bench measures by default, null-terminated (may be null).
  const char* const* bench_specs;

  bool has(uint32_t cap) const { return (caps & cap) != 0; }
};

// Adds an entry; aborts with a message when its id or name is taken (a programming error,
// found at static initialization). The entry must outlive the process.
void register_codec(const CodecEntry& entry);

const CodecEntry* find_codec(CodecId id);
const CodecEntry* find_codec(std::string_view name);
// Every registered entry, sorted by id.
size_t codec_count();
const CodecEntry* codec_at(size_t index);

struct CodecRegistrar {
  explicit CodecRegistrar(const CodecEntry& entry) { register_codec(entry); }
};

}  // namespace gw::detail

#define GW_CODEC_CONCAT_INNER(a, b) a##b
#define GW_CODEC_CONCAT(a, b) GW_CODEC_CONCAT_INNER(a, b)
// At namespace scope in the file that defines the entry. The registrars run before ordinary
// static initializers (init_priority), so a global of another file that creates a codec
// finds every entry whatever the link order.
#define GW_CODEC_INIT_PRIORITY __attribute__((init_priority(200)))
#define GW_REGISTER_CODEC(entry)                                                                                    \
  static const ::gw::detail::CodecRegistrar GW_CODEC_CONCAT(gw_codec_registrar_, __LINE__) GW_CODEC_INIT_PRIORITY { \
    entry                                                                                                           \
  }
