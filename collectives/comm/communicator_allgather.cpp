// The all-gather on a compressed wire (compressed_allgather.cpp). Arguments are checked here,
// before anything is queued, so that an argument error leaves the communicator usable.
#include <string>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/comm/communicator_impl.hpp"

namespace gw {

using namespace comm_detail;

Status Communicator::allgather_compressed(const void* send, void* recv, size_t count, DType dtype, Codec* codec) {
  if (!collective_dtype_valid(static_cast<int>(dtype))) {
    return invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  const size_t es = dtype_size(dtype);
  GW_RETURN_IF_ERROR(check_size("sendbuf", count, es, dtype_name(dtype)));
  uint64_t total = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(size()), &total)) {
    return invalid_argument("recvbuf (nranks * count) is larger than any buffer");
  }
  GW_RETURN_IF_ERROR(check_size("recvbuf (nranks * count)", total, es, dtype_name(dtype)));
  if (count > 0 && send == nullptr) return invalid_argument("sendbuf is null");
  if (count > 0 && recv == nullptr) return invalid_argument("recvbuf is null");
  if (codec == nullptr) return allgather(send, recv, count * es);
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    return unsupported(std::string("a compressed all-gather takes float32, float16 or bfloat16, not ") +
                       dtype_name(dtype) + " (pass no codec for a raw one)");
  }
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
