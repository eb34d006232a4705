#include "compressors/codec_registry.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace gw::detail {
namespace {

// Filled during static initialization, read-only afterwards. A function-local static so that
// registrars in other files find it constructed whatever the order of initialization.
std::vector<const CodecEntry*>& entries() {
  static std::vector<const CodecEntry*> sorted_by_id;
  return sorted_by_id;
}

[[noreturn]] void refuse(const CodecEntry& entry, const char* why) {
  std::fprintf(stderr, "gradwire: codec '%s' (id %d) cannot be registered: %s\n",
               entry.name != nullptr ? entry.name : "(null)", static_cast<int>(entry.id), why);
  std::abort();
}

}  // namespace

void register_codec(const CodecEntry& entry) {
  if (entry.name == nullptr || entry.name[0] == '\0') refuse(entry, "it has no name");
  if (entry.make == nullptr || entry.validate == nullptr || entry.apply == nullptr) {
    refuse(entry, "make, validate and apply are all required");
  }
  std::vector<const CodecEntry*>& all = entries();
  for (const CodecEntry* e : all) {
    if (e->id == entry.id) refuse(entry, "the id is taken");
    if (std::strcmp(e->name, entry.name) == 0) refuse(entry, "the name is taken");
  }
  const auto at =
      std::lower_bound(all.begin(), all.end(), entry.id, [](const CodecEntry* e, CodecId id) { return e->id < id; });
  all.insert(at, &entry);
}

const CodecEntry* find_codec(CodecId id) {
  for (const CodecEntry* e : entries()) {
    if (e->id == id) return e;
  }
  return nullptr;
}

const CodecEntry* find_codec(std::string_view name) {
  for (const CodecEntry* e : entries()) {
    if (name == e->name) return e;
  }
  return nullptr;
}

size_t codec_count() { return entries().size(); }

const CodecEntry* codec_at(size_t index) { return index < entries().size() ? entries()[index] : nullptr; }

}  // namespace gw::detail

namespace gw {

const char* codec_name(CodecId id) {
  const detail::CodecEntry* e = detail::find_codec(id);
  return e != nullptr ? e->name : "unknown";
}

}  // namespace gw
