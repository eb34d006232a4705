// The device collectives with the real CUDA backend between processes over UCX, all on the
// one GPU, through the C ABI: gw_allreduce_device on cudaMalloc'd buffers (inputs uploaded on
// a non-blocking stream) must equal gw_allreduce_ex on host copies bit for bit, results and
// error-feedback residuals; a peer killed between calls fails the others within 10 s.
//
// The ranks are forked before anything here touches CUDA (a child of a process that has
// initialised CUDA cannot use it), and the parent never does: even the check for a device
// runs in a child. Rank 0 calls gw_get_unique_id after the fork (its rendezvous thread must
// not exist at a fork) and passes the id through pipes made before it. Each child arms
// alarm() and the parent kills what outlives the limit, so nothing hangs. UCX_TLS is left to
// whoever runs the test. Without a usable GPU the tests skip, or fail under GW_REQUIRE_GPU=1.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gradwire/gradwire.h"
#include "tests/gpu/pinned_copy.hpp"
#include "tests/gpu/require_gpu.hpp"
#include "tests/test_util.hpp"
#include "transport/bootstrap/fd_io.hpp"

namespace {

using std::chrono::seconds;

constexpr int kOk = 0, kNoId = 3, kCudaFailed = 10, kInitFailed = 11, kCallFailed = 12, kMismatch = 13, kWrongCode = 14,
              kTooSlow = 15, kHung = -1;

// Forks np ranks; the child of rank r runs body(r, id) and exits with what it returns. Gives
// each child's exit code, 128 + signal when a signal ended it, or kHung when it outlived
// `limit` and was killed.
std::vector<int> fork_ranks(int np, const std::function<int(int, const gw_unique_id_t&)>& body, seconds limit) {
  std::fflush(stdout);
  std::fflush(stderr);
  signal(SIGPIPE, SIG_IGN);                               // a child that died early must not take rank 0 with it
  std::vector<int> fds(2 * static_cast<size_t>(np), -1);  // pipe r carries the id to rank r
  for (int r = 0; r < np; ++r) {
    if (pipe(&fds[2 * static_cast<size_t>(r)]) != 0) std::abort();
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < np; ++r) {
    const pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      alarm(static_cast<unsigned>(limit.count()));
      gw_unique_id_t id{};
      if (r == 0) {
        if (gw_get_unique_id(&id) != GW_SUCCESS) {
          std::fprintf(stderr, "gw_get_unique_id: %s\n", gw_get_last_error());
          _exit(kNoId);
        }
        for (int j = 1; j < np; ++j) gw::bootstrap::write_all(fds[2 * static_cast<size_t>(j) + 1], &id, sizeof id);
      } else if (!gw::bootstrap::read_all(fds[2 * static_cast<size_t>(r)], &id, sizeof id)) {
        _exit(kNoId);
      }
      for (int fd : fds) close(fd);
      const int code = body(r, id);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  for (int fd : fds) close(fd);
  std::vector<int> codes(static_cast<size_t>(np), kHung);
  const auto until = std::chrono::steady_clock::now() + limit + seconds(5);
  for (size_t left = pids.size(); left > 0;) {
    for (size_t r = 0; r < pids.size(); ++r) {
      int status = 0;
      if (pids[r] > 0 && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[r] = -1;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > until) {
      for (pid_t& pid : pids) {
        if (pid > 0) {
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
          pid = -1;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

// Asks a child whether a usable CUDA device is there: "" if so, else the runtime's reason.
std::string gpu_missing_reason() {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    close(fds[0]);
    alarm(60);
    int count = 0;
    std::string why;
    if (gw_cuda_device_count(&count) != GW_SUCCESS) {
      why = gw_get_last_error();
    } else if (count == 0) {
      why = "no CUDA device";
    }
    gw::bootstrap::write_all(fds[1], why.data(), why.size());
    _exit(0);
  }
  close(fds[1]);
  std::string why;
  char buf[256];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) why.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "the device check in a child failed (wait status " + std::to_string(status) + ")";
  }
  return why;
}

class DeviceOverUcxGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = gpu_missing_reason();
    if (!why.empty()) GW_SKIP_OR_FAIL_WITHOUT_GPU(why);
  }
};

struct Case {
  const char* spec;
  gw_algo_t algo;
};

int fail(int code, const char* what, int rank) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, gw_get_last_error());
  return code;
}

// One rank: for each case and size, 3 steps of the host all-reduce on host copies and of the
// device all-reduce on device buffers, each with its own EF state; results after every step
// and the residuals at the end must be the same bits.
int same_bits_rank(int rank, int np, const gw_unique_id_t& id) {
  if (cudaSetDevice(0) != cudaSuccess) return kCudaFailed;
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  cfg.timeout_s = 60;
  cfg.chunk_bytes = 16 << 10;
  gw_comm_t comm = nullptr;
  if (gw_comm_init_rank(&comm, np, id, rank, &cfg) != GW_SUCCESS) return fail(kInitFailed, "gw_comm_init_rank", rank);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return kCudaFailed;
  int rc = kOk;
  {
    gw::testing::PinnedCopier io(stream);
    const Case cases[] = {{"qsgd:bits=4", GW_ALGO_SCATTER_REDUCE},
                          {"topk:ratio=0.01", GW_ALGO_SPARSE_ALLGATHER},
                          {"none", GW_ALGO_SCATTER_REDUCE}};
    for (const Case& k : cases) {
      for (size_t n : {size_t{1}, size_t{4097}, size_t{100003}}) {
        if (rc != kOk) break;
        gw_codec_t codec = nullptr;
        gw_ef_state_t host_ef = nullptr, dev_ef = nullptr;
        void* send = nullptr;
        void* recv = nullptr;
        if (gw_codec_create(k.spec, &codec) != GW_SUCCESS || gw_ef_state_create(n, &host_ef) != GW_SUCCESS ||
            gw_ef_state_create_device(n, &dev_ef) != GW_SUCCESS) {
          rc = fail(kCallFailed, "codec or EF state", rank);
        } else if (cudaMalloc(&send, n * 4) != cudaSuccess || cudaMalloc(&recv, n * 4) != cudaSuccess) {
          rc = kCudaFailed;
        }
        std::vector<float> host_out(n), dev_out(n);
        for (int step = 0; step < 3 && rc == kOk; ++step) {
          const std::vector<float> g = gw::test::gradient(n, static_cast<uint64_t>(1000 * step + 10 * rank) + n);
          if (gw_allreduce_ex(comm, g.data(), host_out.data(), n, GW_FLOAT32, GW_AVG, codec, host_ef, k.algo) !=
              GW_SUCCESS) {
            rc = fail(kCallFailed, "gw_allreduce_ex", rank);
          } else if (io.upload(send, g.data(), n * 4) != cudaSuccess) {
            rc = kCudaFailed;
          } else if (gw_allreduce_device(comm, send, recv, n, GW_FLOAT32, GW_AVG, codec, dev_ef, k.algo, stream) !=
                     GW_SUCCESS) {
            rc = fail(kCallFailed, "gw_allreduce_device", rank);
          } else if (io.download(dev_out.data(), recv, n * 4) != cudaSuccess) {
            rc = kCudaFailed;
          } else if (std::memcmp(host_out.data(), dev_out.data(), n * 4) != 0) {
            std::fprintf(stderr, "rank %d: %s n=%zu step %d: results differ\n", rank, k.spec, n, step);
            rc = kMismatch;
          }
        }
        if (rc == kOk) {
          std::vector<float> host_res(n), dev_res(n);
          if (gw_ef_state_get_residual(host_ef, host_res.data(), n) != GW_SUCCESS ||
              gw_ef_state_get_residual(dev_ef, dev_res.data(), n) != GW_SUCCESS) {
            rc = fail(kCallFailed, "gw_ef_state_get_residual", rank);
          } else if (std::memcmp(host_res.data(), dev_res.data(), n * 4) != 0) {
            std::fprintf(stderr, "rank %d: %s n=%zu: residuals differ\n", rank, k.spec, n);
            rc = kMismatch;
          }
        }
        cudaStreamSynchronize(stream);
        cudaFree(send);
        cudaFree(recv);
        gw_ef_state_destroy(dev_ef);
        gw_ef_state_destroy(host_ef);
        gw_codec_destroy(codec);
      }
    }
  }
  cudaStreamDestroy(stream);
  if (gw_comm_destroy(comm) != GW_SUCCESS && rc == kOk) rc = fail(kCallFailed, "gw_comm_destroy", rank);
  return rc;
}

TEST_F(DeviceOverUcxGpu, SameBitsAsTheHostOnTwoAndThreeProcesses) {
  for (int np : {2, 3}) {
    SCOPED_TRACE("np=" + std::to_string(np));
    const auto codes = fork_ranks(
        np, [np](int rank, const gw_unique_id_t& id) { return same_bits_rank(rank, np, id); }, seconds(240));
    for (int r = 0; r < np; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], kOk) << "rank " << r;
  }
}

// Three ranks make one device all-reduce; rank 2 then dies by SIGKILL, and the others' next
// call must fail with a remote, timeout or aborted code within 10 s.
int killed_peer_rank(int rank, const gw_unique_id_t& id) {
  if (cudaSetDevice(0) != cudaSuccess) return kCudaFailed;
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  cfg.timeout_s = 4;
  gw_comm_t comm = nullptr;
  if (gw_comm_init_rank(&comm, 3, id, rank, &cfg) != GW_SUCCESS) return fail(kInitFailed, "gw_comm_init_rank", rank);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return kCudaFailed;
  gw::testing::PinnedCopier io(stream);
  const size_t n = size_t{1} << 18;
  gw_codec_t codec = nullptr;
  if (gw_codec_create("qsgd:bits=8", &codec) != GW_SUCCESS) return fail(kCallFailed, "gw_codec_create", rank);
  void* x = nullptr;
  if (cudaMalloc(&x, n * 4) != cudaSuccess) return kCudaFailed;
  if (io.upload(x, gw::test::gradient(n, 1).data(), n * 4) != cudaSuccess) return kCudaFailed;
  auto call = [&] {
    return gw_allreduce_device(comm, x, x, n, GW_FLOAT32, GW_AVG, codec, nullptr, GW_ALGO_SCATTER_REDUCE, stream);
  };
  if (call() != GW_SUCCESS) return fail(kCallFailed, "the first call", rank);
  if (rank == 2) raise(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  const gw_result_t r = call();
  const auto took = std::chrono::steady_clock::now() - start;
  std::fprintf(stderr, "rank %d: after the kill: %s (%s) in %.1f s\n", rank, gw_get_error_string(r),
               gw_get_last_error(), std::chrono::duration<double>(took).count());
  int rc = kOk;
  if (r == GW_SUCCESS) {
    rc = kCallFailed;
  } else if (r != GW_ERR_REMOTE && r != GW_ERR_TIMEOUT && r != GW_ERR_ABORTED) {
    rc = kWrongCode;
  } else if (took > seconds(10)) {
    rc = kTooSlow;
  }
  gw_comm_destroy(comm);  // must not hang either (alarm() would end the child)
  gw_codec_destroy(codec);
  cudaFree(x);
  return rc;
}

TEST_F(DeviceOverUcxGpu, KilledPeerFailsTheOthersWithin10s) {
  const auto codes = fork_ranks(3, killed_peer_rank, seconds(90));
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
}

}  // namespace
