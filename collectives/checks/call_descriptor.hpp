// What a collective call is, as every rank states it to every other rank before its data
// moves (docs/architecture.md, "What is checked on the wire"). Two ranks whose descriptors
// differ made different calls: the call fails on every rank with a message naming both sides,
// instead of pairing mismatched messages (NCCL hangs or corrupts there).
//
// Wire layout (little-endian, 48 bytes, then spec_len bytes of the codec's spec text):
//   0  magic "GWCD"      4  version u8 (1)   5  kind u8   6  op u8   7  dtype u8
//   8  algo u8           9  flags u8 (bit 0: device memory)  10  spec_len u16
//  12  root i32         16  count u64        24  seq u64     32  codec spec hash u64 (FNV-1a)
//  40  sizes digest u64 (FNV-1a of a size array every rank passes alike; 0 when none)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gradwire/status.hpp"

namespace gw::coll {

enum class CallKind : uint8_t {
  kAllreduce = 1,
  kSparseAllgather = 2,
  kSparseAllgatherDense = 3,
  kAllgather = 4,
  kBroadcast = 5,
  kBarrier = 6,
  kTunerAgreement = 7,  // the tuner's exchange of timings after its trial calls
  kNcclSetup = 8,       // one step of enable_nccl
  kReduce = 9,
  kReduceScatter = 10,  // count: each rank's block
  kAllgatherv = 11,     // count: total bytes; sizes: digest of the recvbytes array
  kAlltoall = 12,       // count: bytes per block
  kAlltoallv = 13,      // sizes are per pair: checked by the algorithm itself
  kGather = 14,
  kScatter = 15,
  kReduceScatterV = 16,       // blocks of any sizes, raw or compressed; count: all blocks; sizes: their digest
  kAllgatherCompressed = 17,  // count: elements per rank
};
constexpr uint8_t kNoField = 0xff;  // op, dtype or algo that a kind does not have

struct CallDescriptor {
  CallKind kind = CallKind::kBarrier;
  uint8_t op = kNoField;
  uint8_t dtype = kNoField;
  uint8_t algo = kNoField;
  uint8_t flags = 0;
  int32_t root = -1;
  uint64_t count = 0;  // elements (all-reduce, dense sparse all-gather) or bytes
  uint64_t seq = 0;    // the communicator's call number
  uint64_t sizes = 0;  // digest of per-rank sizes every rank must pass alike (size_digest); 0: none
  std::string spec;    // canonical codec spec ("" for none), at most kMaxSpec bytes on the wire

  static constexpr uint8_t kDevice = 1;
  static constexpr size_t kFixedBytes = 48;
  static constexpr size_t kMaxSpec = 208;
  static constexpr size_t kMaxBytes = kFixedBytes + kMaxSpec;
};

const char* call_kind_name(CallKind kind);

// The digest of n sizes for CallDescriptor::sizes (never 0).
uint64_t size_digest(const uint64_t* sizes, size_t n);

// Writes d into out (kMaxBytes available); returns the length written.
size_t encode_descriptor(const CallDescriptor& d, uint8_t* out);
// The length of the descriptor at the head of len untrusted bytes (a message that carries
// one ahead of its data), or 0 when they do not start with one.
size_t descriptor_length(const uint8_t* data, size_t len);
// Parses untrusted bytes from `peer`: kRemote (naming the peer) when they are not a descriptor.
Result<CallDescriptor> parse_descriptor(const uint8_t* data, size_t len, int peer);

// Why two different calls do not match: "rank 1 called allreduce count=1001, rank 0 called
// allreduce count=1000" (only the fields that differ, both sides).
std::string describe_mismatch(const CallDescriptor& theirs, int their_rank, const CallDescriptor& mine, int my_rank);
// One call with all its fields: "allreduce count=1000 dtype=float32 op=sum codec=none algo=ring".
std::string describe_call(const CallDescriptor& d);

}  // namespace gw::coll
