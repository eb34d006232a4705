// In-process ranks (the local transport, one thread each) whose device collectives run on the
// stand-in accelerator: what the device tests share.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gradwire/communicator.hpp"
#include "tests/host_device_backend.hpp"
#include "transport/local/local_transport.hpp"

namespace gw::test {

using Comms = std::vector<std::unique_ptr<Communicator>>;

inline Comms make_group(int p, bool device, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                        std::vector<HostDeviceBackend*>* backends = nullptr) {
  CommConfig cfg;
  cfg.timeout = timeout;
  cfg.chunk_bytes = 4096;  // many chunks even for small buffers
  auto group = transport::make_local_group(p);
  Comms comms;
  for (auto& t : group) {
    auto c = Communicator::create(std::move(t), cfg);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    comms.push_back(std::move(c).value());
    if (device) {
      auto b = std::make_unique<HostDeviceBackend>(static_cast<uint64_t>(comms.size()) * 7919);
      if (backends != nullptr) backends->push_back(b.get());
      const Status s = comms.back()->use_device_backend(std::move(b));
      EXPECT_TRUE(s.is_ok()) << s.to_string();
    }
  }
  return comms;
}

inline void on_ranks(Comms& comms, const std::function<void(Communicator&, int)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) threads.emplace_back([&, r] { fn(*comms[r], static_cast<int>(r)); });
  for (auto& t : threads) t.join();
}

}  // namespace gw::test
