#include "perf/launch.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "transport/bootstrap/fd_io.hpp"

namespace gw::perf {

void check(gw_result_t r, const char* where) {
  if (r == GW_SUCCESS) return;
  std::fprintf(stderr, "%s failed: %s: %s\n", where, gw_get_error_string(r), gw_get_last_error());
  std::exit(1);
}

gw_comm_t launch(int np) {
  gw_comm_t comm = nullptr;
  if (np <= 0) {
    check(gw_comm_init_from_env(&comm, nullptr), "gw_comm_init_from_env");
    return comm;
  }
  // Ranks are forked before any gradwire call: gw_get_unique_id starts the rendezvous
  // root's thread, and a process must not fork while another of its threads may hold a lock.
  // Rank 0 creates the id, as in a real job, and hands it to the others through pipes.
  std::vector<int> fds(2 * static_cast<size_t>(np));
  for (int r = 0; r < np; ++r) {
    if (pipe(&fds[2 * static_cast<size_t>(r)]) != 0) {
      std::perror("pipe");
      std::exit(1);
    }
  }
  std::fflush(stdout);
  signal(SIGPIPE, SIG_IGN);
  std::vector<pid_t> children;
  for (int r = 0; r < np; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      std::exit(1);
    }
    if (pid == 0) {
      gw_unique_id_t id;
      if (r == 0) {
        check(gw_get_unique_id(&id), "gw_get_unique_id");
        for (int q = 1; q < np; ++q) bootstrap::write_all(fds[2 * static_cast<size_t>(q) + 1], &id, sizeof id);
      } else if (!bootstrap::read_all(fds[2 * static_cast<size_t>(r)], &id, sizeof id)) {
        std::fprintf(stderr, "rank %d: rank 0 gave no unique id\n", r);
        std::exit(1);
      }
      for (int fd : fds) close(fd);
      check(gw_comm_init_rank(&comm, np, id, r, nullptr), "gw_comm_init_rank");
      return comm;
    }
    children.push_back(pid);
  }
  for (int fd : fds) close(fd);
  int result = 0;
  for (pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) {
      result = 1;
      continue;
    }
    if (result == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  std::exit(result);
}

}  // namespace gw::perf
