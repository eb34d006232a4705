/* A rank that never calls gw_comm_destroy: `no_destroy [sleep_ms_for_rank_1] [nocomm]`. It makes
 * a communicator from the environment (GW_RANK/GW_SIZE), runs an all-reduce and a barrier,
 * and returns from main with the communicator still open (rank 1 first sleeps, so the ranks
 * leave at different times). check_shutdown.py runs it and wants a clean exit, quickly, with
 * nothing on stderr. */
#define _POSIX_C_SOURCE 200809L
#include <gradwire/gradwire.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char** argv) {
  long sleep_ms = argc > 1 ? atol(argv[1]) : 0;
  gw_comm_t comm = NULL;
  float x[1000];
  int rank = -1;
  int i;
  if (gw_comm_init_from_env(&comm, NULL) != GW_SUCCESS) {
    fprintf(stderr, "init: %s\n", gw_get_last_error());
    return 2;
  }
  gw_comm_rank(comm, &rank);
  for (i = 0; i < 1000; ++i) x[i] = (float)i;
  if (gw_allreduce(comm, x, x, 1000, GW_FLOAT32, GW_SUM, NULL, NULL) != GW_SUCCESS || gw_barrier(comm) != GW_SUCCESS) {
    fprintf(stderr, "collective: %s\n", gw_get_last_error());
    return 3;
  }
  if (rank == 1 && sleep_ms > 0) {
    struct timespec ts;
    ts.tv_sec = sleep_ms / 1000;
    ts.tv_nsec = (sleep_ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
  }
  printf("rank %d: done, leaving without gw_comm_destroy\n", rank);
  return 0;
}
