#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/policy/cost_model.hpp"
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
  bool on_device = false;            // device buffers: only algorithms with a device entry
  const CostModel* model = nullptr;  // null: the defaults (cost_model.hpp)
  ReduceOp op = ReduceOp::kSum;
  bool ef = false;  // an error-feedback state came with the call
};

// The cost model's inputs for one call of in by algo (link_gbps > 0 replaces the model's
// link), and its time for it.
CostInput cost_input(const PolicyInput& in, Algo algo, double link_gbps = 0);
double model_seconds(const PolicyInput& in, Algo algo, double link_gbps = 0);

// The dense algorithm for in: the ring, or on host buffers recursive doubling or Rabenseifner,
// whichever the cost model rates fastest. Recursive doubling swaps and sums the whole buffer
// log p times and does not pipeline: a few steps for small buffers. Rabenseifner moves the
// ring's bytes in 2 log p steps: mid-sized buffers, and large ones at thousands of ranks,
// where the ring's 2 (p - 1) steps cost more than its pipelining saves.
Algo choose_dense(const PolicyInput& in);

// Whether the static rule runs in dense (no codec or codec none, data other than float32, or a
// buffer below the dense threshold), whatever algorithm it picks for it.
bool dense_call(const PolicyInput& in);

// The static choice, from the arguments and the cost model. Compressed calls: a sparse codec
// all-gathers while k p < n (its sum is exact; past that the union is denser than a dense
// exchange); otherwise scatter-reduce or (host buffers) halving-doubling, whichever the model
// rates faster: 2 (p - 1) messages per rank and two compressions per element against 2 log p
// messages and log p + 1 compressions.
Algo choose_allreduce(const PolicyInput& in);

// The measured choice. Where the static policy would compress and nobody asked for an
// algorithm, which algorithm is fastest depends on the link and the CPU (at 1 Gbit/s
// compression pays many times over; at 10 Gbit/s on a busy host the encode can cost more than
// the bytes it saves), so each (codec, count, dtype) chooses among a few candidates by timing
// them, and keeps timing:
//
// - Trials: the first kRounds rounds run every candidate in turn (the seed first); the first
//   round warms up and is not timed. Then the ranks exchange their per-candidate estimates
//   (median of the last kWindow times) and decide.
// - Steady state: every call runs the decision and is timed. After `interval` calls (kRefresh
//   at first, doubled up to kRefreshMax while the decision holds and is measured fastest) a
//   refresh round runs every other candidate once, the ranks exchange estimates again and
//   decide again.
// - A decision compares slowest-rank medians over at least kMinSamples samples per candidate:
//   the incumbent (the seed before the first decision, else the dense ring, since compression
//   costs accuracy) is replaced only by a candidate that beats it by kMargin, so near-equal
//   timings never flip it; a candidate measured slower by the margin is dropped at the next
//   agreement.
//
// The schedule (which candidate runs at which call, when the ranks exchange) depends only on
// the call sequence and on decisions taken from exchanged numbers, so every rank makes the
// same calls in the same order and reaches the same decisions.
class AllreduceTuner {
 public:
  static constexpr int kMaxCandidates = 4;
  // Rounds of trials before the first decision. The first warms up (scratch, page faults):
  // every candidate once, untimed. In each later round every candidate runs a block of
  // kBlock calls of which only the last is timed, as is every challenger in a refresh round:
  // the first call after a switch pays for the switch (an EF residual left where the other
  // layout keeps it, caches the other path warmed), which a decision's steady calls do not.
  static constexpr int kRounds = 4;
  static constexpr int kBlock = 2;
  // The calls before the first decision, for n candidates.
  static constexpr int trial_calls(int n) { return n <= 1 ? kRounds : n + (kRounds - 1) * n * kBlock; }
  // A challenger must beat the incumbent's slowest-rank median by this fraction: a choice
  // between near-equal timings is a coin toss on a noisy host, and compression costs accuracy.
  static constexpr double kMargin = 0.10;
  // Times kept per candidate (the estimate is their median) and the fewest a decision uses.
  static constexpr int kWindow = 5;
  static constexpr int kMinSamples = 3;
  // Calls of the decision between refresh rounds: first, and at most (exponential back-off).
  static constexpr int kRefresh = 64;
  static constexpr int kRefreshMax = 1024;
  // Doubles per rank in the agreement: (median seconds or -1, samples) per candidate slot.
  static constexpr int kExchange = 2 * kMaxCandidates;

  // The algorithms one key weighs (the static choice first, the dense ring last) and the one
  // to start with (index into algo).
  struct Candidates {
    Algo algo[kMaxCandidates] = {Algo::kRing, Algo::kRing, Algo::kRing};
    int n = 0;
    int seed = 0;
    bool seeded = false;  // seed came from a link speed (GW_LINK_GBPS), not the static rule
  };

  struct Plan {
    Algo algo;         // what this call runs
    bool timed;        // record() its time
    bool agree_after;  // then exchange estimates and decide (a collective on every rank)
    bool trial;        // runs something other than a decision (no decision yet, or a refresh)
  };

  // The outcome of one agreement, for the log and the tests.
  struct Verdict {
    int n = 0;
    Algo algo[kMaxCandidates] = {Algo::kRing, Algo::kRing, Algo::kRing};
    double slowest[kMaxCandidates] = {-1, -1, -1};  // slowest rank's median, seconds (-1: none)
    int samples[kMaxCandidates] = {0, 0, 0};        // fewest samples on any rank
    Algo before = Algo::kAuto;                      // the incumbent
    Algo pick = Algo::kAuto;
    bool switched = false;
    int agreement = 0;     // 1 for the first decision of the key
    int next_refresh = 0;  // calls of pick before the next refresh round
    std::string describe() const;
  };

  // Progress thread: the algorithm for this call of key (c: the key's candidates, read on its
  // first call only).
  Plan plan(const std::string& key, const Candidates& c);
  void record(const std::string& key, Algo ran, double seconds);
  // This rank's estimates for key, to be exchanged (kExchange doubles).
  void local_stats(const std::string& key, double out[kExchange]) const;
  // Decides from every rank's local_stats (nranks * kExchange doubles, rank-major).
  Verdict decide(const std::string& key, const double* all, int nranks);
  // Any thread: the decision for key, or kAuto while there is none.
  Algo decided(const std::string& key) const;

  static std::string key(size_t count, DType dtype, const Codec& codec);
  static double median(std::vector<double> v);

 private:
  struct Entry {
    Candidates cand;
    int trial_calls = 0;         // calls of the initial trials so far
    Algo current = Algo::kRing;  // incumbent: the seed, then each decision
    bool decided = false;
    int agreements = 0;
    int until_refresh = 0;  // steady calls left before the next refresh round
    int interval = kRefresh;
    int refresh_pos = 0;                        // calls of the running refresh round so far
    std::vector<double> times[kMaxCandidates];  // the last kWindow times of each candidate
  };
  int slot(const Entry& e, Algo a) const;
  mutable std::mutex mu_;  // decisions are read from callers' threads
  std::map<std::string, Entry> entries_;
};

// The candidates of a tunable call whose static choice is static_choice (not the ring): for
// dense codecs scatter_reduce, compressed_ring (more than 2 ranks, host buffers) and the ring;
// for sparse codecs sparse_allgather (where the static rule allows it, k p < n), scatter_reduce
// and the ring. With link_gbps > 0 the seed is the candidate model_seconds rates fastest, else
// the static choice.
AllreduceTuner::Candidates allreduce_candidates(const PolicyInput& in, Algo static_choice, bool on_device,
                                                double link_gbps);
// GW_LINK_GBPS: the link speed in Gbit/s, or 0 when unset or not a positive number (warned
// about once per process).
double link_gbps_from_env();
double parse_link_gbps(const char* text);  // the same for a given text (null: unset)

}  // namespace gw::coll
