#include <cstring>

#include "collectives/algorithms.hpp"

namespace gw::coll {

float* prepare_accumulator(Context& c, const float* send, size_t n, ErrorFeedback* ef, int slot) {
  ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode");  // part of encoding
  if (ef != nullptr) {
    float* acc = ef->residual();
    for (size_t i = 0; i < n; ++i) acc[i] += send[i];
    return acc;
  }
  float* acc = c.scratch.bytes.get<float>(slot, n);
  if (n > 0) std::memcpy(acc, send, n * sizeof(float));
  return acc;
}

}  // namespace gw::coll
