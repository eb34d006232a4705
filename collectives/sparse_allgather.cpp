// Sparse all-gather: messages of different sizes from every rank to every rank. Lengths go
// first (a fixed-size all-gather of one u64 each), then the messages around the ring.
// The dense form decodes every message, in rank order, into one sum, so all ranks agree to
// the bit. Sparse all-reduce is that after encoding this rank's gradient.
#include <cstring>
#include <string>

#include "collectives/algorithms.hpp"
#include "collectives/allgatherv.hpp"

namespace gw::coll {
namespace {

// Exchanges lengths and lays the messages out back to back; returns the total.
Result<uint64_t> gather_layout(Context& c, size_t len, uint64_t* offsets, uint64_t* lengths) {
  const uint64_t mine = len;
  Context lengths_phase = c;  // its own tag range: the messages follow on the same ring
  lengths_phase.step_base = kMaxSteps / 2;
  GW_RETURN_IF_ERROR(allgather(lengths_phase, &mine, lengths, sizeof(uint64_t)));
  uint64_t total = 0;
  for (int r = 0; r < c.size; ++r) {
    offsets[r] = total;
    if (__builtin_add_overflow(total, lengths[r], &total)) {
      return Status(Code::kRemote, "message lengths from the ranks overflow");
    }
  }
  return total;
}

}  // namespace

Status sparse_allgather(Context& c, const void* msg, size_t len, void* out, size_t capacity,
                        size_t* lengths_out) {
  auto* offsets = c.scratch.bytes.get<uint64_t>(4, static_cast<size_t>(c.size));
  auto* lengths = c.scratch.bytes.get<uint64_t>(5, static_cast<size_t>(c.size));
  GW_ASSIGN_OR_RETURN(uint64_t total, gather_layout(c, len, offsets, lengths));
  if (total > capacity) {
    return buffer_too_small("the ranks' messages total " + std::to_string(total) +
                            " bytes, above the output capacity " + std::to_string(capacity));
  }
  auto* data = static_cast<uint8_t*>(out);
  if (len > 0) std::memmove(data + offsets[c.rank], msg, len);
  GW_RETURN_IF_ERROR(ring_allgatherv(c, data, offsets, lengths));
  for (int r = 0; r < c.size; ++r) lengths_out[r] = lengths[r];
  return Status::ok();
}

Status sparse_allgather_dense(Context& c, const void* msg, size_t len, float* dense, size_t n) {
  auto* offsets = c.scratch.bytes.get<uint64_t>(4, static_cast<size_t>(c.size));
  auto* lengths = c.scratch.bytes.get<uint64_t>(5, static_cast<size_t>(c.size));
  GW_ASSIGN_OR_RETURN(uint64_t total, gather_layout(c, len, offsets, lengths));
  // Each message is at most as large as a dense one, with header: bounds what a peer can
  // make us allocate.
  const uint64_t limit = static_cast<uint64_t>(c.size) * (n * sizeof(float) + 4096);
  if (total > limit) {
    return Status(Code::kRemote, "the ranks' messages total " + std::to_string(total) +
                                     " bytes, more than any codec needs for " + std::to_string(n) + " elements");
  }
  auto* data = c.scratch.bytes.get<uint8_t>(3, total);
  if (len > 0) std::memcpy(data + offsets[c.rank], msg, len);
  GW_RETURN_IF_ERROR(ring_allgatherv(c, data, offsets, lengths));
  if (n > 0) std::memset(dense, 0, n * sizeof(float));
  for (int r = 0; r < c.size; ++r) {
    GW_RETURN_IF_ERROR(decode(data + offsets[r], lengths[r], dense, n, DType::kFloat32, DecodeMode::kAccumulate)
                           .with_context("message of rank " + std::to_string(r)));
  }
  return Status::ok();
}

Status sparse_allgather_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op,
                                  Codec& codec, ErrorFeedback* ef) {
  const uint64_t base_step = ef != nullptr ? ef->step() : c.seq;
  float* acc = prepare_accumulator(c, send, n, ef, 0);
  const size_t cap = codec.max_encoded_bytes(n, DType::kFloat32);
  uint8_t* msg = c.scratch.bytes.get<uint8_t>(1, cap);
  const EncodeContext ctx{base_step, static_cast<uint32_t>(c.rank)};
  GW_ASSIGN_OR_RETURN(size_t len, codec.encode_accumulated(acc, n, ctx, msg, cap));
  GW_RETURN_IF_ERROR(sparse_allgather_dense(c, msg, len, recv, n));
  if (op == ReduceOp::kAvg) {
    for (size_t i = 0; i < n; ++i) recv[i] /= static_cast<float>(c.size);
  }
  if (ef != nullptr) ef->advance();
  return Status::ok();
}

}  // namespace gw::coll
