// The UCX transport: UCP tag messages over whatever UCX selects (InfiniBand/RoCE verbs, TCP,
// shared memory). UCX_* environment variables reach UCX untouched.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradwire/status.hpp"
#include "transport/transport.hpp"

namespace gw::transport {

class UcxTransport : public Transport {
 public:
  // Builds the UCP context and worker for `rank` of `size`. No peer is connected yet.
  static Result<std::unique_ptr<UcxTransport>> create(int rank, int size);

  // What peers need to reach this rank (the UCX worker address, and who this process is, so
  // that a peer on the same host can watch it), to be exchanged out of band.
  virtual std::string local_address() const = 0;
  // Connects to every peer; addresses[r] is rank r's local_address(), untrusted: checked
  // before UCX sees it (kRemote naming the rank). Collective: every rank calls it, and it
  // returns once every rank has connected to this one (each endpoint is wired up here rather
  // than at its first message), or fails with kTimeout at the deadline.
  virtual Status connect(const std::vector<std::string>& addresses, Clock::time_point deadline) = 0;
};

}  // namespace gw::transport
