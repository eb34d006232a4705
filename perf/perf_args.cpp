#include "perf/perf_args.hpp"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gradwire/communicator.hpp"
#include "gradwire/gradwire.h"

namespace gw::perf {
namespace {

// The library's all-reduce algorithms (its table, through algo_name): "auto, ring, ... or
// hierarchical". Their values run from kAuto with no gap.
std::string algo_choices() {
  std::vector<std::string> names;
  for (int v = 0; std::strcmp(algo_name(static_cast<Algo>(v)), "unknown") != 0; ++v) {
    names.emplace_back(algo_name(static_cast<Algo>(v)));
  }
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 < names.size() ? ", " : " or ") + names[i];
  return s;
}

void print_usage(const char* tool) {
  std::fprintf(stderr,
               "usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup] [-c 0|1]\n"
               "          [-d float|half|bfloat16] [-o sum|avg] [--codec SPEC]... [--algo NAME]\n"
               "          [--np N] [-J file.json] [--ef-steps N] [--link-gbps X] [--no-dense-reference]\n"
               "Sizes take K, M and G suffixes. Without --np the ranks come from the launcher's\n"
               "environment (mpirun, srun, torchrun; see README). --codec repeats to compare codecs;\n"
               "with any --codec a dense reference row (codec none) is added unless --no-dense-reference.\n"
               "--ef-steps N: relative error of the running sum of N all-reduces (default 20, 0: off).\n"
               "--link-gbps X: link rate in Gbit/s for the link floor (default: measured by the dense row).\n"
               "--algo NAME: %s (default auto: the library's policy).\n",
               tool, algo_choices().c_str());
}

// One line naming what is wrong, then exit 2: nothing has been launched yet.
[[noreturn]] void bad(const char* tool, const char* flag, const char* value, const char* why) {
  if (value != nullptr)
    std::fprintf(stderr, "%s: bad %s '%s': %s\n", tool, flag, value, why);
  else
    std::fprintf(stderr, "%s: %s: %s\n", tool, flag, why);
  std::fprintf(stderr, "%s: no rank was started (--help lists the flags)\n", tool);
  std::exit(2);
}

size_t parse_size(const char* tool, const char* flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s, &end);
  double mult = 1;
  if (end != s) {
    if (*end == 'K' || *end == 'k')
      mult = 1024, ++end;
    else if (*end == 'M' || *end == 'm')
      mult = 1024.0 * 1024, ++end;
    else if (*end == 'G' || *end == 'g')
      mult = 1024.0 * 1024 * 1024, ++end;
  }
  if (end == s || *end != '\0' || errno != 0 || !std::isfinite(v))
    bad(tool, flag, s, "not a size (a number with K, M or G)");
  if (v < 0) bad(tool, flag, s, "a size is not negative");
  if (v * mult > 1024.0 * 1024 * 1024 * 1024) bad(tool, flag, s, "larger than 1 TiB");
  return static_cast<size_t>(v * mult);
}

long parse_int(const char* tool, const char* flag, const char* s, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0) bad(tool, flag, s, "not an integer");
  if (v < lo || v > hi) {
    char why[96];
    std::snprintf(why, sizeof why, "not in [%ld, %ld]", lo, hi);
    bad(tool, flag, s, why);
  }
  return v;
}

double parse_real(const char* tool, const char* flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !std::isfinite(v)) bad(tool, flag, s, "not a number");
  return v;
}

}  // namespace

Args parse_args(int argc, char** argv, const char* tool) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const char* f = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) bad(tool, f, nullptr, "missing value");
      return argv[++i];
    };
    if (!std::strcmp(f, "-b"))
      a.min_bytes = parse_size(tool, f, value());
    else if (!std::strcmp(f, "-e"))
      a.max_bytes = parse_size(tool, f, value());
    else if (!std::strcmp(f, "-f")) {
      const char* v = value();
      a.factor = parse_real(tool, f, v);
      if (a.factor <= 1.0) bad(tool, f, v, "the factor between sizes must be > 1");
    } else if (!std::strcmp(f, "-n"))
      a.iters = static_cast<int>(parse_int(tool, f, value(), 1, 1000000));
    else if (!std::strcmp(f, "-w"))
      a.warmup = static_cast<int>(parse_int(tool, f, value(), 0, 1000000));
    else if (!std::strcmp(f, "-c"))
      a.check = static_cast<int>(parse_int(tool, f, value(), 0, 1));
    else if (!std::strcmp(f, "-d")) {
      a.dtype = value();
      if (a.dtype != "float" && a.dtype != "half" && a.dtype != "bfloat16")
        bad(tool, f, a.dtype.c_str(), "float, half or bfloat16");
    } else if (!std::strcmp(f, "-o")) {
      a.op = value();
      if (a.op != "sum" && a.op != "avg") bad(tool, f, a.op.c_str(), "sum or avg");
    } else if (!std::strcmp(f, "--codec")) {
      const char* spec = value();
      // The library's own parser: a spec it refuses here would fail every rank later.
      gw_codec_t codec = nullptr;
      if (gw_codec_create(spec, &codec) != GW_SUCCESS) bad(tool, f, spec, gw_get_last_error());
      gw_codec_destroy(codec);
      a.codecs.emplace_back(spec);
      a.codec_given = true;
    } else if (!std::strcmp(f, "--algo")) {
      a.algo = value();
      if (!parse_algo(a.algo).is_ok()) {
        bad(tool, f, a.algo.c_str(), algo_choices().c_str());
      }
    } else if (!std::strcmp(f, "--np"))
      a.np = static_cast<int>(parse_int(tool, f, value(), 0, 1024));
    else if (!std::strcmp(f, "-J")) {
      a.json = value();
      if (a.json.empty()) bad(tool, f, "", "an empty file name");
    } else if (!std::strcmp(f, "--ef-steps"))
      a.ef_steps = static_cast<int>(parse_int(tool, f, value(), 0, 100000));
    else if (!std::strcmp(f, "--link-gbps")) {
      const char* v = value();
      a.link_gbps = parse_real(tool, f, v);
      if (a.link_gbps <= 0) bad(tool, f, v, "a link rate must be > 0 Gbit/s");
    } else if (!std::strcmp(f, "--no-dense-reference"))
      a.dense_reference = false;
    else if (!std::strcmp(f, "-h") || !std::strcmp(f, "--help")) {
      print_usage(tool);
      std::exit(2);
    } else
      bad(tool, f, nullptr, "unknown flag");
  }
  if (a.codecs.empty()) a.codecs.emplace_back("none");
  if (a.min_bytes > a.max_bytes) {
    char why[96];
    std::snprintf(why, sizeof why, "-b %zu is larger than -e %zu", a.min_bytes, a.max_bytes);
    bad(tool, "-b/-e", nullptr, why);
  }
  return a;
}

std::vector<size_t> sizes(const Args& a, size_t elem_size) {
  std::vector<size_t> out;
  for (double s = static_cast<double>(a.min_bytes); s <= static_cast<double>(a.max_bytes) * 1.0000001; s *= a.factor) {
    out.push_back(static_cast<size_t>(s) / elem_size * elem_size);
    if (a.min_bytes == 0) s = static_cast<double>(elem_size) / a.factor;  // 0 then upwards
  }
  return out;
}

}  // namespace gw::perf
