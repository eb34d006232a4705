// What a launcher (torchrun, mpirun, srun, a PMI launcher, or plain GW_* variables) told this
// process: rank, size, local rank, where the rendezvous root is, and the job's token.
//
// SECURITY. The token never crosses the wire (the handshake in root_server.cpp proves it), so
// how well a job is protected depends only on how secret its token is:
// - GW_TOKEN, 32 random hex digits shared by every rank (`export GW_TOKEN=$(openssl rand -hex
//   16)` in the job script), or the unique-id path (create_unique_id + rendezvous, whose token
//   comes from getrandom()): real authentication. Only a process that knows the token joins.
// - A token derived from the launcher's job id (TORCHELASTIC_RUN_ID, the OpenMPI job id,
//   SLURM_JOB_ID.SLURM_STEP_ID, GW_JOB_ID, ...) is not a secret: anyone who can guess or read
//   the job id can compute it. It only keeps out strays (a rank of another job, a port
//   scanner, a stale process from an earlier run). Under OpenMPI the per-job random key mpirun
//   exports (OMPI_MCA_orte_precondition_transports) goes into it too, which makes it hard to
//   guess from outside the job, but it is still readable by anyone who can read the job's
//   environment.
// - Neither, with more than one rank: nothing would tell the job's ranks from any process that
//   knows the port, so read_launch_env() refuses, unless GW_INSECURE_LOCAL=1 says to accept
//   that (then a WARN says so, and the token is derived from what there is).
#include <arpa/inet.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/socket.hpp"

namespace gw::bootstrap {
namespace {

// Derived ports fall in [kPortBase, kPortBase + kPortSpan): below Linux's default ephemeral
// range (32768-60999), so outgoing connections rarely hold them.
constexpr long kPortBase = 20000;
constexpr long kPortSpan = 12000;

// An unset variable and an empty one are the same: absent.
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// The value as it may appear in an error message.
std::string shown(const char* v) {
  std::string s(v);
  if (s.size() > 64) s = s.substr(0, 64) + "...";
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) c = '?';
  }
  return "'" + s + "'";
}

// A decimal integer in [lo, hi], digits only.
Result<long> env_int(const char* name, long lo, long hi) {
  const char* v = env(name);
  if (v == nullptr) return invalid_argument(std::string(name) + " is not set");
  bool ok = true;
  long x = 0;
  for (const char* p = v; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9' || x > (1L << 40)) {
      ok = false;
      break;
    }
    x = x * 10 + (*p - '0');
  }
  if (!ok || x < lo || x > hi) {
    return invalid_argument(std::string(name) + "=" + shown(v) + " is not an integer in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
  }
  return x;
}

struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;  // may be nullptr
  const char* local_size;  // may be nullptr
};

const Launcher kLaunchers[] = {
    {"gradwire", "GW_RANK", "GW_SIZE", "GW_LOCAL_RANK", "GW_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

// The variables that name this job, for each launcher, most specific first. Every rank of
// one job sees the same values.
void add(std::string& key, const char* name) {
  if (const char* v = env(name)) key += std::string("|") + name + "=" + v;
}

bool add_first(std::string& key, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (env(n) != nullptr) {
      add(key, n);
      return true;
    }
  }
  return false;
}

// OpenMPI's job family from OMPI_MCA_orte_hnp_uri ("253689856.0;tcp://..."): the part
// before the first ';'.
bool add_hnp_jobfam(std::string& key) {
  const char* uri = env("OMPI_MCA_orte_hnp_uri");
  if (uri == nullptr) return false;
  const char* semi = std::strchr(uri, ';');
  key += "|hnp=" + std::string(uri, semi != nullptr ? static_cast<size_t>(semi - uri) : std::strlen(uri));
  return true;
}

bool add_slurm_step(std::string& key) {
  if (env("SLURM_JOB_ID") == nullptr) return false;
  add(key, "SLURM_JOB_ID");
  add(key, "SLURM_STEP_ID");
  return true;
}

// Returns whether a job id was found.
bool job_key(const Launcher& l, long size, std::string& key) {
  key = std::string("gradwire-bootstrap-1|") + l.name + "|" + std::to_string(size);
  const std::string name = l.name;
  bool found = false;
  if (name == "gradwire") {
    found = add_first(key, {"GW_JOB_ID"});
  } else if (name == "torchrun") {
    found = add_first(key, {"TORCHELASTIC_RUN_ID"});
    add(key, "TORCHELASTIC_RESTART_COUNT");  // a restarted group gets a new token
    add(key, "MASTER_ADDR");
    add(key, "MASTER_PORT");
  } else if (name == "openmpi") {
    found = add_first(key, {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}) || add_hnp_jobfam(key);
    add(key, "OMPI_MCA_orte_precondition_transports");  // per-job random key from mpirun
  } else if (name == "slurm") {
    found = add_slurm_step(key);
  } else if (name == "pmi") {
    found = add_first(key, {"PMI_JOBID", "PMI_KVSNAME", "PMIX_NAMESPACE"});
  }
  if (!found) {
    // A launcher nested in another (GW_* set by a script under srun, say): use the outer id.
    found = add_first(key, {"TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}) ||
            add_slurm_step(key) || add_first(key, {"PMI_JOBID"});
  }
  return found;
}

uint64_t hash64(const std::string& s, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

Status parse_token(const char* hex, uint8_t out[16]) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const size_t n = std::strlen(hex);
  bool ok = n == 32;
  for (size_t i = 0; ok && i < 16; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      ok = false;
    else
      out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  if (!ok)
    return invalid_argument("GW_TOKEN must be exactly 32 hex digits (16 random bytes), got " + std::to_string(n) +
                            " characters");
  return Status::ok();
}

// "host:port", "1.2.3.4:port" or "[v6addr]:port".
Status parse_root(const char* text, LaunchEnv& e) {
  const std::string s(text);
  const auto bad = [&](const std::string& why) {
    return invalid_argument("GW_ROOT=" + shown(text) + " is not host:port (" + why + ")");
  };
  std::string host, port;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return bad("write IPv6 as [addr]:port");
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    const size_t colon = s.find(':');
    if (colon == std::string::npos) return bad("no port");
    if (s.find(':', colon + 1) != std::string::npos) return bad("write IPv6 as [addr]:port");
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (!plausible_host(host)) return bad("bad host");
  long p = 0;
  bool ok = !port.empty() && port.size() <= 5;
  for (char c : port) {
    if (c < '0' || c > '9')
      ok = false;
    else
      p = p * 10 + (c - '0');
  }
  if (!ok || p < 1 || p > 65535) return bad("the port must be in [1, 65535]");
  e.root_address = host;
  e.root_port = static_cast<uint16_t>(p);
  return Status::ok();
}

}  // namespace

Result<LaunchEnv> read_launch_env() {
  const Launcher* l = nullptr;
  for (const Launcher& c : kLaunchers) {
    if (env(c.rank) != nullptr || env(c.size) != nullptr) {
      l = &c;
      break;
    }
  }
  if (l == nullptr) {
    return invalid_argument(
        "no launcher environment found: set GW_RANK and GW_SIZE, or start under torchrun (RANK, WORLD_SIZE), mpirun "
        "(OMPI_COMM_WORLD_*), srun (SLURM_PROCID, SLURM_NTASKS) or a PMI launcher (PMI_RANK, PMI_SIZE)");
  }
  for (const char* v : {l->rank, l->size}) {
    if (env(v) == nullptr) {
      return invalid_argument(std::string(v) + " is not set, but " + (v == l->rank ? l->size : l->rank) + " is (" +
                              l->name + " launch)");
    }
  }
  LaunchEnv e;
  e.launcher = l->name;
  GW_ASSIGN_OR_RETURN(const long size, env_int(l->size, 1, frames::kMaxRanks));
  GW_ASSIGN_OR_RETURN(const long rank, env_int(l->rank, 0, size - 1));
  e.size = static_cast<int>(size);
  e.rank = static_cast<int>(rank);
  long local_size = -1;
  if (l->local_size != nullptr && env(l->local_size) != nullptr) {
    GW_ASSIGN_OR_RETURN(local_size, env_int(l->local_size, 1, size));
  }
  if (l->local_rank != nullptr && env(l->local_rank) != nullptr) {
    GW_ASSIGN_OR_RETURN(const long lr, env_int(l->local_rank, 0, (local_size > 0 ? local_size : size) - 1));
    e.local_rank = static_cast<int>(lr);
  }

  // Are all ranks on this host? Plain GW_RANK/GW_SIZE with no GW_LOCAL_SIZE and no root are
  // taken to mean yes: they are set by hand or by a script, and a job on several hosts has to
  // say where rank 0 is anyway (GW_ROOT), as torchrun's own default of localhost does.
  bool single_host = size == 1 || local_size == size;
  const bool assumed_single_host = std::string(l->name) == "gradwire" && local_size < 0 && env("GW_ROOT") == nullptr &&
                                   env("MASTER_ADDR") == nullptr;
  single_host = single_host || assumed_single_host;
  if (e.launcher == "slurm") {
    const char* nodes_var = env("SLURM_STEP_NUM_NODES") != nullptr ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
    if (env(nodes_var) != nullptr) {
      GW_ASSIGN_OR_RETURN(const long nodes, env_int(nodes_var, 1, 1L << 24));
      single_host = single_host || nodes == 1;
    }
  }

  std::string key;
  const bool have_job_id = job_key(*l, size, key);

  long port = -1;
  if (env("GW_PORT") != nullptr) {
    GW_ASSIGN_OR_RETURN(port, env_int("GW_PORT", 1, 65535));
  }
  if (const char* root = env("GW_ROOT")) {
    GW_RETURN_IF_ERROR(parse_root(root, e));
  } else if (const char* master = env("MASTER_ADDR")) {
    if (!plausible_host(master))
      return invalid_argument(std::string("MASTER_ADDR=") + shown(master) + " is not a host name or address");
    e.root_address = master;
    if (port < 0) {
      if (env("MASTER_PORT") == nullptr) {
        return invalid_argument(
            "MASTER_ADDR is set but neither GW_PORT nor MASTER_PORT is (the root listens on MASTER_PORT + 1)");
      }
      GW_ASSIGN_OR_RETURN(const long mp, env_int("MASTER_PORT", 1, 65534));
      port = mp + 1;  // MASTER_PORT itself belongs to torch.distributed's store
    }
    e.root_port = static_cast<uint16_t>(port);
  } else if (single_host) {
    e.root_address = "127.0.0.1";
    e.root_port = static_cast<uint16_t>(port > 0 ? port : kPortBase + static_cast<long>(hash64(key, 3) % kPortSpan));
    if (assumed_single_host && size > 1) {
      GW_INFO(kBootstrap,
              "bootstrap: GW_RANK/GW_SIZE without GW_ROOT or GW_LOCAL_SIZE: all %ld ranks are taken to be on "
              "this host (rendezvous on 127.0.0.1:%u); a job on several hosts sets GW_ROOT=host:port",
              size, static_cast<unsigned>(e.root_port));
    }
  } else {
    return invalid_argument(
        std::string("the ") + l->name +
        " ranks may span several hosts: set GW_ROOT=host:port (a port on rank 0's host) or MASTER_ADDR"
        " (with MASTER_PORT or GW_PORT)" +
        (std::string(l->name) == "gradwire" ? ", or GW_LOCAL_SIZE=GW_SIZE when all ranks share this host" : ""));
  }

  bool insecure = false;
  if (const char* v = env("GW_INSECURE_LOCAL")) {
    if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0) {
      return invalid_argument(std::string("GW_INSECURE_LOCAL=") + shown(v) + " must be 0 or 1");
    }
    insecure = *v == '1';
  }
  if (const char* t = env("GW_TOKEN")) {
    GW_RETURN_IF_ERROR(parse_token(t, e.token));
  } else {
    if (!have_job_id && size > 1) {
      if (!insecure) {
        return invalid_argument(
            std::string("the ") + l->name + " environment has " + std::to_string(size) +
            " ranks but neither GW_TOKEN nor a launcher job id, so nothing would keep another process that knows the "
            "rendezvous port from joining as a rank: set the same secret on every rank (export GW_TOKEN=$(openssl rand "
            "-hex 16) in the job script), or run under a launcher that sets a job id (torchrun, mpirun, srun), or set "
            "GW_INSECURE_LOCAL=1 to accept any local process that knows the port");
      }
      GW_WARN(kBootstrap,
              "bootstrap: GW_INSECURE_LOCAL=1 and no GW_TOKEN or job id: any process that can reach the rendezvous "
              "port %u can join this job of %ld ranks as a rank (set GW_TOKEN to authenticate)",
              static_cast<unsigned>(e.root_port), size);
    }
    const uint64_t a = hash64(key, 1), b = hash64(key, 2);
    for (int i = 0; i < 8; ++i) {
      e.token[i] = static_cast<uint8_t>(a >> (8 * i));
      e.token[8 + i] = static_cast<uint8_t>(b >> (8 * i));
    }
  }
  return e;
}

}  // namespace gw::bootstrap
