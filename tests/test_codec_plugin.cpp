// A codec defined here and nowhere else ("testround", id 200 of the range reserved for tests)
// is usable through every front door: the C ABI lists, creates, encodes and decodes it; the
// collectives all-reduce with it; codec_bench measures it. The entry below is the whole codec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "compressors/codec_registry.hpp"
#include "gradwire/gradwire.h"
#include "perf/codec_bench.hpp"
#include "tests/local_ranks.hpp"

namespace gw::detail {
namespace {

constexpr CodecId kTestRound = static_cast<CodecId>(200);

// Each float becomes round(x * scale) as an int32 and decodes to q / scale: exact for
// multiples of 1/scale, lossy for everything else. The header's bits field carries scale.
class TestRoundCodec final : public Codec {
 public:
  explicit TestRoundCodec(const CodecSpec& spec) : Codec(spec) {}
  size_t max_encoded_bytes(size_t n, DType) const override {
    return n > wire::kMaxCount ? SIZE_MAX : wire::kHeaderBytes + n * sizeof(int32_t);
  }

 protected:
  Result<size_t> encode_payload(const void* src, size_t n, DType, const EncodeContext&, wire::Header& h,
                                uint8_t* out) override {
    h.bits = spec().bits;
    const auto* x = static_cast<const float*>(src);
    const auto scale = static_cast<float>(spec().bits);
    for (size_t i = 0; i < n; ++i) {
      const auto q = static_cast<int32_t>(std::lround(x[i] * scale));
      std::memcpy(out + i * sizeof q, &q, sizeof q);
    }
    return n * sizeof(int32_t);
  }
};

std::unique_ptr<Codec> make_test_round(const CodecSpec& spec) { return std::make_unique<TestRoundCodec>(spec); }

Status validate_test_round(const wire::Header& h, const uint8_t*, uint64_t& nnz) {
  if (h.bits < 1 || h.bits > 1024 || h.bucket != 0 || h.k != 0 || h.flags != 0) {
    return invalid_message("testround message has a bad scale or foreign fields");
  }
  if (h.dtype != DType::kFloat32) return invalid_message("testround message must carry float32");
  if (h.payload_bytes != h.count * sizeof(int32_t)) return invalid_message("testround payload has the wrong length");
  nnz = h.count;
  return Status::ok();
}

void apply_test_round(const wire::Header& h, const uint8_t* payload, void* dst, DType, DecodeMode mode) {
  auto* d = static_cast<float*>(dst);
  for (uint64_t i = 0; i < h.count; ++i) {
    int32_t q;
    std::memcpy(&q, payload + i * sizeof q, sizeof q);
    const float v = static_cast<float>(q) / static_cast<float>(h.bits);
    d[i] = mode == DecodeMode::kOverwrite ? v : mode == DecodeMode::kAccumulate ? d[i] + v : d[i] - v;
  }
}

constexpr SpecParam kTestRoundParams[] = {
    unsigned_param("scale", &CodecSpec::bits, 1, 1024, "1 to 1024").with_default(4),
};

const CodecEntry kTestRoundEntry{kTestRound,       "testround",
                                 kTestRoundParams, std::size(kTestRoundParams),
                                 nullptr,          kCapLossy | kCapErrorFeedback,
                                 make_test_round,  validate_test_round,
                                 apply_test_round, nullptr};
GW_REGISTER_CODEC(kTestRoundEntry);

}  // namespace
}  // namespace gw::detail

namespace gw {
namespace {

// Created during static initialization, before or after the registrars' files depending on
// link order (this file links first): the registrars must have run already.
const Result<std::unique_ptr<Codec>> g_made_at_static_init = Codec::create("qsgd:bits=4");

TEST(CodecPlugin, RegisteredBeforeOtherStaticInitializers) {
  EXPECT_TRUE(g_made_at_static_init.is_ok()) << g_made_at_static_init.status().to_string();
}

TEST(CodecPlugin, ListedThroughTheCApi) {
  bool found = false;
  int last_id = -1;
  for (size_t i = 0; i < gw_codec_count(); ++i) {
    gw_codec_info_t info;
    ASSERT_EQ(gw_codec_info(i, &info), GW_SUCCESS);
    EXPECT_GT(static_cast<int>(info.id), last_id) << "listed in order of id";
    last_id = static_cast<int>(info.id);
    if (std::string(info.name) == "testround") {
      found = true;
      EXPECT_EQ(static_cast<int>(info.id), 200);
      EXPECT_EQ(info.caps & (GW_CODEC_CAP_LOSSY | GW_CODEC_CAP_EF), GW_CODEC_CAP_LOSSY | GW_CODEC_CAP_EF);
      EXPECT_EQ(info.caps & (GW_CODEC_CAP_SPARSE | GW_CODEC_CAP_INDICES | GW_CODEC_CAP_DEVICE), 0u);
      EXPECT_STREQ(info.keys, "scale");
    }
  }
  EXPECT_TRUE(found);
  gw_codec_info_t info;
  EXPECT_EQ(gw_codec_info(gw_codec_count(), &info), GW_ERR_INVALID_ARGUMENT);
}

TEST(CodecPlugin, SpecParsedFromItsTable) {
  auto spec = CodecSpec::parse("testround");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->to_string(), "testround:scale=4,ef=0");
  EXPECT_EQ(CodecSpec::parse("testround:scale=8,ef=1")->to_string(), "testround:scale=8,ef=1");
  const auto bad = CodecSpec::parse("testround:scale=0");
  EXPECT_EQ(bad.status().message(), "codec spec: scale=0 is out of range (expected 1 to 1024)");
  const auto unknown = CodecSpec::parse("testround:bits=2");
  EXPECT_EQ(unknown.status().message(), "codec spec: unknown key 'bits' for codec testround (keys: scale,ef)");
  EXPECT_FALSE(spec->is_sparse());
}

TEST(CodecPlugin, EncodeDecodeThroughTheCApi) {
  gw_codec_t codec = nullptr;
  ASSERT_EQ(gw_codec_create("testround:scale=4", &codec), GW_SUCCESS) << gw_get_last_error();
  gw_codec_id_t id;
  ASSERT_EQ(gw_codec_id(codec, &id), GW_SUCCESS);
  EXPECT_EQ(static_cast<int>(id), 200);
  char text[64];
  ASSERT_EQ(gw_codec_spec(codec, text, sizeof text), GW_SUCCESS);
  EXPECT_STREQ(text, "testround:scale=4,ef=0");

  const std::vector<float> x = {1.0f, -2.5f, 0.1f, 3.75f, 0.0f};
  size_t cap = 0;
  ASSERT_EQ(gw_codec_max_encoded_bytes(codec, x.size(), GW_FLOAT32, &cap), GW_SUCCESS);
  std::vector<uint8_t> msg(cap);
  size_t len = 0;
  ASSERT_EQ(gw_encode(codec, x.data(), x.size(), GW_FLOAT32, 0, 0, nullptr, msg.data(), msg.size(), &len), GW_SUCCESS)
      << gw_get_last_error();
  EXPECT_EQ(len, 56 + x.size() * 4);
  gw_message_info_t info;
  ASSERT_EQ(gw_message_info(msg.data(), len, &info), GW_SUCCESS);
  EXPECT_EQ(static_cast<int>(info.codec), 200);
  EXPECT_EQ(info.nnz, x.size());

  std::vector<float> y(x.size(), -1.0f);
  ASSERT_EQ(gw_decode(msg.data(), len, y.data(), y.size(), GW_FLOAT32, GW_DECODE_OVERWRITE), GW_SUCCESS)
      << gw_get_last_error();
  EXPECT_EQ(y, (std::vector<float>{1.0f, -2.5f, 0.0f, 3.75f, 0.0f}));  // 0.1 rounds to 0/4

  // An id no entry has is an invalid message, as before the registry.
  msg[5] = 201;
  EXPECT_EQ(gw_decode(msg.data(), len, y.data(), y.size(), GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_MESSAGE);
  EXPECT_NE(std::string(gw_get_last_error()).find("unknown codec id 201"), std::string::npos);
  EXPECT_EQ(gw_codec_destroy(codec), GW_SUCCESS);
}

TEST(CodecPlugin, AllreduceThroughTheCollectives) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 5000;  // several chunks of 4 KiB
  auto codec = Codec::create("testround:scale=4");
  ASSERT_TRUE(codec.is_ok()) << codec.status().to_string();
  // Quarter-integers and their sums are exactly what testround carries, so every algorithm
  // that compresses partial sums still gives the exact sum. Element 0 is 0.1 on every rank,
  // which testround sends as 0: it shows the codec was on the path.
  auto value = [](int rank, size_t i) {
    return i == 0 ? 0.1f : static_cast<float>(static_cast<int>(i % 17) - 8 + rank) * 0.25f;
  };
  for (const Algo algo : {Algo::kCompressedRing, Algo::kScatterReduce}) {
    std::vector<std::vector<float>> outs(kRanks);
    test::run_local_ranks(kRanks, [&](Communicator& c, int rank) {
      std::vector<float> g(kCount);
      std::vector<float>& out = outs[static_cast<size_t>(rank)];
      out.resize(kCount);
      for (size_t i = 0; i < kCount; ++i) g[i] = value(rank, i);
      const Status st =
          c.allreduce(g.data(), out.data(), kCount, DType::kFloat32, ReduceOp::kSum, codec->get(), nullptr, algo);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    });
    SCOPED_TRACE(algo_name(algo));
    for (size_t i = 1; i < kCount; ++i) {
      float want = 0.0f;
      for (int r = 0; r < kRanks; ++r) want += value(r, i);
      ASSERT_EQ(outs[0][i], want) << "element " << i;
    }
    EXPECT_NE(outs[0][0], value(0, 0) + value(1, 0) + value(2, 0));
    for (int r = 1; r < kRanks; ++r) EXPECT_EQ(outs[static_cast<size_t>(r)], outs[0]) << "rank " << r;
  }
}

TEST(CodecPlugin, MeasuredByCodecBench) {
  const char* args[] = {"codec_bench", "--codec", "testround:scale=16", "--size-mb", "0.25",
                        "--reps",      "1",       "--warmup",           "0"};
  std::vector<char*> argv;
  for (const char* a : args) argv.push_back(const_cast<char*>(a));
  testing::internal::CaptureStdout();
  const int rc = perf::codec_bench_main(static_cast<int>(argv.size()), argv.data());
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("| testround:scale=16 | 1.0 |"), std::string::npos) << out;
}

}  // namespace
}  // namespace gw
