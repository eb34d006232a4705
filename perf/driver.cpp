#include "perf/driver.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#ifdef GW_PERF_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

#include "collectives/policy/policy.hpp"
#include "perf/data.hpp"
#include "perf/launch.hpp"
#include "perf/perf_args.hpp"

namespace gw::perf {
namespace {

// The algo column: the library's name (algo_name), shortened where the tables have always
// shown a short one.
const char* algo_label(gw_algo_t a) {
  static const std::map<std::string, const char*> kShort = {
      {"compressed_ring", "cring"}, {"scatter_reduce", "sreduce"},    {"sparse_allgather", "sparseag"},
      {"hierarchical", "hier"},     {"recursive_doubling", "recdbl"}, {"halving_doubling", "halvdbl"},
      {"sparse_doubling", "spdbl"}, {"rabenseifner", "rabens"}};
  const char* name = algo_name(static_cast<Algo>(a));
  const auto it = kShort.find(name);
  return it != kShort.end() ? it->second : name;
}

gw_algo_t parse_algo(const std::string& s) {
  const Result<Algo> a = gw::parse_algo(s);  // parse_args let no unknown name through
  return static_cast<gw_algo_t>(a.is_ok() ? *a : Algo::kAuto);
}

// Calls in a row that must run the algorithm the policy reports, unchanged, before a case is
// timed: in its trials the tuner runs a candidate at most kBlock calls in a row (the seed,
// which it reports before deciding, included), so kBlock + 1 means the trials are over.
constexpr int kSettleCalls = coll::AllreduceTuner::kBlock + 1;
// Warm-up calls past -w after which the driver stops waiting for that: every trial of the
// policy and a refresh interval. A row timed unsettled may say `mixed`.
constexpr int kSettleBound =
    coll::AllreduceTuner::trial_calls(coll::AllreduceTuner::kMaxCandidates) + coll::AllreduceTuner::kRefresh;
constexpr int kAlgoSlots = static_cast<int>(sizeof(gw_comm_stats_t::algo_calls) / sizeof(uint64_t));

gw_comm_stats_t read_stats(gw_comm_t comm) {
  gw_comm_stats_t st;
  std::memset(&st, 0, sizeof st);
  st.size = sizeof st;
  check(gw_comm_get_stats(comm, &st), "gw_comm_get_stats");
  return st;
}

// The warm-up of one case: at least min_calls calls and, where the policy chooses (the tuner
// times candidates over a key's first calls), until kSettleCalls calls in a row have run the
// algorithm gw_allreduce_algo reports, unchanged, on every rank (all ranks stop at the same
// call). Returns the calls made; *settled is false when kSettleBound more did not get there.
int warm_up(Collective& coll, const Case& c, int min_calls, bool* settled) {
  const bool policy = coll.policy_algo(c) != GW_ALGO_AUTO;
  *settled = true;
  int calls = 0, streak = 0;
  gw_algo_t prev = GW_ALGO_AUTO;
  for (;;) {
    if (calls >= min_calls) {
      if (!policy) break;
      const int mine = streak >= kSettleCalls ? 1 : 0;
      std::vector<int> all(static_cast<size_t>(c.nranks));
      check(gw_allgather(c.comm, &mine, all.data(), sizeof mine), "gw_allgather");
      if (std::count(all.begin(), all.end(), 1) == c.nranks) break;
      if (calls >= min_calls + kSettleBound) {
        *settled = false;
        break;
      }
    }
    coll.run(c);
    ++calls;
    if (!policy) continue;
    const gw_algo_t ran = read_stats(c.comm).last_algo, now = coll.policy_algo(c);
    streak = ran != now ? 0 : now != prev ? 1 : streak + 1;
    prev = now;
  }
  return calls;
}

// What the timed calls of a row ran, from every rank's per-algorithm counts (so every rank
// reaches the same answer).
struct Ran {
  int kinds = 0;                    // algorithms with calls
  gw_algo_t most = GW_ALGO_AUTO;    // the one with the most calls
  uint64_t calls[kAlgoSlots] = {};  // rank 0's counts, by gw_algo_t
};

Ran what_ran(gw_comm_t comm, int nranks, const gw_comm_stats_t& st) {
  std::vector<uint64_t> all(static_cast<size_t>(nranks) * kAlgoSlots);
  check(gw_allgather(comm, st.algo_calls, all.data(), sizeof st.algo_calls), "gw_allgather");
  Ran out;
  uint64_t sum[kAlgoSlots] = {};
  for (size_t i = 0; i < all.size(); ++i) sum[i % kAlgoSlots] += all[i];
  for (int a = 0; a < kAlgoSlots; ++a) {
    out.calls[a] = all[static_cast<size_t>(a)];
    if (sum[a] == 0) continue;
    ++out.kinds;
    if (out.most == GW_ALGO_AUTO || sum[a] > sum[out.most]) out.most = static_cast<gw_algo_t>(a);
  }
  return out;
}

gw_dtype_t parse_dtype(const std::string& s) {
  return s == "half" ? GW_FLOAT16 : s == "bfloat16" ? GW_BFLOAT16 : GW_FLOAT32;
}

// What every rank contributes to a row, gathered to all.
struct RankResult {
  double time_s;    // this rank's mean time per call
  double encode_s;  // per call, from the library's statistics
  double decode_s;
  double bytes_sent;
  double relerr;
  double wrong;
  double sum_relerr;  // running_sum_error; negative: not measured
  double hidden_s;    // of encode + decode per call, while this rank's sends were on the wire
};

// A --codec of the run; the dense reference the driver adds is marked.
struct Entry {
  std::string spec;
  bool added;  // added by the driver (runs the dense ring), not given on the command line
};

// What the dense reference measured at one size.
struct Reference {
  double time_s;
  double wire;
};

// JSON for a value that may be missing (negative or not finite): null.
std::string num_or_null(double v, const char* fmt) {
  if (!(v >= 0) || !std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string ucx_version() {
#ifdef GW_PERF_HAVE_UCX
  return ucp_get_version_string();
#else
  return "";
#endif
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string gradwire_version() {
  int code = 0;
  if (gw_get_version(&code) != GW_SUCCESS) return GW_VERSION_STRING;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  return buf;
}

// The codecs in the order they run: the dense reference first (the one given, or one added).
std::vector<Entry> plan_codecs(const Args& args, bool with_reference) {
  std::vector<Entry> out;
  for (const std::string& s : args.codecs) out.push_back({s, false});
  if (!with_reference || !args.dense_reference || !args.codec_given) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    gw_codec_t c = nullptr;
    check(gw_codec_create(out[i].spec.c_str(), &c), "gw_codec_create");
    gw_codec_id_t id = GW_CODEC_NONE;
    check(gw_codec_id(c, &id), "gw_codec_id");
    check(gw_codec_destroy(c), "gw_codec_destroy");
    if (id == GW_CODEC_NONE) {
      const Entry e = out[i];
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
      out.insert(out.begin(), e);
      return out;
    }
  }
  out.insert(out.begin(), Entry{"none", true});
  return out;
}

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
  // Every flag and every codec spec is checked here, before a rank exists.
  const Args args = parse_args(argc, argv, tool);
  const std::vector<Entry> codecs = plan_codecs(args, coll.dense_reference());
  gw_comm_t comm = launch(args.np);
  int rank = 0, nranks = 1;
  check(gw_comm_rank(comm, &rank), "gw_comm_rank");
  check(gw_comm_size(comm, &nranks), "gw_comm_size");
  const gw_dtype_t dtype = parse_dtype(args.dtype);
  const size_t es = elem_size(dtype);

  Case base{
      comm,  rank, nranks, "", nullptr, true, false, dtype, args.op == "avg" ? GW_AVG : GW_SUM, parse_algo(args.algo),
      false, 0,    0};
  const std::vector<size_t> sizes = gw::perf::sizes(args, es);
  Case largest = base;
  largest.bytes = sizes.empty() ? 0 : sizes.back();
  largest.count = coll.count_for(largest.bytes, es, nranks);
  coll.allocate(largest);

  const bool have_reference = !codecs.empty() && coll.dense_reference() && args.dense_reference && args.codec_given;
  // The link rate of the floor, in bytes per second: given, or per size from the dense row.
  const double link_Bps = args.link_gbps * 1e9 / 8;
  char floor_source[64];
  if (args.link_gbps > 0)
    std::snprintf(floor_source, sizeof floor_source, "given %g Gbit/s", args.link_gbps);
  else
    std::snprintf(floor_source, sizeof floor_source, "%s", have_reference ? "measured dense" : "none");
  char sum_col[32];
  std::snprintf(sum_col, sizeof sum_col, "err@%d(sum)", args.ef_steps);

  FILE* json = nullptr;
  if (rank == 0) {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char* tls = std::getenv("UCX_TLS");
    const char* devices = std::getenv("UCX_NET_DEVICES");
    const std::string version = gradwire_version(), ucx = ucx_version(), date = utc_now();
    std::printf("# gradwire %s %s: %d ranks, dtype %s, op %s, iters %d, warmup %d, UCX_TLS=%s\n", version.c_str(), tool,
                nranks, args.dtype.c_str(), args.op.c_str(), args.iters, args.warmup,
                tls != nullptr ? tls : "(default)");
    std::printf("# transport ucx (UCX %s), host %s, %s\n", ucx.empty() ? "?" : ucx.c_str(), host, date.c_str());
    std::printf(
        "# time: mean per call, slowest rank; algbw = size / time, busbw = algbw * %.3f (GB/s = 1e9 B/s);\n"
        "# wire: bytes each rank sent per call (mean of ranks); ratio = busbw bytes / wire bytes;\n"
        "# enc, xfer, dec: the time split (encode and decode from the library, mean of ranks; xfer the rest);\n"
        "# hid: of enc + dec, the time sends of the rank were still queued in the transport (overlap; mean of ranks);\n"
        "# relerr: one fresh call against the exact sum; %s: err after %d steps (running sum), |sum of\n"
        "#   results - sum of dense results| / |sum of dense results| over %d calls (off with --ef-steps 0);\n",
        coll.bus_factor(nranks), sum_col, args.ef_steps, args.ef_steps);
    if (have_reference) {
      std::printf("# vs dense: time of the dense reference row (codec none%s) / time of this row, same run;\n",
                  codecs.front().added ? ", ring, added: --no-dense-reference drops it" : "");
    }
    if (args.link_gbps > 0 || have_reference) {
      std::printf("# floor: link floor (%s) = wire / link rate%s;\n", floor_source,
                  args.link_gbps > 0 ? "" : ", the rate being the dense row's wire / time at the same size");
    }
    if (coll.fixed_algo() == nullptr) {
      std::printf(
          "# algo: what the timed calls ran (the library's count per algorithm), `mixed` where they differed;\n"
          "#   with --algo auto, warm-up lasts until %d calls in a row ran the policy's choice, unchanged (its\n"
          "#   trials, up to %d calls, are never timed); relerr, #wrong and %s run the timed calls' algorithm\n"
          "#   (a mixed row: the most frequent); #wrong only where they were lossless (codec none, fp16, bf16,\n"
          "#   or the dense ring); a lossy row is judged by relerr alone;\n",
          kSettleCalls, coll::AllreduceTuner::trial_calls(coll::AllreduceTuner::kMaxCandidates), sum_col);
    }
    std::printf("#\n# %11s %10s %6s %-24s %8s %11s %7s %7s %11s %6s %9s %9s %9s %9s %9s %11s %7s %8s %10s\n", "size(B)",
                "count", "type", "codec", "algo", "time(us)", "algbw", "busbw", "wire(B)", "ratio", "enc(us)",
                "xfer(us)", "dec(us)", "hid(us)", "relerr", sum_col, "#wrong", "vs dense", "floor(us)");
    if (!args.json.empty()) {
      json = std::fopen(args.json.c_str(), "w");
      if (json == nullptr) {
        std::perror(args.json.c_str());
        std::exit(1);
      }
      std::fprintf(
          json,
          "{\"tool\": \"%s\", \"nranks\": %d, \"iters\": %d, \"warmup\": %d, \"dtype\": \"%s\", \"op\": \"%s\", "
          "\"host\": \"%s\", \"ucx_tls\": \"%s\", \"bus_factor\": %.6f, "
          "\"gradwire_version\": \"%s\", \"ucx_version\": \"%s\", \"transport\": \"ucx\", "
          "\"ucx_net_devices\": \"%s\", \"date\": \"%s\", \"algo_requested\": \"%s\", \"ef_steps\": %d, "
          "\"link_gbps\": %s, \"link_floor_source\": \"%s\", \"dense_reference\": %s, \"results\": [\n",
          tool, nranks, args.iters, args.warmup, args.dtype.c_str(), args.op.c_str(), json_escape(host).c_str(),
          tls != nullptr ? json_escape(tls).c_str() : "", coll.bus_factor(nranks), json_escape(version).c_str(),
          json_escape(ucx).c_str(), devices != nullptr ? json_escape(devices).c_str() : "", date.c_str(),
          json_escape(args.algo).c_str(), args.ef_steps,
          args.link_gbps > 0 ? num_or_null(args.link_gbps, "%.6g").c_str() : "null", floor_source,
          have_reference ? "true" : "false");
    }
    std::fflush(stdout);
  }

  // The first row would otherwise pay the transport's first-use costs (connections, buffers)
  // and, being the dense reference, skew every "vs dense": three untimed calls of the first
  // row at the largest size warm the transport first.
  if (!codecs.empty() && !sizes.empty()) {
    gw_codec_t codec = nullptr;
    check(gw_codec_create(codecs.front().spec.c_str(), &codec), "gw_codec_create");
    gw_codec_id_t id;
    check(gw_codec_id(codec, &id), "gw_codec_id");
    Case c = largest;
    c.codec = codec;
    c.spec = codecs.front().spec;
    c.lossless = id == GW_CODEC_NONE || id == GW_CODEC_FP16 || id == GW_CODEC_BF16;
    c.ef = false;
    if (codecs.front().added) c.algo = GW_ALGO_RING;
    if (coll.unsupported(c).empty()) {
      coll.prepare(c);
      for (int i = 0; i < 3; ++i) coll.run(c);
      coll.release(c);
    }
    check(gw_codec_destroy(codec), "gw_codec_destroy");
  }

  double busbw_sum = 0;
  int rows = 0;
  long long wrong_total = 0;
  std::map<size_t, Reference> reference;  // by size, from the dense reference row
  for (size_t k = 0; k < codecs.size(); ++k) {
    const std::string& spec = codecs[k].spec;
    gw_codec_t codec = nullptr;
    check(gw_codec_create(spec.c_str(), &codec), "gw_codec_create");
    gw_codec_id_t id;
    check(gw_codec_id(codec, &id), "gw_codec_id");
    char canonical[256];
    check(gw_codec_spec(codec, canonical, sizeof canonical), "gw_codec_spec");
    const bool is_reference = have_reference && k == 0;
    for (size_t bytes : sizes) {
      Case c = base;
      c.spec = spec;
      c.codec = codec;
      c.lossless = id == GW_CODEC_NONE || id == GW_CODEC_FP16 || id == GW_CODEC_BF16;
      c.ef = std::strstr(canonical, "ef=1") != nullptr;
      c.reference = is_reference;
      if (codecs[k].added) c.algo = GW_ALGO_RING;
      c.bytes = bytes;
      c.count = coll.count_for(bytes, es, nranks);
      const std::string why = coll.unsupported(c);
      if (!why.empty()) {
        if (rank == 0)
          std::printf("  %11zu %10zu %6s %-24s skipped: %s\n", bytes, c.count, args.dtype.c_str(), spec.c_str(),
                      why.c_str());
        continue;
      }
      coll.prepare(c);
      bool settled = true;
      const int warmup = warm_up(coll, c, args.warmup, &settled);
      if (!settled && rank == 0) {
        std::printf("# %s at %zu B: the policy's choice did not hold %d calls in a row within %d warm-up calls\n",
                    spec.c_str(), bytes, kSettleCalls, warmup);
      }
      check(gw_barrier(comm), "gw_barrier");
      check(gw_comm_reset_stats(comm), "gw_comm_reset_stats");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < args.iters; ++i) coll.run(c);
      const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / args.iters;
      const gw_comm_stats_t st = read_stats(comm);
      // The check and the running sum rerun, explicitly, the algorithm the timed calls ran:
      // under the policy the next call could run another (a trial), and must not be the one
      // judged.
      const Ran timed = what_ran(comm, nranks, st);
      const bool mixed = timed.kinds > 1;
      Case checked = c;
      if (timed.kinds > 0) checked.algo = timed.most;
      const gw_algo_t ran = mixed ? GW_ALGO_AUTO : checked.algo;
      Check chk;
      if (args.check) chk = coll.check(checked, ran);
      const double sum_err = args.ef_steps > 0 ? coll.running_sum_error(checked, args.ef_steps) : -1;
      coll.release(c);

      RankResult mine{local,
                      st.encode_s / args.iters,
                      st.decode_s / args.iters,
                      static_cast<double>(st.bytes_sent) / args.iters,
                      chk.relerr,
                      static_cast<double>(chk.wrong),
                      sum_err,
                      st.hidden_s / args.iters};
      std::vector<RankResult> all(static_cast<size_t>(nranks));
      check(gw_allgather(comm, &mine, all.data(), sizeof mine), "gw_allgather");
      double t = 0, enc = 0, dec = 0, hid = 0, wire = 0, relerr = 0, sum_relerr = -1;
      long long wrong = -1;
      int slowest = 0;
      std::vector<double> times;
      for (int r = 0; r < nranks; ++r) {
        const RankResult& rr = all[static_cast<size_t>(r)];
        if (rr.time_s > t) t = rr.time_s, slowest = r;
        times.push_back(rr.time_s);
        enc += rr.encode_s / nranks;
        dec += rr.decode_s / nranks;
        hid += rr.hidden_s / nranks;
        wire += rr.bytes_sent / nranks;
        relerr = std::max(relerr, rr.relerr);
        sum_relerr = std::max(sum_relerr, rr.sum_relerr);
        if (rr.wrong >= 0) wrong = (wrong < 0 ? 0 : wrong) + static_cast<long long>(rr.wrong);
      }
      std::vector<double> sorted = times;
      std::sort(sorted.begin(), sorted.end());
      const size_t m = sorted.size();
      const double median = m % 2 == 1 ? sorted[m / 2] : (sorted[m / 2 - 1] + sorted[m / 2]) / 2;
      const double xfer = std::max(0.0, t - enc - dec);
      const double algbw = t > 0 ? static_cast<double>(bytes) / t / 1e9 : 0;
      const double busbw = algbw * coll.bus_factor(nranks);
      const double ratio = wire > 0 ? static_cast<double>(bytes) * coll.bus_factor(nranks) / wire : 0;
      if (is_reference) reference[bytes] = Reference{t, wire};
      const auto ref = reference.find(bytes);
      const bool have_ref = ref != reference.end() && ref->second.time_s > 0;
      const double vs_dense = have_ref && t > 0 ? ref->second.time_s / t : -1;
      double floor_s = -1;
      if (link_Bps > 0)
        floor_s = wire / link_Bps;
      else if (have_ref && ref->second.wire > 0)
        floor_s = wire / (ref->second.wire / ref->second.time_s);
      if (wrong > 0) wrong_total += wrong;
      busbw_sum += busbw;
      ++rows;
      if (rank == 0) {
        char wrong_s[32], sum_s[32], vs_s[32], floor_s_txt[32];
        if (wrong >= 0)
          std::snprintf(wrong_s, sizeof wrong_s, "%lld", wrong);
        else
          std::snprintf(wrong_s, sizeof wrong_s, "-");
        if (sum_relerr >= 0)
          std::snprintf(sum_s, sizeof sum_s, "%.2e", sum_relerr);
        else
          std::snprintf(sum_s, sizeof sum_s, "-");
        if (vs_dense >= 0)
          std::snprintf(vs_s, sizeof vs_s, "%.2fx", vs_dense);
        else
          std::snprintf(vs_s, sizeof vs_s, "-");
        if (floor_s >= 0)
          std::snprintf(floor_s_txt, sizeof floor_s_txt, "%.1f", floor_s * 1e6);
        else
          std::snprintf(floor_s_txt, sizeof floor_s_txt, "-");
        const char* algo = coll.fixed_algo() != nullptr ? coll.fixed_algo() : mixed ? "mixed" : algo_label(ran);
        std::printf(
            "  %11zu %10zu %6s %-24s %8s %11.1f %7.3f %7.3f %11.0f %6.2f %9.1f %9.1f %9.1f %9.1f %9.2e %11s %7s %8s %10s\n",
            bytes, c.count, args.dtype.c_str(), spec.c_str(), algo, t * 1e6, algbw, busbw, wire, ratio, enc * 1e6,
            xfer * 1e6, dec * 1e6, hid * 1e6, relerr, sum_s, wrong_s, vs_s, floor_s_txt);
        std::fflush(stdout);
        if (json != nullptr) {
          std::string algo_calls;
          for (int a = 0; a < kAlgoSlots; ++a) {
            if (timed.calls[a] == 0) continue;
            char buf[64];
            std::snprintf(buf, sizeof buf, "%s\"%s\": %llu", algo_calls.empty() ? "" : ", ",
                          algo_name(static_cast<Algo>(a)), static_cast<unsigned long long>(timed.calls[a]));
            algo_calls += buf;
          }
          std::string rank_times;
          for (size_t r = 0; r < times.size(); ++r) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%s%.3f", r > 0 ? ", " : "", times[r] * 1e6);
            rank_times += buf;
          }
          std::fprintf(
              json,
              "%s  {\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"codec\": \"%s\", \"algo\": \"%s\", "
              "\"time_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, \"wire_bytes\": %.1f, \"ratio\": %.4f, "
              "\"encode_us\": %.3f, \"transfer_us\": %.3f, \"decode_us\": %.3f, \"hidden_us\": %.3f, \"relerr\": %.6e, \"wrong\": %lld, "
              "\"warmup\": %d, \"dense_reference\": %s, \"vs_dense\": %s, \"link_floor_us\": %s, "
              "\"ef_steps\": %d, \"sum_relerr\": %s, \"time_min_us\": %.3f, \"time_median_us\": %.3f, "
              "\"time_max_us\": %.3f, \"slowest_rank\": %d, \"rank_time_us\": [%s], \"algo_calls\": {%s}, "
              "\"check_algo\": \"%s\", \"settled\": %s}",
              rows > 1 ? ",\n" : "", bytes, c.count, args.dtype.c_str(), json_escape(spec).c_str(), algo, t * 1e6,
              algbw, busbw, wire, ratio, enc * 1e6, xfer * 1e6, dec * 1e6, hid * 1e6, relerr, wrong, warmup,
              is_reference ? "true" : "false", num_or_null(vs_dense, "%.4f").c_str(),
              num_or_null(floor_s * 1e6, "%.3f").c_str(), args.ef_steps, num_or_null(sum_relerr, "%.6e").c_str(),
              sorted.front() * 1e6, median * 1e6, sorted.back() * 1e6, slowest, rank_times.c_str(), algo_calls.c_str(),
              coll.fixed_algo() != nullptr ? coll.fixed_algo() : algo_name(static_cast<Algo>(checked.algo)),
              settled ? "true" : "false");
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
