// The schedules the simulator replays: gradwire's all-reduce algorithms, built from the same
// schedule pieces the algorithms run (Partition, Chunking, Doubling, the scatter-reduce's peer
// order) with each message's bytes as the codec bounds them, and NCCL's ring and double
// binary tree as its documentation describes them, on the same model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/policy/cost_model.hpp"
#include "gradwire/codec.hpp"
#include "tools/sim/schedule.hpp"

namespace gw::sim {

struct Call {
  int ranks = 2;
  uint64_t count = 0;                    // fp32 elements
  size_t chunk_bytes = size_t{1} << 20;  // gradwire's pipelining unit (CommConfig::chunk_bytes)
  const Codec* codec = nullptr;          // compressed algorithms: the codec (its bounds and rates)
  bool checks = true;                    // gradwire's call-check descriptors (check_graph.hpp) too
};

// Names: ring, recursive_doubling, rabenseifner, compressed_ring, scatter_reduce, halving_doubling,
// sparse_allgather, sparse_doubling (gradwire) and nccl_ring, nccl_tree. Null for an unknown name or a
// compressed algorithm without a codec.
std::unique_ptr<Schedule> make_schedule(const std::string& algo, const Call& call, const coll::CostModel& model);
std::vector<std::string> schedule_names();
bool compressed_schedule(const std::string& algo);

}  // namespace gw::sim
