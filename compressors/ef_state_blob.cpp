#include "compressors/ef_state_blob.hpp"

#include <cstring>
#include <string>
#include <vector>

namespace gw {

namespace {

constexpr uint8_t kMagic[4] = {'G', 'W', 'E', 'F'};
constexpr uint8_t kVersion = 1;

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

Result<size_t> blob_bytes(uint64_t count, uint64_t owner_count) {
  uint64_t floats = 0, bytes = 0, total = 0;
  if (__builtin_add_overflow(count, owner_count, &floats) || __builtin_mul_overflow(floats, uint64_t{4}, &bytes) ||
      __builtin_add_overflow(bytes, uint64_t{kEfBlobHeader}, &total) || total > SIZE_MAX) {
    return invalid_argument("error-feedback state of " + std::to_string(count) + " + " + std::to_string(owner_count) +
                            " floats is too large to save");
  }
  return static_cast<size_t>(total);
}

}  // namespace

Result<size_t> ef_blob_bytes(const EfAccess& ef) { return blob_bytes(ef.count, ef.owner_count); }

Result<size_t> save_ef_blob(const EfAccess& ef, void* out, size_t capacity) {
  GW_ASSIGN_OR_RETURN(size_t need, ef_blob_bytes(ef));
  if (capacity < need) {
    return buffer_too_small("saving this error-feedback state takes " + std::to_string(need) + " bytes, capacity is " +
                            std::to_string(capacity));
  }
  auto* p = static_cast<uint8_t*>(out);
  std::memcpy(p, kMagic, 4);
  p[4] = kVersion;
  p[5] = p[6] = p[7] = 0;
  put_u64(p + 8, ef.count);
  put_u64(p + 16, ef.step);
  put_u64(p + 24, ef.owner_count);
  static_assert(sizeof(float) == 4, "float32 residuals");
  // out may have any alignment: the floats go through an aligned copy.
  std::vector<float> floats(ef.count + ef.owner_count);
  if (ef.count > 0) GW_RETURN_IF_ERROR(ef.read_residual(floats.data()));
  if (ef.owner_count > 0) GW_RETURN_IF_ERROR(ef.read_owner(floats.data() + ef.count));
  if (!floats.empty()) std::memcpy(p + kEfBlobHeader, floats.data(), floats.size() * sizeof(float));
  return need;
}

Status load_ef_blob(const EfAccess& ef, const void* blob, size_t len) {
  const auto* p = static_cast<const uint8_t*>(blob);
  if (p == nullptr || len < kEfBlobHeader || std::memcmp(p, kMagic, 4) != 0) {
    return invalid_message("not a saved error-feedback state (no GWEF header)");
  }
  if (p[4] != kVersion) {
    return invalid_message("saved error-feedback state has version " + std::to_string(p[4]) + ", this library reads " +
                           std::to_string(kVersion));
  }
  const uint64_t count = get_u64(p + 8), step = get_u64(p + 16), owner_count = get_u64(p + 24);
  auto need = blob_bytes(count, owner_count);
  if (!need.is_ok() || need.value() != len) {
    return invalid_message("saved error-feedback state is " + std::to_string(len) + " bytes, its header describes " +
                           std::to_string(count) + " + " + std::to_string(owner_count) + " floats");
  }
  if (count != ef.count) {
    return invalid_argument("saved error-feedback state holds " + std::to_string(count) + " elements, this state " +
                            std::to_string(ef.count));
  }
  // The floats may sit at any alignment in the caller's buffer: copy them out first.
  std::vector<float> floats(static_cast<size_t>(count + owner_count));
  if (!floats.empty()) std::memcpy(floats.data(), p + kEfBlobHeader, floats.size() * sizeof(float));
  if (count > 0) GW_RETURN_IF_ERROR(ef.write_residual(floats.data()));
  GW_RETURN_IF_ERROR(ef.write_owner(floats.data() + count, static_cast<size_t>(owner_count)));
  ef.set_step(step);
  return Status::ok();
}

}  // namespace gw
