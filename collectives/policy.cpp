// Which all-reduce algorithm runs: the caller's choice, else GW_ALGO, else by codec, size
// and rank count; where that says "compress", the measured choice between it and the dense
// ring (AllreduceTuner, policy.hpp), unless GW_TUNE=0.
#include <string>

#include "collectives/policy.hpp"

namespace gw {

const char* algo_name(Algo algo) {
  switch (algo) {
    case Algo::kAuto: return "auto";
    case Algo::kRing: return "ring";
    case Algo::kCompressedRing: return "compressed_ring";
    case Algo::kScatterReduce: return "scatter_reduce";
    case Algo::kSparseAllgather: return "sparse_allgather";
  }
  return "unknown";
}

const char* red_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "unknown";
}

Result<Algo> parse_algo(const std::string& name) {
  for (Algo a : {Algo::kAuto, Algo::kRing, Algo::kCompressedRing, Algo::kScatterReduce, Algo::kSparseAllgather}) {
    if (name == algo_name(a)) return a;
  }
  return invalid_argument("unknown algorithm '" + name +
                          "' (known: auto, ring, compressed_ring, scatter_reduce, sparse_allgather)");
}

namespace coll {

Algo choose_allreduce(const PolicyInput& in) {
  if (in.requested != Algo::kAuto) return in.requested;
  if (in.configured != Algo::kAuto) return in.configured;
  if (in.codec == nullptr || in.codec->id() == CodecId::kNone) return Algo::kRing;
  if (in.dtype != DType::kFloat32) return Algo::kRing;
  if (in.count * dtype_size(in.dtype) < in.dense_threshold_bytes) return Algo::kRing;
  if (in.nranks == 1) return Algo::kScatterReduce;
  if (in.codec->spec().is_sparse()) {
    // All-gather moves (p - 1) messages of about k entries into every rank; a ring or
    // scatter-reduce moves about 2 (p - 1) / p of a dense chunk. Gather wins while k p < n.
    const uint64_t k = in.codec->spec().k_for(in.count);
    return k * static_cast<uint64_t>(in.nranks) < in.count ? Algo::kSparseAllgather : Algo::kScatterReduce;
  }
  return Algo::kScatterReduce;
}

}  // namespace coll
}  // namespace gw

namespace gw::coll {

std::string AllreduceTuner::key(size_t count, DType dtype, const Codec& codec) {
  return codec.spec().to_string() + "|" + std::to_string(count) + "|" + dtype_name(dtype);
}

AllreduceTuner::Plan AllreduceTuner::plan(const std::string& key, Algo candidate) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[key];
  if (e.decision != Algo::kAuto) return Plan{e.decision, false, false, false};
  const int i = e.calls++;
  const bool dense = i % 2 == 1;
  return Plan{dense ? Algo::kRing : candidate, i >= 2, i == 2 * kRounds - 1, true};
}

void AllreduceTuner::record(const std::string& key, Algo ran, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[key];
  double& b = e.best[ran == Algo::kRing ? 1 : 0];
  if (b < 0 || seconds < b) b = seconds;
}

void AllreduceTuner::local_best(const std::string& key, double out[2]) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = entries_[key];
  out[0] = e.best[0];
  out[1] = e.best[1];
}

Algo AllreduceTuner::decide(const std::string& key, Algo candidate, const double* all, int nranks) {
  double slowest[2] = {0, 0};
  for (int r = 0; r < nranks; ++r) {
    for (int j = 0; j < 2; ++j) slowest[j] = all[2 * r + j] > slowest[j] ? all[2 * r + j] : slowest[j];
  }
  const Algo pick = slowest[0] * (1.0 + kMargin) < slowest[1] ? candidate : Algo::kRing;
  std::lock_guard<std::mutex> lock(mu_);
  entries_[key].decision = pick;
  return pick;
}

Algo AllreduceTuner::decided(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? Algo::kAuto : it->second.decision;
}

}  // namespace gw::coll
