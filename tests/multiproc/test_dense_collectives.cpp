// The dense, NCCL-shaped collectives between forked processes over real UCX (UCX_TLS from
// the test's environment): all-reduce with every op and dtype, reduce, reduce-scatter,
// variable all-gather, all-to-all (fixed and variable), gather and scatter, on 1 to 4 ranks,
// with counts of 0, 1, odd, prime and not divisible by the rank count; calls that differ
// between ranks fail with kInvalidUsage on every rank; bad arguments fail with
// kInvalidArgument and leave the communicator usable. Values are chosen so that every result
// is exact (integer wraparound included), and each is checked against a reference.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "collectives/comm/comm_init.hpp"
#include "compressors/half.hpp"
#include "tests/host_device_backend.hpp"
#include "tests/multiproc/mp_launch.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kOk = test::kRankOk;
using test::rank_failed;
#define EXPECT_CALL_OK(rank, expr)                                                                                \
  do {                                                                                                            \
    const Status s_ = (expr);                                                                                     \
    if (!s_.is_ok()) return rank_failed(rank, "line %d: %s failed: %s", __LINE__, #expr, s_.to_string().c_str()); \
  } while (0)

using Body = std::function<int(Communicator&, int rank, int np)>;

// Forks np ranks that meet through a unique id and run body; every rank's exit code.
// node_of (np entries, or empty: one host) lays the ranks out on nodes through GW_HOST_ID.
std::vector<int> run_np(int np, const Body& body, size_t chunk_bytes = 4096, const std::vector<int>& node_of = {}) {
  CommConfig cfg;
  cfg.timeout = milliseconds(30000);
  cfg.chunk_bytes = chunk_bytes;  // many chunks even for small buffers
  return test::fork_communicators(np, cfg, body, seconds(240), node_of);
}

void expect_all_ok(const std::vector<int>& codes, int np) {
  ASSERT_EQ(codes.size(), static_cast<size_t>(np));
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], kOk) << "rank " << r << " of " << np;
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool is_float(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16 || d == DType::kFloat64;
}

// Element i of an n-element typed buffer, as double (floats) or as wrapped 64-bit integer.
struct Elem {
  double f;
  uint64_t u;
};

// Reads and writes elements of any dtype.
struct Typed {
  DType d;
  size_t es() const { return dtype_size(d); }
  void put(std::vector<uint8_t>& buf, size_t i, Elem e) const {
    uint8_t* p = buf.data() + i * es();
    switch (d) {
      case DType::kFloat32: {
        const float v = static_cast<float>(e.f);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::kFloat64: std::memcpy(p, &e.f, 8); break;
      case DType::kFloat16: {
        const uint16_t v = hd::float_to_half(static_cast<float>(e.f));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t v = hd::float_to_bf16(static_cast<float>(e.f));
        std::memcpy(p, &v, 2);
        break;
      }
      default: std::memcpy(p, &e.u, es()); break;  // little-endian truncation: wraps
    }
  }
};

// Rank r's element i for an op: floats exact under every op (small integers; signs and
// powers of two for products; NaN on one rank here and there for min and max), integers
// anything (their sums and products wrap).
Elem value(DType d, ReduceOp op, int r, size_t i, int np) {
  const uint64_t h = mix(i * 131 + static_cast<uint64_t>(r));
  if (!is_float(d)) return Elem{0, h};
  if (op == ReduceOp::kProd) {
    static const double f[] = {1, 2, -1, 0.5, -2};
    return Elem{f[h % 5], 0};
  }
  if ((op == ReduceOp::kMin || op == ReduceOp::kMax) && i % 11 == 3 &&
      static_cast<size_t>(r) == (i / 11) % static_cast<size_t>(np)) {
    return Elem{std::numeric_limits<double>::quiet_NaN(), 0};
  }
  return Elem{static_cast<double>(static_cast<int>(h % 61) - 30), 0};
}

// The bytes the reduction of every rank's element i must give.
std::vector<uint8_t> reference(DType d, ReduceOp op, size_t n, int np, const std::vector<int>& ranks) {
  const Typed t{d};
  std::vector<uint8_t> out(n * t.es());
  const int bits = static_cast<int>(t.es() * 8);
  auto sext = [&](uint64_t u) {  // the value as the signed (or for uint8 unsigned) integer
    if (d == DType::kUInt8) return static_cast<int64_t>(u & 0xff);
    if (bits == 64) return static_cast<int64_t>(u);
    const uint64_t m = uint64_t{1} << (bits - 1);
    const uint64_t x = u & ((m << 1) - 1);
    return static_cast<int64_t>((x ^ m) - m);
  };
  for (size_t i = 0; i < n; ++i) {
    Elem acc{0, 0};
    bool first = true;
    for (int r : ranks) {
      const Elem v = value(d, op, r, i, np);
      if (first) {
        acc = v;
        first = false;
        continue;
      }
      if (is_float(d)) {
        const bool nan = std::isnan(acc.f) || std::isnan(v.f);
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg: acc.f += v.f; break;
          case ReduceOp::kProd: acc.f *= v.f; break;
          case ReduceOp::kMin: acc.f = nan ? std::numeric_limits<double>::quiet_NaN() : std::min(acc.f, v.f); break;
          case ReduceOp::kMax: acc.f = nan ? std::numeric_limits<double>::quiet_NaN() : std::max(acc.f, v.f); break;
        }
      } else {
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg: acc.u += v.u; break;
          case ReduceOp::kProd: acc.u *= v.u; break;
          case ReduceOp::kMin: acc.u = sext(v.u) < sext(acc.u) ? v.u : acc.u; break;
          case ReduceOp::kMax: acc.u = sext(v.u) > sext(acc.u) ? v.u : acc.u; break;
        }
      }
    }
    if (op == ReduceOp::kAvg) {
      const int p = static_cast<int>(ranks.size());
      if (is_float(d)) {
        // As the library: the exact sum in the dtype, divided in float (double for float64).
        acc.f =
            d == DType::kFloat64 ? acc.f / p : static_cast<double>(static_cast<float>(acc.f) / static_cast<float>(p));
      } else {
        acc.u = static_cast<uint64_t>(sext(acc.u) / p);
      }
    }
    t.put(out, i, acc);
  }
  return out;
}

std::vector<uint8_t> input(DType d, ReduceOp op, size_t n, int r, int np) {
  const Typed t{d};
  std::vector<uint8_t> out(n * t.es());
  for (size_t i = 0; i < n; ++i) t.put(out, i, value(d, op, r, i, np));
  return out;
}

// Compares typed results, NaN equal to any NaN (payloads may differ from the reference's).
int compare(int rank, const char* what, DType d, ReduceOp op, const uint8_t* got, const uint8_t* want, size_t n) {
  const size_t es = dtype_size(d);
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) == 0) continue;
    bool both_nan = false;
    if (d == DType::kFloat32) {
      float a, b;
      std::memcpy(&a, got + i * es, 4);
      std::memcpy(&b, want + i * es, 4);
      both_nan = std::isnan(a) && std::isnan(b);
    } else if (d == DType::kFloat64) {
      double a, b;
      std::memcpy(&a, got + i * es, 8);
      std::memcpy(&b, want + i * es, 8);
      both_nan = std::isnan(a) && std::isnan(b);
    } else if (d == DType::kFloat16 || d == DType::kBFloat16) {
      uint16_t a, b;
      std::memcpy(&a, got + i * es, 2);
      std::memcpy(&b, want + i * es, 2);
      auto dec = [&](uint16_t h) { return d == DType::kFloat16 ? hd::half_to_float(h) : hd::bf16_to_float(h); };
      both_nan = std::isnan(dec(a)) && std::isnan(dec(b));
    }
    if (!both_nan) {
      return rank_failed(rank, "%s %s %s: element %zu of %zu differs from the reference", what, dtype_name(d),
                         red_op_name(op), i, n);
    }
  }
  return kOk;
}

std::vector<int> all_ranks(int np) {
  std::vector<int> v;
  for (int r = 0; r < np; ++r) v.push_back(r);
  return v;
}

const DType kAllDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64,
                            DType::kInt8,    DType::kUInt8,   DType::kInt32,    DType::kInt64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};

// The ring and Rabenseifner, each asked for by name.
TEST(DenseCollectives, AllreduceEveryOpAndDtype) {
  for (Algo algo : {Algo::kRing, Algo::kRabenseifner})
    for (int np = 1; np <= 4; ++np) {
      SCOPED_TRACE(algo_name(algo));
      expect_all_ok(
          run_np(np,
                 [algo](Communicator& c, int rank, int p) {
                   for (DType d : kAllDtypes) {
                     for (ReduceOp op : kAllOps) {
                       for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
                         const auto send = input(d, op, n, rank, p);
                         const auto want = reference(d, op, n, p, all_ranks(p));
                         std::vector<uint8_t> recv(n * dtype_size(d) + 1, 0xab);
                         EXPECT_CALL_OK(rank, c.allreduce(send.data(), recv.data(), n, d, op, nullptr, nullptr, algo));
                         if (int e = compare(rank, "allreduce", d, op, recv.data(), want.data(), n)) return e;
                         if (recv.back() != 0xab) return rank_failed(rank, "allreduce wrote past the end");
                         std::vector<uint8_t> inplace = send;  // in place too
                         EXPECT_CALL_OK(rank,
                                        c.allreduce(inplace.data(), inplace.data(), n, d, op, nullptr, nullptr, algo));
                         if (!want.empty() && std::memcmp(inplace.data(), recv.data(), want.size()) != 0) {
                           return rank_failed(rank, "in-place allreduce differs");
                         }
                       }
                     }
                   }
                   // Large and prime: 1000003 elements, every rank the same bits (exchanged and compared).
                   for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
                     const size_t n = 1000003;
                     const DType d = op == ReduceOp::kAvg ? DType::kInt64 : DType::kFloat32;
                     const auto send = input(d, op, n, rank, p);
                     std::vector<uint8_t> recv(n * dtype_size(d));
                     EXPECT_CALL_OK(rank, c.allreduce(send.data(), recv.data(), n, d, op, nullptr, nullptr, algo));
                     const auto want = reference(d, op, n, p, all_ranks(p));
                     if (int e = compare(rank, "large allreduce", d, op, recv.data(), want.data(), n)) return e;
                     uint64_t digest = 1469598103934665603ull;
                     for (uint8_t b : recv) digest = (digest ^ b) * 1099511628211ull;
                     std::vector<uint64_t> all(static_cast<size_t>(p));
                     EXPECT_CALL_OK(rank, c.allgather(&digest, all.data(), sizeof digest));
                     for (int r = 0; r < p; ++r) {
                       if (all[r] != digest) return rank_failed(rank, "rank %d holds other bits than this rank", r);
                     }
                   }
                   return kOk;
                 }),
          np);
    }
}

// The hierarchical all-reduce on every layout (nodes from GW_HOST_ID): exact for every op,
// dtype and size, in and out of place; asked for by name on a layout that does not allow it
// (one node, one rank per node, uneven or interleaved nodes) it runs flat, and the policy says
// which one runs.
TEST(DenseCollectives, HierarchicalAllreduceEveryLayoutOpAndDtype) {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1}, {0, 0, 0, 1, 1, 1}, {0, 0, 1, 1, 2, 2}, {0, 0, 0, 0},
                                                 {0, 1, 2, 3}, {0, 0, 1},          {0, 1, 0, 1},       {0, 0, 1, 1, 1}};
  for (const auto& layout : layouts) {
    const int np = static_cast<int>(layout.size());
    std::vector<int> per_node;
    for (int n : layout) {
      if (n >= static_cast<int>(per_node.size())) per_node.resize(static_cast<size_t>(n) + 1, 0);
      ++per_node[static_cast<size_t>(n)];
    }
    bool uniform = true;
    for (int k : per_node) uniform = uniform && k == per_node[0];
    const bool hier = per_node.size() > 1 && per_node[0] > 1 && uniform;
    SCOPED_TRACE("layout of " + std::to_string(np) + " ranks on " + std::to_string(per_node.size()) + " nodes");
    expect_all_ok(
        run_np(
            np,
            [&](Communicator& c, int rank, int p) {
              if (c.node_count() != static_cast<int>(per_node.size()))
                return rank_failed(rank, "node_count %d", c.node_count());
              if (c.local_size() != per_node[static_cast<size_t>(layout[static_cast<size_t>(rank)])]) {
                return rank_failed(rank, "local_size %d", c.local_size());
              }
              // Flat, the dense choice is by size: recursive doubling for 4 KB; for 12 MB the ring
              // or Rabenseifner, as the cost model rates them (the ring where folding costs
              // Rabenseifner a pass: 3 and 5 ranks), never the hierarchical all-reduce.
              const Algo flat_large = c.choose_algo(3000017, DType::kFloat32, nullptr, Algo::kAuto);
              if (!hier && flat_large != Algo::kRing && flat_large != Algo::kRabenseifner) {
                return rank_failed(rank, "the flat policy picks %s for 12 MB", algo_name(flat_large));
              }
              const Algo want_algo = hier ? Algo::kHierarchical : flat_large;
              const Algo want_small = hier ? Algo::kHierarchical : p > 1 ? Algo::kRecursiveDoubling : Algo::kRing;
              if (c.choose_algo(1000, DType::kFloat32, nullptr, Algo::kAuto) != want_small ||
                  c.choose_algo(1000, DType::kFloat32, nullptr, Algo::kHierarchical) != want_small) {
                return rank_failed(rank, "the policy picks %s",
                                   algo_name(c.choose_algo(1000, DType::kFloat32, nullptr, Algo::kAuto)));
              }
              for (DType d : kAllDtypes) {
                for (ReduceOp op : kAllOps) {
                  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{13}, size_t{4099}}) {
                    const auto send = input(d, op, n, rank, p);
                    const auto want = reference(d, op, n, p, all_ranks(p));
                    std::vector<uint8_t> recv(n * dtype_size(d) + 1, 0xab);
                    EXPECT_CALL_OK(
                        rank, c.allreduce(send.data(), recv.data(), n, d, op, nullptr, nullptr, Algo::kHierarchical));
                    if (int e = compare(rank, "hierarchical allreduce", d, op, recv.data(), want.data(), n)) return e;
                    if (recv.back() != 0xab) return rank_failed(rank, "allreduce wrote past the end");
                    std::vector<uint8_t> inplace = send;
                    EXPECT_CALL_OK(
                        rank, c.allreduce(inplace.data(), inplace.data(), n, d, op, nullptr, nullptr, Algo::kAuto));
                    if (int e = compare(rank, "in-place auto allreduce", d, op, inplace.data(), want.data(), n))
                      return e;
                  }
                }
              }
              const size_t n = 3000017;  // large: many chunks in every leg, several pieces in the node
              const auto send = input(DType::kFloat32, ReduceOp::kSum, n, rank, p);
              std::vector<uint8_t> recv(n * 4);
              EXPECT_CALL_OK(rank, c.allreduce(send.data(), recv.data(), n, DType::kFloat32, ReduceOp::kSum, nullptr,
                                               nullptr, Algo::kAuto));
              const auto want = reference(DType::kFloat32, ReduceOp::kSum, n, p, all_ranks(p));
              if (int e =
                      compare(rank, "large allreduce", DType::kFloat32, ReduceOp::kSum, recv.data(), want.data(), n))
                return e;
              EXPECT_CALL_OK(rank, c.stats().status());
              if (c.stats()->last_algo != want_algo)
                return rank_failed(rank, "ran %s", algo_name(c.stats()->last_algo));
              return kOk;
            },
            4096, layout),
        np);
  }
}

TEST(DenseCollectives, ReduceToEveryRoot) {
  for (int np = 1; np <= 4; ++np) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 for (int root = 0; root < p; ++root) {
                   for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt8, DType::kInt32,
                                   DType::kUInt8}) {
                     for (ReduceOp op : kAllOps) {
                       for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{10007}}) {
                         const auto send = input(d, op, n, rank, p);
                         std::vector<uint8_t> recv(n * dtype_size(d) + 1, 0xcd);
                         EXPECT_CALL_OK(rank, c.reduce(send.data(), recv.data(), n, d, op, root));
                         if (rank == root) {
                           const auto want = reference(d, op, n, p, all_ranks(p));
                           if (int e = compare(rank, "reduce", d, op, recv.data(), want.data(), n)) return e;
                         } else {
                           for (uint8_t b : recv) {
                             if (b != 0xcd)
                               return rank_failed(rank, "reduce wrote recvbuf on a rank that is not the root");
                           }
                         }
                         if (recv.back() != 0xcd) return rank_failed(rank, "reduce wrote past the end");
                         // In place on the root; recvbuf null elsewhere.
                         std::vector<uint8_t> buf = send;
                         EXPECT_CALL_OK(rank,
                                        c.reduce(buf.data(), rank == root ? buf.data() : nullptr, n, d, op, root));
                         if (rank == root && n > 0 && std::memcmp(buf.data(), recv.data(), n * dtype_size(d)) != 0) {
                           return rank_failed(rank, "in-place reduce differs");
                         }
                       }
                     }
                   }
                 }
                 return kOk;
               }),
        np);
  }
}

TEST(DenseCollectives, ReduceScatterInAndOutOfPlace) {
  for (int np = 1; np <= 4; ++np) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 for (DType d : {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kInt32, DType::kInt8}) {
                   for (ReduceOp op : kAllOps) {
                     for (size_t rc : {size_t{0}, size_t{1}, size_t{5}, size_t{3001}}) {
                       const size_t n = rc * static_cast<size_t>(p);
                       const size_t es = dtype_size(d);
                       const auto send = input(d, op, n, rank, p);
                       const auto full = reference(d, op, n, p, all_ranks(p));
                       const uint8_t* want = full.data() + static_cast<size_t>(rank) * rc * es;
                       std::vector<uint8_t> recv(rc * es + 1, 0xee);
                       EXPECT_CALL_OK(rank, c.reduce_scatter(send.data(), recv.data(), rc, d, op));
                       if (int e = compare(rank, "reduce_scatter", d, op, recv.data(), want, rc)) return e;
                       if (recv.back() != 0xee) return rank_failed(rank, "reduce_scatter wrote past the end");
                       std::vector<uint8_t> buf = send;
                       uint8_t* mine = buf.data() + static_cast<size_t>(rank) * rc * es;
                       EXPECT_CALL_OK(rank, c.reduce_scatter(buf.data(), mine, rc, d, op));
                       if (int e = compare(rank, "in-place reduce_scatter", d, op, mine, want, rc)) return e;
                     }
                   }
                 }
                 return kOk;
               }),
        np);
  }
}

uint8_t byte_of(int from, int to, size_t i) {
  return static_cast<uint8_t>(mix(i * 4099 + static_cast<uint64_t>(from * 64 + to)) & 0xff);
}

TEST(DenseCollectives, AllgathervUnevenEmptyAndDisplaced) {
  for (int np = 1; np <= 4; ++np) {
    expect_all_ok(run_np(np,
                         [](Communicator& c, int rank, int p) {
                           for (int layout = 0; layout < 4; ++layout) {
                             // Layout 0: uneven, packed; 1: one empty block; 2: every block empty; 3: large.
                             std::vector<size_t> len(static_cast<size_t>(p));
                             for (int r = 0; r < p; ++r) {
                               len[r] = layout == 0   ? static_cast<size_t>(r * 37 + 1)
                                        : layout == 1 ? (r == 1 % p ? 0 : static_cast<size_t>(100 + r))
                                        : layout == 2 ? 0
                                                      : static_cast<size_t>(300001 + r * 1001);
                             }
                             for (bool displaced : {false, true}) {
                               // Displaced: blocks in reverse rank order with 3-byte gaps that must stay untouched.
                               std::vector<size_t> displs(static_cast<size_t>(p));
                               size_t end = 0;
                               for (int r = p - 1; r >= 0; --r) {
                                 displs[r] = end + 3;
                                 end = displs[r] + len[r];
                               }
                               size_t packed = 0;
                               for (size_t l : len) packed += l;
                               const size_t total = displaced ? end + 3 : packed;
                               std::vector<uint8_t> send(len[rank]);
                               for (size_t i = 0; i < send.size(); ++i) send[i] = byte_of(rank, 0, i);
                               std::vector<uint8_t> recv(total, 0x5a);
                               EXPECT_CALL_OK(rank, c.allgatherv(send.data(), send.size(), recv.data(), len.data(),
                                                                 displaced ? displs.data() : nullptr));
                               std::vector<uint8_t> want(total, 0x5a);
                               size_t at = 0;
                               for (int r = 0; r < p; ++r) {
                                 const size_t off = displaced ? displs[r] : at;
                                 for (size_t i = 0; i < len[r]; ++i) want[off + i] = byte_of(r, 0, i);
                                 at += len[r];
                               }
                               if (recv != want)
                                 return rank_failed(rank, "allgatherv layout %d displaced %d differs", layout,
                                                    displaced ? 1 : 0);
                             }
                           }
                           return kOk;
                         }),
                  np);
  }
}

TEST(DenseCollectives, AlltoallAndAlltoallv) {
  for (int np = 1; np <= 4; ++np) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 const auto P = static_cast<size_t>(p);
                 for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, size_t{70001}}) {
                   std::vector<uint8_t> send(P * bytes), recv(P * bytes + 1, 0x77);
                   for (int to = 0; to < p; ++to) {
                     for (size_t i = 0; i < bytes; ++i)
                       send[static_cast<size_t>(to) * bytes + i] = byte_of(rank, to, i);
                   }
                   EXPECT_CALL_OK(rank, c.alltoall(send.data(), recv.data(), bytes));
                   for (int from = 0; from < p; ++from) {
                     for (size_t i = 0; i < bytes; ++i) {
                       if (recv[static_cast<size_t>(from) * bytes + i] != byte_of(from, rank, i)) {
                         return rank_failed(rank, "alltoall of %zu bytes: block from rank %d differs at %zu", bytes,
                                            from, i);
                       }
                     }
                   }
                   if (recv.back() != 0x77) return rank_failed(rank, "alltoall wrote past the end");
                 }
                 // Variable: pair sizes with zeros, packed and with reversed displacements and gaps.
                 auto size_of = [](int from, int to, int scale) {
                   return static_cast<size_t>(((from * 3 + to * 5) % 7) * scale);
                 };
                 for (int scale : {1, 997, 20011}) {
                   for (bool displaced : {false, true}) {
                     std::vector<size_t> sb(P), rb(P), sd(P), rd(P);
                     size_t send_end = 0, recv_end = 0;
                     for (int r = p - 1; r >= 0; --r) {
                       sb[r] = size_of(rank, r, scale);
                       rb[r] = size_of(r, rank, scale);
                       sd[r] = send_end + 2;
                       send_end = sd[r] + sb[r];
                       rd[r] = recv_end + 5;
                       recv_end = rd[r] + rb[r];
                     }
                     if (!displaced) {
                       send_end = recv_end = 0;
                       for (int r = 0; r < p; ++r) {
                         sd[r] = send_end;
                         send_end += sb[r];
                         rd[r] = recv_end;
                         recv_end += rb[r];
                       }
                     }
                     std::vector<uint8_t> send(send_end, 0), recv(recv_end + 1, 0x33);
                     for (int to = 0; to < p; ++to) {
                       for (size_t i = 0; i < sb[to]; ++i) send[sd[to] + i] = byte_of(rank, to, i);
                     }
                     EXPECT_CALL_OK(rank, c.alltoallv(send.data(), sb.data(), displaced ? sd.data() : nullptr,
                                                      recv.data(), rb.data(), displaced ? rd.data() : nullptr));
                     std::vector<uint8_t> want(recv_end + 1, 0x33);
                     for (int from = 0; from < p; ++from) {
                       for (size_t i = 0; i < rb[from]; ++i) want[rd[from] + i] = byte_of(from, rank, i);
                     }
                     if (recv != want)
                       return rank_failed(rank, "alltoallv scale %d displaced %d differs", scale, displaced ? 1 : 0);
                   }
                 }
                 return kOk;
               }),
        np);
  }
}

TEST(DenseCollectives, GatherAndScatterFromEveryRoot) {
  for (int np = 1; np <= 4; ++np) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 const auto P = static_cast<size_t>(p);
                 for (int root = 0; root < p; ++root) {
                   for (size_t bytes : {size_t{0}, size_t{1}, size_t{10000}, size_t{100003}}) {
                     std::vector<uint8_t> mine(bytes);
                     for (size_t i = 0; i < bytes; ++i) mine[i] = byte_of(rank, root, i);
                     std::vector<uint8_t> all(P * bytes + 1, 0x11);
                     EXPECT_CALL_OK(rank, c.gather(mine.data(), rank == root ? all.data() : nullptr, bytes, root));
                     if (rank == root) {
                       for (int r = 0; r < p; ++r) {
                         for (size_t i = 0; i < bytes; ++i) {
                           if (all[static_cast<size_t>(r) * bytes + i] != byte_of(r, root, i)) {
                             return rank_failed(rank, "gather to %d: block of rank %d differs", root, r);
                           }
                         }
                       }
                       if (all.back() != 0x11) return rank_failed(rank, "gather wrote past the end");
                     }
                     // Scatter: the root's block r goes to rank r.
                     std::vector<uint8_t> blocks(P * bytes);
                     for (int r = 0; r < p; ++r) {
                       for (size_t i = 0; i < bytes; ++i)
                         blocks[static_cast<size_t>(r) * bytes + i] = byte_of(root + 7, r, i);
                     }
                     std::vector<uint8_t> got(bytes + 1, 0x22);
                     EXPECT_CALL_OK(rank, c.scatter(rank == root ? blocks.data() : nullptr, got.data(), bytes, root));
                     for (size_t i = 0; i < bytes; ++i) {
                       if (got[i] != byte_of(root + 7, rank, i))
                         return rank_failed(rank, "scatter from %d differs at %zu", root, i);
                     }
                     if (got.back() != 0x22) return rank_failed(rank, "scatter wrote past the end");
                     // In place on the root: scatter's recvbuf is its own block of sendbuf.
                     if (rank == root && bytes > 0) {
                       std::vector<uint8_t> copy = blocks;
                       EXPECT_CALL_OK(
                           rank, c.scatter(copy.data(), copy.data() + static_cast<size_t>(root) * bytes, bytes, root));
                       if (copy != blocks) return rank_failed(rank, "in-place scatter changed the root's buffer");
                     } else if (bytes > 0) {
                       EXPECT_CALL_OK(rank, c.scatter(nullptr, got.data(), bytes, root));
                     }
                   }
                 }
                 return kOk;
               }),
        np);
  }
}

// Every rank must fail with kInvalidUsage and a message naming both sides.
int expect_usage(int rank, const Status& s, const std::vector<std::string>& must_name) {
  if (s.code() != Code::kInvalidUsage)
    return rank_failed(rank, "expected kInvalidUsage, got %s", s.to_string().c_str());
  for (const std::string& m : must_name) {
    if (s.message().find(m) == std::string::npos) {
      return rank_failed(rank, "the message does not name \"%s\": %s", m.c_str(), s.message().c_str());
    }
  }
  return kOk;
}

TEST(DenseCollectives, MismatchedCallsFailOnEveryRank) {
  const int np = 3;
  // Each case breaks the communicator: one fork group each.
  // Count: rank 2 reduces 11 elements, the others 10.
  expect_all_ok(run_np(np,
                       [](Communicator& c, int rank, int) {
                         std::vector<float> x(11, 1.0f), y(11);
                         const size_t n = rank == 2 ? 11 : 10;
                         return expect_usage(rank, c.reduce(x.data(), y.data(), n, DType::kFloat32, ReduceOp::kSum, 0),
                                             {"reduce", "count=11", "count=10"});
                       }),
                np);
  // Op: rank 0 takes the max, the others the sum.
  expect_all_ok(run_np(np,
                       [](Communicator& c, int rank, int) {
                         std::vector<int32_t> x(3 * 4, 1), y(4);
                         const ReduceOp op = rank == 0 ? ReduceOp::kMax : ReduceOp::kSum;
                         return expect_usage(rank, c.reduce_scatter(x.data(), y.data(), 4, DType::kInt32, op),
                                             {"reduce_scatter", "op=max", "op=sum"});
                       }),
                np);
  // Root: rank 1 gathers to 1, the others to 0.
  expect_all_ok(
      run_np(np,
             [](Communicator& c, int rank, int) {
               std::vector<uint8_t> x(8, 1), y(24);
               const int root = rank == 1 ? 1 : 0;
               return expect_usage(rank, c.gather(x.data(), y.data(), 8, root), {"gather", "root=1", "root=0"});
             }),
      np);
  // Dtype: rank 2 reduces int64, the others float64 (same size).
  expect_all_ok(run_np(np,
                       [](Communicator& c, int rank, int) {
                         std::vector<uint64_t> x(5, 1), y(5);
                         const DType d = rank == 2 ? DType::kInt64 : DType::kFloat64;
                         return expect_usage(rank,
                                             c.allreduce(x.data(), y.data(), 5, d, ReduceOp::kSum, nullptr, nullptr),
                                             {"dtype=int64", "dtype=float64"});
                       }),
                np);
  // Another collective: rank 1 scatters, the others all-to-all.
  expect_all_ok(run_np(np,
                       [](Communicator& c, int rank, int) {
                         std::vector<uint8_t> x(3 * 16, 1), y(3 * 16);
                         const Status s =
                             rank == 1 ? c.scatter(x.data(), y.data(), 16, 0) : c.alltoall(x.data(), y.data(), 16);
                         return expect_usage(rank, s, {"scatter", "alltoall"});
                       }),
                np);
  // allgatherv: ranks disagree on recvbytes (same total).
  expect_all_ok(run_np(np,
                       [](Communicator& c, int rank, int) {
                         std::vector<size_t> len = {4, 4, 4};
                         if (rank == 0) len = {4, 3, 5};  // rank 0 thinks rank 1 sends 3 and rank 2 sends 5
                         std::vector<uint8_t> x(len[rank], 9), y(12);
                         return expect_usage(rank, c.allgatherv(x.data(), x.size(), y.data(), len.data(), nullptr),
                                             {"allgatherv", "recvbytes digest"});
                       }),
                np);
}

TEST(DenseCollectives, AlltoallvSizeMismatchFailsOnEveryRank) {
  for (int np : {2, 3, 4}) {
    expect_all_ok(run_np(np,
                         [](Communicator& c, int rank, int p) {
                           // Every rank sends 1000 bytes to every rank, except rank 1, which sends 100 to rank 0;
                           // rank 0 expects 1000 from it.
                           std::vector<size_t> sb(static_cast<size_t>(p), 1000), rb(static_cast<size_t>(p), 1000);
                           if (rank == 1) sb[0] = 100;
                           std::vector<uint8_t> x(static_cast<size_t>(p) * 1000, 1), y(static_cast<size_t>(p) * 1000);
                           const Status s = c.alltoallv(x.data(), sb.data(), nullptr, y.data(), rb.data(), nullptr);
                           return expect_usage(rank, s, {"rank 1 sends 100 bytes to rank 0", "expects 1000"});
                         }),
                  np);
  }
  // On one rank: its own block of another size.
  expect_all_ok(run_np(1,
                       [](Communicator& c, int rank, int) {
                         size_t sb = 8, rb = 9;
                         std::vector<uint8_t> x(9), y(9);
                         return expect_usage(rank, c.alltoallv(x.data(), &sb, nullptr, y.data(), &rb, nullptr),
                                             {"sends 8 bytes", "expects 9"});
                       }),
                1);
}

TEST(DenseCollectives, BadArgumentsLeaveTheCommunicatorUsable) {
  for (int np : {1, 2}) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 std::vector<float> x(4 * static_cast<size_t>(p), 1.0f), y(4 * static_cast<size_t>(p));
                 size_t sizes[2] = {4, 4};
                 const size_t huge = std::numeric_limits<size_t>::max() - 3;
                 struct Case {
                   const char* name;
                   Status s;
                   const char* names;
                 };
                 const Case cases[] = {
                     {"null sendbuf", c.reduce(nullptr, y.data(), 4, DType::kFloat32, ReduceOp::kSum, 0), "sendbuf"},
                     {"null recvbuf on the root", c.reduce(x.data(), nullptr, 4, DType::kFloat32, ReduceOp::kSum, rank),
                      "recvbuf"},
                     {"root -1", c.reduce(x.data(), y.data(), 4, DType::kFloat32, ReduceOp::kSum, -1), "root"},
                     {"root p", c.gather(x.data(), y.data(), 4, p), "root"},
                     {"root p scatter", c.scatter(x.data(), y.data(), 4, p + 5), "root"},
                     {"dtype 9", c.reduce(x.data(), y.data(), 4, static_cast<DType>(9), ReduceOp::kSum, 0), "dtype"},
                     {"op 5", c.reduce_scatter(x.data(), y.data(), 4, DType::kFloat32, static_cast<ReduceOp>(5)), "op"},
                     {"huge count", c.reduce(x.data(), y.data(), huge, DType::kFloat32, ReduceOp::kSum, 0), "count"},
                     {"huge recvcount", c.reduce_scatter(x.data(), y.data(), huge / 8, DType::kFloat64, ReduceOp::kMax),
                      "recvcount"},
                     {"huge alltoall", c.alltoall(x.data(), y.data(), huge), "sendbuf"},
                     {"huge gather", c.gather(x.data(), y.data(), huge / 2, 0), "recvbuf"},
                     {"null recvbytes", c.allgatherv(x.data(), 4, y.data(), nullptr, nullptr), "recvbytes"},
                     {"sendbytes != recvbytes[rank]", c.allgatherv(x.data(), 3, y.data(), sizes, nullptr), "sendbytes"},
                     {"null sendbytes", c.alltoallv(x.data(), nullptr, nullptr, y.data(), sizes, nullptr), "sendbytes"},
                     {"null alltoall buffer", c.alltoall(nullptr, y.data(), 4), "sendbuf"},
                 };
                 for (const Case& k : cases) {
                   if (k.s.code() != Code::kInvalidArgument) {
                     return rank_failed(rank, "%s: expected kInvalidArgument, got %s", k.name, k.s.to_string().c_str());
                   }
                   if (k.s.message().find(k.names) == std::string::npos) {
                     return rank_failed(rank, "%s: the message does not name %s: %s", k.name, k.names,
                                        k.s.message().c_str());
                   }
                 }
                 // Huge sizes inside the arrays.
                 std::vector<size_t> big(static_cast<size_t>(p), 4);
                 big[0] = huge;
                 const Status s = c.alltoallv(x.data(), big.data(), nullptr, y.data(), big.data(), nullptr);
                 if (s.code() != Code::kInvalidArgument)
                   return rank_failed(rank, "huge sendbytes[0]: %s", s.to_string().c_str());
                 std::vector<size_t> displs(static_cast<size_t>(p), huge - 2);
                 std::vector<size_t> four(static_cast<size_t>(p), 4);
                 const Status s2 = c.allgatherv(x.data(), 4, y.data(), four.data(), displs.data());
                 if (s2.code() != Code::kInvalidArgument)
                   return rank_failed(rank, "huge displs: %s", s2.to_string().c_str());
                 // Still usable.
                 std::vector<float> ones(5, 1.0f), sum(5);
                 EXPECT_CALL_OK(rank, c.reduce(ones.data(), sum.data(), 5, DType::kFloat32, ReduceOp::kSum, 0));
                 if (rank == 0 && sum[4] != static_cast<float>(p))
                   return rank_failed(rank, "reduce after the errors gave %g", sum[4]);
                 EXPECT_CALL_OK(rank, c.error());
                 return kOk;
               }),
        np);
  }
}

// Dense all-reduce on device buffers (the stand-in accelerator, no NCCL: staged through host
// memory) with every dtype and op gives the host result: no op is silently summed.
TEST(DenseCollectives, DeviceAllreduceEveryOpAndDtypeMatchesTheHost) {
  for (int np : {1, 3}) {
    expect_all_ok(
        run_np(np,
               [](Communicator& c, int rank, int p) {
                 EXPECT_CALL_OK(rank, c.use_device_backend(
                                          std::make_unique<test::HostDeviceBackend>(static_cast<uint64_t>(rank) + 5)));
                 for (DType d : kAllDtypes) {
                   for (ReduceOp op : kAllOps) {
                     const size_t n = 5003;
                     const auto send = input(d, op, n, rank, p);
                     test::DeviceVector<uint8_t> x(send.size());
                     x.upload(send);
                     EXPECT_CALL_OK(rank, c.allreduce_device(x.data(), x.data(), n, d, op, nullptr, nullptr,
                                                             Algo::kAuto, nullptr));
                     const auto want = reference(d, op, n, p, all_ranks(p));
                     if (int e = compare(rank, "device allreduce", d, op, x.download().data(), want.data(), n))
                       return e;
                   }
                 }
                 return kOk;
               }),
        np);
  }
}

}  // namespace
}  // namespace gw
