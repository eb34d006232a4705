// The table of codecs: how each is built from a spec, how its messages are validated and
// applied. A codec is a host file (its Codec subclass and entry), a kernel file and a row here.
#pragma once

#include <memory>
#include <string_view>

#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/status.hpp"

namespace gw::detail {

struct CodecEntry {
  CodecId id;
  const char* name;
  // Spec keys this codec accepts besides "ef".
  const char* keys;
  std::unique_ptr<Codec> (*make)(const CodecSpec& spec);
  // Checks the codec parameters of a header and everything in the payload that could make
  // apply() misbehave (lengths, index order and range); sets nnz. Reads, never writes; reads
  // the payload only for the index-carrying codecs (topk, dgc), so the device decoder may pass
  // a null payload for the others.
  Status (*validate)(const wire::Header& header, const uint8_t* payload, uint64_t& nnz);
  // Writes the decoded values into dst; called only after validate() succeeded.
  void (*apply)(const wire::Header& header, const uint8_t* payload, void* dst, DType dtype,
                DecodeMode mode);
  // Output dtypes the decoder can write (lossy codecs: float32 only).
  bool any_dst_dtype;
};

const CodecEntry* find_codec(CodecId id);
const CodecEntry* find_codec(std::string_view name);

extern const CodecEntry kNoneEntry;
extern const CodecEntry kFp16Entry;
extern const CodecEntry kBf16Entry;
extern const CodecEntry kQsgdEntry;
extern const CodecEntry kSignEntry;
extern const CodecEntry kTopkEntry;
extern const CodecEntry kDgcEntry;
extern const CodecEntry kRandomkEntry;

}  // namespace gw::detail
