// The parameters of the cost model the policy decides with (policy.hpp) and the simulator
// replays schedules with (sim/), measured on a machine by perf/calibrate, read from the file
// GW_COST_MODEL names, else defaults for a 100 Gbit/s fabric.
//
// The file is `key = value` lines (# comments): version = 1, transport = text, latency_s,
// link_bytes_per_s, message_cpu_s, switch_s, reduce_bytes_per_s, sparse_sum_bytes_per_s, cores, and
// encode_bytes_per_s.<codec> / decode_bytes_per_s.<codec> per codec name. A key it does not
// know, a repeated key, a value that is not a finite positive number, or a missing version is
// refused with the line and key named: a cost model that is half read would steer every call.
#pragma once

#include <map>
#include <string>

#include "gradwire/status.hpp"

namespace gw::coll {

struct CodecRates {
  double encode_bytes_per_s;  // fp32 input bytes per second, one core
  double decode_bytes_per_s;  // fp32 output bytes per second of a decode that accumulates
};

struct CostModel {
  double latency_s = 3e-6;              // one small message, one way, software included
  double link_bytes_per_s = 12.5e9;     // a rank's link (100 Gbit/s)
  double message_cpu_s = 0.5e-6;        // a rank's CPU time per message it sends or receives
  double switch_s = 2e-6;               // a core switching to a rank that was waiting for it (more ranks than cores)
  double reduce_bytes_per_s = 5e9;      // dense fp32 sum, input bytes per second, one core
  double sparse_sum_bytes_per_s = 1e9;  // sparse messages summed into a dense buffer, message bytes/s
  CodecRates default_codec{2e9, 10e9};  // codecs the file does not name
  std::map<std::string, CodecRates> codecs;
  int cores = 0;                       // cores the ranks share (0: one each); the simulator's
  std::string transport = "defaults";  // where the numbers come from, for logs
  std::string source = "built-in defaults";

  CodecRates rates(const std::string& codec_name) const;
};

// Parses a cost model file's text; what names the text in errors.
Result<CostModel> parse_cost_model(const std::string& text, const std::string& what);
Result<CostModel> load_cost_model(const std::string& path);
// GW_COST_MODEL's file, or the defaults when it is unset or empty.
Result<CostModel> cost_model_from_env();

}  // namespace gw::coll
