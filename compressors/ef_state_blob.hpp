// An error-feedback state as bytes, for checkpoints (gw_ef_state_save / gw_ef_state_load):
//   0 magic "GWEF"  4 version u8 (1)  5..7 zero  8 count u64  16 step u64  24 owner count u64
//  32 residual (count float32)  then the owner-side residual (owner count float32)
// Little-endian. A loaded blob is untrusted: its lengths are checked against the state it is
// loaded into before anything is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "gradwire/status.hpp"

namespace gw {

constexpr size_t kEfBlobHeader = 32;

// What saving and loading need of a state, host or device.
struct EfAccess {
  size_t count;
  uint64_t step;
  size_t owner_count;
  std::function<Status(float*)> read_residual;              // count floats out
  std::function<Status(float*)> read_owner;                 // owner_count floats out
  std::function<Status(const float*)> write_residual;       // count floats in
  std::function<Status(const float*, size_t)> write_owner;  // owner residual of n floats in
  std::function<void(uint64_t)> set_step;
};

// Bytes a blob of this state takes (fails when the sizes overflow).
Result<size_t> ef_blob_bytes(const EfAccess& ef);
// Writes the blob into out (capacity bytes); returns its length.
Result<size_t> save_ef_blob(const EfAccess& ef, void* out, size_t capacity);
// Restores a blob into ef; kInvalidMessage when the bytes are not a blob, kInvalidArgument
// when it was saved from a state of another size. Nothing is written unless all checks pass.
Status load_ef_blob(const EfAccess& ef, const void* blob, size_t len);

}  // namespace gw
