// The public ways to make a communicator over UCX (communicator.hpp): from a launcher's
// environment, or from a unique id. The C ABI calls these too.
#include <cstring>

#include "collectives/comm/comm_init.hpp"
#include "common/log.hpp"
#include "gradwire/communicator.hpp"
#include "transport/bootstrap/bootstrap.hpp"

namespace gw {

static_assert(sizeof(UniqueId::bytes) == bootstrap::kUniqueIdBytes, "unique id sizes differ");

Result<UniqueId> get_unique_id() {
  log::on_first_init();
  GW_ASSIGN_OR_RETURN(CommConfig cfg, CommConfig::from_env());
  bootstrap::RootOptions options;
  options.timeout = cfg.timeout;
  GW_ASSIGN_OR_RETURN(bootstrap::UniqueId uid, bootstrap::create_unique_id(options));
  UniqueId id;
  std::memcpy(id.bytes, uid.bytes, sizeof id.bytes);
  return id;
}

Result<std::unique_ptr<Communicator>> Communicator::from_env() {
  GW_ASSIGN_OR_RETURN(CommConfig cfg, CommConfig::from_env());
  return from_env(cfg);
}

Result<std::unique_ptr<Communicator>> Communicator::from_env(const CommConfig& config) {
  log::on_first_init();
  GW_ASSIGN_OR_RETURN(bootstrap::LaunchEnv env, bootstrap::read_launch_env());
  auto exchange = [&](const std::string& blob) { return bootstrap::rendezvous_from_env(env, blob, config.timeout); };
  return coll::init_communicator(env.rank, env.size, exchange, config);
}

Result<std::unique_ptr<Communicator>> Communicator::init_rank(int nranks, const UniqueId& id, int rank) {
  GW_ASSIGN_OR_RETURN(CommConfig cfg, CommConfig::from_env());
  return init_rank(nranks, id, rank, cfg);
}

Result<std::unique_ptr<Communicator>> Communicator::init_rank(int nranks, const UniqueId& id, int rank,
                                                              const CommConfig& config) {
  log::on_first_init();
  bootstrap::UniqueId uid;
  std::memcpy(uid.bytes, id.bytes, sizeof uid.bytes);
  GW_RETURN_IF_ERROR(bootstrap::validate_unique_id(uid));
  auto exchange = [&](const std::string& blob) {
    return bootstrap::rendezvous(uid, rank, nranks, blob, config.timeout);
  };
  return coll::init_communicator(rank, nranks, exchange, config);
}

}  // namespace gw
