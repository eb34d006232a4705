/* The stand-in accelerator's C ABI (gradwire/standin.h) and the stream order of non-blocking
 * device calls through it (gradwire.h): argument errors named, a call ordered after what its
 * stream held when it was made, a stream that waits for the request without the host, and
 * the memory calls. One rank: the order is the caller's business, not the peers'. */
#define _POSIX_C_SOURCE 200112L /* setenv, nanosleep */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gradwire/gradwire.h"
#include "gradwire/standin.h"

static int g_passed = 0;
static int g_failed = 0;

static void check(int ok, int line, const char* what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    fprintf(stderr, "test_c_api_standin.c:%d: check failed: %s (last error: \"%s\")\n", line, what,
            gw_get_last_error());
  }
}
#define CHECK(cond) check((cond) ? 1 : 0, __LINE__, #cond)
#define EXPECT_OK(call) check((call) == GW_SUCCESS, __LINE__, #call)
/* The call fails with `want` and the last error names `needle`. */
#define EXPECT_ERR(call, want, needle)                                                                   \
  do {                                                                                                   \
    gw_result_t r_ = (call);                                                                             \
    const char* m_ = gw_get_last_error();                                                                \
    check(r_ == (want) && m_ != NULL && strstr(m_, (needle)) != NULL, __LINE__, #call " names " needle); \
  } while (0)

enum { kN = 4099 };

struct Fill {
  float* x;
  float value;
};

/* Stream work: sleeps 20 ms (the stream is busy), then writes the input. */
static void late_fill(void* arg) {
  struct Fill* f = (struct Fill*)arg;
  struct timespec ts = {0, 20 * 1000 * 1000};
  size_t i;
  nanosleep(&ts, NULL);
  for (i = 0; i < kN; ++i) f->x[i] = f->value;
}

struct Read {
  const float* x;
  float got[kN];
};

static void read_back(void* arg) {
  struct Read* r = (struct Read*)arg;
  memcpy(r->got, r->x, sizeof r->got);
}

static void free_nothing(void* ptr, int device, void* stream, void* user) {
  (void)ptr;
  (void)device;
  (void)stream;
  (void)user;
}

static void arguments(void) {
  gw_standin_stream_t s = NULL;
  void* p = NULL;
  int idle = 0;
  float host = 0.0f;
  EXPECT_ERR(gw_standin_stream_create(-1, 0, &s), GW_ERR_INVALID_ARGUMENT, "max_delay_us");
  EXPECT_ERR(gw_standin_stream_create(2000000, 0, &s), GW_ERR_INVALID_ARGUMENT, "max_delay_us");
  EXPECT_ERR(gw_standin_stream_create(10, 0, NULL), GW_ERR_INVALID_ARGUMENT, "stream");
  EXPECT_ERR(gw_standin_stream_destroy(NULL), GW_ERR_INVALID_ARGUMENT, "default stream");
  EXPECT_ERR(gw_standin_stream_enqueue(NULL, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "fn");
  EXPECT_ERR(gw_standin_stream_query(NULL, NULL), GW_ERR_INVALID_ARGUMENT, "idle");
  EXPECT_ERR(gw_standin_malloc(SIZE_MAX, &p), GW_ERR_INVALID_ARGUMENT, "1 TiB");
  CHECK(p == NULL);
  EXPECT_ERR(gw_standin_malloc(16, NULL), GW_ERR_INVALID_ARGUMENT, "ptr");
  EXPECT_ERR(gw_standin_free(&host), GW_ERR_INVALID_ARGUMENT, "not stand-in memory");
  EXPECT_OK(gw_standin_free(NULL));
  EXPECT_ERR(gw_standin_ef_state_create(SIZE_MAX, NULL), GW_ERR_INVALID_ARGUMENT, "ef");
  EXPECT_ERR(gw_comm_use_standin(NULL, 10, 0), GW_ERR_INVALID_ARGUMENT, "comm");
  EXPECT_ERR(gw_request_stream_wait(NULL, NULL), GW_ERR_INVALID_ARGUMENT, "request");
  EXPECT_ERR(gw_comm_trim(NULL), GW_ERR_INVALID_ARGUMENT, "comm");
  EXPECT_OK(gw_standin_stream_query(NULL, &idle));
  {
    gw_result_t r = gw_set_device_allocator(NULL, free_nothing, NULL);
    /* Either half alone is an error; a build without CUDA has no device memory at all. */
    CHECK(r == GW_ERR_INVALID_ARGUMENT || r == GW_ERR_UNSUPPORTED);
  }
}

static void stream_order(gw_comm_t comm) {
  gw_standin_stream_t s = NULL;
  float* x = NULL;
  float* all = NULL;
  gw_request_t req = NULL;
  gw_ef_state_t ef = NULL;
  gw_codec_t codec = NULL;
  struct Fill fill;
  struct Read* read = (struct Read*)malloc(sizeof *read);
  size_t i, live = 0;
  int wrong = 0;
  EXPECT_OK(gw_comm_use_standin(comm, 300, 7));
  EXPECT_OK(gw_standin_stream_create(2000, 11, &s));
  EXPECT_OK(gw_standin_malloc(kN * sizeof(float), (void**)&x));
  EXPECT_OK(gw_standin_malloc(kN * sizeof(float), (void**)&all));
  EXPECT_OK(gw_standin_live_bytes(&live));
  CHECK(live >= 2 * kN * sizeof(float));
  if (s == NULL || x == NULL || all == NULL || read == NULL) return;

  /* Dense, then compressed with a stand-in EF state: the input is written late on s, the call
   * is made at once, s waits for the request, then reads. */
  EXPECT_OK(gw_codec_create("qsgd:bits=8", &codec));
  EXPECT_OK(gw_standin_ef_state_create(kN, &ef));
  {
    int round;
    for (round = 0; round < 2; ++round) {
      fill.x = x;
      fill.value = 1.5f + (float)round;
      read->x = x;
      EXPECT_OK(gw_standin_stream_enqueue(s, late_fill, &fill));
      EXPECT_OK(gw_iallreduce_device(comm, x, x, kN, GW_FLOAT32, GW_SUM, round == 0 ? NULL : codec,
                                     round == 0 ? NULL : ef, GW_ALGO_AUTO, s, &req));
      EXPECT_OK(gw_request_stream_wait(req, s));
      EXPECT_OK(gw_standin_stream_enqueue(s, read_back, read));
      EXPECT_OK(gw_standin_stream_synchronize(s));
      EXPECT_OK(gw_wait(req));
      for (i = 0, wrong = 0; i < kN; ++i) wrong += read->got[i] != fill.value;
      CHECK(wrong == 0);
    }
  }
  /* The non-blocking all-gather and broadcast, in the same order. */
  fill.value = 4.0f;
  EXPECT_OK(gw_standin_stream_enqueue(s, late_fill, &fill));
  EXPECT_OK(gw_iallgather_device(comm, x, all, kN * sizeof(float), s, &req));
  EXPECT_OK(gw_request_stream_wait(req, s));
  read->x = all;
  EXPECT_OK(gw_standin_stream_enqueue(s, read_back, read));
  EXPECT_OK(gw_standin_stream_synchronize(s));
  EXPECT_OK(gw_wait(req));
  for (i = 0, wrong = 0; i < kN; ++i) wrong += read->got[i] != 4.0f;
  CHECK(wrong == 0);
  fill.value = 5.0f;
  EXPECT_OK(gw_standin_stream_enqueue(s, late_fill, &fill));
  EXPECT_OK(gw_ibroadcast_device(comm, x, kN * sizeof(float), 0, s, &req));
  EXPECT_OK(gw_request_stream_wait(req, s));
  read->x = x;
  EXPECT_OK(gw_standin_stream_enqueue(s, read_back, read));
  EXPECT_OK(gw_standin_stream_synchronize(s));
  EXPECT_OK(gw_wait(req));
  for (i = 0, wrong = 0; i < kN; ++i) wrong += read->got[i] != 5.0f;
  CHECK(wrong == 0);

  /* Host memory is not stand-in device memory: named, from the request. */
  EXPECT_OK(
      gw_iallreduce_device(comm, read->got, read->got, kN, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_AUTO, s, &req));
  EXPECT_OK(gw_request_stream_wait(req, s));
  EXPECT_OK(gw_standin_stream_synchronize(s)); /* released, error or not */
  {
    gw_result_t r = gw_wait(req);
    CHECK(r == GW_ERR_INVALID_ARGUMENT && strstr(gw_get_last_error(), "not stand-in device memory") != NULL);
  }
  /* Point-to-point requests cannot be waited on a stream. */
  {
    uint32_t v = 3, w = 0;
    gw_request_t rs = NULL, rr = NULL;
    EXPECT_OK(gw_irecv(comm, &w, sizeof w, 0, 9, &rr));
    EXPECT_OK(gw_isend(comm, &v, sizeof v, 0, 9, &rs));
    EXPECT_ERR(gw_request_stream_wait(rs, s), GW_ERR_UNSUPPORTED, "point-to-point");
    EXPECT_OK(gw_wait(rs));
    EXPECT_OK(gw_wait(rr));
    CHECK(w == 3);
  }
  EXPECT_OK(gw_comm_trim(comm));
  EXPECT_OK(gw_ef_state_destroy(ef));
  EXPECT_OK(gw_codec_destroy(codec));
  EXPECT_OK(gw_standin_free(x));
  EXPECT_OK(gw_standin_free(all));
  EXPECT_OK(gw_standin_stream_destroy(s));
  free(read);
}

int main(void) {
  gw_unique_id_t uid;
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  gw_comm_t comm = NULL;
  gw_result_t init;
  if (getenv("UCX_TLS") == NULL) setenv("UCX_TLS", "tcp,self", 0);
  cfg.timeout_s = 30.0;
  arguments();
  EXPECT_OK(gw_get_unique_id(&uid));
  init = gw_comm_init_rank(&comm, 1, uid, 0, &cfg);
  if (init == GW_ERR_UNSUPPORTED && strstr(gw_get_last_error(), "without UCX") != NULL) {
    fprintf(stderr, "note: communicator checks skipped: %s\n", gw_get_last_error());
  } else {
    EXPECT_OK(init);
    if (comm != NULL) {
      stream_order(comm);
      EXPECT_OK(gw_comm_destroy(comm));
    }
  }
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
