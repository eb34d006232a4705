// The driver every <collective>_perf tool shares, in the manner of nccl-tests: it parses the
// flags, gets the communicator (launcher environment or --np), and for every --codec and
// every size runs warm-up calls, times -n calls, reads the library's statistics and checks
// one fresh call, then prints one row (and a JSON record with -J). A tool is a Collective:
// a small descriptor that says how to size, fill, run and check its operation.
#pragma once

#include <cstddef>
#include <string>

#include "gradwire/gradwire.h"

namespace gw::perf {

// One row: a codec at one size.
struct Case {
  gw_comm_t comm;
  int rank;
  int nranks;
  std::string spec;  // the --codec given
  gw_codec_t codec;
  bool lossless;  // none, fp16, bf16: the result is checked bit for bit
  bool ef;        // the spec says ef=1: the tool keeps an EF state per buffer
  gw_dtype_t dtype;
  gw_red_op_t op;
  gw_algo_t algo;  // --algo (GW_ALGO_AUTO: the library's policy); the added dense reference: ring
  bool reference;  // this row is the dense reference (codec none) the others are compared with
  size_t bytes;    // the size column (nccl-tests' convention for the collective)
  size_t count;    // elements in each rank's buffer
};

struct Check {
  double relerr = 0;     // |result - exact|_2 / |exact|_2 against the uncompressed result
  long long wrong = -1;  // elements that differ from the exact (or promised) result; -1: not checked
};

class Collective {
 public:
  virtual ~Collective() = default;
  // busbw = algbw * bus_factor: 2(p-1)/p for all-reduce, (p-1)/p for all-gather.
  virtual double bus_factor(int nranks) const = 0;
  // The algo column for tools whose collective has one algorithm (else the all-reduce
  // algorithm the library reports).
  virtual const char* fixed_algo() const { return nullptr; }
  // Elements per rank for a size column of bytes.
  virtual size_t count_for(size_t bytes, size_t elem, int nranks) const {
    (void)nranks;
    return bytes / elem;
  }
  // Why this case cannot run ("" when it can); every rank answers alike.
  virtual std::string unsupported(const Case& c) const {
    (void)c;
    return "";
  }
  // Once, with the largest case: allocate and first-touch every buffer (no page faults
  // inside the timed loop).
  virtual void allocate(const Case& largest) = 0;
  // Per case, before the warm-up calls.
  virtual void prepare(const Case& c) = 0;
  // What the library's policy runs for c's next call now (gw_allreduce_algo), or
  // GW_ALGO_AUTO where no policy chooses (one algorithm, or --algo given). Where it answers,
  // the driver warms up until the calls run what it reports, unchanged, several calls in a
  // row (the tuner's trials are over) before it times any.
  virtual gw_algo_t policy_algo(const Case& c) const {
    (void)c;
    return GW_ALGO_AUTO;
  }
  // One call of the operation: what is timed.
  virtual void run(const Case& c) = 0;
  // After timing: one fresh call compared with the reference. c.algo is the algorithm the
  // timed calls ran (the most frequent one where they differed), which the check runs
  // explicitly; ran is that algorithm when every timed call ran it, GW_ALGO_AUTO when they
  // differed (the row is then not checked bit for bit unless its codec is lossless).
  virtual Check check(const Case& c, gw_algo_t ran) = 0;
  // Per case, after the check.
  virtual void release(const Case& c) { (void)c; }
  // Whether the driver adds a dense row (codec none) as the reference of "vs dense" and of
  // the measured link rate, when any --codec is given.
  virtual bool dense_reference() const { return false; }
  // After the check, with the check's c (so the timed calls' algorithm): runs steps calls of
  // the case's codec on a fixed sequence of inputs (with its own fresh EF state when the spec
  // says ef=1) and returns |sum of results - sum of exact results|_2 / |sum of exact
  // results|_2; negative when not measured. Every rank calls it.
  virtual double running_sum_error(const Case& c, int steps) {
    (void)c;
    (void)steps;
    return -1;
  }
};

// Runs the tool; returns the process exit status (1 when a lossless row has #wrong > 0). A
// row's algo, wire bytes and error come from its timed calls (gw_comm_stats_t.algo_calls).
int run_driver(int argc, char** argv, const char* tool, Collective& coll);

}  // namespace gw::perf
