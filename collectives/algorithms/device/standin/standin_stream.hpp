// The stand-in accelerator's memory and streams: "device memory" is host memory handed out by
// StandInArena (so an operation can check it was given device memory and not a staging
// buffer), and a stream is a worker thread that runs the work enqueued on it in order, each
// item after a random delay, so that code which reads a result before waiting for it reads
// stale bytes. It models what CUDA streams promise, on machines without a GPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace gw::coll {

// Ranges of stand-in device memory, process-wide.
class StandInArena {
 public:
  static StandInArena& get();
  void* alloc(size_t bytes);  // filled with 0xA5: unwritten device memory reads as garbage
  void free(void* p);
  // True when [p, p + bytes) lies inside one allocation.
  bool contains(const void* p, size_t bytes) const;
  size_t live_bytes() const;

 private:
  mutable std::mutex mu_;
  std::map<uint8_t*, size_t> ranges_;
  size_t live_ = 0;
};

class StandInStream {
 public:
  StandInStream(int max_delay_us, uint64_t seed);
  ~StandInStream();  // runs what is queued, then stops
  StandInStream(const StandInStream&) = delete;
  StandInStream& operator=(const StandInStream&) = delete;

  // The stream a null stream handle means (CUDA's legacy default stream), process-wide.
  static StandInStream& default_stream();
  static StandInStream& of(void* handle) {
    return handle != nullptr ? *static_cast<StandInStream*>(handle) : default_stream();
  }

  // Enqueues fn; returns its position (the count of items enqueued so far).
  uint64_t enqueue(std::function<void()> fn);
  uint64_t position() const;
  bool reached(uint64_t pos) const;
  void wait_reached(uint64_t pos) const;  // a host wait
  void synchronize() const { wait_reached(position()); }

 private:
  void run();

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  uint64_t enqueued_ = 0;
  uint64_t done_ = 0;
  bool stop_ = false;
  std::mt19937_64 rng_;
  int max_delay_us_;
  std::thread worker_;
};

// A 32-bit word the host signals and streams wait on (the stand-in of a mapped pinned word
// read by cuStreamWaitValue32): waits compare cyclically, (int32)(word - value) >= 0.
class StandInSignal {
 public:
  void set(uint32_t value);
  void wait(uint32_t value) const;
  // Sets the word to the largest value any wait asked for: every wait returns (at the end).
  void release_all();
  void note_wait(uint32_t value);

 private:
  static bool passed(uint32_t word, uint32_t value) { return static_cast<int32_t>(word - value) >= 0; }
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint32_t word_ = 0;
  uint32_t max_waited_ = 0;
  bool any_wait_ = false;
};

}  // namespace gw::coll
