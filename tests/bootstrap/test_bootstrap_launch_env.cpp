// read_launch_env for each launcher's variables (set in-process, restored afterwards),
// malformed values, the refusal of a job with neither a token nor a job id, and
// rendezvous_from_env between forked ranks on 127.0.0.1 (with a stranger among them).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "tests/bootstrap/fork_util.hpp"
#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/root_server.hpp"
#include "transport/bootstrap/socket.hpp"

namespace gw::bootstrap {
namespace {

using namespace gw::bootstrap::testing;  // NOLINT

// Every variable read_launch_env may consult.
const char* const kAllVars[] = {"GW_RANK",
                                "GW_SIZE",
                                "GW_LOCAL_RANK",
                                "GW_LOCAL_SIZE",
                                "GW_ROOT",
                                "GW_PORT",
                                "GW_TOKEN",
                                "GW_JOB_ID",
                                "GW_INSECURE_LOCAL",
                                "RANK",
                                "WORLD_SIZE",
                                "LOCAL_RANK",
                                "LOCAL_WORLD_SIZE",
                                "MASTER_ADDR",
                                "MASTER_PORT",
                                "TORCHELASTIC_RUN_ID",
                                "TORCHELASTIC_RESTART_COUNT",
                                "OMPI_COMM_WORLD_RANK",
                                "OMPI_COMM_WORLD_SIZE",
                                "OMPI_COMM_WORLD_LOCAL_RANK",
                                "OMPI_COMM_WORLD_LOCAL_SIZE",
                                "OMPI_MCA_ess_base_jobid",
                                "PMIX_NAMESPACE",
                                "OMPI_MCA_orte_hnp_uri",
                                "OMPI_MCA_orte_precondition_transports",
                                "SLURM_PROCID",
                                "SLURM_NTASKS",
                                "SLURM_LOCALID",
                                "SLURM_NNODES",
                                "SLURM_STEP_NUM_NODES",
                                "SLURM_JOB_ID",
                                "SLURM_STEP_ID",
                                "PMI_RANK",
                                "PMI_SIZE",
                                "MPI_LOCALRANKID",
                                "MPI_LOCALNRANKS",
                                "PMI_JOBID",
                                "PMI_KVSNAME"};

// Clears every launcher variable for the test and puts the old values back afterwards.
class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    alarm(60);
    for (const char* v : kAllVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : kAllVars) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
    alarm(0);
  }
  static void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [k, v] : vars) setenv(k, v, 1);
  }
  static std::string token_hex(const LaunchEnv& e) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (uint8_t b : e.token) {
      s += d[b >> 4];
      s += d[b & 15];
    }
    return s;
  }
  // read_launch_env must fail with kInvalidArgument naming `var`.
  static void expect_rejected(const char* var, const std::string& why) {
    auto e = read_launch_env();
    ASSERT_FALSE(e.is_ok()) << why << ": accepted";
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument) << why << ": " << e.status().to_string();
    EXPECT_NE(e.status().message().find(var), std::string::npos) << why << ": " << e.status().to_string();
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(LaunchEnvTest, NothingSetIsAnError) {
  auto e = read_launch_env();
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_NE(e.status().message().find("GW_RANK"), std::string::npos) << e.status().to_string();
}

TEST_F(LaunchEnvTest, GradwireVariables) {
  set({{"GW_RANK", "1"},
       {"GW_SIZE", "4"},
       {"GW_LOCAL_RANK", "1"},
       {"GW_ROOT", "10.1.2.3:5555"},
       {"GW_TOKEN", "00112233445566778899AABBCCDDEEFF"}});
  auto e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->launcher, "gradwire");
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->size, 4);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->root_address, "10.1.2.3");
  EXPECT_EQ(e->root_port, 5555);
  EXPECT_EQ(token_hex(*e), "00112233445566778899aabbccddeeff");

  setenv("GW_ROOT", "[fd00::2]:6000", 1);
  e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->root_address, "fd00::2");
  EXPECT_EQ(e->root_port, 6000);

  // GW_* wins over a launcher's own variables.
  set({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "8"}});
  e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->launcher, "gradwire");
  EXPECT_EQ(e->rank, 1);
}

TEST_F(LaunchEnvTest, GradwireOnOneHostDerivesTheRootFromTheJobId) {
  set({{"GW_RANK", "0"}, {"GW_SIZE", "3"}, {"GW_LOCAL_SIZE", "3"}, {"GW_JOB_ID", "job-a"}});
  auto a = read_launch_env();
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->root_address, "127.0.0.1");
  EXPECT_GE(a->root_port, 20000);
  EXPECT_LT(a->root_port, 32000);
  setenv("GW_RANK", "2", 1);
  auto same_job = read_launch_env();
  ASSERT_TRUE(same_job.is_ok());
  EXPECT_EQ(token_hex(*same_job), token_hex(*a)) << "ranks of one job must share the token";
  EXPECT_EQ(same_job->root_port, a->root_port);
  setenv("GW_JOB_ID", "job-b", 1);
  auto other_job = read_launch_env();
  ASSERT_TRUE(other_job.is_ok());
  EXPECT_NE(token_hex(*other_job), token_hex(*a));
  setenv("GW_PORT", "23456", 1);
  auto fixed = read_launch_env();
  ASSERT_TRUE(fixed.is_ok());
  EXPECT_EQ(fixed->root_port, 23456);
  // Plain GW_RANK/GW_SIZE with neither GW_LOCAL_SIZE nor a root: one host is assumed.
  unsetenv("GW_LOCAL_SIZE");
  auto assumed = read_launch_env();
  ASSERT_TRUE(assumed.is_ok()) << assumed.status().to_string();
  EXPECT_EQ(assumed->root_address, "127.0.0.1");
  EXPECT_EQ(assumed->root_port, 23456);
  // A GW_LOCAL_SIZE below GW_SIZE says the ranks span hosts: then a root must be named.
  setenv("GW_LOCAL_SIZE", "2", 1);
  expect_rejected("GW_ROOT", "several hosts, no root");
}

TEST_F(LaunchEnvTest, Torchrun) {
  set({{"RANK", "2"},
       {"WORLD_SIZE", "4"},
       {"LOCAL_RANK", "0"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "node-0"},
       {"MASTER_PORT", "29500"},
       {"TORCHELASTIC_RUN_ID", "run-1"},
       {"TORCHELASTIC_RESTART_COUNT", "0"}});
  auto e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->launcher, "torchrun");
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->size, 4);
  EXPECT_EQ(e->local_rank, 0);
  EXPECT_EQ(e->root_address, "node-0");
  EXPECT_EQ(e->root_port, 29501);
  const std::string token = token_hex(*e);

  setenv("RANK", "0", 1);
  setenv("LOCAL_RANK", "0", 1);
  EXPECT_EQ(token_hex(*read_launch_env()), token) << "every rank derives the same token";
  setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
  EXPECT_NE(token_hex(*read_launch_env()), token) << "a restarted group gets a new token";
  setenv("TORCHELASTIC_RUN_ID", "run-2", 1);
  EXPECT_NE(token_hex(*read_launch_env()), token);

  setenv("GW_PORT", "31000", 1);
  EXPECT_EQ(read_launch_env()->root_port, 31000);
  unsetenv("GW_PORT");

  setenv("MASTER_PORT", "65535", 1);
  expect_rejected("MASTER_PORT", "no room for MASTER_PORT + 1");
  setenv("MASTER_PORT", "http", 1);
  expect_rejected("MASTER_PORT", "not a number");
  unsetenv("MASTER_PORT");
  expect_rejected("MASTER_PORT", "MASTER_ADDR without a port");
  setenv("MASTER_PORT", "29500", 1);
  setenv("MASTER_ADDR", "node 0; rm -rf", 1);
  expect_rejected("MASTER_ADDR", "not a host");
}

TEST_F(LaunchEnvTest, OpenMpiAsMpirunExportsIt) {
  // What `mpirun -np 2` exports here (OpenMPI 4), as far as the bootstrap cares.
  set({{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"OMPI_MCA_ess_base_jobid", "253689857"},
       {"PMIX_NAMESPACE", "253689857"},
       {"OMPI_MCA_orte_hnp_uri", "253689856.0;tcp://192.0.2.2:57393;tcp6://[fd00::2]:37397"},
       {"OMPI_MCA_orte_precondition_transports", "1f6891eb4a39304a-4734c2500baac2d2"}});
  auto e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->launcher, "openmpi");
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->size, 2);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->root_address, "127.0.0.1");
  EXPECT_GE(e->root_port, 20000);
  EXPECT_LT(e->root_port, 32000);
  const std::string token = token_hex(*e);

  setenv("OMPI_MCA_ess_base_jobid", "253689858", 1);
  auto next_job = read_launch_env();
  ASSERT_TRUE(next_job.is_ok());
  EXPECT_NE(token_hex(*next_job), token);

  // Older or newer OpenMPI: the job id from PMIX_NAMESPACE or the HNP URI.
  unsetenv("OMPI_MCA_ess_base_jobid");
  auto pmix = read_launch_env();
  ASSERT_TRUE(pmix.is_ok()) << pmix.status().to_string();
  unsetenv("PMIX_NAMESPACE");
  auto hnp = read_launch_env();
  ASSERT_TRUE(hnp.is_ok()) << hnp.status().to_string();
  EXPECT_NE(token_hex(*pmix), token_hex(*hnp));

  // Ranks on several hosts need an explicit root.
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  expect_rejected("GW_ROOT", "two hosts");
  setenv("GW_ROOT", "192.0.2.2:7000", 1);
  auto rooted = read_launch_env();
  ASSERT_TRUE(rooted.is_ok()) << rooted.status().to_string();
  EXPECT_EQ(rooted->root_port, 7000);

  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  expect_rejected("OMPI_COMM_WORLD_LOCAL_SIZE", "local size above size");
}

TEST_F(LaunchEnvTest, Slurm) {
  set({{"SLURM_PROCID", "3"},
       {"SLURM_NTASKS", "4"},
       {"SLURM_LOCALID", "3"},
       {"SLURM_NNODES", "1"},
       {"SLURM_JOB_ID", "12345"},
       {"SLURM_STEP_ID", "0"}});
  auto e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->launcher, "slurm");
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->size, 4);
  EXPECT_EQ(e->local_rank, 3);
  EXPECT_EQ(e->root_address, "127.0.0.1");
  const std::string token = token_hex(*e);
  setenv("SLURM_STEP_ID", "1", 1);
  EXPECT_NE(token_hex(*read_launch_env()), token) << "each job step is its own job";

  setenv("SLURM_NNODES", "2", 1);
  expect_rejected("GW_ROOT", "two nodes");
  setenv("SLURM_STEP_NUM_NODES", "1", 1);  // the step itself runs on one node
  EXPECT_TRUE(read_launch_env().is_ok());
  setenv("SLURM_STEP_NUM_NODES", "one", 1);
  expect_rejected("SLURM_STEP_NUM_NODES", "not a number");
  unsetenv("SLURM_STEP_NUM_NODES");
  setenv("SLURM_NNODES", "x2", 1);
  expect_rejected("SLURM_NNODES", "not a number");
  setenv("SLURM_NNODES", "1", 1);
  setenv("SLURM_LOCALID", "-1", 1);
  expect_rejected("SLURM_LOCALID", "negative");
}

TEST_F(LaunchEnvTest, Pmi) {
  set({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}});
  auto e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->launcher, "pmi");
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->size, 1);
  EXPECT_EQ(e->root_address, "127.0.0.1");

  set({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}, {"PMI_JOBID", "7"}});
  e = read_launch_env();
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->root_address, "127.0.0.1");
}

TEST_F(LaunchEnvTest, MalformedNumbersNameTheVariable) {
  struct Case {
    const char* var;
    const char* value;
  };
  const Case cases[] = {
      {"GW_RANK", "-1"},    {"GW_RANK", "abc"},     {"GW_RANK", "1.5"},     {"GW_RANK", " 1"},
      {"GW_RANK", "4"},     {"GW_SIZE", "0"},       {"GW_SIZE", "65537"},   {"GW_SIZE", "99999999999999999999999"},
      {"GW_SIZE", "4x"},    {"GW_LOCAL_RANK", "9"}, {"GW_LOCAL_SIZE", "0"}, {"GW_PORT", "0"},
      {"GW_PORT", "65536"}, {"GW_PORT", "http"},
  };
  for (const Case& c : cases) {
    set({{"GW_RANK", "1"}, {"GW_SIZE", "4"}, {"GW_ROOT", "127.0.0.1:9000"}});
    setenv(c.var, c.value, 1);
    expect_rejected(c.var, std::string(c.var) + "=" + c.value);
    unsetenv("GW_LOCAL_RANK");
    unsetenv("GW_LOCAL_SIZE");
    unsetenv("GW_PORT");
  }
  // Half a pair.
  unsetenv("GW_SIZE");
  setenv("GW_RANK", "0", 1);
  expect_rejected("GW_SIZE", "rank without size");
  unsetenv("GW_RANK");
  setenv("WORLD_SIZE", "2", 1);
  expect_rejected("RANK", "size without rank");
  unsetenv("WORLD_SIZE");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "two", 1);
  expect_rejected("OMPI_COMM_WORLD_SIZE", "not a number");
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  set({{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}});
  expect_rejected("PMI_RANK", "rank == size");
}

TEST_F(LaunchEnvTest, MalformedRootAndTokenNameTheVariable) {
  set({{"GW_RANK", "0"}, {"GW_SIZE", "2"}});
  for (const char* root :
       {"host", "host:", ":80", "host:0", "host:65536", "host:http", "fd00::2:80", "[fd00::2]80", "bad host:80"}) {
    setenv("GW_ROOT", root, 1);
    expect_rejected("GW_ROOT", root);
  }
  setenv("GW_ROOT", "127.0.0.1:9000", 1);
  for (const char* token : {"abc", "00112233445566778899aabbccddeeff00", "00112233445566778899aabbccddeefg"}) {
    setenv("GW_TOKEN", token, 1);
    expect_rejected("GW_TOKEN", token);
  }
}

// ---- a job that nothing authenticates ------------------------------------------------------------

TEST_F(LaunchEnvTest, NoTokenAndNoJobIdIsRefused) {
  auto expect_refused = [](const std::string& why) {
    auto e = read_launch_env();
    ASSERT_FALSE(e.is_ok()) << why << ": accepted";
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument) << e.status().to_string();
    for (const char* part : {"GW_TOKEN", "openssl rand -hex 16", "job id", "GW_INSECURE_LOCAL=1"}) {
      EXPECT_NE(e.status().message().find(part), std::string::npos)
          << why << ": no '" << part << "' in " << e.status().to_string();
    }
  };
  // Plain GW_* variables on one host, as a job script or a test harness sets them.
  set({{"GW_RANK", "1"}, {"GW_SIZE", "2"}, {"GW_LOCAL_SIZE", "2"}});
  expect_refused("GW_* without a token");
  setenv("GW_ROOT", "127.0.0.1:9000", 1);
  expect_refused("GW_* with a root, without a token");
  setenv("GW_INSECURE_LOCAL", "0", 1);
  expect_refused("GW_INSECURE_LOCAL=0");
  // torchrun's variables without its run id (a hand-made launcher).
  for (const char* v : {"GW_RANK", "GW_SIZE", "GW_LOCAL_SIZE", "GW_ROOT", "GW_INSECURE_LOCAL"}) unsetenv(v);
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  expect_refused("torchrun variables without TORCHELASTIC_RUN_ID");

  // Each way out works.
  setenv("TORCHELASTIC_RUN_ID", "run-9", 1);
  EXPECT_TRUE(read_launch_env().is_ok()) << "a launcher job id";
  unsetenv("TORCHELASTIC_RUN_ID");
  setenv("GW_TOKEN", "0123456789abcdef0123456789abcdef", 1);
  EXPECT_TRUE(read_launch_env().is_ok()) << "a token";
  unsetenv("GW_TOKEN");
  ::testing::internal::CaptureStderr();
  setenv("GW_INSECURE_LOCAL", "1", 1);
  auto insecure = read_launch_env();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(insecure.is_ok()) << insecure.status().to_string();
  if (log::enabled(log::Level::kWarn)) {
    EXPECT_NE(log.find("GW_INSECURE_LOCAL=1"), std::string::npos) << log;
    EXPECT_NE(log.find("29501"), std::string::npos) << "the warning names the port: " << log;
  }
  setenv("GW_INSECURE_LOCAL", "yes", 1);
  expect_rejected("GW_INSECURE_LOCAL", "not 0 or 1");
  unsetenv("GW_INSECURE_LOCAL");
  // A job of one rank meets nobody, so it needs nothing.
  setenv("WORLD_SIZE", "1", 1);
  EXPECT_TRUE(read_launch_env().is_ok());
}

// ---- env-mode rendezvous between processes ---------------------------------------------------

bool roots_idle(seconds wait = seconds(10)) {
  const auto until = Clock::now() + wait;
  while (running_root_servers() > 0) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

// A forked rank: reads the environment it was given and joins.
int env_rank_main(int rank, const std::vector<std::pair<std::string, std::string>>& vars) {
  for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  auto e = read_launch_env();
  if (!e.is_ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.status().to_string().c_str());
    return 1;
  }
  if (e->rank != rank) return 2;
  if (rank == 0) std::this_thread::sleep_for(milliseconds(300));  // the others knock before the root listens
  auto t = rendezvous_from_env(*e, blob_for(rank, 5), seconds(10));
  if (!t.is_ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, t.status().to_string().c_str());
    return 3;
  }
  if (t->size() != static_cast<size_t>(e->size)) return 4;
  for (int r = 0; r < e->size; ++r) {
    if ((*t)[static_cast<size_t>(r)] != blob_for(r, 5)) return 5;
  }
  return 0;
}

std::string random_token() {
  std::random_device rd;
  static const char* d = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) s += d[rd() & 15];
  return s;
}

std::string unique_job_id() {
  return "test-" + std::to_string(getpid()) + "-" + std::to_string(Clock::now().time_since_epoch().count());
}

TEST_F(LaunchEnvTest, ThreeForkedRanksWithGradwireVariables) {
  const std::string port = std::to_string(free_port());
  const std::string job = unique_job_id();
  const auto codes = run_forked(3, [&](int r) {
    return env_rank_main(r, {{"GW_RANK", std::to_string(r)},
                             {"GW_SIZE", "3"},
                             {"GW_LOCAL_SIZE", "3"},
                             {"GW_PORT", port},
                             {"GW_JOB_ID", job}});
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST_F(LaunchEnvTest, ThreeForkedRanksWithARandomTokenAndNoJobId) {
  const std::string port = std::to_string(free_port());
  const std::string token = random_token();
  const auto codes = run_forked(3, [&](int r) {
    return env_rank_main(r, {{"GW_RANK", std::to_string(r)},
                             {"GW_SIZE", "3"},
                             {"GW_LOCAL_SIZE", "3"},
                             {"GW_PORT", port},
                             {"GW_TOKEN", token}});
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST_F(LaunchEnvTest, ThreeForkedRanksWithTheInsecureOptIn) {
  const std::string port = std::to_string(free_port());
  const auto codes = run_forked(3, [&](int r) {
    return env_rank_main(r, {{"GW_RANK", std::to_string(r)},
                             {"GW_SIZE", "3"},
                             {"GW_LOCAL_SIZE", "3"},
                             {"GW_PORT", port},
                             {"GW_INSECURE_LOCAL", "1"}});
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

// A process started with the job's environment but another token (or none) knocks first on
// the root's port as rank 1: it is turned away, and the real rank 1 still joins.
TEST_F(LaunchEnvTest, StrangerWithTheJobsEnvironmentButNotItsTokenCannotJoin) {
  const std::string port = std::to_string(free_port());
  const std::string token = random_token();
  std::vector<std::pair<std::string, std::string>> job = {
      {"GW_SIZE", "2"}, {"GW_LOCAL_SIZE", "2"}, {"GW_PORT", port}, {"GW_TOKEN", token}};
  auto as_rank = [&](int r) {
    auto v = job;
    v.emplace_back("GW_RANK", std::to_string(r));
    return v;
  };
  const pid_t zero = spawn([&] { return env_rank_main(0, as_rank(0)); });
  const pid_t stranger = spawn([&] {
    for (const auto& [k, v] : as_rank(1)) setenv(k.c_str(), v.c_str(), 1);
    setenv("GW_TOKEN", random_token().c_str(), 1);
    auto e = read_launch_env();
    if (!e.is_ok()) return 1;
    auto t = rendezvous_from_env(*e, "injected", seconds(5));
    if (t.is_ok()) return 2;
    std::fprintf(stderr, "stranger (expected to be refused): %s\n", t.status().to_string().c_str());
    if (t.status().code() != Code::kRemote) return 3;
    return t.status().message().find("without proving it holds the job's token") != std::string::npos ? 0 : 4;
  });
  EXPECT_EQ(wait_child(stranger, Clock::now() + seconds(8)), 0);
  const pid_t one = spawn([&] { return env_rank_main(1, as_rank(1)); });
  EXPECT_EQ(wait_child(one, Clock::now() + seconds(10)), 0);
  EXPECT_EQ(wait_child(zero, Clock::now() + seconds(10)), 0) << "rank 0 must see rank 1's blob, not the stranger's";
}

TEST_F(LaunchEnvTest, ThreeForkedRanksLikeMpirunOnTheDerivedPort) {
  const std::string job = std::to_string(100000 + getpid() % 100000);
  // Where will the root be? Skip rather than fail if something else holds that port.
  set({{"OMPI_COMM_WORLD_RANK", "0"},
       {"OMPI_COMM_WORLD_SIZE", "3"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
       {"OMPI_MCA_ess_base_jobid", job.c_str()}});
  auto probe = read_launch_env();
  ASSERT_TRUE(probe.is_ok()) << probe.status().to_string();
  Endpoint ep = Endpoint::loopback_v4(probe->root_port);
  if (!listen_on(ep, 1).is_ok()) GTEST_SKIP() << "derived port " << probe->root_port << " is busy";
  const auto codes = run_forked(3, [&](int r) {
    return env_rank_main(
        r, {{"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)}});
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST_F(LaunchEnvTest, ThreeForkedRanksLikeTorchrun) {
  const std::string master_port = std::to_string(free_port() - 1);
  const std::string run_id = unique_job_id();
  const auto codes = run_forked(3, [&](int r) {
    return env_rank_main(r, {{"RANK", std::to_string(r)},
                             {"WORLD_SIZE", "3"},
                             {"LOCAL_RANK", std::to_string(r)},
                             {"LOCAL_WORLD_SIZE", "3"},
                             {"MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", master_port},
                             {"TORCHELASTIC_RUN_ID", run_id}});
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST_F(LaunchEnvTest, RankZeroThatCannotListenSaysWhichPortAndWhatToDo) {
  Endpoint held = Endpoint::loopback_v4(0);
  auto holder = listen_on(held, 1);
  ASSERT_TRUE(holder.is_ok()) << holder.status().to_string();
  LaunchEnv e;
  e.rank = 0;
  e.size = 2;
  e.launcher = "gradwire";
  e.root_address = "127.0.0.1";
  e.root_port = held.port;
  auto t = rendezvous_from_env(e, "x", seconds(2));
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kSystem) << t.status().to_string();
  EXPECT_NE(t.status().message().find(std::to_string(held.port)), std::string::npos) << t.status().to_string();
  EXPECT_NE(t.status().message().find("GW_PORT"), std::string::npos) << t.status().to_string();
}

TEST_F(LaunchEnvTest, OneRankMeetsNobody) {
  LaunchEnv e;
  e.rank = 0;
  e.size = 1;
  e.launcher = "gradwire";
  auto t = rendezvous_from_env(e, std::string(64 * 1024, 'a'), seconds(1));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].size(), 64u * 1024);
  e.rank = 1;
  EXPECT_EQ(rendezvous_from_env(e, "x", seconds(1)).status().code(), Code::kInvalidArgument);
  e.rank = 0;
  EXPECT_EQ(rendezvous_from_env(e, std::string(64 * 1024 + 1, 'a'), seconds(1)).status().code(),
            Code::kInvalidArgument);
}

TEST_F(LaunchEnvTest, RootsEnd) { EXPECT_TRUE(roots_idle()); }

}  // namespace
}  // namespace gw::bootstrap
