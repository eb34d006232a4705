#include "collectives/algorithms/hierarchical/node_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/common/reduce.hpp"
#include "collectives/observability/timeline.hpp"

namespace gw::coll {
namespace {

constexpr uint64_t kPieceBytes = uint64_t{2} << 20;
enum FlagKind { kIn = 0, kOut = 1 };

}  // namespace

size_t NodePipeline::header_bytes(int local_size) {
  const size_t b = 2 * static_cast<size_t>(local_size) * kMaxPieces * sizeof(uint64_t);
  return (b + 4095) / 4096 * 4096;
}

int NodePipeline::pieces_for(uint64_t shard_bytes, int max_pieces) {
  uint64_t p = (shard_bytes + kPieceBytes - 1) / kPieceBytes;
  if (p > static_cast<uint64_t>(max_pieces)) p = static_cast<uint64_t>(max_pieces);
  if (p > kMaxPieces) p = kMaxPieces;
  return p < 1 ? 1 : static_cast<int>(p);
}

NodePipeline::NodePipeline(const Context& c, uint8_t* seg, int local_size, int local_rank, uint64_t n, DType dtype,
                           ReduceOp op, const void* src, void* recv, uint64_t gen, int pieces)
    : c_(c),
      seg_(seg),
      header_(header_bytes(local_size)),
      L_(local_size),
      l_(local_rank),
      n_(n),
      es_(dtype_size(dtype)),
      dtype_(dtype),
      op_(op),
      src_(static_cast<const uint8_t*>(src)),
      recv_(static_cast<uint8_t*>(recv)),
      gen_(gen),
      P_(pieces),
      next_out_(static_cast<size_t>(local_size), 0),
      outs_left_(local_size * pieces) {}

std::atomic<uint64_t>* NodePipeline::flag(int kind, int r, int k) const {
  auto* base = reinterpret_cast<std::atomic<uint64_t>*>(seg_);
  return base + (static_cast<size_t>(kind) * L_ + static_cast<size_t>(r)) * kMaxPieces + static_cast<size_t>(k);
}

size_t NodePipeline::message_area_bytes(int messages, size_t cap) {
  return (static_cast<size_t>(messages) * (sizeof(uint64_t) + (cap + 7) / 8 * 8) + 63) / 64 * 64;
}

void NodePipeline::sparse_results(int messages, size_t cap, int divisor) {
  messages_ = messages;
  cap_ = (cap + 7) / 8 * 8;  // as message_area_bytes counts them
  divisor_ = divisor;
}

size_t NodePipeline::slots_bytes(int local_size, uint64_t n, size_t es) {
  return (static_cast<size_t>(local_size) * n * es + 63) / 64 * 64;
}

uint64_t* NodePipeline::message_lengths(int r) const {
  uint8_t* areas = seg_ + header_ + slots_bytes(L_, n_, es_);
  return reinterpret_cast<uint64_t*>(areas + static_cast<size_t>(r) * message_area_bytes(messages_, cap_));
}

uint8_t* NodePipeline::message(int r, int m) const {
  return reinterpret_cast<uint8_t*>(message_lengths(r) + messages_) + static_cast<size_t>(m) * cap_;
}

uint64_t NodePipeline::piece_start(int r, int k) const {
  const Partition shards{n_, static_cast<uint64_t>(L_)};
  const Partition pieces{shards.length(static_cast<uint64_t>(r)), static_cast<uint64_t>(P_)};
  return shards.start(static_cast<uint64_t>(r)) + pieces.start(static_cast<uint64_t>(k));
}

uint64_t NodePipeline::piece_len(int r, int k) const {
  const Partition shards{n_, static_cast<uint64_t>(L_)};
  return Partition{shards.length(static_cast<uint64_t>(r)), static_cast<uint64_t>(P_)}.length(static_cast<uint64_t>(k));
}

// Piece k of every other rank's shard, from this rank's input into its slot.
void NodePipeline::copy_in(int k) {
  TimedSpan span("node copy in", "node");
  for (int r = 0; r < L_; ++r) {
    if (r == l_) continue;
    const uint64_t off = piece_start(r, k) * es_, bytes = piece_len(r, k) * es_;
    if (bytes == 0) continue;
    std::memcpy(slot(l_) + off, src_ + off, bytes);
    if (flush_ != nullptr) {
      float* res = flush_ + piece_start(r, k);
      reduce_into(slot(l_) + off, res, piece_len(r, k), DType::kFloat32, ReduceOp::kSum);
      std::memset(res, 0, bytes);
    }
  }
  flag(kIn, l_, k)->store(gen_, std::memory_order_release);
}

bool NodePipeline::inputs_ready(int k) const {
  for (int r = 0; r < L_; ++r) {
    if (r != l_ && flag(kIn, r, k)->load(std::memory_order_acquire) != gen_) return false;
  }
  return true;
}

// Piece k of this rank's shard: the node's ranks' inputs reduced in local rank order, into
// the slot, or added into the residual (in blocks that stay in cache: the same sum, then
// the same addition, as a reduction into the slot followed by residual += slot).
void NodePipeline::reduce(int k) {
  const uint64_t off = piece_start(l_, k) * es_, len = piece_len(l_, k);
  if (len == 0) return;
  TimedSpan span("node reduce", "node");
  auto input = [&](int r) { return r == l_ ? src_ + off : slot(r) + off; };
  if (residual_ == nullptr) {
    uint8_t* dst = slot(l_) + off;
    std::memcpy(dst, input(0), len * es_);
    for (int r = 1; r < L_; ++r) reduce_into(dst, input(r), len, dtype_, op_);
    return;
  }
  constexpr uint64_t kBlock = 4096;
  float sum[kBlock];
  float* res = residual_ + (piece_start(l_, k) - piece_start(l_, 0));
  for (uint64_t b = 0; b < len; b += kBlock) {
    const uint64_t m = std::min(kBlock, len - b), at = b * sizeof(float);
    std::memcpy(sum, input(0) + at, m * sizeof(float));
    for (int r = 1; r < L_; ++r) reduce_into(sum, input(r) + at, m, DType::kFloat32, op_);
    reduce_into(res + b, sum, m, DType::kFloat32, ReduceOp::kSum);
  }
}

// Every message of shard r into recv, in order, over zeros.
Status NodePipeline::decode_shard(int r) {
  const uint64_t start = piece_start(r, 0), len = piece_len(r, 0);
  auto* dst = reinterpret_cast<float*>(recv_) + start;
  if (len > 0) std::memset(dst, 0, len * sizeof(float));
  const uint64_t* lengths = message_lengths(r);
  for (int m = 0; m < messages_; ++m) {
    GW_RETURN_IF_ERROR(timed_decode(c_, message(r, m), lengths[m], dst, len, DecodeMode::kAccumulate)
                           .with_context("inter-node message " + std::to_string(m) + " of local rank " +
                                         std::to_string(r) + "'s shard"));
  }
  if (divisor_ > 1) divide(dst, len, DType::kFloat32, divisor_);
  return Status::ok();
}

// The next finished piece of any shard into recv; false when none is ready (or a shard's
// messages failed to decode: error_).
bool NodePipeline::copy_out_ready() {
  if (!error_.is_ok()) return false;
  for (int r = 0; r < L_; ++r) {
    const int k = next_out_[static_cast<size_t>(r)];
    if (k >= P_ || flag(kOut, r, k)->load(std::memory_order_acquire) != gen_) continue;
    TimedSpan span("node copy out", "node");
    if (messages_ > 0) {
      error_ = decode_shard(r);  // sparse results come whole (one piece)
    } else {
      const uint64_t off = piece_start(r, k) * es_, bytes = piece_len(r, k) * es_;
      if (bytes > 0) std::memcpy(recv_ + off, slot(r) + off, bytes);
    }
    ++next_out_[static_cast<size_t>(r)];
    --outs_left_;
    return true;
  }
  return false;
}

bool NodePipeline::pump() {
  if (busy_) return false;
  busy_ = true;
  bool did = true;
  if (next_in_ < P_) {
    copy_in(next_in_++);
  } else if (next_reduce_ < P_ && next_reduce_ <= current_ + 2 && inputs_ready(next_reduce_)) {
    reduce(next_reduce_++);
  } else {
    did = copy_out_ready();
  }
  busy_ = false;
  return did;
}

Status NodePipeline::wait_until(const std::function<bool()>& ready, const char* what) {
  TimedSpan span("node wait", "node");
  int idle = 0;
  while (!ready()) {
    GW_RETURN_IF_ERROR(error_);
    if (pump()) continue;
    c_.tp.progress();
    GW_RETURN_IF_ERROR(c_.tp.error());
    GW_RETURN_IF_ERROR(c_.check_calls());
    if (transport::Clock::now() >= c_.deadline) {
      return Status(Code::kTimeout, std::string("waiting for the node's other ranks (") + what + ") timed out");
    }
    if (++idle < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return Status::ok();
}

Status NodePipeline::run(const std::function<Status(int, uint8_t*, uint64_t)>& inter) {
  for (int k = 0; k < P_; ++k) {
    current_ = k;
    while (next_in_ <= k) copy_in(next_in_++);
    if (next_reduce_ == k) {
      GW_RETURN_IF_ERROR(wait_until([&] { return inputs_ready(k); }, "their inputs"));
      if (next_reduce_ == k) reduce(next_reduce_++);
    }
    GW_RETURN_IF_ERROR(inter(k, slot(l_) + piece_start(l_, k) * es_, piece_len(l_, k)));
    GW_RETURN_IF_ERROR(error_);
    flag(kOut, l_, k)->store(gen_, std::memory_order_release);
  }
  GW_RETURN_IF_ERROR(wait_until([&] { return outs_left_ == 0; }, "their shards"));
  return error_;
}

}  // namespace gw::coll
