// Communicators of the C ABI that are still open when the process exits. A program that never
// calls gw_comm_destroy (or a language runtime that never finalises its handles) would
// otherwise leave its peers a dropped connection, which they report as a dead peer. The first
// handle made registers an exit handler (std::atexit) that closes every open communicator,
// newest first, with the same goodbye gw_comm_destroy does. The handle itself stays allocated
// and reports the communicator as closed: gw_comm_destroy on it later is still fine.
#pragma once

#include <memory>

#include "gradwire/communicator.hpp"

struct gw_comm_s {
  std::unique_ptr<gw::Communicator> comm;  // null once the exit handler closed it
};

namespace gw::capi {

// A new handle over comm, open until release() or the exit handler.
gw_comm_s* adopt(std::unique_ptr<Communicator> comm);
// gw_comm_destroy: closes (if still open) and frees the handle.
void release(gw_comm_s* handle);

}  // namespace gw::capi
