#include "collectives/comm/comm_init.hpp"

#include <string>

#include "collectives/comm/topology.hpp"
#include "common/log.hpp"
#include "transport/topology/host_identity.hpp"
#include "transport/transport.hpp"
#ifdef GW_HAVE_UCX
#include "transport/ucx/ucx_transport.hpp"
#else
#include "transport/local/local_transport.hpp"
#endif

namespace gw::coll {
namespace {

#ifdef GW_HAVE_UCX
// Each rank's launcher hint against the layout the host identities give: a disagreement is
// said on the rank that has it (identities win: they are what shared memory follows).
void check_hints(const Topology& t, const std::vector<topo::HostInfo>& hosts, int rank) {
  const topo::HostInfo& me = hosts[static_cast<size_t>(rank)];
  if (me.hint_local_size < 0) return;
  if (me.hint_local_size != t.local_size || me.hint_local_rank != t.local_rank) {
    GW_WARN(kInit,
            "topology: %s says local rank %d of %d, but the ranks' host identities make this local rank %d of %d "
            "(%s); using the identities (set GW_HOST_ID where hosts cannot be told apart)",
            me.hint_source.c_str(), me.hint_local_rank, me.hint_local_size, t.local_rank, t.local_size,
            t.describe().c_str());
  }
}
#endif

}  // namespace

Result<std::unique_ptr<Communicator>> init_communicator(int rank, int nranks, const AddressExchange& exchange,
                                                        const CommConfig& config) {
  if (nranks < 1 || nranks > transport::kMaxRanks) {
    return invalid_argument("nranks " + std::to_string(nranks) + " is not in [1, " +
                            std::to_string(transport::kMaxRanks) + "]");
  }
  if (rank < 0 || rank >= nranks) {
    return invalid_argument("rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  }
  log::set_rank(rank);
  log::on_first_init();
  // One deadline for the whole init: the rendezvous and the transport's handshake.
  const auto deadline = transport::Clock::now() + config.timeout;
#ifdef GW_HAVE_UCX
  GW_ASSIGN_OR_RETURN(std::unique_ptr<transport::UcxTransport> tp, transport::UcxTransport::create(rank, nranks));
  // Every rank's host record travels ahead of its transport address.
  GW_ASSIGN_OR_RETURN(std::vector<std::string> blobs,
                      exchange(topo::encode_host_info(topo::local_host_info()) + tp->local_address()));
  if (blobs.size() != static_cast<size_t>(nranks)) {
    return internal_error("address exchange returned " + std::to_string(blobs.size()) + " entries for " +
                          std::to_string(nranks) + " ranks");
  }
  std::vector<topo::HostInfo> hosts(blobs.size());
  std::vector<std::string> ids(blobs.size()), addresses(blobs.size());
  for (size_t r = 0; r < blobs.size(); ++r) {
    size_t used = 0;
    GW_ASSIGN_OR_RETURN(hosts[r], topo::parse_host_info(blobs[r], static_cast<int>(r), &used));
    ids[r] = hosts[r].id;
    addresses[r] = blobs[r].substr(used);
  }
  const Topology t = Topology::from_keys(ids, rank);
  check_hints(t, hosts, rank);
  GW_RETURN_IF_ERROR(tp->connect(addresses, deadline));
  return Communicator::create(std::move(tp), config, t.node_of);
#else
  (void)exchange;
  (void)deadline;
  // One rank needs no transport between processes: the in-process one serves it.
  if (nranks == 1) return Communicator::create(std::move(transport::make_local_group(1).front()), config);
  return unsupported("this gradwire was built without UCX (GW_WITH_UCX=OFF): no multi-process transport for " +
                     std::to_string(nranks) + " ranks (one rank works without it)");
#endif
}

}  // namespace gw::coll
