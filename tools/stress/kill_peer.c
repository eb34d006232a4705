/* Kills (or freezes) one rank of a real multi-process job and reports what the survivors saw:
 * which error, how fast, and whether any survivor crashed. One run per invocation of main's
 * loop; repeat with --runs. Usage:
 *   kill_peer [--np N] [--runs R] [--when mid|between|init] [--signal KILL|STOP]
 *             [--count ELEMS] [--timeout S] [--codec SPEC]
 * Exit status 0 only when every run met the goals (every survivor failed with REMOTE (or
 * TIMEOUT for STOP) in time, and no survivor died of a signal). */
#define _GNU_SOURCE
#include <gradwire/gradwire.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
  int np, runs, count;
  double timeout_s;
  const char* when;
  int sig;
  const char* codec;
} opts_t;

/* What a survivor reports through its pipe. */
typedef struct {
  int result;       /* gw_result_t of the failed call */
  double detect_s;  /* from the victim's death to the error */
  int calls_ok;
  char msg[200];
} report_t;

static int run_rank(const opts_t* o, int rank, gw_unique_id_t id, int victim, int out_fd, int go_fd) {
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  cfg.timeout_s = o->timeout_s;
  report_t rep;
  memset(&rep, 0, sizeof rep);
  gw_comm_t comm = NULL;
  double died_at = 0;
  if (strcmp(o->when, "init") == 0 && rank == victim) {
    usleep(20000);
    raise(o->sig);
  }
  gw_result_t r = gw_comm_init_rank(&comm, o->np, id, rank, &cfg);
  if (r != GW_SUCCESS) {
    rep.result = r;
    snprintf(rep.msg, sizeof rep.msg, "init: %s", gw_get_last_error());
    if (write(out_fd, &rep, sizeof rep) < 0) return 3;
    return 0;
  }
  gw_codec_t codec = NULL;
  if (o->codec != NULL) gw_codec_create(o->codec, &codec);
  float* x = malloc(sizeof(float) * (size_t)o->count);
  for (int i = 0; i < o->count; ++i) x[i] = 1.0f;
  int calls = 0;
  for (;;) {
    if (rank == victim && calls == 3) {
      if (strcmp(o->when, "between") == 0) raise(o->sig);
    }
    if (rank == victim && calls == 3 && strcmp(o->when, "mid") == 0) {
      /* the parent kills us while we are inside this call */
      char c = 1;
      if (write(go_fd, &c, 1) < 0) return 3;
    }
    double t0 = now_s();
    r = gw_allreduce(comm, x, x, (size_t)o->count, GW_FLOAT32, GW_SUM, codec, NULL);
    if (r != GW_SUCCESS) {
      rep.result = r;
      (void)t0;
      snprintf(rep.msg, sizeof rep.msg, "%s", gw_get_last_error());
      break;
    }
    ++calls;
    if (calls > 100000) break;
  }
  rep.calls_ok = calls;
  (void)died_at;
  rep.detect_s = now_s();
  if (write(out_fd, &rep, sizeof rep) < 0) return 3;
  gw_comm_abort(comm);
  gw_comm_destroy(comm);
  if (codec) gw_codec_destroy(codec);
  free(x);
  return 0;
}

int main(int argc, char** argv) {
  opts_t o = {3, 10, 1 << 16, 10.0, "mid", SIGKILL, NULL};
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--np") && i + 1 < argc) o.np = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) o.runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--count") && i + 1 < argc) o.count = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) o.timeout_s = atof(argv[++i]);
    else if (!strcmp(argv[i], "--when") && i + 1 < argc) o.when = argv[++i];
    else if (!strcmp(argv[i], "--codec") && i + 1 < argc) o.codec = argv[++i];
    else if (!strcmp(argv[i], "--signal") && i + 1 < argc) {
      ++i;
      o.sig = !strcmp(argv[i], "STOP") ? SIGSTOP : SIGKILL;
    } else {
      fprintf(stderr, "usage: see the comment at the top of kill_peer.c\n");
      return 2;
    }
  }
  int failures = 0;
  double worst = 0;
  for (int run = 0; run < o.runs; ++run) {
    const int victim = 1 + run % (o.np - 1);
    int pipes[64][2], go[2];
    if (pipe(go) != 0) return 3;
    pid_t pids[64];
    gw_unique_id_t id;
    int idp[2];
    if (pipe(idp) != 0) return 3;
    for (int rk = 0; rk < o.np; ++rk) {
      if (pipe(pipes[rk]) != 0) return 3;
      pids[rk] = fork();
      if (pids[rk] == 0) {
        if (rk == 0) {
          if (gw_get_unique_id(&id) != GW_SUCCESS) _exit(4);
          for (int k = 1; k < o.np; ++k)
            if (write(idp[1], &id, sizeof id) != sizeof id) _exit(4);
        } else {
          if (read(idp[0], &id, sizeof id) != sizeof id) _exit(4);
        }
        _exit(run_rank(&o, rk, id, victim, pipes[rk][1], go[1]));
      }
      close(pipes[rk][1]);
    }
    double died = 0;
    if (!strcmp(o.when, "mid")) {
      char c;
      if (read(go[0], &c, 1) == 1) {
        usleep(200);
        kill(pids[victim], o.sig);
      }
      died = now_s();
    } else {
      died = now_s();  /* approximate: the victim kills itself around now */
    }
    int bad = 0;
    for (int rk = 0; rk < o.np; ++rk) {
      if (rk == victim) continue;
      report_t rep;
      ssize_t n = read(pipes[rk][0], &rep, sizeof rep);
      double got = now_s();
      if (n != (ssize_t)sizeof rep) {
        printf("run %d rank %d: no report\n", run, rk);
        bad = 1;
        continue;
      }
      double took = rep.detect_s > died ? rep.detect_s - died : got - died;
      if (took > worst) worst = took;
      const int want_ok = o.sig == SIGSTOP ? (rep.result == GW_ERR_TIMEOUT || rep.result == GW_ERR_REMOTE)
                                           : rep.result == GW_ERR_REMOTE;
      const double limit = o.sig == SIGSTOP ? o.timeout_s + 1.0 : 2.0;
      if (!want_ok || took > limit) bad = 1;
      printf("run %d rank %d: %s in %.2f s after %d calls: %s\n", run, rk, gw_get_error_string(rep.result), took,
             rep.calls_ok, rep.msg);
    }
    if (o.sig == SIGSTOP) kill(pids[victim], SIGKILL);
    for (int rk = 0; rk < o.np; ++rk) {
      int st = 0;
      waitpid(pids[rk], &st, 0);
      if (rk != victim && (WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0))) {
        printf("run %d rank %d: CRASHED (%s %d)\n", run, rk, WIFSIGNALED(st) ? "signal" : "exit",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        bad = 1;
      }
      close(pipes[rk][0]);
    }
    close(go[0]);
    close(go[1]);
    close(idp[0]);
    close(idp[1]);
    failures += bad;
  }
  printf("%d of %d runs failed the goals; slowest detection %.2f s\n", failures, o.runs, worst);
  return failures == 0 ? 0 : 1;
}
