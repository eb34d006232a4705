#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"

namespace gw::coll {

struct PolicyInput {
  size_t count;
  DType dtype;
  const Codec* codec;
  int nranks;
  Algo requested;   // per call
  Algo configured;  // GW_ALGO
  size_t dense_threshold_bytes;
};

// The static choice: from the arguments alone.
Algo choose_allreduce(const PolicyInput& in);

// The measured choice. Where the static policy would compress and nobody asked for an
// algorithm, whether compression pays depends on the link and the CPU (at 1 Gbit/s it pays
// many times over; at 10 Gbit/s on a busy host the encode can cost more than the bytes it
// saves). So the first calls of each (codec, count, dtype) alternate between the
// compressed algorithm and the dense ring, the ranks agree on the slower rank's best time
// of each, and every later call runs the faster one. Every rank makes the same calls in the
// same order, so every rank runs the same schedule and reaches the same decision.
class AllreduceTuner {
 public:
  // Calls per key before the decision: kRounds rounds of (compressed, dense); the first
  // round warms up (scratch, page faults) and is not counted.
  static constexpr int kRounds = 4;
  // Compression must beat the dense ring by this fraction to be chosen: it costs accuracy,
  // and a choice between two near-equal timings is a coin toss on a noisy host.
  static constexpr double kMargin = 0.10;

  struct Plan {
    Algo algo;         // what this call runs
    bool timed;        // record() its time
    bool agree_after;  // then exchange times and decide (a collective on every rank)
    bool trial;        // no decision yet
  };

  // Progress thread: the algorithm for this call of key, whose static choice is candidate.
  Plan plan(const std::string& key, Algo candidate);
  void record(const std::string& key, Algo ran, double seconds);
  // This rank's best times (compressed, dense) for key, to be exchanged.
  void local_best(const std::string& key, double out[2]);
  // Decides from every rank's local_best (nranks pairs): compression when its slowest rank
  // beat the dense ring's slowest rank by kMargin, else the dense ring. Returns it.
  Algo decide(const std::string& key, Algo candidate, const double* all, int nranks);
  // Any thread: the decision for key, or kAuto while there is none.
  Algo decided(const std::string& key) const;

  static std::string key(size_t count, DType dtype, const Codec& codec);

 private:
  struct Entry {
    int calls = 0;
    double best[2] = {-1, -1};  // compressed, dense; -1 until timed
    Algo decision = Algo::kAuto;
  };
  mutable std::mutex mu_;  // decisions are read from callers' threads
  std::map<std::string, Entry> entries_;
};

}  // namespace gw::coll
