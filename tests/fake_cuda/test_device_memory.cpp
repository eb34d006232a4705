// The host-side calls refuse CUDA device memory with a message instead of reading it with
// the CPU. A stand-in driver (fake_libcuda.c, loaded under the soname libcuda.so.1) marks a
// host buffer as device memory, so this runs without a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gradwire/gradwire.h"

namespace {

using MarkFn = void (*)(const void*, size_t, unsigned);

MarkFn load_fake_driver() {
  void* lib = dlopen(GW_FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL);
  EXPECT_NE(lib, nullptr) << dlerror();
  return lib != nullptr ? reinterpret_cast<MarkFn>(dlsym(lib, "fake_cuda_mark_device")) : nullptr;
}

TEST(DeviceMemory, HostCallsRefuseDeviceBuffersAndAcceptManagedOnes) {
  gw_codec_t codec = nullptr;
  ASSERT_EQ(gw_codec_create("qsgd:bits=8", &codec), GW_SUCCESS);
  const size_t n = 1000;
  size_t cap = 0;
  ASSERT_EQ(gw_codec_max_encoded_bytes(codec, n, GW_FLOAT32, &cap), GW_SUCCESS);
  std::vector<float> x(n, 0.5f), y(n, 0.0f);
  std::vector<uint8_t> msg(cap);
  size_t len = 0;
  // No driver loaded yet: nothing is device memory, and nothing loads one.
  ASSERT_EQ(gw_encode(codec, x.data(), n, GW_FLOAT32, 0, 0, nullptr, msg.data(), cap, &len), GW_SUCCESS);

  const MarkFn mark = load_fake_driver();
  ASSERT_NE(mark, nullptr);
  mark(x.data(), n * sizeof(float), 0);
  size_t w = 7;
  EXPECT_EQ(gw_encode(codec, x.data(), n, GW_FLOAT32, 0, 0, nullptr, msg.data(), cap, &w), GW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gw_get_last_error()).find("src is CUDA device memory"), std::string::npos)
      << gw_get_last_error();
  EXPECT_EQ(w, 0u);
  mark(y.data(), n * sizeof(float), 0);
  EXPECT_EQ(gw_decode(msg.data(), len, y.data(), n, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gw_get_last_error()).find("dst is CUDA device memory"), std::string::npos);
  for (float v : y) ASSERT_EQ(v, 0.0f);  // untouched

  // A one-rank communicator refuses a device buffer before anything runs.
  gw_unique_id_t id;
  ASSERT_EQ(gw_get_unique_id(&id), GW_SUCCESS);
  gw_comm_t comm = nullptr;
  ASSERT_EQ(gw_comm_init_rank(&comm, 1, id, 0, nullptr), GW_SUCCESS) << gw_get_last_error();
  EXPECT_EQ(gw_allreduce(comm, y.data(), y.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(gw_get_last_error()).find("CUDA device memory"), std::string::npos);
  EXPECT_EQ(gw_broadcast(comm, y.data(), n * sizeof(float), 0), GW_ERR_UNSUPPORTED);
  // The refusal is an argument check: the communicator still works.
  EXPECT_EQ(gw_allreduce(comm, x.data(), x.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_SUCCESS);

  // Managed memory is readable by the CPU: accepted.
  mark(y.data(), n * sizeof(float), 1);
  EXPECT_EQ(gw_decode(msg.data(), len, y.data(), n, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_SUCCESS);
  EXPECT_EQ(gw_allreduce(comm, y.data(), y.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_SUCCESS);
  EXPECT_EQ(gw_comm_destroy(comm), GW_SUCCESS);
  EXPECT_EQ(gw_codec_destroy(codec), GW_SUCCESS);
}

}  // namespace
