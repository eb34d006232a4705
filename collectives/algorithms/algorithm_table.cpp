#include "collectives/algorithms/algorithm_table.hpp"

#include <algorithm>
#include <cmath>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"

namespace gw::coll {
namespace {

// Each row's cost hook is a closed form of its schedule under the model of cost_model.hpp:
// a step that sends one message and waits for one pays the latency and the CPU time of both
// (message_s + 2 message_cpu_s); messages sent at once pay one latency and each its CPU time;
// the wire bytes go over the link and the work runs at the model's rates. tools/sim replays
// the schedules themselves on the same parameters (docs/performance.md, "Simulation at scale").
double per_step(const CostInput& in) { return in.message_s + 2 * in.message_cpu_s; }
// The pipelining unit the closed forms assume (CommConfig::chunk_bytes' default).
constexpr double kModelChunkBytes = 1 << 20;

// --- ring: dense reduce-scatter then all-gather.
double ring_cost(const CostInput& in) {
  const double p = in.ranks;
  const double wire = 2 * (p - 1) / p * in.bytes;
  // The reduce-scatter's sums overlap its bytes on the wire as far as a segment has chunks
  // (of the default 1 MiB pipelining unit) to move on while others are summed; the
  // all-gather's bytes follow.
  const double chunks = std::max(1.0, std::ceil(in.bytes / p / kModelChunkBytes));
  const double w = wire / in.link_bytes_per_s / 2, r = (p - 1) / p * in.bytes / in.reduce_bps;
  return 2 * (p - 1) * per_step(in) + std::max(w, r) + std::min(w, r) / chunks + w;
}
Status ring_host(Context& c, const HostAllreduce& a) {
  return ring_allreduce(c, a.send, a.recv, a.count, a.dtype, a.op);
}
Status ring_device(Context& c, DeviceBackend& dev, const DeviceAllreduce& a) {
  return device_dense_allreduce(c, dev, a.send, a.recv, a.count, a.dtype, a.op);
}

// --- recursive doubling: dense, log p whole-buffer exchanges (two more when p is not a
// power of two). Wins over the ring where the per-message cost dominates.
double recursive_doubling_cost(const CostInput& in) {
  int m = 0;
  while ((2 << m) <= static_cast<int>(in.ranks)) ++m;
  const bool pow2 = (1 << m) == static_cast<int>(in.ranks);
  const double exchanges = m + (pow2 ? 0 : 2);
  const double sums = m + (pow2 ? 0 : 1);  // the folded ranks' last step only copies
  // The first exchange's partner message is on its way while the fold is: one latency fewer.
  const double latencies = m + (pow2 ? 0 : 1);
  // Every message is copied behind the carried call descriptor first (at about a sum's rate).
  return latencies * in.message_s +
         exchanges * (2 * in.message_cpu_s + in.bytes / in.link_bytes_per_s + in.bytes / in.reduce_bps) +
         sums * in.bytes / in.reduce_bps;
}
Status recursive_doubling_host(Context& c, const HostAllreduce& a) {
  return recursive_doubling_allreduce(c, a.send, a.recv, a.count, a.dtype, a.op);
}

// --- Rabenseifner: dense reduce-scatter by recursive halving, then all-gather by recursive
// doubling, each step's range pipelined in chunks: the ring's bytes in 2 log p steps.
double rabenseifner_step(const CostInput& in, double h, bool reduce) {
  const double c = std::max(1.0, std::ceil(h / kModelChunkBytes));
  const double w = h / in.link_bytes_per_s, r = reduce ? h / in.reduce_bps : 0;
  // The chunks arrive at the link's pace and are reduced as they come: the last one's sum
  // ends the step.
  return in.message_s + 2 * c * in.message_cpu_s + std::max(w + r / c, r);
}
double rabenseifner_cost(const CostInput& in) {
  int m = 0;
  while ((2 << m) <= static_cast<int>(in.ranks)) ++m;
  const bool pow2 = (1 << m) == static_cast<int>(in.ranks);
  double t = 0;
  // Halving step k and the doubling step of the same size (the doublings swap bytes / 2^m,
  // then twice that, ... up to half the buffer).
  for (int k = 0; k < m; ++k) {
    const double h = std::ldexp(in.bytes, -(k + 1));
    t += rabenseifner_step(in, h, true);
    if (k + 1 < m) {
      t += rabenseifner_step(in, h, false);
    } else {  // the first doubling step rides on the last halving step: its last chunk's bytes
      const double c = std::max(1.0, std::ceil(h / kModelChunkBytes));
      t += in.message_s + 2 * c * in.message_cpu_s + h / in.link_bytes_per_s / c;
    }
  }

  // The folded ranks' buffers in, summed, and the result back out.
  if (!pow2) t += rabenseifner_step(in, in.bytes, true) + rabenseifner_step(in, in.bytes, false);
  return t;
}
Status rabenseifner_host(Context& c, const HostAllreduce& a) {
  return rabenseifner_allreduce(c, a.send, a.recv, a.count, a.dtype, a.op);
}

// --- compressed ring: every hop decodes, adds and re-encodes.
double compressed_ring_cost(const CostInput& in) {
  const double p = in.ranks;
  const double wire = 2 * (p - 1) / p * in.encoded;
  const double work = in.bytes / in.encode_bps + 2 * in.bytes / in.decode_bps;
  return 2 * (p - 1) * per_step(in) + wire / in.link_bytes_per_s +
         work;  // each hop waits for the previous one's decode and encode
}
// With 2 ranks it is scatter-reduce's twin; it has no device version.
// Up to 8 ranks: beyond, its p compressions per element and 2 (p - 1) steps lose to
// halving-doubling, which takes its place among the candidates.
bool compressed_ring_weighed(const TuneInput& in) {
  return !in.sparse_codec && in.nranks > 2 && in.nranks <= 8 && !in.on_device;
}
Status compressed_ring_host(Context& c, const HostAllreduce& a) {
  return compressed_ring_allreduce(c, static_cast<const float*>(a.send), static_cast<float*>(a.recv), a.count, a.op,
                                   *a.codec, a.ef);
}

// --- scatter-reduce: compressed all-to-all, owners sum, encode once, all-gather.
double scatter_reduce_cost(const CostInput& in) {
  // All-to-all of encoded segments, then the owner's encoded segment to everyone. Every
  // rank encodes its buffer and its segment, decodes p - 1 segments and the whole result.
  const double p = in.ranks, bytes = in.bytes;
  const double wire = 2 * (p - 1) / p * in.encoded;
  // Each element is encoded once by its sender (the owner's sum once more, in its stead);
  // the owner decodes p - 1 contributions to its segment and everyone decodes every segment.
  const double work = bytes / in.encode_bps + ((p - 1) / p * bytes + bytes) / in.decode_bps;
  // Its messages go out at once: two latencies, but every message costs its CPU time at both ends.
  return 2 * in.message_s + 4 * (p - 1) * in.message_cpu_s + std::max(wire / in.link_bytes_per_s, work);
}
// The alternative to the exact sparse sums (the sparse all-gather and sparse doubling).
bool scatter_reduce_weighed(const TuneInput& in) {
  return in.sparse_codec && (in.static_choice == Algo::kSparseAllgather || in.static_choice == Algo::kSparseDoubling);
}
Status scatter_reduce_host(Context& c, const HostAllreduce& a) {
  return scatter_reduce_allreduce(c, static_cast<const float*>(a.send), static_cast<float*>(a.recv), a.count, a.op,
                                  *a.codec, a.ef);
}
Status scatter_reduce_device(Context& c, DeviceBackend& dev, const DeviceAllreduce& a) {
  return device_scatter_reduce_allreduce(c, dev, static_cast<const float*>(a.send), static_cast<float*>(a.recv),
                                         a.count, a.op, *a.codec, a.ef);
}

// --- halving-doubling: compressed recursive halving then doubling. Bandwidth like
// scatter-reduce, 2 log p messages instead of 2 (p - 1); weighed against the static choice
// for value codecs from 9 ranks up (host buffers), where the compressed ring stops being.
//
// A halving step (and the fold) sends h bytes of input encoded as e bytes in chunks of the
// pipelining unit: the partner's chunks cross the link while this rank encodes its own, then
// this rank decodes them in order. With c chunks the last one arrives after max(encode,
// wire) + min(encode, wire) / c, and it decodes at most what is left after that.
double pipelined_step(const CostInput& in, double h, double e) {
  const double c = std::max(1.0, std::ceil(h / kModelChunkBytes));
  const double enc = h / in.encode_bps, dec = h / in.decode_bps, w = e / in.link_bytes_per_s;
  return in.message_s + 2 * c * in.message_cpu_s +
         std::max(enc + dec, std::max(enc, w) + std::min(enc, w) / c + dec / c);
}
double halving_doubling_cost(const CostInput& in) {
  int m = 0;
  while ((2 << m) <= static_cast<int>(in.ranks)) ++m;
  const double owners = std::ldexp(1.0, m);
  const bool pow2 = owners == in.ranks;
  const double ratio = in.bytes > 0 ? in.encoded / in.bytes : 1.0;
  double t = 0;
  for (int k = 0; k < m; ++k) {
    const double h = std::ldexp(in.bytes, -(k + 1));
    t += pipelined_step(in, h, h * ratio);
  }
  // The owner encodes its segment once; doubling swaps bundles of owner messages (every
  // owner's but this rank's, in all); every owner's message is decoded on every rank.
  t += in.bytes / owners / in.encode_bps + m * per_step(in) + (owners - 1) / owners * in.encoded / in.link_bytes_per_s +
       in.bytes / in.decode_bps;
  // Folding is on the critical path: the whole buffer handed in, and every owner's message back.
  if (!pow2) t += pipelined_step(in, in.bytes, in.encoded) + per_step(in) + in.encoded / in.link_bytes_per_s;
  return t;
}
bool halving_doubling_weighed(const TuneInput& in) {
  return !in.sparse_codec && !in.on_device && in.nranks > 8 && in.static_choice != Algo::kHalvingDoubling;
}
Status halving_doubling_host(Context& c, const HostAllreduce& a) {
  return halving_doubling_allreduce(c, static_cast<const float*>(a.send), static_cast<float*>(a.recv), a.count, a.op,
                                    *a.codec, a.ef);
}

// --- sparse all-gather: every rank's message to every rank, summed in rank order. Weighed
// against the other compressed choices for sparse codecs while k p < n; past that it moves
// more than a dense buffer.
double sparse_allgather_cost(const CostInput& in) {
  const double p = in.ranks;
  const double wire = (p - 1) * in.encoded;
  const double work = in.bytes / in.encode_bps + p * in.encoded / in.sparse_sum_bps;
  // Straight to every rank: one latency, every message's CPU time at both ends.
  return in.message_s + 2 * (p - 1) * in.message_cpu_s + std::max(wire / in.link_bytes_per_s, work);
}
bool sparse_allgather_weighed(const TuneInput& in) {
  return in.sparse_codec && in.gather_fits && in.static_choice != Algo::kSparseAllgather;
}
Status sparse_allgather_host(Context& c, const HostAllreduce& a) {
  return sparse_allgather_allreduce(c, static_cast<const float*>(a.send), static_cast<float*>(a.recv), a.count, a.op,
                                    *a.codec, a.ef);
}
Status sparse_allgather_device(Context& c, DeviceBackend& dev, const DeviceAllreduce& a) {
  return device_sparse_allgather_allreduce(c, dev, static_cast<const float*>(a.send), static_cast<float*>(a.recv),
                                           a.count, a.op, *a.codec, a.ef);
}

// --- sparse doubling: the sparse all-gather's sum in log p exchanges of merged messages.
// The model assumes the ranks' indices are disjoint (the most a step can carry): a rank's
// message doubles every step until it is a dense buffer's bytes, where it stays.
double sparse_doubling_cost(const CostInput& in) {
  int m = 0;
  while ((2 << m) <= static_cast<int>(in.ranks)) ++m;
  const bool pow2 = (1 << m) == static_cast<int>(in.ranks);
  const double dense = in.bytes + 56;  // a dense message: header and every element
  double held = std::min(in.encoded, dense), t = 0;
  // Merging reads both messages and writes the union: a sparse one at the sparse sum's rate,
  // a dense one at the dense sum's.
  auto merge = [&](double next) { return next < dense ? 2 * next / in.sparse_sum_bps : in.bytes / in.reduce_bps; };
  if (!pow2) t += per_step(in) + held / in.link_bytes_per_s + merge(std::min(2 * held, dense));
  if (!pow2) held = std::min(2 * held, dense);
  for (int k = 0; k < m; ++k) {
    const double next = std::min(2 * held, dense);
    t += per_step(in) + held / in.link_bytes_per_s + merge(next);
    held = next;
  }
  if (!pow2) t += per_step(in) + held / in.link_bytes_per_s;  // the sum back to the folded ranks
  // One encode, and the sum written out as a dense buffer.
  return t + in.bytes / in.encode_bps + in.bytes / in.reduce_bps;
}
// Against every other compressed choice for sparse codecs: host buffers, more than 2 ranks
// (at 2 it is the sparse all-gather's one exchange).
bool sparse_doubling_weighed(const TuneInput& in) {
  return in.sparse_codec && !in.on_device && in.nranks > 2 && in.static_choice != Algo::kSparseDoubling;
}
Status sparse_doubling_host(Context& c, const HostAllreduce& a) {
  return sparse_doubling_allreduce(c, static_cast<const float*>(a.send), static_cast<float*>(a.recv), a.count, a.op,
                                   *a.codec, a.ef);
}

// --- hierarchical: dense inside nodes, a flat algorithm between them. Without the layout
// here: it puts no more bytes on the scarce links than any flat algorithm and compresses as
// they do, so a known link speed starts the trials with it.
double hierarchical_cost(const CostInput&) { return 0; }

constexpr uint32_t kNoSlots = 0;

// One row per algorithm, at index id - 1. The fields in AlgorithmRow's order:
//   id, name, description,
//   collectives, memory, codecs, composite, device_counterpart,
//   cost, weighed, host, device,
//   steps, step_ranges, host_slots, device_slots, staging_slots, check
constexpr AlgorithmRow kRows[] = {
    {Algo::kRing, "ring", "dense ring: reduce-scatter then all-gather", kServesAllreduce, kHostMemory | kDeviceMemory,
     kNoCodec, false, Algo::kRing, ring_cost, nullptr, ring_host, ring_device, &kFlatSteps, 1, kFlatHostSlots.mask(),
     kNoSlots, kFlatStagingSlots.mask(), CheckGraph::kRingHead},
    {Algo::kCompressedRing, "compressed_ring", "every hop decodes, adds and re-encodes", kServesAllreduce, kHostMemory,
     kLossyCodecs, false, Algo::kScatterReduce, compressed_ring_cost, compressed_ring_weighed, compressed_ring_host,
     nullptr, &kFlatSteps, 1, kFlatHostSlots.mask(), kNoSlots, kNoSlots, CheckGraph::kRing},
    {Algo::kScatterReduce, "scatter_reduce", "compressed all-to-all, owners encode the sum once", kServesAllreduce,
     kHostMemory | kDeviceMemory, kLossyCodecs, false, Algo::kScatterReduce, scatter_reduce_cost,
     scatter_reduce_weighed, scatter_reduce_host, scatter_reduce_device, &kFlatSteps, 1, kFlatHostSlots.mask(),
     kFlatDeviceSlots.mask(), kFlatStagingSlots.mask(), CheckGraph::kAllPeers},
    {Algo::kSparseAllgather, "sparse_allgather", "every rank's message to every rank, summed in rank order",
     kServesAllreduce | kServesSparseAllgather, kHostMemory | kDeviceMemory, kLossyCodecs, false,
     Algo::kSparseAllgather, sparse_allgather_cost, sparse_allgather_weighed, sparse_allgather_host,
     sparse_allgather_device, kSparseAllgatherSteps, 2, kFlatHostSlots.mask(), kFlatDeviceSlots.mask(),
     kFlatStagingSlots.mask(), CheckGraph::kAllPeers},
    {Algo::kHierarchical, "hierarchical", "dense inside each node, the policy's algorithm between nodes",
     kServesAllreduce | kServesSparseAllgather, kHostMemory | kDeviceMemory, kNoCodec | kLossyCodecs, true,
     Algo::kHierarchical, hierarchical_cost, nullptr, nullptr, nullptr, kHierarchicalSteps, 5, kNoSlots,
     kHierDeviceSlots.mask(), kHierStagingSlots.mask(), CheckGraph::kAllPeers},
    {Algo::kRecursiveDoubling, "recursive_doubling", "dense, whole-buffer exchanges at distance 1, 2, 4, ...",
     kServesAllreduce, kHostMemory, kNoCodec, false, Algo::kRing, recursive_doubling_cost, nullptr,
     recursive_doubling_host, nullptr, &kFlatSteps, 1, kFlatHostSlots.mask(), kNoSlots, kNoSlots,
     CheckGraph::kDoubling},
    {Algo::kHalvingDoubling, "halving_doubling", "compressed recursive halving then doubling: log p steps each way",
     kServesAllreduce, kHostMemory, kLossyCodecs, false, Algo::kScatterReduce, halving_doubling_cost,
     halving_doubling_weighed, halving_doubling_host, nullptr, &kFlatSteps, 1, kFlatHostSlots.mask(), kNoSlots,
     kNoSlots, CheckGraph::kPartners},
    {Algo::kSparseDoubling, "sparse_doubling",
     "sparse codecs: the sparse all-gather's sum in log p merges, dense from where denser", kServesAllreduce,
     kHostMemory, kSparseCodecs, false, Algo::kSparseAllgather, sparse_doubling_cost, sparse_doubling_weighed,
     sparse_doubling_host, nullptr, &kFlatSteps, 1, kFlatHostSlots.mask(), kNoSlots, kNoSlots, CheckGraph::kDoubling},
    {Algo::kRabenseifner, "rabenseifner", "dense: reduce-scatter by recursive halving, all-gather by doubling",
     kServesAllreduce, kHostMemory, kNoCodec, false, Algo::kRing, rabenseifner_cost, nullptr, rabenseifner_host,
     nullptr, &kFlatSteps, 1, kFlatHostSlots.mask(), kNoSlots, kNoSlots, CheckGraph::kPartners},
};

constexpr size_t kRowCount = sizeof kRows / sizeof kRows[0];

// Rows sit at index id - 1: a lookup is an index.
constexpr bool rows_in_algo_order() {
  for (size_t i = 0; i < kRowCount; ++i) {
    if (static_cast<size_t>(kRows[i].id) != i + 1) return false;
  }
  return true;
}
static_assert(rows_in_algo_order(), "kRows[i] must be the row of Algo value i + 1");
// gw_comm_stats_t.algo_calls has a slot per Algo value, kAuto's included.
static_assert(kRowCount < CommStats::kAlgoSlots, "an Algo value has no slot in CommStats::algo_calls");

// Each row's step ranges are disjoint and leave the call check's step.
constexpr bool step_ranges_disjoint() {
  for (const AlgorithmRow& row : kRows) {
    if (!disjoint_below_call_check(row.steps, row.step_ranges)) return false;
  }
  return true;
}
static_assert(step_ranges_disjoint(), "an algorithm's step ranges overlap");

// A composite algorithm runs flat ones inside itself: the slots it holds meanwhile are
// none of theirs.
constexpr bool nested_slots_disjoint() {
  for (const AlgorithmRow& outer : kRows) {
    if (!outer.composite) continue;
    for (const AlgorithmRow& inner : kRows) {
      if (inner.composite) continue;
      if ((outer.host_slots & inner.host_slots) != 0 || (outer.device_slots & inner.device_slots) != 0 ||
          (outer.staging_slots & inner.staging_slots) != 0) {
        return false;
      }
    }
  }
  return true;
}
static_assert(nested_slots_disjoint(), "a composite algorithm's scratch slots overlap a flat one's");

}  // namespace

AlgorithmList algorithms() { return AlgorithmList{kRows, kRowCount}; }

const AlgorithmRow* find_algorithm(Algo id) {
  const size_t i = static_cast<size_t>(id);
  return i >= 1 && i <= kRowCount ? &kRows[i - 1] : nullptr;
}

const AlgorithmRow* find_algorithm(const std::string& name) {
  for (const AlgorithmRow& row : algorithms()) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

bool dense_algorithm(Algo a) {
  const AlgorithmRow* row = find_algorithm(a);
  return row != nullptr && !row->composite && row->codecs == kNoCodec;
}

bool algo_value_known(int value) {
  return value == static_cast<int>(Algo::kAuto) || (value >= 1 && static_cast<size_t>(value) <= kRowCount);
}

std::string algorithm_choices(const char* last_separator) {
  std::string s = "auto";
  const AlgorithmList rows = algorithms();
  for (size_t i = 0; i < rows.n; ++i) s += std::string(i + 1 < rows.n ? ", " : last_separator) + rows.first[i].name;
  return s;
}

}  // namespace gw::coll

namespace gw {

const char* algo_name(Algo algo) {
  if (algo == Algo::kAuto) return "auto";
  const coll::AlgorithmRow* row = coll::find_algorithm(algo);
  return row != nullptr ? row->name : "unknown";
}

Result<Algo> parse_algo(const std::string& name) {
  if (name == "auto") return Algo::kAuto;
  if (const coll::AlgorithmRow* row = coll::find_algorithm(name)) return row->id;
  return invalid_argument("unknown algorithm '" + name + "' (known: " + coll::algorithm_choices(", ") + ")");
}

}  // namespace gw
