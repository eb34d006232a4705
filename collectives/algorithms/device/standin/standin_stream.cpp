#include "collectives/algorithms/device/standin/standin_stream.hpp"

#include <chrono>
#include <cstring>

namespace gw::coll {

StandInArena& StandInArena::get() {
  static auto* a = new StandInArena();  // never destroyed: streams may free memory at exit
  return *a;
}

void* StandInArena::alloc(size_t bytes) {
  const size_t n = bytes > 0 ? bytes : 1;
  auto* p = new uint8_t[n];
  std::memset(p, 0xA5, n);
  std::lock_guard<std::mutex> lock(mu_);
  ranges_[p] = n;
  live_ += n;
  return p;
}

void StandInArena::free(void* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranges_.find(static_cast<uint8_t*>(p));
    if (it == ranges_.end()) return;
    live_ -= it->second;
    ranges_.erase(it);
  }
  delete[] static_cast<uint8_t*>(p);
}

bool StandInArena::contains(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto* b = static_cast<const uint8_t*>(p);
  auto it = ranges_.upper_bound(const_cast<uint8_t*>(b));
  if (it == ranges_.begin()) return false;
  --it;
  return b >= it->first && b + bytes <= it->first + it->second;
}

size_t StandInArena::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

StandInStream::StandInStream(int max_delay_us, uint64_t seed) : rng_(seed), max_delay_us_(max_delay_us) {
  worker_ = std::thread([this] { run(); });
}

StandInStream::~StandInStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

StandInStream& StandInStream::default_stream() {
  static auto* s = new StandInStream(200, 0x5eed);  // never destroyed, like the CUDA one
  return *s;
}

uint64_t StandInStream::enqueue(std::function<void()> fn) {
  uint64_t pos = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(fn));
    pos = ++enqueued_;
  }
  cv_.notify_all();
  return pos;
}

uint64_t StandInStream::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

bool StandInStream::reached(uint64_t pos) const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ >= pos;
}

void StandInStream::wait_reached(uint64_t pos) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ >= pos; });
}

void StandInStream::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
    if (q_.empty()) return;
    auto fn = std::move(q_.front());
    q_.pop_front();
    const int delay = max_delay_us_ > 0 ? static_cast<int>(rng_() % static_cast<uint64_t>(max_delay_us_)) : 0;
    lock.unlock();
    if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    fn();
    lock.lock();
    ++done_;
    cv_.notify_all();
  }
}

void StandInSignal::set(uint32_t value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (passed(word_, value)) return;  // never backwards
    word_ = value;
  }
  cv_.notify_all();
}

void StandInSignal::note_wait(uint32_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!any_wait_ || !passed(max_waited_, value)) max_waited_ = value;
  any_wait_ = true;
}

void StandInSignal::wait(uint32_t value) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return passed(word_, value); });
}

void StandInSignal::release_all() {
  uint32_t v = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!any_wait_) return;
    v = max_waited_;
  }
  set(v);
}

}  // namespace gw::coll
