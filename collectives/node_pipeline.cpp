#include "collectives/node_pipeline.hpp"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "collectives/reduce.hpp"

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
    : c_(c), seg_(seg), header_(header_bytes(local_size)), L_(local_size), l_(local_rank), n_(n), es_(dtype_size(dtype)),
      dtype_(dtype), op_(op), src_(static_cast<const uint8_t*>(src)), recv_(static_cast<uint8_t*>(recv)), gen_(gen),
      P_(pieces), next_out_(static_cast<size_t>(local_size), 0), outs_left_(local_size * pieces) {}

std::atomic<uint64_t>* NodePipeline::flag(int kind, int r, int k) const {
  auto* base = reinterpret_cast<std::atomic<uint64_t>*>(seg_);
  return base + (static_cast<size_t>(kind) * L_ + static_cast<size_t>(r)) * kMaxPieces + static_cast<size_t>(k);
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
  for (int r = 0; r < L_; ++r) {
    if (r == l_) continue;
    const uint64_t off = piece_start(r, k) * es_, bytes = piece_len(r, k) * es_;
    if (bytes > 0) std::memcpy(slot(l_) + off, src_ + off, bytes);
  }
  flag(kIn, l_, k)->store(gen_, std::memory_order_release);
}

bool NodePipeline::inputs_ready(int k) const {
  for (int r = 0; r < L_; ++r) {
    if (r != l_ && flag(kIn, r, k)->load(std::memory_order_acquire) != gen_) return false;
  }
  return true;
}

// Piece k of this rank's shard: the node's ranks' inputs reduced in local rank order.
void NodePipeline::reduce(int k) {
  const uint64_t off = piece_start(l_, k) * es_, len = piece_len(l_, k);
  if (len == 0) return;
  uint8_t* dst = slot(l_) + off;
  auto input = [&](int r) { return r == l_ ? src_ + off : slot(r) + off; };
  std::memcpy(dst, input(0), len * es_);
  for (int r = 1; r < L_; ++r) reduce_into(dst, input(r), len, dtype_, op_);
}

// The next finished piece of any shard into recv; false when none is ready.
bool NodePipeline::copy_out_ready() {
  for (int r = 0; r < L_; ++r) {
    const int k = next_out_[static_cast<size_t>(r)];
    if (k >= P_ || flag(kOut, r, k)->load(std::memory_order_acquire) != gen_) continue;
    const uint64_t off = piece_start(r, k) * es_, bytes = piece_len(r, k) * es_;
    if (bytes > 0) std::memcpy(recv_ + off, slot(r) + off, bytes);
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
  int idle = 0;
  while (!ready()) {
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

Status NodePipeline::run(const std::function<Status(int, uint8_t*, uint64_t)>& inter,
                         const std::function<void(int)>& before) {
  for (int k = 0; k < P_; ++k) {
    current_ = k;
    while (next_in_ <= k) copy_in(next_in_++);
    if (next_reduce_ == k) {
      GW_RETURN_IF_ERROR(wait_until([&] { return inputs_ready(k); }, "their inputs"));
      if (next_reduce_ == k) reduce(next_reduce_++);
    }
    before(k);
    GW_RETURN_IF_ERROR(inter(k, slot(l_) + piece_start(l_, k) * es_, piece_len(l_, k)));
    flag(kOut, l_, k)->store(gen_, std::memory_order_release);
  }
  return wait_until([&] { return outs_left_ == 0; }, "their shards");
}

}  // namespace gw::coll
