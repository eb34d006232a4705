// Device codecs against the host codecs: the same input, seed, step and rank must give the
// same message bytes, the same error-feedback residual and the same decoded floats, bit for
// bit. Inputs are fresh each run (the seed is printed; GW_TEST_SEED repeats a run). Without
// a usable GPU every test here is skipped with the CUDA runtime's reason, never passed, and
// fails instead under GW_REQUIRE_GPU=1 (scripts/gpu-check.sh). Copies are pinned and
// asynchronous on the test's stream (pinned_copy.hpp), and the main tests run on a blocking
// and on a non-blocking stream (DeviceCodecsOnStream.<test>/Blocking, /NonBlocking), so a
// missing wait on the caller's stream is not hidden by the legacy stream's synchronisation.
// DeviceCodecsOnStream.Quick* is short enough for compute-sanitizer; the 2^31-element test
// runs only with GW_TEST_2POW31=1.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gradwire/gradwire.h"
#include "tests/gpu/pinned_copy.hpp"
#include "tests/gpu/require_gpu.hpp"
#include "tests/test_util.hpp"

namespace {

uint64_t run_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("GW_TEST_SEED")) return std::strtoull(s, nullptr, 0);
    std::random_device rd;
    return static_cast<uint64_t>(rd()) << 32 | rd();
  }();
  return seed;
}

using gw::testing::PinnedCopier;

// Device memory whose uploads and downloads go through `io` on its stream.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(size_t count, PinnedCopier& io) : count_(count), io_(io) {
    EXPECT_EQ(cudaMalloc(&ptr_, count > 0 ? count * sizeof(T) : 1), cudaSuccess);
  }
  ~DeviceBuffer() {
    cudaStreamSynchronize(io_.stream());  // work queued on the stream may still use it
    cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return static_cast<T*>(ptr_); }
  // Queued on the stream, not waited for.
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), count_);
    ASSERT_EQ(io_.upload(ptr_, v.data(), count_ * sizeof(T)), cudaSuccess);
  }
  // After the work queued on the stream.
  std::vector<T> download(size_t count) {
    std::vector<T> v(count);
    EXPECT_EQ(io_.download(v.data(), ptr_, count * sizeof(T)), cudaSuccess);
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t count_;
  PinnedCopier& io_;
};

enum class StreamKind { kBlocking, kNonBlocking };

class DeviceCodecs : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (gw_cuda_device_count(&count) != GW_SUCCESS || count == 0) {
      GW_SKIP_OR_FAIL_WITHOUT_GPU(gw_get_last_error());
    }
    const unsigned flags = kind() == StreamKind::kNonBlocking ? cudaStreamNonBlocking : cudaStreamDefault;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, flags), cudaSuccess);
    io_ = std::make_unique<PinnedCopier>(stream_);
    std::printf("seed %llu (GW_TEST_SEED repeats it)\n", static_cast<unsigned long long>(run_seed()));
  }
  void TearDown() override {
    io_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  virtual StreamKind kind() const { return StreamKind::kBlocking; }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<PinnedCopier> io_;
};

// The caller's stream blocking (it waits for the legacy stream, and the legacy stream for it)
// or non-blocking (ordered with nothing but itself).
class DeviceCodecsOnStream : public DeviceCodecs, public ::testing::WithParamInterface<StreamKind> {
 protected:
  StreamKind kind() const override { return GetParam(); }
};

std::string stream_name(const ::testing::TestParamInfo<StreamKind>& info) {
  return info.param == StreamKind::kNonBlocking ? "NonBlocking" : "Blocking";
}
void PrintTo(StreamKind kind, std::ostream* os) {
  *os << (kind == StreamKind::kNonBlocking ? "cudaStreamNonBlocking" : "cudaStreamDefault");
}

struct Codec {
  gw_codec_t c = nullptr;
  explicit Codec(const std::string& spec) { EXPECT_EQ(gw_codec_create(spec.c_str(), &c), GW_SUCCESS) << spec; }
  ~Codec() { gw_codec_destroy(c); }
  size_t cap(size_t n) {
    size_t b = 0;
    EXPECT_EQ(gw_codec_max_encoded_bytes(c, n, GW_FLOAT32, &b), GW_SUCCESS);
    return b;
  }
};

// A heavy-tailed input costs about 50 ns an element on one core: seconds at 64M elements,
// which every codec and stream kind of a run asks for with the same few salts. So large
// inputs are made once per (size, salt), in slices on every core (slice i from its own seed),
// and kept for the run (up to 2^28 elements: the 2^31 case's would take tens of GB).
std::vector<float> input(size_t n, uint64_t salt) {
  const uint64_t seed = run_seed() ^ (salt * 0x9E3779B97F4A7C15ull);
  constexpr size_t kLarge = size_t{1} << 20, kKept = size_t{1} << 28;
  if (n < kLarge) return gw::test::gradient(n, seed);
  static std::mutex mu;
  static std::map<std::pair<size_t, uint64_t>, std::shared_ptr<const std::vector<float>>> kept;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<const std::vector<float>> none;
  auto& slot = n <= kKept ? kept[{n, salt}] : none;
  if (!slot) {
    auto x = std::make_shared<std::vector<float>>(n);
    const size_t slices = std::max<size_t>(1, std::min<size_t>(64, std::thread::hardware_concurrency()));
    const size_t per = (n + slices - 1) / slices;
    std::vector<std::thread> workers;
    for (size_t i = 0; i < slices && i * per < n; ++i) {
      workers.emplace_back([&x, i, per, n, seed] {
        const size_t begin = i * per, len = std::min(per, n - begin);
        const std::vector<float> part = gw::test::gradient(len, seed + 0x632BE59BD9B4E019ull * (i + 1));
        std::copy(part.begin(), part.end(), x->begin() + static_cast<std::ptrdiff_t>(begin));
      });
    }
    for (auto& w : workers) w.join();
    slot = std::move(x);
  }
  return *slot;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::string* where) {
  if (a.size() != b.size()) {
    *where = "sizes differ";
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      *where = "element " + std::to_string(i) + ": host " + std::to_string(a[i]) + " device " + std::to_string(b[i]);
      return false;
    }
  }
  return true;
}

// Bit equality, except that any NaN equals any NaN: a GPU's arithmetic returns the canonical
// NaN where x86 passes an input NaN's payload through (docs/wire-format.md, "NaN").
bool same_floats_nan_equal(const std::vector<float>& a, const std::vector<float>& b, std::string* where) {
  if (a.size() != b.size()) {
    *where = "sizes differ";
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      *where = "element " + std::to_string(i) + ": host " + std::to_string(a[i]) + " device " + std::to_string(b[i]);
      return false;
    }
  }
  return true;
}

std::string first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return "lengths " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return "byte " + std::to_string(i) + " of " + std::to_string(a.size());
  }
  return "";
}

// Encodes x on host and device `steps` times with error feedback (when ef) and compares the
// message and the residual after every step, then decodes the last message both ways in
// every mode onto the same starting destination.
void check_codec(const std::string& spec, size_t n, bool ef, int steps, PinnedCopier& io) {
  SCOPED_TRACE(spec + " n=" + std::to_string(n) + (ef ? " ef" : ""));
  cudaStream_t stream = io.stream();
  Codec codec(spec);
  const size_t cap = codec.cap(n);
  gw_ef_state_t host_ef = nullptr, dev_ef = nullptr;
  if (ef) {
    ASSERT_EQ(gw_ef_state_create(n, &host_ef), GW_SUCCESS);
    ASSERT_EQ(gw_ef_state_create_device(n, &dev_ef), GW_SUCCESS) << gw_get_last_error();
  }
  DeviceBuffer<float> dsrc(n, io);
  DeviceBuffer<uint8_t> dmsg(cap, io);
  std::vector<uint8_t> host_msg(cap);
  std::vector<uint8_t> dev_msg;
  for (int step = 0; step < steps; ++step) {
    const std::vector<float> x = input(n, static_cast<uint64_t>(step) + 1);
    dsrc.upload(x);
    size_t hw = 0, dw = 0;
    ASSERT_EQ(gw_encode(codec.c, x.data(), n, GW_FLOAT32, 100 + step, 3, host_ef, host_msg.data(), cap, &hw),
              GW_SUCCESS)
        << gw_get_last_error();
    ASSERT_EQ(gw_encode_device(codec.c, dsrc.get(), n, GW_FLOAT32, 100 + step, 3, dev_ef, dmsg.get(), cap, &dw, stream),
              GW_SUCCESS)
        << gw_get_last_error();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(hw, dw) << "message lengths differ at step " << step;
    dev_msg = dmsg.download(dw);
    const std::vector<uint8_t> h(host_msg.begin(), host_msg.begin() + static_cast<std::ptrdiff_t>(hw));
    ASSERT_EQ(first_difference(h, dev_msg), "") << "messages differ at step " << step;
    if (ef) {
      std::vector<float> hr(n), dr(n);
      ASSERT_EQ(gw_ef_state_get_residual(host_ef, hr.data(), n), GW_SUCCESS);
      ASSERT_EQ(gw_ef_state_get_residual(dev_ef, dr.data(), n), GW_SUCCESS) << gw_get_last_error();
      std::string where;
      ASSERT_TRUE(same_bits(hr, dr, &where)) << "residuals differ at step " << step << ", " << where;
    }
  }
  gw_ef_state_destroy(host_ef);
  gw_ef_state_destroy(dev_ef);

  const std::vector<float> start = input(n, 999);
  DeviceBuffer<float> ddst(n, io);
  for (gw_decode_mode_t mode : {GW_DECODE_OVERWRITE, GW_DECODE_ACCUMULATE, GW_DECODE_SUBTRACT}) {
    std::vector<float> h = start;
    ASSERT_EQ(gw_decode(dev_msg.data(), dev_msg.size(), h.data(), n, GW_FLOAT32, mode), GW_SUCCESS);
    ddst.upload(start);
    ASSERT_EQ(gw_decode_device(dmsg.get(), dev_msg.size(), ddst.get(), n, GW_FLOAT32, mode, stream), GW_SUCCESS)
        << gw_get_last_error();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::string where;
    ASSERT_TRUE(same_bits(h, ddst.download(n), &where)) << "decode mode " << mode << ": " << where;
  }
}

const std::vector<std::string>& specs() {
  static const std::vector<std::string> s = {"none",
                                             "fp16",
                                             "bf16",
                                             "qsgd:bits=8",
                                             "qsgd:bits=4",
                                             "qsgd:bits=2",
                                             "qsgd:bits=1,rounding=nearest",
                                             "qsgd:bits=8,rounding=nearest",
                                             "qsgd:bits=4,bucket=7",
                                             "qsgd:bits=2,bucket=1000003",
                                             "sign",
                                             "sign:bucket=13",
                                             "sign:bucket=4096",
                                             "topk:ratio=0.01",
                                             "topk:ratio=0.001",
                                             "topk:k=1",
                                             "topk:ratio=1",
                                             "dgc:ratio=0.01",
                                             "dgc:ratio=0.001",
                                             "dgc:ratio=0.3",
                                             "randomk:ratio=0.01",
                                             "randomk:k=1"};
  return s;
}

bool ef_allowed(const std::string& spec) { return spec.rfind("qsgd:bits=1", 0) != 0; }  // 1-bit EF is refused

// Every codec at two small sizes, with and without EF: short enough to run under
// compute-sanitizer (memcheck, racecheck) in well under a minute.
TEST_P(DeviceCodecsOnStream, QuickEveryCodec) {
  for (const std::string& spec : specs()) {
    for (size_t n : {size_t{1}, size_t{4097}}) {
      check_codec(spec, n, false, 1, *io_);
      if (ef_allowed(spec)) check_codec(spec, n, true, 2, *io_);
    }
  }
}

TEST_P(DeviceCodecsOnStream, MatchHostOnAwkwardSizes) {
  for (const std::string& spec : specs()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}, size_t{1000003}}) {
      check_codec(spec, n, false, 2, *io_);
      if (ef_allowed(spec)) check_codec(spec, n, true, 3, *io_);
    }
  }
}

TEST_P(DeviceCodecsOnStream, MatchHostAt64MElements) {
  for (const char* spec : {"qsgd:bits=8", "qsgd:bits=4", "sign", "topk:ratio=0.001", "dgc:ratio=0.001", "fp16"}) {
    check_codec(spec, size_t{64} << 20, true, 2, *io_);
  }
}

// NaN, infinities, signed zeros and long runs of equal magnitudes: where a parallel
// reduction or selection most easily departs from the sequential host order.
TEST_F(DeviceCodecs, MatchHostOnSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> inputs;
  inputs.push_back(std::vector<float>(5000, 0.0f));
  std::vector<float> ties(70001);
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (i % 5 == 0 ? 2.0f : 1.0f);
  inputs.push_back(ties);
  std::vector<float> special = input(9000, 7);
  for (size_t i = 0; i < special.size(); i += 97) special[i] = -0.0f;
  for (size_t i = 13; i < special.size(); i += 301) special[i] = inf;
  for (size_t i = 29; i < special.size(); i += 409) special[i] = -inf;
  for (size_t i = 0; i < special.size(); i += 512) special[i] = nan;  // a NaN first in every bucket
  inputs.push_back(special);
  for (const auto& x : inputs) {
    for (const char* spec : {"qsgd:bits=8", "qsgd:bits=4,bucket=100", "sign:bucket=100", "topk:ratio=0.01", "topk:k=3",
                             "dgc:ratio=0.01", "fp16", "bf16"}) {
      SCOPED_TRACE(std::string(spec) + " special input of " + std::to_string(x.size()));
      Codec codec(spec);
      const size_t n = x.size(), cap = codec.cap(n);
      DeviceBuffer<float> dsrc(n, *io_);
      DeviceBuffer<uint8_t> dmsg(cap, *io_);
      dsrc.upload(x);
      std::vector<uint8_t> h(cap);
      size_t hw = 0, dw = 0;
      ASSERT_EQ(gw_encode(codec.c, x.data(), n, GW_FLOAT32, 5, 1, nullptr, h.data(), cap, &hw), GW_SUCCESS);
      ASSERT_EQ(gw_encode_device(codec.c, dsrc.get(), n, GW_FLOAT32, 5, 1, nullptr, dmsg.get(), cap, &dw, stream_),
                GW_SUCCESS)
          << gw_get_last_error();
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      ASSERT_EQ(hw, dw);
      h.resize(hw);
      const std::vector<uint8_t> d = dmsg.download(dw);
      const bool has_nan = std::any_of(x.begin(), x.end(), [](float v) { return std::isnan(v); });
      if (!has_nan) {
        ASSERT_EQ(first_difference(h, d), "");
        continue;
      }
      // With NaN inputs a computed float field may hold another NaN payload: compare what
      // each message decodes to, and the codes (everything but NaN bits) through that.
      std::vector<float> from_host(n), from_device(n);
      ASSERT_EQ(gw_decode(h.data(), hw, from_host.data(), n, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_SUCCESS);
      ASSERT_EQ(gw_decode(d.data(), dw, from_device.data(), n, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_SUCCESS);
      std::string where;
      ASSERT_TRUE(same_floats_nan_equal(from_host, from_device, &where)) << where;
    }
  }
}

TEST_P(DeviceCodecsOnStream, HalfPrecisionInputsAndDestinations) {
  const size_t n = 4099;
  for (const char* spec : {"none", "fp16", "bf16"}) {
    for (gw_dtype_t dtype : {GW_FLOAT16, GW_BFLOAT16}) {
      SCOPED_TRACE(std::string(spec) + " dtype " + std::to_string(dtype));
      std::vector<uint16_t> x(n);
      const std::vector<float> f = input(n, 11);
      for (size_t i = 0; i < n; ++i)
        x[i] = dtype == GW_FLOAT16 ? gw::test::ref_float_to_half(f[i]) : gw::test::ref_float_to_bf16(f[i]);
      Codec codec(spec);
      size_t cap = 0;
      ASSERT_EQ(gw_codec_max_encoded_bytes(codec.c, n, dtype, &cap), GW_SUCCESS);
      DeviceBuffer<uint16_t> dsrc(n, *io_), ddst(n, *io_);
      DeviceBuffer<uint8_t> dmsg(cap, *io_);
      dsrc.upload(x);
      std::vector<uint8_t> h(cap);
      size_t hw = 0, dw = 0;
      ASSERT_EQ(gw_encode(codec.c, x.data(), n, dtype, 0, 0, nullptr, h.data(), cap, &hw), GW_SUCCESS);
      ASSERT_EQ(gw_encode_device(codec.c, dsrc.get(), n, dtype, 0, 0, nullptr, dmsg.get(), cap, &dw, stream_),
                GW_SUCCESS)
          << gw_get_last_error();
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      h.resize(hw);
      ASSERT_EQ(first_difference(h, dmsg.download(dw)), "");
      std::vector<uint16_t> hd = x;
      ASSERT_EQ(gw_decode(h.data(), hw, hd.data(), n, dtype, GW_DECODE_ACCUMULATE), GW_SUCCESS);
      ddst.upload(x);
      ASSERT_EQ(gw_decode_device(dmsg.get(), dw, ddst.get(), n, dtype, GW_DECODE_ACCUMULATE, stream_), GW_SUCCESS)
          << gw_get_last_error();
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      ASSERT_EQ(ddst.download(n), hd);
    }
  }
}

// Untrusted device messages: a forged index is refused and the destination is untouched.
TEST_F(DeviceCodecs, ForgedSparseMessageLeavesDestinationUntouched) {
  const size_t n = 10007;
  Codec codec("topk:ratio=0.01");
  const size_t cap = codec.cap(n);
  const std::vector<float> x = input(n, 3);
  std::vector<uint8_t> msg(cap);
  size_t len = 0;
  ASSERT_EQ(gw_encode(codec.c, x.data(), n, GW_FLOAT32, 0, 0, nullptr, msg.data(), cap, &len), GW_SUCCESS);
  msg.resize(len);
  for (int forgery = 0; forgery < 2; ++forgery) {
    std::vector<uint8_t> bad = msg;
    const uint32_t idx = forgery == 0 ? static_cast<uint32_t>(n) : 0u;  // out of range, or not increasing
    std::memcpy(bad.data() + gw::test::kWireHeaderBytes + 4 * 5, &idx, 4);
    DeviceBuffer<uint8_t> dmsg(len, *io_);
    dmsg.upload(bad);
    DeviceBuffer<float> ddst(n, *io_);
    ddst.upload(x);
    EXPECT_EQ(gw_decode_device(dmsg.get(), len, ddst.get(), n, GW_FLOAT32, GW_DECODE_OVERWRITE, stream_),
              GW_ERR_INVALID_MESSAGE);
    EXPECT_NE(std::string(gw_get_last_error()).find("index"), std::string::npos) << gw_get_last_error();
    EXPECT_EQ(ddst.download(n), x);
  }
  DeviceBuffer<uint8_t> dmsg(len, *io_);
  dmsg.upload(msg);
  DeviceBuffer<float> ddst(n, *io_);
  EXPECT_EQ(gw_decode_device(dmsg.get(), len - 1, ddst.get(), n, GW_FLOAT32, GW_DECODE_OVERWRITE, stream_),
            GW_ERR_INVALID_MESSAGE);
}

// NaN with error feedback: the device's adds make the canonical NaN where the host keeps an
// input NaN's payload, so the residuals hold different NaN bits after the first step. top-k
// and dgc must still send the same indices (every NaN has one magnitude key, ties to the lower
// index); only NaN values may differ, NaN for NaN.
TEST_F(DeviceCodecs, NanWithErrorFeedbackSendsTheSameIndices) {
  const size_t n = 20011;
  const uint32_t payloads[] = {0x7fc00000u, 0x7fc00001u, 0x7fd12345u, 0xffc00000u, 0x7fa00001u, 0xff800007u};
  for (const char* spec : {"topk:ratio=0.01", "topk:k=3", "dgc:ratio=0.01", "dgc:ratio=0.001"}) {
    SCOPED_TRACE(spec);
    Codec codec(spec);
    const size_t cap = codec.cap(n);
    gw_ef_state_t host_ef = nullptr, dev_ef = nullptr;
    ASSERT_EQ(gw_ef_state_create(n, &host_ef), GW_SUCCESS);
    ASSERT_EQ(gw_ef_state_create_device(n, &dev_ef), GW_SUCCESS) << gw_get_last_error();
    DeviceBuffer<float> dsrc(n, *io_);
    DeviceBuffer<uint8_t> dmsg(cap, *io_);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x = input(n, 50 + static_cast<uint64_t>(step));
      // More NaNs than k, with several payloads: the k boundary falls among them.
      for (size_t i = static_cast<size_t>(step); i < n; i += 37) std::memcpy(&x[i], &payloads[i % 6], 4);
      dsrc.upload(x);
      std::vector<uint8_t> h(cap);
      size_t hw = 0, dw = 0;
      ASSERT_EQ(gw_encode(codec.c, x.data(), n, GW_FLOAT32, step, 2, host_ef, h.data(), cap, &hw), GW_SUCCESS);
      ASSERT_EQ(gw_encode_device(codec.c, dsrc.get(), n, GW_FLOAT32, step, 2, dev_ef, dmsg.get(), cap, &dw, stream_),
                GW_SUCCESS)
          << gw_get_last_error();
      ASSERT_EQ(hw, dw) << "step " << step;
      h.resize(hw);
      const std::vector<uint8_t> d = dmsg.download(dw);
      gw_message_info_t info{};
      ASSERT_EQ(gw_message_info(h.data(), hw, &info), GW_SUCCESS);
      const size_t values_at = hw - 4 * info.nnz;  // header and indices: byte for byte
      ASSERT_EQ(first_difference(std::vector<uint8_t>(h.begin(), h.begin() + values_at),
                                 std::vector<uint8_t>(d.begin(), d.begin() + values_at)),
                "")
          << "step " << step;
      std::vector<float> hv(info.nnz), dv(info.nnz);
      std::memcpy(hv.data(), h.data() + values_at, 4 * info.nnz);
      std::memcpy(dv.data(), d.data() + values_at, 4 * info.nnz);
      std::string where;
      ASSERT_TRUE(same_floats_nan_equal(hv, dv, &where)) << "values, step " << step << ": " << where;
      std::vector<float> hr(n), dr(n);
      ASSERT_EQ(gw_ef_state_get_residual(host_ef, hr.data(), n), GW_SUCCESS);
      ASSERT_EQ(gw_ef_state_get_residual(dev_ef, dr.data(), n), GW_SUCCESS);
      ASSERT_TRUE(same_floats_nan_equal(hr, dr, &where)) << "residual, step " << step << ": " << where;
    }
    gw_ef_state_destroy(host_ef);
    gw_ef_state_destroy(dev_ef);
  }
}

// gw_encode_device_async never waits: for dgc it answers the most the message can be, and
// the header (copied back once the stream is done) gives the exact length, the host's.
TEST_P(DeviceCodecsOnStream, AsyncEncodeLeavesTheLengthInTheHeader) {
  for (const char* spec : {"dgc:ratio=0.01", "dgc:ratio=0.001", "topk:ratio=0.01", "qsgd:bits=4"}) {
    for (size_t n : {size_t{1}, size_t{4097}, size_t{1000003}}) {
      SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n));
      Codec codec(spec);
      const size_t cap = codec.cap(n);
      const std::vector<float> x = input(n, 21);
      DeviceBuffer<float> dsrc(n, *io_);
      DeviceBuffer<uint8_t> dmsg(cap, *io_);
      dsrc.upload(x);
      std::vector<uint8_t> h(cap);
      size_t hw = 0, bound = 0;
      ASSERT_EQ(gw_encode(codec.c, x.data(), n, GW_FLOAT32, 9, 1, nullptr, h.data(), cap, &hw), GW_SUCCESS);
      ASSERT_EQ(
          gw_encode_device_async(codec.c, dsrc.get(), n, GW_FLOAT32, 9, 1, nullptr, dmsg.get(), cap, &bound, stream_),
          GW_SUCCESS)
          << gw_get_last_error();
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      ASSERT_GE(bound, hw);
      ASSERT_LE(bound, cap);
      const std::vector<uint8_t> d = dmsg.download(bound);
      uint64_t total = 0;
      ASSERT_EQ(gw_message_length(d.data(), 56, &total), GW_SUCCESS) << gw_get_last_error();
      ASSERT_EQ(total, hw);
      h.resize(hw);
      ASSERT_EQ(first_difference(h, std::vector<uint8_t>(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(hw))), "");
    }
  }
}

// Five encodes of one codec on a new non-blocking stream, every copy on that stream (a
// pageable cudaMemcpy would run on the legacy stream, which a non-blocking stream does not
// wait for). Returns what went wrong, or "".
std::string encode_on_own_stream(Codec& codec, size_t n, int t) {
  const size_t cap = codec.cap(n);
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return "cudaStreamCreateWithFlags";
  std::string error;
  {
    PinnedCopier io(s);
    DeviceBuffer<float> dsrc(n, io);
    DeviceBuffer<uint8_t> dmsg(cap, io);
    for (int i = 0; i < 5 && error.empty(); ++i) {
      const std::vector<float> x = input(n, 300 + 10 * static_cast<uint64_t>(t) + static_cast<uint64_t>(i));
      std::vector<uint8_t> h(cap);
      size_t hw = 0, dw = 0;
      if (gw_encode(codec.c, x.data(), n, GW_FLOAT32, i, t, nullptr, h.data(), cap, &hw) != GW_SUCCESS) {
        error = "host encode";
        break;
      }
      dsrc.upload(x);
      if (gw_encode_device(codec.c, dsrc.get(), n, GW_FLOAT32, i, t, nullptr, dmsg.get(), cap, &dw, s) != GW_SUCCESS) {
        error = gw_get_last_error();
        break;
      }
      h.resize(hw);
      const std::string diff = first_difference(h, dmsg.download(dw));  // waits for the stream
      if (!diff.empty()) error = "call " + std::to_string(i) + ": " + diff;
    }
  }
  cudaStreamDestroy(s);
  return error;
}

// One codec encoding on two streams from two threads at once: each call's scratch is its own.
TEST_F(DeviceCodecs, OneCodecOnTwoStreamsAtOnce) {
  for (const char* spec : {"topk:ratio=0.01", "dgc:ratio=0.001", "qsgd:bits=4", "sign"}) {
    SCOPED_TRACE(spec);
    Codec codec(spec);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(2);
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] { errors[t] = encode_on_own_stream(codec, 1000003, t); });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1], "");
  }
}

// Past 2^31 elements (32-bit signed indexing would wrap) and, with GW_TEST_HUGE=1 as well,
// past 2^32 (8-byte indices in sparse messages): about 9 and 18 GB of device memory. Opt-in
// (GW_TEST_2POW31=1): about 9 GB of device memory, and the inputs take minutes of host time
// (12 to 16 minutes on one core; input() spreads them over every core).
TEST_F(DeviceCodecs, MatchHostBeyond2Pow31Elements) {
  GW_SKIP_UNLESS_OPTED_IN("GW_TEST_2POW31", "12-16 min; GW_TEST_HUGE=1 adds 2^32 + 33 elements");
  std::vector<size_t> sizes = {(size_t{1} << 31) + 17};
  if (std::getenv("GW_TEST_HUGE") != nullptr) sizes.push_back((size_t{1} << 32) + 33);
  for (size_t n : sizes) {
    for (const char* spec : {"qsgd:bits=4", "sign", "topk:ratio=0.0001", "dgc:ratio=0.0001"}) {
      check_codec(spec, n, false, 1, *io_);
    }
  }
}

TEST_F(DeviceCodecs, HostPointersAndHostStatesAreRefused) {
  Codec codec("qsgd:bits=8");
  std::vector<float> x(100, 1.0f);
  std::vector<uint8_t> out(codec.cap(100));
  size_t w = 0;
  EXPECT_EQ(gw_encode_device(codec.c, x.data(), 100, GW_FLOAT32, 0, 0, nullptr, out.data(), out.size(), &w, stream_),
            GW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gw_get_last_error()).find("device memory"), std::string::npos) << gw_get_last_error();
  gw_ef_state_t host_ef = nullptr;
  ASSERT_EQ(gw_ef_state_create(100, &host_ef), GW_SUCCESS);
  DeviceBuffer<float> dsrc(100, *io_);
  DeviceBuffer<uint8_t> dmsg(out.size(), *io_);
  EXPECT_EQ(gw_encode_device(codec.c, dsrc.get(), 100, GW_FLOAT32, 0, 0, host_ef, dmsg.get(), out.size(), &w, stream_),
            GW_ERR_INVALID_ARGUMENT);
  gw_ef_state_destroy(host_ef);
  // And the host calls refuse device memory instead of reading it with the CPU.
  EXPECT_EQ(gw_encode(codec.c, dsrc.get(), 100, GW_FLOAT32, 0, 0, nullptr, out.data(), out.size(), &w),
            GW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gw_get_last_error()).find("device memory"), std::string::npos) << gw_get_last_error();
  EXPECT_EQ(gw_decode(dmsg.get(), out.size(), x.data(), 100, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_ARGUMENT);
  gw_ef_state_t dev_ef = nullptr;
  ASSERT_EQ(gw_ef_state_create_device(100, &dev_ef), GW_SUCCESS);
  EXPECT_EQ(gw_encode(codec.c, x.data(), 100, GW_FLOAT32, 0, 0, dev_ef, out.data(), out.size(), &w),
            GW_ERR_INVALID_ARGUMENT);
  gw_ef_state_destroy(dev_ef);
}

INSTANTIATE_TEST_SUITE_P(, DeviceCodecsOnStream, ::testing::Values(StreamKind::kBlocking, StreamKind::kNonBlocking),
                         stream_name);

}  // namespace
