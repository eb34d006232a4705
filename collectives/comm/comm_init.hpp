// Building a communicator over UCX once the ranks can exchange addresses.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradwire/communicator.hpp"

namespace gw::coll {

// exchange(blob) must return every rank's blob, indexed by rank (an all-gather).
using AddressExchange = std::function<Result<std::vector<std::string>>(const std::string& blob)>;

Result<std::unique_ptr<Communicator>> init_communicator(int rank, int nranks, const AddressExchange& exchange,
                                                        const CommConfig& config);

}  // namespace gw::coll
