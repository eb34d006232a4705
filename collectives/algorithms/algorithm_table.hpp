// The all-reduce algorithms, one row each: what GW_ALGO and --algo call them, what they
// serve, what the policy's cost model and tuner know of them, where they start on host and
// device buffers, and the tag steps and scratch slots they use. GW_ALGO's parsing,
// algo_name, the policy, the call checks, the communicator's dispatch, the perf tools and
// docs/configuration.md (checked by test_algorithm_table) all read this table.
//
// Adding an algorithm: a value in Algo and gw_algo_t, its host (and device) file, a row in
// algorithm_table.cpp; see docs/extending.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/algorithms/scratch_slots.hpp"
#include "collectives/checks/check_graph.hpp"
#include "collectives/common/context.hpp"
#include "collectives/common/step_ranges.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"

namespace gw::coll {

class DeviceBackend;

// Which collectives an algorithm serves (bits).
enum ServedCollectives : uint8_t {
  kServesAllreduce = 1,
  kServesSparseAllgather = 2,  // sparse_allgather and sparse_allgather_dense
};

// Which buffers it runs on (bits).
enum MemoryKinds : uint8_t {
  kHostMemory = 1,
  kDeviceMemory = 2,
};

// Which codecs it takes (bits): none (dense), lossy codecs that send a value per element
// (qsgd, sign, fp16, ...), and index-carrying sparse ones (top-k, random-k, dgc).
enum CodecKinds : uint8_t {
  kNoCodec = 1,
  kValueCodecs = 2,
  kSparseCodecs = 4,
  kLossyCodecs = kValueCodecs | kSparseCodecs,
};

// One all-reduce call as the entry points take it. codec: null for dense; ef may be null.
struct HostAllreduce {
  const void* send;
  void* recv;
  size_t count;
  DType dtype;
  ReduceOp op;
  Codec* codec;
  ErrorFeedback* ef;
};
struct DeviceAllreduce {
  const void* send;
  void* recv;
  size_t count;
  DType dtype;
  ReduceOp op;
  const Codec* codec;
  DeviceEfState* ef;
};
using HostEntry = Status (*)(Context& c, const HostAllreduce& call);
using DeviceEntry = Status (*)(Context& c, DeviceBackend& dev, const DeviceAllreduce& call);

// The cost model's view of one call (policy.hpp: model_seconds; the parameters are
// cost_model.hpp's): ranks, the buffer's bytes, the codec's encoded bound for it (the buffer's
// bytes when dense), the link in bytes/s, a small message's one-way time, the CPU time per
// message a rank sends or receives, and the rates of the work: the codec's encode and
// decode, a dense sum, and sparse messages summed into a dense buffer (bytes per second).
struct CostInput {
  double ranks;
  double bytes;
  double encoded;
  double link_bytes_per_s;
  double message_s;
  double message_cpu_s;
  double encode_bps;
  double decode_bps;
  double reduce_bps;
  double sparse_sum_bps;
};
using CostHook = double (*)(const CostInput& in);

// The tuner's question to an algorithm that is not the static choice: is it weighed
// against it for this call?
struct TuneInput {
  Algo static_choice;
  bool sparse_codec;
  int nranks;
  bool on_device;
  bool gather_fits;  // a sparse codec's k p < n: the sparse all-gather moves less than a dense buffer
};
using TuneGate = bool (*)(const TuneInput& in);

struct AlgorithmRow {
  Algo id;
  const char* name;         // GW_ALGO, GW_INTER_ALGO, --algo, algo_name, logs
  const char* description;  // one line
  uint8_t collectives;      // ServedCollectives
  uint8_t memory;           // MemoryKinds
  uint8_t codecs;           // CodecKinds it takes
  // Runs flat algorithms inside itself and needs the communicator's topology and state: the
  // communicator calls it itself, and it has no entry points here.
  bool composite;
  Algo device_counterpart;  // host-only: the algorithm that does its job on device buffers
  CostHook cost;            // rough seconds of one call (the tuner's seed)
  TuneGate weighed;         // null: never weighed unless it is the static choice
  HostEntry host;           // null: composite
  DeviceEntry device;       // null: host only, or composite
  const StepRange* steps;   // its tag steps, relative to the context's step_base
  int step_ranges;
  // Masks of the scratch slots it holds while it runs (scratch_slots.hpp); an algorithm it
  // runs inside itself holds its own.
  uint32_t host_slots;
  uint32_t device_slots;
  uint32_t staging_slots;
  CheckGraph check;  // whose call descriptors a call checks (check_graph.hpp)
};

struct AlgorithmList {
  const AlgorithmRow* first;
  size_t n;
  const AlgorithmRow* begin() const { return first; }
  const AlgorithmRow* end() const { return first + n; }
};

// Every row, in Algo order (kAuto has none: it is the policy).
AlgorithmList algorithms();
// The row of id, or null (kAuto, or a value that names no algorithm).
const AlgorithmRow* find_algorithm(Algo id);
const AlgorithmRow* find_algorithm(const std::string& name);
// Whether a runs dense (takes no codec: ring, recursive doubling). kAuto is not.
bool dense_algorithm(Algo a);
// Whether value is an Algo: kAuto or a row's id.
bool algo_value_known(int value);
// "auto" and every row's name, separated by ", ", the last by last_separator.
std::string algorithm_choices(const char* last_separator);

}  // namespace gw::coll
