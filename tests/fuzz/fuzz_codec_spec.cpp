// libFuzzer harness: codec spec text (gw_codec_create, GW_CODEC, the torch hook's arguments).
// Any text is refused with an error naming what is wrong, or parses to a spec whose canonical
// text parses back to the same spec.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gradwire/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto s = gw::CodecSpec::parse(text);
  if (!s.is_ok()) {
    if (s.status().code() != gw::Code::kInvalidArgument) std::abort();
    if (s.status().message().rfind("codec spec", 0) != 0) std::abort();
    return 0;
  }
  if (size > 1024) std::abort();
  const std::string canonical = s.value().to_string();
  auto again = gw::CodecSpec::parse(canonical);
  if (!again.is_ok() || again.value().to_string() != canonical) std::abort();
  return 0;
}
