// Bandwidth of the UCX transport between two forked processes on this machine.
//   ucx_pingpong [max_bytes] [min_bytes]      (UCX_TLS as in the environment, e.g. tcp or sm)
// For each size (powers of 4 up to max_bytes, 64 MiB by default): ping-pong round-trip time,
// one-way bandwidth from it (size / half the round trip), and a one-directional stream with
// two messages in flight (the shape of a pipelined ring step). GB/s are 1e9 bytes/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/ucx/fork_ranks.hpp"

namespace {

using gw::Status;
using gw::transport::Clock;
using gw::transport::Op;
using gw::transport::UcxTransport;

int fail(int rank, const char* what, const Status& s) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, s.to_string().c_str());
  return 1;
}

int bench(UcxTransport& t, size_t min_bytes, size_t max_bytes) {
  const int rank = t.rank();
  const int peer = 1 - rank;
  const auto deadline = [] { return Clock::now() + std::chrono::seconds(60); };
  std::vector<unsigned char> a(max_bytes, static_cast<unsigned char>(rank)), b(max_bytes);
  std::vector<unsigned char> c(max_bytes);
  uint64_t tag = 1;
  if (rank == 0) {
    std::printf("# UCX_TLS=%s\n", std::getenv("UCX_TLS") != nullptr ? std::getenv("UCX_TLS") : "(unset)");
    std::printf("%12s %7s %12s %12s %12s\n", "bytes", "iters", "rtt_us", "pingpong_GBps", "stream_GBps");
  }
  for (size_t size = min_bytes;; size = std::min(size * 4, max_bytes)) {
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / std::max<size_t>(size, 1), 5, 2000));
    const int warmup = 2;
    // Ping-pong.
    Clock::time_point start;
    for (int i = 0; i < warmup + iters; ++i) {
      if (i == warmup) start = Clock::now();
      Op s, r;
      if (rank == 0) {
        if (Status st = t.isend(peer, tag, a.data(), size, s); !st.is_ok()) return fail(rank, "isend", st);
        if (Status st = t.irecv(peer, tag, b.data(), size, r); !st.is_ok()) return fail(rank, "irecv", st);
      } else {
        if (Status st = t.irecv(peer, tag, b.data(), size, r); !st.is_ok()) return fail(rank, "irecv", st);
        if (Status st = t.wait(r, deadline()); !st.is_ok()) return fail(rank, "wait", st);
        if (Status st = t.isend(peer, tag, b.data(), size, s); !st.is_ok()) return fail(rank, "isend", st);
      }
      if (Status st = t.wait(r, deadline()); !st.is_ok()) return fail(rank, "wait", st);
      if (Status st = t.wait(s, deadline()); !st.is_ok()) return fail(rank, "wait", st);
      ++tag;
    }
    const double pp = std::chrono::duration<double>(Clock::now() - start).count();
    // Stream from rank 0 to rank 1, two messages in flight, one ack at the end.
    const int stream_iters = iters;
    Op ops[2];
    Clock::time_point sstart = Clock::now();
    for (int i = 0; i < stream_iters; ++i) {
      Op& op = ops[i % 2];
      if (op.current() != gw::transport::OpState::kIdle) {
        if (Status st = t.wait(op, deadline()); !st.is_ok()) return fail(rank, "stream wait", st);
      }
      unsigned char* buf = (i % 2 == 0) ? b.data() : c.data();
      const Status st = rank == 0 ? t.isend(peer, tag + static_cast<uint64_t>(i), a.data(), size, op)
                                  : t.irecv(peer, tag + static_cast<uint64_t>(i), buf, size, op);
      if (!st.is_ok()) return fail(rank, "stream post", st);
    }
    if (Status st = t.wait_all(ops, 2, deadline()); !st.is_ok()) return fail(rank, "stream wait", st);
    tag += static_cast<uint64_t>(stream_iters);
    Op ack;
    unsigned char byte = 0;
    if (rank == 1) {
      if (Status st = t.isend(peer, tag, &byte, 1, ack); !st.is_ok()) return fail(rank, "ack", st);
    } else {
      if (Status st = t.irecv(peer, tag, &byte, 1, ack); !st.is_ok()) return fail(rank, "ack", st);
    }
    if (Status st = t.wait(ack, deadline()); !st.is_ok()) return fail(rank, "ack wait", st);
    ++tag;
    const double ss = std::chrono::duration<double>(Clock::now() - sstart).count();
    if (rank == 0) {
      const double rtt = pp / iters;
      std::printf("%12zu %7d %12.1f %12.3f %12.3f\n", size, iters, rtt * 1e6,
                  static_cast<double>(size) / (rtt / 2) / 1e9, static_cast<double>(size) * stream_iters / ss / 1e9);
      std::fflush(stdout);
    }
    if (size == max_bytes) break;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t max_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : size_t{64} << 20;
  const size_t min_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : size_t{4096};
  if (max_bytes == 0 || min_bytes == 0 || min_bytes > max_bytes) {
    std::fprintf(stderr, "usage: %s [max_bytes] [min_bytes]\n", argv[0]);
    return 2;
  }
  const char* tls = std::getenv("UCX_TLS");
  const auto codes = gw::test::run_ranks(
      2, tls != nullptr ? tls : "",
      [&](std::unique_ptr<UcxTransport>& t, int, int) { return bench(*t, min_bytes, max_bytes); },
      std::chrono::seconds(300));
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] != 0) {
      std::fprintf(stderr, "rank %zu ended with %d\n", r, codes[r]);
      return 1;
    }
  }
  return 0;
}
