// codec_bench: single-thread throughput of the host codecs on one synthetic gradient.
//
// For each codec spec it times encode, decode (overwrite), decode (accumulate) and encode
// with error feedback, and reports GB/s of uncompressed fp32 input (10^9 bytes per second
// of 4-byte input elements), the compression ratio and the relative L2 error of a decode.
// Every buffer is allocated and first touched before timing, every phase is warmed up, and
// each figure is the median of --reps timed repetitions.
//
//   codec_bench [--size-mb M] [--reps N] [--warmup N] [--codec SPEC]... [--json FILE]
//
// The gradient is Student-t with 3 degrees of freedom scaled by 1e-3 (heavy tails, never
// zero), drawn once from a fixed seed, so runs are comparable across machines and builds.
// Each decode is checked: a few positions (random ones and, for sparse codecs, ones the
// message carries) are poisoned before the timed call and compared bit for bit with a
// reference decode afterwards, so a decode that silently does nothing fails loudly.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compressors/codec_registry.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"
#include "perf/codec_bench.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using gw::perf::CodecBuffers;
using gw::perf::CodecPhase;
using gw::perf::CodecResult;

// What each registered codec lists to be measured, in order of codec id.
std::vector<std::string> default_specs() {
  std::vector<std::string> specs;
  for (size_t i = 0; i < gw::detail::codec_count(); ++i) {
    const char* const* s = gw::detail::codec_at(i)->bench_specs;
    for (; s != nullptr && *s != nullptr; ++s) specs.emplace_back(*s);
  }
  return specs;
}

struct Options {
  double size_mb = 64.0;  // MiB of fp32 input
  int reps = 5;
  int warmup = 1;
  std::vector<std::string> specs;
  std::string json_path;
};

[[noreturn]] void usage(const char* argv0, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: %s [--size-mb M] [--reps N] [--warmup N] [--codec SPEC]... [--json FILE]\n"
               "  --size-mb M   input size in MiB of fp32 (default 64: 16M elements)\n"
               "  --reps N      timed repetitions per phase; the median is reported (default 5)\n"
               "  --warmup N    untimed repetitions per phase first (default 1)\n"
               "  --codec SPEC  codec spec to measure, repeatable (default: each codec's own list)\n"
               "  --json FILE   also write the results as JSON to FILE\n",
               argv0);
  std::exit(code);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        usage(argv[0], 2);
      }
      return argv[++i];
    };
    auto to_int = [&](const char* v) {
      char* end = nullptr;
      const long x = std::strtol(v, &end, 10);
      if (end == v || *end != '\0' || x < 1 || x > 1000000) {
        std::fprintf(stderr, "%s: '%s' is not a positive integer\n", a.c_str(), v);
        usage(argv[0], 2);
      }
      return static_cast<int>(x);
    };
    if (a == "--size-mb") {
      const char* v = next();
      char* end = nullptr;
      o.size_mb = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(o.size_mb > 0.0) || o.size_mb > 65536.0) {
        std::fprintf(stderr, "--size-mb: '%s' is not a size in MiB (0 < M <= 65536)\n", v);
        usage(argv[0], 2);
      }
    } else if (a == "--reps") {
      o.reps = to_int(next());
    } else if (a == "--warmup") {
      const char* v = next();
      o.warmup = std::strcmp(v, "0") == 0 ? 0 : to_int(v);
    } else if (a == "--codec") {
      o.specs.emplace_back(next());
    } else if (a == "--json") {
      o.json_path = next();
    } else if (a == "-h" || a == "--help") {
      usage(argv[0], 0);
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", a.c_str());
      usage(argv[0], 2);
    }
  }
  if (o.specs.empty()) o.specs = default_specs();
  return o;
}

// splitmix64: a small, fixed generator so the input is the same everywhere.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform_open() {  // (0, 1)
    return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
};

// Student-t, 3 dof, scaled 1e-3: z0 / sqrt((z1^2 + z2^2 + z3^2) / 3), normals by Box-Muller.
void fill_gradient(float* x, size_t n) {
  SplitMix rng{0x6772616477697265ull};
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < n; ++i) {
    float v = 0.0f;
    while (!(v != 0.0f && std::isfinite(v))) {
      double z[4];
      for (int j = 0; j < 4; j += 2) {
        const double r = std::sqrt(-2.0 * std::log(rng.uniform_open()));
        const double t = two_pi * rng.uniform_open();
        z[j] = r * std::cos(t);
        z[j + 1] = r * std::sin(t);
      }
      const double chi = (z[1] * z[1] + z[2] * z[2] + z[3] * z[3]) / 3.0;
      v = static_cast<float>(1e-3 * z[0] / std::sqrt(chi));
    }
    x[i] = v;
  }
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

namespace gw::perf {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double CodecPhase::gbps(size_t n) const {
  const double t = median(times);
  return t > 0.0 ? static_cast<double>(n) * sizeof(float) / t / 1e9 : 0.0;
}

}  // namespace gw::perf

namespace {

[[noreturn]] void die(const std::string& what, const gw::Status& s) {
  std::fprintf(stderr, "codec_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  std::exit(1);
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Positions whose decoded value every timed decode must reproduce: spread-out ones plus,
// since sparse messages decode to zero almost everywhere, some the message carries.
std::vector<size_t> probe_positions(const float* ref, size_t n) {
  std::vector<size_t> p;
  SplitMix rng{n};
  for (int i = 0; i < 4; ++i) p.push_back(static_cast<size_t>(rng.next() % n));
  p.push_back(0);
  p.push_back(n - 1);
  size_t first = n, last = n;
  for (size_t i = 0; i < n; ++i) {
    if (ref[i] != 0.0f) {
      first = i;
      break;
    }
  }
  for (size_t i = n; i-- > 0;) {
    if (ref[i] != 0.0f) {
      last = i;
      break;
    }
  }
  if (first < n) p.push_back(first);
  if (last < n) p.push_back(last);
  if (first < n && last < n) {  // a carried position in the middle
    for (size_t i = first + (last - first) / 2; i <= last; ++i) {
      if (ref[i] != 0.0f) {
        p.push_back(i);
        break;
      }
    }
  }
  return p;
}

constexpr float kPoison = -12345.678f;

}  // namespace

namespace gw::perf {

CodecBuffers make_codec_buffers(size_t n, const std::vector<std::string>& specs) {
  CodecBuffers b;
  b.n = n;
  for (const std::string& s : specs) {
    auto c = gw::Codec::create(s);
    if (!c) die("codec '" + s + "'", c.status());
    b.msg_cap = std::max(b.msg_cap, (*c)->max_encoded_bytes(n, gw::DType::kFloat32));
  }
  b.src.reset(new float[n]);
  b.dst.reset(new float[n]);
  b.ref.reset(new float[n]);
  b.msg.reset(new uint8_t[b.msg_cap]);
  // First touch everything now: page faults would otherwise land in the timed loops.
  fill_gradient(b.src.get(), n);
  std::memset(b.dst.get(), 0, n * sizeof(float));
  std::memset(b.ref.get(), 0, n * sizeof(float));
  std::memset(b.msg.get(), 0, b.msg_cap);
  return b;
}

CodecResult time_codec(const std::string& spec, CodecBuffers& b, const CodecTiming& o) {
  CodecResult row;
  row.spec = spec;
  auto created = gw::Codec::create(spec);
  if (!created) die("codec '" + spec + "'", created.status());
  gw::Codec& codec = **created;
  const size_t n = b.n;
  const size_t cap = b.msg_cap;
  float* src = b.src.get();
  float* dst = b.dst.get();
  uint8_t* msg = b.msg.get();
  uint64_t step = 1;

  auto encode_once = [&]() {
    auto r = codec.encode(src, n, gw::DType::kFloat32, gw::EncodeContext{step++, 0}, msg, cap);
    if (!r) die(spec + " encode", r.status());
    return *r;
  };

  // Encode: warm up (sizes the codec's workspace), then time.
  size_t len = 0;
  for (int i = 0; i < o.warmup; ++i) len = encode_once();
  for (int i = 0; i < o.reps; ++i) {
    const auto t0 = Clock::now();
    len = encode_once();
    row.encode.times.push_back(seconds_since(t0));
  }
  row.encoded_bytes = len;
  row.ratio = static_cast<double>(n) * sizeof(float) / static_cast<double>(len);
  auto info = gw::inspect(msg, len);
  if (!info) die(spec + " inspect", info.status());
  row.nnz = info->nnz;

  // Reference decode of the last message, untimed, checked against the input as a whole.
  float* ref = b.ref.get();
  if (auto s = gw::decode(msg, len, ref, n, gw::DType::kFloat32, gw::DecodeMode::kOverwrite); !s.is_ok()) {
    die(spec + " decode", s);
  }
  double err2 = 0.0, norm2 = 0.0;
  uint64_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(ref[i]) - static_cast<double>(src[i]);
    err2 += d * d;
    norm2 += static_cast<double>(src[i]) * src[i];
    nonzero += ref[i] != 0.0f;
  }
  row.rel_error = norm2 > 0.0 ? std::sqrt(err2 / norm2) : 0.0;
  if (!std::isfinite(row.rel_error) || nonzero == 0 || nonzero > row.nnz) {
    std::fprintf(stderr,
                 "codec_bench: %s: decoded output fails the sanity check (relative error %g, "
                 "%" PRIu64 " non-zero of %" PRIu64 " carried)\n",
                 spec.c_str(), row.rel_error, nonzero, row.nnz);
    std::exit(1);
  }
  const std::vector<size_t> probes = probe_positions(ref, n);

  auto decode_timed = [&](gw::DecodeMode mode, CodecPhase* phase) {
    // Poison the probes (overwrite must replace them; accumulate must add to a known value).
    for (size_t p : probes) dst[p] = kPoison;
    const auto t0 = Clock::now();
    const gw::Status s = gw::decode(msg, len, dst, n, gw::DType::kFloat32, mode);
    const double t = seconds_since(t0);
    if (!s.is_ok()) die(spec + " decode", s);
    for (size_t p : probes) {
      const float want = mode == gw::DecodeMode::kOverwrite ? ref[p] : kPoison + ref[p];
      if (bits_of(dst[p]) != bits_of(want)) {
        std::fprintf(stderr, "codec_bench: %s: decode wrote %.9g at %zu, expected %.9g\n", spec.c_str(),
                     static_cast<double>(dst[p]), p, static_cast<double>(want));
        std::exit(1);
      }
    }
    if (phase != nullptr) phase->times.push_back(t);
  };
  if (o.all_phases) {
    for (int i = 0; i < o.warmup; ++i) decode_timed(gw::DecodeMode::kOverwrite, nullptr);
    for (int i = 0; i < o.reps; ++i) decode_timed(gw::DecodeMode::kOverwrite, &row.decode);
  }
  for (int i = 0; i < o.warmup; ++i) decode_timed(gw::DecodeMode::kAccumulate, nullptr);
  for (int i = 0; i < o.reps; ++i) decode_timed(gw::DecodeMode::kAccumulate, &row.accumulate);

  // Encode with error feedback: residual += g, encode, residual -= decode (the library's
  // own path). The residual is allocated (and zeroed, so touched) by the state.
  if (o.all_phases) {
    gw::ErrorFeedback ef(n);
    auto ef_once = [&]() {
      auto r = codec.encode(src, n, gw::EncodeContext{ef.step(), 0}, ef, msg, cap);
      if (!r) die(spec + " encode with error feedback", r.status());
    };
    for (int i = 0; i < o.warmup; ++i) ef_once();
    for (int i = 0; i < o.reps; ++i) {
      const auto t0 = Clock::now();
      ef_once();
      row.encode_ef.times.push_back(seconds_since(t0));
    }
  }
  return row;
}

}  // namespace gw::perf

namespace {

// Plain-loop memory references on the same buffers, for reading the codec numbers against.
struct MemRef {
  double read_gbps = 0.0, copy_gbps = 0.0;
};

MemRef measure_memory(CodecBuffers& b, const Options& o) {
  MemRef m;
  const size_t n = b.n;
  CodecPhase read, copy;
  volatile float sink = 0.0f;
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    auto t0 = Clock::now();
    float acc[8] = {};
    const float* s = b.src.get();
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
      for (int l = 0; l < 8; ++l) acc[l] += s[j + l];
    }
    for (; j < n; ++j) acc[0] += s[j];
    float total = 0.0f;
    for (float a : acc) total += a;
    sink = total;
    const double tr = seconds_since(t0);
    t0 = Clock::now();
    std::memcpy(b.dst.get(), b.src.get(), n * sizeof(float));
    const double tc = seconds_since(t0);
    if (i >= o.warmup) {
      read.times.push_back(tr);
      copy.times.push_back(tc);
    }
  }
  (void)sink;
  m.read_gbps = read.gbps(n);
  m.copy_gbps = copy.gbps(n);
  return m;
}

std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "unknown";
  char line[512];
  std::string model = "unknown";
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "model name", 10) == 0) {
      const char* colon = std::strchr(line, ':');
      if (colon != nullptr) {
        model = colon + 1;
        while (!model.empty() && (model.front() == ' ' || model.front() == '\t')) model.erase(0, 1);
        while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
      }
      break;
    }
  }
  std::fclose(f);
  return model;
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

void write_phase(FILE* f, const char* name, const CodecPhase& p, size_t n, bool last) {
  std::fprintf(f, "      \"%s\": {\"gbps\": %.4f, \"median_s\": %.6e, \"times_s\": [", name, p.gbps(n), p.median_s());
  for (size_t i = 0; i < p.times.size(); ++i) {
    std::fprintf(f, "%s%.6e", i ? ", " : "", p.times[i]);
  }
  std::fprintf(f, "]}%s\n", last ? "" : ",");
}

void write_json(const std::string& path, const Options& o, size_t n, const MemRef& mem,
                const std::vector<CodecResult>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "codec_bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  std::fprintf(f, "{\n  \"tool\": \"codec_bench\",\n  \"cpu\": \"%s\",\n  \"compiler\": \"%s\",\n",
               json_escape(cpu_model()).c_str(), json_escape(__VERSION__).c_str());
  std::fprintf(f, "  \"elements\": %zu,\n  \"input_bytes\": %zu,\n  \"reps\": %d,\n  \"warmup\": %d,\n", n,
               n * sizeof(float), o.reps, o.warmup);
  std::fprintf(f, "  \"threads\": 1,\n  \"unit\": \"GB/s = 1e9 bytes of fp32 input per second\",\n");
  std::fprintf(f, "  \"memory\": {\"read_gbps\": %.4f, \"memcpy_gbps\": %.4f},\n", mem.read_gbps, mem.copy_gbps);
  std::fprintf(f, "  \"codecs\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const CodecResult& r = rows[i];
    std::fprintf(f, "    {\n      \"spec\": \"%s\",\n      \"encoded_bytes\": %zu,\n", json_escape(r.spec).c_str(),
                 r.encoded_bytes);
    std::fprintf(f, "      \"nnz\": %" PRIu64 ",\n      \"ratio\": %.4f,\n      \"rel_error\": %.6f,\n", r.nnz, r.ratio,
                 r.rel_error);
    write_phase(f, "encode", r.encode, n, false);
    write_phase(f, "decode", r.decode, n, false);
    write_phase(f, "decode_accumulate", r.accumulate, n, false);
    write_phase(f, "encode_ef", r.encode_ef, n, true);
    std::fprintf(f, "    }%s\n", i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

}  // namespace

int gw::perf::codec_bench_main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  // Validate every spec before spending time on the input.
  for (const std::string& s : o.specs) {
    auto c = gw::Codec::create(s);
    if (!c) die("codec '" + s + "'", c.status());
  }

  size_t elements = static_cast<size_t>(o.size_mb * 1048576.0 / sizeof(float));
  if (elements == 0) elements = 1;
  CodecBuffers b = gw::perf::make_codec_buffers(elements, o.specs);
  const size_t n = b.n;

  const MemRef mem = measure_memory(b, o);
  std::printf("# codec_bench: %zu fp32 elements (%.1f MiB), 1 thread, median of %d reps (%d warm-up)\n", n,
              static_cast<double>(n) * sizeof(float) / 1048576.0, o.reps, o.warmup);
  std::printf("# cpu: %s; compiler: %s\n", cpu_model().c_str(), __VERSION__);
  std::printf("# input: Student-t (3 dof) x 1e-3, no zeros; GB/s = 1e9 bytes of fp32 input per second\n");
  std::printf("# memory reference: read %.2f GB/s, memcpy %.2f GB/s (of the copied bytes)\n", mem.read_gbps,
              mem.copy_gbps);
  std::printf(
      "\n| codec | ratio | encode GB/s | decode GB/s | decode+acc GB/s | encode+EF GB/s | rel. L2 "
      "error |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);

  std::vector<CodecResult> rows;
  for (const std::string& s : o.specs) {
    rows.push_back(gw::perf::time_codec(s, b, gw::perf::CodecTiming{o.reps, o.warmup, true}));
    const CodecResult& r = rows.back();
    std::printf("| %s | %.1f | %.3f | %.3f | %.3f | %.3f | %.4f |\n", r.spec.c_str(), r.ratio, r.encode.gbps(n),
                r.decode.gbps(n), r.accumulate.gbps(n), r.encode_ef.gbps(n), r.rel_error);
    std::fflush(stdout);
  }
  if (!o.json_path.empty()) write_json(o.json_path, o, n, mem, rows);
  return 0;
}
