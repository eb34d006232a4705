// A discrete-event simulation of one collective call: every rank runs its program
// (schedule.hpp) over a network of the cost model's parameters (cost_model.hpp).
//
// - A message leaves its sender's port after the sender's CPU time per message (message_cpu_s)
//   and its port's earlier messages, at link_bytes_per_s; it is complete at the receiver
//   latency_s after it started, or when the receiver's port has taken in its earlier
//   messages and its bytes, whichever is later. Ports serve messages in the order the senders
//   reach them (ranks advance in time order; a rank runs ahead only within its own work).
//   Messages of at most 512 bytes (call descriptors) take no turn at either port: a packet
//   interleaves with bulk transfers. The fabric in between never congests (a full-bisection
//   fat tree).
// - Receiving costs the receiver message_cpu_s once the message is complete.
// - CPU time (work and per-message time) runs on the rank's core, one lane at a time; with
//   model.cores > 0 all ranks share that many cores (ranks oversubscribed on one machine), and
//   with more ranks than cores a rank waiting for a message polls for it as the transport
//   does (30 us, each look a switch_s of a core), then sleeps and pays a switch when woken.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/policy/cost_model.hpp"
#include "tools/sim/schedule.hpp"

namespace gw::sim {

struct Outcome {
  double seconds = 0;     // the last rank's finish
  uint64_t messages = 0;  // sent in all
  double bytes = 0;       // sent in all
  uint64_t events = 0;    // operations replayed
  bool deadlock = false;  // a rank waited for a message nobody sent
  std::string error;      // set with deadlock, or when a limit was hit
};

struct Limits {
  uint64_t max_in_flight = uint64_t{200} << 20;  // messages sent and not yet received
};

Outcome simulate(const Schedule& s, const coll::CostModel& model, const Limits& limits = {});

}  // namespace gw::sim
