#include "compressors/codec_registry.hpp"

namespace gw::detail {
namespace {

const CodecEntry* const kEntries[] = {&kNoneEntry, &kFp16Entry, &kBf16Entry, &kQsgdEntry,
                                      &kSignEntry, &kTopkEntry, &kDgcEntry,  &kRandomkEntry};

}  // namespace

const CodecEntry* find_codec(CodecId id) {
  for (const CodecEntry* e : kEntries) {
    if (e->id == id) return e;
  }
  return nullptr;
}

const CodecEntry* find_codec(std::string_view name) {
  for (const CodecEntry* e : kEntries) {
    if (name == e->name) return e;
  }
  return nullptr;
}

}  // namespace gw::detail

namespace gw {

const char* codec_name(CodecId id) {
  const detail::CodecEntry* e = detail::find_codec(id);
  return e != nullptr ? e->name : "unknown";
}

}  // namespace gw
