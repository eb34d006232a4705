// The cost model file (collectives/policy/cost_model.hpp): what perf/calibrate writes is read
// back whole, and anything else is refused with the line and the key named.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "collectives/policy/cost_model.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/ef_state.hpp"
#include "tests/local_ranks.hpp"

namespace gw::coll {
namespace {

const char* kGood =
    "# measured\n"
    "version = 1\n"
    "transport = UCX_TLS=sm,self  \n"
    "latency_s = 2.5e-6\n"
    "link_bytes_per_s = 1.9e10   # shared memory\n"
    "message_cpu_s = 4e-7\n"
    "reduce_bytes_per_s = 6e9\n"
    "sparse_sum_bytes_per_s = 8e8\n"
    "encode_bytes_per_s.qsgd = 3e9\n"
    "decode_bytes_per_s.qsgd = 1.2e10\n"
    "cores = 2\n";

TEST(CostModel, ReadsEveryKey) {
  auto r = parse_cost_model(kGood, "good");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const CostModel& m = r.value();
  EXPECT_EQ(m.transport, "UCX_TLS=sm,self");
  EXPECT_DOUBLE_EQ(m.latency_s, 2.5e-6);
  EXPECT_DOUBLE_EQ(m.link_bytes_per_s, 1.9e10);
  EXPECT_DOUBLE_EQ(m.message_cpu_s, 4e-7);
  EXPECT_DOUBLE_EQ(m.reduce_bytes_per_s, 6e9);
  EXPECT_DOUBLE_EQ(m.sparse_sum_bytes_per_s, 8e8);
  EXPECT_EQ(m.cores, 2);
  EXPECT_DOUBLE_EQ(m.rates("qsgd").encode_bytes_per_s, 3e9);
  EXPECT_DOUBLE_EQ(m.rates("qsgd").decode_bytes_per_s, 1.2e10);
  // A codec the file does not name gets the defaults.
  EXPECT_DOUBLE_EQ(m.rates("sign").encode_bytes_per_s, CostModel{}.default_codec.encode_bytes_per_s);
  EXPECT_EQ(m.source, "good");
}

TEST(CostModel, KeysNotGivenKeepTheirDefaults) {
  auto r = parse_cost_model("version = 1\nlatency_s = 1e-5\n", "partial");
  ASSERT_TRUE(r.is_ok());
  EXPECT_DOUBLE_EQ(r.value().latency_s, 1e-5);
  EXPECT_DOUBLE_EQ(r.value().link_bytes_per_s, CostModel{}.link_bytes_per_s);
}

// Each bad text, and what its error has to name.
TEST(CostModel, RefusesWhatItCannotRead) {
  const std::pair<std::string, std::string> cases[] = {
      {"latency_s = 1e-6\n", "no 'version = 1'"},
      {"version = 2\n", "version 2"},
      {"version = 1\nversion = 1\n", "given twice"},
      {"version = 1\nlatency = 1e-6\n", "unknown key 'latency'"},
      {"version = 1\nlatency_s 1e-6\n", ":2: 'latency_s 1e-6' is not 'key = value'"},
      {"version = 1\nlatency_s = nan\n", "latency_s = 'nan'"},
      {"version = 1\nlatency_s = inf\n", "latency_s = 'inf'"},
      {"version = 1\nlatency_s = -1e-6\n", "latency_s = '-1e-6'"},
      {"version = 1\nlatency_s = 0\n", "latency_s = '0'"},
      {"version = 1\nlatency_s = 1e-999\n", "latency_s = '1e-999'"},
      {"version = 1\nlatency_s = 1e-6s\n", "latency_s = '1e-6s'"},
      {"version = 1\nlatency_s =\n", "latency_s = ''"},
      {"version = 1\nlink_bytes_per_s = 1e400\n", "link_bytes_per_s = '1e400'"},
      {"version = 1\ncores = 1.5\n", "cores = '1.5'"},
      {"version = 1\ncores = 0\n", "cores = '0'"},
      {"version = 1\nencode_bytes_per_s. = 1e9\n", "names no codec"},
      {"version = 1\nencode_bytes_per_s.qsgd = 1e9\n", "without its decode rate"},
      {"version = 1\ndecode_bytes_per_s.qsgd = 1e9\n", "without its encode rate"},
      {"version = 1\n" + std::string(size_t{1} << 21, '#'), "longer than 1 MiB"},
  };
  for (const auto& [text, want] : cases) {
    auto r = parse_cost_model(text, "f");
    ASSERT_FALSE(r.is_ok()) << text.substr(0, 60);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("f", 0), 0u) << r.status().message();  // names the file
  }
}

TEST(CostModel, FromTheEnvironment) {
  unsetenv("GW_COST_MODEL");
  auto d = cost_model_from_env();
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d.value().source, "built-in defaults");

  const std::string path = ::testing::TempDir() + "gw_cost_model_test.txt";
  { std::ofstream(path) << kGood; }
  setenv("GW_COST_MODEL", path.c_str(), 1);
  auto r = cost_model_from_env();
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value().source, path);
  EXPECT_EQ(r.value().cores, 2);

  { std::ofstream(path) << "version = 1\nlatency_s = -3\n"; }
  r = cost_model_from_env();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("GW_COST_MODEL: " + path + ":2: latency_s"), std::string::npos)
      << r.status().message();

  setenv("GW_COST_MODEL", "/nonexistent/cost.txt", 1);
  r = cost_model_from_env();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cannot be read"), std::string::npos);
  unsetenv("GW_COST_MODEL");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gw::coll

namespace gw::coll {
namespace {

// Where the model rates Rabenseifner's 2 log p steps with the ring's bytes fastest, a dense
// all-reduce runs it: exact, for every op (max too), and for a lossy codec's call below the
// dense threshold, whose codec a dense call does not use.
TEST(CostModel, DenseCallsRunRabenseifnerWhereTheModelSays) {
  const std::string path = ::testing::TempDir() + "gw_cost_model_rabenseifner.txt";
  {
    // Steps of 1 ms, 4 ms of wire for the buffer, a slow sum: the ring takes about 12 ms,
    // recursive doubling 14, Rabenseifner 8.
    std::ofstream(path) << "version = 1\nlatency_s = 1e-3\nmessage_cpu_s = 1e-9\nlink_bytes_per_s = 1e9\n"
                           "reduce_bytes_per_s = 4e9\n";
  }
  setenv("GW_COST_MODEL", path.c_str(), 1);
  const size_t n = 1000000;
  const int p = 4;
  CommConfig cfg;
  cfg.dense_threshold_bytes = size_t{64} << 20;  // every call below: dense
  test::run_local_ranks(
      p,
      [&](Communicator& c, int r) {
        std::vector<float> x(n), out(n, -1.0f);
        for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>((i * 7 + r * 13) % 41) - 20);
        auto sum_at = [&](size_t i) {
          float want = 0;
          for (int q = 0; q < p; ++q) want += static_cast<float>(static_cast<int>((i * 7 + q * 13) % 41) - 20);
          return want;
        };
        ASSERT_TRUE(c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr, Algo::kAuto)
                        .is_ok());
        auto st = c.stats();
        ASSERT_TRUE(st.is_ok());
        EXPECT_EQ(st->last_algo, Algo::kRabenseifner);
        for (size_t i = 0; i < n; i += 9973) ASSERT_EQ(out[i], sum_at(i)) << i;
        ASSERT_TRUE(c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kMax, nullptr, nullptr, Algo::kAuto)
                        .is_ok());
        st = c.stats();
        EXPECT_EQ(st->last_algo, Algo::kRabenseifner);
        EXPECT_EQ(out[0], 19.0f);  // max over ranks of (13 r % 41) - 20, r < 4: 39 - 20
        // Below the dense threshold a lossy codec's call is dense too: exact sums, no trials.
        auto q = Codec::create("qsgd:bits=2");
        ASSERT_TRUE(q.is_ok());
        for (int call = 0; call < 3; ++call) {
          ASSERT_TRUE(c.allreduce(x.data(), out.data(), n, DType::kFloat32, ReduceOp::kSum, q.value().get(), nullptr,
                                  Algo::kAuto)
                          .is_ok());
          st = c.stats();
          EXPECT_EQ(st->last_algo, Algo::kRabenseifner);
          for (size_t i = 0; i < n; i += 9973) ASSERT_EQ(out[i], sum_at(i)) << i;
        }
      },
      cfg);
  unsetenv("GW_COST_MODEL");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gw::coll
