// Where the time of a small all-reduce goes: one row per kind of call, each the slowest
// rank's mean microseconds per call over -n timed calls (after -n/10 warm-up calls), all
// through the public C ABI. Reading the rows against each other breaks a small all-reduce
// down (docs/performance.md, "Small all-reduces"):
//   pingpong        half a round trip of a -b byte message between ranks 0 and 1
//                   (gw_send/gw_recv; the other ranks wait): the transport's latency
//   allreduce_0     an all-reduce of 0 elements: the call, its argument checks and policy, and
//                   its call check (one descriptor message per rank), no data
//   allreduce       an all-reduce of -b bytes of float32, blocking (runs on the calling thread)
//   allreduce_ring  the same forced onto the dense ring (2 (p - 1) steps, not log p)
//   iallreduce      gw_iallreduce then gw_wait: the progress thread runs it (two hand-offs)
//   barrier         gw_barrier
// and, first, the init time: the slowest rank's seconds from the tool's start (before any
// fork with --np) until its communicator is up.
// usage: call_cost [--np N] [-b bytes] [-n iters] [--only ROW]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gradwire/gradwire.h"
#include "perf/launch.hpp"

namespace {

using gw::perf::check;

// The slowest rank's mean microseconds per call of fn (every rank runs it).
double time_calls(gw_comm_t comm, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < iters / 10 + 1; ++i) fn();
  check(gw_barrier(comm), "gw_barrier");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  check(gw_allreduce(comm, &us, &us, 1, GW_FLOAT64, GW_MAX, nullptr, nullptr), "gw_allreduce (the times)");
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  int np = 0, iters = 2000;
  std::string only;
  size_t bytes = 4096;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "call_cost: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--np") {
      np = std::atoi(next());
    } else if (a == "-n") {
      iters = std::atoi(next());
    } else if (a == "--only") {
      only = next();
    } else if (a == "-b") {
      bytes = std::strtoull(next(), nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: call_cost [--np N] [-b bytes] [-n iters] [--only ROW]\n");
      return 2;
    }
  }
  if (iters <= 0 || np < 0 || bytes > (size_t{1} << 30)) {
    std::fprintf(stderr, "call_cost: -n must be positive, --np not negative, -b at most 1 GiB\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();  // forked ranks inherit it
  gw_comm_t comm = gw::perf::launch(np);
  double init_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int rank = 0, size = 0;
  check(gw_comm_rank(comm, &rank), "gw_comm_rank");
  check(gw_comm_size(comm, &size), "gw_comm_size");
  const size_t count = bytes / sizeof(float);
  std::vector<float> x(count + 1, 1.0f), y(count + 1, 0.0f);
  std::vector<uint8_t> msg(bytes + 1, 7);

  struct Row {
    const char* name;
    std::function<void()> fn;
  };
  const std::vector<Row> rows = {
      {"pingpong",
       [&] {
         if (rank == 0) {
           check(gw_send(comm, msg.data(), bytes, 1, 1), "gw_send");
           check(gw_recv(comm, msg.data(), bytes, 1, 2), "gw_recv");
         } else if (rank == 1) {
           check(gw_recv(comm, msg.data(), bytes, 0, 1), "gw_recv");
           check(gw_send(comm, msg.data(), bytes, 0, 2), "gw_send");
         }
       }},
      {"allreduce_0",
       [&] { check(gw_allreduce(comm, x.data(), y.data(), 0, GW_FLOAT32, GW_SUM, nullptr, nullptr), "0"); }},
      {"allreduce",
       [&] {
         check(gw_allreduce(comm, x.data(), y.data(), count, GW_FLOAT32, GW_SUM, nullptr, nullptr), "allreduce");
       }},
      {"allreduce_ring",
       [&] {
         check(gw_allreduce_ex(comm, x.data(), y.data(), count, GW_FLOAT32, GW_SUM, nullptr, nullptr, GW_ALGO_RING),
               "ring");
       }},
      {"iallreduce",
       [&] {
         gw_request_t req = nullptr;
         check(gw_iallreduce(comm, x.data(), y.data(), count, GW_FLOAT32, GW_SUM, nullptr, nullptr, GW_ALGO_AUTO, &req),
               "gw_iallreduce");
         check(gw_wait(req), "gw_wait");
       }},
      {"barrier", [&] { check(gw_barrier(comm), "gw_barrier"); }},
  };
  check(gw_allreduce(comm, &init_s, &init_s, 1, GW_FLOAT64, GW_MAX, nullptr, nullptr), "gw_allreduce (init)");
  gw_algo_t algo = GW_ALGO_AUTO;
  check(gw_allreduce_algo(comm, count, GW_FLOAT32, nullptr, &algo), "gw_allreduce_algo");
  if (rank == 0) {
    std::printf("# call_cost: %d ranks, %zu bytes, %d calls per row; the policy runs %s for this size\n", size, bytes,
                iters, algo == GW_ALGO_RECURSIVE_DOUBLING ? "recursive_doubling" : "ring");
    std::printf("# init: %.3f s (slowest rank, from the tool's start to its communicator)\n", init_s);
    std::printf("# %-16s %12s\n", "call", "us/call");
  }
  for (const Row& r : rows) {
    if (size < 2 && std::strcmp(r.name, "pingpong") == 0) continue;
    if (!only.empty() && only != r.name) continue;
    const double us = time_calls(comm, iters, r.fn);
    if (rank == 0) std::printf("  %-16s %12.2f\n", r.name, us);
  }
  check(gw_comm_destroy(comm), "gw_comm_destroy");
  return 0;
}
