#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "collectives/algorithms/algorithm_table.hpp"
#include "gradwire/communicator.hpp"

namespace gw {
namespace {

Result<double> env_number(const char* name, double lo, double hi, bool& present) {
  const char* v = std::getenv(name);
  present = v != nullptr && *v != '\0';
  if (!present) return 0.0;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v, &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(d) || d < lo || d > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    return invalid_argument(std::string(name) + "=" + v + " is not a number in " + range);
  }
  return d;
}

}  // namespace

Result<CommConfig> CommConfig::from_env() {
  CommConfig c;
  bool set = false;
  GW_ASSIGN_OR_RETURN(double timeout, env_number("GW_TIMEOUT_S", 0.001, 1e7, set));
  if (set) c.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000.0));
  GW_ASSIGN_OR_RETURN(double chunk, env_number("GW_CHUNK_BYTES", static_cast<double>(kMinChunkBytes),
                                               static_cast<double>(kMaxChunkBytes), set));
  if (set) c.chunk_bytes = static_cast<size_t>(chunk);
  GW_ASSIGN_OR_RETURN(double dense, env_number("GW_DENSE_THRESHOLD", 0, 1e15, set));
  if (set) c.dense_threshold_bytes = static_cast<size_t>(dense);
  if (const char* a = std::getenv("GW_ALGO"); a != nullptr && *a != '\0') {
    auto algo = parse_algo(a);
    if (!algo.is_ok()) return algo.status().with_context("GW_ALGO");
    c.algo = *algo;
  }
  if (const char* a = std::getenv("GW_INTER_ALGO"); a != nullptr && *a != '\0') {
    auto algo = parse_algo(a);
    if (!algo.is_ok()) return algo.status().with_context("GW_INTER_ALGO");
    if (const coll::AlgorithmRow* row = coll::find_algorithm(*algo); row != nullptr && row->composite) {
      return invalid_argument(std::string("GW_INTER_ALGO=") + row->name +
                              ": name a flat algorithm for the inter-node leg");
    }
    c.inter_algo = *algo;
  }
  if (const char* s = std::getenv("GW_CODEC"); s != nullptr && *s != '\0') {
    auto spec = CodecSpec::parse(s);
    if (!spec.is_ok()) return spec.status().with_context("GW_CODEC");
    c.codec_override = s;
  }
  return c;
}

}  // namespace gw
