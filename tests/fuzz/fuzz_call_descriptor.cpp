// libFuzzer harness: the collective call descriptors a peer sends before every call
// (collectives/checks/call_descriptor.hpp). A parsed descriptor must encode back to the same bytes
// (unless its spec text is longer than the wire carries), and describing a mismatch against
// it must work for any parsed value.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "collectives/checks/call_descriptor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gw::coll::CallDescriptor;
  auto parsed = gw::coll::parse_descriptor(data, size, 3);
  if (!parsed.is_ok()) {
    if (parsed.status().code() != gw::Code::kRemote) std::abort();
    if (parsed.status().message().find("rank 3") == std::string::npos) std::abort();
    return 0;
  }
  const CallDescriptor& d = parsed.value();
  if (size < CallDescriptor::kFixedBytes || size > CallDescriptor::kMaxBytes) std::abort();
  if (d.spec.find("...#") == std::string::npos) {
    uint8_t again[CallDescriptor::kMaxBytes];
    const size_t n = gw::coll::encode_descriptor(d, again);
    // Reserved bytes are not carried; everything else must round-trip.
    if (n != size || std::memcmp(again, data, 40) != 0 || std::memcmp(again + 48, data + 48, n - 48) != 0) std::abort();
  }
  CallDescriptor mine;
  mine.kind = gw::coll::CallKind::kAllreduce;
  mine.count = 1000;
  mine.dtype = 1;
  mine.op = 0;
  mine.algo = 1;
  const std::string why = gw::coll::describe_mismatch(d, 3, mine, 0);
  if (why.find("rank 3") == std::string::npos || why.find("rank 0") == std::string::npos) std::abort();
  return 0;
}
