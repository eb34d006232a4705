/* Kills (or freezes) one rank of a real multi-process job and reports what the survivors saw:
 * which error, how fast, how long their teardown took, and whether any survivor crashed,
 * hung, or printed a sanitizer, UCX assertion or UCX signal report.
 *
 * Each run forks np ranks (unique-id init, rank 0 hosts the rendezvous) and picks, from a
 * per-run seed, the victim, the mode, the call it dies in, the element count, the codec and
 * algorithm, the kill delay and each survivor's teardown. Modes:
 *   mid       the victim is killed delay us after it entered its kcall-th all-reduce
 *   between   the victim finished kcall calls and sits outside any call; survivors are in the next
 *   idle      like between, but the survivors also sit outside any call (idle_ms) when it dies
 *   init      the victim is killed delay us after it entered gw_comm_init_rank
 *   iwait     mid, with gw_iallreduce + gw_wait
 *   idestroy  the kcall-th call is a gw_iallreduce that the victim never posts (it is killed
 *             delay us later); survivors call gw_comm_destroy with it in flight, then gw_wait
 *             (the request outlives the communicator)
 *   none      nobody is killed: every rank must finish kcall + 2 calls (a sanity check)
 * Survivors tear down in one of three ways: abort + destroy, destroy alone, or abort from a
 * second thread while the main one destroys.
 *
 * --shrink (modes mid, between, idle, iwait): every rank first makes two top-k all-reduces with
 * an EF state, so that its residual holds mass; after the failed call each survivor calls
 * gw_comm_shrink and checks, on the new communicator, its size (np - 1) and rank, an exact
 * dense sum over the survivors, and that the EF mass carried over is conserved by a top-k
 * call with the old state (outputs + residuals after = inputs + residuals before, element by
 * element); only then does it tear both communicators down. Goals added: the shrink succeeds
 * within --limit s (SIGKILL) or 2 * timeout + 2 s (SIGSTOP: the frozen rank is waited for
 * that long), and both checks pass.
 *
 *   kill_peer [--runs R] [--seed S] [--mix] [--modes m1,m2,..] [--np N | --np-min A --np-max B]
 *             [--victim R|random] [--count N | --count-min A --count-max B] [--combo I|mix]
 *             [--delay-us-max D] [--init-delay-us-max D] [--signal KILL|STOP] [--timeout S]
 *             [--limit S] [--teardown-limit S] [--run-limit S] [--log-dir DIR] [--keep-logs]
 *             [--gdb-on-hang] [--quiet] [--shrink]
 * --mix is --modes mid,between,idle,init,iwait,idestroy --np-min 2 --np-max 6 --victim random
 * --count-min 1024 --count-max 16777216 --combo mix. Run N is replayed with --seed S --first N
 * --runs 1 and the same options (each run prints them).
 *
 * Goals of a run: no survivor dies of a signal, exits non-zero, hangs, or prints a report of
 * AddressSanitizer, UBSan, a UCX assertion or a UCX-caught signal; for SIGKILL, every
 * survivor's failed call returns GW_ERR_REMOTE within --limit s (2) of the kill (init mode: an
 * init that fails later, with GW_ERR_TIMEOUT or GW_ERR_REMOTE, by the init timeout + 2 s, is
 * accepted too and counted as init-to: the victim died before it reached the rendezvous, so no
 * peer could know that it existed); for SIGSTOP, GW_ERR_TIMEOUT or GW_ERR_REMOTE within timeout + 1 s;
 * every survivor's teardown within --teardown-limit s (10). Exit status 0 only when every run
 * met them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <gradwire/gradwire.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NP 16

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
  struct timespec ts;
  ts.tv_sec = us / 1000000;
  ts.tv_nsec = (us % 1000000) * 1000;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* splitmix64: one stream per run, from the run's seed. */
static uint64_t next_u64(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int pick(uint64_t* s, int lo, int hi) { /* uniform in [lo, hi] */
  return lo + (int)(next_u64(s) % (uint64_t)(hi - lo + 1));
}

enum { M_MID, M_BETWEEN, M_IDLE, M_INIT, M_IWAIT, M_IDESTROY, M_NONE, M_COUNT };
static const char* const kModeNames[M_COUNT] = {"mid", "between", "idle", "init", "iwait", "idestroy", "none"};

enum { T_ABORT_DESTROY, T_DESTROY, T_THREAD_ABORT, T_COUNT };
static const char* const kTeardownNames[T_COUNT] = {"abort+destroy", "destroy", "thread-abort"};

typedef struct {
  const char* codec; /* NULL: dense */
  gw_algo_t algo;
  const char* name;
  int scatter; /* 1: gw_reduce_scatterv (uneven blocks, in place), 2: gw_allgather_compressed (in place), 0: an
                  all-reduce */
} combo_t;
static const combo_t kCombos[] = {
    {NULL, GW_ALGO_AUTO, "none/auto", 0},
    {NULL, GW_ALGO_RING, "none/ring", 0},
    {"fp16", GW_ALGO_COMPRESSED_RING, "fp16/compressed_ring", 0},
    {"bf16", GW_ALGO_SCATTER_REDUCE, "bf16/scatter_reduce", 0},
    {"qsgd:bits=4,bucket=512", GW_ALGO_SCATTER_REDUCE, "qsgd/scatter_reduce", 0},
    {"topk:ratio=0.01", GW_ALGO_SPARSE_ALLGATHER, "topk/sparse_allgather", 0},
    {"sign:bucket=512", GW_ALGO_AUTO, "sign/auto", 0},
    {NULL, GW_ALGO_RECURSIVE_DOUBLING, "none/recursive_doubling", 0},
    {"qsgd:bits=8", GW_ALGO_HALVING_DOUBLING, "qsgd/halving_doubling", 0},
    {"topk:ratio=0.05", GW_ALGO_SPARSE_DOUBLING, "topk/sparse_doubling", 0},
    {NULL, GW_ALGO_RABENSEIFNER, "none/rabenseifner", 0},
    {"qsgd:bits=4", GW_ALGO_AUTO, "qsgd/reduce_scatterv", 1},
    {NULL, GW_ALGO_AUTO, "raw/reduce_scatterv", 1},
    {"qsgd:bits=8,rounding=nearest", GW_ALGO_AUTO, "qsgd/allgather_compressed", 2},
};
#define NUM_COMBOS ((int)(sizeof kCombos / sizeof kCombos[0]))

typedef struct {
  int runs, first;
  uint64_t seed;
  unsigned modes; /* bit per mode */
  int np_min, np_max;
  int victim; /* -1: random */
  int count_min, count_max;
  int combo; /* -1: mix */
  int delay_us_max, init_delay_us_max;
  int sig;
  double timeout_s, limit_s, teardown_limit_s, run_limit_s;
  const char* log_dir;
  int keep_logs, gdb_on_hang, quiet, shrink;
} opts_t;

/* One run, chosen by the parent before the fork (the children inherit it). */
typedef struct {
  int np, victim, mode, kcall, count, combo, delay_us;
  int teardown[MAX_NP];
  double timeout_s;
} plan_t;

/* What a rank reports through its pipe: first this, then a double (teardown seconds). */
typedef struct {
  int result;  /* gw_result_t of the failed call (GW_SUCCESS in mode none) */
  int in_init; /* the failure came from gw_comm_init_rank */
  double at;   /* CLOCK_MONOTONIC when the call returned */
  int calls_ok;
  char msg[240];
  /* --shrink */
  int shrink_tried, shrink_result, new_size, new_rank, dense_ok, ef_ok;
  double shrink_s;
  char shrink_msg[240];
} report_t;

static int write_all(int fd, const void* p, size_t n) {
  const char* c = (const char*)p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Reads n bytes unless deadline (CLOCK_MONOTONIC seconds) passes or the writer closes. */
static size_t read_until(int fd, void* p, size_t n, double deadline) {
  char* c = (char*)p;
  size_t got = 0;
  while (got < n) {
    const double left = deadline - now_s();
    if (left <= 0) break;
    struct pollfd pfd = {fd, POLLIN, 0};
    const int k = poll(&pfd, 1, (int)(left * 1000) + 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    ssize_t r = read(fd, c + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  return got;
}

static void* abort_thread(void* comm) {
  gw_comm_abort((gw_comm_t)comm);
  return NULL;
}

static void teardown(gw_comm_t comm, int how) {
  if (how == T_ABORT_DESTROY) {
    gw_comm_abort(comm);
    gw_comm_destroy(comm);
  } else if (how == T_DESTROY) {
    gw_comm_destroy(comm);
  } else {
    gw_result_t async = GW_SUCCESS;
    gw_comm_get_async_error(comm, &async);
    pthread_t t;
    const int started = pthread_create(&t, NULL, abort_thread, comm) == 0;
    if (started) pthread_join(t, NULL);
    gw_comm_destroy(comm);
  }
}

#define EF_COUNT 65537
static const char* const kEfCodec = "topk:ratio=0.01";

static void ef_input(float* x, int rank, int step) {
  for (int i = 0; i < EF_COUNT; ++i) x[i] = sinf(0.37f * (float)i + (float)(rank * 7 + step));
}

/* One top-k all-reduce with ef on comm; ok (1) when the mass balances element by element. */
static int ef_conserved(gw_comm_t comm, gw_codec_t codec, gw_ef_state_t ef, int rank, int step, char* why,
                        size_t why_len) {
  float* x = malloc(sizeof(float) * EF_COUNT);
  float* out = malloc(sizeof(float) * EF_COUNT);
  float* before = malloc(sizeof(float) * EF_COUNT);
  float* after = malloc(sizeof(float) * EF_COUNT);
  double* d = malloc(sizeof(double) * EF_COUNT);
  int ok = 0;
  if (x == NULL || out == NULL || before == NULL || after == NULL || d == NULL) goto done;
  ef_input(x, rank, step);
  if (gw_ef_state_get_residual(ef, before, EF_COUNT) != GW_SUCCESS ||
      gw_allreduce_ex(comm, x, out, EF_COUNT, GW_FLOAT32, GW_SUM, codec, ef, GW_ALGO_SPARSE_ALLGATHER) != GW_SUCCESS ||
      gw_ef_state_get_residual(ef, after, EF_COUNT) != GW_SUCCESS) {
    snprintf(why, why_len, "EF call: %s", gw_get_last_error());
    goto done;
  }
  for (int i = 0; i < EF_COUNT; ++i) d[i] = (double)x[i] + (double)before[i] - (double)after[i];
  if (gw_allreduce_ex(comm, d, d, EF_COUNT, GW_FLOAT64, GW_SUM, NULL, NULL, GW_ALGO_AUTO) != GW_SUCCESS) {
    snprintf(why, why_len, "EF sum: %s", gw_get_last_error());
    goto done;
  }
  ok = 1;
  for (int i = 0; i < EF_COUNT && ok; ++i) {
    if (fabs(d[i] - (double)out[i]) > 1e-4 * (1.0 + fabs(d[i]))) {
      snprintf(why, why_len, "EF mass at %d: in - kept %.6f, out %.6f", i, d[i], (double)out[i]);
      ok = 0;
    }
  }
done:
  free(x);
  free(out);
  free(before);
  free(after);
  free(d);
  return ok;
}

/* --shrink: the survivor's new communicator, checked (see the top of the file). */
static void shrink_and_check(const plan_t* p, int rank, gw_comm_t comm, gw_codec_t topk, gw_ef_state_t ef,
                             report_t* rep) {
  rep->shrink_tried = 1;
  const double t0 = now_s();
  gw_comm_t nc = NULL;
  gw_result_t r = gw_comm_shrink(comm, &nc);
  rep->shrink_s = now_s() - t0;
  rep->shrink_result = r;
  if (r != GW_SUCCESS) {
    snprintf(rep->shrink_msg, sizeof rep->shrink_msg, "%s", gw_get_last_error());
    return;
  }
  gw_comm_size(nc, &rep->new_size);
  gw_comm_rank(nc, &rep->new_rank);
  const size_t n = 4099;
  float* x = malloc(sizeof(float) * n);
  if (x != NULL) {
    for (size_t i = 0; i < n; ++i) x[i] = (float)((rank + 1) * (int)(i % 7 + 1));
    const int total = p->np * (p->np + 1) / 2 - (p->victim + 1);
    if (gw_allreduce_ex(nc, x, x, n, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_AUTO) == GW_SUCCESS) {
      rep->dense_ok = 1;
      for (size_t i = 0; i < n; ++i) rep->dense_ok &= x[i] == (float)(total * (int)(i % 7 + 1));
      if (!rep->dense_ok) snprintf(rep->shrink_msg, sizeof rep->shrink_msg, "wrong dense sum");
    } else {
      snprintf(rep->shrink_msg, sizeof rep->shrink_msg, "dense: %s", gw_get_last_error());
    }
    free(x);
  }
  if (rep->dense_ok) rep->ef_ok = ef_conserved(nc, topk, ef, rank, 100, rep->shrink_msg, sizeof rep->shrink_msg);
  gw_comm_destroy(nc);
}

static void report_and_exit(int out_fd, report_t* rep, double teardown_s) {
  if (write_all(out_fd, rep, sizeof *rep) != 0 || write_all(out_fd, &teardown_s, sizeof teardown_s) != 0) _exit(3);
  exit(0); /* not _exit: a sanitized build checks for leaks at exit */
}

/* One call of the run's collective on x (count floats), blocking or (req) not: the all-reduce,
 * the reduce-scatter of blocks of count / np elements (the first count % np one longer), or
 * the compressed all-gather of blocks of count / np elements; in place. */
static gw_result_t collective(gw_comm_t comm, const combo_t* cb, gw_codec_t codec, float* x, int count, int np,
                              int rank, gw_request_t* req) {
  if (!cb->scatter) {
    if (req != NULL) return gw_iallreduce(comm, x, x, (size_t)count, GW_FLOAT32, GW_SUM, codec, NULL, cb->algo, req);
    return gw_allreduce_ex(comm, x, x, (size_t)count, GW_FLOAT32, GW_SUM, codec, NULL, cb->algo);
  }
  if (cb->scatter == 2) {
    const size_t block = (size_t)(count / np);
    float* own = x + (size_t)rank * block;
    if (req != NULL) return gw_iallgather_compressed(comm, own, x, block, GW_FLOAT32, codec, req);
    return gw_allgather_compressed(comm, own, x, block, GW_FLOAT32, codec);
  }
  size_t counts[MAX_NP], start = 0;
  for (int r = 0; r < np; ++r) {
    counts[r] = (size_t)(count / np + (r < count % np ? 1 : 0));
    if (r < rank) start += counts[r];
  }
  if (req != NULL) return gw_ireduce_scatterv(comm, x, x + start, counts, GW_FLOAT32, GW_AVG, codec, NULL, req);
  return gw_reduce_scatterv(comm, x, x + start, counts, GW_FLOAT32, GW_AVG, codec, NULL);
}

static void child(const opts_t* o, const plan_t* p, int rank, int idp[2], int go_fd, int out_fd) {
  const int victim = rank == p->victim && p->mode != M_NONE;
  const combo_t* cb = &kCombos[p->combo];
  report_t rep;
  memset(&rep, 0, sizeof rep);
  gw_unique_id_t id;
  if (rank == 0) {
    if (gw_get_unique_id(&id) != GW_SUCCESS) _exit(4);
    for (int k = 1; k < p->np; ++k)
      if (write_all(idp[1], &id, sizeof id) != 0) _exit(4);
  } else if (read_until(idp[0], &id, sizeof id, now_s() + 60) != sizeof id) {
    _exit(4);
  }
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  cfg.timeout_s = p->timeout_s;
  const char c1 = 1;
  if (victim && p->mode == M_INIT && write_all(go_fd, &c1, 1) != 0) _exit(3);
  gw_comm_t comm = NULL;
  gw_result_t r = gw_comm_init_rank(&comm, p->np, id, rank, &cfg);
  if (r != GW_SUCCESS) {
    rep.result = r;
    rep.in_init = 1;
    rep.at = now_s();
    snprintf(rep.msg, sizeof rep.msg, "%s", gw_get_last_error());
    report_and_exit(out_fd, &rep, 0.0);
  }
  gw_codec_t codec = NULL;
  if (cb->codec != NULL && gw_codec_create(cb->codec, &codec) != GW_SUCCESS) {
    fprintf(stderr, "kill_peer: gw_codec_create(%s): %s\n", cb->codec, gw_get_last_error());
    _exit(5);
  }
  const int shrinking =
      o->shrink && (p->mode == M_MID || p->mode == M_BETWEEN || p->mode == M_IDLE || p->mode == M_IWAIT);
  gw_codec_t topk = NULL;
  gw_ef_state_t ef = NULL;
  if (shrinking) {
    char why[240];
    if (gw_codec_create(kEfCodec, &topk) != GW_SUCCESS || gw_ef_state_create(EF_COUNT, &ef) != GW_SUCCESS) _exit(5);
    for (int step = 0; step < 2; ++step) {
      if (!ef_conserved(comm, topk, ef, rank, step, why, sizeof why)) {
        fprintf(stderr, "kill_peer: EF warm-up: %s\n", why);
        _exit(5);
      }
    }
  }
  float* x = malloc(sizeof(float) * (size_t)p->count);
  if (x == NULL) _exit(6);
  for (int i = 0; i < p->count; ++i) x[i] = (float)((i * 7 + rank) % 13) - 6.0f;
  const int idle_ms = 100;
  int calls = 0;
  for (;;) {
    if (p->mode == M_NONE && calls == p->kcall + 2) {
      rep.result = GW_SUCCESS;
      break;
    }
    if (victim && calls == p->kcall) {
      if (write_all(go_fd, &c1, 1) != 0) _exit(3);
      /* idestroy: the victim posts nothing, so that the survivors' requests are surely in
       * flight when it dies */
      if (p->mode == M_BETWEEN || p->mode == M_IDLE || p->mode == M_IDESTROY) {
        for (;;) pause(); /* outside any call until the parent kills us */
      }
    }
    if (!victim && p->mode == M_IDLE && calls == p->kcall) sleep_us(idle_ms * 1000L);
    if (p->mode == M_IWAIT || (p->mode == M_IDESTROY && calls == p->kcall)) {
      gw_request_t req = NULL;
      r = collective(comm, cb, codec, x, p->count, p->np, rank, &req);
      if (r == GW_SUCCESS) {
        if (p->mode == M_IDESTROY && !victim) {
          const double t0 = now_s();
          gw_comm_destroy(comm); /* the request is still in flight */
          const double td = now_s() - t0;
          r = gw_wait(req);
          rep.result = r;
          rep.at = now_s();
          rep.calls_ok = calls;
          snprintf(rep.msg, sizeof rep.msg, "%s", r == GW_SUCCESS ? "gw_wait succeeded" : gw_get_last_error());
          if (codec) gw_codec_destroy(codec);
          free(x);
          report_and_exit(out_fd, &rep, td);
        }
        r = gw_wait(req);
      }
    } else {
      r = collective(comm, cb, codec, x, p->count, p->np, rank, NULL);
    }
    if (r != GW_SUCCESS) {
      rep.result = r;
      rep.at = now_s();
      snprintf(rep.msg, sizeof rep.msg, "%s", gw_get_last_error());
      break;
    }
    /* keep the values bounded whatever the codec does to them */
    for (int i = 0; i < p->count; i += 97) x[i] = (float)(i % 5);
    ++calls;
  }
  rep.calls_ok = calls;
  if (rep.at == 0) rep.at = now_s();
  if (shrinking && rep.result != GW_SUCCESS) shrink_and_check(p, rank, comm, topk, ef, &rep);
  const double t0 = now_s();
  teardown(comm, p->teardown[rank]);
  const double td = now_s() - t0;
  if (topk) gw_codec_destroy(topk);
  if (ef) gw_ef_state_destroy(ef);
  if (codec) gw_codec_destroy(codec);
  free(x);
  (void)o;
  report_and_exit(out_fd, &rep, td);
}

/* Lines of a survivor's log that mean it went wrong however it exited. */
static const char* const kBadPatterns[] = {
    "AddressSanitizer",   "LeakSanitizer", "runtime error:", "Assertion",       "Caught signal",
    "Segmentation fault", "Fatal:",        "==ERROR",        "terminate called"};

/* Prints the lines of path that match a bad pattern (and, with tail, the last lines); returns
 * how many matched. */
static int scan_log(const char* path, const char* who, int tail) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[1024];
  int bad = 0;
  char ring[24][1024];
  int n = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    for (size_t i = 0; i < sizeof kBadPatterns / sizeof kBadPatterns[0]; ++i) {
      if (strstr(line, kBadPatterns[i]) != NULL) {
        if (bad < 40) printf("  %s: %s", who, line);
        ++bad;
        break;
      }
    }
    snprintf(ring[n % 24], sizeof ring[0], "%s", line);
    ++n;
  }
  fclose(f);
  if (tail || bad > 0) {
    printf("  %s: last lines of %s:\n", who, path);
    for (int i = n > 24 ? n - 24 : 0; i < n; ++i) printf("    %s", ring[i % 24]);
  }
  return bad;
}

static void gdb_backtrace(pid_t pid) {
  char cmd[256];
  snprintf(cmd, sizeof cmd,
           "gdb -p %d -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^(#|Thread)' | head -120", (int)pid);
  fflush(stdout);
  if (system(cmd) != 0) { /* gdb missing: nothing to add */
  }
}

typedef struct {
  int runs, bad, crashes, hangs, sanitizer, wrong, slow, slow_teardown, init_timeouts, shrinks;
  double worst_detect, worst_teardown, worst_shrink;
} stats_t;

static void plan_run(const opts_t* o, int run, plan_t* p) {
  uint64_t s = o->seed ^ (0x5851f42d4c957f2dull * (uint64_t)(run + 1));
  int modes[M_COUNT], nm = 0;
  for (int m = 0; m < M_COUNT; ++m)
    if (o->modes & (1u << m)) modes[nm++] = m;
  p->mode = modes[pick(&s, 0, nm - 1)];
  p->np = pick(&s, o->np_min, o->np_max);
  p->victim = o->victim >= 0 ? o->victim % p->np : pick(&s, 0, p->np - 1);
  /* log-uniform count */
  const double lo = (double)o->count_min, hi = (double)o->count_max;
  const double u = (double)(next_u64(&s) >> 11) / 9007199254740992.0;
  p->count = (int)(lo * pow(hi / lo, u));
  if (p->count < o->count_min) p->count = o->count_min;
  if (p->count > o->count_max) p->count = o->count_max;
  p->combo = o->combo >= 0 ? o->combo : pick(&s, 0, NUM_COMBOS - 1);
  p->kcall = pick(&s, 0, p->count >= (1 << 22) ? 1 : 3);
  p->delay_us = pick(&s, 0, p->mode == M_INIT ? o->init_delay_us_max : o->delay_us_max);
  /* mode none: an abort would fail the peers still finishing their last call */
  for (int r = 0; r < MAX_NP; ++r) p->teardown[r] = p->mode == M_NONE ? T_DESTROY : pick(&s, 0, T_COUNT - 1);
  p->timeout_s = o->timeout_s;
}

static int run_once(const opts_t* o, int run, stats_t* st) {
  plan_t p;
  plan_run(o, run, &p);
  const int killing = p.mode != M_NONE;
  printf("run %d: mode=%s np=%d victim=%d kcall=%d count=%d %s delay=%dus (replay: --seed %llu --first %d --runs 1)\n",
         run, kModeNames[p.mode], p.np, killing ? p.victim : -1, p.kcall, p.count, kCombos[p.combo].name, p.delay_us,
         (unsigned long long)o->seed, run);
  fflush(stdout);
  char logs[MAX_NP][512];
  int pipes[MAX_NP][2], go[2], idp[2];
  pid_t pids[MAX_NP];
  if (pipe(go) != 0 || pipe(idp) != 0) return 3;
  for (int rk = 0; rk < p.np; ++rk) {
    snprintf(logs[rk], sizeof logs[rk], "%s/kill_peer.%d.run%d.rank%d.log", o->log_dir, (int)getpid(), run, rk);
    if (pipe(pipes[rk]) != 0) return 3;
    fflush(stdout);
    pids[rk] = fork();
    if (pids[rk] < 0) return 3;
    if (pids[rk] == 0) {
      const int fd = open(logs[rk], O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 2);
        dup2(fd, 1);
        close(fd);
      }
      for (int k = 0; k <= rk; ++k) close(pipes[k][0]);
      close(go[0]);
      if (!(killing && rk == p.victim)) close(go[1]);
      child(o, &p, rk, idp, go[1], pipes[rk][1]);
      _exit(7);
    }
    close(pipes[rk][1]);
  }
  close(go[1]);
  const double start = now_s();
  const double deadline = start + o->run_limit_s;
  double killed_at = 0;
  int bad = 0;
  if (killing) {
    char c;
    if (read_until(go[0], &c, 1, deadline) == 1) {
      sleep_us(p.delay_us);
      killed_at = now_s(); /* before: a survivor may see the death before kill() returns */
      kill(pids[p.victim], o->sig);
    } else {
      printf("run %d: the victim never reached its kill point\n", run);
      bad = 1;
      kill(pids[p.victim], SIGKILL);
      killed_at = now_s();
    }
  }
  int reported[MAX_NP] = {0};
  report_t reps[MAX_NP];
  double tds[MAX_NP];
  for (int rk = 0; rk < p.np; ++rk) {
    if (killing && rk == p.victim) continue;
    report_t* rep = &reps[rk];
    if (read_until(pipes[rk][0], rep, sizeof *rep, deadline) != sizeof *rep) continue;
    reported[rk] = 1;
    rep->msg[sizeof rep->msg - 1] = '\0';
    rep->shrink_msg[sizeof rep->shrink_msg - 1] = '\0';
    if (read_until(pipes[rk][0], &tds[rk], sizeof tds[rk], deadline) == sizeof tds[rk]) reported[rk] = 2;
  }
  if (killing && o->sig == SIGSTOP) kill(pids[p.victim], SIGKILL);
  /* reap, killing whoever is still there at the deadline */
  int status[MAX_NP], reaped[MAX_NP] = {0}, left = p.np;
  while (left > 0) {
    for (int rk = 0; rk < p.np; ++rk) {
      if (reaped[rk]) continue;
      if (waitpid(pids[rk], &status[rk], WNOHANG) == pids[rk]) {
        reaped[rk] = 1;
        --left;
      }
    }
    if (left == 0) break;
    if (now_s() > deadline) {
      for (int rk = 0; rk < p.np; ++rk) {
        if (reaped[rk]) continue;
        printf("run %d rank %d: HANG (no %s after %.0f s)\n", run, rk, reported[rk] ? "exit" : "report",
               now_s() - start);
        if (o->gdb_on_hang) gdb_backtrace(pids[rk]);
        kill(pids[rk], SIGKILL);
        waitpid(pids[rk], &status[rk], 0);
        reaped[rk] = 2;
        --left;
        ++st->hangs;
        bad = 1;
      }
      break;
    }
    sleep_us(2000);
  }
  for (int rk = 0; rk < p.np; ++rk) {
    const int is_victim = killing && rk == p.victim;
    char who[64];
    snprintf(who, sizeof who, "run %d rank %d", run, rk);
    if (!is_victim && reaped[rk] == 1 && WIFSIGNALED(status[rk])) {
      printf("%s: CRASHED (signal %d)\n", who, WTERMSIG(status[rk]));
      ++st->crashes;
      bad = 1;
    } else if (!is_victim && reaped[rk] == 1 && WIFEXITED(status[rk]) && WEXITSTATUS(status[rk]) != 0) {
      printf("%s: CRASHED (exit %d)\n", who, WEXITSTATUS(status[rk]));
      ++st->crashes;
      bad = 1;
    } else if (is_victim && reaped[rk] == 1 && !(WIFSIGNALED(status[rk]) && WTERMSIG(status[rk]) == SIGKILL) &&
               o->sig == SIGKILL) {
      printf("%s: the victim was not killed (status %#x)\n", who, (unsigned)status[rk]);
      bad = 1;
    }
    if (!is_victim) {
      const int n = scan_log(logs[rk], who, reaped[rk] != 1 || !WIFEXITED(status[rk]) || WEXITSTATUS(status[rk]) != 0);
      if (n > 0) {
        printf("%s: %d bad line(s) in its log\n", who, n);
        ++st->sanitizer;
        bad = 1;
      }
    }
    if (is_victim || reported[rk] == 0) continue;
    const report_t* rep = &reps[rk];
    const double took = killing ? rep->at - killed_at : 0;
    int ok;
    double limit = o->limit_s;
    if (!killing) {
      ok = rep->result == GW_SUCCESS;
    } else if (o->sig == SIGSTOP) {
      ok = rep->result == GW_ERR_TIMEOUT || rep->result == GW_ERR_REMOTE;
      limit = p.timeout_s + 1.0;
    } else if (p.mode == M_INIT && rep->in_init && (rep->result == GW_ERR_TIMEOUT || rep->result == GW_ERR_REMOTE) &&
               took > o->limit_s) {
      /* the victim died before it reached the rendezvous: nobody could know that it existed,
       * so the init fails at its timeout (TIMEOUT at the root, REMOTE when the root gives up) */
      ok = 1;
      limit = p.timeout_s + 2.0;
      ++st->init_timeouts;
    } else {
      ok = rep->result == GW_ERR_REMOTE;
    }
    if (killing && took > st->worst_detect && ok) st->worst_detect = took;
    if (reported[rk] == 2 && tds[rk] > st->worst_teardown) st->worst_teardown = tds[rk];
    const int slow = killing && (took > limit || took < -0.001);
    const int slow_td = reported[rk] == 2 && tds[rk] > o->teardown_limit_s;
    if (rep->shrink_tried) {
      const double shrink_limit = o->sig == SIGSTOP ? 2 * p.timeout_s + 2.0 : o->limit_s;
      const int shrink_ok = rep->shrink_result == GW_SUCCESS && rep->new_size == p.np - 1 &&
                            rep->new_rank == (rk < p.victim ? rk : rk - 1) && rep->dense_ok && rep->ef_ok;
      const int shrink_slow = rep->shrink_s > shrink_limit;
      if (rep->shrink_s > st->worst_shrink) st->worst_shrink = rep->shrink_s;
      ++st->shrinks;
      if (!shrink_ok) ++st->wrong;
      if (shrink_slow) ++st->slow;
      if (!shrink_ok || shrink_slow) bad = 1;
      if (!o->quiet || !shrink_ok || shrink_slow) {
        printf("%s: shrink %s in %.3f s: rank %d of %d, dense %s, EF %s%s%s%s\n", who,
               gw_get_error_string(rep->shrink_result), rep->shrink_s, rep->new_rank, rep->new_size,
               rep->dense_ok ? "exact" : "WRONG", rep->ef_ok ? "conserved" : "NOT CONSERVED",
               rep->shrink_msg[0] ? ": " : "", rep->shrink_msg,
               !shrink_ok ? "  <-- WRONG SHRINK" : (shrink_slow ? "  <-- TOO SLOW" : ""));
      }
    } else if (o->shrink && killing &&
               (p.mode == M_MID || p.mode == M_BETWEEN || p.mode == M_IDLE || p.mode == M_IWAIT)) {
      printf("%s: did not shrink  <-- WRONG SHRINK\n", who);
      ++st->wrong;
      bad = 1;
    }
    if (!ok) ++st->wrong;
    if (slow) ++st->slow;
    if (slow_td) ++st->slow_teardown;
    if (!ok || slow || slow_td) bad = 1;
    if (!o->quiet || !ok || slow || slow_td) {
      printf("%s: %s%s in %.3f s after %d calls, teardown %s %.3f s: %s%s\n", who, gw_get_error_string(rep->result),
             rep->in_init ? " (init)" : "", took, rep->calls_ok, kTeardownNames[p.teardown[rk]],
             reported[rk] == 2 ? tds[rk] : -1.0, rep->msg,
             !ok ? "  <-- WRONG RESULT" : (slow ? "  <-- TOO SLOW" : (slow_td ? "  <-- SLOW TEARDOWN" : "")));
    }
  }
  for (int rk = 0; rk < p.np; ++rk) {
    close(pipes[rk][0]);
    if (!bad && !o->keep_logs) unlink(logs[rk]);
  }
  close(go[0]);
  close(idp[0]);
  close(idp[1]);
  if (bad)
    printf("run %d: FAILED the goals (logs kept: %s/kill_peer.%d.run%d.rank*.log)\n", run, o->log_dir, (int)getpid(),
           run);
  fflush(stdout);
  return bad;
}

static unsigned parse_modes(const char* list) {
  unsigned m = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char* tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
    int found = 0;
    for (int i = 0; i < M_COUNT; ++i) {
      if (strcmp(tok, kModeNames[i]) == 0) {
        m |= 1u << i;
        found = 1;
      }
    }
    if (!found) {
      fprintf(stderr, "kill_peer: unknown mode '%s'\n", tok);
      exit(2);
    }
  }
  return m;
}

int main(int argc, char** argv) {
  opts_t o;
  memset(&o, 0, sizeof o);
  o.runs = 10;
  o.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  o.modes = 1u << M_MID;
  o.np_min = o.np_max = 3;
  o.victim = -1;
  o.count_min = o.count_max = 1 << 16;
  o.combo = 0;
  o.delay_us_max = 5000;
  o.init_delay_us_max = 100000;
  o.sig = SIGKILL;
  o.timeout_s = 10.0;
  o.limit_s = 2.0;
  o.teardown_limit_s = 10.0;
  o.run_limit_s = 0;
  o.log_dir = "/tmp";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v != NULL && ++i)
    if (ARG("--runs"))
      o.runs = atoi(v);
    else if (ARG("--first"))
      o.first = atoi(v);
    else if (ARG("--seed"))
      o.seed = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--mix")) {
      o.modes =
          (1u << M_MID) | (1u << M_BETWEEN) | (1u << M_IDLE) | (1u << M_INIT) | (1u << M_IWAIT) | (1u << M_IDESTROY);
      o.np_min = 2;
      o.np_max = 6;
      o.victim = -1;
      o.count_min = 1024;
      o.count_max = 1 << 24;
      o.combo = -1;
    } else if (ARG("--modes") || ARG("--when"))
      o.modes = parse_modes(v);
    else if (ARG("--np"))
      o.np_min = o.np_max = atoi(v);
    else if (ARG("--np-min"))
      o.np_min = atoi(v);
    else if (ARG("--np-max"))
      o.np_max = atoi(v);
    else if (ARG("--victim"))
      o.victim = strcmp(v, "random") == 0 ? -1 : atoi(v);
    else if (ARG("--count"))
      o.count_min = o.count_max = atoi(v);
    else if (ARG("--count-min"))
      o.count_min = atoi(v);
    else if (ARG("--count-max"))
      o.count_max = atoi(v);
    else if (ARG("--combo"))
      o.combo = strcmp(v, "mix") == 0 ? -1 : atoi(v);
    else if (ARG("--delay-us-max"))
      o.delay_us_max = atoi(v);
    else if (ARG("--init-delay-us-max"))
      o.init_delay_us_max = atoi(v);
    else if (!strcmp(a, "--shrink"))
      o.shrink = 1;
    else if (ARG("--signal"))
      o.sig = strcmp(v, "STOP") == 0 ? SIGSTOP : SIGKILL;
    else if (ARG("--timeout"))
      o.timeout_s = atof(v);
    else if (ARG("--limit"))
      o.limit_s = atof(v);
    else if (ARG("--teardown-limit"))
      o.teardown_limit_s = atof(v);
    else if (ARG("--run-limit"))
      o.run_limit_s = atof(v);
    else if (ARG("--log-dir"))
      o.log_dir = v;
    else if (!strcmp(a, "--keep-logs"))
      o.keep_logs = 1;
    else if (!strcmp(a, "--gdb-on-hang"))
      o.gdb_on_hang = 1;
    else if (!strcmp(a, "--quiet"))
      o.quiet = 1;
    else if (!strcmp(a, "--list-combos")) {
      for (int c = 0; c < NUM_COMBOS; ++c) printf("%d %s\n", c, kCombos[c].name);
      return 0;
    } else {
      fprintf(stderr, "kill_peer: bad argument '%s' (see the comment at the top of kill_peer.c)\n", a);
      return 2;
    }
#undef ARG
  }
  if (o.np_min < 2 || o.np_max > MAX_NP || o.np_min > o.np_max || o.count_min < 1 || o.count_min > o.count_max ||
      o.combo >= NUM_COMBOS || o.modes == 0 || o.runs < 0) {
    fprintf(stderr, "kill_peer: bad options\n");
    return 2;
  }
  if (o.run_limit_s <= 0) o.run_limit_s = o.timeout_s + 60.0;
  mkdir(o.log_dir, 0755);
  signal(SIGPIPE, SIG_IGN);
  stats_t per[M_COUNT];
  memset(per, 0, sizeof per);
  int failures = 0;
  for (int run = o.first; run < o.first + o.runs; ++run) {
    plan_t p;
    plan_run(&o, run, &p);
    stats_t* st = &per[p.mode];
    const int bad = run_once(&o, run, st);
    if (bad == 3) {
      fprintf(stderr, "kill_peer: pipe/fork failed: %s\n", strerror(errno));
      return 3;
    }
    ++st->runs;
    st->bad += bad;
    failures += bad;
  }
  printf("\n%-9s %5s %5s %7s %5s %9s %6s %5s %8s %8s %11s %11s %8s %11s\n", "mode", "runs", "bad", "crashed", "hung",
         "bad-log", "wrong", "slow", "slow-td", "init-to", "worst-det", "worst-td", "shrinks", "worst-shr");
  for (int m = 0; m < M_COUNT; ++m) {
    const stats_t* s = &per[m];
    if (s->runs == 0) continue;
    printf("%-9s %5d %5d %7d %5d %9d %6d %5d %8d %8d %10.3fs %10.3fs %8d %10.3fs\n", kModeNames[m], s->runs, s->bad,
           s->crashes, s->hangs, s->sanitizer, s->wrong, s->slow, s->slow_teardown, s->init_timeouts, s->worst_detect,
           s->worst_teardown, s->shrinks, s->worst_shrink);
  }
  printf("%d of %d runs failed the goals (seed %llu)\n", failures, o.runs, (unsigned long long)o.seed);
  return failures == 0 ? 0 : 1;
}
