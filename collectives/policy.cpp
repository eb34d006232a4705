// Which all-reduce algorithm runs: the caller's choice, else GW_ALGO, else by codec, size
// and rank count.
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
