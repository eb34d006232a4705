// The reduce-scatter with blocks of any sizes, raw or compressed, on host and device buffers
// (compressed_reduce_scatter.cpp, device_reduce_scatter.cpp). Arguments are checked here,
// before anything is queued: an argument error leaves every rank where it was and the
// communicator usable. The counts are copied before the call is queued.
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/comm/communicator_impl.hpp"
#include "compressors/device_ef_state.hpp"

namespace gw {

using namespace comm_detail;

namespace {

// The counts, their total, and the call as every rank must state it.
struct ScatterLayout {
  std::vector<uint64_t> counts;
  uint64_t total = 0;
  CallDescriptor call;
};

Result<ScatterLayout> check_reduce_scatterv(const void* send, const void* recv, const size_t* counts, int rank,
                                            int size, DType dtype, ReduceOp op, const Codec* codec,
                                            const size_t* ef_count, bool on_device) {
  if (!collective_dtype_valid(static_cast<int>(dtype))) {
    return invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::kMax)) {
    return invalid_argument("op " + std::to_string(static_cast<int>(op)) + " is not a gw_red_op_t");
  }
  if (counts == nullptr) return invalid_argument("recvcounts is null");
  ScatterLayout l;
  l.counts.assign(counts, counts + size);
  const size_t es = dtype_size(dtype);
  for (int r = 0; r < size; ++r) {
    const std::string name = "recvcounts[" + std::to_string(r) + "]";
    GW_RETURN_IF_ERROR(check_size(name.c_str(), l.counts[r], es, dtype_name(dtype)));
    if (__builtin_add_overflow(l.total, l.counts[r], &l.total)) {
      return invalid_argument("recvcounts add up to more than 2^64 elements");
    }
  }
  GW_RETURN_IF_ERROR(check_size("sendbuf (the sum of recvcounts)", l.total, es, dtype_name(dtype)));
  if (codec == nullptr) {
    if (ef_count != nullptr) return invalid_argument("error feedback needs a codec (codec is null)");
    if (on_device && (dtype != DType::kFloat32 || (op != ReduceOp::kSum && op != ReduceOp::kAvg))) {
      return unsupported(std::string("a reduce-scatter on device buffers sums or averages float32, not ") +
                         red_op_name(op) + " of " + dtype_name(dtype));
    }
  } else {
    const bool device_dtype = dtype == DType::kFloat32;
    const bool host_dtype = device_dtype || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
    if (!(on_device ? device_dtype : host_dtype)) {
      return unsupported(std::string("a compressed reduce-scatter takes ") +
                         (on_device ? "float32 on device buffers" : "float32, float16 or bfloat16") + ", not " +
                         dtype_name(dtype) + " (pass no codec for a raw one)");
    }
    if (op != ReduceOp::kSum && op != ReduceOp::kAvg) {
      return invalid_argument(std::string("a compressed reduce-scatter sums or averages; op ") + red_op_name(op) +
                              " runs raw only (pass no codec)");
    }
    if (ef_count != nullptr && *ef_count != l.total) {
      return invalid_argument("error-feedback state holds " + std::to_string(*ef_count) +
                              " elements but sendbuf (the sum of recvcounts) has " + std::to_string(l.total));
    }
  }
  if (l.total > 0 && send == nullptr) return invalid_argument("sendbuf is null");
  if (l.counts[rank] > 0 && recv == nullptr) return invalid_argument("recvbuf is null");
  l.call = call(CallKind::kReduceScatterV, l.total);
  l.call.dtype = static_cast<uint8_t>(dtype);
  l.call.op = static_cast<uint8_t>(op);
  l.call.sizes = coll::size_digest(l.counts.data(), l.counts.size());
  l.call.flags = on_device ? CallDescriptor::kDevice : 0;
  // Device buffers without a codec run as codec "none" (the exact wire, the float32 sum:
  // what the raw host call computes for these dtypes and ops); the peers are told so.
  if (codec != nullptr) {
    l.call.spec = codec->spec().to_string();
  } else if (on_device) {
    l.call.spec = "none";
  }
  return l;
}

}  // namespace

Status Communicator::reduce_scatterv(const void* send, void* recv, const size_t* counts, DType dtype, ReduceOp op,
                                     Codec* codec, ErrorFeedback* ef) {
  const size_t ef_count = ef != nullptr ? ef->count() : 0;
  GW_ASSIGN_OR_RETURN(ScatterLayout l, check_reduce_scatterv(send, recv, counts, rank(), size(), dtype, op, codec,
                                                             ef != nullptr ? &ef_count : nullptr, false));
  return run([=, l = std::move(l)]() -> Status {
    return impl_->collective(
        [&](coll::Context& c) {
          return coll::compressed_reduce_scatter(
              c, coll::ReduceScatterArgs{send, recv, l.counts.data(), dtype, op, codec, ef});
        },
        l.call);
  });
}

Status Communicator::reduce_scatterv_device(const void* send, void* recv, const size_t* counts, DType dtype,
                                            ReduceOp op, Codec* codec, DeviceEfState* ef, void* stream) {
  return reduce_scatterv_device_at(send, recv, counts, dtype, op, codec, ef, DeviceOrder{stream, nullptr});
}

Status Communicator::reduce_scatterv_device(const void* send, void* recv, const size_t* counts, DType dtype,
                                            ReduceOp op, Codec* codec, DeviceEfState* ef, const StreamPoint& after) {
  if (after == nullptr) return invalid_argument("no stream point (mark_stream)");
  return reduce_scatterv_device_at(send, recv, counts, dtype, op, codec, ef, DeviceOrder{nullptr, after});
}

Status Communicator::reduce_scatterv_device_at(const void* send, void* recv, const size_t* counts, DType dtype,
                                               ReduceOp op, Codec* codec, DeviceEfState* ef, const DeviceOrder& order) {
  const size_t ef_count = ef != nullptr ? ef->count() : 0;
  GW_ASSIGN_OR_RETURN(ScatterLayout l, check_reduce_scatterv(send, recv, counts, rank(), size(), dtype, op, codec,
                                                             ef != nullptr ? &ef_count : nullptr, true));
  GW_ASSIGN_OR_RETURN(coll::DeviceBackend * dev, impl_->device_backend());
  if (l.total > 0) GW_RETURN_IF_ERROR(dev->check_buffer(send, "sendbuf"));
  if (l.counts[rank()] > 0) GW_RETURN_IF_ERROR(dev->check_buffer(recv, "recvbuf"));
  std::shared_ptr<Codec> exact;
  if (codec == nullptr) {
    GW_ASSIGN_OR_RETURN(std::unique_ptr<Codec> none, Codec::create("none"));
    exact = std::move(none);
    codec = exact.get();
  }
  GW_ASSIGN_OR_RETURN(StreamPoint after, order.point(*dev));
  return run(
      [=, l = std::move(l), exact = std::move(exact)]() -> Status {  // exact lives as long as the call
        return impl_->device_collective(*dev, *after, l.call, [&](coll::Context& c) {
          return coll::device_reduce_scatter(
              c, *dev,
              coll::DeviceReduceScatter{static_cast<const float*>(send), static_cast<float*>(recv), l.counts.data(), op,
                                        codec, ef});
        });
      },
      /*collective=*/true, Where::kProgressThread);
}

}  // namespace gw
