// A stand-in accelerator for the device collectives on machines without a GPU (the memory and
// streams of standin_stream.hpp). Codecs are the host codecs, which the device kernels match
// byte for byte (tests/gpu); it checks the orchestration of the device algorithms and the
// stream order of calls (a call starts after what its caller queued, a caller's stream waits
// for a call's end), not the kernels. The C ABI offers it (gradwire/standin.h) so that
// integrations such as the torch backend can test their stream handling without a GPU.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms/device/device_backend.hpp"
#include "collectives/algorithms/device/standin/standin_stream.hpp"
#include "compressors/device_ef_state.hpp"

namespace gw::coll {

// A device EF state in stand-in memory.
class StandInEf final : public DeviceEfState {
 public:
  explicit StandInEf(size_t n);
  ~StandInEf() override;
  size_t count() const override { return n_; }
  uint64_t step() const override { return step_; }
  Status reset() override;
  Status copy_out(float* host, size_t n) const override;
  Status copy_in(const float* host, size_t n) override;
  void set_step(uint64_t step) override { step_ = step; }
  size_t owner_count() const override { return owner_n_; }
  Status copy_owner_out(float* host, size_t n) const override;
  Status copy_owner_in(const float* host, size_t n) override;
  float* residual() override { return res_; }
  Result<float*> owner_residual(size_t n) override;
  void advance() override { ++step_; }

 private:
  size_t n_;
  float* res_;
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

class StandInBackend final : public DeviceBackend {
 public:
  explicit StandInBackend(uint64_t seed, int max_delay_us = 200);
  ~StandInBackend() override;

  const char* name() const override { return "host stand-in"; }
  Status check_buffer(const void* p, const char* what) const override;
  Result<std::shared_ptr<StreamMark>> mark(void* stream) override;
  Status begin(const StreamMark& mark) override;
  void signal(uint32_t value) override { signal_->set(value); }
  Status stream_wait(void* stream, uint32_t value) override;
  Status trim() override;
  Result<void*> device_scratch(int slot, size_t bytes) override;
  Result<uint8_t*> host_staging(int slot, size_t bytes) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status zero(void* dst, size_t bytes) override;
  Status add(float* acc, const float* x, size_t n) override;
  Status fold_owner(float* owner, float* sum, size_t n, int divisor) override;
  Status divide(float* x, size_t n, int divisor) override;
  Result<size_t> encode_input(const Codec& codec, const float* src, size_t n, const EncodeContext& ctx, void* out,
                              size_t cap) override;
  Result<size_t> encode_accumulated(const Codec& codec, float* acc, size_t n, const EncodeContext& ctx, void* out,
                                    size_t cap) override;
  Status apply(const wire::Header& header, const uint8_t* msg, size_t len, float* dst, DecodeMode mode) override;
  Status quiesce() override;
  Result<Fence> fence() override;
  Result<bool> reached(Fence f) override;

  // The node's "NCCL" when set: the hierarchical all-reduce then takes its NCCL legs.
  std::shared_ptr<NodeCollectives> node;
  bool node_nccl_ready() const override { return node != nullptr; }
  Status node_nccl_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op, Deadline,
                                  const Progress&) override;
  Status node_nccl_allgather(const void* send, void* recv, size_t bytes, Deadline, const Progress&) override;
  Status node_nccl_wait(Deadline, const Progress&) override;

  // What tests look at.
  int node_calls = 0;                       // node_nccl_wait calls
  std::atomic<void*> last_stream{nullptr};  // the stream of the last mark
  int begins = 0;
  int encodes = 0;
  bool refuse_encodes = false;  // every encode fails with an argument error
  // Bytes of scratch and staging held between calls.
  size_t held_bytes() const;

 private:
  static bool dev(const void* p, size_t bytes) { return StandInArena::get().contains(p, bytes); }
  Status before_encode(const float* src, size_t n, const void* out, size_t cap, const char* op);
  static Status need(const void* p, size_t bytes, const char* op);
  void enqueue(std::function<void()> fn) { stream_.enqueue(std::move(fn)); }

  StandInStream stream_;  // the backend's own stream
  std::shared_ptr<StandInSignal> signal_ = std::make_shared<StandInSignal>();
  std::vector<std::pair<void*, size_t>> scratch_;
  std::vector<std::pair<uint8_t*, size_t>> staging_;
};

}  // namespace gw::coll
