/* The OpenMPI baseline: MPI_Allreduce (float, sum) timed exactly as allreduce_perf times
 * gradwire (mean per call of the slowest rank, buffers allocated once and first-touched), so
 * both can run in one script on the same ranks and sizes.
 * usage: mpirun -np N mpi_allreduce_perf [-b bytes] [-e bytes] [-f factor] [-n iters] [-w warmup]
 *                                        [-c 0|1] [-J file.json] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k')
    v *= 1024.0;
  else if (*end == 'M' || *end == 'm')
    v *= 1024.0 * 1024.0;
  else if (*end == 'G' || *end == 'g')
    v *= 1024.0 * 1024.0 * 1024.0;
  return (size_t)v;
}

int main(int argc, char** argv) {
  size_t min_bytes = 32u << 20, max_bytes = 32u << 20;
  double factor = 2.0;
  int iters = 20, warmup = 5, check = 1, rank = 0, nranks = 1, i, rows = 0;
  const char* json_path = NULL;
  FILE* json = NULL;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b"))
      min_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e"))
      max_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f"))
      factor = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-n"))
      iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w"))
      warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-c"))
      check = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-J"))
      json_path = argv[i + 1];
  }
  {
    const size_t max_count = max_bytes / sizeof(float);
    float* send = malloc(max_count * sizeof(float) + 4);
    float* recv = malloc(max_count * sizeof(float) + 4);
    size_t k;
    double s;
    for (k = 0; k < max_count; ++k) {
      send[k] = (float)((int)((k * 7 + (size_t)rank * 13) % 41) - 20);
      recv[k] = 0.0f;
    }
    if (rank == 0) {
      printf("# OpenMPI MPI_Allreduce: %d ranks, float, sum, iters %d, warmup %d\n", nranks, iters, warmup);
      printf("#\n# %12s %12s %12s %8s %8s %8s\n", "size(B)", "count", "time(us)", "algbw", "busbw", "#wrong");
      if (json_path != NULL) {
        json = fopen(json_path, "w");
        if (json == NULL) {
          perror(json_path);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        fprintf(json,
                "{\"tool\": \"mpi_allreduce_perf\", \"nranks\": %d, \"iters\": %d, \"warmup\": %d, "
                "\"bus_factor\": %.6f, \"results\": [\n",
                nranks, iters, warmup, 2.0 * (nranks - 1) / nranks);
      }
    }
    for (s = (double)min_bytes; s <= (double)max_bytes * 1.0000001; s *= factor) {
      const size_t count = (size_t)s / sizeof(float);
      double t0, t, tmax, algbw;
      long long wrong = 0, wrong_all = 0;
      for (i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      for (i = 0; i < iters; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      t = (MPI_Wtime() - t0) / iters;
      MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      for (k = 0; check && k < count; ++k) {
        double expect = 0;
        int r;
        for (r = 0; r < nranks; ++r) expect += (double)((int)((k * 7 + (size_t)r * 13) % 41) - 20);
        if ((double)recv[k] != expect) ++wrong;
      }
      MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      algbw = tmax > 0 ? (double)(count * sizeof(float)) / tmax / 1e9 : 0;
      if (rank == 0) {
        printf("  %12zu %12zu %12.1f %8.3f %8.3f %8lld\n", count * sizeof(float), count, tmax * 1e6, algbw,
               algbw * 2.0 * (nranks - 1) / nranks, check ? wrong_all : -1LL);
        if (json != NULL) {
          fprintf(json,
                  "%s  {\"bytes\": %zu, \"count\": %zu, \"type\": \"float\", \"codec\": \"none\", "
                  "\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, \"wrong\": %lld}",
                  rows > 0 ? ",\n" : "", count * sizeof(float), count, tmax * 1e6, algbw,
                  algbw * 2.0 * (nranks - 1) / nranks, check ? wrong_all : -1LL);
        }
        ++rows;
      }
      if (min_bytes == 0 && s == 0) s = sizeof(float) / factor;
    }
    free(send);
    free(recv);
  }
  if (json != NULL) {
    fprintf(json, "\n]}\n");
    fclose(json);
  }
  MPI_Finalize();
  return 0;
}
