// A stand-in accelerator for the device collectives on machines without a GPU: "device
// memory" is host memory handed out by DeviceArena (so every device operation can check that
// it was given device memory, not a staging buffer), and the stream is a worker thread that
// runs the enqueued work in order after a random delay, so a host step that does not wait for
// its fence reads stale bytes. Codecs are the host codecs, which the device kernels match
// byte for byte (tests/gpu); this checks the orchestration of collectives/device_*.cpp, not
// the kernels.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms/device/device_backend.hpp"
#include "compressors/codec_registry.hpp"
#include "compressors/device_ef_state.hpp"

namespace gw::test {

// Ranges of stand-in device memory, process-wide.
class DeviceArena {
 public:
  static DeviceArena& get() {
    static DeviceArena a;
    return a;
  }
  void* alloc(size_t bytes) {
    auto* p = new uint8_t[bytes > 0 ? bytes : 1];
    std::memset(p, 0xA5, bytes);  // unwritten device memory reads as garbage
    std::lock_guard<std::mutex> lock(mu_);
    ranges_[p] = bytes > 0 ? bytes : 1;
    return p;
  }
  void free(void* p) {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.erase(static_cast<uint8_t*>(p));
    delete[] static_cast<uint8_t*>(p);
  }
  // True when [p, p + bytes) lies inside one allocation.
  bool contains(const void* p, size_t bytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto* b = static_cast<const uint8_t*>(p);
    auto it = ranges_.upper_bound(const_cast<uint8_t*>(b));
    if (it == ranges_.begin()) return false;
    --it;
    return b >= it->first && b + bytes <= it->first + it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<uint8_t*, size_t> ranges_;
};

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

// A device EF state on stand-in memory.
class StandInEf final : public DeviceEfState {
 public:
  explicit StandInEf(size_t n) : res_(n) { std::memset(res_.data(), 0, n * sizeof(float)); }
  ~StandInEf() override { DeviceArena::get().free(owner_); }
  size_t count() const override { return res_.size(); }
  uint64_t step() const override { return step_; }
  Status reset() override {
    std::memset(res_.data(), 0, res_.size() * sizeof(float));
    step_ = 0;
    return Status::ok();
  }
  Status copy_out(float* host, size_t n) const override {
    if (n > 0) std::memcpy(host, const_cast<DeviceVector<float>&>(res_).data(), n * sizeof(float));
    return Status::ok();
  }
  Status copy_in(const float* host, size_t n) override {
    if (n > 0) std::memcpy(res_.data(), host, n * sizeof(float));
    return Status::ok();
  }
  void set_step(uint64_t step) override { step_ = step; }
  size_t owner_count() const override { return owner_n_; }
  Status copy_owner_out(float* host, size_t n) const override {
    if (n > 0) std::memcpy(host, owner_, n * sizeof(float));
    return Status::ok();
  }
  Status copy_owner_in(const float* host, size_t n) override {
    GW_ASSIGN_OR_RETURN(float* o, owner_residual(n));
    if (n > 0) std::memcpy(o, host, n * sizeof(float));
    return Status::ok();
  }
  float* residual() override { return res_.data(); }
  Result<float*> owner_residual(size_t n) override {
    if (owner_ == nullptr || owner_n_ != n) {
      DeviceArena::get().free(owner_);
      owner_ = static_cast<float*>(DeviceArena::get().alloc(n * sizeof(float)));
      std::memset(owner_, 0, n * sizeof(float));
      owner_n_ = n;
    }
    return owner_;
  }
  void advance() override { ++step_; }

 private:
  DeviceVector<float> res_;
  float* owner_ = nullptr;
  size_t owner_n_ = 0;
  uint64_t step_ = 0;
};

// What the stand-in runs for the node's NCCL communicator (tests/multiproc/shm_node_nccl.hpp):
// blocking collectives among the node's processes, run in stream order by the stream's thread.
class NodeCollectives {
 public:
  virtual ~NodeCollectives() = default;
  virtual int size() const = 0;
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) = 0;
  virtual void allgather(const void* send, void* recv, size_t bytes) = 0;
  virtual Status error() const = 0;  // the first failure (a peer that never came), or OK
};

class HostDeviceBackend final : public coll::DeviceBackend {
 public:
  explicit HostDeviceBackend(uint64_t seed, int max_delay_us = 200) : rng_(seed), max_delay_us_(max_delay_us) {
    worker_ = std::thread([this] { run(); });
  }
  ~HostDeviceBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    for (void* p : scratch_) DeviceArena::get().free(p);
    for (auto& s : staging_) delete[] s.first;
  }

  const char* name() const override { return "host stand-in"; }
  Status check_buffer(const void* p, const char* what) const override {
    if (!DeviceArena::get().contains(p, 1))
      return invalid_argument(std::string(what) + " is not stand-in device memory");
    return Status::ok();
  }
  Status begin(void* stream) override {
    last_stream = stream;
    ++begins;
    return Status::ok();
  }
  Result<void*> device_scratch(int slot, size_t bytes) override {
    if (scratch_.size() <= static_cast<size_t>(slot)) {
      scratch_.resize(static_cast<size_t>(slot) + 1, nullptr);
      scratch_bytes_.resize(static_cast<size_t>(slot) + 1, 0);
    }
    const size_t i = static_cast<size_t>(slot);
    if (scratch_[i] == nullptr || scratch_bytes_[i] < bytes) {
      drain_stream();
      DeviceArena::get().free(scratch_[i]);
      scratch_[i] = DeviceArena::get().alloc(bytes);
      scratch_bytes_[i] = bytes;
    }
    return scratch_[i];
  }
  Result<uint8_t*> host_staging(int slot, size_t bytes) override {
    if (staging_.size() <= static_cast<size_t>(slot)) staging_.resize(static_cast<size_t>(slot) + 1, {nullptr, 0});
    auto& s = staging_[static_cast<size_t>(slot)];
    if (s.first == nullptr || s.second < bytes) {
      drain_stream();
      delete[] s.first;
      s.first = new uint8_t[bytes > 0 ? bytes : 1];
      std::memset(s.first, 0x5A, bytes);
      s.second = bytes;
    }
    return s.first;
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    if (!dev(dst, bytes) && !dev(src, bytes)) return internal_error("copy between two host buffers");
    enqueue([=] { std::memcpy(dst, src, bytes); });
    return Status::ok();
  }
  Status zero(void* dst, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    GW_RETURN_IF_ERROR(need(dst, bytes, "zero"));
    enqueue([=] { std::memset(dst, 0, bytes); });
    return Status::ok();
  }
  Status add(float* acc, const float* x, size_t n) override {
    if (n == 0) return Status::ok();
    GW_RETURN_IF_ERROR(need(acc, n * 4, "add"));
    GW_RETURN_IF_ERROR(need(x, n * 4, "add"));
    enqueue([=] {
      for (size_t i = 0; i < n; ++i) acc[i] += x[i];
    });
    return Status::ok();
  }
  Status fold_owner(float* owner, float* sum, size_t n, int divisor) override {
    if (n == 0) return Status::ok();
    GW_RETURN_IF_ERROR(need(owner, n * 4, "fold_owner"));
    GW_RETURN_IF_ERROR(need(sum, n * 4, "fold_owner"));
    enqueue([=] {
      for (size_t i = 0; i < n; ++i) {
        owner[i] += divisor == 1 ? sum[i] : sum[i] / static_cast<float>(divisor);
        sum[i] = 0.0f;
      }
    });
    return Status::ok();
  }
  Status divide(float* x, size_t n, int divisor) override {
    if (n == 0) return Status::ok();
    GW_RETURN_IF_ERROR(need(x, n * 4, "divide"));
    enqueue([=] {
      for (size_t i = 0; i < n; ++i) x[i] /= static_cast<float>(divisor);
    });
    return Status::ok();
  }
  Result<size_t> encode_input(const Codec& codec, const float* src, size_t n, const EncodeContext& ctx, void* out,
                              size_t cap) override {
    GW_RETURN_IF_ERROR(before_encode(src, n, out, cap, "encode_input"));
    return bytes_to_copy(codec, n, const_cast<Codec&>(codec).encode(src, n, DType::kFloat32, ctx, out, cap));
  }
  Result<size_t> encode_accumulated(const Codec& codec, float* acc, size_t n, const EncodeContext& ctx, void* out,
                                    size_t cap) override {
    GW_RETURN_IF_ERROR(before_encode(acc, n, out, cap, "encode_accumulated"));
    return bytes_to_copy(codec, n, const_cast<Codec&>(codec).encode_accumulated(acc, n, ctx, out, cap));
  }
  // As the CUDA backend answers for dgc, whose length only the device learns: the most the
  // message can be, so that the collectives' reading of the exact length from the staged
  // header is exercised here too.
  static Result<size_t> bytes_to_copy(const Codec& codec, size_t n, Result<size_t> len) {
    if (!len || codec.id() != CodecId::kDgc) return len;
    return codec.max_encoded_bytes(n, DType::kFloat32);
  }
  Status apply(const wire::Header& header, const uint8_t* msg, size_t len, float* dst, DecodeMode mode) override {
    GW_RETURN_IF_ERROR(need(msg, len, "apply (message)"));
    if (header.count > 0) GW_RETURN_IF_ERROR(need(dst, header.count * 4, "apply (destination)"));
    const detail::CodecEntry* e = detail::find_codec(header.codec);
    if (e == nullptr) return internal_error("no codec");
    enqueue([=] { e->apply(header, msg + wire::kHeaderBytes, dst, DType::kFloat32, mode); });
    return Status::ok();
  }
  Status quiesce() override {
    drain_stream();
    return Status::ok();
  }
  Result<Fence> fence() override {
    std::lock_guard<std::mutex> lock(mu_);
    return enqueued_;
  }
  Result<bool> reached(Fence f) override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ >= f;
  }

  // The node's "NCCL" when set: the hierarchical all-reduce then takes its NCCL legs.
  std::shared_ptr<NodeCollectives> node;
  bool node_nccl_ready() const override { return node != nullptr; }
  Status node_nccl_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op, Deadline,
                                  const Progress&) override {
    const size_t bytes = recv_count * dtype_size(dtype);
    if (bytes > 0) {
      GW_RETURN_IF_ERROR(need(send, bytes * static_cast<size_t>(node->size()), "node reduce-scatter (send)"));
      GW_RETURN_IF_ERROR(need(recv, bytes, "node reduce-scatter (recv)"));
    }
    std::shared_ptr<NodeCollectives> n = node;
    enqueue([=] { n->reduce_scatter(send, recv, recv_count, dtype, op); });
    return Status::ok();
  }
  Status node_nccl_allgather(const void* send, void* recv, size_t bytes, Deadline, const Progress&) override {
    if (bytes > 0) {
      GW_RETURN_IF_ERROR(need(send, bytes, "node all-gather (send)"));
      GW_RETURN_IF_ERROR(need(recv, bytes * static_cast<size_t>(node->size()), "node all-gather (recv)"));
    }
    std::shared_ptr<NodeCollectives> n = node;
    enqueue([=] { n->allgather(send, recv, bytes); });
    return Status::ok();
  }
  Status node_nccl_wait(Deadline, const Progress&) override {
    ++node_calls;
    drain_stream();
    return node->error();
  }
  int node_calls = 0;  // node_nccl_wait calls

  void* last_stream = nullptr;
  int begins = 0;
  int encodes = 0;
  bool refuse_encodes = false;  // every encode fails with an argument error

 private:
  static bool dev(const void* p, size_t bytes) { return DeviceArena::get().contains(p, bytes); }
  // The length must be known on return (as the CUDA encoders know it from the codec): the
  // stand-in checks the pointers, waits for the stream, then the caller encodes.
  Status before_encode(const float* src, size_t n, const void* out, size_t cap, const char* op) {
    if (n > 0) GW_RETURN_IF_ERROR(need(src, n * 4, op));
    GW_RETURN_IF_ERROR(need(out, cap, op));
    GW_RETURN_IF_ERROR(aligned(out));
    drain_stream();
    ++encodes;
    if (refuse_encodes) return invalid_argument("stand-in refuses to encode");
    return Status::ok();
  }
  // The CUDA encoders' rule for their output.
  static Status aligned(const void* out) {
    if (reinterpret_cast<uintptr_t>(out) % 8 != 0) return invalid_argument("device dst must be 8-byte aligned");
    return Status::ok();
  }
  static Status need(const void* p, size_t bytes, const char* op) {
    if (!dev(p, bytes)) return internal_error(std::string(op) + " was given memory that is not on the device");
    return Status::ok();
  }
  void enqueue(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      q_.push_back(std::move(fn));
      ++enqueued_;
    }
    cv_.notify_all();
  }
  void drain_stream() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ == enqueued_; });
  }
  void run() {
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

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  uint64_t enqueued_ = 0;
  uint64_t done_ = 0;
  bool stop_ = false;
  std::mt19937_64 rng_;
  int max_delay_us_;
  std::thread worker_;
  std::vector<void*> scratch_;
  std::vector<size_t> scratch_bytes_;
  std::vector<std::pair<uint8_t*, size_t>> staging_;
};

}  // namespace gw::test
