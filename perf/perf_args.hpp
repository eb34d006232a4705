// Command-line options shared by the *_perf tools, spelled as nccl-tests spells them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gw::perf {

struct Args {
  size_t min_bytes = 32 << 20;      // -b
  size_t max_bytes = 32 << 20;      // -e
  double factor = 2.0;              // -f
  int iters = 20;                   // -n
  int warmup = 5;                   // -w
  int check = 1;                    // -c
  std::string dtype = "float";      // -d float|half|bfloat16
  std::string op = "sum";           // -o sum|avg
  std::vector<std::string> codecs;  // --codec SPEC, repeatable; every spec parsed by the library
  bool codec_given = false;         // at least one --codec on the command line
  std::string algo = "auto";        // --algo
  int np = 0;                       // --np N: launch N local ranks (unique-id init)
  std::string json;                 // -J FILE
  int ef_steps = 20;                // --ef-steps N: running-sum error after N steps (0: off)
  double link_gbps = 0;             // --link-gbps X: link rate for the floor (0: from the dense reference)
  bool dense_reference = true;      // --no-dense-reference turns the automatic dense row off
};

// Parses and validates argv, codec specs included (gw_codec_create), before any rank
// exists: on a bad argument prints one line naming it and exits 2.
Args parse_args(int argc, char** argv, const char* tool);
std::vector<size_t> sizes(const Args& a, size_t elem_size);

}  // namespace gw::perf
