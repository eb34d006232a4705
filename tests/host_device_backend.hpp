// The tests' view of the library's stand-in accelerator
// (collectives/algorithms/device/standin/): its memory, EF state and backend under the names
// the tests use, plus DeviceVector, a buffer of stand-in device memory.
#pragma once

#include <cstring>
#include <vector>

#include "collectives/algorithms/device/standin/standin_backend.hpp"

namespace gw::test {

using DeviceArena = coll::StandInArena;
using StandInEf = coll::StandInEf;
using NodeCollectives = coll::NodeCollectives;
using HostDeviceBackend = coll::StandInBackend;

template <class T>
struct DeviceVector {
  explicit DeviceVector(size_t n) : n_(n), p_(static_cast<T*>(DeviceArena::get().alloc(n * sizeof(T)))) {}
  ~DeviceVector() { DeviceArena::get().free(p_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  T* data() { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& v) {
    if (!v.empty()) std::memcpy(p_, v.data(), v.size() * sizeof(T));
  }
  std::vector<T> download() const { return std::vector<T>(p_, p_ + n_); }

 private:
  size_t n_;
  T* p_;
};

}  // namespace gw::test
