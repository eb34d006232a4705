// Bad configuration is refused, not guessed: each bad field of gw_config_t, GW_TIMEOUT_S and
// GW_CHUNK_BYTES, and each bad codec spec gets GW_ERR_INVALID_ARGUMENT with a message naming
// the field, before anything is set up; spaces around a spec's parts are the one documented
// normalisation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

#include "gradwire/gradwire.h"

namespace {

// gw_comm_init_rank of a one-rank job with cfg (as edited by edit): its result and message.
std::pair<gw_result_t, std::string> init_with(const std::function<void(gw_config_t&)>& edit) {
  gw_unique_id_t id;
  EXPECT_EQ(gw_get_unique_id(&id), GW_SUCCESS) << gw_get_last_error();
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  edit(cfg);
  gw_comm_t comm = nullptr;
  const gw_result_t r = gw_comm_init_rank(&comm, 1, id, 0, &cfg);
  const std::string msg = gw_get_last_error();
  if (r == GW_SUCCESS) gw_comm_destroy(comm);
  return {r, msg};
}

void expect_refused(const std::function<void(gw_config_t&)>& edit, const std::string& names) {
  const auto [r, msg] = init_with(edit);
  EXPECT_EQ(r, GW_ERR_INVALID_ARGUMENT) << names << ": " << msg;
  EXPECT_NE(msg.find(names), std::string::npos) << msg;
}

TEST(ConfigRefusal, EachBadFieldIsNamed) {
  expect_refused([](gw_config_t& c) { c.timeout_s = std::nan(""); }, "config->timeout_s nan");
  expect_refused([](gw_config_t& c) { c.timeout_s = -1; }, "config->timeout_s -1");
  expect_refused([](gw_config_t& c) { c.timeout_s = std::numeric_limits<double>::infinity(); },
                 "config->timeout_s inf");
  expect_refused([](gw_config_t& c) { c.timeout_s = 1e-9; }, "below a millisecond");
  expect_refused([](gw_config_t& c) { c.version = 0; }, "config->version 0");
  expect_refused([](gw_config_t& c) { c.version = GW_VERSION_CODE + 1; }, "is not a version this library knows");
  expect_refused([](gw_config_t& c) { c.chunk_bytes = SIZE_MAX; }, "config->chunk_bytes " + std::to_string(SIZE_MAX));
  expect_refused([](gw_config_t& c) { c.chunk_bytes = 100; }, "config->chunk_bytes 100");
  expect_refused([](gw_config_t& c) { c.dense_threshold_bytes = -2; }, "config->dense_threshold_bytes -2");
  expect_refused([](gw_config_t& c) { c.magic = 1; }, "bad magic");
  expect_refused([](gw_config_t& c) { c.size = 3; }, "config->size 3");
}

TEST(ConfigRefusal, GoodConfigsStillWork) {
  for (const auto& edit : std::vector<std::function<void(gw_config_t&)>>{
           [](gw_config_t&) {}, [](gw_config_t& c) { c.timeout_s = 2.5; }, [](gw_config_t& c) { c.chunk_bytes = 4096; },
           [](gw_config_t& c) { c.chunk_bytes = size_t{1} << 30; },
           [](gw_config_t& c) { c.dense_threshold_bytes = 0; }}) {
    const auto [r, msg] = init_with(edit);
    EXPECT_EQ(r, GW_SUCCESS) << msg;
  }
}

TEST(ConfigRefusal, BadEnvironmentIsNamed) {
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, const char*>>{{"GW_TIMEOUT_S", "nan"},
                                                        {"GW_TIMEOUT_S", "-5"},
                                                        {"GW_CHUNK_BYTES", "18446744073709551615"},
                                                        {"GW_CHUNK_BYTES", "2e9"},
                                                        {"GW_DENSE_THRESHOLD", "-1"}}) {
    ASSERT_EQ(setenv(name, value, 1), 0);
    // Refused at the first call that reads the environment: making the job's id, here.
    gw_unique_id_t id;
    const gw_result_t r = gw_get_unique_id(&id);
    const std::string msg = gw_get_last_error();
    EXPECT_EQ(r, GW_ERR_INVALID_ARGUMENT) << name << "=" << value << ": " << msg;
    EXPECT_NE(msg.find(std::string(name) + "=" + value), std::string::npos) << msg;
    unsetenv(name);
  }
}

TEST(ConfigRefusal, BadCodecSpecsAreNamed) {
  const std::pair<std::string, std::string> cases[] = {
      {"qsgd:bits=010", "bits=010 has a leading zero"},
      {"qsgd:bits=04", "bits=04 has a leading zero"},
      {"topk:k=0x10", "k=0x10"},
      {"topk:ratio=0x1p-3", "ratio=0x1p-3"},
      {"topk:ratio=1e-300", "ratio=1e-300"},
      {"topk:ratio=inf", "ratio=inf"},
      {"topk:ratio=.", "ratio=."},
      {"qsgd:\tbits=4", "control or non-ASCII byte (0x09)"},
      {"qsgd:bits=4\n", "control or non-ASCII byte (0x0a)"},
      {"qsgd:bits=\xc3\xa9", "non-ASCII byte (0xc3)"},
      {"qsgd:bits=4" + std::string(100 << 10, ' '), "102411 bytes of text"},
      {"topk:ratio=0.01,seed=" + std::string(100 << 10, '1'), "bytes of text"},
  };
  for (const auto& [spec, want] : cases) {
    gw_codec_t c = nullptr;
    EXPECT_EQ(gw_codec_create(spec.c_str(), &c), GW_ERR_INVALID_ARGUMENT) << spec.substr(0, 40);
    const std::string msg = gw_get_last_error();
    EXPECT_NE(msg.find(want), std::string::npos) << spec.substr(0, 40) << ": " << msg;
    EXPECT_EQ(c, nullptr);
  }
}

TEST(ConfigRefusal, SpacesAroundSpecPartsAreTheOneNormalisation) {
  gw_codec_t a = nullptr, b = nullptr;
  ASSERT_EQ(gw_codec_create(" qsgd : bits = 4 , ef = 1 ", &a), GW_SUCCESS) << gw_get_last_error();
  ASSERT_EQ(gw_codec_create("qsgd:bits=4,ef=1", &b), GW_SUCCESS);
  char sa[256], sb[256];
  ASSERT_EQ(gw_codec_spec(a, sa, sizeof sa), GW_SUCCESS);
  ASSERT_EQ(gw_codec_spec(b, sb, sizeof sb), GW_SUCCESS);
  EXPECT_STREQ(sa, sb);
  gw_codec_destroy(a);
  gw_codec_destroy(b);
  // Not inside a value: "4 0" is not 40.
  gw_codec_t c = nullptr;
  EXPECT_EQ(gw_codec_create("topk:k=4 0", &c), GW_ERR_INVALID_ARGUMENT);
}

}  // namespace
