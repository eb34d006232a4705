// The all-gather on a compressed wire, on host and device buffers (compressed_allgather.cpp,
// device_allgather_compressed.cpp). Arguments are checked here, before anything is queued, so
// that an argument error leaves the communicator usable.
#include <string>

#include "collectives/algorithms/device/device_algorithms.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/comm/communicator_impl.hpp"

namespace gw {

using namespace comm_detail;

Status Communicator::allgather_compressed(const void* send, void* recv, size_t count, DType dtype, Codec* codec) {
  GW_RETURN_IF_ERROR(check_allgather_compressed(send, recv, count, size(), dtype, codec != nullptr));
  if (codec == nullptr) return allgather(send, recv, count * dtype_size(dtype));
  CallDescriptor d = call(CallKind::kAllgatherCompressed, count);
  d.dtype = static_cast<uint8_t>(dtype);
  d.spec = codec->spec().to_string();
  return run([=, d = std::move(d)]() -> Status {
    return impl_->collective(
        [&](coll::Context& c) {
          return coll::compressed_allgather(c, coll::CompressedAllgatherArgs{send, recv, count, dtype, codec});
        },
        d);
  });
}

Status Communicator::allgather_compressed_device(const void* send, void* recv, size_t count, DType dtype, Codec* codec,
                                                 void* stream) {
  return allgather_compressed_device_at(send, recv, count, dtype, codec, DeviceOrder{stream, nullptr});
}

Status Communicator::allgather_compressed_device(const void* send, void* recv, size_t count, DType dtype, Codec* codec,
                                                 const StreamPoint& after) {
  if (after == nullptr) return invalid_argument("no stream point (mark_stream)");
  return allgather_compressed_device_at(send, recv, count, dtype, codec, DeviceOrder{nullptr, after});
}

Status Communicator::allgather_compressed_device_at(const void* send, void* recv, size_t count, DType dtype,
                                                    Codec* codec, const DeviceOrder& order) {
  GW_RETURN_IF_ERROR(check_allgather_compressed(send, recv, count, size(), dtype, codec != nullptr));
  if (codec == nullptr) return allgather_device_at(send, recv, count * dtype_size(dtype), order);
  if (dtype != DType::kFloat32) {
    return unsupported(std::string("a compressed all-gather on device buffers takes float32, not ") +
                       dtype_name(dtype));
  }
  GW_ASSIGN_OR_RETURN(coll::DeviceBackend * dev, impl_->device_backend());
  if (count > 0) {
    GW_RETURN_IF_ERROR(dev->check_buffer(send, "sendbuf"));
    GW_RETURN_IF_ERROR(dev->check_buffer(recv, "recvbuf"));
  }
  CallDescriptor d = call(CallKind::kAllgatherCompressed, count);
  d.dtype = static_cast<uint8_t>(dtype);
  d.spec = codec->spec().to_string();
  d.flags = CallDescriptor::kDevice;
  GW_ASSIGN_OR_RETURN(StreamPoint after, order.point(*dev));
  return run(
      [=, d = std::move(d)]() -> Status {
        return impl_->device_collective(*dev, *after, d, [&](coll::Context& c) {
          return coll::device_allgather_compressed(
              c, *dev,
              coll::DeviceAllgatherCompressed{static_cast<const float*>(send), static_cast<float*>(recv), count,
                                              codec});
        });
      },
      /*collective=*/true, Where::kProgressThread);
}

}  // namespace gw
