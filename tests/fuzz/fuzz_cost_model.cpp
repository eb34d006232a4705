// libFuzzer harness: the cost model file GW_COST_MODEL names (collectives/policy/cost_model.hpp).
// Any text is either refused with GW_ERR_INVALID_ARGUMENT naming the source, or gives a model
// whose every rate and time is finite and positive: the policy divides by them.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "collectives/policy/cost_model.hpp"

namespace {
bool good(double v) { return std::isfinite(v) && v > 0; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = gw::coll::parse_cost_model(text, "fuzz");
  if (!m.is_ok()) {
    if (m.status().code() != gw::Code::kInvalidArgument) std::abort();
    if (m.status().message().rfind("fuzz", 0) != 0) std::abort();
    return 0;
  }
  const gw::coll::CostModel& c = m.value();
  if (!good(c.latency_s) || !good(c.link_bytes_per_s) || !good(c.message_cpu_s) || !good(c.switch_s) ||
      !good(c.reduce_bytes_per_s) || !good(c.sparse_sum_bytes_per_s) || c.cores < 0) {
    std::abort();
  }
  for (const auto& [name, r] : c.codecs) {
    if (name.empty() || !good(r.encode_bytes_per_s) || !good(r.decode_bytes_per_s)) std::abort();
  }
  return 0;
}
