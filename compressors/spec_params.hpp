// Spec keys and checks that several codecs share.
#pragma once

#include "compressors/codec_registry.hpp"

namespace gw::detail {

constexpr uint32_t kMaxBucket = 1u << 24;
constexpr uint32_t kDefaultBucket = 512;

constexpr SpecParam kBucketParam =
    unsigned_param("bucket", &CodecSpec::bucket, 1, kMaxBucket, "1 to 16777216").with_default(kDefaultBucket);
constexpr SpecParam kSeedParam = unsigned_param("seed", &CodecSpec::seed, 0, UINT64_MAX, "an unsigned 64-bit integer");

// The sparse codecs keep a fraction (ratio=) or a count (k=): exactly one is given, and
// to_string prints the one that is set.
inline bool k_is_set(const CodecSpec& s) { return s.k > 0; }
inline bool k_is_unset(const CodecSpec& s) { return s.k == 0; }
// A ratio below 2^-40 keeps one element of any buffer a process can hold: use k= instead.
constexpr SpecParam kRatioParam =
    real_param("ratio", &CodecSpec::ratio, 0x1p-40, 1.0, "2^-40 < ratio <= 1; for fewer use k=").shown_when(k_is_unset);
constexpr SpecParam kKParam = unsigned_param("k", &CodecSpec::k, 1, UINT64_MAX, "k >= 1").shown_when(k_is_set);

// Exactly one of ratio= and k=.
Status finish_sparse(CodecSpec& spec);

}  // namespace gw::detail
