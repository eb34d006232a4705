#include <cstring>

#include "collectives/algorithms/host/algorithms.hpp"
#include "compressors/element_io.hpp"

namespace gw::coll {

float* prepare_accumulator(Context& c, const float* send, size_t n, ErrorFeedback* ef, int slot) {
  ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");  // part of encoding
  if (ef != nullptr) {
    float* acc = ef->residual();
    if (send != acc) detail::add_into(acc, send, n);
    return acc;
  }
  float* acc = c.scratch.bytes.get<float>(slot, n);
  if (n > 0) std::memcpy(acc, send, n * sizeof(float));
  return acc;
}

}  // namespace gw::coll
