// A build without CUDA has no device backend: the device collectives say so.
#include "collectives/algorithms/device/device_backend.hpp"

namespace gw::coll {

Result<std::unique_ptr<DeviceBackend>> make_cuda_backend() {
  return unsupported("this gradwire was built without CUDA (GW_WITH_CUDA=OFF): device buffers are not supported");
}

}  // namespace gw::coll
