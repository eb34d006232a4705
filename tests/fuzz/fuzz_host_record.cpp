// libFuzzer harness: gw::topo::parse_host_info on arbitrary bytes (the host record a peer
// sends ahead of its transport address at bootstrap, followed by that address).
//
// Input: the record and whatever follows it.
//
// Invariants (any violation aborts; ASan catches any read outside the input):
//   - an accepted record consumed at most the input, and encoding what was parsed gives back
//     exactly the consumed bytes (one encoding per record: nothing is skipped or guessed);
//   - an accepted record's hints are -1 or in range (rank < size when size > 0), its identity
//     and hint source no longer than the input;
//   - every rejection is Code::kRemote naming the rank and "malformed address".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "transport/topology/host_identity.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_host_record: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string blob(reinterpret_cast<const char*>(data), size);
  size_t consumed = ~size_t{0};
  const gw::Result<gw::topo::HostInfo> r = gw::topo::parse_host_info(blob, 7, &consumed);
  if (!r.is_ok()) {
    if (r.status().code() != gw::Code::kRemote) fail("a rejection that is not kRemote");
    const std::string& m = r.status().message();
    if (m.find("rank 7") == std::string::npos || m.find("malformed address") == std::string::npos) {
      fail("a rejection that does not name the rank and the malformed address");
    }
    return 0;
  }
  const gw::topo::HostInfo& h = r.value();
  if (consumed > size) fail("consumed more than the input");
  if (gw::topo::encode_host_info(h) != blob.substr(0, consumed)) fail("the record does not re-encode to its bytes");
  if (h.hint_local_rank < -1 || h.hint_local_size < -1) fail("a hint below -1");
  if (h.hint_local_size > 0 && h.hint_local_rank >= h.hint_local_size) fail("a local rank hint past its size");
  if (h.id.size() > size || h.hint_source.size() > size) fail("a string longer than the input");
  return 0;
}
