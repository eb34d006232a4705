// What the hierarchical all-reduce's multi-process tests (test_hierarchical.cpp on host
// buffers, test_device_hierarchical.cpp on the stand-in accelerator) share: exit codes and
// the failure report of a forked rank, the gradients they reduce, and their checks.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gradwire/communicator.hpp"

namespace gw::hier_test {

constexpr int kOk = 0, kInitFailed = 10, kFailed = 11;

inline int fail(int rank, const std::string& why) {
  std::fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
  return kFailed;
}
#define CALL_OK(rank, expr)                                                                                \
  do {                                                                                                     \
    const Status s_ = (expr);                                                                              \
    if (!s_.is_ok())                                                                                       \
      return fail(rank, std::string(#expr) + " line " + std::to_string(__LINE__) + ": " + s_.to_string()); \
  } while (0)

// Rank r's gradient at step t: small integers, so every sum inside a node is exact whatever
// its order (and fp16 sums too).
inline std::vector<float> grad(size_t n, int r, int t) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>(
        static_cast<int>((i * 7 + static_cast<size_t>(r) * 13 + static_cast<size_t>(t) * 5) % 17) - 8);
  }
  return g;
}

inline std::vector<float> true_sum(size_t n, int np, int t) {
  std::vector<float> s(n, 0.0f);
  for (int r = 0; r < np; ++r) {
    const auto g = grad(n, r, t);
    for (size_t i = 0; i < n; ++i) s[i] += g[i];
  }
  return s;
}

inline double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Every rank's result, compared byte for byte with rank 0's.
inline int same_everywhere(Communicator& c, int rank, const std::vector<float>& v) {
  if (v.empty()) return kOk;
  std::vector<float> all(v.size() * static_cast<size_t>(c.size()));
  CALL_OK(rank, c.allgather(v.data(), all.data(), v.size() * sizeof(float)));
  for (int r = 1; r < c.size(); ++r) {
    if (std::memcmp(all.data(), all.data() + static_cast<size_t>(r) * v.size(), v.size() * sizeof(float)) != 0) {
      return fail(rank, "rank " + std::to_string(r) + "'s result differs from rank 0's");
    }
  }
  return kOk;
}

}  // namespace gw::hier_test
