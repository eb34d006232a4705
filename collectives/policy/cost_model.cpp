#include "collectives/policy/cost_model.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace gw::coll {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

Status bad(const std::string& what, int line, const std::string& m) {
  return invalid_argument(what + ":" + std::to_string(line) + ": " + m);
}

// A finite number > 0 and nothing after it.
bool positive(const std::string& v, double* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d) || d <= 0) return false;
  *out = d;
  return true;
}

constexpr size_t kMaxFileBytes = 1 << 20;

}  // namespace

CodecRates CostModel::rates(const std::string& codec_name) const {
  auto it = codecs.find(codec_name);
  return it == codecs.end() ? default_codec : it->second;
}

Result<CostModel> parse_cost_model(const std::string& text, const std::string& what) {
  if (text.size() > kMaxFileBytes) return invalid_argument(what + ": longer than 1 MiB; not a cost model file");
  CostModel m;
  m.source = what;
  std::map<std::string, double*> numbers = {{"latency_s", &m.latency_s},
                                            {"link_bytes_per_s", &m.link_bytes_per_s},
                                            {"message_cpu_s", &m.message_cpu_s},
                                            {"switch_s", &m.switch_s},
                                            {"reduce_bytes_per_s", &m.reduce_bytes_per_s},
                                            {"sparse_sum_bytes_per_s", &m.sparse_sum_bytes_per_s}};
  std::set<std::string> seen;
  std::map<std::string, double> encode, decode;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  bool versioned = false;
  while (std::getline(in, raw)) {
    ++line;
    const std::string l = trim(raw.substr(0, raw.find('#')));
    if (l.empty()) continue;
    const size_t eq = l.find('=');
    if (eq == std::string::npos) return bad(what, line, "'" + l + "' is not 'key = value'");
    const std::string key = trim(l.substr(0, eq));
    const std::string val = trim(l.substr(eq + 1));
    if (!seen.insert(key).second) return bad(what, line, key + " is given twice");
    if (key == "transport") {
      m.transport = val;
      continue;
    }
    if (key == "version") {
      if (val != "1") return bad(what, line, "version " + val + " is not one this build reads (1)");
      versioned = true;
      continue;
    }
    if (key == "cores") {
      double d = 0;
      if (!positive(val, &d) || d != std::floor(d) || d > 1 << 20) {
        return bad(what, line, "cores = '" + val + "' is not a whole number of cores >= 1");
      }
      m.cores = static_cast<int>(d);
      continue;
    }
    double d = 0;
    const bool is_number = positive(val, &d);
    auto it = numbers.find(key);
    const bool enc = key.rfind("encode_bytes_per_s.", 0) == 0;
    const bool dec = key.rfind("decode_bytes_per_s.", 0) == 0;
    if (it == numbers.end() && !enc && !dec) return bad(what, line, "unknown key '" + key + "'");
    if (!is_number) return bad(what, line, key + " = '" + val + "' is not a finite number > 0");
    if (it != numbers.end()) {
      *it->second = d;
    } else {
      const std::string codec = key.substr(key.find('.') + 1);
      if (codec.empty()) return bad(what, line, key + " names no codec");
      (enc ? encode : decode)[codec] = d;
    }
  }
  if (!versioned) return invalid_argument(what + ": no 'version = 1' line; not a cost model file");
  for (const auto& [codec, e] : encode) {
    auto d = decode.find(codec);
    if (d == decode.end()) return invalid_argument(what + ": encode_bytes_per_s." + codec + " without its decode rate");
    m.codecs[codec] = CodecRates{e, d->second};
  }
  for (const auto& [codec, d] : decode) {
    if (encode.count(codec) == 0) {
      return invalid_argument(what + ": decode_bytes_per_s." + codec + " without its encode rate");
    }
  }
  return m;
}

Result<CostModel> load_cost_model(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_argument("cost model file '" + path + "' cannot be read");
  std::string text;
  text.resize(kMaxFileBytes + 1);
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  return parse_cost_model(text, path);
}

Result<CostModel> cost_model_from_env() {
  const char* p = std::getenv("GW_COST_MODEL");
  if (p == nullptr || *p == '\0') return CostModel{};
  auto m = load_cost_model(p);
  if (!m.is_ok()) return Status(m.status().code(), "GW_COST_MODEL: " + m.status().message());
  return m;
}

}  // namespace gw::coll
