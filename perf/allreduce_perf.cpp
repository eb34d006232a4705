// allreduce_perf: gradwire's all-reduce timed like nccl-tests' all_reduce_perf, for every
// size and every --codec in one run. algbw = S / t and busbw = algbw * 2 (p - 1) / p, with S
// the uncompressed size. #wrong counts elements that differ from the exact sum (lossless
// runs); relerr is |out - exact|_2 / |exact|_2.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compressors/half.hpp"
#include "perf/launch.hpp"
#include "perf/perf_args.hpp"

namespace {

using gw::perf::check;

gw_dtype_t parse_dtype(const std::string& s) {
  return s == "half" ? GW_FLOAT16 : s == "bfloat16" ? GW_BFLOAT16 : GW_FLOAT32;
}

size_t elem_size(gw_dtype_t t) { return t == GW_FLOAT32 ? 4 : 2; }

// Small integers: their sum over ranks is exact in every type, whatever the order.
float pattern(size_t i, int rank) { return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13) % 41) - 20); }

void fill(void* buf, size_t n, gw_dtype_t t, int rank) {
  for (size_t i = 0; i < n; ++i) {
    const float v = pattern(i, rank);
    if (t == GW_FLOAT32) static_cast<float*>(buf)[i] = v;
    else static_cast<uint16_t*>(buf)[i] = t == GW_FLOAT16 ? gw::hd::float_to_half(v) : gw::hd::float_to_bf16(v);
  }
}

double load(const void* buf, size_t i, gw_dtype_t t) {
  if (t == GW_FLOAT32) return static_cast<const float*>(buf)[i];
  const uint16_t h = static_cast<const uint16_t*>(buf)[i];
  return t == GW_FLOAT16 ? gw::hd::half_to_float(h) : gw::hd::bf16_to_float(h);
}

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
  if (s == "ring") return GW_ALGO_RING;
  if (s == "compressed_ring") return GW_ALGO_COMPRESSED_RING;
  if (s == "scatter_reduce") return GW_ALGO_SCATTER_REDUCE;
  if (s == "sparse_allgather") return GW_ALGO_SPARSE_ALLGATHER;
  if (s != "auto") {
    std::fprintf(stderr, "unknown --algo %s\n", s.c_str());
    std::exit(2);
  }
  return GW_ALGO_AUTO;
}

}  // namespace

int main(int argc, char** argv) {
  const gw::perf::Args args = gw::perf::parse_args(argc, argv, "allreduce_perf");
  gw_comm_t comm = gw::perf::launch(args.np);
  int rank = 0, nranks = 1;
  check(gw_comm_rank(comm, &rank), "gw_comm_rank");
  check(gw_comm_size(comm, &nranks), "gw_comm_size");
  const gw_dtype_t dtype = parse_dtype(args.dtype);
  const gw_red_op_t op = args.op == "avg" ? GW_AVG : GW_SUM;
  const gw_algo_t algo = parse_algo(args.algo);
  const size_t es = elem_size(dtype);
  const size_t max_count = args.max_bytes / es;

  // Allocated once and touched, so that page faults stay out of the timings.
  std::vector<uint8_t> send(max_count * es + 1), recv(max_count * es + 1);
  std::vector<double> exact(max_count);
  fill(send.data(), max_count, dtype, rank);
  for (size_t i = 0; i < max_count; ++i) {
    double s = 0;
    for (int r = 0; r < nranks; ++r) s += pattern(i, r);
    exact[i] = op == GW_AVG ? s / nranks : s;
  }
  std::memset(recv.data(), 0, recv.size());

  if (rank == 0) {
    std::printf("# gradwire allreduce_perf: %d ranks, dtype %s, op %s, iters %d, warmup %d\n", nranks,
                args.dtype.c_str(), args.op.c_str(), args.iters, args.warmup);
    std::printf("#\n# %12s %12s %6s %-28s %8s %12s %8s %8s %10s %8s\n", "size(B)", "count", "type", "codec", "algo",
                "time(us)", "algbw", "busbw", "relerr", "#wrong");
  }
  FILE* json = nullptr;
  if (rank == 0 && !args.json.empty()) {
    json = std::fopen(args.json.c_str(), "w");
    if (json != nullptr) std::fprintf(json, "{\"nranks\": %d, \"results\": [\n", nranks);
  }
  double busbw_sum = 0;
  int rows = 0;
  for (const std::string& spec : args.codecs) {
    gw_codec_t codec = nullptr;
    check(gw_codec_create(spec.c_str(), &codec), "gw_codec_create");
    for (size_t bytes : gw::perf::sizes(args, es)) {
      const size_t count = bytes / es;
      gw_ef_state_t ef = nullptr;
      gw_codec_id_t id;
      check(gw_codec_id(codec, &id), "gw_codec_id");
      if (id != GW_CODEC_NONE && dtype == GW_FLOAT32) check(gw_ef_state_create(count, &ef), "gw_ef_state_create");
      gw_algo_t chosen = algo;
      if (algo == GW_ALGO_AUTO) check(gw_allreduce_algo(comm, count, dtype, codec, &chosen), "gw_allreduce_algo");
      for (int i = 0; i < args.warmup; ++i) {
        check(gw_allreduce_ex(comm, send.data(), recv.data(), count, dtype, op, codec, ef, algo), "gw_allreduce");
      }
      check(gw_barrier(comm), "gw_barrier");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < args.iters; ++i) {
        check(gw_allreduce_ex(comm, send.data(), recv.data(), count, dtype, op, codec, ef, algo), "gw_allreduce");
      }
      const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / args.iters;
      std::vector<double> all(static_cast<size_t>(nranks));
      check(gw_allgather(comm, &local, all.data(), sizeof(double)), "gw_allgather");
      double t = 0;
      for (double v : all) t = v > t ? v : t;
      // Check one fresh call (no error feedback carried in) against the exact sum.
      long long wrong = 0;
      double err2 = 0, ref2 = 0;
      if (args.check) {
        if (ef != nullptr) check(gw_ef_state_reset(ef), "gw_ef_state_reset");
        check(gw_allreduce_ex(comm, send.data(), recv.data(), count, dtype, op, codec, ef, algo), "gw_allreduce");
        for (size_t i = 0; i < count; ++i) {
          const double d = load(recv.data(), i, dtype) - exact[i];
          if (d != 0) ++wrong;
          err2 += d * d;
          ref2 += exact[i] * exact[i];
        }
      }
      const double algbw = t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0;
      const double busbw = algbw * 2.0 * (nranks - 1) / nranks;
      const double relerr = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
      if (rank == 0) {
        std::printf("  %12zu %12zu %6s %-28s %8s %12.1f %8.3f %8.3f %10.2e %8lld\n", bytes, count, args.dtype.c_str(),
                    spec.c_str(), algo_label(chosen), t * 1e6, algbw, busbw, relerr, args.check ? wrong : -1LL);
        if (json != nullptr) {
          std::fprintf(json,
                       "%s  {\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"codec\": \"%s\", \"algo\": \"%s\", "
                       "\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, \"relerr\": %.6e, \"wrong\": %lld}",
                       rows > 0 ? ",\n" : "", bytes, count, args.dtype.c_str(), spec.c_str(), algo_label(chosen), t * 1e6,
                       algbw, busbw, relerr, args.check ? wrong : -1LL);
        }
      }
      busbw_sum += busbw;
      ++rows;
      if (ef != nullptr) check(gw_ef_state_destroy(ef), "gw_ef_state_destroy");
    }
    check(gw_codec_destroy(codec), "gw_codec_destroy");
  }
  if (rank == 0) {
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", rows > 0 ? busbw_sum / rows : 0.0);
    if (json != nullptr) {
      std::fprintf(json, "\n]}\n");
      std::fclose(json);
    }
  }
  check(gw_comm_destroy(comm), "gw_comm_destroy");
  return 0;
}
