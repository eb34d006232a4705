// Dense collectives on device buffers: NCCL when the communicator brought it up (every dtype
// and op, except integer averages, which NCCL does not define as gradwire does). Without it,
// a float32 sum or average is the device scatter-reduce with codec "none" (lossless: the sums
// are on the device and each chunk's copy overlaps the transfers of others); every other
// all-reduce (other dtypes, prod, min, max, integer averages), all-gathers and broadcasts run
// the host algorithms on a pinned copy (copied down, run, copied up, without overlap). The
// choice depends only on what every rank's call descriptor carries, so all ranks agree.
#include <string>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"

namespace gw::coll {
namespace {

// Enqueues an NCCL call and waits for it, keeping the transport going. NCCL would hang or
// corrupt on mismatched calls, and its messages do not pass through Context::wait: so every
// peer's call descriptor must have matched before the call is handed to it.
template <class Call>
Status through_nccl(Context& c, DeviceBackend& dev, Call call) {
  GW_RETURN_IF_ERROR(c.verify_all_calls());
  const DeviceBackend::Progress progress = [&c] { c.tp.progress(); };
  GW_RETURN_IF_ERROR(call(progress));
  return dev.nccl_wait(c.deadline, progress);
}

}  // namespace

Status device_dense_allreduce(Context& c, DeviceBackend& dev, const void* send, void* recv, size_t n, DType dtype,
                              ReduceOp op) {
  if (!collective_dtype_valid(static_cast<int>(dtype)) || static_cast<int>(op) > static_cast<int>(ReduceOp::kMax)) {
    return unsupported("dense device all-reduce: dtype " + std::to_string(static_cast<int>(dtype)) + " op " +
                       std::to_string(static_cast<int>(op)) + " unknown");
  }
  const bool int_avg = op == ReduceOp::kAvg && dtype != DType::kFloat32 && dtype != DType::kFloat16 &&
                       dtype != DType::kBFloat16 && dtype != DType::kFloat64;
  if (dev.nccl_ready() && !int_avg) {
    return through_nccl(c, dev, [&](const DeviceBackend::Progress& pr) {
      return dev.nccl_allreduce(send, recv, n, dtype, op, c.deadline, pr);
    });
  }
  // The device scatter-reduce sums (and averages) only.
  if (dtype == DType::kFloat32 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
    static const std::unique_ptr<Codec> none = std::move(Codec::create("none")).value();
    return device_scatter_reduce_allreduce(c, dev, static_cast<const float*>(send), static_cast<float*>(recv), n, op,
                                           *none, nullptr);
  }
  const size_t bytes = n * dtype_size(dtype);
  GW_ASSIGN_OR_RETURN(uint8_t * host, dev.host_staging(0, bytes));
  GW_RETURN_IF_ERROR(dev.copy(host, send, bytes));
  GW_RETURN_IF_ERROR(drain(c, dev));
  GW_RETURN_IF_ERROR(ring_allreduce(c, host, host, n, dtype, op));
  GW_RETURN_IF_ERROR(dev.copy(recv, host, bytes));
  return drain(c, dev);
}

Status device_allgather(Context& c, DeviceBackend& dev, const void* send, void* recv, size_t bytes) {
  if (dev.nccl_ready()) {
    return through_nccl(c, dev, [&](const DeviceBackend::Progress& pr) {
      return dev.nccl_allgather(send, recv, bytes, c.deadline, pr);
    });
  }
  const size_t total = bytes * static_cast<size_t>(c.size);
  GW_ASSIGN_OR_RETURN(uint8_t * mine, dev.host_staging(0, bytes));
  GW_ASSIGN_OR_RETURN(uint8_t * all, dev.host_staging(1, total));
  GW_RETURN_IF_ERROR(dev.copy(mine, send, bytes));
  GW_RETURN_IF_ERROR(drain(c, dev));
  GW_RETURN_IF_ERROR(allgather(c, mine, all, bytes));
  GW_RETURN_IF_ERROR(dev.copy(recv, all, total));
  return drain(c, dev);
}

Status device_broadcast(Context& c, DeviceBackend& dev, void* buf, size_t bytes, int root) {
  if (dev.nccl_ready()) {
    return through_nccl(c, dev, [&](const DeviceBackend::Progress& pr) {
      return dev.nccl_broadcast(buf, bytes, root, c.deadline, pr);
    });
  }
  GW_ASSIGN_OR_RETURN(uint8_t * host, dev.host_staging(0, bytes));
  if (c.rank == root) {
    GW_RETURN_IF_ERROR(dev.copy(host, buf, bytes));
    GW_RETURN_IF_ERROR(drain(c, dev));
  }
  GW_RETURN_IF_ERROR(broadcast(c, host, bytes, root));
  if (c.rank != root) {
    GW_RETURN_IF_ERROR(dev.copy(buf, host, bytes));
    GW_RETURN_IF_ERROR(drain(c, dev));
  }
  return Status::ok();
}

}  // namespace gw::coll
