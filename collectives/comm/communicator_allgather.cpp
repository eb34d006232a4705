// The all-gather on a compressed wire (compressed_allgather.cpp). Arguments are checked here,
// before anything is queued, so that an argument error leaves the communicator usable.
#include <string>

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

}  // namespace gw
