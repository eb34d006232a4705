// GW_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it when nvidia-smi sees a GPU) turns a GPU
// test's "no usable device" skip into a failure, so a run on a GPU machine cannot pass
// with nothing tested (a driver too old for the runtime, a hidden device, a broken install).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace gw::testing {

inline bool gpu_required() {
  const char* v = std::getenv("GW_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

}  // namespace gw::testing

// In SetUp(): skip with `why`, or fail when a GPU is required.
#define GW_SKIP_OR_FAIL_WITHOUT_GPU(why)                                                 \
  do {                                                                                   \
    if (::gw::testing::gpu_required()) {                                                 \
      FAIL() << "GW_REQUIRE_GPU is set, but there is no usable CUDA device: " << (why); \
    }                                                                                    \
    GTEST_SKIP() << "no usable CUDA device, GPU test not run: " << (why);                \
  } while (0)
