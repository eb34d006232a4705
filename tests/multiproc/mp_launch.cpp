#include "tests/multiproc/mp_launch.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "collectives/comm/comm_init.hpp"
#include "transport/bootstrap/fd_io.hpp"

namespace gw::test {

namespace {

constexpr int kExitNoId = 3;

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

int rank_failed(int rank, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "rank %d: %s\n", rank, buf);
  return kRankFailed;
}

int expect_invalid_usage(const MismatchCase& k, Communicator& c, int rank) {
  const Status s = k.call(c, rank);
  if (s.code() != Code::kInvalidUsage)
    return rank_failed(rank, "%s: expected kInvalidUsage, got %s", k.what, s.to_string().c_str());
  for (const char* name : k.names) {
    if (s.message().find(name) == std::string::npos)
      return rank_failed(rank, "%s: the message does not name %s: %s", k.what, name, s.message().c_str());
  }
  return kRankOk;
}

std::vector<int> fork_communicators(int np, const CommConfig& cfg,
                                    const std::function<int(Communicator&, int rank, int np)>& body,
                                    std::chrono::seconds limit, const std::vector<int>& node_of) {
  std::vector<int> ranks;
  for (int r = 0; r < np; ++r) ranks.push_back(r);
  return fork_with_unique_id(
      ranks, std::chrono::seconds(30),
      [&](int rank, const bootstrap::UniqueId& id) {
        if (!node_of.empty())
          setenv("GW_HOST_ID", ("node" + std::to_string(node_of[static_cast<size_t>(rank)])).c_str(), 1);
        auto comm = coll::init_communicator(
            rank, np,
            [&](const std::string& blob) {
              return bootstrap::rendezvous(id, rank, np, blob, std::chrono::seconds(30));
            },
            cfg);
        if (!comm.is_ok()) {
          std::fprintf(stderr, "rank %d: init failed: %s\n", rank, comm.status().to_string().c_str());
          return kRankInitFailed;
        }
        if (const Status s = (*comm)->barrier(); !s.is_ok()) {
          std::fprintf(stderr, "rank %d: first barrier failed: %s\n", rank, s.to_string().c_str());
          return kRankInitFailed;
        }
        return body(**comm, rank, np);
      },
      limit);
}

std::vector<int> fork_with_unique_id(const std::vector<int>& ranks, std::chrono::milliseconds root_timeout,
                                     const std::function<int(int, const bootstrap::UniqueId&)>& body,
                                     std::chrono::seconds limit) {
  std::fflush(stdout);
  std::fflush(stderr);
  signal(SIGPIPE, SIG_IGN);  // a child that died early must not take the creator with it
  const size_t n = ranks.size();
  std::vector<int> fds(2 * n, -1);  // pipe i carries the id from the creator to child i
  for (size_t i = 0; i < n; ++i) {
    if (pipe(&fds[2 * i]) != 0) {
      std::perror("pipe");
      std::abort();
    }
  }
  std::vector<pid_t> pids;
  for (size_t i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      std::abort();
    }
    if (pid == 0) {
      alarm(static_cast<unsigned>(limit.count()));
      bootstrap::UniqueId id{};
      if (ranks[i] == 0) {
        bootstrap::RootOptions options;
        options.address = "127.0.0.1";
        options.timeout = root_timeout;
        auto created = bootstrap::create_unique_id(options);
        if (!created.is_ok()) {
          std::fprintf(stderr, "unique id: %s\n", created.status().to_string().c_str());
          _exit(kExitNoId);
        }
        id = *created;
        for (size_t j = 0; j < n; ++j) {
          if (j != i) bootstrap::write_all(fds[2 * j + 1], id.bytes, sizeof id.bytes);
        }
      } else if (!bootstrap::read_all(fds[2 * i], id.bytes, sizeof id.bytes)) {
        _exit(kExitNoId);
      }
      for (int fd : fds) close(fd);
      const int code = body(ranks[i], id);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  for (int fd : fds) close(fd);
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(exit_code(status));
  }
  return codes;
}

int run_ranks(int np, const CommConfig& config, const std::function<int(Communicator&)>& body,
              std::chrono::seconds limit) {
  auto run = [&](Result<std::unique_ptr<Communicator>> comm) {
    if (!comm.is_ok()) {
      std::fprintf(stderr, "communicator init failed: %s\n", comm.status().to_string().c_str());
      return kExitNoId;
    }
    return body(**comm);
  };
  if (np <= 0) {
    auto env = bootstrap::read_launch_env();
    if (!env.is_ok()) {
      std::fprintf(stderr, "no launcher environment: %s\n", env.status().to_string().c_str());
      return kExitNoId;
    }
    const bootstrap::LaunchEnv e = *env;
    return run(coll::init_communicator(
        e.rank, e.size,
        [&](const std::string& blob) { return bootstrap::rendezvous_from_env(e, blob, config.timeout); }, config));
  }
  std::vector<int> ranks;
  for (int r = 0; r < np; ++r) ranks.push_back(r);
  const auto codes = fork_with_unique_id(
      ranks, config.timeout,
      [&](int rank, const bootstrap::UniqueId& id) {
        return run(coll::init_communicator(
            rank, np,
            [&](const std::string& blob) { return bootstrap::rendezvous(id, rank, np, blob, config.timeout); },
            config));
      },
      limit);
  for (int c : codes) {
    if (c != 0) return c;
  }
  return 0;
}

}  // namespace gw::test
