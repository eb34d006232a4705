// Shared memory among the ranks of one node, for the hierarchical all-reduce's legs inside
// the node: every local rank maps one segment (a slot of the call's buffer size per local
// rank) and the legs are plain memory copies and reductions between barriers, instead of
// messages through the transport (UCX's shared-memory transport with peer-failure handling
// moves large messages through a FIFO in 8 KiB fragments: 32 MiB took 100-200 ms here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/common/context.hpp"

namespace gw::coll {

class NodeShm {
 public:
  NodeShm() = default;
  NodeShm(const NodeShm&) = delete;
  NodeShm& operator=(const NodeShm&) = delete;
  ~NodeShm();

  // Every local rank calls it in the same call with the same bytes (in_node: the node's
  // ranks, local rank 0 creating the segment). A segment of at least bytes, or null when the
  // node cannot have one (then the caller goes through the transport; said once in the log).
  // Errors are the transport's (a peer failing mid-setup).
  Result<uint8_t*> map(Context& in_node, size_t bytes);

 private:
  void unmap();
  uint8_t* base_ = nullptr;
  size_t cap_ = 0;
  bool disabled_ = false;
  uint32_t generation_ = 0;
};

}  // namespace gw::coll
