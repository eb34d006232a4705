// calibrate: measures the parameters of the cost model (collectives/policy/cost_model.hpp) on
// the machine it runs on, and writes them as the file GW_COST_MODEL reads:
//   latency_s               half the median round trip of an 8-byte gw_send/gw_recv ping-pong
//                           between ranks 0 and 1, each pinned to a core of its own (where the
//                           machine has two): one small message, one way, software included
//   link_bytes_per_s        16 MiB / half the median round trip of a 16 MiB ping-pong (buffers
//                           allocated, touched and warmed by untimed round trips first)
//   message_cpu_s           per message on the sender: (time to post N 8-byte gw_isend back to
//                           back and gw_wait them all - latency_s) / N, median over bursts;
//                           the receiver has posted its N receives before each burst
//   switch_s                the same 8-byte ping-pong with both ranks pinned to CPU 0, half its
//                           median round trip less latency_s: what a message costs when its
//                           receiver has to be switched in (more ranks than cores)
//   reduce_bytes_per_s      the library's dense fp32 sum (dst[i] += src[i], one core) on buffers
//                           of --size-mb MiB: src bytes per second
//   sparse_sum_bytes_per_s  topk's encoded bytes / the time of its decode-accumulate into a dense
//                           buffer of --size-mb MiB
//   encode_bytes_per_s.C    fp32 input bytes per second of one encode, one thread, codec C
//   decode_bytes_per_s.C    fp32 output bytes per second of a decode that accumulates, one thread
//   cores                   online CPUs (sysconf(_SC_NPROCESSORS_ONLN))
// One pair of codec lines for every registered codec, at its defaults (the bare name); the
// sparse codecs have no default size (they need ratio= or k=), so they run at ratio=0.01.
// The network figures go through the public C ABI between the ranks (--np N forks them as the
// other perf tools do; ranks 0 and 1 talk, others wait). Then every rank but 0 leaves and rank
// 0, alone, times the host compute with codec_bench's code (perf/codec_bench.hpp: the same
// input, warm-up, medians and decode checks). Rank 0 writes the file (--out, else stdout) and
// a summary on stderr.
//
// usage: calibrate [--np N] [--out FILE] [--quick] [--size-mb M]
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "collectives/common/reduce.hpp"
#include "compressors/codec_registry.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/gradwire.h"
#include "perf/codec_bench.hpp"
#include "perf/launch.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using gw::perf::check;
using gw::perf::median;

const char kUsage[] = "usage: calibrate [--np N] [--out FILE] [--quick] [--size-mb M]";

struct Options {
  int np = 2;            // ranks to fork; 0: this process is one of a launcher's (mpirun, srun)
  std::string out;       // the file to write; empty: stdout
  bool quick = false;    // few repetitions and small sizes (a smoke test, not a calibration)
  double size_mb = 0.0;  // MiB of the compute buffers; 0: 64, or 4 with --quick
};

// How much each measurement runs: the full calibration, or --quick's smoke test.
struct Plan {
  int ping_warmup = 200, ping_iters = 2000;  // 8-byte round trips
  size_t big_bytes = size_t{16} << 20;       // the large message
  int big_warmup = 3, big_iters = 30;        // its round trips
  int burst_n = 1000, burst_warmup = 2, burst_reps = 30;
  size_t elements = 0;  // fp32 elements of the compute buffers
  int compute_warmup = 2, compute_reps = 9;
  // Pin ranks 0 and 1 to cores of their own for the latency: on an idle machine it stops the
  // figure swinging between runs; on a loaded one (a test run) a pinned rank waits for its
  // core, so --quick does not pin.
  bool pin = true;
};

Plan plan_for(const Options& o) {
  Plan p;
  const double mb = o.size_mb > 0.0 ? o.size_mb : o.quick ? 4.0 : 64.0;
  p.elements = std::max<size_t>(1, static_cast<size_t>(mb * 1048576.0 / sizeof(float)));
  if (o.quick) {
    p.pin = false;
    p.ping_warmup = 20;
    p.ping_iters = 200;
    p.big_bytes = size_t{1} << 20;
    p.big_warmup = 1;
    p.big_iters = 5;
    p.burst_warmup = 1;
    p.burst_reps = 5;
    p.compute_warmup = 1;
    p.compute_reps = 3;
  }
  return p;
}

[[noreturn]] void bad_arg(const std::string& message) {
  std::fprintf(stderr, "calibrate: %s\n%s\n", message.c_str(), kUsage);
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) bad_arg(a + " needs a value");
      return argv[++i];
    };
    if (a == "--np") {
      const std::string v = next();
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || x == 1 || x < 0 || x > 256) {
        bad_arg("--np: '" + v + "' is not a number of ranks from 2 to 256 (or 0: the launcher's)");
      }
      o.np = static_cast<int>(x);
    } else if (a == "--out") {
      o.out = next();
      if (o.out.empty()) bad_arg("--out: an empty file name");
      const size_t slash = o.out.rfind('/');
      const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : o.out.substr(0, slash);
      if (access(dir.c_str(), W_OK) != 0) {
        bad_arg("--out: cannot write in '" + dir + "' (" + std::strerror(errno) + ")");
      }
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--size-mb") {
      const std::string v = next();
      char* end = nullptr;
      o.size_mb = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.size_mb > 0.0) || o.size_mb > 65536.0) {
        bad_arg("--size-mb: '" + v + "' is not a size in MiB (0 < M <= 65536)");
      }
    } else if (a == "-h" || a == "--help") {
      std::printf("%s\n", kUsage);
      std::printf(
          "  --np N       ranks to fork (default 2); 0: started by a launcher (mpirun, srun)\n"
          "  --out FILE   write the cost model to FILE (default: stdout)\n"
          "  --quick      few repetitions and small sizes: a smoke test, not a calibration\n"
          "  --size-mb M  MiB of fp32 in the compute buffers: sum, codecs (default 64; --quick: 4)\n");
      std::exit(0);
    } else {
      bad_arg("unknown argument '" + a + "'");
    }
  }
  return o;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What calibrate measures each codec at: the bare name (its defaults), or, for a sparse codec,
// which has no default size, ratio=0.01. Exits when the library refuses both.
struct MeasuredSpec {
  std::string name, spec;
};

std::vector<MeasuredSpec> codec_specs() {
  std::vector<MeasuredSpec> specs;
  for (size_t i = 0; i < gw::detail::codec_count(); ++i) {
    const gw::detail::CodecEntry* e = gw::detail::codec_at(i);
    std::string spec = e->name;
    auto created = gw::Codec::create(spec);
    if (!created && e->has(gw::detail::kCapSparse)) {
      spec += ":ratio=0.01";
      created = gw::Codec::create(spec);
    }
    if (!created) {
      std::fprintf(stderr, "calibrate: codec '%s': %s\n", spec.c_str(), created.status().to_string().c_str());
      std::exit(1);
    }
    specs.push_back(MeasuredSpec{e->name, spec});
  }
  return specs;
}

// Tags of the calibration's messages (any value is allowed; one per role keeps them apart).
constexpr uint32_t kTagPing = 1, kTagPong = 2, kTagBurst = 3, kTagReady = 4;

// iters timed round trips of a bytes message from rank 0 to rank 1 and back (gw_send, gw_recv)
// after warmup untimed ones; seconds, each timed on rank 0 (empty on the other ranks).
std::vector<double> round_trips(gw_comm_t comm, int rank, uint8_t* buf, size_t bytes, int warmup, int iters) {
  std::vector<double> times;
  for (int i = 0; i < warmup + iters; ++i) {
    if (rank == 0) {
      const auto t0 = Clock::now();
      check(gw_send(comm, buf, bytes, 1, kTagPing), "gw_send");
      check(gw_recv(comm, buf, bytes, 1, kTagPong), "gw_recv");
      if (i >= warmup) times.push_back(seconds_since(t0));
    } else if (rank == 1) {
      check(gw_recv(comm, buf, bytes, 0, kTagPing), "gw_recv");
      check(gw_send(comm, buf, bytes, 0, kTagPong), "gw_send");
    }
  }
  return times;
}

// Bursts of n 8-byte gw_isend from rank 0 to rank 1, posted back to back and then waited for;
// before each, rank 1 posts its n receives and says so (a ready message), so a burst never
// waits for a receive to be posted. Returns the seconds of each timed burst on rank 0.
std::vector<double> bursts(gw_comm_t comm, int rank, int n, int warmup, int reps) {
  std::vector<uint64_t> slots(static_cast<size_t>(n), 0);
  std::vector<gw_request_t> reqs(static_cast<size_t>(n), nullptr);
  uint64_t ready = 1;
  std::vector<double> times;
  for (int r = 0; r < warmup + reps; ++r) {
    if (rank == 1) {
      for (size_t i = 0; i < slots.size(); ++i) {
        check(gw_irecv(comm, &slots[i], sizeof(uint64_t), 0, kTagBurst, &reqs[i]), "gw_irecv");
      }
      check(gw_send(comm, &ready, sizeof ready, 0, kTagReady), "gw_send (ready)");
      for (gw_request_t& q : reqs) check(gw_wait(q), "gw_wait (receive)");
    } else if (rank == 0) {
      check(gw_recv(comm, &ready, sizeof ready, 1, kTagReady), "gw_recv (ready)");
      const auto t0 = Clock::now();
      for (size_t i = 0; i < slots.size(); ++i) {
        slots[i] = i;
        check(gw_isend(comm, &slots[i], sizeof(uint64_t), 1, kTagBurst, &reqs[i]), "gw_isend");
      }
      for (gw_request_t& q : reqs) check(gw_wait(q), "gw_wait (send)");
      if (r >= warmup) times.push_back(seconds_since(t0));
    }
  }
  return times;
}

// The q-quantile of v (nearest rank), for the spread the summary shows.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// Pins the calling process to one CPU (cpu >= 0) or gives it back every CPU it had (cpu < 0).
void pin_to_cpu(int cpu) {
  static cpu_set_t saved;
  static bool have_saved = false;
  if (cpu >= 0) {
    if (!have_saved) have_saved = sched_getaffinity(0, sizeof saved, &saved) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) std::perror("calibrate: sched_setaffinity");
  } else if (have_saved) {
    sched_setaffinity(0, sizeof saved, &saved);
  }
}

struct Network {
  double latency_s = 0, link_bytes_per_s = 0, message_cpu_s = 0;
  double switch_s = 0;       // the ping-pong's one-way time with both ranks on one core, less latency_s
  double spread[3][2] = {};  // the same three from the first and third quartile of the samples
};

// Runs on every rank; the figures are rank 0's (zero elsewhere).
Network measure_network(gw_comm_t comm, int rank, const Plan& p) {
  Network net;
  std::vector<uint8_t> buf(p.big_bytes, 0x5a);  // allocated and touched before any timing
  check(gw_barrier(comm), "gw_barrier");
  // The latency with ranks 0 and 1 on cores of their own (the scheduler may otherwise put both
  // on one, and the figure would swing between the two cases from run to run).
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (p.pin && cpus >= 2 && rank < 2) pin_to_cpu(rank);
  check(gw_barrier(comm), "gw_barrier");
  const std::vector<double> small = round_trips(comm, rank, buf.data(), 8, p.ping_warmup, p.ping_iters);
  pin_to_cpu(-1);
  const std::vector<double> big = round_trips(comm, rank, buf.data(), p.big_bytes, p.big_warmup, p.big_iters);
  const std::vector<double> burst = bursts(comm, rank, p.burst_n, p.burst_warmup, p.burst_reps);
  // Ranks sharing a core (more ranks than cores): each message waits for its receiver to be
  // switched in. The same ping-pong with both ranks on CPU 0 prices that switch.
  check(gw_barrier(comm), "gw_barrier");
  if (p.pin) pin_to_cpu(0);
  check(gw_barrier(comm), "gw_barrier");
  const std::vector<double> shared = round_trips(comm, rank, buf.data(), 8, p.ping_warmup, p.ping_iters / 4 + 1);
  pin_to_cpu(-1);
  check(gw_barrier(comm), "gw_barrier");
  if (rank != 0) return net;
  net.latency_s = median(small) / 2.0;
  net.link_bytes_per_s = static_cast<double>(p.big_bytes) / (median(big) / 2.0);
  std::vector<double> per_message;
  per_message.reserve(burst.size());
  for (double t : burst) per_message.push_back((t - net.latency_s) / p.burst_n);
  net.message_cpu_s = median(per_message);
  net.switch_s = std::max(1e-7, median(shared) / 2.0 - net.latency_s);
  for (int i = 0; i < 2; ++i) {
    const double q = i == 0 ? 0.25 : 0.75;
    net.spread[0][i] = quantile(small, q) / 2.0;
    net.spread[1][i] = static_cast<double>(p.big_bytes) / (quantile(big, 1.0 - q) / 2.0);
    net.spread[2][i] = quantile(per_message, q);
  }
  if (!(net.message_cpu_s > 0.0)) {
    // The latency was measured slower than a whole burst (a loaded machine): the burst alone.
    std::fprintf(stderr,
                 "calibrate: warning: a burst of %d messages took less than one latency (%.3g s); "
                 "message_cpu_s is the burst's time / %d\n",
                 p.burst_n, net.latency_s, p.burst_n);
    net.message_cpu_s = std::max(1e-9, median(burst) / p.burst_n);
  }
  return net;
}

struct CodecRate {
  std::string name, spec;
  double encode_bytes_per_s = 0, decode_bytes_per_s = 0;
};

struct Compute {
  double reduce_bytes_per_s = 0, sparse_sum_bytes_per_s = 0;
  std::vector<CodecRate> codecs;
};

Compute measure_compute(const std::vector<MeasuredSpec>& specs, const Plan& p) {
  Compute c;
  std::vector<std::string> spec_strings;
  spec_strings.reserve(specs.size());
  for (const MeasuredSpec& s : specs) spec_strings.push_back(s.spec);
  gw::perf::CodecBuffers b = gw::perf::make_codec_buffers(p.elements, spec_strings);
  const double input_bytes = static_cast<double>(p.elements) * sizeof(float);

  std::vector<double> sums;
  for (int i = 0; i < p.compute_warmup + p.compute_reps; ++i) {
    const auto t0 = Clock::now();
    gw::coll::reduce_sum(b.dst.get(), b.src.get(), p.elements, gw::DType::kFloat32);
    if (i >= p.compute_warmup) sums.push_back(seconds_since(t0));
  }
  c.reduce_bytes_per_s = input_bytes / median(sums);

  const gw::perf::CodecTiming timing{p.compute_reps, p.compute_warmup, /*all_phases=*/false};
  bool have_topk = false;
  for (const MeasuredSpec& s : specs) {
    const gw::perf::CodecResult r = gw::perf::time_codec(s.spec, b, timing);
    c.codecs.push_back(
        CodecRate{s.name, s.spec, input_bytes / r.encode.median_s(), input_bytes / r.accumulate.median_s()});
    if (s.name == "topk") {
      c.sparse_sum_bytes_per_s = static_cast<double>(r.encoded_bytes) / r.accumulate.median_s();
      have_topk = true;
    }
  }
  if (!have_topk) {
    std::fprintf(stderr, "calibrate: no topk codec is registered: sparse_sum_bytes_per_s has nothing to measure\n");
    std::exit(1);
  }
  return c;
}

// Free text for the transport line: no '#' (a comment there) and no control characters.
std::string one_line(std::string s) {
  for (char& ch : s) {
    if (ch == '#' || static_cast<unsigned char>(ch) < 0x20) ch = '_';
  }
  return s;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char s[32];
  std::strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return s;
}

std::string host_name() {
  char h[256] = {};
  if (gethostname(h, sizeof h - 1) != 0) return "unknown";
  return one_line(h);
}

// printf into the end of s.
__attribute__((format(printf, 2, 3))) void appendf(std::string& s, const char* fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  if (n > 0) {
    const size_t old = s.size();
    s.resize(old + static_cast<size_t>(n) + 1);
    std::vsnprintf(&s[old], static_cast<size_t>(n) + 1, fmt, again);
    s.resize(old + static_cast<size_t>(n));
  }
  va_end(again);
}

std::string cost_model_text(const Network& net, const Compute& c, const Plan& p, const Options& o, int nranks,
                            long cores) {
  const char* tls = std::getenv("UCX_TLS");
  const std::string tls_text = tls != nullptr ? one_line(tls) : "unset";
  std::string t;
  appendf(t, "# gradwire cost model, measured by perf/calibrate on %s %s, UCX_TLS=%s, %d ranks\n", host_name().c_str(),
          utc_now().c_str(), tls_text.c_str(), nranks);
  appendf(t,
          "# %s: medians of %d round trips of 8 B, %d of %zu B, %d bursts of %d x 8 B; %d passes over %.1f MiB of fp32 "
          "for the sum and each codec (one thread)\n",
          o.quick ? "QUICK RUN (a smoke test, not a calibration)" : "runs", p.ping_iters, p.big_iters, p.big_bytes,
          p.burst_reps, p.burst_n, p.compute_reps, static_cast<double>(p.elements) * sizeof(float) / 1048576.0);
  std::string specs;
  for (const CodecRate& r : c.codecs) specs += (specs.empty() ? "" : ", ") + r.spec;
  appendf(t, "# codec specs: %s\n", specs.c_str());
  appendf(t, "version = 1\n");
  appendf(t, "transport = UCX_TLS=%s\n", tls_text.c_str());
  appendf(t, "latency_s = %.4g\n", net.latency_s);
  appendf(t, "switch_s = %.4g\n", net.switch_s);
  appendf(t, "link_bytes_per_s = %.4g\n", net.link_bytes_per_s);
  appendf(t, "message_cpu_s = %.4g\n", net.message_cpu_s);
  appendf(t, "reduce_bytes_per_s = %.4g\n", c.reduce_bytes_per_s);
  appendf(t, "sparse_sum_bytes_per_s = %.4g\n", c.sparse_sum_bytes_per_s);
  for (const CodecRate& r : c.codecs) {
    appendf(t, "encode_bytes_per_s.%s = %.4g\n", r.name.c_str(), r.encode_bytes_per_s);
    appendf(t, "decode_bytes_per_s.%s = %.4g\n", r.name.c_str(), r.decode_bytes_per_s);
  }
  appendf(t, "cores = %ld\n", cores);
  return t;
}

// Writes text to path through a temporary file renamed over it, so that a failed run leaves
// no half-written cost model behind.
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0 ||
      std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "calibrate: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
}

void print_summary(const Network& net, const Compute& c, const Plan& p, int nranks, long cores) {
  const char* tls = std::getenv("UCX_TLS");
  std::fprintf(stderr, "calibrate: %d ranks, UCX_TLS=%s, %ld cores\n", nranks, tls != nullptr ? tls : "unset", cores);
  std::fprintf(stderr, "  latency       %9.2f us one way (8 B); quartiles %.2f, %.2f\n", net.latency_s * 1e6,
               net.spread[0][0] * 1e6, net.spread[0][1] * 1e6);
  std::fprintf(stderr, "  link          %9.3f GB/s (%zu B messages); quartiles %.3f, %.3f\n",
               net.link_bytes_per_s / 1e9, p.big_bytes, net.spread[1][0] / 1e9, net.spread[1][1] / 1e9);
  std::fprintf(stderr, "  message cpu   %9.3f us per message (bursts of %d); quartiles %.3f, %.3f\n",
               net.message_cpu_s * 1e6, p.burst_n, net.spread[2][0] * 1e6, net.spread[2][1] * 1e6);
  std::fprintf(stderr, "  fp32 sum      %9.3f GB/s of input, one core\n", c.reduce_bytes_per_s / 1e9);
  std::fprintf(stderr, "  sparse sum    %9.3f GB/s of topk message\n", c.sparse_sum_bytes_per_s / 1e9);
  std::fprintf(stderr, "  %-20s %12s %16s\n", "codec", "encode GB/s", "decode+acc GB/s");
  for (const CodecRate& r : c.codecs) {
    std::fprintf(stderr, "  %-20s %12.3f %16.3f\n", r.spec.c_str(), r.encode_bytes_per_s / 1e9,
                 r.decode_bytes_per_s / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  const Plan p = plan_for(o);
  const std::vector<MeasuredSpec> specs = codec_specs();  // before any rank starts

  gw_comm_t comm = gw::perf::launch(o.np);
  int rank = 0, nranks = 0;
  check(gw_comm_rank(comm, &rank), "gw_comm_rank");
  check(gw_comm_size(comm, &nranks), "gw_comm_size");
  if (nranks < 2) {
    std::fprintf(stderr, "calibrate: %d rank: the network figures need 2 or more\n", nranks);
    check(gw_comm_destroy(comm), "gw_comm_destroy");
    return 2;
  }
  const Network net = measure_network(comm, rank, p);
  check(gw_comm_destroy(comm), "gw_comm_destroy");
  if (rank != 0) return 0;

  // Rank 0 alone from here: the other ranks have left, this one's progress thread is gone.
  const Compute c = measure_compute(specs, p);
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));  // -1 where unknown
  const std::string text = cost_model_text(net, c, p, o, nranks, cores);
  if (o.out.empty()) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  } else {
    write_file(o.out, text);
  }
  print_summary(net, c, p, nranks, cores);
  if (!o.out.empty()) std::fprintf(stderr, "calibrate: wrote %s\n", o.out.c_str());
  return 0;
}
