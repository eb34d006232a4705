// GW_CODEC replaces the codec of calls that asked for compression, and never makes a dense
// call lossy (a loss or a batch-norm statistic all-reduced without a codec stays exact).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "gradwire/gradwire.h"

namespace {

TEST(CodecOverride, AppliesOnlyToCompressedCalls) {
  ASSERT_EQ(setenv("GW_CODEC", "topk:ratio=0.01", 1), 0);
  gw_unique_id_t id;
  ASSERT_EQ(gw_get_unique_id(&id), GW_SUCCESS) << gw_get_last_error();
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  cfg.dense_threshold_bytes = 0;
  gw_comm_t comm = nullptr;
  ASSERT_EQ(gw_comm_init_rank(&comm, 1, id, 0, &cfg), GW_SUCCESS) << gw_get_last_error();
  unsetenv("GW_CODEC");

  const size_t n = 10000;
  std::vector<float> x(n), out(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.25f + static_cast<float>(i % 13);
  // Dense (no codec, and codec "none"): exact.
  ASSERT_EQ(gw_allreduce(comm, x.data(), out.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_SUCCESS);
  EXPECT_EQ(out, x);
  gw_codec_t none = nullptr, qsgd = nullptr;
  ASSERT_EQ(gw_codec_create("none", &none), GW_SUCCESS);
  ASSERT_EQ(gw_allreduce(comm, x.data(), out.data(), n, GW_FLOAT32, GW_SUM, none, nullptr), GW_SUCCESS);
  EXPECT_EQ(out, x);
  // A compressed call: its codec (qsgd, which keeps every element nonzero here) is replaced
  // by GW_CODEC's top-1%, which keeps 100 of them.
  ASSERT_EQ(gw_codec_create("qsgd:bits=8", &qsgd), GW_SUCCESS);
  ASSERT_EQ(gw_allreduce_ex(comm, x.data(), out.data(), n, GW_FLOAT32, GW_SUM, qsgd, nullptr, GW_ALGO_SCATTER_REDUCE),
            GW_SUCCESS)
      << gw_get_last_error();
  size_t nonzero = 0;
  for (float v : out) nonzero += v != 0.0f;
  EXPECT_EQ(nonzero, 100u);
  // Other dtypes and ops are never compressed.
  std::vector<int64_t> ints(n, 3), iout(n);
  ASSERT_EQ(gw_allreduce(comm, ints.data(), iout.data(), n, GW_INT64, GW_MAX, nullptr, nullptr), GW_SUCCESS);
  EXPECT_EQ(iout, ints);
  gw_codec_destroy(none);
  gw_codec_destroy(qsgd);
  gw_comm_destroy(comm);
}

}  // namespace
