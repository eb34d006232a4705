// Inside the unique id (bootstrap.hpp documents the layout), and the random bytes behind it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradwire/status.hpp"
#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/socket.hpp"

namespace gw::bootstrap {

namespace id_layout {
constexpr size_t kMagic = 0, kVersion = 4, kFamily = 5, kPort = 6, kAddress = 8, kToken = 24, kEnd = 40;
constexpr uint8_t kMagicBytes[4] = {'G', 'W', 'I', 'D'};
constexpr uint8_t kVersionValue = 1;
}  // namespace id_layout

// n bytes from getrandom(), or /dev/urandom where getrandom() is missing.
Status random_bytes(uint8_t* out, size_t n);

UniqueId make_unique_id(const Endpoint& root, const uint8_t token[16]);
// The root's endpoint and token of an id that passed validate_unique_id().
Endpoint unique_id_endpoint(const UniqueId& id);
inline const uint8_t* unique_id_token(const UniqueId& id) { return id.bytes + id_layout::kToken; }

}  // namespace gw::bootstrap
