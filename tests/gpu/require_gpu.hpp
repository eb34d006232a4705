// GW_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it when nvidia-smi sees a GPU) turns a GPU
// test's "no usable device" skip into a failure, so a run on a GPU machine cannot pass
// with nothing tested (a driver too old for the runtime, a hidden device, a broken install).
// GW_REQUIRE_NCCL=1 does the same for a test that finds NCCL unavailable.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gw::testing {

// Set, and neither empty nor "0".
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

inline bool gpu_required() { return env_flag("GW_REQUIRE_GPU"); }
inline bool nccl_required() { return env_flag("GW_REQUIRE_NCCL"); }

}  // namespace gw::testing

// In SetUp(): skip with `why`, or fail when a GPU is required.
#define GW_SKIP_OR_FAIL_WITHOUT_GPU(why)                                                \
  do {                                                                                  \
    if (::gw::testing::gpu_required()) {                                                \
      FAIL() << "GW_REQUIRE_GPU is set, but there is no usable CUDA device: " << (why); \
    }                                                                                   \
    GTEST_SKIP() << "no usable CUDA device, GPU test not run: " << (why);               \
  } while (0)

// NCCL could not be used (`why`): skip, or fail when NCCL is required.
#define GW_SKIP_OR_FAIL_WITHOUT_NCCL(why)                                       \
  do {                                                                          \
    if (::gw::testing::nccl_required()) {                                       \
      FAIL() << "GW_REQUIRE_NCCL is set, but NCCL is not available: " << (why); \
    }                                                                           \
    GTEST_SKIP() << "NCCL not available, NCCL test not run: " << (why);         \
  } while (0)

// A test that runs only when `flag` is set (a long one): otherwise skipped, whatever
// GW_REQUIRE_GPU says, with a line of its own that a runner counting skips can tell from a
// missing device: "[ OPT-IN   ] <test> not run: set <flag>=1 (<what>)".
#define GW_SKIP_UNLESS_OPTED_IN(flag, what)                                                                           \
  do {                                                                                                                \
    if (!::gw::testing::env_flag(flag)) {                                                                             \
      const ::testing::TestInfo* gw_info_ = ::testing::UnitTest::GetInstance()->current_test_info();                  \
      std::printf("[ OPT-IN   ] %s.%s not run: set %s=1 (%s)\n", gw_info_->test_suite_name(), gw_info_->name(), flag, \
                  what);                                                                                              \
      GTEST_SKIP() << "opt-in test, not run: set " << (flag) << "=1 (" << (what) << ")";                              \
    }                                                                                                                 \
  } while (0)
