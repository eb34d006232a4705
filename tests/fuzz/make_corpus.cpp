// Writes the fuzzers' seed corpora: real messages from every codec, a few sizes and input
// types, some with NaN, infinities, -0 and subnormals, plus hand-built messages the encoders
// cannot produce cheaply (a sparse message with 64-bit indices). The output is committed under
// tests/fuzz/corpus; regenerate it with
//   build-fuzz/tests/fuzz/make_corpus tests/fuzz/corpus
// message_info/ gets the bare messages, decode/ the same ones behind fuzz_decode's 3 control
// bytes (mode, destination dtype, count).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gradwire/codec.hpp"

namespace {

using Bytes = std::vector<uint8_t>;

struct Lcg {
  uint64_t s;
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 32);
  }
  float uniform() { return static_cast<float>(next() >> 8) * (1.0f / 16777216.0f); }
};

std::vector<float> floats(size_t n, uint64_t seed, bool specials) {
  Lcg g{seed};
  std::vector<float> x(n);
  for (auto& v : x) v = (g.uniform() - 0.5f) * 4.0f;
  if (specials) {
    const float inf = std::numeric_limits<float>::infinity();
    const float vals[] = {std::numeric_limits<float>::quiet_NaN(), inf, -inf, -0.0f, 1e-41f, 7e4f};
    for (size_t i = 0; i < 6 && i * 7 + 3 < n; ++i) x[i * 7 + 3] = vals[i];
  }
  return x;
}

// Half-precision inputs as raw bits: finite values of moderate magnitude.
std::vector<uint16_t> halves(size_t n, uint64_t seed) {
  Lcg g{seed};
  std::vector<uint16_t> x(n);
  for (auto& v : x)
    v = static_cast<uint16_t>(0x3000 + (g.next() % 0x1800)) | static_cast<uint16_t>((g.next() & 1) << 15);
  return x;
}

bool write_file(const std::string& path, const Bytes& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  return std::fclose(f) == 0 && ok;
}

struct Writer {
  std::string dir;
  int failures = 0;
  int written = 0;

  void emit(const std::string& name, const Bytes& msg, uint8_t ctl) {
    Bytes dec{ctl, 0, 0};
    dec.insert(dec.end(), msg.begin(), msg.end());
    if (!write_file(dir + "/message_info/" + name, msg) || !write_file(dir + "/decode/" + name, dec)) {
      std::fprintf(stderr, "make_corpus: cannot write %s under %s\n", name.c_str(), dir.c_str());
      ++failures;
      return;
    }
    ++written;
  }
};

Bytes encode(const std::string& spec, const void* src, size_t n, gw::DType dtype, uint64_t step) {
  auto codec = gw::Codec::create(spec);
  if (!codec.is_ok()) {
    std::fprintf(stderr, "make_corpus: %s: %s\n", spec.c_str(), codec.status().to_string().c_str());
    std::exit(1);
  }
  Bytes out((*codec)->max_encoded_bytes(n, dtype));
  auto w = (*codec)->encode(src, n, dtype, gw::EncodeContext{step, 1}, out.data(), out.size());
  if (!w.is_ok()) {
    std::fprintf(stderr, "make_corpus: encode %s: %s\n", spec.c_str(), w.status().to_string().c_str());
    std::exit(1);
  }
  out.resize(*w);
  return out;
}

void put_le(Bytes& b, size_t off, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[off + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

// A topk message over 2^32 + 5 elements (so 64-bit indices), per docs/wire-format.md.
Bytes wide_topk() {
  const uint64_t n = (uint64_t{1} << 32) + 5, k = 3;
  const uint64_t idx[k] = {2, uint64_t{1} << 32, n - 1};
  Bytes m(56 + k * 12, 0);
  const char magic[4] = {'G', 'W', 'R', 'E'};
  std::memcpy(m.data(), magic, 4);
  m[4] = 1;
  m[5] = 5;  // topk
  m[6] = 1;  // f32
  put_le(m, 8, n, 8);
  put_le(m, 24, k, 8);
  put_le(m, 48, k * 12, 8);
  for (uint64_t i = 0; i < k; ++i) {
    put_le(m, 56 + 8 * i, idx[i], 8);
    const float v = 1.5f - static_cast<float>(i);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    put_le(m, 56 + 8 * k + 4 * i, bits, 4);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR   (writes OUTDIR/decode and OUTDIR/message_info)\n", argv[0]);
    return 2;
  }
  Writer w{argv[1]};
  // Control byte: bits 0-1 mode, bits 2-3 destination dtype (0 f32, 2 f16, 3 bf16).
  const uint8_t kOverwriteF32 = 0x00, kAccumulateF32 = 0x01, kSubtractF32 = 0x02;
  const uint8_t kOverwriteF16 = 0x08, kAccumulateBf16 = 0x0D;

  const char* lossy[] = {"qsgd:bits=1,bucket=64",
                         "qsgd:bits=2,bucket=128",
                         "qsgd:bits=4,bucket=512",
                         "qsgd:bits=8,bucket=32",
                         "qsgd:bits=4,bucket=100,rounding=nearest",
                         "sign:bucket=64",
                         "sign:bucket=100",
                         "topk:ratio=0.1",
                         "topk:k=5",
                         "dgc:ratio=0.05",
                         "randomk:ratio=0.1,seed=7"};
  const size_t sizes[] = {37, 300};
  int variant = 0;
  for (const char* spec : lossy) {
    for (size_t n : sizes) {
      const auto x = floats(n, 1000 + n, n == 300);
      const Bytes m = encode(spec, x.data(), n, gw::DType::kFloat32, 3);
      std::string name = spec;
      for (char& ch : name) {
        if (ch == ':' || ch == ',' || ch == '=') ch = '_';
      }
      const uint8_t ctl[3] = {kOverwriteF32, kAccumulateF32, kSubtractF32};
      w.emit(name + "-n" + std::to_string(n), m, ctl[variant++ % 3]);
    }
  }
  // Empty messages.
  for (const char* spec : {"none", "qsgd:bits=4,bucket=512", "topk:k=5", "randomk:k=3"}) {
    const Bytes m = encode(spec, nullptr, 0, gw::DType::kFloat32, 0);
    std::string name = spec;
    name = name.substr(0, name.find(':'));
    w.emit(name + "-n0", m, kOverwriteF32);
  }
  // Dense codecs from each input type.
  for (size_t n : sizes) {
    const auto x = floats(n, 7 + n, n == 300);
    const auto h = halves(n, 11 + n);
    const std::string s = "-n" + std::to_string(n);
    w.emit("none-f32" + s, encode("none", x.data(), n, gw::DType::kFloat32, 0), kOverwriteF32);
    w.emit("none-f16" + s, encode("none", h.data(), n, gw::DType::kFloat16, 0), kOverwriteF16);
    w.emit("none-bf16" + s, encode("none", h.data(), n, gw::DType::kBFloat16, 0), kAccumulateBf16);
    w.emit("fp16-f32" + s, encode("fp16", x.data(), n, gw::DType::kFloat32, 0), kAccumulateF32);
    w.emit("fp16-bf16" + s, encode("fp16", h.data(), n, gw::DType::kBFloat16, 0), kOverwriteF16);
    w.emit("bf16-f32" + s, encode("bf16", x.data(), n, gw::DType::kFloat32, 0), kSubtractF32);
  }
  w.emit("topk-wide-indices", wide_topk(), kOverwriteF32);
  std::printf("make_corpus: wrote %d messages under %s\n", w.written, w.dir.c_str());
  return w.failures == 0 ? 0 : 1;
}
