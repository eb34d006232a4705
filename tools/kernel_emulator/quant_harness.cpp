// Emulated-device dense, qsgd and sign kernels vs the host codecs: payload bytes, residual
// bits, decoded bits, and no byte written outside the buffers. `quant_harness quick` runs a
// reduced grid of bucket sizes and lengths; with no argument, the full grid.
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gradwire/codec.hpp"
#include "kernels/device_codecs.hpp"

using namespace gw;

static uint64_t failures = 0, checks = 0;
#define CHECK(cond, ...)                                          \
  do {                                                            \
    ++checks;                                                     \
    if (!(cond)) {                                                \
      ++failures;                                                 \
      if (failures < 40) {                                        \
        std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
        std::fprintf(stderr, __VA_ARGS__);                        \
        std::fprintf(stderr, "\n");                               \
      }                                                           \
    }                                                             \
  } while (0)

// Memory whose end sits right before a PROT_NONE page (reads or writes past it fault); the
// slack between the aligned start and the end is checked with a sentinel.
struct Fenced {
  uint8_t* base = nullptr;
  size_t map = 0;
  uint8_t* p = nullptr;
  size_t bytes = 0;
  Fenced(size_t n, size_t align, size_t offset = 0) {
    const size_t page = 4096;
    const size_t body = (n + offset + align + page) / page * page;
    map = body + page;
    base = static_cast<uint8_t*>(mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    mprotect(base + body, page, PROT_NONE);
    uintptr_t end = reinterpret_cast<uintptr_t>(base + body);
    uintptr_t start = (end - n - offset) / align * align + offset;
    p = reinterpret_cast<uint8_t*>(start);
    bytes = n;
    std::memset(base, 0xA5, body);
  }
  ~Fenced() { munmap(base, map); }
  bool slack_ok() const {
    for (uint8_t* q = p + bytes; q < base + map - 4096; ++q)
      if (*q != 0xA5) return false;
    return true;
  }
};

static uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float bfloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static std::mt19937_64 rng(12345);

static float random_float(int kind) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const uint32_t r = static_cast<uint32_t>(rng());
  switch (kind) {
    case 0: return u(rng) * 3.0f;
    case 1: {  // specials sprinkled
      switch (r % 23) {
        case 0: return bfloat(0x7fc00000u);
        case 1: return bfloat(0xffc01234u);
        case 2: return 0.0f;
        case 3: return -0.0f;
        case 4: return INFINITY;
        case 5: return -INFINITY;
        case 6: return 3.0e38f;
        case 7: return -3.0e38f;
        case 8: return bfloat(0x00000123u);
        case 9: return bfloat(0x80400000u);
        case 10: return 65520.0f;
        default: return u(rng) * 100.0f;
      }
    }
    case 2: return (r % 3 == 0) ? 0.0f : ((r % 3 == 1) ? -0.0f : 1.5f);  // ties
    case 3: return (r % 4 == 0) ? -2.0f : 2.0f;                          // sign ties
    case 4: return u(rng) * 3.0e38f;                                     // wide buckets
    case 6: {  // the edges of fp16 and bf16 (stochastic rounding's branches), and any bits
      switch (r % 6) {
        case 0: return u(rng) * 6.2e-5f;  // fp16 subnormals
        case 1: return u(rng) * 6e-8f;    // below the smallest fp16 subnormal
        case 2: return u(rng) > 0 ? 65504.0f + 40.0f * u(rng) : -65504.0f - 40.0f * u(rng);  // fp16 overflow
        case 3: return bfloat(0x7f7f0000u | (r >> 16) | ((r & 1u) << 31));                   // bf16's top binade
        case 4: return bfloat(static_cast<uint32_t>(rng()));
        default: return u(rng) * 1000.0f;
      }
    }
    default: return u(rng) * 1e-40f;  // subnormals
  }
}

struct Msg {
  std::vector<uint8_t> bytes;
  wire::Header header() const {
    wire::Header h;
    const uint8_t* b = bytes.data();
    auto u32 = [&](int o) {
      uint32_t v;
      std::memcpy(&v, b + o, 4);
      return v;
    };
    auto u64 = [&](int o) {
      uint64_t v;
      std::memcpy(&v, b + o, 8);
      return v;
    };
    h.codec = static_cast<CodecId>(b[5]);
    h.dtype = static_cast<DType>(b[6]);
    h.flags = b[7];
    h.count = u64(8);
    h.bits = u32(16);
    h.bucket = u32(20);
    h.k = u64(24);
    h.seed = u64(32);
    h.step = u64(40);
    h.payload_bytes = u64(48);
    return h;
  }
};

static kern::DeviceScratch scratch;

// Encodes on host and emulated device (optionally with EF) and compares; then decodes in
// every mode (payload at several alignments) and compares.
static void run_quant(const std::string& spec_text, const std::vector<float>& g, const std::vector<float>& r0,
                      int ef_mode /*0 none, 1 src+res, 2 res only*/, const std::string& what, size_t in_off = 0) {
  auto codec_r = Codec::create(spec_text);
  if (!codec_r) {
    std::fprintf(stderr, "spec %s: %s\n", spec_text.c_str(), codec_r.status().message().c_str());
    std::abort();
  }
  auto& codec = *codec_r;
  const size_t n = g.size();
  const EncodeContext ctx{7, 3};
  // host
  std::vector<float> acc(n);
  for (size_t i = 0; i < n; ++i) acc[i] = ef_mode == 0 ? g[i] : (ef_mode == 1 ? r0[i] + g[i] : r0[i]);
  Msg host;
  host.bytes.resize(codec->max_encoded_bytes(n, DType::kFloat32));
  auto w = codec->encode(acc.data(), n, DType::kFloat32, ctx, host.bytes.data(), host.bytes.size());
  if (!w) {
    std::fprintf(stderr, "host encode: %s\n", w.status().message().c_str());
    std::abort();
  }
  host.bytes.resize(*w);
  if (ef_mode != 0) {
    Status s = decode(host.bytes.data(), host.bytes.size(), acc.data(), n, DType::kFloat32, DecodeMode::kSubtract);
    if (!s) std::abort();
  }
  const wire::Header hh = host.header();
  // device
  Fenced payload(hh.payload_bytes, 8);
  Fenced src(n * 4, 16, in_off), res(n * 4, 16, in_off);
  std::memcpy(src.p, g.data(), n * 4);
  std::memcpy(res.p, r0.data(), n * 4);
  kern::EncodeJob job{};
  job.src = ef_mode == 2 ? nullptr : src.p;
  job.residual = ef_mode == 0 ? nullptr : reinterpret_cast<float*>(res.p);
  job.n = n;
  job.dtype = DType::kFloat32;
  job.spec = &codec->spec();
  job.ctx = ctx;
  job.payload = payload.p;
  job.scratch = &scratch;
  job.stream = nullptr;
  wire::Header dh;
  Result<uint64_t> pb = codec->id() == CodecId::kQsgd ? kern::encode_qsgd(job, dh) : kern::encode_sign(job, dh);
  CHECK(pb.is_ok(), "%s: encode failed", what.c_str());
  if (!pb) return;
  CHECK(*pb == hh.payload_bytes, "%s: payload bytes %" PRIu64 " vs %" PRIu64, what.c_str(), *pb, hh.payload_bytes);
  CHECK(dh.bits == hh.bits && dh.bucket == hh.bucket && dh.flags == hh.flags, "%s: header fields", what.c_str());
  CHECK(payload.slack_ok(), "%s: payload slack written", what.c_str());
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < hh.payload_bytes; ++i)
    if (payload.p[i] != host.bytes[56 + i]) {
      if (!bad) first_bad = i;
      ++bad;
    }
  CHECK(bad == 0, "%s: %zu payload bytes differ, first at %zu (dev %02x host %02x)", what.c_str(), bad, first_bad,
        bad ? payload.p[first_bad] : 0, bad ? host.bytes[56 + first_bad] : 0);
  if (ef_mode != 0) {
    size_t rb = 0, fr = 0;
    const float* dr = reinterpret_cast<const float*>(res.p);
    for (size_t i = 0; i < n; ++i)
      if (fbits(dr[i]) != fbits(acc[i])) {
        if (!rb) fr = i;
        ++rb;
      }
    CHECK(rb == 0, "%s: %zu residuals differ, first at %zu (dev %08x host %08x)", what.c_str(), rb, fr,
          rb ? fbits(dr[fr]) : 0, rb ? fbits(acc[fr]) : 0);
  } else {
    CHECK(std::memcmp(res.p, r0.data(), n * 4) == 0, "%s: residual touched without EF", what.c_str());
  }
  CHECK(std::memcmp(src.p, g.data(), n * 4) == 0, "%s: src touched", what.c_str());
  // decode
  for (int mode = 0; mode < 3; ++mode) {
    for (size_t off : {size_t{0}, size_t{1}, size_t{2}, size_t{4}}) {
      for (size_t doff : {size_t{0}, size_t{4}}) {
        std::vector<float> d0(n);
        for (auto& v : d0) v = random_float(0);
        std::vector<float> hd = d0;
        Status s =
            decode(host.bytes.data(), host.bytes.size(), hd.data(), n, DType::kFloat32, static_cast<DecodeMode>(mode));
        if (!s) std::abort();
        Fenced pl(hh.payload_bytes, 8, off);
        std::memcpy(pl.p, host.bytes.data() + 56, hh.payload_bytes);
        Fenced dst(n * 4, 16, doff);
        std::memcpy(dst.p, d0.data(), n * 4);
        kern::DecodeJob dj{&hh, pl.p, dst.p, DType::kFloat32, static_cast<DecodeMode>(mode), nullptr};
        Status ds = codec->id() == CodecId::kQsgd ? kern::decode_qsgd(dj) : kern::decode_sign(dj);
        CHECK(ds.is_ok(), "%s: decode failed", what.c_str());
        size_t db = 0, fd = 0;
        const float* dd = reinterpret_cast<const float*>(dst.p);
        for (size_t i = 0; i < n; ++i)
          if (fbits(dd[i]) != fbits(hd[i])) {
            if (!db) fd = i;
            ++db;
          }
        CHECK(db == 0, "%s: decode mode %d off %zu doff %zu: %zu differ, first %zu (dev %08x host %08x)", what.c_str(),
              mode, off, doff, db, fd, db ? fbits(dd[fd]) : 0, db ? fbits(hd[fd]) : 0);
        CHECK(dst.slack_ok(), "%s: dst slack", what.c_str());
      }
      if (n > 300) break;
    }
  }
}

static void run_dense(const std::string& spec_text, DType in_type, const std::vector<uint32_t>& raw,
                      const std::vector<float>& r0, int ef_mode, const std::string& what) {
  auto codec_r = Codec::create(spec_text);
  auto& codec = *codec_r;
  const size_t n = raw.size();
  const size_t isz = dtype_size(in_type);
  std::vector<uint8_t> src_bytes(n * isz);
  for (size_t i = 0; i < n; ++i) std::memcpy(src_bytes.data() + i * isz, &raw[i], isz);
  const EncodeContext ctx{(uint64_t{1} << 32) + 1, 3};  // keys stochastic rounding's stream
  Msg host;
  host.bytes.resize(codec->max_encoded_bytes(n, in_type));
  std::vector<float> acc(n);
  Result<size_t> w = size_t{0};
  if (ef_mode == 0) {
    w = codec->encode(src_bytes.data(), n, in_type, ctx, host.bytes.data(), host.bytes.size());
  } else {
    const float* g = reinterpret_cast<const float*>(src_bytes.data());
    for (size_t i = 0; i < n; ++i) acc[i] = ef_mode == 1 ? r0[i] + g[i] : r0[i];
    w = codec->encode(acc.data(), n, DType::kFloat32, ctx, host.bytes.data(), host.bytes.size());
    if (w) {
      Status s = decode(host.bytes.data(), *w, acc.data(), n, DType::kFloat32, DecodeMode::kSubtract);
      if (!s) std::abort();
    }
  }
  if (!w) {
    std::fprintf(stderr, "host encode: %s\n", w.status().message().c_str());
    std::abort();
  }
  host.bytes.resize(*w);
  const wire::Header hh = host.header();
  for (size_t soff : {size_t{0}, size_t{4}}) {
    if (ef_mode == 0 && soff == 4 && isz == 2) continue;
    Fenced payload(hh.payload_bytes, 8);
    Fenced src(n * isz, 16, soff), res(n * 4, 16, soff);
    std::memcpy(src.p, src_bytes.data(), n * isz);
    std::memcpy(res.p, r0.data(), n * 4);
    kern::EncodeJob job{};
    job.src = ef_mode == 2 ? nullptr : src.p;
    job.residual = ef_mode == 0 ? nullptr : reinterpret_cast<float*>(res.p);
    job.n = n;
    job.dtype = in_type;
    job.spec = &codec->spec();
    job.ctx = ctx;
    job.payload = payload.p;
    job.scratch = &scratch;
    wire::Header dh;
    Result<uint64_t> pb = kern::encode_dense(job, dh);
    CHECK(pb.is_ok() && *pb == hh.payload_bytes, "%s: dense payload size", what.c_str());
    CHECK(std::memcmp(payload.p, host.bytes.data() + 56, hh.payload_bytes) == 0, "%s: dense payload differs",
          what.c_str());
    CHECK(payload.slack_ok(), "%s: slack", what.c_str());
    if (ef_mode != 0) {
      size_t rb = 0;
      const float* dr = reinterpret_cast<const float*>(res.p);
      for (size_t i = 0; i < n; ++i) rb += fbits(dr[i]) != fbits(acc[i]);
      CHECK(rb == 0, "%s: dense residual %zu differ", what.c_str(), rb);
    }
  }
  // decode into each dtype and mode
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const size_t dsz = dtype_size(dt);
    for (int mode = 0; mode < 3; ++mode) {
      for (size_t off : {size_t{0}, size_t{1}, size_t{2}}) {
        std::vector<uint8_t> d0(n * dsz);
        for (auto& b : d0) b = static_cast<uint8_t>(rng());
        // keep dst values sane-ish: random bytes are fine (any bits)
        std::vector<uint8_t> hd = d0;
        Status s = decode(host.bytes.data(), host.bytes.size(), hd.data(), n, dt, static_cast<DecodeMode>(mode));
        if (!s) {
          std::fprintf(stderr, "host decode: %s\n", s.message().c_str());
          std::abort();
        }
        Fenced pl(hh.payload_bytes, 8, off);
        std::memcpy(pl.p, host.bytes.data() + 56, hh.payload_bytes);
        Fenced dst(n * dsz, 16, off == 1 ? dsz : 0);
        std::memcpy(dst.p, d0.data(), n * dsz);
        kern::DecodeJob dj{&hh, pl.p, dst.p, dt, static_cast<DecodeMode>(mode), nullptr};
        Status ds = kern::decode_dense(dj);
        CHECK(ds.is_ok(), "%s: dense decode failed", what.c_str());
        size_t fi = n;
        auto is_nan = [&](uint32_t b) {
          return dsz == 4 ? (b & 0x7fffffffu) > 0x7f800000u
                          : (dt == DType::kFloat16 ? (b & 0x7fffu) > 0x7c00u : (b & 0x7fffu) > 0x7f80u);
        };
        for (size_t i = 0; i < n && fi == n; ++i) {
          uint32_t a = 0, b = 0;
          std::memcpy(&a, dst.p + i * dsz, dsz);
          std::memcpy(&b, hd.data() + i * dsz, dsz);
          if (a != b && !(is_nan(a) && is_nan(b))) fi = i;
        }
        uint32_t dv = 0, hv = 0, ov = 0, pv = 0;
        if (fi < n) {
          std::memcpy(&dv, dst.p + fi * dsz, dsz);
          std::memcpy(&hv, hd.data() + fi * dsz, dsz);
          std::memcpy(&ov, d0.data() + fi * dsz, dsz);
          const size_t psz = hh.payload_bytes / n;
          std::memcpy(&pv, host.bytes.data() + 56 + fi * psz, psz);
        }
        CHECK(fi == n, "%s: dense decode dt %d mode %d off %zu differs at %zu: dev %x host %x dst0 %x payload %x",
              what.c_str(), int(dt), mode, off, fi, dv, hv, ov, pv);
        CHECK(dst.slack_ok(), "%s: dense dst slack", what.c_str());
      }
    }
  }
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  // dense
  for (const char* spec : {"none", "fp16", "bf16", "fp16:rounding=stochastic,seed=77", "bf16:rounding=stochastic"}) {
    for (DType in : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (size_t n : {1, 2, 3, 4, 5, 7, 8, 9, 63, 100, 1027}) {
        for (int kind = 0; kind < 4; ++kind) {
          std::vector<uint32_t> raw(n);
          for (auto& v : raw) {
            if (in == DType::kFloat32)
              v = fbits(random_float(kind == 0 ? 0 : (kind == 1 ? 1 : (kind == 2 ? 5 : 6))));
            else
              v = static_cast<uint32_t>(rng()) & 0xffffu;
          }
          std::vector<float> r0(n);
          for (auto& v : r0) v = random_float(0);
          for (int ef = 0; ef < 3; ++ef) {
            if (ef != 0 && in != DType::kFloat32) continue;
            run_dense(spec, in, raw, r0, ef,
                      std::string(spec) + " in" + std::to_string(int(in)) + " n" + std::to_string(n) + " kind" +
                          std::to_string(kind) + " ef" + std::to_string(ef));
          }
        }
      }
    }
  }
  std::fprintf(stderr, "dense done: %" PRIu64 " checks, %" PRIu64 " failures\n", checks, failures);

  std::vector<uint32_t> buckets = {1,  2,   3,   4,   5,   7,   8,    13,   31,   32,   33,
                                   64, 100, 128, 500, 512, 513, 1000, 2048, 2049, 3000, 5000};
  std::vector<size_t> ns = {1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 100, 127, 128, 129, 500, 513, 1000, 2049, 4097, 7000};
  if (quick) {
    buckets = {1, 3, 32, 33, 512, 513, 3000};
    ns = {1, 7, 33, 129, 1000, 7000};
  }
  std::vector<std::string> codecs;
  for (int bits : {1, 2, 4, 8})
    for (const char* r : {"stochastic", "nearest"})
      codecs.push_back("qsgd:bits=" + std::to_string(bits) + ",rounding=" + r + ",seed=99,bucket=");
  codecs.push_back("sign:bucket=");
  int iter = 0;
  for (uint32_t bucket : buckets) {
    for (size_t n : ns) {
      if (n / bucket > 400) continue;
      for (const auto& c : codecs) {
        ++iter;
        emu::g_sms = 1 + iter % 3;
        const int kind = iter % 6;
        std::vector<float> g(n), r0(n);
        for (auto& v : g) v = random_float(kind);
        for (auto& v : r0) v = random_float(kind == 4 ? 4 : 0) * 0.5f;
        if (iter % 7 == 0 && n > 0) g[0] = bfloat(0x7fc00000u), r0[0] = 0.0f;  // NaN first element
        const int ef = iter % 3;
        const size_t in_off = iter % 5 == 0 ? 4 : (iter % 5 == 1 ? 8 : 0);
        run_quant(c + std::to_string(bucket), g, r0, ef,
                  c + std::to_string(bucket) + " n=" + std::to_string(n) + " kind=" + std::to_string(kind) +
                      " ef=" + std::to_string(ef) + " off=" + std::to_string(in_off),
                  in_off);
      }
    }
    std::fprintf(stderr, "bucket %u done: %" PRIu64 " checks, %" PRIu64 " failures, %ld launches\n", bucket, checks,
                 failures, emu::g_launches);
  }
  // Large buckets (above 1024 elements, a multiple of 128): qsgd spreads them over the
  // device when they are too few for a warp each (many SMs here), and keeps a warp per
  // bucket when they fill it (one SM, 40 buckets); sign always keeps a warp per bucket. Both
  // against the host, with NaN first elements and every EF mode.
  struct Large {
    uint32_t bucket;
    size_t n;
    int sms;
  };
  std::vector<Large> large = {
      {1152, 1152 * 3 + 5, 64},    {1152, 1152 * 40 + 5, 1},      {4096, 4096, 64},
      {4096, 4096 * 2 + 4097, 64}, {65536, 65536 * 2 + 1001, 64}, {1u << 18, (1u << 18) + 77, 64},
      {1u << 18, 1u << 19, 2}};
  if (quick) large = {{1152, 1152 * 3 + 5, 64}, {1152, 1152 * 40 + 5, 1}, {65536, 65536 + 1001, 64}};
  for (const Large& l : large) {
    for (const auto& c : codecs) {
      ++iter;
      emu::g_sms = l.sms;
      const int kind = iter % 6;
      std::vector<float> g(l.n), r0(l.n);
      for (auto& v : g) v = random_float(kind);
      for (auto& v : r0) v = random_float(kind == 4 ? 4 : 0) * 0.5f;
      if (iter % 2 == 0) g[0] = bfloat(0x7fc00000u), r0[0] = 0.0f;    // NaN first element
      if (l.n > l.bucket + 9) g[l.bucket + 9] = bfloat(0xffc00001u);  // a NaN inside a bucket
      const int ef = iter % 3;
      const size_t in_off = iter % 5 == 0 ? 4 : 0;
      const std::string spec = c + std::to_string(l.bucket);
      run_quant(spec, g, r0, ef,
                spec + " n=" + std::to_string(l.n) + " sms=" + std::to_string(l.sms) + " kind=" + std::to_string(kind) +
                    " ef=" + std::to_string(ef) + " off=" + std::to_string(in_off),
                in_off);
    }
    std::fprintf(stderr, "large bucket %u n=%zu done: %" PRIu64 " checks, %" PRIu64 " failures, %ld launches\n",
                 l.bucket, l.n, checks, failures, emu::g_launches);
  }
  std::printf("%" PRIu64 " checks, %" PRIu64 " failures\n", checks, failures);
  return failures != 0;
}
