#include "collectives/algorithms/device/standin/standin_backend.hpp"

#include <cstdlib>
#include <cstring>

#include "compressors/codec_registry.hpp"

namespace gw::coll {
namespace {

struct StandInMark final : StreamMark {
  const StandInBackend* owner;
  StandInStream* stream;
  uint64_t position;
  StandInMark(const StandInBackend* o, StandInStream* s, uint64_t p) : owner(o), stream(s), position(p) {}
};

// The CUDA encoders' rule for their output.
Status aligned(const void* out) {
  if (reinterpret_cast<uintptr_t>(out) % 8 != 0) return invalid_argument("device dst must be 8-byte aligned");
  return Status::ok();
}

}  // namespace

StandInEf::StandInEf(size_t n) : n_(n), res_(static_cast<float*>(StandInArena::get().alloc(n * sizeof(float)))) {
  if (n > 0) std::memset(res_, 0, n * sizeof(float));
}

StandInEf::~StandInEf() {
  StandInArena::get().free(owner_);
  StandInArena::get().free(res_);
}

Status StandInEf::reset() {
  if (n_ > 0) std::memset(res_, 0, n_ * sizeof(float));
  step_ = 0;
  return Status::ok();
}

Status StandInEf::copy_out(float* host, size_t n) const {
  if (n > 0) std::memcpy(host, res_, n * sizeof(float));
  return Status::ok();
}

Status StandInEf::copy_in(const float* host, size_t n) {
  if (n > 0) std::memcpy(res_, host, n * sizeof(float));
  return Status::ok();
}

Status StandInEf::copy_owner_out(float* host, size_t n) const {
  if (n > 0) std::memcpy(host, owner_, n * sizeof(float));
  return Status::ok();
}

Status StandInEf::copy_owner_in(const float* host, size_t n) {
  GW_ASSIGN_OR_RETURN(float* o, owner_residual(n));
  if (n > 0) std::memcpy(o, host, n * sizeof(float));
  return Status::ok();
}

Result<float*> StandInEf::owner_residual(size_t n) {
  if (owner_ == nullptr || owner_n_ != n) {
    StandInArena::get().free(owner_);
    owner_ = static_cast<float*>(StandInArena::get().alloc(n * sizeof(float)));
    if (n > 0) std::memset(owner_, 0, n * sizeof(float));
    owner_n_ = n;
  }
  return owner_;
}

StandInBackend::StandInBackend(uint64_t seed, int max_delay_us) : stream_(max_delay_us, seed) {}

StandInBackend::~StandInBackend() {
  stream_.synchronize();
  signal_->release_all();  // no caller's stream waits forever on a backend that is gone
  for (auto& s : scratch_) StandInArena::get().free(s.first);
  for (auto& s : staging_) delete[] s.first;
}

Status StandInBackend::check_buffer(const void* p, const char* what) const {
  if (!dev(p, 1)) return invalid_argument(std::string(what) + " is not stand-in device memory");
  return Status::ok();
}

Result<std::shared_ptr<StreamMark>> StandInBackend::mark(void* stream) {
  last_stream = stream;
  StandInStream& s = StandInStream::of(stream);
  return std::shared_ptr<StreamMark>(std::make_shared<StandInMark>(this, &s, s.position()));
}

Status StandInBackend::begin(const StreamMark& mark) {
  const auto* m = dynamic_cast<const StandInMark*>(&mark);
  if (m == nullptr || m->owner != this) return internal_error("a stream mark of another device backend");
  ++begins;
  // For tests that show a missing wait is caught (tests/python/test_torch_streams.py).
  static const bool skip = std::getenv("GW_STANDIN_SKIP_CALLER_WAIT") != nullptr;
  if (skip) return Status::ok();
  StandInStream* s = m->stream;
  const uint64_t pos = m->position;
  enqueue([s, pos] { s->wait_reached(pos); });
  return Status::ok();
}

Status StandInBackend::stream_wait(void* stream, uint32_t value) {
  std::shared_ptr<StandInSignal> sig = signal_;
  sig->note_wait(value);
  StandInStream::of(stream).enqueue([sig, value] { sig->wait(value); });
  return Status::ok();
}

Status StandInBackend::trim() {
  stream_.synchronize();
  for (auto& s : scratch_) {
    StandInArena::get().free(s.first);
    s = {nullptr, 0};
  }
  for (auto& s : staging_) {
    delete[] s.first;
    s = {nullptr, 0};
  }
  return Status::ok();
}

size_t StandInBackend::held_bytes() const {
  size_t n = 0;
  for (const auto& s : scratch_) n += s.second;
  for (const auto& s : staging_) n += s.second;
  return n;
}

Result<void*> StandInBackend::device_scratch(int slot, size_t bytes) {
  if (scratch_.size() <= static_cast<size_t>(slot)) scratch_.resize(static_cast<size_t>(slot) + 1, {nullptr, 0});
  auto& s = scratch_[static_cast<size_t>(slot)];
  if (s.first == nullptr || s.second < bytes) {
    stream_.synchronize();
    StandInArena::get().free(s.first);
    s = {StandInArena::get().alloc(bytes), bytes};
  }
  return s.first;
}

Result<uint8_t*> StandInBackend::host_staging(int slot, size_t bytes) {
  if (staging_.size() <= static_cast<size_t>(slot)) staging_.resize(static_cast<size_t>(slot) + 1, {nullptr, 0});
  auto& s = staging_[static_cast<size_t>(slot)];
  if (s.first == nullptr || s.second < bytes) {
    stream_.synchronize();
    delete[] s.first;
    s = {new uint8_t[bytes > 0 ? bytes : 1], bytes};
    std::memset(s.first, 0x5A, bytes);
  }
  return s.first;
}

Status StandInBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  if (!dev(dst, bytes) && !dev(src, bytes)) return internal_error("copy between two host buffers");
  enqueue([=] { std::memcpy(dst, src, bytes); });
  return Status::ok();
}

Status StandInBackend::zero(void* dst, size_t bytes) {
  if (bytes == 0) return Status::ok();
  GW_RETURN_IF_ERROR(need(dst, bytes, "zero"));
  enqueue([=] { std::memset(dst, 0, bytes); });
  return Status::ok();
}

Status StandInBackend::add(float* acc, const float* x, size_t n) {
  if (n == 0) return Status::ok();
  GW_RETURN_IF_ERROR(need(acc, n * 4, "add"));
  GW_RETURN_IF_ERROR(need(x, n * 4, "add"));
  enqueue([=] {
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  });
  return Status::ok();
}

Status StandInBackend::fold_owner(float* owner, float* sum, size_t n, int divisor) {
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

Status StandInBackend::divide(float* x, size_t n, int divisor) {
  if (n == 0) return Status::ok();
  GW_RETURN_IF_ERROR(need(x, n * 4, "divide"));
  enqueue([=] {
    for (size_t i = 0; i < n; ++i) x[i] /= static_cast<float>(divisor);
  });
  return Status::ok();
}

namespace {
// As the CUDA backend answers for dgc, whose length only the device learns: the most the
// message can be, so that the collectives' reading of the exact length from the staged
// header is exercised here too.
Result<size_t> bytes_to_copy(const Codec& codec, size_t n, Result<size_t> len) {
  if (!len || codec.id() != CodecId::kDgc) return len;
  return codec.max_encoded_bytes(n, DType::kFloat32);
}
}  // namespace

Result<size_t> StandInBackend::encode_input(const Codec& codec, const float* src, size_t n, const EncodeContext& ctx,
                                            void* out, size_t cap) {
  GW_RETURN_IF_ERROR(before_encode(src, n, out, cap, "encode_input"));
  return bytes_to_copy(codec, n, const_cast<Codec&>(codec).encode(src, n, DType::kFloat32, ctx, out, cap));
}

Result<size_t> StandInBackend::encode_accumulated(const Codec& codec, float* acc, size_t n, const EncodeContext& ctx,
                                                  void* out, size_t cap) {
  GW_RETURN_IF_ERROR(before_encode(acc, n, out, cap, "encode_accumulated"));
  return bytes_to_copy(codec, n, const_cast<Codec&>(codec).encode_accumulated(acc, n, ctx, out, cap));
}

Status StandInBackend::apply(const wire::Header& header, const uint8_t* msg, size_t len, float* dst, DecodeMode mode) {
  GW_RETURN_IF_ERROR(need(msg, len, "apply (message)"));
  if (header.count > 0) GW_RETURN_IF_ERROR(need(dst, header.count * 4, "apply (destination)"));
  const detail::CodecEntry* e = detail::find_codec(header.codec);
  if (e == nullptr) return internal_error("no codec");
  enqueue([=] { e->apply(header, msg + wire::kHeaderBytes, dst, DType::kFloat32, mode); });
  return Status::ok();
}

Status StandInBackend::quiesce() {
  stream_.synchronize();
  return Status::ok();
}

Result<DeviceBackend::Fence> StandInBackend::fence() { return stream_.position(); }
Result<bool> StandInBackend::reached(Fence f) { return stream_.reached(f); }

Status StandInBackend::node_nccl_reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                                ReduceOp op, Deadline, const Progress&) {
  const size_t bytes = recv_count * dtype_size(dtype);
  if (bytes > 0) {
    GW_RETURN_IF_ERROR(need(send, bytes * static_cast<size_t>(node->size()), "node reduce-scatter (send)"));
    GW_RETURN_IF_ERROR(need(recv, bytes, "node reduce-scatter (recv)"));
  }
  std::shared_ptr<NodeCollectives> n = node;
  enqueue([=] { n->reduce_scatter(send, recv, recv_count, dtype, op); });
  return Status::ok();
}

Status StandInBackend::node_nccl_allgather(const void* send, void* recv, size_t bytes, Deadline, const Progress&) {
  if (bytes > 0) {
    GW_RETURN_IF_ERROR(need(send, bytes, "node all-gather (send)"));
    GW_RETURN_IF_ERROR(need(recv, bytes * static_cast<size_t>(node->size()), "node all-gather (recv)"));
  }
  std::shared_ptr<NodeCollectives> n = node;
  enqueue([=] { n->allgather(send, recv, bytes); });
  return Status::ok();
}

Status StandInBackend::node_nccl_wait(Deadline, const Progress&) {
  ++node_calls;
  stream_.synchronize();
  return node->error();
}

// The length must be known on return (as the CUDA encoders know it from the codec): the
// stand-in checks the pointers, waits for the stream, then the caller encodes.
Status StandInBackend::before_encode(const float* src, size_t n, const void* out, size_t cap, const char* op) {
  if (n > 0) GW_RETURN_IF_ERROR(need(src, n * 4, op));
  GW_RETURN_IF_ERROR(need(out, cap, op));
  GW_RETURN_IF_ERROR(aligned(out));
  stream_.synchronize();
  ++encodes;
  if (refuse_encodes) return invalid_argument("stand-in refuses to encode");
  return Status::ok();
}

Status StandInBackend::need(const void* p, size_t bytes, const char* op) {
  if (!dev(p, bytes)) return internal_error(std::string(op) + " was given memory that is not on the device");
  return Status::ok();
}

}  // namespace gw::coll
