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

  // A communicator sends device buffers down the device path: here, with no usable CUDA
  // runtime (or a build without CUDA), that is refused with the reason before anything runs.
  gw_unique_id_t id;
  ASSERT_EQ(gw_get_unique_id(&id), GW_SUCCESS);
  gw_comm_t comm = nullptr;
  ASSERT_EQ(gw_comm_init_rank(&comm, 1, id, 0, nullptr), GW_SUCCESS) << gw_get_last_error();
  auto refused_as_no_device = [](gw_result_t r) {
    const std::string why = gw_get_last_error();
    EXPECT_TRUE(r == GW_ERR_CUDA || r == GW_ERR_UNSUPPORTED) << r << ": " << why;
    EXPECT_TRUE(why.find("cuda") != std::string::npos || why.find("CUDA") != std::string::npos) << why;
  };
  refused_as_no_device(gw_allreduce(comm, y.data(), y.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr));
  refused_as_no_device(gw_broadcast(comm, y.data(), n * sizeof(float), 0));
  refused_as_no_device(gw_allgather(comm, y.data(), y.data(), 4));
  // One device buffer and one host buffer: the caller's mistake, named.
  std::vector<float> h(n, 1.0f);
  EXPECT_EQ(gw_allreduce(comm, h.data(), y.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gw_get_last_error()).find("recvbuf is CUDA device memory but sendbuf is host memory"),
            std::string::npos)
      << gw_get_last_error();
  // The message collectives take host memory only.
  size_t lengths[1];
  EXPECT_EQ(gw_sparse_allgather(comm, y.data(), 8, h.data(), 4000, lengths), GW_ERR_UNSUPPORTED);
  // Refusals are argument checks: the communicator still works.
  EXPECT_EQ(gw_allreduce(comm, h.data(), h.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_SUCCESS);

  // Managed memory is readable by the CPU: accepted.
  mark(y.data(), n * sizeof(float), 1);
  EXPECT_EQ(gw_decode(msg.data(), len, y.data(), n, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_SUCCESS);
  EXPECT_EQ(gw_allreduce(comm, y.data(), y.data(), n, GW_FLOAT32, GW_SUM, nullptr, nullptr), GW_SUCCESS);
  EXPECT_EQ(gw_comm_destroy(comm), GW_SUCCESS);
  EXPECT_EQ(gw_codec_destroy(codec), GW_SUCCESS);
}

}  // namespace
