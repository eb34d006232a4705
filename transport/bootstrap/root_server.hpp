// The rendezvous root: a background thread that serves one job (protocol in root_server.cpp).
#pragma once

#include <chrono>
#include <cstdint>

#include "gradwire/status.hpp"
#include "transport/bootstrap/socket.hpp"

namespace gw::bootstrap {

// Serves one job on `listener` (bound, listening, non-blocking), advertised as `where`, for
// ranks that prove they hold `token` (which never crosses the wire). Returns once the thread runs. The thread owns
// everything it uses and ends by itself: when every rank has its table, when `timeout` passes, or when the process
// exits (an exit handler tells running roots to stop and waits briefly for them).
Status start_root_server(Socket listener, const Endpoint& where, const uint8_t token[16],
                         std::chrono::milliseconds timeout);

// How many root threads of this process are still running (for tests and diagnostics).
int running_root_servers();

}  // namespace gw::bootstrap
