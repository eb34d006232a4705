// NCCL loaded at run time: the library search, unique ids, and a one-rank communicator.
// Without a GPU, communicator creation must fail cleanly and quickly; with one, a one-rank
// communicator must run real collectives on device memory. NCCL is found as the library
// finds it (GW_NCCL_LIBRARY unset): on the loader's path (LD_LIBRARY_PATH, e.g. PyTorch's
// nvidia/nccl/lib, or the system's), else in the toolkit found at build time. Where it does
// not load, the tests that need it skip, or fail under GW_REQUIRE_NCCL=1.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/gpu/require_gpu.hpp"
#include "transport/nccl/nccl_comm.hpp"
#include "transport/nccl/nccl_library.hpp"

namespace gw::nccl {
namespace {

using std::chrono::seconds;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(NcclLibrary, VersionString) {
  EXPECT_EQ(version_string(22809), "2.28.9");
  EXPECT_EQ(version_string(21400), "2.14.0");
  EXPECT_EQ(version_string(2708), "2.7.8");
}

// Skips the test, or fails it under GW_REQUIRE_NCCL=1, when NCCL does not load.
#define GW_NEEDS_NCCL()                                                               \
  do {                                                                                \
    const auto gw_lib_ = load_library();                                              \
    if (!gw_lib_.is_ok()) GW_SKIP_OR_FAIL_WITHOUT_NCCL(gw_lib_.status().to_string()); \
  } while (0)

TEST(NcclLibrary, LoadsWithoutEnvironmentAndIsRecentEnough) {
  ASSERT_EQ(std::getenv("GW_NCCL_LIBRARY"), nullptr) << "run this test without GW_NCCL_LIBRARY";
  auto lib = load_library();
  if (!lib.is_ok()) GW_SKIP_OR_FAIL_WITHOUT_NCCL(lib.status().to_string());
  EXPECT_GE((*lib)->version, kMinVersion) << version_string((*lib)->version);
  EXPECT_FALSE((*lib)->path.empty());
  auto again = load_library();
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *lib) << "loaded once per process";
}

TEST(NcclLibrary, UniqueIdsAreFreshAndNotZero) {
  GW_NEEDS_NCCL();
  uint8_t a[kUniqueIdBytes];
  uint8_t b[kUniqueIdBytes];
  ASSERT_TRUE(get_unique_id(a).is_ok());
  ASSERT_TRUE(get_unique_id(b).is_ok());
  EXPECT_TRUE(std::any_of(a, a + kUniqueIdBytes, [](uint8_t x) { return x != 0; }));
  EXPECT_FALSE(std::equal(a, a + kUniqueIdBytes, b));
}

// The outcome of load_library is cached per process, so the environment tests run in a
// fresh process: "threadsafe" death tests re-execute this binary for the child.
class NcclLibraryEnv : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// In the child: sets GW_NCCL_LIBRARY, loads, prints the outcome to stderr, exits 0 if the
// outcome is the expected one: loaded from exactly `value`, or refused with kUnsupported.
[[noreturn]] void load_with_env(const std::string& value, bool expect_ok) {
  setenv("GW_NCCL_LIBRARY", value.c_str(), 1);
  auto lib = load_library();
  if (lib.is_ok()) {
    std::fprintf(stderr, "loaded %s version %d\n", (*lib)->path.c_str(), (*lib)->version);
  } else {
    std::fprintf(stderr, "failed %s\n", lib.status().to_string().c_str());
  }
  const bool as_expected =
      expect_ok ? lib.is_ok() && (*lib)->path == value : !lib.is_ok() && lib.status().code() == Code::kUnsupported;
  std::exit(as_expected ? 0 : 1);
}

// The file the loader finds for NCCL, looked up without load_library (whose outcome is cached).
std::string nccl_file() {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) h = dlopen(GW_NCCL_FALLBACK_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  link_map* map = nullptr;
  if (h == nullptr || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return "";
  return map->l_name;
}

TEST_F(NcclLibraryEnv, MissingPathIsUnsupportedAndNamed) {
  EXPECT_EXIT(load_with_env("/nonexistent/libnccl.so.2", false), ::testing::ExitedWithCode(0),
              "failed unsupported: .*GW_NCCL_LIBRARY.*/nonexistent/libnccl\\.so\\.2: ");
}

TEST_F(NcclLibraryEnv, NotNcclIsUnsupported) {
  EXPECT_EXIT(load_with_env("libm.so.6", false), ::testing::ExitedWithCode(0),
              "failed unsupported: .*libm\\.so\\.6: missing symbol ncclGetVersion");
}

// A library with every symbol that says it is NCCL 2.13.5: $GW_FAKE_OLD_NCCL, else the one
// next to this executable (a copied test bundle), else the one in the build tree.
std::string fake_old_nccl() {
  if (const char* env = std::getenv("GW_FAKE_OLD_NCCL")) return env;
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    std::string dir(exe, static_cast<size_t>(len));
    dir.resize(dir.rfind('/') + 1);
    const std::string beside = dir + GW_FAKE_OLD_NCCL_NAME;
    if (access(beside.c_str(), R_OK) == 0) return beside;
  }
  return GW_FAKE_OLD_NCCL;
}

TEST_F(NcclLibraryEnv, TooOldIsUnsupportedWithItsVersion) {
  const std::string fake = fake_old_nccl();
  ASSERT_EQ(access(fake.c_str(), R_OK), 0) << fake << " is missing: set GW_FAKE_OLD_NCCL to " GW_FAKE_OLD_NCCL_NAME;
  EXPECT_EXIT(load_with_env(fake, false), ::testing::ExitedWithCode(0),
              "failed unsupported: .*NCCL 2\\.13\\.5 is too old: gradwire needs 2\\.14\\.0");
}

TEST_F(NcclLibraryEnv, ExplicitPathIsUsed) {
  const std::string path = nccl_file();
  if (path.empty())
    GW_SKIP_OR_FAIL_WITHOUT_NCCL("libnccl.so.2 is not on the loader's path nor in " GW_NCCL_FALLBACK_DIR);
  EXPECT_EXIT(load_with_env(path, true), ::testing::ExitedWithCode(0), "loaded .*libnccl");
}

TEST(NcclComm, RejectsBadArguments) {
  uint8_t id[kUniqueIdBytes] = {};
  const auto deadline = Clock::now() + seconds(5);
  EXPECT_EQ(Comm::create(id, 0, 0, deadline, nullptr).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Comm::create(id, 2, 2, deadline, nullptr).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Comm::create(nullptr, 1, 0, deadline, nullptr).status().code(), Code::kInvalidArgument);
}

// No GPU: NCCL init must fail with a CUDA or remote error naming NCCL, not hang or crash.
void create_fails_cleanly_without_gpu() {
  uint8_t id[kUniqueIdBytes];
  ASSERT_TRUE(get_unique_id(id).is_ok());
  const auto start = Clock::now();
  auto comm = Comm::create(id, 1, 0, start + seconds(30), [] {});
  const auto took = Clock::now() - start;
  ASSERT_FALSE(comm.is_ok());
  const Status& s = comm.status();
  EXPECT_TRUE(s.code() == Code::kCuda || s.code() == Code::kRemote) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "NCCL")) << s.to_string();
  EXPECT_LT(took, seconds(5)) << s.to_string();
  std::printf("without a GPU, Comm::create says: %s\n", s.to_string().c_str());
}

// GPU: a one-rank communicator runs every collective on device memory.
void single_rank_collectives_on_gpu() {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  uint8_t id[kUniqueIdBytes];
  ASSERT_TRUE(get_unique_id(id).is_ok());
  int polls = 0;
  const auto progress = [&polls] { ++polls; };
  auto made = Comm::create(id, 1, 0, Clock::now() + seconds(60), progress);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  Comm& comm = **made;
  EXPECT_GE(comm.version(), kMinVersion);

  constexpr size_t n = 1000;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = 0.5f * static_cast<float>(i) - 100.0f;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  float* send = nullptr;
  float* recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(send, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv, 0, n * sizeof(float)), cudaSuccess);

  const auto deadline = Clock::now() + seconds(60);
  Status s = comm.allreduce(send, recv, n, DType::kFloat32, ReduceOp::kSum, stream);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  s = comm.wait(stream, deadline, progress);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::vector<float> out(n, -1.0f);
  ASSERT_EQ(cudaMemcpy(out.data(), recv, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, host) << "one rank: the sum is the input";

  // In place, average, then all-gather and broadcast of bytes.
  s = comm.allreduce(recv, recv, n, DType::kFloat32, ReduceOp::kAvg, stream, deadline, progress);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  s = comm.allgather(send, recv, n * sizeof(float) / 2, stream, deadline, progress);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  s = comm.broadcast(recv, n * sizeof(float), 0, stream, deadline, progress);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  s = comm.wait(stream, deadline, progress);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  std::fill(out.begin(), out.end(), -1.0f);
  ASSERT_EQ(cudaMemcpy(out.data(), recv, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n / 2; ++i) ASSERT_EQ(out[i], host[i]) << i;
  for (size_t i = n / 2; i < n; ++i) ASSERT_EQ(out[i], host[i]) << i << " (kept from avg)";

  EXPECT_EQ(comm.broadcast(recv, 4, 1, stream).code(), Code::kInvalidArgument);
  comm.abort();
  comm.abort();
  EXPECT_EQ(comm.allreduce(send, recv, n, DType::kFloat32, ReduceOp::kSum, stream).code(), Code::kAborted);
  EXPECT_EQ(comm.wait(stream, deadline, progress).code(), Code::kAborted);
  EXPECT_EQ(comm.close(deadline, progress).code(), Code::kAborted) << "aborted: nothing to finalize";

  // A healthy communicator closes through ncclCommFinalize and ncclCommDestroy, once.
  uint8_t id2[kUniqueIdBytes];
  ASSERT_TRUE(get_unique_id(id2).is_ok());
  auto second = Comm::create(id2, 1, 0, Clock::now() + seconds(60), progress);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  s = (*second)->allreduce(send, recv, n, DType::kFloat32, ReduceOp::kSum, stream, deadline, progress);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  s = (*second)->close(deadline, progress);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE((*second)->close(deadline, progress).is_ok());
  EXPECT_EQ((*second)->allreduce(send, recv, n, DType::kFloat32, ReduceOp::kSum, stream).code(), Code::kAborted);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaFree(send);
  cudaFree(recv);
  cudaStreamDestroy(stream);
}

TEST(NcclComm, OneRankCollectivesOnGpuElseCleanInitError) {
  if (!have_gpu() && gw::testing::gpu_required()) {
    FAIL() << "GW_REQUIRE_GPU is set, but there is no usable CUDA device";
  }
  GW_NEEDS_NCCL();
  if (have_gpu()) {
    single_rank_collectives_on_gpu();
  } else {
    create_fails_cleanly_without_gpu();
  }
}

// A second rank that never comes: with a GPU, init must give up at the deadline (kTimeout)
// while calling progress; without one it fails as above, before waiting for peers.
TEST(NcclComm, MissingPeerTimesOutOnGpuElseCleanInitError) {
  if (!have_gpu() && gw::testing::gpu_required()) {
    FAIL() << "GW_REQUIRE_GPU is set, but there is no usable CUDA device";
  }
  GW_NEEDS_NCCL();
  uint8_t id[kUniqueIdBytes];
  ASSERT_TRUE(get_unique_id(id).is_ok());
  int polls = 0;
  const auto start = Clock::now();
  auto comm = Comm::create(id, 2, 0, start + seconds(2), [&polls] { ++polls; });
  const auto took = Clock::now() - start;
  ASSERT_FALSE(comm.is_ok());
  EXPECT_TRUE(contains(comm.status().message(), "NCCL")) << comm.status().to_string();
  if (have_gpu()) {
    EXPECT_EQ(comm.status().code(), Code::kTimeout) << comm.status().to_string();
    EXPECT_GE(took, seconds(2));
    EXPECT_LT(took, seconds(10));
    EXPECT_GT(polls, 0);
  } else {
    const Code c = comm.status().code();
    EXPECT_TRUE(c == Code::kCuda || c == Code::kRemote) << comm.status().to_string();
    EXPECT_LT(took, seconds(5));
  }
}

}  // namespace
}  // namespace gw::nccl
