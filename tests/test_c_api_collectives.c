/*
 * The argument checks of the dense collectives, point-to-point and request calls, from plain
 * C99 against libgradwire.so: a null communicator or request, enums out of range, bad peers
 * and timeouts, each refused with GW_ERR_INVALID_ARGUMENT and a message naming what was
 * wrong, and no request made. With a one-rank communicator (UCX over tcp,self) it also checks
 * that a refused non-blocking call leaves *request NULL and that the accepted calls complete.
 *
 * Prints each failed check to stderr, then "N passed, M failed"; exits 0 only when M is 0.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradwire/gradwire.h"

static int g_passed = 0;
static int g_failed = 0;

static void expect(gw_result_t got, gw_result_t want, const char* needle, int line, const char* what) {
  const char* msg = gw_get_last_error();
  int ok = got == want;
  if (ok && want != GW_SUCCESS) ok = msg != NULL && msg[0] != '\0' && (needle == NULL || strstr(msg, needle) != NULL);
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    fprintf(stderr, "test_c_api_collectives.c:%d: %s: got %d (%s) \"%s\"; want %d (%s) naming \"%s\"\n", line, what,
            (int)got, gw_get_error_string(got), msg != NULL ? msg : "(null)", (int)want, gw_get_error_string(want),
            needle != NULL ? needle : "");
  }
}

#define EXPECT_ERR(call, want, needle) expect((call), (want), (needle), __LINE__, #call)
#define EXPECT_OK(call) expect((call), GW_SUCCESS, NULL, __LINE__, #call)
#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (cond) {                                                                            \
      ++g_passed;                                                                          \
    } else {                                                                               \
      ++g_failed;                                                                          \
      fprintf(stderr, "test_c_api_collectives.c:%d: check failed: %s\n", __LINE__, #cond); \
    }                                                                                      \
  } while (0)

static int g_calls = 0;
static gw_result_t g_code = GW_ERR_INTERNAL;
static void on_done(void* user, gw_result_t result, const char* message) {
  (void)message;
  ++*(int*)user;
  g_code = result;
}

static gw_result_t never_called(void* user, const void* sendbuf, void* recvbuf, size_t bytes) {
  (void)user;
  (void)sendbuf;
  (void)recvbuf;
  (void)bytes;
  ++g_calls;
  return GW_ERR_INTERNAL;
}

/* Every call with a null communicator. */
static void null_comm(void) {
  float x[4] = {0}, y[4] = {0};
  size_t sizes[1] = {4};
  gw_request_t req = (gw_request_t)(void*)&g_passed;
  EXPECT_ERR(gw_reduce(NULL, x, y, 1, GW_FLOAT32, GW_SUM, 0), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_reduce_scatter(NULL, x, y, 1, GW_FLOAT32, GW_SUM), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_allgatherv(NULL, x, 4, y, sizes, NULL), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_alltoall(NULL, x, y, 4), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_alltoallv(NULL, x, sizes, NULL, y, sizes, NULL), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_gather(NULL, x, y, 4, 0), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_scatter(NULL, x, y, 4, 0), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_ireduce(NULL, x, y, 1, GW_FLOAT32, GW_SUM, 0, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_ireduce_scatter(NULL, x, y, 1, GW_FLOAT32, GW_SUM, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_reduce_scatterv(NULL, x, y, sizes, GW_FLOAT32, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT,
             "comm is null");
  EXPECT_ERR(gw_reduce_scatter_compressed(NULL, x, y, 1, GW_FLOAT32, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT,
             "comm is null");
  EXPECT_ERR(gw_ireduce_scatterv(NULL, x, y, sizes, GW_FLOAT32, GW_SUM, NULL, NULL, &req), GW_ERR_INVALID_ARGUMENT,
             "comm is null");
  EXPECT_ERR(gw_allgather_compressed(NULL, x, y, 1, GW_FLOAT32, NULL), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_iallgather_compressed(NULL, x, y, 1, GW_FLOAT32, NULL, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_iallgather(NULL, x, y, 4, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_iallgatherv(NULL, x, 4, y, sizes, NULL, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_ibroadcast(NULL, x, 4, 0, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_ialltoall(NULL, x, y, 4, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_ialltoallv(NULL, x, sizes, NULL, y, sizes, NULL, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_igather(NULL, x, y, 4, 0, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_iscatter(NULL, x, y, 4, 0, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_ibarrier(NULL, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_send(NULL, x, 4, 0, 0), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_recv(NULL, x, 4, 0, 0), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_isend(NULL, x, 4, 0, 0, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_irecv(NULL, x, 4, 0, 0, &req), GW_ERR_INVALID_ARGUMENT, "comm is null");
  EXPECT_ERR(gw_wait_for(NULL, 1.0), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_request_on_complete(NULL, on_done, &g_calls), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_comm_init_with_allgather(NULL, 1, 0, never_called, NULL, NULL), GW_ERR_INVALID_ARGUMENT,
             "comm is null");
  CHECK(g_calls == 0);
}

static void with_comm(gw_comm_t comm) {
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  unsigned char b[64], c[64];
  size_t sizes[1] = {4};
  gw_request_t req = (gw_request_t)(void*)&g_passed;
  gw_request_t s = NULL, r = NULL;
  int calls = 0, i;

  /* A null request pointer; the call is refused before anything is queued. */
  EXPECT_ERR(gw_ireduce(comm, x, y, 1, GW_FLOAT32, GW_SUM, 0, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_ireduce_scatter(comm, x, y, 1, GW_FLOAT32, GW_SUM, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_iallgather(comm, x, y, 4, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_iallgatherv(comm, x, 4, y, sizes, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_ibroadcast(comm, x, 4, 0, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_ialltoall(comm, x, y, 4, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_ialltoallv(comm, x, sizes, NULL, y, sizes, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_igather(comm, x, y, 4, 0, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_iscatter(comm, x, y, 4, 0, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_ibarrier(comm, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_isend(comm, x, 4, 0, 0, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");
  EXPECT_ERR(gw_irecv(comm, x, 4, 0, 0, NULL), GW_ERR_INVALID_ARGUMENT, "request is null");

  /* Enums out of range: C lets a caller pass any integer. */
  EXPECT_ERR(gw_reduce(comm, x, y, 1, (gw_dtype_t)0, GW_SUM, 0), GW_ERR_INVALID_ARGUMENT, "dtype 0");
  EXPECT_ERR(gw_reduce(comm, x, y, 1, (gw_dtype_t)9, GW_SUM, 0), GW_ERR_INVALID_ARGUMENT, "dtype 9");
  EXPECT_ERR(gw_reduce(comm, x, y, 1, GW_FLOAT32, (gw_red_op_t)5, 0), GW_ERR_INVALID_ARGUMENT, "op 5");
  EXPECT_ERR(gw_reduce_scatter(comm, x, y, 1, (gw_dtype_t)77, GW_SUM), GW_ERR_INVALID_ARGUMENT, "dtype 77");
  EXPECT_ERR(gw_reduce_scatter(comm, x, y, 1, GW_INT32, (gw_red_op_t)-1), GW_ERR_INVALID_ARGUMENT, "op");
  EXPECT_ERR(gw_ireduce(comm, x, y, 1, (gw_dtype_t)0, GW_SUM, 0, &req), GW_ERR_INVALID_ARGUMENT, "dtype 0");
  CHECK(req == NULL); /* a refused call makes no request */
  req = (gw_request_t)(void*)&g_passed;
  EXPECT_ERR(gw_ireduce_scatter(comm, x, y, 1, GW_FLOAT32, (gw_red_op_t)9, &req), GW_ERR_INVALID_ARGUMENT, "op 9");
  CHECK(req == NULL);
  EXPECT_ERR(gw_allreduce(comm, x, y, 4, (gw_dtype_t)9, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "dtype 9");
  EXPECT_ERR(gw_allreduce(comm, x, y, 4, GW_FLOAT32, (gw_red_op_t)5, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "op 5");

  /* Point-to-point: peers out of range, null buffers. */
  EXPECT_ERR(gw_send(comm, b, 8, 1, 0), GW_ERR_INVALID_ARGUMENT, "peer 1");
  EXPECT_ERR(gw_recv(comm, b, 8, -1, 0), GW_ERR_INVALID_ARGUMENT, "peer -1");
  EXPECT_ERR(gw_isend(comm, NULL, 8, 0, 0, &req), GW_ERR_INVALID_ARGUMENT, "buf is null");
  CHECK(req == NULL);
  EXPECT_ERR(gw_irecv(comm, b, 8, 3, 0, &req), GW_ERR_INVALID_ARGUMENT, "peer 3");
  CHECK(req == NULL);

  /* Requests: a bad timeout or callback leaves the request valid. */
  for (i = 0; i < 64; ++i) b[i] = (unsigned char)(i * 3 + 1);
  memset(c, 0, sizeof c);
  EXPECT_OK(gw_irecv(comm, c, sizeof c, 0, 0xFFFFFFFFu, &r));
  EXPECT_ERR(gw_wait_for(r, -1.0), GW_ERR_INVALID_ARGUMENT, "timeout_s");
  EXPECT_ERR(gw_request_on_complete(r, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "fn is null");
  EXPECT_ERR(gw_wait_for(r, 0.0), GW_ERR_TIMEOUT, "still pending");
  EXPECT_OK(gw_request_on_complete(r, on_done, &calls));
  EXPECT_ERR(gw_request_on_complete(r, on_done, &calls), GW_ERR_INVALID_ARGUMENT, "already");
  EXPECT_OK(gw_isend(comm, b, sizeof b, 0, 0xFFFFFFFFu, &s));
  EXPECT_OK(gw_wait_for(r, 30.0));
  EXPECT_OK(gw_wait(s));
  CHECK(memcmp(b, c, sizeof b) == 0);
  CHECK(calls == 1 && g_code == GW_SUCCESS);

  /* The non-blocking collectives on one rank complete. */
  EXPECT_OK(gw_ibarrier(comm, &req));
  EXPECT_OK(gw_wait(req));
  EXPECT_OK(gw_iallgather(comm, x, y, sizeof x, &req));
  EXPECT_OK(gw_wait(req));
  CHECK(memcmp(x, y, sizeof x) == 0);

  /* The reduce-scatter with blocks of any sizes: argument errors name what was wrong and
   * queue nothing; on one rank it returns the input block, raw or through a codec. */
  {
    gw_codec_t qsgd = NULL, none = NULL;
    gw_ef_state_t ef = NULL, small = NULL;
    float z[4] = {0};
    unsigned short h[4] = {0x3f80, 0x4000, 0x4040, 0x4080}, hz[4] = {0}; /* bfloat16 1, 2, 3, 4 */
    const size_t huge = (size_t)-1;
    EXPECT_OK(gw_codec_create("qsgd:bits=8", &qsgd));
    EXPECT_OK(gw_codec_create("none", &none));
    EXPECT_OK(gw_ef_state_create(4, &ef));
    EXPECT_OK(gw_ef_state_create(3, &small));
    EXPECT_ERR(gw_reduce_scatterv(comm, x, y, NULL, GW_FLOAT32, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT,
               "recvcounts is null");
    EXPECT_ERR(gw_reduce_scatterv(comm, x, y, sizes, GW_FLOAT32, GW_SUM, NULL, ef), GW_ERR_INVALID_ARGUMENT,
               "needs a codec");
    EXPECT_ERR(gw_reduce_scatterv(comm, x, y, sizes, GW_FLOAT32, GW_SUM, qsgd, small), GW_ERR_INVALID_ARGUMENT,
               "holds 3 elements");
    EXPECT_ERR(gw_reduce_scatterv(comm, x, y, sizes, GW_INT32, GW_SUM, qsgd, NULL), GW_ERR_UNSUPPORTED, "int32");
    EXPECT_ERR(gw_reduce_scatterv(comm, x, y, sizes, GW_FLOAT32, GW_MAX, qsgd, NULL), GW_ERR_INVALID_ARGUMENT,
               "op max");
    EXPECT_ERR(gw_reduce_scatterv(comm, x, y, sizes, (gw_dtype_t)9, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT,
               "dtype 9");
    EXPECT_ERR(gw_reduce_scatter_compressed(comm, x, y, huge, GW_FLOAT32, GW_SUM, qsgd, NULL), GW_ERR_INVALID_ARGUMENT,
               "recvcounts[0]");
    EXPECT_ERR(gw_reduce_scatter_compressed(comm, NULL, y, 4, GW_FLOAT32, GW_SUM, qsgd, NULL), GW_ERR_INVALID_ARGUMENT,
               "sendbuf is null");
    req = (gw_request_t)(void*)&g_passed;
    EXPECT_ERR(gw_ireduce_scatterv(comm, x, y, NULL, GW_FLOAT32, GW_SUM, qsgd, NULL, &req), GW_ERR_INVALID_ARGUMENT,
               "recvcounts");
    CHECK(req == NULL);
    EXPECT_ERR(gw_ireduce_scatterv(comm, x, y, sizes, GW_FLOAT32, GW_SUM, qsgd, NULL, NULL), GW_ERR_INVALID_ARGUMENT,
               "request is null");
    EXPECT_OK(gw_reduce_scatterv(comm, x, z, sizes, GW_FLOAT32, GW_SUM, NULL, NULL));
    CHECK(memcmp(x, z, sizeof x) == 0);
    memset(z, 0, sizeof z);
    EXPECT_OK(gw_ireduce_scatter_compressed(comm, x, z, 4, GW_FLOAT32, GW_AVG, qsgd, ef, &req));
    EXPECT_OK(gw_wait(req));
    CHECK(memcmp(x, z, sizeof x) == 0); /* one rank: its own block is never compressed */
    EXPECT_OK(gw_reduce_scatterv(comm, h, hz, sizes, GW_BFLOAT16, GW_SUM, none, NULL));
    CHECK(memcmp(h, hz, sizeof h) == 0);
    EXPECT_OK(gw_ef_state_destroy(small));
    EXPECT_OK(gw_ef_state_destroy(ef));
    EXPECT_OK(gw_codec_destroy(none));
    EXPECT_OK(gw_codec_destroy(qsgd));
  }

  /* The all-gather on a compressed wire: argument errors name what was wrong; on one rank
   * the block is the decode of sendbuf (exact for values bfloat16 holds), in place too. */
  {
    gw_codec_t bf16 = NULL, q8 = NULL;
    float z[4] = {0}, w[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float third[1] = {1.0f / 3.0f};
    EXPECT_OK(gw_codec_create("bf16", &bf16));
    EXPECT_OK(gw_codec_create("qsgd:bits=8,rounding=nearest", &q8));
    EXPECT_ERR(gw_allgather_compressed(comm, x, z, 4, GW_INT32, bf16), GW_ERR_UNSUPPORTED, "int32");
    EXPECT_ERR(gw_allgather_compressed(comm, x, z, 4, (gw_dtype_t)9, bf16), GW_ERR_INVALID_ARGUMENT, "dtype 9");
    EXPECT_ERR(gw_allgather_compressed(comm, NULL, z, 4, GW_FLOAT32, bf16), GW_ERR_INVALID_ARGUMENT, "sendbuf is null");
    EXPECT_ERR(gw_allgather_compressed(comm, x, NULL, 4, GW_FLOAT32, bf16), GW_ERR_INVALID_ARGUMENT, "recvbuf is null");
    EXPECT_ERR(gw_allgather_compressed(comm, x, z, (size_t)-1, GW_FLOAT32, bf16), GW_ERR_INVALID_ARGUMENT,
               "larger than any buffer");
    req = (gw_request_t)(void*)&g_passed;
    EXPECT_ERR(gw_iallgather_compressed(comm, x, z, 4, GW_INT32, bf16, &req), GW_ERR_UNSUPPORTED, "int32");
    CHECK(req == NULL);
    EXPECT_ERR(gw_iallgather_compressed(comm, x, z, 4, GW_FLOAT32, bf16, NULL), GW_ERR_INVALID_ARGUMENT,
               "request is null");
    EXPECT_OK(gw_allgather_compressed(comm, x, z, 4, GW_FLOAT32, NULL)); /* raw */
    CHECK(memcmp(x, z, sizeof x) == 0);
    EXPECT_OK(gw_iallgather_compressed(comm, w, w, 4, GW_FLOAT32, q8, &req)); /* in place */
    EXPECT_OK(gw_wait(req));
    CHECK(w[0] == 1.0f && w[3] > 3.98f && w[3] < 4.02f);
    EXPECT_OK(gw_allgather_compressed(comm, third, third, 1, GW_FLOAT32, bf16));
    CHECK(third[0] != 1.0f / 3.0f && third[0] > 0.332f && third[0] < 0.335f);  /* the decode, not the input */
    EXPECT_OK(gw_allgather_compressed(comm, NULL, NULL, 0, GW_FLOAT32, bf16)); /* nothing to send */
    EXPECT_OK(gw_codec_destroy(q8));
    EXPECT_OK(gw_codec_destroy(bf16));
  }

  /* gw_comm_init_with_allgather: argument errors before the callback runs. */
  {
    gw_comm_t other = (gw_comm_t)(void*)&g_passed;
    EXPECT_ERR(gw_comm_init_with_allgather(&other, 1, 0, NULL, NULL, NULL), GW_ERR_INVALID_ARGUMENT,
               "allgather is null");
    CHECK(other == NULL);
    EXPECT_ERR(gw_comm_init_with_allgather(&other, 0, 0, never_called, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "nranks");
    EXPECT_ERR(gw_comm_init_with_allgather(&other, 2, 2, never_called, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "rank 2");
    CHECK(g_calls == 0);
  }
}

int main(void) {
  gw_unique_id_t uid;
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  gw_comm_t comm = NULL;
  gw_result_t init;
  if (getenv("UCX_TLS") == NULL) setenv("UCX_TLS", "tcp,self", 0);
  cfg.timeout_s = 30.0;
  null_comm();
  EXPECT_OK(gw_get_unique_id(&uid));
  init = gw_comm_init_rank(&comm, 1, uid, 0, &cfg);
  if (init == GW_ERR_UNSUPPORTED && strstr(gw_get_last_error(), "without UCX") != NULL) {
    fprintf(stderr, "note: communicator checks skipped: %s\n", gw_get_last_error());
  } else {
    EXPECT_OK(init);
    if (comm != NULL) {
      with_comm(comm);
      EXPECT_OK(gw_comm_destroy(comm));
    }
  }
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
