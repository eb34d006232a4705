#include "perf/driver.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf/data.hpp"
#include "perf/launch.hpp"
#include "perf/perf_args.hpp"

namespace gw::perf {
namespace {

const char* algo_label(gw_algo_t a) {
  switch (a) {
    case GW_ALGO_RING: return "ring";
    case GW_ALGO_COMPRESSED_RING: return "cring";
    case GW_ALGO_SCATTER_REDUCE: return "sreduce";
    case GW_ALGO_SPARSE_ALLGATHER: return "sparseag";
    default: return "auto";
  }
}

gw_algo_t parse_algo(const std::string& s) {
  if (s == "auto") return GW_ALGO_AUTO;
  if (s == "ring") return GW_ALGO_RING;
  if (s == "compressed_ring") return GW_ALGO_COMPRESSED_RING;
  if (s == "scatter_reduce") return GW_ALGO_SCATTER_REDUCE;
  if (s == "sparse_allgather") return GW_ALGO_SPARSE_ALLGATHER;
  std::fprintf(stderr, "unknown --algo %s (auto, ring, compressed_ring, scatter_reduce, sparse_allgather)\n", s.c_str());
  std::exit(2);
}

gw_dtype_t parse_dtype(const std::string& s) {
  return s == "half" ? GW_FLOAT16 : s == "bfloat16" ? GW_BFLOAT16 : GW_FLOAT32;
}

// What every rank contributes to a row, gathered to all.
struct RankResult {
  double time_s;     // this rank's mean time per call
  double encode_s;   // per call, from the library's statistics
  double decode_s;
  double bytes_sent;
  double algo;
  double relerr;
  double wrong;
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

int run_driver(int argc, char** argv, const char* tool, Collective& coll) {
  const Args args = parse_args(argc, argv, tool);
  gw_comm_t comm = launch(args.np);
  int rank = 0, nranks = 1;
  check(gw_comm_rank(comm, &rank), "gw_comm_rank");
  check(gw_comm_size(comm, &nranks), "gw_comm_size");
  const gw_dtype_t dtype = parse_dtype(args.dtype);
  const size_t es = elem_size(dtype);

  Case base{comm, rank, nranks, "", nullptr, true, false, dtype, args.op == "avg" ? GW_AVG : GW_SUM,
            parse_algo(args.algo), 0, 0};
  const std::vector<size_t> sizes = gw::perf::sizes(args, es);
  Case largest = base;
  largest.bytes = sizes.empty() ? 0 : sizes.back();
  largest.count = coll.count_for(largest.bytes, es, nranks);
  coll.allocate(largest);

  FILE* json = nullptr;
  if (rank == 0) {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char* tls = std::getenv("UCX_TLS");
    std::printf("# gradwire %s: %d ranks, dtype %s, op %s, iters %d, warmup %d, UCX_TLS=%s\n", tool, nranks,
                args.dtype.c_str(), args.op.c_str(), args.iters, args.warmup, tls != nullptr ? tls : "(default)");
    std::printf("# time: mean per call, slowest rank; algbw = size / time, busbw = algbw * %.3f (GB/s = 1e9 B/s);\n"
                "# wire: bytes each rank sent per call (mean of ranks); ratio = busbw bytes / wire bytes;\n"
                "# enc, xfer, dec: the time split (encode and decode from the library, mean of ranks; xfer the rest);\n"
                "# with --algo auto and a codec, warm-up is at least 8 calls: the policy times its first 8\n",
                coll.bus_factor(nranks));
    std::printf("#\n# %11s %10s %6s %-24s %8s %11s %7s %7s %11s %6s %9s %9s %9s %9s %7s\n", "size(B)", "count", "type",
                "codec", "algo", "time(us)", "algbw", "busbw", "wire(B)", "ratio", "enc(us)", "xfer(us)", "dec(us)",
                "relerr", "#wrong");
    if (!args.json.empty()) {
      json = std::fopen(args.json.c_str(), "w");
      if (json == nullptr) {
        std::perror(args.json.c_str());
        std::exit(1);
      }
      std::fprintf(json,
                   "{\"tool\": \"%s\", \"nranks\": %d, \"iters\": %d, \"warmup\": %d, \"dtype\": \"%s\", \"op\": \"%s\", "
                   "\"host\": \"%s\", \"ucx_tls\": \"%s\", \"bus_factor\": %.6f, \"results\": [\n",
                   tool, nranks, args.iters, args.warmup, args.dtype.c_str(), args.op.c_str(), json_escape(host).c_str(),
                   tls != nullptr ? json_escape(tls).c_str() : "", coll.bus_factor(nranks));
    }
    std::fflush(stdout);
  }

  double busbw_sum = 0;
  int rows = 0;
  long long wrong_total = 0;
  for (const std::string& spec : args.codecs) {
    gw_codec_t codec = nullptr;
    check(gw_codec_create(spec.c_str(), &codec), "gw_codec_create");
    gw_codec_id_t id;
    check(gw_codec_id(codec, &id), "gw_codec_id");
    char canonical[256];
    check(gw_codec_spec(codec, canonical, sizeof canonical), "gw_codec_spec");
    for (size_t bytes : sizes) {
      Case c = base;
      c.spec = spec;
      c.codec = codec;
      c.lossless = id == GW_CODEC_NONE || id == GW_CODEC_FP16 || id == GW_CODEC_BF16;
      c.ef = std::strstr(canonical, "ef=1") != nullptr;
      c.bytes = bytes;
      c.count = coll.count_for(bytes, es, nranks);
      const std::string why = coll.unsupported(c);
      if (!why.empty()) {
        if (rank == 0) std::printf("  %11zu %10zu %6s %-24s skipped: %s\n", bytes, c.count, args.dtype.c_str(), spec.c_str(), why.c_str());
        continue;
      }
      coll.prepare(c);
      const int warmup = std::max(args.warmup, coll.min_warmup(c));
      for (int i = 0; i < warmup; ++i) coll.run(c);
      check(gw_barrier(comm), "gw_barrier");
      check(gw_comm_reset_stats(comm), "gw_comm_reset_stats");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < args.iters; ++i) coll.run(c);
      const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / args.iters;
      gw_comm_stats_t st;
      std::memset(&st, 0, sizeof st);
      st.size = sizeof st;
      check(gw_comm_get_stats(comm, &st), "gw_comm_get_stats");
      const gw_algo_t ran = st.allreduces > 0 ? st.last_algo : c.algo;
      Check chk;
      if (args.check) chk = coll.check(c, ran);
      coll.release(c);

      RankResult mine{local, st.encode_s / args.iters, st.decode_s / args.iters,
                      static_cast<double>(st.bytes_sent) / args.iters, static_cast<double>(ran), chk.relerr,
                      static_cast<double>(chk.wrong)};
      std::vector<RankResult> all(static_cast<size_t>(nranks));
      check(gw_allgather(comm, &mine, all.data(), sizeof mine), "gw_allgather");
      double t = 0, enc = 0, dec = 0, wire = 0, relerr = 0;
      long long wrong = -1;
      for (const RankResult& r : all) {
        t = std::max(t, r.time_s);
        enc += r.encode_s / nranks;
        dec += r.decode_s / nranks;
        wire += r.bytes_sent / nranks;
        relerr = std::max(relerr, r.relerr);
        if (r.wrong >= 0) wrong = (wrong < 0 ? 0 : wrong) + static_cast<long long>(r.wrong);
      }
      const double xfer = std::max(0.0, t - enc - dec);
      const double algbw = t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0;
      const double busbw = algbw * coll.bus_factor(nranks);
      const double ratio = wire > 0 ? static_cast<double>(bytes) * coll.bus_factor(nranks) / wire : 0;
      if (wrong > 0) wrong_total += wrong;
      busbw_sum += busbw;
      ++rows;
      if (rank == 0) {
        char wrong_s[32];
        if (wrong >= 0) std::snprintf(wrong_s, sizeof wrong_s, "%lld", wrong);
        else std::snprintf(wrong_s, sizeof wrong_s, "-");
        const char* algo = coll.fixed_algo() != nullptr ? coll.fixed_algo() : algo_label(ran);
        std::printf("  %11zu %10zu %6s %-24s %8s %11.1f %7.3f %7.3f %11.0f %6.2f %9.1f %9.1f %9.1f %9.2e %7s\n", bytes,
                    c.count, args.dtype.c_str(), spec.c_str(), algo, t * 1e6, algbw, busbw, wire, ratio,
                    enc * 1e6, xfer * 1e6, dec * 1e6, relerr, wrong_s);
        std::fflush(stdout);
        if (json != nullptr) {
          std::fprintf(json,
                       "%s  {\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"codec\": \"%s\", \"algo\": \"%s\", "
                       "\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, \"wire_bytes\": %.1f, \"ratio\": %.4f, "
                       "\"encode_us\": %.3f, \"transfer_us\": %.3f, \"decode_us\": %.3f, \"relerr\": %.6e, \"wrong\": %lld, "
                       "\"warmup\": %d}",
                       rows > 1 ? ",\n" : "", bytes, c.count, args.dtype.c_str(), json_escape(spec).c_str(), algo, t * 1e6, algbw, busbw, wire, ratio, enc * 1e6, xfer * 1e6, dec * 1e6, relerr,
                       wrong, warmup);
        }
      }
    }
    check(gw_codec_destroy(codec), "gw_codec_destroy");
  }
  if (rank == 0) {
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", rows > 0 ? busbw_sum / rows : 0.0);
    std::printf("# #wrong on lossless rows: %lld %s\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
    if (json != nullptr) {
      std::fprintf(json, "\n]}\n");
      std::fclose(json);
    }
  }
  check(gw_comm_destroy(comm), "gw_comm_destroy");
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace gw::perf
