#include "collectives/comm_init.hpp"

#include <string>

#include "transport/log.hpp"
#ifdef GW_HAVE_UCX
#include "transport/ucx/ucx_transport.hpp"
#endif

namespace gw::coll {

Result<std::unique_ptr<Communicator>> init_communicator(int rank, int nranks, const AddressExchange& exchange,
                                                        const CommConfig& config) {
  if (nranks < 1 || nranks > 1024) return invalid_argument("nranks " + std::to_string(nranks) + " is not in [1, 1024]");
  if (rank < 0 || rank >= nranks) {
    return invalid_argument("rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  }
  log::set_rank(rank);
  log::on_first_init();
  // One deadline for the whole init: the rendezvous and the transport's handshake.
  const auto deadline = transport::Clock::now() + config.timeout;
#ifdef GW_HAVE_UCX
  GW_ASSIGN_OR_RETURN(std::unique_ptr<transport::UcxTransport> tp, transport::UcxTransport::create(rank, nranks));
  GW_ASSIGN_OR_RETURN(std::vector<std::string> addresses, exchange(tp->local_address()));
  if (addresses.size() != static_cast<size_t>(nranks)) {
    return internal_error("address exchange returned " + std::to_string(addresses.size()) + " entries for " +
                          std::to_string(nranks) + " ranks");
  }
  GW_RETURN_IF_ERROR(tp->connect(addresses, deadline));
  return Communicator::create(std::move(tp), config);
#else
  (void)exchange;
  (void)deadline;
  return unsupported("this gradwire was built without UCX (GW_WITH_UCX=OFF): no multi-process transport");
#endif
}

}  // namespace gw::coll
