// The device collectives with the CUDA backend on a real GPU: ranks are threads sharing the
// GPU (the in-process transport), each communicator with its own stream and staging. Results
// and residuals must equal the host algorithms' bit for bit. NCCL runs with one rank (two
// ranks on one GPU is a configuration NCCL refuses, which is tested as a clean refusal on
// every rank; GW_REQUIRE_NCCL=1 makes a one-rank NCCL that does not come up a failure).
// Without a usable GPU every test is skipped with the runtime's reason. Inputs are uploaded
// with pinned cudaMemcpyAsync on the caller's stream (blocking, non-blocking or the legacy
// one) behind a sleeping host function, so a collective that does not wait for that stream
// reads stale inputs (MissingCallerWaitIsCaught shows it does). The Quick* test is for
// compute-sanitizer.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "compressors/device_ef_state.hpp"
#include "gradwire/communicator.hpp"
#include "kernels/device_codec.hpp"
#include "kernels/testing_hooks.hpp"
#include "tests/gpu/pinned_copy.hpp"
#include "tests/gpu/require_gpu.hpp"
#include "tests/test_util.hpp"
#include "transport/local/local_transport.hpp"

namespace gw {
namespace {

using Comms = std::vector<std::unique_ptr<Communicator>>;

Comms make_group(int p, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  CommConfig cfg;
  cfg.timeout = timeout;
  cfg.chunk_bytes = 64 << 10;
  auto group = transport::make_local_group(p);
  Comms comms;
  for (auto& t : group) comms.push_back(Communicator::create(std::move(t), cfg).value());
  return comms;
}

void on_ranks(Comms& comms, const std::function<void(Communicator&, int)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(0);
      fn(*comms[r], static_cast<int>(r));
    });
  }
  for (auto& t : threads) t.join();
}

struct Dev {
  explicit Dev(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes > 0 ? bytes : 1), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  float* f() { return static_cast<float*>(p); }
  void* p = nullptr;
};

std::vector<float> download(const float* d, size_t n) {
  std::vector<float> v(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(v.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return v;
}
void upload(float* d, const std::vector<float>& v) {
  if (!v.empty()) {
    EXPECT_EQ(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

class DeviceCollectivesGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = kern::device_ready();
    if (!s.is_ok()) GW_SKIP_OR_FAIL_WITHOUT_GPU(s.to_string());
  }
};

struct Case {
  const char* spec;
  Algo algo;
};

// The stream a rank's caller queues its work on.
enum class CallerStream { kBlocking, kNonBlocking, kLegacy };

struct Scenario {
  int p = 2;
  size_t n = 4097;
  Case k{"qsgd:bits=4", Algo::kScatterReduce};
  int steps = 3;
  CallerStream stream = CallerStream::kBlocking;
  // From the second step on, a host function sleeping 150 ms on the caller's stream comes
  // before the upload, so a collective that does not wait for that stream reads the previous
  // step's gradient, never by luck the new one. (The first step grows the backend's buffers,
  // whose allocation might wait for the device and so hide a missing wait.)
  bool sleep_before_upload = false;
};

// Runs the all-reduces of `run` on the host algorithms and on device buffers (inputs uploaded
// with pinned cudaMemcpyAsync on the caller's stream), and names the ranks whose last result
// or residual differs ("" when none do).
std::string differences(const Scenario& run) {
  const int p = run.p;
  const size_t n = run.n;
  const Case k = run.k;
  std::vector<std::vector<float>> host(static_cast<size_t>(p)), dev(static_cast<size_t>(p));
  std::vector<std::vector<float>> host_res(static_cast<size_t>(p)), dev_res(static_cast<size_t>(p));
  Comms hc = make_group(p);
  on_ranks(hc, [&](Communicator& c, int r) {
    auto codec = test::make_codec(k.spec);
    ErrorFeedback ef(n);
    std::vector<float> out(n);
    for (int s = 0; s < run.steps; ++s) {
      auto g = test::gradient(n, static_cast<uint64_t>(100 * s + r));
      const Status st = c.allreduce(g.data(), out.data(), n, DType::kFloat32, ReduceOp::kAvg, codec.get(), &ef, k.algo);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    host[r] = out;
    host_res[r].assign(ef.residual(), ef.residual() + n);
  });
  Comms dc = make_group(p);
  on_ranks(dc, [&](Communicator& c, int r) {
    auto codec = test::make_codec(k.spec);
    auto made = kern::DeviceResidual::create(n);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    auto ef = std::move(made).value();
    cudaStream_t stream = nullptr;  // the legacy default stream
    if (run.stream != CallerStream::kLegacy) {
      const unsigned flags = run.stream == CallerStream::kNonBlocking ? cudaStreamNonBlocking : cudaStreamDefault;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, flags), cudaSuccess);
    }
    {
      testing::PinnedCopier io(stream);
      Dev g(n * 4), out(n * 4);
      ASSERT_EQ(cudaMemsetAsync(g.p, 0, n * 4, stream), cudaSuccess);
      for (int s = 0; s < run.steps; ++s) {
        if (run.sleep_before_upload && s > 0) {
          ASSERT_EQ(cudaLaunchHostFunc(
                        stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(150)); }, nullptr),
                    cudaSuccess);
        }
        ASSERT_EQ(io.upload(g.p, test::gradient(n, static_cast<uint64_t>(100 * s + r)).data(), n * 4), cudaSuccess);
        const Status st = c.allreduce_device(g.f(), out.f(), n, DType::kFloat32, ReduceOp::kAvg, codec.get(), ef.get(),
                                             k.algo, stream);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
      }
      dev[r].resize(n);
      ASSERT_EQ(io.download(dev[r].data(), out.p, n * 4), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    dev_res[r].resize(n);
    ASSERT_TRUE(ef->copy_out(dev_res[r].data(), n).is_ok());
    if (stream != nullptr) cudaStreamDestroy(stream);
  });
  std::string diff;
  for (int r = 0; r < p; ++r) {
    if (!same_bits(dev[r], host[r])) diff += "result of rank " + std::to_string(r) + "; ";
    if (!same_bits(dev_res[r], host_res[r])) diff += "residual of rank " + std::to_string(r) + "; ";
  }
  return diff;
}

TEST_F(DeviceCollectivesGpu, SameBitsAsTheHostAlgorithms) {
  const Case cases[] = {
      {"qsgd:bits=8,bucket=512", Algo::kScatterReduce}, {"qsgd:bits=4", Algo::kScatterReduce},
      {"sign:bucket=256", Algo::kScatterReduce},        {"topk:ratio=0.01", Algo::kSparseAllgather},
      {"dgc:ratio=0.01", Algo::kSparseAllgather},       {"randomk:ratio=0.05,seed=3", Algo::kSparseAllgather}};
  for (int p : {1, 2, 3, 4}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{4097}, size_t{1000003}}) {
      for (const Case& k : cases) {
        SCOPED_TRACE(std::string(k.spec) + " p=" + std::to_string(p) + " n=" + std::to_string(n));
        Scenario run;
        run.p = p;
        run.n = n;
        run.k = k;
        EXPECT_EQ(differences(run), "");
      }
    }
  }
}

// One compressed codec of each family, one step: short enough for compute-sanitizer.
TEST_F(DeviceCollectivesGpu, QuickEveryFamily) {
  const Case cases[] = {{"qsgd:bits=4", Algo::kScatterReduce},
                        {"sign", Algo::kScatterReduce},
                        {"topk:ratio=0.01", Algo::kSparseAllgather},
                        {"dgc:ratio=0.01", Algo::kSparseAllgather},
                        {"randomk:ratio=0.05,seed=3", Algo::kSparseAllgather}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.spec);
    Scenario run;
    run.k = k;
    run.steps = 1;
    run.stream = CallerStream::kNonBlocking;
    EXPECT_EQ(differences(run), "");
  }
}

// The collectives must wait for what the caller queued on its stream, whatever kind of
// stream it is: blocking, non-blocking (ordered with nothing but itself) or the legacy
// default stream.
class DeviceCollectivesOnStream : public DeviceCollectivesGpu, public ::testing::WithParamInterface<CallerStream> {};

std::string stream_name(const ::testing::TestParamInfo<CallerStream>& info) {
  switch (info.param) {
    case CallerStream::kBlocking: return "Blocking";
    case CallerStream::kNonBlocking: return "NonBlocking";
    case CallerStream::kLegacy: return "Legacy";
  }
  return "Unknown";
}
void PrintTo(CallerStream kind, std::ostream* os) {
  *os << stream_name(::testing::TestParamInfo<CallerStream>(kind, 0));
}

const Case kStreamCases[] = {
    {"qsgd:bits=4", Algo::kScatterReduce}, {"topk:ratio=0.01", Algo::kSparseAllgather}, {"none", Algo::kScatterReduce}};

TEST_P(DeviceCollectivesOnStream, WaitForTheCallersStream) {
  for (const Case& k : kStreamCases) {
    for (size_t n : {size_t{4097}, size_t{100003}}) {
      SCOPED_TRACE(std::string(k.spec) + " n=" + std::to_string(n));
      Scenario run;
      run.n = n;
      run.k = k;
      run.stream = GetParam();
      run.sleep_before_upload = true;
      EXPECT_EQ(differences(run), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, DeviceCollectivesOnStream,
                         ::testing::Values(CallerStream::kBlocking, CallerStream::kNonBlocking, CallerStream::kLegacy),
                         stream_name);

// The stream test is able to fail: without the backend's wait for the caller's stream
// (kernels/testing_hooks.hpp) it must see wrong results.
TEST_F(DeviceCollectivesGpu, MissingCallerWaitIsCaught) {
  struct Restore {
    ~Restore() { kern::testing_hooks::skip_caller_wait = false; }
  } restore;
  kern::testing_hooks::skip_caller_wait = true;
  for (const Case& k : kStreamCases) {
    SCOPED_TRACE(k.spec);
    Scenario run;
    run.n = 100003;
    run.k = k;
    run.stream = CallerStream::kNonBlocking;
    run.sleep_before_upload = true;
    EXPECT_NE(differences(run), "") << "the results are right without the wait: the stream test cannot catch it";
  }
}

TEST_F(DeviceCollectivesGpu, WorkQueuedOnTheCallersStreamComesFirst) {
  const size_t n = size_t{1} << 24;
  Comms comms = make_group(2);
  on_ranks(comms, [&](Communicator& c, int) {
    Dev x(n * 4);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(x.p, 0, n * 4, stream), cudaSuccess);
    // Queued behind a 200 ms host function, not waited for: the all-reduce must see the
    // ones, not the zeros.
    void* pinned = nullptr;
    ASSERT_EQ(cudaMallocHost(&pinned, n * 4), cudaSuccess);
    auto* ones = static_cast<float*>(pinned);
    for (size_t i = 0; i < n; ++i) ones[i] = 1.0f;
    ASSERT_EQ(cudaLaunchHostFunc(
                  stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(x.p, ones, n * 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
    ASSERT_TRUE(c.allreduce_device(x.p, x.p, n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr, Algo::kAuto, stream)
                    .is_ok());
    cudaFreeHost(ones);
    const auto got = download(x.f(), n);
    EXPECT_EQ(got[0], 2.0f);
    EXPECT_EQ(got[n - 1], 2.0f);
    cudaStreamDestroy(stream);
  });
}

TEST_F(DeviceCollectivesGpu, NcclWithOneRankAndARefusalForTwoRanksOnOneGpu) {
  {
    Comms one = make_group(1);
    on_ranks(one, [&](Communicator& c, int) {
      const Status s = c.enable_nccl();
      if (!s.is_ok()) {
        // No NCCL library on this machine: the reason must say so.
        EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
        if (testing::nccl_required()) {
          ADD_FAILURE() << "GW_REQUIRE_NCCL is set, but NCCL did not come up: " << s.to_string();
        }
        std::printf("NCCL not available here: %s\n", s.to_string().c_str());
        return;
      }
      EXPECT_TRUE(c.nccl_enabled());
      Dev x(1000 * 4), all(1000 * 4);
      upload(x.f(), std::vector<float>(1000, 3.0f));
      ASSERT_TRUE(
          c.allreduce_device(x.p, x.p, 1000, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr, Algo::kAuto, nullptr)
              .is_ok());
      EXPECT_EQ(download(x.f(), 1000)[999], 3.0f);
      ASSERT_TRUE(c.allgather_device(x.p, all.p, 4000, nullptr).is_ok());
      ASSERT_TRUE(c.broadcast_device(x.p, 4000, 0, nullptr).is_ok());
    });
  }
  Comms two = make_group(2, std::chrono::seconds(30));
  on_ranks(two, [&](Communicator& c, int) {
    const Status s = c.enable_nccl();
    if (s.is_ok()) return;  // a newer NCCL that accepts it
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
    EXPECT_FALSE(c.nccl_enabled());
    Dev x(64 * 4);
    upload(x.f(), std::vector<float>(64, 1.0f));
    ASSERT_TRUE(
        c.allreduce_device(x.p, x.p, 64, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr, Algo::kAuto, nullptr)
            .is_ok());
    EXPECT_EQ(download(x.f(), 64)[0], 2.0f);
  });
}

TEST_F(DeviceCollectivesGpu, ADeadPeerIsATimeout) {
  Comms comms = make_group(2, std::chrono::seconds(2));
  auto codec = test::make_codec("qsgd:bits=8");
  on_ranks(comms, [&](Communicator& c, int r) {
    if (r == 1) return;
    Dev x(100000 * 4);
    upload(x.f(), test::gradient(100000, 1));
    const Status s = c.allreduce_device(x.p, x.p, 100000, DType::kFloat32, ReduceOp::kAvg, codec.get(), nullptr,
                                        Algo::kScatterReduce, nullptr);
    EXPECT_EQ(s.code(), Code::kTimeout) << s.to_string();
  });
}

}  // namespace
}  // namespace gw
