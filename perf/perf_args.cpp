#include "perf/perf_args.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gw::perf {
namespace {

[[noreturn]] void usage(const char* tool, const char* why) {
  if (why != nullptr) std::fprintf(stderr, "%s: %s\n", tool, why);
  std::fprintf(stderr,
               "usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup] [-c 0|1]\n"
               "          [-d float|half|bfloat16] [-o sum|avg] [--codec SPEC]... [--algo NAME]\n"
               "          [--np N] [-J file.json]\n"
               "Sizes take K, M and G suffixes. Without --np the ranks come from the launcher's\n"
               "environment (mpirun, srun, torchrun; see README). --codec repeats to compare codecs.\n",
               tool);
  std::exit(2);
}

size_t parse_size(const char* tool, const char* s) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  double mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1024, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1024.0 * 1024, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1024.0 * 1024 * 1024, ++end;
  if (end == s || *end != '\0' || v < 0) usage(tool, "bad size");
  return static_cast<size_t>(v * mult);
}

}  // namespace

Args parse_args(int argc, char** argv, const char* tool) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const char* f = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(tool, "missing value");
      return argv[++i];
    };
    if (!std::strcmp(f, "-b")) a.min_bytes = parse_size(tool, value());
    else if (!std::strcmp(f, "-e")) a.max_bytes = parse_size(tool, value());
    else if (!std::strcmp(f, "-f")) a.factor = std::atof(value());
    else if (!std::strcmp(f, "-n")) a.iters = std::atoi(value());
    else if (!std::strcmp(f, "-w")) a.warmup = std::atoi(value());
    else if (!std::strcmp(f, "-c")) a.check = std::atoi(value());
    else if (!std::strcmp(f, "-d")) a.dtype = value();
    else if (!std::strcmp(f, "-o")) a.op = value();
    else if (!std::strcmp(f, "--codec")) a.codecs.emplace_back(value());
    else if (!std::strcmp(f, "--algo")) a.algo = value();
    else if (!std::strcmp(f, "--np")) a.np = std::atoi(value());
    else if (!std::strcmp(f, "-J")) a.json = value();
    else if (!std::strcmp(f, "-h") || !std::strcmp(f, "--help")) usage(tool, nullptr);
    else usage(tool, "unknown flag");
  }
  if (a.codecs.empty()) a.codecs.emplace_back("none");
  if (a.factor <= 1.0 || a.iters < 1 || a.warmup < 0 || a.min_bytes > a.max_bytes || a.np < 0) usage(tool, "bad value");
  if (a.dtype != "float" && a.dtype != "half" && a.dtype != "bfloat16") usage(tool, "bad -d");
  if (a.op != "sum" && a.op != "avg") usage(tool, "bad -o");
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
