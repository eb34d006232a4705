// Hierarchical all-reduce on device buffers (hierarchical_allreduce.cpp's algorithm): a
// dense, exact reduce-scatter inside each node leaves local rank l holding the node's sum of
// shard l; the ranks holding shard l on every node all-reduce it with a flat device algorithm
// (compressed on the device, error feedback on this shard of the caller's state) or, dense,
// with the host ring; a dense all-gather inside the node hands every rank the result.
//
// The legs inside the node go through the node's NCCL communicator where the backend has one.
// Otherwise they run on a pinned host copy over the transport (the node's ranks as a
// subgroup), not through the node's shared segment: the segment's protocol belongs to the
// host path's pipeline, and a device buffer has to cross to host memory either way. The sums
// are the host path's without shared memory, so the same inputs give the same bits.
#include <string>
#include <vector>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/hierarchical/hierarchical_groups.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/algorithms/scratch_slots.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {
namespace {

// Scratch slots above those of the flat device algorithms (scratch_slots.hpp), which run
// inside the inter-node leg while these are in use.
constexpr int kStagingWhole = kHierStagingSlots.base;    // host: the whole buffer (the legs through the transport)
constexpr int kPaddedWhole = kHierDeviceSlots.base;      // device: node_size padded blocks (NCCL, uneven shards)
constexpr int kPaddedShard = kHierDeviceSlots.base + 1;  // device: one padded block (NCCL, uneven shards)
constexpr int kShardOwner = kHierDeviceSlots.base + 2;   // device: the owner-side residual of the inter-node leg

Status copy_bytes(DeviceBackend& dev, void* dst, const void* src, size_t bytes) {
  return bytes == 0 ? Status::ok() : dev.copy(dst, src, bytes);
}

// The intra-node legs through the node's NCCL communicator. NCCL's reduce-scatter and
// all-gather take equal blocks: where the node size does not divide n, the shards are padded
// to the longest one in scratch.
class NcclLegs {
 public:
  NcclLegs(Context& c, DeviceBackend& dev, const Partition& part, int local_rank, DType dtype)
      : c_(c),
        dev_(dev),
        part_(part),
        me_(static_cast<uint64_t>(local_rank)),
        dtype_(dtype),
        es_(dtype_size(dtype)),
        progress_([&c] { c.tp.progress(); }) {}

  Status reduce_scatter(const void* src, uint8_t* out, ReduceOp op) {
    GW_RETURN_IF_ERROR(c_.verify_all_calls());  // NCCL must never see a mismatched call
    const uint64_t L = part_.parts, q = part_.length(0), len = part_.length(me_);
    const ReduceOp sum_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    if (part_.n % L == 0) {
      GW_RETURN_IF_ERROR(dev_.node_nccl_reduce_scatter(src, out, len, dtype_, sum_op, c_.deadline, progress_));
    } else {
      GW_RETURN_IF_ERROR(padded(L * q, q));
      GW_RETURN_IF_ERROR(dev_.zero(whole_, L * q * es_));
      for (uint64_t j = 0; j < L; ++j) {
        GW_RETURN_IF_ERROR(copy_bytes(dev_, whole_ + j * q * es_,
                                      static_cast<const uint8_t*>(src) + part_.start(j) * es_, part_.length(j) * es_));
      }
      GW_RETURN_IF_ERROR(dev_.node_nccl_reduce_scatter(whole_, block_, q, dtype_, sum_op, c_.deadline, progress_));
      GW_RETURN_IF_ERROR(copy_bytes(dev_, out, block_, len * es_));
    }
    return dev_.node_nccl_wait(c_.deadline, progress_);
  }

  Status all_gather(uint8_t* recv) {
    const uint64_t L = part_.parts, q = part_.length(0), len = part_.length(me_);
    uint8_t* shard = recv + part_.start(me_) * es_;
    if (part_.n % L == 0) {
      GW_RETURN_IF_ERROR(dev_.node_nccl_allgather(shard, recv, len * es_, c_.deadline, progress_));
    } else {
      GW_RETURN_IF_ERROR(padded(L * q, q));
      GW_RETURN_IF_ERROR(copy_bytes(dev_, block_, shard, len * es_));
      GW_RETURN_IF_ERROR(dev_.node_nccl_allgather(block_, whole_, q * es_, c_.deadline, progress_));
      for (uint64_t j = 0; j < L; ++j) {
        GW_RETURN_IF_ERROR(copy_bytes(dev_, recv + part_.start(j) * es_, whole_ + j * q * es_, part_.length(j) * es_));
      }
    }
    return dev_.node_nccl_wait(c_.deadline, progress_);
  }

 private:
  Status padded(uint64_t whole, uint64_t block) {
    GW_ASSIGN_OR_RETURN(void* w, dev_.device_scratch(kPaddedWhole, whole * es_));
    GW_ASSIGN_OR_RETURN(void* b, dev_.device_scratch(kPaddedShard, block * es_));
    whole_ = static_cast<uint8_t*>(w);
    block_ = static_cast<uint8_t*>(b);
    return Status::ok();
  }

  Context& c_;
  DeviceBackend& dev_;
  Partition part_;
  uint64_t me_;
  DType dtype_;
  size_t es_;
  DeviceBackend::Progress progress_;
  uint8_t* whole_ = nullptr;
  uint8_t* block_ = nullptr;
};

// Moves the owner-side residual that a flat scatter-reduce left (this rank's segment of the
// flat partition) into the residual at those elements, before the residual joins a
// hierarchical call's input: it is the error of a sum this rank encoded, and reaches the sum
// with this contribution.
Status rehome_flat_owner(DeviceBackend& dev, DeviceEfState& ef, const Context& c, size_t n) {
  const Partition flat{n, static_cast<uint64_t>(c.size)};
  const size_t olen = ef.owner_count();
  const uint64_t owned = owner_segment(Algo::kScatterReduce, c.rank, c.size);
  if (olen == 0 || olen != flat.length(owned)) return Status::ok();
  GW_ASSIGN_OR_RETURN(float* own, ef.owner_residual(olen));
  return dev.fold_owner(ef.residual() + flat.start(owned), own, olen, 1);
}

// The inter-node leg of a compressed call on len elements at shard (device, in place), with
// error feedback on elements [start, start + len) of a.ef; kAvg sums here, the caller divides.
Status compressed_inter_leg(Context& across, DeviceBackend& dev, const DeviceHierarchicalArgs& a, float* shard,
                            uint64_t start, uint64_t len) {
  const ReduceOp sum_op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  // A host-only algorithm's device counterpart stands in for it (scatter-reduce for the
  // compressed ring).
  const AlgorithmRow* row = find_algorithm(a.inner);
  if (row != nullptr && row->device == nullptr) row = find_algorithm(row->device_counterpart);
  if (row == nullptr || row->device == nullptr) row = find_algorithm(Algo::kScatterReduce);
  auto run = [&](DeviceEfState* ef) {
    return row->device(across, dev, DeviceAllreduce{shard, shard, len, DType::kFloat32, sum_op, a.codec, ef});
  };
  if (a.ef == nullptr) return run(nullptr).with_context("inter-node leg");
  float* owner = nullptr;
  DeviceEfShard view(*a.ef, start, len, [&dev, &owner](size_t n) -> Result<float*> {
    GW_ASSIGN_OR_RETURN(void* p, dev.device_scratch(kShardOwner, n * sizeof(float)));
    owner = static_cast<float*>(p);
    if (n > 0) GW_RETURN_IF_ERROR(dev.zero(owner, n * sizeof(float)));
    return owner;
  });
  GW_RETURN_IF_ERROR(run(&view).with_context("inter-node leg"));
  // The owner's re-encoding error goes back into this rank's residual at the same elements
  // (the host path's rule): it reaches the sum with the next contribution, and nothing stays
  // outside the caller's state.
  const size_t olen = view.owner_count();
  const Partition inner_part{len, static_cast<uint64_t>(across.size)};
  const uint64_t owned = owner_segment(Algo::kScatterReduce, across.rank, across.size);
  if (olen == 0 || owner == nullptr) return Status::ok();
  if (olen != inner_part.length(owned)) return internal_error("inter-node leg: owner residual of an unexpected length");
  return dev.fold_owner(view.residual() + inner_part.start(owned), owner, olen, 1);
}

}  // namespace

Status device_hierarchical_allreduce(Context& c, DeviceBackend& dev, const Topology& t,
                                     const DeviceHierarchicalArgs& a) {
  const size_t es = dtype_size(a.dtype);
  HierarchicalGroups g(c, t, a.n);
  const Partition& part = g.part;
  const uint64_t start = g.start, len = g.len;
  const bool dense = dense_algorithm(a.inner) || a.codec == nullptr;
  const ReduceOp sum_op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  auto* out = static_cast<uint8_t*>(a.recv);
  uint8_t* shard = out + start * es;

  // A residual left by a flat compressed call covers elements outside this rank's shard: it
  // joins this call's input to the exact sum inside the node once (flush_ef), and is cleared
  // (stream order: after the reduce-scatter read it) before the inter-node leg fills the
  // shard's part again.
  const void* src = a.send;
  if (a.flush_ef && a.ef != nullptr && a.n > 0) {
    GW_RETURN_IF_ERROR(rehome_flat_owner(dev, *a.ef, c, a.n));
    GW_RETURN_IF_ERROR(dev.add(a.ef->residual(), static_cast<const float*>(a.send), a.n));
    src = a.ef->residual();
  }
  auto clear_flushed = [&]() -> Status {
    if (src == a.send) return Status::ok();
    return dev.zero(a.ef->residual(), a.n * sizeof(float));
  };

  if (dev.node_nccl_ready()) {
    NcclLegs legs(c, dev, part, t.local_rank, a.dtype);
    GW_RETURN_IF_ERROR(legs.reduce_scatter(src, shard, a.op).with_context("reduce-scatter inside the node"));
    GW_RETURN_IF_ERROR(clear_flushed());
    if (dense) {  // the host ring between nodes (NCCL's world communicator spans every rank)
      GW_ASSIGN_OR_RETURN(uint8_t * host, dev.host_staging(kStagingWhole, len * es));
      GW_RETURN_IF_ERROR(copy_bytes(dev, host, shard, len * es));
      GW_RETURN_IF_ERROR(drain(c, dev));
      GW_RETURN_IF_ERROR(ring_allreduce(g.across, host, host, len, a.dtype, sum_op).with_context("inter-node leg"));
      if (a.op == ReduceOp::kAvg) divide(host, len, a.dtype, c.size);
      GW_RETURN_IF_ERROR(copy_bytes(dev, shard, host, len * es));
    } else {
      GW_RETURN_IF_ERROR(compressed_inter_leg(g.across, dev, a, reinterpret_cast<float*>(shard), start, len));
      if (a.op == ReduceOp::kAvg && len > 0)
        GW_RETURN_IF_ERROR(dev.divide(reinterpret_cast<float*>(shard), len, c.size));
    }
    GW_RETURN_IF_ERROR(legs.all_gather(out).with_context("all-gather inside the node"));
    return drain(c, dev);
  }

  // Through pinned host memory and the transport: the host path's legs without shared memory.
  GW_ASSIGN_OR_RETURN(uint8_t * host, dev.host_staging(kStagingWhole, a.n * es));
  uint8_t* host_shard = host + start * es;
  GW_RETURN_IF_ERROR(copy_bytes(dev, host, src, a.n * es));
  GW_RETURN_IF_ERROR(drain(c, dev));
  GW_RETURN_IF_ERROR(clear_flushed());
  GW_RETURN_IF_ERROR(ring_reduce_scatter(g.in_node, host, host_shard, part, a.dtype, a.op));
  if (dense) {
    GW_RETURN_IF_ERROR(
        ring_allreduce(g.across, host_shard, host_shard, len, a.dtype, sum_op).with_context("inter-node leg"));
    if (a.op == ReduceOp::kAvg) divide(host_shard, len, a.dtype, c.size);
  } else {
    auto* fshard = reinterpret_cast<float*>(shard);
    GW_RETURN_IF_ERROR(copy_bytes(dev, shard, host_shard, len * es));
    GW_RETURN_IF_ERROR(compressed_inter_leg(g.across, dev, a, fshard, start, len));
    if (a.op == ReduceOp::kAvg && len > 0) GW_RETURN_IF_ERROR(dev.divide(fshard, len, c.size));
    GW_RETURN_IF_ERROR(copy_bytes(dev, host_shard, shard, len * es));
    GW_RETURN_IF_ERROR(drain(c, dev));
  }
  GW_RETURN_IF_ERROR(g.gather_shards(host_shard, host, es));
  GW_RETURN_IF_ERROR(copy_bytes(dev, out, host, a.n * es));
  return drain(c, dev);
}

}  // namespace gw::coll
