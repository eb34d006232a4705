// libFuzzer harness: gw::transport::validate_ucx_address on arbitrary bytes (the worker address
// a peer sends through the rendezvous). Only the validator runs here, never UCX itself.
//
// Input: the address.
//
// Invariants (any violation aborts; ASan catches any read outside the input):
//   - the UCX 1.13 parser (detail::validate_ucx_address_as with 1.13, unified mode off: the
//     full walk, whatever UCX this binary is linked with) never reads outside the input;
//   - when it accepts: the reported version is 1 or 2, there is at least one transport entry,
//     every structural offset lies inside the input, and the input minus its last byte, or
//     plus one byte, is rejected (an address is exactly as long as its walk);
//   - the generic checks (another UCX version) accept exactly 1..kMaxUcxAddressBytes bytes;
//   - every rejection is Code::kRemote with a message naming the address length;
//   - validate_ucx_address itself (the linked UCX's verdict) agrees with the 1.13 parser
//     when the linked UCX is 1.13 and reports a full check.
// Seeds: tests/fuzz/corpus/ucx_address/ (real addresses from UCX 1.13 workers: default
// transports, tcp, sm, self, address versions 1 and 2, with and without debug info).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef GW_HAVE_UCX
#include "transport/ucx/ucx_address.hpp"
#endif

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_ucx_address: invariant violated: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#ifdef GW_HAVE_UCX
  using gw::Code;
  using gw::Status;
  namespace gt = gw::transport;

  gt::UcxAddressInfo info;
  const Status full = gt::detail::validate_ucx_address_as(data, size, 1, 13, false, &info);
  const std::string prefix = "worker address";
  if (full.is_ok()) {
    check(info.full_check, "accepted without the full check");
    check(info.version == 1 || info.version == 2, "accepted with a version other than 1 or 2");
    check(!info.entries.empty(), "accepted without transport entries");
    for (uint32_t off : info.structural_offsets) check(off < size, "structural offset outside the input");
    // Exact length: one byte less or one byte more is refused (copies, so ASan sees the ends).
    std::vector<uint8_t> shorter(data, data + size - 1);
    check(!gt::detail::validate_ucx_address_as(shorter.data(), shorter.size(), 1, 13, false, nullptr).is_ok(),
          "accepted address still accepted one byte shorter");
    std::vector<uint8_t> longer(data, data + size);
    longer.push_back(0);
    check(!gt::detail::validate_ucx_address_as(longer.data(), longer.size(), 1, 13, false, nullptr).is_ok(),
          "accepted address still accepted one byte longer");
  } else {
    check(full.code() == Code::kRemote, "rejection with a code other than kRemote");
    check(full.message().compare(0, prefix.size(), prefix) == 0, "rejection message does not name the address");
  }

  const bool generic_ok = gt::detail::validate_ucx_address_as(data, size, 1, 14, false, nullptr).is_ok();
  check(generic_ok == (size > 0 && size <= gt::kMaxUcxAddressBytes), "generic checks disagree with the size rule");

  gt::UcxAddressInfo linked_info;
  const Status linked = gt::validate_ucx_address(data, size, &linked_info);
  if (linked_info.full_check) {
    check(linked.is_ok() == full.is_ok(), "validate_ucx_address disagrees with the 1.13 parser");
  }
#else
  (void)data;
  (void)size;
#endif
  return 0;
}
