// The device collectives with the real CUDA backend (collectives/algorithms/device/cuda_backend.cpp), the device
// codecs (kernels/device_codec.cpp, header_kernel.cu, the codec kernels) and the element-wise
// collective kernels, all on the emulated runtime, against the host collectives: ranks are
// threads over the in-process transport, and Communicator::allreduce_device must give the
// host Communicator::allreduce's results and error-feedback residuals bit for bit (3 steps,
// the same gradients), as must the dense, all-gather and broadcast calls. DeviceEncoder and
// decode_device are checked against the host codec API, and the backend's refusal of host
// memory. The hierarchical all-reduce (ranks laid out on nodes) too, against the host's, and
// the flat twins called directly on a piece of a cut call (Context::piece > 0).
// `collectives_harness quick` runs the default grid; with no argument, also 5 ranks and 70001
// elements; `hierarchical` or `pieces`, that part alone. Exits non-zero on any mismatch.
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/ef_state.hpp"
#include "kernels/device_codec.hpp"
#include "kernels/testing_hooks.hpp"
#include "transport/local/local_transport.hpp"

using namespace gw;

namespace {

std::atomic<long> g_checks{0};
std::atomic<long> g_failures{0};
std::mutex g_print_mu;

using Comms = std::vector<std::unique_ptr<Communicator>>;
Comms* g_group = nullptr;  // the group on_ranks is running (one at a time)

// A rank whose call failed leaves its peers waiting in the collective: abort them all, so
// that the failure costs no timeout.
void abort_group(const std::string& why) {
  if (g_group == nullptr) return;
  for (auto& c : *g_group) c->abort(why);
}

void fail(const std::string& what) {
  ++g_failures;
  {
    std::lock_guard<std::mutex> lock(g_print_mu);
    std::printf("FAIL %s\n", what.c_str());
    std::fflush(stdout);
  }
  abort_group(what);
}

#define OK_OR_FAIL(label, expr)                                        \
  do {                                                                 \
    const Status s_ = (expr);                                          \
    if (!s_.is_ok()) {                                                 \
      if (s_.code() != Code::kAborted) {                               \
        fail(std::string(label) + ": " #expr " -> " + s_.to_string()); \
      }                                                                \
      abort_group(std::string(label) + ": a rank failed");             \
      return;                                                          \
    }                                                                  \
  } while (0)

// Device buffer of the emulated runtime (cudaMalloc: tracked, filled with 0xA5).
template <class T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) {
    emu::Exempt mine;
    void* p = nullptr;
    if (cudaMalloc(&p, n > 0 ? n * sizeof(T) : 1) != cudaSuccess) std::abort();
    p_ = static_cast<T*>(p);
  }
  ~DevBuf() {
    emu::Exempt mine;
    release_pinned();
    cudaFree(p_);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* data() { return p_; }
  void upload(const std::vector<T>& v) {
    emu::Exempt mine;
    if (!v.empty()) cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  // v copied in from pinned memory on stream s, not waited for: with deferred streams
  // (EMU_DEFER_STREAMS=1) the copy runs when something waits for s, so a collective on s
  // sees v only if it waits for the caller's stream as it must.
  void upload_on(cudaStream_t s, const std::vector<T>& v) {
    emu::Exempt mine;
    release_pinned();
    if (v.empty()) return;
    if (cudaHostAlloc(&pinned_, v.size() * sizeof(T), cudaHostAllocDefault) != cudaSuccess) std::abort();
    std::memcpy(pinned_, v.data(), v.size() * sizeof(T));
    cudaMemcpyAsync(p_, pinned_, v.size() * sizeof(T), cudaMemcpyHostToDevice, s);
  }
  void fill(int byte) {
    emu::Exempt mine;
    if (n_ > 0) cudaMemset(p_, byte, n_ * sizeof(T));
  }
  std::vector<T> download() const {
    emu::Exempt mine;
    std::vector<T> v(n_);
    if (n_ > 0) cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  void release_pinned() {
    if (pinned_ != nullptr) cudaFreeHost(pinned_);  // waits for the device, so the copy has run
    pinned_ = nullptr;
  }
  size_t n_;
  T* p_;
  void* pinned_ = nullptr;
};

// Heavy-tailed values, reproducible by seed; kind 1 adds exact zeros and many repeated
// magnitudes (ties for top-k and dgc selection across chunks and ranks).
std::vector<float> gradient(size_t n, uint64_t seed, int kind) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 12345);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi(3.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    float t = normal(rng) / std::sqrt(chi(rng) / 3.0f) * 1e-2f;
    if (t == 0.0f) t = 1e-7f;
    if (kind == 1) {
      const uint64_t r = rng() % 8;
      if (r == 0)
        t = 0.0f;
      else if (r < 4)
        t = static_cast<float>(static_cast<int>(rng() % 5) - 2) * 0.25f;
    }
    x[i] = t;
  }
  return x;
}

bool same_bits(const void* a, const void* b, size_t bytes, size_t elem, size_t* where) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < bytes; i += elem) {
    if (std::memcmp(x + i, y + i, elem) != 0) {
      *where = i / elem;
      return false;
    }
  }
  return true;
}

std::string show(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  char b[64];
  std::snprintf(b, sizeof b, "%.9g (0x%08x)", static_cast<double>(f), u);
  return b;
}

void compare_floats(const std::string& what, const std::vector<float>& dev, const std::vector<float>& host) {
  ++g_checks;
  if (dev.size() != host.size()) {
    fail(what + ": device has " + std::to_string(dev.size()) + " elements, host " + std::to_string(host.size()));
    return;
  }
  size_t i = 0;
  if (!same_bits(dev.data(), host.data(), dev.size() * 4, 4, &i)) {
    size_t diffs = 0;
    for (size_t j = 0; j < dev.size(); ++j) diffs += std::memcmp(&dev[j], &host[j], 4) != 0;
    fail(what + ": element " + std::to_string(i) + " device " + show(dev[i]) + " host " + show(host[i]) + " (" +
         std::to_string(diffs) + " of " + std::to_string(dev.size()) + " differ)");
  }
}

using PerRank = std::vector<std::vector<float>>;

// The device twin's results of every call on every rank against the host's.
void compare_twins(const char* label, const char* call_word, int p, const std::vector<PerRank>& dev_out,
                   const std::vector<PerRank>& host_out) {
  for (size_t call = 0; call < dev_out.size(); ++call) {
    for (int r = 0; r < p; ++r) {
      compare_floats(
          std::string(label) + " " + call_word + " " + std::to_string(call) + " rank " + std::to_string(r) + " result",
          dev_out[call][r], host_out[call][r]);
    }
  }
}

// Each rank's EF state after the calls: residual, owner residual and step, device against host.
void compare_twin_ef(const char* label, int p, const PerRank& dev_res, const PerRank& host_res,
                     const PerRank& dev_owner, const PerRank& host_owner, const std::vector<uint64_t>& dev_step,
                     const std::vector<uint64_t>& host_step) {
  for (int r = 0; r < p; ++r) {
    const std::string who = std::string(label) + " rank " + std::to_string(r);
    compare_floats(who + " residual", dev_res[r], host_res[r]);
    compare_floats(who + " owner residual", dev_owner[r], host_owner[r]);
    ++g_checks;
    if (dev_step[r] != host_step[r]) {
      fail(who + ": device EF step " + std::to_string(dev_step[r]) + ", host " + std::to_string(host_step[r]));
    }
  }
}

// chunk_bytes: small, so that even small buffers have many chunks; 4100 (1025 floats) gives
// message slots of sizes that are not multiples of 8.
// node_of (one entry a rank, or empty: one node) lays the ranks out on nodes; inter: the
// hierarchical all-reduce's algorithm between them.
Comms make_group(int p, size_t chunk_bytes = 4096, const std::vector<int>& node_of = {}, Algo inter = Algo::kAuto) {
  CommConfig cfg;
  cfg.timeout = std::chrono::seconds(60);  // ASan and fibers are slow; a hang still ends
  cfg.chunk_bytes = chunk_bytes;
  cfg.inter_algo = inter;
  if (!node_of.empty()) cfg.dense_threshold_bytes = 0;  // small calls compressed between nodes too
  auto group = transport::make_local_group(p);
  Comms comms;
  for (auto& t : group) {
    auto c = Communicator::create(std::move(t), cfg, node_of);
    if (!c.is_ok()) {
      std::printf("FAIL Communicator::create: %s\n", c.status().to_string().c_str());
      std::exit(1);
    }
    comms.push_back(std::move(c).value());
  }
  return comms;
}

void on_ranks(Comms& comms, const std::function<void(Communicator&, int)>& fn) {
  g_group = &comms;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) threads.emplace_back([&, r] { fn(*comms[r], static_cast<int>(r)); });
  for (auto& t : threads) t.join();
  g_group = nullptr;
}

// The harness's own wait for work it queued on a non-blocking stream, before a download
// (cudaMemcpy on the legacy stream does not wait for such a stream).
void finish(cudaStream_t s) {
  emu::Exempt mine;
  cudaStreamSynchronize(s);
}

// One stream per rank (a caller's stream for begin() to order after); null on some calls.
struct RankStream {
  cudaStream_t s = nullptr;
  RankStream() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~RankStream() { cudaStreamDestroy(s); }
};

const std::unique_ptr<Codec> g_none = std::move(Codec::create("none")).value();

struct Case {
  const char* spec;
  Algo algo;
};

// The device codecs' cases of tests/test_device_collectives.cpp.
const Case kCases[] = {
    {"qsgd:bits=8,bucket=512", Algo::kScatterReduce},
    {"qsgd:bits=2,bucket=128", Algo::kScatterReduce},
    {"sign:bucket=256", Algo::kScatterReduce},
    {"fp16", Algo::kScatterReduce},
    {"topk:ratio=0.01", Algo::kSparseAllgather},
    {"dgc:ratio=0.01", Algo::kSparseAllgather},
    {"randomk:ratio=0.05,seed=3", Algo::kSparseAllgather},
    {"topk:ratio=0.02", Algo::kScatterReduce},
    {"qsgd:bits=4", Algo::kSparseAllgather},
    // Beyond the unit test's list: the other codecs on the other algorithm.
    {"randomk:ratio=0.05,seed=3", Algo::kScatterReduce},
    {"dgc:ratio=0.01", Algo::kScatterReduce},
    {"sign:bucket=256", Algo::kSparseAllgather},
    {"qsgd:bits=8,bucket=512,rounding=nearest", Algo::kScatterReduce},
};

struct Options {
  bool with_ef = true;
  ReduceOp op = ReduceOp::kAvg;
  bool in_place = false;
  int kind = 0;
  size_t chunk_bytes = 4096;
  std::vector<int> node_of = {};  // nodes for the hierarchical all-reduce (Case::algo kHierarchical)
  Algo inter = Algo::kAuto;       // its algorithm between nodes
};

// kSteps all-reduces, host and device, on the same gradients: every result, residual,
// owner residual and step count must be the same.
void compare_allreduce(int p, size_t n, const Case& k, const Options& o) {
  constexpr int kSteps = 3;
  char label[256];
  std::snprintf(label, sizeof label, "%s %s p=%d n=%zu%s %s%s kind=%d chunk=%zu", k.spec, algo_name(k.algo), p, n,
                o.with_ef ? " ef" : "", o.op == ReduceOp::kAvg ? "avg" : "sum", o.in_place ? " in-place" : "", o.kind,
                o.chunk_bytes);
  const size_t P = static_cast<size_t>(p);
  std::vector<std::vector<std::vector<float>>> host_out(kSteps, std::vector<std::vector<float>>(P)),
      dev_out(kSteps, std::vector<std::vector<float>>(P));
  std::vector<std::vector<float>> host_res(P), dev_res(P), host_owner(P), dev_owner(P);
  std::vector<uint64_t> host_step(P), dev_step(P);
  const long failures_before = g_failures.load();
  auto grad = [&](int step, int r) {
    return gradient(n, static_cast<uint64_t>(1000 * step + r + 1) * (n + 1), o.kind);
  };
  {
    Comms comms = make_group(p, o.chunk_bytes, o.node_of, o.inter);
    on_ranks(comms, [&](Communicator& c, int r) {
      auto codec = Codec::create(k.spec);
      if (!codec.is_ok()) return fail(std::string(label) + ": " + codec.status().to_string());
      // Where the policy goes dense (Algo::kAuto on a small buffer), the device runs its dense
      // float32 all-reduce: without NCCL the device scatter-reduce with codec "none", whose
      // rank-order sums are the host scatter-reduce's with "none" (not the ring's order). EF
      // is left alone by both.
      const bool dense = coll::dense_algorithm(c.choose_algo(n, DType::kFloat32, codec.value().get(), k.algo));
      ErrorFeedback ef(n);
      for (int step = 0; step < kSteps; ++step) {
        std::vector<float> g = grad(step, r);
        std::vector<float> out(n, -7.0f);
        float* dst = o.in_place ? g.data() : out.data();
        OK_OR_FAIL(label, dense ? c.allreduce(g.data(), dst, n, DType::kFloat32, o.op, g_none.get(), nullptr,
                                              Algo::kScatterReduce)
                                : c.allreduce(g.data(), dst, n, DType::kFloat32, o.op, codec.value().get(),
                                              o.with_ef ? &ef : nullptr, k.algo));
        host_out[step][r] = o.in_place ? g : out;
      }
      host_res[r].assign(ef.residual(), ef.residual() + n);
      const size_t on = ef.owner_count();
      const float* owner = ef.owner_residual(on);
      host_owner[r].assign(owner, owner + on);
      host_step[r] = ef.step();
    });
  }
  {
    Comms comms = make_group(p, o.chunk_bytes, o.node_of, o.inter);
    on_ranks(comms, [&](Communicator& c, int r) {
      auto codec = Codec::create(k.spec);
      if (!codec.is_ok()) return fail(std::string(label) + ": " + codec.status().to_string());
      auto ef = kern::DeviceResidual::create(n);
      if (!ef.is_ok()) return fail(std::string(label) + ": DeviceResidual::create: " + ef.status().to_string());
      RankStream stream;
      DevBuf<float> g(n), out(n);
      for (int step = 0; step < kSteps; ++step) {
        if (step == 1) {
          g.upload_on(stream.s, grad(step, r));  // the call on the caller's stream must wait for it
        } else {
          g.upload(grad(step, r));
        }
        out.fill(0x7F);
        float* dst = o.in_place ? g.data() : out.data();
        OK_OR_FAIL(label,
                   c.allreduce_device(g.data(), dst, n, DType::kFloat32, o.op, codec.value().get(),
                                      o.with_ef ? ef.value().get() : nullptr, k.algo, step == 1 ? stream.s : nullptr));
        dev_out[step][r] = o.in_place ? g.download() : out.download();
        if (!o.node_of.empty() && c.stats()->last_algo != Algo::kHierarchical) {
          return fail(std::string(label) + ": the device call ran " + algo_name(c.stats()->last_algo));
        }
      }
      dev_res[r].resize(n);
      OK_OR_FAIL(label, ef.value()->copy_out(dev_res[r].data(), n));
      dev_step[r] = ef.value()->step();
      // The owner residual, when this rank's host run made one (scatter_reduce with EF).
      const size_t on = host_owner[r].size();
      if (o.with_ef && on > 0) {
        auto owner = ef.value()->owner_residual(on);
        if (!owner.is_ok()) return fail(std::string(label) + ": owner_residual: " + owner.status().to_string());
        dev_owner[r].resize(on);
        cudaMemcpy(dev_owner[r].data(), owner.value(), on * sizeof(float), cudaMemcpyDeviceToHost);
      }
    });
  }
  if (g_failures.load() != failures_before) return;  // a call failed: its results mean nothing
  compare_twins(label, "step", p, dev_out, host_out);
  if (o.with_ef) compare_twin_ef(label, p, dev_res, host_res, dev_owner, host_owner, dev_step, host_step);
}

// Finite float16 bit patterns (no inf or NaN: exponent field below 31).
std::vector<uint16_t> halves(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) {
    const auto sign = static_cast<uint16_t>((rng() & 1) << 15);
    const auto exp = static_cast<uint16_t>((rng() % 24) << 10);  // modest magnitudes: sums stay finite
    h[i] = static_cast<uint16_t>(sign | exp | (rng() & 0x3ff));
  }
  return h;
}

// No codec (no NCCL here): float32, in place and not, against the host scatter-reduce with
// codec "none"; float16 through pinned staging against the host ring; same inputs.
void compare_dense(int p, size_t n, size_t chunk_bytes) {
  char label[128];
  std::snprintf(label, sizeof label, "dense p=%d n=%zu chunk=%zu", p, n, chunk_bytes);
  const size_t P = static_cast<size_t>(p);
  std::vector<std::vector<float>> host_f(P), dev_f(P), dev_f_inplace(P);
  std::vector<std::vector<uint16_t>> host_h(P), dev_h(P);
  const long failures_before = g_failures.load();
  auto in_f = [&](int r, int step) {
    return gradient(n, 77 + static_cast<uint64_t>(r) * 5 + static_cast<uint64_t>(step), 0);
  };
  {
    Comms comms = make_group(p, chunk_bytes);
    on_ranks(comms, [&](Communicator& c, int r) {
      // Without NCCL a dense float32 device all-reduce is the device scatter-reduce with codec
      // "none" (collectives/algorithms/device/device_dense.cpp): its reference is the host one, not the ring.
      std::vector<float> x = in_f(r, 0), out(n, -1.0f);
      OK_OR_FAIL(label, c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kAvg, g_none.get(), nullptr,
                                    Algo::kScatterReduce));
      host_f[r] = out;
      std::vector<uint16_t> h = halves(n, 5 + static_cast<uint64_t>(r));
      OK_OR_FAIL(label,
                 c.allreduce(h.data(), h.data(), n, DType::kFloat16, ReduceOp::kSum, nullptr, nullptr, Algo::kRing));
      host_h[r] = h;
    });
  }
  {
    Comms comms = make_group(p, chunk_bytes);
    on_ranks(comms, [&](Communicator& c, int r) {
      RankStream stream;
      DevBuf<float> x(n), out(n);
      x.upload(in_f(r, 0));
      out.fill(0x7F);
      OK_OR_FAIL(label, c.allreduce_device(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kAvg, nullptr, nullptr,
                                           Algo::kAuto, stream.s));
      dev_f[r] = out.download();
      OK_OR_FAIL(label, c.allreduce_device(x.data(), x.data(), n, DType::kFloat32, ReduceOp::kAvg, nullptr, nullptr,
                                           Algo::kRing, nullptr));
      dev_f_inplace[r] = x.download();
      DevBuf<uint16_t> h(n);
      h.upload(halves(n, 5 + static_cast<uint64_t>(r)));
      OK_OR_FAIL(label, c.allreduce_device(h.data(), h.data(), n, DType::kFloat16, ReduceOp::kSum, nullptr, nullptr,
                                           Algo::kAuto, nullptr));
      dev_h[r] = h.download();
    });
  }
  if (g_failures.load() != failures_before) return;
  for (int r = 0; r < p; ++r) {
    const std::string who = std::string(label) + " rank " + std::to_string(r);
    compare_floats(who + " f32", dev_f[r], host_f[r]);
    compare_floats(who + " f32 in place", dev_f_inplace[r], host_f[r]);
    ++g_checks;
    size_t i = 0;
    if (dev_h[r].size() != host_h[r].size() ||
        !same_bits(dev_h[r].data(), host_h[r].data(), host_h[r].size() * 2, 2, &i)) {
      fail(who + " f16: element " + std::to_string(i) + " differs");
    }
  }
}

uint8_t pattern(size_t i, int r) { return static_cast<uint8_t>(i * 3 + static_cast<size_t>(r) * 101 + (i >> 8)); }

// allgather_device and broadcast_device (every root) against the pattern each rank wrote.
void check_allgather_broadcast(int p, size_t bytes) {
  char label[128];
  std::snprintf(label, sizeof label, "allgather/broadcast p=%d bytes=%zu", p, bytes);
  Comms comms = make_group(p);
  on_ranks(comms, [&](Communicator& c, int r) {
    RankStream stream;
    DevBuf<uint8_t> mine(bytes), all(bytes * static_cast<size_t>(p));
    std::vector<uint8_t> v(bytes);
    for (size_t i = 0; i < bytes; ++i) v[i] = pattern(i, r);
    mine.upload(v);
    all.fill(0x5A);
    OK_OR_FAIL(label, c.allgather_device(mine.data(), all.data(), bytes, stream.s));
    const std::vector<uint8_t> got = all.download();
    ++g_checks;
    for (int q = 0; q < p; ++q) {
      for (size_t i = 0; i < bytes; ++i) {
        if (got[static_cast<size_t>(q) * bytes + i] != pattern(i, q)) {
          return fail(std::string(label) + " rank " + std::to_string(r) + ": allgather block " + std::to_string(q) +
                      " byte " + std::to_string(i));
        }
      }
    }
    for (int root = 0; root < p; ++root) {
      DevBuf<uint8_t> buf(bytes);
      std::vector<uint8_t> w(bytes, 0);
      if (r == root)
        for (size_t i = 0; i < bytes; ++i) w[i] = pattern(i, 1000 + root);
      buf.upload(w);
      OK_OR_FAIL(label, c.broadcast_device(buf.data(), bytes, root, root % 2 == 0 ? nullptr : stream.s));
      const std::vector<uint8_t> b = buf.download();
      ++g_checks;
      for (size_t i = 0; i < bytes; ++i) {
        if (b[i] != pattern(i, 1000 + root)) {
          return fail(std::string(label) + " rank " + std::to_string(r) + ": broadcast from " + std::to_string(root) +
                      " byte " + std::to_string(i));
        }
      }
    }
  });
}

// DeviceEncoder::encode (with a DeviceResidual, as gw_encode_device runs it) and
// decode_device against Codec::encode (with an ErrorFeedback) and gw::decode: the same message
// bytes, residual bits and decoded bits in every mode, over two steps; a forged or truncated
// message is refused with dst untouched.
void check_codec_api(const char* spec, size_t n) {
  char label[160];
  std::snprintf(label, sizeof label, "codec api %s n=%zu", spec, n);
  auto hc = Codec::create(spec);
  auto dc = Codec::create(spec);
  if (!hc.is_ok() || !dc.is_ok()) return fail(std::string(label) + ": bad spec");
  Codec& host_codec = *hc.value();
  const size_t cap = host_codec.max_encoded_bytes(n, DType::kFloat32);
  ErrorFeedback host_ef(n);
  auto dev_ef = kern::DeviceResidual::create(n);
  if (!dev_ef.is_ok()) return fail(std::string(label) + ": " + dev_ef.status().to_string());
  kern::DeviceEncoder enc(*dc.value());
  RankStream stream;
  DevBuf<float> src(n), dst(n);
  DevBuf<uint8_t> msg(cap);
  for (int step = 0; step < 2; ++step) {
    const std::string at = std::string(label) + " step " + std::to_string(step);
    const std::vector<float> g = gradient(n, 4242 + static_cast<uint64_t>(step), step);
    const EncodeContext ctx{static_cast<uint64_t>(step) * 7 + 1, 3};
    std::vector<uint8_t> hmsg(cap);
    auto hl = host_codec.encode(g.data(), n, ctx, host_ef, hmsg.data(), cap);
    if (!hl.is_ok()) return fail(at + ": host encode: " + hl.status().to_string());
    hmsg.resize(hl.value());
    src.upload(g);
    msg.fill(0xEE);
    Result<kern::EncodedSize> dl = internal_error("not run");
    {
      emu::HotPath hot("DeviceEncoder::encode");
      dl = enc.encode(src.data(), n, DType::kFloat32, ctx, dev_ef.value().get(), msg.data(), cap, stream.s);
    }
    if (!dl.is_ok()) return fail(at + ": device encode: " + dl.status().to_string());
    ++g_checks;
    finish(stream.s);
    std::vector<uint8_t> dmsg = msg.download();
    auto exact = wire::encoded_length(dmsg.data(), dl.value().bytes);
    if (!exact.is_ok()) return fail(at + ": " + exact.status().to_string());
    if (dl.value().exact && exact.value() != dl.value().bytes) fail(at + ": an exact length differs from the header's");
    dmsg.resize(exact.value());
    if (dmsg != hmsg) {
      size_t i = 0;
      while (i < dmsg.size() && i < hmsg.size() && dmsg[i] == hmsg[i]) ++i;
      return fail(at + ": message differs at byte " + std::to_string(i) + " (device " + std::to_string(dmsg.size()) +
                  " bytes, host " + std::to_string(hmsg.size()) + ")");
    }
    std::vector<float> res(n);
    OK_OR_FAIL(at.c_str(), dev_ef.value()->copy_out(res.data(), n));
    compare_floats(at + " residual", res, std::vector<float>(host_ef.residual(), host_ef.residual() + n));
    ++g_checks;
    if (dev_ef.value()->step() != host_ef.step()) fail(at + ": EF step differs");
    // Decode in every mode onto the same prior contents.
    const std::vector<float> prior = gradient(n, 99, 0);
    for (DecodeMode mode : {DecodeMode::kOverwrite, DecodeMode::kAccumulate, DecodeMode::kSubtract}) {
      std::vector<float> want = prior;
      OK_OR_FAIL(at.c_str(), decode(hmsg.data(), hmsg.size(), want.data(), n, DType::kFloat32, mode));
      dst.upload(prior);
      {
        // One round trip: a copy of the verdict into pageable memory, then the stream's sync.
        emu::HotPath hot("decode_device", 2);
        OK_OR_FAIL(at.c_str(),
                   kern::decode_device(msg.data(), dmsg.size(), dst.data(), n, DType::kFloat32, mode, stream.s));
      }
      finish(stream.s);
      compare_floats(at + " decode mode " + std::to_string(static_cast<int>(mode)), dst.download(), want);
    }
    // Refusals: truncated, and (sparse) an index past the end or repeated; dst stays untouched.
    std::vector<std::vector<uint8_t>> bad;
    if (dmsg.size() > 1) bad.emplace_back(dmsg.begin(), dmsg.end() - 1);
    const CodecId id = host_codec.id();
    if ((id == CodecId::kTopk || id == CodecId::kDgc) && dmsg.size() > 56) {
      // u32 indices (count <= 2^32), then values: k = payload / 8.
      const size_t k = (dmsg.size() - 56) / 8;
      std::vector<uint8_t> past = dmsg;  // the last index = count
      const auto count = static_cast<uint32_t>(n);
      std::memcpy(past.data() + 56 + 4 * (k - 1), &count, 4);
      bad.push_back(past);
      if (k >= 2) {
        std::vector<uint8_t> repeat = dmsg;  // the first index repeated: not strictly increasing
        std::memcpy(repeat.data() + 60, repeat.data() + 56, 4);
        bad.push_back(repeat);
      }
    }
    for (const auto& b : bad) {
      DevBuf<uint8_t> m(b.size());
      m.upload(b);
      dst.upload(prior);
      ++g_checks;
      const bool host_ok =
          decode(b.data(), b.size(), std::vector<float>(n).data(), n, DType::kFloat32, DecodeMode::kOverwrite).is_ok();
      const Status st =
          kern::decode_device(m.data(), b.size(), dst.data(), n, DType::kFloat32, DecodeMode::kAccumulate, stream.s);
      if (host_ok) {
        fail(at + ": the host decodes a forged message (" + std::to_string(b.size()) + " bytes): harness error");
      } else if (st.is_ok()) {
        fail(at + ": decode_device accepts a forged message (" + std::to_string(b.size()) + " bytes)");
      } else {
        finish(stream.s);
        compare_floats(at + " dst after a refused message", dst.download(), prior);
      }
    }
  }
}

// One DeviceEncoder (as one gw_codec_t) encoding on two streams from two threads at once: each
// call's scratch is its own, so each message is the host's. (With scratch shared by the
// encoder, the interleaved launches overwrote each other's selection state.)
void check_concurrent_streams() {
  for (const char* spec : {"topk:ratio=0.01", "dgc:ratio=0.01", "qsgd:bits=4,bucket=128", "sign"}) {
    auto codec = Codec::create(spec);
    if (!codec.is_ok()) return fail(std::string("concurrent: ") + codec.status().to_string());
    kern::DeviceEncoder enc(*codec.value());
    constexpr int kThreads = 2;
    constexpr size_t kN = 20011;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        auto host = Codec::create(spec).value();
        const size_t cap = host->max_encoded_bytes(kN, DType::kFloat32);
        RankStream stream;
        DevBuf<float> src(kN);
        DevBuf<uint8_t> msg(cap);
        for (int i = 0; i < 3; ++i) {
          const std::string at =
              std::string("concurrent ") + spec + " thread " + std::to_string(t) + " call " + std::to_string(i);
          const std::vector<float> g = gradient(kN, 77 + 10 * static_cast<uint64_t>(t) + static_cast<uint64_t>(i), t);
          const EncodeContext ctx{static_cast<uint64_t>(i), static_cast<uint32_t>(t)};
          std::vector<uint8_t> want(cap);
          auto hl = host->encode(g.data(), kN, DType::kFloat32, ctx, want.data(), cap);
          if (!hl.is_ok()) return fail(at + ": host encode: " + hl.status().to_string());
          want.resize(hl.value());
          src.upload(g);
          auto dl = enc.encode(src.data(), kN, DType::kFloat32, ctx, nullptr, msg.data(), cap, stream.s);
          if (!dl.is_ok()) return fail(at + ": device encode: " + dl.status().to_string());
          finish(stream.s);
          std::vector<uint8_t> got = msg.download();
          auto exact = wire::encoded_length(got.data(), dl.value().bytes);
          if (!exact.is_ok()) return fail(at + ": " + exact.status().to_string());
          got.resize(exact.value());
          ++g_checks;
          if (got != want) fail(at + ": the message differs from the host's");
        }
      });
    }
    for (auto& th : threads) th.join();
  }
}

// Collectives in steady state only enqueue and poll: after a first call (which grows the
// pinned staging and the owner residual), every call on every rank runs with no call that
// waits for the device, on any thread.
void check_steady_state_waits() {
  for (const Case& k : {Case{"qsgd:bits=8", Algo::kScatterReduce}, Case{"topk:ratio=0.01", Algo::kSparseAllgather},
                        Case{"dgc:ratio=0.01", Algo::kSparseAllgather}, Case{"dgc:ratio=0.01", Algo::kScatterReduce},
                        Case{"sign", Algo::kScatterReduce}}) {
    for (int p : {2, 3}) {
      constexpr size_t kN = 20011;
      Comms comms = make_group(p);
      std::vector<std::unique_ptr<kern::DeviceResidual>> efs(static_cast<size_t>(p));
      std::vector<std::unique_ptr<DevBuf<float>>> bufs(static_cast<size_t>(p));
      auto codec = Codec::create(k.spec);
      if (!codec.is_ok()) return fail(std::string("steady state: ") + codec.status().to_string());
      auto step = [&](Communicator& c, int r) {
        const size_t i = static_cast<size_t>(r);
        bufs[i]->upload(gradient(kN, 5 + static_cast<uint64_t>(r), 0));
        ++g_checks;
        OK_OR_FAIL((std::string("steady state ") + k.spec).c_str(),
                   c.allreduce_device(bufs[i]->data(), bufs[i]->data(), kN, DType::kFloat32, ReduceOp::kAvg,
                                      codec.value().get(), efs[i].get(), k.algo, nullptr));
      };
      on_ranks(comms, [&](Communicator& c, int r) {
        const size_t i = static_cast<size_t>(r);
        auto ef = kern::DeviceResidual::create(kN);
        if (!ef.is_ok()) return fail("steady state: " + ef.status().to_string());
        efs[i] = std::move(ef).value();
        bufs[i] = std::make_unique<DevBuf<float>>(kN);
        step(c, r);
      });
      emu::HotPath hot((std::string("a steady-state all-reduce, ") + k.spec).c_str());
      on_ranks(comms, step);
      on_ranks(comms, step);
    }
  }
}

// The CUDA backend's own refusals: host memory and pinned staging are not device memory.
void check_refusals() {
  Comms comms = make_group(2);
  on_ranks(comms, [&](Communicator& c, int) {
    auto codec = Codec::create("qsgd:bits=4");
    if (!codec.is_ok()) return fail("refusals: " + codec.status().to_string());
    DevBuf<float> x(64);
    x.upload(std::vector<float>(64, 1.0f));
    std::vector<float> host(64, 1.0f);
    void* pinned = nullptr;
    cudaHostAlloc(&pinned, 64 * sizeof(float), cudaHostAllocDefault);
    struct {
      const char* what;
      const void* send;
      void* recv;
    } bad[] = {{"host sendbuf", host.data(), x.data()},
               {"host recvbuf", x.data(), host.data()},
               {"pinned sendbuf", pinned, x.data()}};
    for (const auto& b : bad) {
      ++g_checks;
      const Status s = c.allreduce_device(b.send, b.recv, 64, DType::kFloat32, ReduceOp::kSum, codec.value().get(),
                                          nullptr, Algo::kScatterReduce, nullptr);
      if (s.code() != Code::kInvalidArgument) fail(std::string("refusals: ") + b.what + " -> " + s.to_string());
    }
    ++g_checks;
    const Status s = c.broadcast_device(host.data(), 16, 0, nullptr);
    if (s.code() != Code::kInvalidArgument) fail("refusals: host broadcast buf -> " + s.to_string());
    cudaFreeHost(pinned);
    // Still usable.
    ++g_checks;
    OK_OR_FAIL("refusals", c.allreduce_device(x.data(), x.data(), 64, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                              Algo::kAuto, nullptr));
    if (x.download()[63] != 2.0f) fail("refusals: the communicator's next all-reduce is wrong");
  });
}

}  // namespace

// The hierarchical all-reduce (staged legs inside a node: no NCCL here) on 2x2 and 3x2:
// with two ranks a node every sum inside a node is a + b, the same bits in either order.
long compare_hierarchical() {
  long runs = 0;
  for (const auto& node_of : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1, 1, 2, 2}}) {
    const int p = static_cast<int>(node_of.size());
    for (size_t n : {size_t{1}, size_t{7}, size_t{4097}, size_t{20011}}) {
      compare_allreduce(p, n, Case{"qsgd:bits=4,bucket=128", Algo::kHierarchical},
                        Options{true, ReduceOp::kAvg, false, 0, 4096, node_of, Algo::kScatterReduce});
      compare_allreduce(p, n, Case{"topk:ratio=0.05", Algo::kHierarchical},
                        Options{true, ReduceOp::kSum, n == 4097, 1, 4096, node_of, Algo::kSparseAllgather});
      compare_allreduce(p, n, Case{"sign:bucket=256", Algo::kHierarchical},
                        Options{false, ReduceOp::kSum, true, 0, 4100, node_of, Algo::kScatterReduce});
      runs += 3;
    }
  }
  return runs;
}

// A piece of a call cut into pieces (Context::piece > 0, as the host hierarchical
// all-reduce's node pipeline runs its inter-node leg) keys its random streams by piece: the
// device twins, called directly with the same Context, must draw the same words as the host
// algorithms (the schedules in collectives/algorithms/schedules/). Piece 0 is a flat call.
void compare_piece(int p, size_t n, const char* spec, Algo algo, uint32_t piece, bool with_ef) {
  constexpr int kCalls = 3;
  char label[256];
  std::snprintf(label, sizeof label, "twins %s %s p=%d n=%zu piece=%u%s", spec, algo_name(algo), p, n, piece,
                with_ef ? " ef" : "");
  const size_t P = static_cast<size_t>(p);
  std::vector<std::vector<std::vector<float>>> host_out(kCalls, std::vector<std::vector<float>>(P)),
      dev_out(kCalls, std::vector<std::vector<float>>(P));
  std::vector<std::vector<float>> host_res(P), dev_res(P), host_owner(P), dev_owner(P);
  std::vector<uint64_t> host_step(P), dev_step(P);
  const long failures_before = g_failures.load();
  auto grad = [&](int call, int r) { return gradient(n, static_cast<uint64_t>(1000 * call + r + 1) * (n + 1), 0); };
  auto run_group = [&](const std::function<void(transport::Transport&, int)>& fn) {
    auto group = transport::make_local_group(p);
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) threads.emplace_back([&, r] { fn(*group[static_cast<size_t>(r)], r); });
    for (auto& t : threads) t.join();
  };
  auto context = [&](transport::Transport& tp, coll::Scratch& scratch, int call) {
    coll::Context c{tp,
                    tp.rank(),
                    tp.size(),
                    transport::Clock::now() + std::chrono::seconds(60),
                    40 + static_cast<uint64_t>(call),
                    4096,
                    scratch};
    c.piece = piece;
    return c;
  };
  // A failed rank aborts its own transport only: its peers then fail too (kAborted or a
  // timeout), and every failure is reported.
  run_group([&](transport::Transport& tp, int r) {
    auto codec = Codec::create(spec);
    if (!codec.is_ok()) return fail(std::string(label) + ": " + codec.status().to_string());
    coll::Scratch scratch;
    ErrorFeedback ef(n);
    for (int call = 0; call < kCalls; ++call) {
      coll::Context c = context(tp, scratch, call);
      std::vector<float> g = grad(call, r), out(n, -7.0f);
      ErrorFeedback* e = with_ef ? &ef : nullptr;
      const Status s =
          algo == Algo::kSparseAllgather
              ? coll::sparse_allgather_allreduce(c, g.data(), out.data(), n, ReduceOp::kAvg, *codec.value(), e)
              : coll::scatter_reduce_allreduce(c, g.data(), out.data(), n, ReduceOp::kAvg, *codec.value(), e);
      if (!s.is_ok()) {
        tp.abort(s);
        return fail(std::string(label) + ": host: " + s.to_string());
      }
      host_out[call][r] = out;
    }
    host_res[r].assign(ef.residual(), ef.residual() + n);
    host_owner[r].assign(ef.owner_residual(), ef.owner_residual() + ef.owner_count());
    host_step[r] = ef.step();
  });
  run_group([&](transport::Transport& tp, int r) {
    auto codec = Codec::create(spec);
    if (!codec.is_ok()) return fail(std::string(label) + ": " + codec.status().to_string());
    auto dev = coll::make_cuda_backend();
    if (!dev.is_ok()) return fail(std::string(label) + ": make_cuda_backend: " + dev.status().to_string());
    auto ef = kern::DeviceResidual::create(n);
    if (!ef.is_ok()) return fail(std::string(label) + ": DeviceResidual::create: " + ef.status().to_string());
    coll::Scratch scratch;
    DevBuf<float> g(n), out(n);
    for (int call = 0; call < kCalls; ++call) {
      coll::Context c = context(tp, scratch, call);
      g.upload(grad(call, r));
      out.fill(0x7F);
      DeviceEfState* e = with_ef ? ef.value().get() : nullptr;
      auto mark = dev.value()->mark(nullptr);
      Status s = mark.is_ok() ? dev.value()->begin(*mark.value()) : mark.status();
      if (s.is_ok()) {
        s = algo == Algo::kSparseAllgather
                ? coll::device_sparse_allgather_allreduce(c, *dev.value(), g.data(), out.data(), n, ReduceOp::kAvg,
                                                          *codec.value(), e)
                : coll::device_scatter_reduce_allreduce(c, *dev.value(), g.data(), out.data(), n, ReduceOp::kAvg,
                                                        *codec.value(), e);
      }
      if (!s.is_ok()) {
        dev.value()->quiesce();
        tp.abort(s);
        return fail(std::string(label) + ": device: " + s.to_string());
      }
      dev_out[call][r] = out.download();
    }
    dev_res[r].resize(n);
    OK_OR_FAIL(label, ef.value()->copy_out(dev_res[r].data(), n));
    dev_owner[r].resize(ef.value()->owner_count());
    OK_OR_FAIL(label, ef.value()->copy_owner_out(dev_owner[r].data(), dev_owner[r].size()));
    dev_step[r] = ef.value()->step();
  });
  if (g_failures.load() != failures_before) return;
  compare_twins(label, "call", p, dev_out, host_out);
  compare_twin_ef(label, p, dev_res, host_res, dev_owner, host_owner, dev_step, host_step);
}

long compare_pieces() {
  long runs = 0;
  for (uint32_t piece : {0u, 1u, 6u}) {
    for (int p : {2, 3}) {
      compare_piece(p, 4097, "qsgd:bits=4,bucket=128,rounding=stochastic", Algo::kScatterReduce, piece, true);
      compare_piece(p, 4097, "randomk:ratio=0.05,seed=3", Algo::kScatterReduce, piece, false);
      compare_piece(p, 4097, "randomk:ratio=0.05,seed=3", Algo::kSparseAllgather, piece, true);
      compare_piece(p, 4097, "qsgd:bits=2,bucket=128,rounding=stochastic", Algo::kSparseAllgather, piece, false);
      runs += 4;
    }
  }
  return runs;
}

// Deferred streams only: with the backend's wait for the caller's stream skipped
// (kern::testing_hooks), the call on the caller's stream must read the previous step's input
// and the comparison must fail, or the harness could not see that wait go missing.
void check_missing_caller_wait_is_caught() {
  const long before = g_failures.load();
  std::fprintf(stderr, "missing caller-stream wait (the failures printed next are expected):\n");
  kern::testing_hooks::skip_caller_wait.store(true);
  compare_allreduce(2, 4097, Case{"qsgd:bits=8,bucket=512", Algo::kScatterReduce}, Options{});
  kern::testing_hooks::skip_caller_wait.store(false);
  const long seen = g_failures.load() - before;
  g_failures.store(before);
  ++g_checks;
  if (seen == 0)
    fail("with the caller-stream wait skipped the device results still matched: the harness cannot see it");
  std::fprintf(stderr, "missing caller-stream wait: caught (%ld expected failures)\n", seen);
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
  if (argc > 1 && std::strcmp(argv[1], "hierarchical") == 0) {  // that part alone
    setenv("GW_TUNE", "0", 1);
    emu::g_strict_memory = true;
    const long runs = compare_hierarchical();
    std::printf("%ld hierarchical comparisons, %ld checks, %ld failures\n", runs, g_checks.load(), g_failures.load());
    return g_failures.load() == 0 ? 0 : 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "pieces") == 0) {  // that part alone
    emu::g_strict_memory = true;
    const long runs = compare_pieces();
    std::printf("%ld twin comparisons on pieces, %ld checks, %ld failures\n", runs, g_checks.load(), g_failures.load());
    return g_failures.load() == 0 ? 0 : 1;
  }
  setenv("GW_TUNE", "0", 1);  // the static policy on both sides for Algo::kAuto (no timing-dependent choice)
  emu::g_strict_memory = true;
  const auto t0 = std::chrono::steady_clock::now();
  long runs = 0;
  auto progress = [&](const char* what) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "%6.1f s  %s: %ld checks, %ld failures\n", s, what, g_checks.load(), g_failures.load());
  };

  // Every codec and algorithm, with EF, averaged, over rank counts and sizes.
  std::vector<int> ranks = {1, 2, 3, 4};
  std::vector<size_t> sizes = {0, 1, 7, 4097, 20011};
  if (!quick) {
    ranks.push_back(5);
    sizes.push_back(70001);
  }
  for (int p : ranks) {
    for (size_t n : sizes) {
      for (const Case& k : kCases) {
        compare_allreduce(p, n, k, Options{});
        ++runs;
      }
    }
    progress(("ef avg p=" + std::to_string(p)).c_str());
  }
  // Without EF, summed, in place, and inputs with ties and zeros.
  for (int p : {2, 3}) {
    for (const Case& k : kCases) {
      compare_allreduce(p, 3001, k, Options{false, ReduceOp::kSum, p == 3, 0});
      compare_allreduce(p, 5003, k, Options{true, ReduceOp::kSum, false, 1});
      runs += 2;
    }
  }
  // Odd chunk sizes: message slots whose size is not a multiple of 8.
  for (int p : {2, 3}) {
    for (const Case& k : kCases) {
      compare_allreduce(p, 20011, k, Options{true, ReduceOp::kAvg, false, 0, 4100});
      ++runs;
    }
  }
  // The static policy's choice (GW_TUNE=0): a small compressed call goes dense, a larger one
  // takes the policy's algorithm.
  for (int p : {2, 3}) {
    compare_allreduce(p, 1000, Case{"qsgd:bits=8", Algo::kAuto}, Options{});
    compare_allreduce(p, 30000, Case{"topk:ratio=0.01", Algo::kAuto}, Options{});
    runs += 2;
  }
  runs += compare_hierarchical();
  runs += compare_pieces();
  progress("no-ef, sum, in place, ties, auto, hierarchical, pieces");
  for (int p : {1, 2, 3, 4}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{20011}}) {
      compare_dense(p, n, 4096);
      compare_dense(p, n, 4100);
    }
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{1031}, size_t{70001}}) check_allgather_broadcast(p, bytes);
  }
  for (const Case& k : kCases) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}}) check_codec_api(k.spec, n);
  }
  for (const char* spec : {"none", "bf16"}) check_codec_api(spec, 4097);
  check_refusals();
  if (emu::g_defer) check_missing_caller_wait_is_caught();
  check_concurrent_streams();
  check_steady_state_waits();
  progress("dense, allgather, broadcast, codec api, refusals, concurrent streams, steady-state waits");

  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%ld all-reduce comparisons, %ld checks, %ld failures, %ld kernel launches, %ld device allocations, %.0f s\n",
      runs, g_checks.load(), g_failures.load(), emu::g_launches, emu::g_allocs, s);
  return g_failures.load() == 0 ? 0 : 1;
}
