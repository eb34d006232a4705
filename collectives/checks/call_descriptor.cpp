#include "collectives/checks/call_descriptor.hpp"

#include <cstring>
#include <string>

#include "collectives/algorithms/algorithm_table.hpp"
#include "compressors/payload_io.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"

namespace gw::coll {
namespace {

constexpr uint8_t kMagic[4] = {'G', 'W', 'C', 'D'};
constexpr uint8_t kVersion = 1;

template <class T>
void put(uint8_t* p, T v) {
  detail::store_le<T>(p, 0, v);
}
template <class T>
T get(const uint8_t* p) {
  return detail::load_le<T>(p, 0);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool kind_valid(uint8_t k) { return k >= 1 && k <= static_cast<uint8_t>(CallKind::kAllgatherCompressed); }

// Whether a kind's count is elements (else bytes).
bool counts_elements(CallKind k) {
  return k == CallKind::kAllreduce || k == CallKind::kSparseAllgatherDense || k == CallKind::kReduce ||
         k == CallKind::kReduceScatter || k == CallKind::kReduceScatterV || k == CallKind::kAllgatherCompressed;
}

std::string op_text(uint8_t op) {
  if (op <= static_cast<uint8_t>(ReduceOp::kMax)) return red_op_name(static_cast<ReduceOp>(op));
  return "op" + std::to_string(op);
}

std::string dtype_text(uint8_t d) {
  return collective_dtype_valid(d) ? dtype_name(static_cast<DType>(d)) : "dtype" + std::to_string(d);
}

std::string algo_text(uint8_t a) {
  return algo_value_known(a) ? algo_name(static_cast<Algo>(a)) : "algo" + std::to_string(a);
}

// The fields of d that differ from o (all of d's own fields when the collectives differ, or
// with all), as " name=value" pairs.
std::string fields(const CallDescriptor& d, const CallDescriptor& o, bool all = false) {
  const bool other_kind = all || d.kind != o.kind;
  auto show = [&](bool differs, bool has) { return has && (other_kind || differs); };
  std::string s;
  if (d.seq != o.seq) s += " (call #" + std::to_string(d.seq) + ")";
  const bool counted =
      d.kind != CallKind::kBarrier && d.kind != CallKind::kSparseAllgather && d.kind != CallKind::kAlltoallv;
  if (show(d.count != o.count, counted)) {
    const char* name = d.kind == CallKind::kAllgatherv ? " total bytes="
                       : counts_elements(d.kind)       ? " count="
                                                       : " bytes=";
    s += name + std::to_string(d.count);
  }
  if (show(d.sizes != o.sizes, d.sizes != 0)) {
    s += (d.kind == CallKind::kReduceScatterV ? " recvcounts digest=" : " recvbytes digest=") + std::to_string(d.sizes);
  }
  if (show(d.dtype != o.dtype, d.dtype != kNoField)) s += " dtype=" + dtype_text(d.dtype);
  if (show(d.op != o.op, d.op != kNoField)) s += " op=" + op_text(d.op);
  if (show(d.spec != o.spec, d.kind == CallKind::kAllreduce))
    s += " codec=" + (d.spec.empty() ? std::string("none") : d.spec);
  if (show(d.spec != o.spec, d.kind == CallKind::kAllgatherCompressed)) s += " codec=" + d.spec;
  if (show(d.spec != o.spec, d.kind == CallKind::kReduceScatterV))
    s += " codec=" + (d.spec.empty() ? std::string("null (raw)") : d.spec);
  if (show(d.algo != o.algo, d.algo != kNoField)) s += " algo=" + algo_text(d.algo);
  if (show(d.root != o.root, d.root >= 0)) s += " root=" + std::to_string(d.root);
  if (d.flags != o.flags) s += (d.flags & CallDescriptor::kDevice) != 0 ? " on device memory" : " on host memory";
  return s;
}

}  // namespace

uint64_t size_digest(const uint64_t* sizes, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < 8; ++b) {
      h ^= (sizes[i] >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h != 0 ? h : 1;
}

const char* call_kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::kAllreduce: return "allreduce";
    case CallKind::kSparseAllgather: return "sparse_allgather";
    case CallKind::kSparseAllgatherDense: return "sparse_allgather_dense";
    case CallKind::kAllgather: return "allgather";
    case CallKind::kBroadcast: return "broadcast";
    case CallKind::kBarrier: return "barrier";
    case CallKind::kTunerAgreement: return "the tuner's agreement";
    case CallKind::kNcclSetup: return "enable_nccl";
    case CallKind::kReduce: return "reduce";
    case CallKind::kReduceScatter: return "reduce_scatter";
    case CallKind::kAllgatherv: return "allgatherv";
    case CallKind::kAlltoall: return "alltoall";
    case CallKind::kAlltoallv: return "alltoallv";
    case CallKind::kGather: return "gather";
    case CallKind::kScatter: return "scatter";
    case CallKind::kReduceScatterV: return "reduce_scatterv";
    case CallKind::kAllgatherCompressed: return "allgather_compressed";
  }
  return "an unknown collective";
}

size_t encode_descriptor(const CallDescriptor& d, uint8_t* out) {
  const size_t spec_len = d.spec.size() < CallDescriptor::kMaxSpec ? d.spec.size() : CallDescriptor::kMaxSpec;
  std::memset(out, 0, CallDescriptor::kFixedBytes);
  std::memcpy(out, kMagic, 4);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(d.kind);
  out[6] = d.op;
  out[7] = d.dtype;
  out[8] = d.algo;
  out[9] = d.flags;
  put<uint16_t>(out + 10, static_cast<uint16_t>(spec_len));
  put<int32_t>(out + 12, d.root);
  put<uint64_t>(out + 16, d.count);
  put<uint64_t>(out + 24, d.seq);
  put<uint64_t>(out + 32, fnv1a(d.spec));
  put<uint64_t>(out + 40, d.sizes);
  std::memcpy(out + CallDescriptor::kFixedBytes, d.spec.data(), spec_len);
  return CallDescriptor::kFixedBytes + spec_len;
}

size_t descriptor_length(const uint8_t* data, size_t len) {
  if (len < CallDescriptor::kFixedBytes || std::memcmp(data, kMagic, 4) != 0) return 0;
  const size_t spec_len = get<uint16_t>(data + 10);
  if (spec_len > CallDescriptor::kMaxSpec || CallDescriptor::kFixedBytes + spec_len > len) return 0;
  return CallDescriptor::kFixedBytes + spec_len;
}

Result<CallDescriptor> parse_descriptor(const uint8_t* data, size_t len, int peer) {
  auto bad = [&](const std::string& why) {
    return Status(Code::kRemote, "rank " + std::to_string(peer) + " sent a malformed call descriptor: " + why);
  };
  if (len < CallDescriptor::kFixedBytes) return bad(std::to_string(len) + " bytes, fewer than 48");
  if (std::memcmp(data, kMagic, 4) != 0) return bad("bad magic");
  if (data[4] != kVersion) return bad("version " + std::to_string(data[4]) + ", this library speaks 1");
  if (!kind_valid(data[5])) return bad("unknown collective kind " + std::to_string(data[5]));
  const size_t spec_len = get<uint16_t>(data + 10);
  if (spec_len > CallDescriptor::kMaxSpec || CallDescriptor::kFixedBytes + spec_len != len) {
    return bad("codec spec of " + std::to_string(spec_len) + " bytes in a message of " + std::to_string(len));
  }
  CallDescriptor d;
  d.kind = static_cast<CallKind>(data[5]);
  d.op = data[6];
  d.dtype = data[7];
  d.algo = data[8];
  d.flags = data[9];
  d.root = get<int32_t>(data + 12);
  d.count = get<uint64_t>(data + 16);
  d.seq = get<uint64_t>(data + 24);
  d.sizes = get<uint64_t>(data + 40);
  const char* spec = reinterpret_cast<const char*>(data + CallDescriptor::kFixedBytes);
  for (size_t i = 0; i < spec_len; ++i) {
    const unsigned char ch = static_cast<unsigned char>(spec[i]);
    if (ch < 0x20 || ch > 0x7e) return bad("codec spec holds byte " + std::to_string(ch));
  }
  d.spec.assign(spec, spec_len);
  // A spec longer than the wire carries is compared by its hash; the text is then a prefix.
  if (get<uint64_t>(data + 32) != fnv1a(d.spec)) d.spec += "...#" + std::to_string(get<uint64_t>(data + 32));
  return d;
}

std::string describe_mismatch(const CallDescriptor& theirs, int their_rank, const CallDescriptor& mine, int my_rank) {
  return "rank " + std::to_string(their_rank) + " called " + call_kind_name(theirs.kind) + fields(theirs, mine) +
         ", rank " + std::to_string(my_rank) + " called " + call_kind_name(mine.kind) + fields(mine, theirs);
}

std::string describe_call(const CallDescriptor& d) { return call_kind_name(d.kind) + fields(d, d, true); }

}  // namespace gw::coll
