// Parsing and printing of codec specs: "name" or "name:key=value,key=value".
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compressors/codec_registry.hpp"
#include "compressors/spec_params.hpp"
#include "gradwire/codec.hpp"

namespace gw {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status bad_value(std::string_view key, std::string_view value, const char* expected) {
  return invalid_argument("codec spec: " + std::string(key) + "=" + std::string(value) + " is out of range (expected " +
                          expected + ")");
}

Result<uint64_t> parse_u64(std::string_view key, std::string_view value, const char* expected) {
  std::string s(value);
  if (s.empty() || s[0] < '0' || s[0] > '9') return bad_value(key, value, expected);
  // Decimal only: "010" is not 8 (octal) nor 10 with a stray zero, "0x10" not 16.
  if (s.size() > 1 && s[0] == '0') {
    return invalid_argument("codec spec: " + std::string(key) + "=" + s + " has a leading zero (expected " + expected +
                            ", in decimal)");
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return bad_value(key, value, expected);
  return static_cast<uint64_t>(v);
}

Result<double> parse_double(std::string_view key, std::string_view value, const char* expected) {
  std::string s(value);
  // strtod would skip leading whitespace and read hexadecimal floats, NAN and INF.
  if (s.empty() || !((s[0] >= '0' && s[0] <= '9') || s[0] == '.')) return bad_value(key, value, expected);
  for (char ch : s) {
    if (ch == 'x' || ch == 'X') return bad_value(key, value, expected);
  }
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

const detail::SpecParam* find_param(const detail::CodecEntry& entry, std::string_view key) {
  for (size_t i = 0; i < entry.n_params; ++i) {
    if (key == entry.params[i].key) return &entry.params[i];
  }
  return nullptr;
}

// "bits,bucket,rounding,seed": the entry's keys in table order.
std::string key_list(const detail::CodecEntry& entry) {
  std::string keys;
  for (size_t i = 0; i < entry.n_params; ++i) {
    if (i > 0) keys += ",";
    keys += entry.params[i].key;
  }
  return keys;
}

Status store(const detail::SpecParam& p, CodecSpec& spec, uint64_t v) {
  if (p.u32 != nullptr) {
    spec.*p.u32 = static_cast<uint32_t>(v);
  } else if (p.u64 != nullptr) {
    spec.*p.u64 = v;
  } else {
    return internal_error(std::string("spec key without a field: ") + p.key);
  }
  return Status::ok();
}

Status set_param(const detail::SpecParam& p, CodecSpec& spec, std::string_view key, std::string_view value) {
  using Kind = detail::SpecParam::Kind;
  switch (p.kind) {
    case Kind::kUnsigned: {
      GW_ASSIGN_OR_RETURN(uint64_t v, parse_u64(key, value, p.expected));
      bool ok = v >= p.min && v <= p.max;
      if (p.n_values > 0) ok = std::find(p.values, p.values + p.n_values, v) != p.values + p.n_values;
      if (!ok) return bad_value(key, value, p.expected);
      return store(p, spec, v);
    }
    case Kind::kReal: {
      GW_ASSIGN_OR_RETURN(double v, parse_double(key, value, p.expected));
      if (!(v > p.lo && v <= p.hi)) return bad_value(key, value, p.expected);
      spec.*p.real = v;
      return Status::ok();
    }
    case Kind::kChoice:
      for (int i = 0; i < 2; ++i) {
        if (value == p.choices[i]) {
          spec.*p.flag = i == 1;
          return Status::ok();
        }
      }
      return bad_value(key, value, p.expected);
  }
  return internal_error("spec key of an unknown kind: " + std::string(key));
}

Status set_default(const detail::SpecParam& p, CodecSpec& spec) {
  using Kind = detail::SpecParam::Kind;
  switch (p.kind) {
    case Kind::kUnsigned: return store(p, spec, static_cast<uint64_t>(p.default_value));
    case Kind::kReal: spec.*p.real = p.default_value; return Status::ok();
    case Kind::kChoice: spec.*p.flag = p.default_value != 0.0; return Status::ok();
  }
  return internal_error(std::string("spec key of an unknown kind: ") + p.key);
}

std::string format_param(const detail::SpecParam& p, const CodecSpec& spec) {
  using Kind = detail::SpecParam::Kind;
  char buf[96];
  switch (p.kind) {
    case Kind::kUnsigned:
      if (p.u32 != nullptr) {
        std::snprintf(buf, sizeof buf, "%s=%u", p.key, spec.*p.u32);
      } else {
        std::snprintf(buf, sizeof buf, "%s=%llu", p.key, static_cast<unsigned long long>(spec.*p.u64));
      }
      return buf;
    case Kind::kReal: std::snprintf(buf, sizeof buf, "%s=%.17g", p.key, spec.*p.real); return buf;
    case Kind::kChoice: return std::string(p.key) + "=" + p.choices[spec.*p.flag ? 1 : 0];
  }
  return p.key;
}

}  // namespace

Result<CodecSpec> CodecSpec::parse(std::string_view text) {
  // Specs are short ("topk:ratio=0.01,ef=1"); the longest canonical one is far below this.
  constexpr size_t kMaxSpecText = 1024;
  if (text.size() > kMaxSpecText) {
    return invalid_argument("codec spec: " + std::to_string(text.size()) + " bytes of text; a spec is at most " +
                            std::to_string(kMaxSpecText));
  }
  for (char ch : text) {
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) {
      return invalid_argument("codec spec: a control or non-ASCII byte (0x" +
                              std::string(1, "0123456789abcdef"[(static_cast<unsigned char>(ch) >> 4) & 15]) +
                              std::string(1, "0123456789abcdef"[static_cast<unsigned char>(ch) & 15]) +
                              ") in the text; spaces around names, keys and values are the only whitespace allowed");
    }
  }
  text = trim(text);
  const size_t colon = text.find(':');
  const std::string_view name = trim(text.substr(0, colon));
  const detail::CodecEntry* entry = detail::find_codec(name);
  if (entry == nullptr) {
    std::string known;
    for (size_t i = 0; i < detail::codec_count(); ++i) {
      known += (i > 0 ? ", " : "") + std::string(detail::codec_at(i)->name);
    }
    return invalid_argument("codec spec: unknown codec '" + std::string(name) + "' (known: " + known + ")");
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
        return invalid_argument("codec spec: '" + std::string(item) + "' in '" + std::string(text) +
                                "' is not key=value");
      }
      const std::string_view key = trim(item.substr(0, eq));
      const std::string_view value = trim(item.substr(eq + 1));
      const detail::SpecParam* param = find_param(*entry, key);
      if (param == nullptr && key != "ef") {
        const std::string keys = key_list(*entry);
        return invalid_argument("codec spec: unknown key '" + std::string(key) + "' for codec " + entry->name +
                                " (keys: " + keys + (keys.empty() ? "" : ",") + "ef)");
      }
      const std::string marker = "," + std::string(key) + ",";
      if (seen.find(marker) != std::string::npos) {
        return invalid_argument("codec spec: key '" + std::string(key) + "' given twice");
      }
      seen += std::string(key) + ",";
      if (param == nullptr) {
        GW_ASSIGN_OR_RETURN(spec.ef, parse_bool(key, value));
      } else {
        GW_RETURN_IF_ERROR(set_param(*param, spec, key, value));
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  for (size_t i = 0; i < entry->n_params; ++i) {
    const detail::SpecParam& p = entry->params[i];
    const std::string marker = "," + std::string(p.key) + ",";
    if (p.has_default && seen.find(marker) == std::string::npos) GW_RETURN_IF_ERROR(set_default(p, spec));
  }
  if (entry->finish != nullptr) GW_RETURN_IF_ERROR(entry->finish(spec));
  return spec;
}

std::string CodecSpec::to_string() const {
  std::string out = codec_name(id);
  auto add = [&out](const std::string& text) {
    out += out.find(':') == std::string::npos ? ":" : ",";
    out += text;
  };
  if (const detail::CodecEntry* entry = detail::find_codec(id)) {
    for (size_t i = 0; i < entry->n_params; ++i) {
      const detail::SpecParam& p = entry->params[i];
      if (p.shown == nullptr || p.shown(*this)) add(format_param(p, *this));
    }
  }
  add(ef ? "ef=1" : "ef=0");
  return out;
}

bool CodecSpec::is_sparse() const {
  const detail::CodecEntry* entry = detail::find_codec(id);
  return entry != nullptr && entry->has(detail::kCapSparse);
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

namespace detail {

Status finish_sparse(CodecSpec& spec) {
  if ((spec.ratio > 0.0) == (spec.k > 0)) {
    return invalid_argument(std::string("codec spec: ") + codec_name(spec.id) + " needs exactly one of ratio= or k=");
  }
  return Status::ok();
}

}  // namespace detail
}  // namespace gw
