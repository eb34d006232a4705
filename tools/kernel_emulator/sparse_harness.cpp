// Emulated-device radix select, top-k, dgc, random-k and sparse decode kernels vs the host
// codecs: message bytes, residual bits, decoded bits, forged-index rejection. `sparse_harness
// quick` skips the two largest lengths; with no argument, the full set.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compressors/sparse_layout.hpp"
#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "kernels/device_codecs.hpp"
#include "kernels/radix_select.cuh"

using namespace gw;

static int failures = 0;
static int checks = 0;

std::vector<float> make_data(size_t n, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi(3.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    float t = normal(rng) / std::sqrt(chi(rng) / 3.0f) * 1e-3f;
    switch (kind) {
      case 0: break;                                                           // heavy tailed
      case 1: t = 0.0f; break;                                                 // all zero
      case 2: t = (rng() & 1) ? 0.5f : -0.5f; break;                           // all the same magnitude
      case 3: t = static_cast<float>(static_cast<int>(rng() % 7) - 3); break;  // few values, -0/+0 via ...
      case 4: {                                                                // specials
        const uint64_t r = rng() % 40;
        if (r == 0)
          t = std::numeric_limits<float>::infinity();
        else if (r == 1)
          t = -std::numeric_limits<float>::infinity();
        else if (r == 2)
          t = std::numeric_limits<float>::quiet_NaN();
        else if (r == 3)
          t = -0.0f;
        else if (r == 4)
          t = 0.0f;
        else if (r == 5) {
          uint32_t u = 0x7fa00001u + static_cast<uint32_t>(rng() % 5);
          std::memcpy(&t, &u, 4);
        }
        break;
      }
      case 5: t = 1.0f + static_cast<float>(rng() % 1000) * 1e-4f; break;  // one top bin, many dups
      case 6:
        t = (rng() % 2) ? -0.0f : 0.0f;
        if (rng() % 50 == 0) t = normal(rng);
        break;  // mostly +-0
      case 7: {
        const float v = 1.0f + static_cast<float>(rng() % (1u << 20)) * std::ldexp(1.0f, -23);
        t = (rng() & 1) ? v : -v;
        break;
      }  // one top bin, spread mid/low
    }
    x[i] = t;
  }
  return x;
}

bool same_bits(const float* a, const float* b, size_t n, size_t* where) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, 4) != 0) {
      *where = i;
      return false;
    }
  return true;
}

// Both NaN (any payloads) or the same bits: the GPU's arithmetic makes the canonical NaN where
// the host keeps a payload, which is the one difference a message's values and the residual
// may show (docs/architecture.md). Indices and every other byte must match exactly.
bool same_or_nan(const void* a, const void* b) {
  float x, y;
  std::memcpy(&x, a, 4);
  std::memcpy(&y, b, 4);
  return std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y));
}

bool same_bits_or_nan(const float* a, const float* b, size_t n, size_t* where) {
  for (size_t i = 0; i < n; ++i)
    if (!same_or_nan(a + i, b + i)) {
      *where = i;
      return false;
    }
  return true;
}

// The first byte at which two messages of len bytes differ (len when none), the values (the
// payload's last 4 k bytes) compared as floats with same_or_nan.
size_t first_difference(const uint8_t* a, const uint8_t* b, size_t len, const wire::Header& h) {
  const size_t values_at = len - 4 * static_cast<size_t>(h.k);
  for (size_t at = 0; at < len; ++at) {
    if (at >= values_at && (at - values_at) % 4 == 0 && at + 4 <= len) {
      if (!same_or_nan(a + at, b + at)) return at;
      at += 3;
      continue;
    }
    if (a[at] != b[at]) return at;
  }
  return len;
}

// A device encode, which must only enqueue work: any call that waits for the device fails.
// For dgc, whose count only the device knows, h gets k and the payload length from *kept (what
// the header kernel writes on a real device).
Result<uint64_t> device_encode(const kern::EncodeJob& job, wire::Header& h) {
  emu::HotPath hot("a device encode");
  switch (h.codec) {
    case CodecId::kTopk: return kern::encode_topk(job, h);
    case CodecId::kRandomk: return kern::encode_randomk(job, h);
    case CodecId::kDgc: {
      const uint64_t* kept = nullptr;
      Result<uint64_t> r = kern::encode_dgc(job, h, &kept);
      if (!r || kept == nullptr) return r;
      h.k = *kept;
      return detail::sparse_payload_bytes(job.n, *kept);
    }
    default: return internal_error("not a sparse codec");
  }
}

// ef: 0 none, 1 src + residual, 2 accumulated (src null).
void check(const std::string& spec_text, size_t n, int kind, int ef, uint64_t step, uint32_t rank,
           kern::DeviceScratch& scratch) {
  ++checks;
  char label[256];
  std::snprintf(label, sizeof label, "%s n=%zu kind=%d ef=%d step=%llu rank=%u", spec_text.c_str(), n, kind, ef,
                (unsigned long long)step, rank);
  auto spec = CodecSpec::parse(spec_text);
  if (!spec) {
    std::printf("bad spec %s\n", spec_text.c_str());
    ++failures;
    return;
  }
  auto codec = Codec::create(*spec).value();
  std::vector<float> g = make_data(n, kind, n * 31 + kind * 7 + step);
  std::vector<float> r0 = make_data(n, kind == 1 ? 0 : kind, n * 17 + 3 + step);
  const size_t cap = codec->max_encoded_bytes(n, DType::kFloat32);
  std::vector<uint8_t> host(cap);
  std::vector<float> host_res;
  EncodeContext ctx{step, rank};
  size_t host_len = 0;
  if (ef == 0) {
    auto r = codec->encode(g.data(), n, DType::kFloat32, ctx, host.data(), cap);
    if (!r) {
      std::printf("host encode failed %s: %s\n", label, r.status().to_string().c_str());
      ++failures;
      return;
    }
    host_len = *r;
  } else {
    host_res = r0;
    if (ef == 1)
      for (size_t i = 0; i < n; ++i) host_res[i] += g[i];
    else
      for (size_t i = 0; i < n; ++i) host_res[i] = r0[i] + g[i];
    auto r = codec->encode_accumulated(host_res.data(), n, ctx, host.data(), cap);
    if (!r) {
      std::printf("host encode failed %s\n", label);
      ++failures;
      return;
    }
    host_len = *r;
  }
  // device
  std::vector<float> dsrc = g;
  std::vector<float> dres;
  if (ef == 1) dres = r0;
  if (ef == 2) {
    dres.resize(n);
    for (size_t i = 0; i < n; ++i) dres[i] = r0[i] + g[i];
  }
#ifdef WIDE_TEST
  std::vector<uint8_t> dev(2 * cap + 64, 0xCD);
#else
  std::vector<uint8_t> dev(cap + 64, 0xCD);
#endif
  kern::EncodeJob job{};
  job.src = ef == 2 ? nullptr : dsrc.data();
  job.residual = ef == 0 ? nullptr : dres.data();
  job.n = n;
  job.dtype = DType::kFloat32;
  job.spec = &*spec;
  job.ctx = ctx;
  job.payload = dev.data() + wire::kHeaderBytes;
  job.scratch = &scratch;
  job.stream = nullptr;
  wire::Header h;
  h.codec = spec->id;
  h.count = n;
  auto pr = device_encode(job, h);
  if (!pr) {
    std::printf("FAIL %s: device encode: %s\n", label, pr.status().to_string().c_str());
    ++failures;
    return;
  }
  h.payload_bytes = *pr;
#ifdef WIDE_TEST
  if (spec->id != CodecId::kRandomk) {
    std::vector<uint8_t> narrow(h.k * 8);
    for (uint64_t i = 0; i < h.k; ++i) {
      uint64_t v;
      std::memcpy(&v, job.payload + 8 * i, 8);
      const uint32_t u = static_cast<uint32_t>(v);
      std::memcpy(narrow.data() + 4 * i, &u, 4);
      std::memcpy(narrow.data() + 4 * h.k + 4 * i, job.payload + 8 * h.k + 4 * i, 4);
    }
    std::memcpy(job.payload, narrow.data(), narrow.size());
    h.payload_bytes = h.k * 8;
    std::memset(job.payload + h.k * 8, 0xCD, h.k * 4);
  }
  const size_t dev_len = wire::kHeaderBytes + h.payload_bytes;
  wire::write_header(h, dev.data());
  if (dev_len > cap) {
    std::printf("FAIL %s: too long\n", label);
    ++failures;
    return;
  }
#else
  wire::write_header(h, dev.data());
  const size_t dev_len = wire::kHeaderBytes + *pr;
#endif
  bool ok = true;
  const size_t differs = dev_len == host_len ? first_difference(dev.data(), host.data(), host_len, h) : 0;
  if (dev_len != host_len || differs != host_len) {
    std::printf("FAIL %s: message differs (host %zu bytes, device %zu), first at byte %zu\n", label, host_len, dev_len,
                differs);
    ok = false;
  }
  for (size_t i = dev_len; i < dev.size(); ++i)
    if (dev[i] != 0xCD) {
      std::printf("FAIL %s: wrote past the message at %zu\n", label, i);
      ok = false;
      break;
    }
  if (ef != 0) {
    size_t at = 0;
    if (!same_bits_or_nan(host_res.data(), dres.data(), n, &at)) {
      std::printf("FAIL %s: residual differs at %zu (host %g, device %g)\n", label, at, host_res[at], dres[at]);
      ok = false;
    }
  }
  if (ef != 1) {
    size_t at = 0;
    if (!same_bits(g.data(), dsrc.data(), n, &at)) {
      std::printf("FAIL %s: src modified\n", label);
      ok = false;
    }
  }
  if (!ok) {
    ++failures;
    return;
  }

  // Decoding the same message on both sides, every mode.
#ifdef WIDE_TEST
  if (false) {
#else
  if (spec->id == CodecId::kTopk || spec->id == CodecId::kDgc || spec->id == CodecId::kRandomk) {
#endif
    auto hdr = wire::read_header(host.data(), host_len);
    if (!hdr) {
      std::printf("FAIL %s: read_header\n", label);
      ++failures;
      return;
    }
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<float> hd = make_data(n, 0, 99 + n), dd = hd;
      auto st = gw::decode(host.data(), host_len, hd.data(), n, DType::kFloat32, static_cast<DecodeMode>(mode));
      if (!st.is_ok()) {
        std::printf("FAIL %s: host decode\n", label);
        ++failures;
        return;
      }
      // misaligned copy of the message too
      std::vector<uint8_t> shifted(host_len + 8);
      const int shift = mode == 2 ? 1 : (mode == 1 ? 4 : 0);
      std::memcpy(shifted.data() + shift, host.data(), host_len);
      kern::DecodeJob dj{&*hdr,
                         shifted.data() + shift + wire::kHeaderBytes,
                         dd.data(),
                         DType::kFloat32,
                         static_cast<DecodeMode>(mode),
                         nullptr};
      Status ds = spec->id == CodecId::kRandomk ? kern::decode_randomk(dj) : kern::decode_sparse(dj);
      size_t at = 0;
      if (!ds.is_ok() || !same_bits_or_nan(hd.data(), dd.data(), n, &at)) {
        std::printf("FAIL %s: decode mode %d differs at %zu\n", label, mode, at);
        ++failures;
        return;
      }
      if (spec->id != CodecId::kRandomk) {
        uint32_t bad = 0;
        Status cs = kern::check_sparse_indices(*hdr, shifted.data() + shift + wire::kHeaderBytes, &bad, nullptr);
        if (!cs.is_ok() || bad != 0) {
          std::printf("FAIL %s: check flags a valid message\n", label);
          ++failures;
          return;
        }
      }
    }
  }
}

void check_index_checker() {
  // Corrupt messages: out of range, repeated, decreasing.
  for (int width : {4, 8}) {
    wire::Header h;
    h.count = width == 4 ? 100 : (uint64_t{1} << 33);
    h.k = 5;
    std::vector<uint64_t> good = {1, 5, 9, 50, 99};
    if (width == 8) good = {1, 5, uint64_t{1} << 32, (uint64_t{1} << 32) + 7, (uint64_t{1} << 33) - 1};
    auto run = [&](std::vector<uint64_t> idx, int shift) {
      std::vector<uint8_t> p(idx.size() * (width + 4) + 8);
      for (size_t i = 0; i < idx.size(); ++i) std::memcpy(p.data() + shift + i * width, &idx[i], width);
      uint32_t bad = 0;
      auto st = kern::check_sparse_indices(h, p.data() + shift, &bad, nullptr);
      return st.is_ok() ? bad : 99u;
    };
    ++checks;
    if (run(good, 0) != 0 || run(good, 4) != 0 || run(good, 3) != 0) {
      std::printf("FAIL checker flags good (w%d)\n", width);
      ++failures;
    }
    auto b1 = good;
    b1[4] = h.count;
    auto b2 = good;
    b2[2] = b2[1];
    auto b3 = good;
    b3[0] = b3[1] + 1;
    auto b4 = good;
    b4[3] = ~uint64_t{0} >> (width == 4 ? 32 : 0);
    for (auto& b : {b1, b2, b3, b4}) {
      ++checks;
      if (run(b, 0) != 1 || run(b, 1) != 1) {
        std::printf("FAIL checker misses a bad index (w%d)\n", width);
        ++failures;
      }
    }
  }
}

// 8-byte indices: a message over 2^33 elements, applied where only small indices land.
void check_wide_decode() {
  for (int shift : {0, 4, 3}) {
    for (int mode = 1; mode < 3; ++mode) {
      ++checks;
      wire::Header h;
      h.codec = CodecId::kTopk;
      h.count = uint64_t{1} << 33;
      h.k = 3;
      const uint64_t idx[3] = {1, 5, 9};
      const float val[3] = {0.5f, -2.0f, 3.25f};
      std::vector<uint8_t> p(3 * 12 + 8);
      std::memcpy(p.data() + shift, idx, 24);
      std::memcpy(p.data() + shift + 24, val, 12);
      std::vector<float> dst(16, 1.0f), want(16, 1.0f);
      for (int i = 0; i < 3; ++i) want[idx[i]] = mode == 1 ? 1.0f + val[i] : 1.0f - val[i];
      kern::DecodeJob dj{&h, p.data() + shift, dst.data(), DType::kFloat32, static_cast<DecodeMode>(mode), nullptr};
      size_t at = 0;
      if (!kern::decode_sparse(dj).is_ok() || !same_bits(dst.data(), want.data(), 16, &at)) {
        std::printf("FAIL wide decode shift %d mode %d\n", shift, mode);
        ++failures;
      }
    }
  }
}

// select_topk<uint64_t> must give the same choice as <uint32_t>.
void check_wide_index(kern::DeviceScratch& scratch) {
  for (size_t n : {7ul, 5000ul, 70000ul}) {
    for (int kind : {0, 3, 5}) {
      ++checks;
      std::vector<float> x = make_data(n, kind, n + kind);
      const uint64_t k = n / 10 + 1;
      std::vector<uint32_t> i32(k);
      std::vector<uint64_t> i64(k);
      std::vector<float> v32(k), v64(k);
      kern::SelectArray in{x.data(), nullptr, n};
      auto s1 = kern::select_topk<uint32_t>(in, k, kern::SparseOut<uint32_t>{i32.data(), v32.data(), nullptr}, scratch,
                                            nullptr);
      auto s2 = kern::select_topk<uint64_t>(in, k, kern::SparseOut<uint64_t>{i64.data(), v64.data(), nullptr}, scratch,
                                            nullptr);
      bool ok = s1.is_ok() && s2.is_ok();
      for (size_t i = 0; ok && i < k; ++i) ok = i32[i] == i64[i] && std::memcmp(&v32[i], &v64[i], 4) == 0;
      if (!ok) {
        std::printf("FAIL wide index n=%zu kind=%d\n", n, kind);
        ++failures;
      }
    }
  }
}

// Several steps of error feedback: the residual carries over on both sides.
void check_loop(const std::string& spec_text, size_t n, kern::DeviceScratch& scratch) {
#ifdef WIDE_TEST
  return;
#endif
  ++checks;
  auto spec = CodecSpec::parse(spec_text).value();
  auto codec = Codec::create(spec).value();
  const size_t cap = codec->max_encoded_bytes(n, DType::kFloat32);
  std::vector<float> hres(n, 0.0f), dres(n, 0.0f);
  for (uint64_t step = 0; step < 5; ++step) {
    std::vector<float> g = make_data(n, 0, 1000 + step);
    for (size_t i = 0; i < n; ++i) hres[i] += g[i];
    std::vector<uint8_t> host(cap), dev(cap);
    EncodeContext ctx{step, 2};
    const size_t hl = codec->encode_accumulated(hres.data(), n, ctx, host.data(), cap).value();
    kern::EncodeJob job{g.data(), dres.data(), n, DType::kFloat32, &spec, ctx, dev.data() + wire::kHeaderBytes,
                        &scratch, nullptr};
    wire::Header h;
    h.codec = spec.id;
    h.count = n;
    auto pr = device_encode(job, h);
    h.payload_bytes = pr.value();
    wire::write_header(h, dev.data());
    size_t at = 0;
    if (hl != wire::kHeaderBytes + *pr || std::memcmp(host.data(), dev.data(), hl) != 0 ||
        !same_bits(hres.data(), dres.data(), n, &at)) {
      std::printf("FAIL loop %s n=%zu step %llu\n", spec_text.c_str(), n, (unsigned long long)step);
      ++failures;
      return;
    }
  }
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  emu::g_canonical_nan = true;  // the device's adds make the canonical NaN, as a GPU's do
  kern::DeviceScratch scratch;
  check_index_checker();
  check_wide_decode();
  check_wide_index(scratch);
  for (const char* sp :
       {"topk:ratio=0.01", "dgc:ratio=0.01", "dgc:ratio=0.001,sample=0.05", "randomk:ratio=0.05,seed=9", "topk:k=7"})
    for (size_t n : {100ul, 5000ul, 20000ul}) check_loop(sp, n, scratch);
  std::printf("loops done, %d checks, %d failures\n", checks, failures);
  std::vector<size_t> sizes = {1, 2, 7, 31, 32, 33, 100, 1000, 1023, 1024, 1025, 4095, 4096, 4097, 10000, 33333};
  if (!quick) {
    sizes.push_back(70001);
    sizes.push_back(140000);
  }
  const std::vector<std::string> specs = {"topk:k=1",
                                          "topk:ratio=0.01",
                                          "topk:ratio=0.3",
                                          "topk:k=1000000000",
                                          "dgc:ratio=0.001",
                                          "dgc:ratio=0.01,seed=5",
                                          "dgc:k=1",
                                          "dgc:ratio=0.2,sample=0.001",
                                          "dgc:ratio=0.05,sample=1",
                                          "dgc:ratio=0.24",
                                          "randomk:ratio=0.01,seed=3",
                                          "randomk:k=1",
                                          "randomk:ratio=1"};
  for (size_t n : sizes) {
    for (const auto& s : specs) {
      for (int kind = 0; kind < 8; ++kind) {
        for (int ef = 0; ef < 3; ++ef) {
          if (n > 40000 && (ef == 2 || (kind != 0 && kind != 5 && kind != 7 && kind != 1))) continue;
          check(s, n, kind, ef, 3 + kind, static_cast<uint32_t>(ef), scratch);
        }
      }
    }
    std::printf("n=%zu done, %d checks, %d failures\n", n, checks, failures);
    std::fflush(stdout);
  }
  std::printf("%d checks, %d failures, %ld scratch allocations\n", checks, failures, emu::g_allocs);
  return failures == 0 ? 0 : 1;
}
