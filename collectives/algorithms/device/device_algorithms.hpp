// The collectives on device buffers (one file each), with what they share: fences that gate
// host-side steps on the device stream, and the check of a message staged in host memory.
// Messages are encoded and decoded on the device and cross the transport from pinned host
// memory; every step is enqueued as soon as its input exists, so device copies overlap the
// transfers of other chunks. Byte for byte the same messages and results as the host
// algorithms of the same name (the device codecs match the host codecs).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>

#include "collectives/algorithms/device/device_backend.hpp"
#include "collectives/common/context.hpp"
#include "compressors/device_ef_state.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"

namespace gw::coll {

Status device_scatter_reduce_allreduce(Context& c, DeviceBackend& dev, const float* send, float* recv, size_t n,
                                       ReduceOp op, const Codec& codec, DeviceEfState* ef);
Status device_sparse_allgather_allreduce(Context& c, DeviceBackend& dev, const float* send, float* recv, size_t n,
                                         ReduceOp op, const Codec& codec, DeviceEfState* ef);
// Dense: through NCCL when the backend has it up, else staged through host memory around the
// host ring (or the host all-gather and broadcast).
Status device_dense_allreduce(Context& c, DeviceBackend& dev, const void* send, void* recv, size_t n, DType dtype,
                              ReduceOp op);

struct Topology;
struct DeviceHierarchicalArgs {
  const void* send;
  void* recv;
  size_t n;
  DType dtype;
  ReduceOp op;
  const Codec* codec;  // null: dense
  Algo inner;          // the inter-node leg's algorithm (kRing: dense; kCompressedRing runs as scatter-reduce)
  DeviceEfState* ef;   // the caller's (n elements) or null; the inter-node leg's residual
  bool flush_ef;       // ef may hold a flat call's residual: send it with this call's input, once
};
// Dense inside nodes (the node's NCCL communicator, else pinned host memory over the
// transport), `inner` between them (device_hierarchical_allreduce.cpp); t.hierarchical().
Status device_hierarchical_allreduce(Context& c, DeviceBackend& dev, const Topology& t,
                                     const DeviceHierarchicalArgs& a);
// compressed_reduce_scatter's algorithm on device buffers: float32 with a codec.
struct DeviceReduceScatter {
  const float* send;
  float* recv;
  const uint64_t* counts;  // size entries
  ReduceOp op;             // sum or avg
  const Codec* codec;      // never null
  DeviceEfState* ef;       // null, or every element of send
};
Status device_reduce_scatter(Context& c, DeviceBackend& dev, const DeviceReduceScatter& a);
Status device_allgather(Context& c, DeviceBackend& dev, const void* send, void* recv, size_t bytes);
// compressed_allgather's algorithm on device buffers: float32 with a codec.
struct DeviceAllgatherCompressed {
  const float* send;  // count elements; may be recv's own block
  float* recv;        // size * count elements
  uint64_t count;
  const Codec* codec;  // never null
};
Status device_allgather_compressed(Context& c, DeviceBackend& dev, const DeviceAllgatherCompressed& a);
Status device_broadcast(Context& c, DeviceBackend& dev, void* buf, size_t bytes, int root);

// Host-side steps waiting for a point in the device stream (a staged message to be complete
// before it is sent, say). The stream runs in order, so they run in the order queued.
class FenceQueue {
 public:
  void push(DeviceBackend::Fence fence, std::function<Status()> step) { q_.push_back({fence, std::move(step)}); }
  bool empty() const { return q_.empty(); }
  // Runs every step whose fence was reached; *ran tells whether any did.
  Status run_ready(DeviceBackend& dev, bool* ran);

 private:
  struct Entry {
    DeviceBackend::Fence fence;
    std::function<Status()> step;
  };
  std::deque<Entry> q_;
};

// Message slots are laid out back to back: each starts 8-byte aligned, as device encoders
// require of their output.
inline size_t slot_bytes(size_t max_message) { return (max_message + 7) / 8 * 8; }

// Waits for fence, keeping the transport going; kTimeout at the context's deadline.
Status wait_fence(Context& c, DeviceBackend& dev, DeviceBackend::Fence fence);
// Waits for everything enqueued so far.
Status drain(Context& c, DeviceBackend& dev);
// When nothing moved: waits briefly for the transport, no longer than a device step may take
// when device work is pending; kTimeout past the deadline.
Status idle(Context& c, bool device_pending, const char* waiting_for);
// Checks a message received into host memory in full (it is untrusted) and that it decodes
// to n elements; returns its header for the device apply of its copy.
Result<wire::Header> validate_staged(const uint8_t* msg, size_t len, uint64_t n);

}  // namespace gw::coll
