// codec_bench as a function, so that a test can run it in its own process (with the codecs the
// test registers). Exits the process on bad arguments (status 2) or a failed codec call.
//
// Below it, the pieces codec_bench times a codec with, for other tools that need the same
// figures (perf/calibrate.cpp): the same input, buffers, warm-up, medians and decode checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gw::perf {

// Runs codec_bench with argv as on its command line; returns its exit status.
int codec_bench_main(int argc, char** argv);

// The median of v (the mean of the two middle values when v has an even size).
double median(std::vector<double> v);

// Memory a measurement owns: allocated once, first touched, reused by every codec.
struct CodecBuffers {
  size_t n = 0;
  std::unique_ptr<float[]> src, dst, ref;
  std::unique_ptr<uint8_t[]> msg;
  size_t msg_cap = 0;
};

// Buffers for n fp32 elements and the largest message any of specs may encode, every page
// touched, src holding codec_bench's synthetic gradient (Student-t, 3 dof, x 1e-3, fixed
// seed). Exits the process on a spec the library refuses.
CodecBuffers make_codec_buffers(size_t n, const std::vector<std::string>& specs);

// The times of one phase, seconds, one per timed repetition.
struct CodecPhase {
  std::vector<double> times;
  double median_s() const { return median(times); }
  double gbps(size_t n) const;  // 1e9 bytes of fp32 input (n elements) per second
};

struct CodecTiming {
  int reps = 5;    // timed repetitions per phase
  int warmup = 1;  // untimed repetitions per phase first
  // false: encode and decode-accumulate only (no overwrite decode, no encode with EF).
  bool all_phases = true;
};

struct CodecResult {
  std::string spec;
  size_t encoded_bytes = 0;  // of the last encode
  uint64_t nnz = 0;
  double ratio = 0.0;
  double rel_error = 0.0;
  CodecPhase encode, decode, accumulate, encode_ef;  // decode, encode_ef empty unless all_phases
};

// Times spec's encode and decodes on b, one thread, as codec_bench does. Every timed decode
// is checked against a reference decode; exits the process when one fails, or a codec call does.
CodecResult time_codec(const std::string& spec, CodecBuffers& b, const CodecTiming& t);

}  // namespace gw::perf
