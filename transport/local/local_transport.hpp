// An in-process transport: the ranks are threads of one process and messages are copied
// between their buffers when a send meets its receive. Tests use it to run every collective
// over every size, rank count and codec in milliseconds (as Gloo tests do with threads); the
// multi-process tests run the same collectives over UCX.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.hpp"

namespace gw::transport {

class LocalFabric;

// Creates `size` connected transports, one per rank.
std::vector<std::unique_ptr<Transport>> make_local_group(int size);

}  // namespace gw::transport
