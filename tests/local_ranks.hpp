// p ranks as threads of this process, one communicator each over the in-process transport,
// for tests of the collectives without processes or sockets.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "gradwire/communicator.hpp"
#include "transport/local/local_transport.hpp"

namespace gw::test {

// Runs fn(communicator, rank) on p threads. Unless cfg says otherwise, waits end after 20 s
// and the pipelining chunk is 4 KiB (many chunks even for small buffers).
inline void run_local_ranks(int p, const std::function<void(Communicator&, int)>& fn, CommConfig cfg = CommConfig()) {
  const CommConfig defaults;
  if (cfg.timeout == defaults.timeout) cfg.timeout = std::chrono::seconds(20);
  if (cfg.chunk_bytes == defaults.chunk_bytes) cfg.chunk_bytes = 4096;
  auto group = transport::make_local_group(p);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : group) {
    auto c = Communicator::create(std::move(t), cfg);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    comms.push_back(std::move(c).value());
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) threads.emplace_back([&, r] { fn(*comms[static_cast<size_t>(r)], r); });
  for (auto& t : threads) t.join();
}

}  // namespace gw::test
