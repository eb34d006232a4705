// Saving and restoring an error-feedback state through the C ABI (a checkpoint and a resumed
// job): the residual, the owner-side residual and the step survive; hostile or mismatched
// blobs are refused without touching the state.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gradwire/gradwire.h"

namespace {

struct Ef {
  gw_ef_state_t h = nullptr;
  explicit Ef(size_t n) { EXPECT_EQ(gw_ef_state_create(n, &h), GW_SUCCESS); }
  ~Ef() { gw_ef_state_destroy(h); }
  std::vector<float> residual() const {
    size_t n = 0;
    gw_ef_state_count(h, &n);
    std::vector<float> r(n);
    EXPECT_EQ(gw_ef_state_get_residual(h, r.data(), n), GW_SUCCESS);
    return r;
  }
  uint64_t step() const {
    uint64_t s = 0;
    gw_ef_state_step(h, &s);
    return s;
  }
  std::vector<unsigned char> save() const {
    size_t need = 0;
    EXPECT_EQ(gw_ef_state_save(h, nullptr, 0, &need), GW_SUCCESS);
    std::vector<unsigned char> blob(need + 1);
    size_t written = 0;
    // One byte in: any alignment of the caller's buffer must work.
    EXPECT_EQ(gw_ef_state_save(h, blob.data() + 1, need, &written), GW_SUCCESS) << gw_get_last_error();
    EXPECT_EQ(written, need);
    return std::vector<unsigned char>(blob.begin() + 1, blob.end());
  }
};

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7919) % 1013) - 300.0f;
  return v;
}

TEST(EfCheckpoint, SetResidualAndStep) {
  Ef ef(100);
  const std::vector<float> r = ramp(100, 0.5f);
  ASSERT_EQ(gw_ef_state_set_residual(ef.h, r.data(), r.size()), GW_SUCCESS);
  ASSERT_EQ(gw_ef_state_set_step(ef.h, 42), GW_SUCCESS);
  EXPECT_EQ(ef.residual(), r);
  EXPECT_EQ(ef.step(), 42u);
  EXPECT_EQ(gw_ef_state_set_residual(ef.h, r.data(), 99), GW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gw_get_last_error(), "99"), nullptr) << gw_get_last_error();
  EXPECT_EQ(gw_ef_state_set_residual(ef.h, nullptr, 100), GW_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gw_ef_state_set_residual(nullptr, r.data(), 100), GW_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ef.residual(), r);
}

TEST(EfCheckpoint, SaveLoadRoundTrip) {
  Ef a(1001), b(1001);
  const std::vector<float> r = ramp(1001, 0.25f);
  ASSERT_EQ(gw_ef_state_set_residual(a.h, r.data(), r.size()), GW_SUCCESS);
  ASSERT_EQ(gw_ef_state_set_step(a.h, 7), GW_SUCCESS);
  const std::vector<unsigned char> blob = a.save();
  ASSERT_EQ(gw_ef_state_load(b.h, blob.data(), blob.size()), GW_SUCCESS) << gw_get_last_error();
  EXPECT_EQ(b.residual(), r);
  EXPECT_EQ(b.step(), 7u);
}

TEST(EfCheckpoint, EmptyState) {
  Ef a(0), b(0);
  const std::vector<unsigned char> blob = a.save();
  EXPECT_EQ(gw_ef_state_load(b.h, blob.data(), blob.size()), GW_SUCCESS) << gw_get_last_error();
}

TEST(EfCheckpoint, RefusesBadBlobsWithoutTouchingTheState) {
  Ef a(64), b(64), small(63);
  const std::vector<float> ra = ramp(64, 1.0f), rb = ramp(64, -2.0f);
  gw_ef_state_set_residual(a.h, ra.data(), 64);
  gw_ef_state_set_residual(b.h, rb.data(), 64);
  gw_ef_state_set_step(b.h, 3);
  const std::vector<unsigned char> blob = a.save();

  EXPECT_EQ(gw_ef_state_load(small.h, blob.data(), blob.size()), GW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gw_get_last_error(), "64"), nullptr) << gw_get_last_error();
  for (size_t len : {size_t{0}, size_t{31}, size_t{32}, blob.size() - 1}) {
    EXPECT_EQ(gw_ef_state_load(b.h, blob.data(), len), GW_ERR_INVALID_MESSAGE) << len;
  }
  std::vector<unsigned char> longer = blob;
  longer.push_back(0);
  EXPECT_EQ(gw_ef_state_load(b.h, longer.data(), longer.size()), GW_ERR_INVALID_MESSAGE);
  std::vector<unsigned char> bad = blob;
  bad[0] = 'X';
  EXPECT_EQ(gw_ef_state_load(b.h, bad.data(), bad.size()), GW_ERR_INVALID_MESSAGE);
  bad = blob;
  bad[4] = 9;  // version
  EXPECT_EQ(gw_ef_state_load(b.h, bad.data(), bad.size()), GW_ERR_INVALID_MESSAGE);
  bad = blob;
  std::memset(&bad[24], 0xff, 8);  // owner count that overflows the size computation
  EXPECT_EQ(gw_ef_state_load(b.h, bad.data(), bad.size()), GW_ERR_INVALID_MESSAGE);
  bad = blob;
  std::memset(&bad[8], 0xff, 8);  // count near 2^64
  EXPECT_EQ(gw_ef_state_load(b.h, bad.data(), bad.size()), GW_ERR_INVALID_MESSAGE);
  EXPECT_EQ(gw_ef_state_load(b.h, nullptr, 10), GW_ERR_INVALID_ARGUMENT);

  EXPECT_EQ(b.residual(), rb);
  EXPECT_EQ(b.step(), 3u);
  size_t need = 0;
  EXPECT_EQ(gw_ef_state_save(a.h, nullptr, 0, nullptr), GW_ERR_INVALID_ARGUMENT);
  std::vector<unsigned char> tiny(10);
  EXPECT_EQ(gw_ef_state_save(a.h, tiny.data(), tiny.size(), &need), GW_ERR_BUFFER_TOO_SMALL);
}

// A compressed all-reduce on one rank fills both residuals; a state restored from its blob
// goes on exactly as the original.
TEST(EfCheckpoint, ResumedStateContinuesIdentically) {
  gw_unique_id_t id;
  ASSERT_EQ(gw_get_unique_id(&id), GW_SUCCESS) << gw_get_last_error();
  gw_comm_t comm = nullptr;
  ASSERT_EQ(gw_comm_init_rank(&comm, 1, id, 0, nullptr), GW_SUCCESS) << gw_get_last_error();
  gw_codec_t codec = nullptr;
  ASSERT_EQ(gw_codec_create("topk:ratio=0.05", &codec), GW_SUCCESS);
  const size_t n = 5000;
  Ef a(n), b(n);
  std::vector<float> out(n);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = ramp(n, 0.01f * static_cast<float>(step + 1));
    ASSERT_EQ(gw_allreduce_ex(comm, g.data(), out.data(), n, GW_FLOAT32, GW_SUM, codec, a.h, GW_ALGO_SCATTER_REDUCE),
              GW_SUCCESS)
        << gw_get_last_error();
  }
  const std::vector<unsigned char> blob = a.save();
  ASSERT_GT(blob.size(), 32 + 4 * n) << "the owner-side residual is in the blob";
  ASSERT_EQ(gw_ef_state_load(b.h, blob.data(), blob.size()), GW_SUCCESS) << gw_get_last_error();
  std::vector<float> out_a(n), out_b(n);
  for (int step = 3; step < 6; ++step) {
    const std::vector<float> g = ramp(n, 0.01f * static_cast<float>(step + 1));
    ASSERT_EQ(gw_allreduce_ex(comm, g.data(), out_a.data(), n, GW_FLOAT32, GW_SUM, codec, a.h, GW_ALGO_SCATTER_REDUCE),
              GW_SUCCESS);
    ASSERT_EQ(gw_allreduce_ex(comm, g.data(), out_b.data(), n, GW_FLOAT32, GW_SUM, codec, b.h, GW_ALGO_SCATTER_REDUCE),
              GW_SUCCESS);
    ASSERT_EQ(0, std::memcmp(out_a.data(), out_b.data(), n * sizeof(float))) << "step " << step;
  }
  EXPECT_EQ(a.residual(), b.residual());
  EXPECT_EQ(a.step(), b.step());
  gw_codec_destroy(codec);
  gw_comm_destroy(comm);
}

}  // namespace
