// Parsing and printing of codec specs: "name" or "name:key=value,key=value".
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compressors/codec_registry.hpp"
#include "gradwire/codec.hpp"

namespace gw {
namespace {

constexpr uint32_t kMaxBucket = 1u << 24;
constexpr uint32_t kDefaultBucket = 512;
constexpr double kDefaultDgcSample = 0.01;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status bad_value(std::string_view key, std::string_view value, const char* expected) {
  return invalid_argument("codec spec: " + std::string(key) + "=" + std::string(value) +
                          " is out of range (expected " + expected + ")");
}

Result<uint64_t> parse_u64(std::string_view key, std::string_view value, const char* expected) {
  std::string s(value);
  if (s.empty() || s[0] == '-' || s[0] == '+') return bad_value(key, value, expected);
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || end != s.c_str() + s.size()) return bad_value(key, value, expected);
  return static_cast<uint64_t>(v);
}

Result<double> parse_double(std::string_view key, std::string_view value, const char* expected) {
  std::string s(value);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return bad_value(key, value, expected);
  }
  return v;
}

Result<bool> parse_bool(std::string_view key, std::string_view value) {
  if (value == "1" || value == "true" || value == "on" || value == "yes") return true;
  if (value == "0" || value == "false" || value == "off" || value == "no") return false;
  return bad_value(key, value, "0 or 1");
}

bool key_allowed(const detail::CodecEntry& entry, std::string_view key) {
  if (key == "ef") return true;
  std::string_view keys(entry.keys);
  while (!keys.empty()) {
    const size_t comma = keys.find(',');
    if (keys.substr(0, comma) == key) return true;
    if (comma == std::string_view::npos) break;
    keys.remove_prefix(comma + 1);
  }
  return false;
}

Status set_key(CodecSpec& spec, std::string_view key, std::string_view value) {
  if (key == "ef") {
    GW_ASSIGN_OR_RETURN(spec.ef, parse_bool(key, value));
  } else if (key == "bits") {
    GW_ASSIGN_OR_RETURN(uint64_t bits, parse_u64(key, value, "1, 2, 4 or 8"));
    if (bits != 1 && bits != 2 && bits != 4 && bits != 8) return bad_value(key, value, "1, 2, 4 or 8");
    spec.bits = static_cast<uint32_t>(bits);
  } else if (key == "bucket") {
    GW_ASSIGN_OR_RETURN(uint64_t bucket, parse_u64(key, value, "1 to 16777216"));
    if (bucket < 1 || bucket > kMaxBucket) return bad_value(key, value, "1 to 16777216");
    spec.bucket = static_cast<uint32_t>(bucket);
  } else if (key == "ratio") {
    GW_ASSIGN_OR_RETURN(double ratio, parse_double(key, value, "0 < ratio <= 1"));
    if (!(ratio > 0.0 && ratio <= 1.0)) return bad_value(key, value, "0 < ratio <= 1");
    spec.ratio = ratio;
  } else if (key == "k") {
    GW_ASSIGN_OR_RETURN(uint64_t k, parse_u64(key, value, "k >= 1"));
    if (k < 1) return bad_value(key, value, "k >= 1");
    spec.k = k;
  } else if (key == "sample") {
    GW_ASSIGN_OR_RETURN(double sample, parse_double(key, value, "0 < sample <= 1"));
    if (!(sample > 0.0 && sample <= 1.0)) return bad_value(key, value, "0 < sample <= 1");
    spec.sample = sample;
  } else if (key == "seed") {
    GW_ASSIGN_OR_RETURN(spec.seed, parse_u64(key, value, "an unsigned 64-bit integer"));
  } else if (key == "rounding") {
    if (value == "stochastic") {
      spec.stochastic = true;
    } else if (value == "nearest") {
      spec.stochastic = false;
    } else {
      return bad_value(key, value, "stochastic or nearest");
    }
  } else {
    return internal_error("spec key without a setter: " + std::string(key));
  }
  return Status::ok();
}

}  // namespace

Result<CodecSpec> CodecSpec::parse(std::string_view text) {
  text = trim(text);
  const size_t colon = text.find(':');
  const std::string_view name = trim(text.substr(0, colon));
  const detail::CodecEntry* entry = detail::find_codec(name);
  if (entry == nullptr) {
    return invalid_argument("codec spec: unknown codec '" + std::string(name) +
                            "' (known: none, fp16, bf16, qsgd, sign, topk, dgc, randomk)");
  }
  CodecSpec spec;
  spec.id = entry->id;
  std::string seen = ",";
  if (colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view item = trim(rest.substr(0, comma));
      const size_t eq = item.find('=');
      if (item.empty() || eq == std::string_view::npos) {
        return invalid_argument("codec spec: '" + std::string(item) + "' in '" +
                                std::string(text) + "' is not key=value");
      }
      const std::string_view key = trim(item.substr(0, eq));
      const std::string_view value = trim(item.substr(eq + 1));
      if (!key_allowed(*entry, key)) {
        return invalid_argument("codec spec: unknown key '" + std::string(key) + "' for codec " +
                                entry->name + " (keys: " + entry->keys +
                                (entry->keys[0] != '\0' ? "," : "") + "ef)");
      }
      const std::string marker = "," + std::string(key) + ",";
      if (seen.find(marker) != std::string::npos) {
        return invalid_argument("codec spec: key '" + std::string(key) + "' given twice");
      }
      seen += std::string(key) + ",";
      GW_RETURN_IF_ERROR(set_key(spec, key, value));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  switch (spec.id) {
    case CodecId::kQsgd:
      if (spec.bits == 0) spec.bits = 8;
      if (spec.bucket == 0) spec.bucket = kDefaultBucket;
      // Error feedback needs a compressor whose error is smaller than its input. 1-bit
      // stochastic min/max rounding is not one: its residual grows step after step (seen:
      // inf within 150 steps of a constant gradient). Rounding to nearest is.
      if (spec.ef && spec.bits == 1 && spec.stochastic) {
        return invalid_argument("codec spec: qsgd:bits=1 with ef=1 diverges under stochastic rounding; "
                                "add rounding=nearest, or use sign");
      }
      break;
    case CodecId::kSign:
      spec.bits = 1;
      if (spec.bucket == 0) spec.bucket = kDefaultBucket;
      break;
    case CodecId::kTopk:
    case CodecId::kDgc:
    case CodecId::kRandomk:
      if ((spec.ratio > 0.0) == (spec.k > 0)) {
        return invalid_argument(std::string("codec spec: ") + entry->name +
                                " needs exactly one of ratio= or k=");
      }
      if (spec.id == CodecId::kDgc && spec.sample == 0.0) spec.sample = kDefaultDgcSample;
      break;
    default:
      break;
  }
  return spec;
}

std::string CodecSpec::to_string() const {
  std::string out = codec_name(id);
  char buf[64];
  auto add = [&out](const char* text) {
    out += out.find(':') == std::string::npos ? ":" : ",";
    out += text;
  };
  switch (id) {
    case CodecId::kQsgd:
      std::snprintf(buf, sizeof buf, "bits=%u", bits);
      add(buf);
      std::snprintf(buf, sizeof buf, "bucket=%u", bucket);
      add(buf);
      add(stochastic ? "rounding=stochastic" : "rounding=nearest");
      std::snprintf(buf, sizeof buf, "seed=%llu", static_cast<unsigned long long>(seed));
      add(buf);
      break;
    case CodecId::kSign:
      std::snprintf(buf, sizeof buf, "bucket=%u", bucket);
      add(buf);
      break;
    case CodecId::kTopk:
    case CodecId::kDgc:
    case CodecId::kRandomk:
      if (k > 0) {
        std::snprintf(buf, sizeof buf, "k=%llu", static_cast<unsigned long long>(k));
      } else {
        std::snprintf(buf, sizeof buf, "ratio=%.17g", ratio);
      }
      add(buf);
      if (id == CodecId::kDgc) {
        std::snprintf(buf, sizeof buf, "sample=%.17g", sample);
        add(buf);
      }
      if (id != CodecId::kTopk) {
        std::snprintf(buf, sizeof buf, "seed=%llu", static_cast<unsigned long long>(seed));
        add(buf);
      }
      break;
    default:
      break;
  }
  add(ef ? "ef=1" : "ef=0");
  return out;
}

bool CodecSpec::is_sparse() const {
  return id == CodecId::kTopk || id == CodecId::kDgc || id == CodecId::kRandomk;
}

uint64_t CodecSpec::k_for(uint64_t n) const {
  if (n == 0) return 0;
  uint64_t kk = k;
  if (kk == 0) {
    const double want = std::floor(ratio * static_cast<double>(n) + 0.5);
    kk = want < 1.0 ? 1 : (want >= static_cast<double>(n) ? n : static_cast<uint64_t>(want));
  }
  return kk < n ? kk : n;
}

}  // namespace gw
