#include "perf/launch.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

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
  gw_unique_id_t id;
  check(gw_get_unique_id(&id), "gw_get_unique_id");
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int r = 0; r < np; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      std::exit(1);
    }
    if (pid == 0) {
      check(gw_comm_init_rank(&comm, np, id, r, nullptr), "gw_comm_init_rank");
      return comm;
    }
    children.push_back(pid);
  }
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
