#include "common/env_vars.hpp"

#include <algorithm>
#include <cstring>

extern char** environ;

namespace gw::env {
namespace {

// Read by the library: each is in docs/configuration.md's table (tests/env/check_env_doc.py
// checks both ways against the sources).
const char* const kLibrary[] = {
    "GW_RANK",           "GW_SIZE",
    "GW_LOCAL_RANK",     "GW_LOCAL_SIZE",
    "GW_ROOT",           "GW_PORT",
    "GW_SOCKET_ADDR",    "GW_SOCKET_IFNAME",
    "GW_TOKEN",          "GW_JOB_ID",
    "GW_INSECURE_LOCAL", "GW_TIMEOUT_S",
    "GW_ALGO",           "GW_CODEC",
    "GW_TUNE",           "GW_LINK_GBPS",
    "GW_CHUNK_BYTES",    "GW_DENSE_THRESHOLD",
    "GW_HOST_SIMD",      "GW_NCCL_LIBRARY",
    "GW_DEBUG",          "GW_DEBUG_SUBSYS",
    "GW_DEBUG_FILE",     "GW_TIMELINE",
    "GW_UCX_SPIN_US",    "GW_HOST_ID",
    "GW_INTER_ALGO",     "GW_STANDIN_SKIP_CALLER_WAIT",
    "GW_COST_MODEL",
};

// Read by scripts/, tests/ and tools/ (docs/configuration.md, "Scripts and tests").
const char* const kScripts[] = {
    "GW_BUILD_DIR",
    "GW_BUILD_TYPE",
    "GW_SKIP_INSTALL",
    "GW_SKIP_TORCH_SETUP",
    "GW_VENV",
    "GW_PYTHON",
    "GW_TORCH_SPEC",
    "GW_FUZZ_BUILD_DIR",
    "GW_MPIRUN",
    "GW_TEST_SEED",
    "GW_TEST_TIMEOUT_S",
    "GW_FAKE_LIBCUDA",
    "GW_FAKE_OLD_NCCL",
    "GW_WRITE_FUZZ_CORPUS",
    "GW_BOOTSTRAP_CORPUS_DIR",
    "GW_UCX_ADDRESS_CORPUS_DIR",
    "GW_UCX_ADDRESS_MUTATIONS",
    "GW_UCX_ADDRESS_PROBE_REJECTED",
    "GW_UCX_ADDRESS_SEED",
    "GW_REQUIRE_GPU",
    "GW_REQUIRE_NCCL",
    "GW_TEST_2POW31",
    "GW_TEST_HUGE",
};
const char* const kScriptPrefixes[] = {"GW_NETNS_", "GW_SUITE_"};

bool one_edit_apart(const std::string& a, const std::string& b) {
  if (a.size() > b.size() + 1 || b.size() > a.size() + 1) return false;
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  size_t ja = a.size(), jb = b.size();
  while (ja > i && jb > i && a[ja - 1] == b[jb - 1]) --ja, --jb;
  return ja - i <= 1 && jb - i <= 1;
}

}  // namespace

bool is_known(const std::string& name) {
  for (const char* k : kLibrary) {
    if (name == k) return true;
  }
  for (const char* k : kScripts) {
    if (name == k) return true;
  }
  for (const char* p : kScriptPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::vector<std::string> unknown_in_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "GW_", 3) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    const std::string name = eq != nullptr ? std::string(*e, static_cast<size_t>(eq - *e)) : std::string(*e);
    if (!is_known(name)) out.push_back(name);
  }
  return out;
}

std::string closest_known(const std::string& name) {
  std::string best;  // the longest match: GW_DEBUG_SUBSYSTEM is GW_DEBUG_SUBSYS, not GW_DEBUG
  for (const char* k : kLibrary) {
    const std::string known = k;
    const bool prefix = (name.size() > known.size() && name.rfind(known, 0) == 0) ||
                        (known.size() > name.size() && known.rfind(name, 0) == 0);
    if ((one_edit_apart(name, known) || prefix) && known.size() > best.size()) best = known;
  }
  return best;
}

}  // namespace gw::env
