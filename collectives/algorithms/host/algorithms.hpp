// Every collective algorithm, one file each. They run on the communicator's progress thread,
// with a Context; on error they return it and the communicator aborts the transport (which
// fails whatever is still pending) before anyone reuses the buffers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "collectives/common/context.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/ef_state.hpp"

namespace gw::coll {

Status ring_allreduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op);
// Whole-buffer exchanges with partners at distance 1, 2, 4, ...: log p steps (small buffers).
Status recursive_doubling_allreduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op);

// The lossy algorithms take float32. ef may be null.
Status compressed_ring_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                 ErrorFeedback* ef);
Status scatter_reduce_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                ErrorFeedback* ef);
// Compressed recursive halving then doubling: 2 log p messages per rank, log p + 1
// compressions per element (halving_doubling_allreduce.cpp).
Status halving_doubling_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                  ErrorFeedback* ef);
Status sparse_allgather_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                  ErrorFeedback* ef);
// Dense: reduce-scatter by recursive halving, all-gather by recursive doubling; any dtype
// and op (rabenseifner_allreduce.cpp).
Status rabenseifner_allreduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op);
// The sparse all-gather's sum in log p exchanges of merged messages, dense from the step the
// union of indices is denser (sparse_doubling_allreduce.cpp).
Status sparse_doubling_allreduce(Context& c, const float* send, float* recv, size_t n, ReduceOp op, Codec& codec,
                                 ErrorFeedback* ef);
// Its messages without the sum: encodes send (+ ef's residual) and exchanges every rank's
// message: rank r's lands at msgs + r * cap (cap: the codec's bound for n), lengths[r] its
// bytes. on_message(r) runs for r in rank order as each is in (this rank's own included).
// Nothing here validates a peer's message: whoever decodes it does.
Status sparse_allgather_exchange(Context& c, const float* send, size_t n, Codec& codec, ErrorFeedback* ef,
                                 uint8_t* msgs, size_t cap, uint64_t* lengths,
                                 const std::function<Status(int)>& on_message);

struct Topology;
class NodeShm;
struct HierarchicalArgs {
  const void* send;
  void* recv;
  size_t n;
  DType dtype;
  ReduceOp op;
  Codec* codec;                           // null: dense
  Algo inner;                             // the inter-node leg's algorithm (kRing: dense)
  ErrorFeedback* ef;                      // the caller's (n elements) or null; the inter-node leg's residual
  std::vector<ErrorFeedback>* shard_efs;  // the communicator's views of ef, a piece of the shard each
  bool flush_ef;                          // ef may hold a flat call's residual: send it densely first
  NodeShm* node_shm;                      // the node's shared segment for the legs inside it (null: the transport)
};
// Dense inside nodes, `inner` between them (hierarchical_allreduce.cpp); t.hierarchical().
Status hierarchical_allreduce(Context& c, const Topology& t, const HierarchicalArgs& a);
// sparse_allgather and sparse_allgather_dense with each message crossing the inter-node
// links once per node (hierarchical_sparse_allgather.cpp); t.hierarchical().
Status hierarchical_sparse_allgather(Context& c, const Topology& t, const void* msg, size_t len, void* out,
                                     size_t capacity, size_t* lengths, bool* fits);
Status hierarchical_sparse_allgather_dense(Context& c, const Topology& t, const void* msg, size_t len, float* dense,
                                           size_t n);

// fits: whether capacity held every message; when not, out is untouched (the messages went
// to scratch) and lengths still tells what each rank sent.
Status sparse_allgather(Context& c, const void* msg, size_t len, void* out, size_t capacity, size_t* lengths,
                        bool* fits);
Status sparse_allgather_dense(Context& c, const void* msg, size_t len, float* dense, size_t n);
Status allgather(Context& c, const void* send, void* recv, size_t bytes);
Status broadcast(Context& c, void* buf, size_t bytes, int root);
Status barrier(Context& c);

// The dense collectives of the public API (host memory, every dtype and op; sizes are
// elements for reductions, bytes otherwise; every rank passes the same sizes unless noted).
// out (part.length(rank) elements) = op over ranks of segment `rank` of send (part.n
// elements); out may be that segment of send. kAvg sums here: the caller divides.
Status ring_reduce_scatter(Context& c, const void* send, void* out, const Partition& part, DType dtype, ReduceOp op);
// recv (recv_count elements) = op over ranks of block `rank` of send.
Status reduce_scatter(Context& c, const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op);
// One reduce-scatter with blocks of any sizes: block r (counts[r] elements, packed in rank
// order in send) is reduced into rank r's recv. codec null: raw bytes, reduced in dtype with
// any op; else sum or avg of float32, float16 or bfloat16 input, each contribution encoded
// once and summed in float32, ef (null, or a state of every element of send) on the sender.
struct ReduceScatterArgs {
  const void* send;
  void* recv;
  const uint64_t* counts;  // size entries
  DType dtype;
  ReduceOp op;
  Codec* codec;
  ErrorFeedback* ef;
};
Status compressed_reduce_scatter(Context& c, const ReduceScatterArgs& a);
// recv (size * count elements of dtype: float32, float16 or bfloat16) = every rank's block of
// send, each encoded once by codec and decoded by every rank, its own too (the same bits on
// every rank). send may be recv's own block (in place).
struct CompressedAllgatherArgs {
  const void* send;
  void* recv;
  uint64_t count;
  DType dtype;
  Codec* codec;
};
Status compressed_allgather(Context& c, const CompressedAllgatherArgs& a);
// kInvalidMessage, in from's name, unless a block's message is of the call's codec (a valid
// message of another codec would decode, to something no rank sent under this call).
inline Status check_message_codec(CodecId got, CodecId want, const std::string& from) {
  if (got == want) return Status::ok();
  return Status(Code::kInvalidMessage,
                from + ": a " + codec_name(got) + " message where this call's codec is " + codec_name(want));
}
// recv (root only, n elements) = op over ranks of send.
Status reduce(Context& c, const void* send, void* recv, size_t n, DType dtype, ReduceOp op, int root);
// Block r (lengths[r] bytes) lands at recv + displs[r]; send is this rank's block.
Status allgatherv(Context& c, const void* send, void* recv, const uint64_t* displs, const uint64_t* lengths);
Status alltoall(Context& c, const void* send, void* recv, size_t bytes);
// sbytes[r] bytes at send + soff[r] go to rank r; rbytes[r] bytes from rank r land at recv +
// roff[r]. Sizes that differ from what the other side says fail on every rank (kInvalidUsage).
Status alltoallv(Context& c, const void* send, const uint64_t* sbytes, const uint64_t* soff, void* recv,
                 const uint64_t* rbytes, const uint64_t* roff);
Status gather(Context& c, const void* send, void* recv, size_t bytes, int root);
Status scatter(Context& c, const void* send, void* recv, size_t bytes, int root);

// Shared by the lossy algorithms: acc = send (+ residual when ef), the buffer they compress
// from. With ef the residual buffer itself is acc, so what each encode leaves behind stays
// there as the next step's residual. send may be that residual itself: the input is then
// already in it (the hierarchical all-reduce sums a node's inputs straight into it), and
// every lossy algorithm takes it so.
float* prepare_accumulator(Context& c, const float* send, size_t n, ErrorFeedback* ef, int slot);

// Codec calls of the lossy algorithms, timed into the communicator's statistics.
inline double* hidden_counter(const Context& c) { return c.stats != nullptr ? &c.stats->hidden_s : nullptr; }
inline Result<size_t> timed_encode(Context& c, Codec& codec, float* acc, size_t n, const EncodeContext& ctx, void* out,
                                   size_t cap) {
  ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode", hidden_counter(c), &c.tp);
  return codec.encode_accumulated(acc, n, ctx, out, cap);
}
// residual += g and its encode in one: the same bytes and residual as prepare_accumulator
// then timed_encode, in fewer passes over memory for codecs that fold the addition in.
inline Result<size_t> timed_encode_adding(Context& c, Codec& codec, float* residual, const float* g, size_t n,
                                          const EncodeContext& ctx, void* out, size_t cap) {
  ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode", hidden_counter(c), &c.tp);
  if (g == residual) return codec.encode_accumulated(residual, n, ctx, out, cap);  // already added
  return codec.encode_adding(residual, g, n, ctx, out, cap);
}
// Without error feedback nothing keeps an encode's loss: encode straight from the input,
// without copying it or decoding the message back (the same bytes as timed_encode).
inline Result<size_t> timed_encode_input(Context& c, Codec& codec, const float* src, size_t n, const EncodeContext& ctx,
                                         void* out, size_t cap) {
  ScopedSeconds t(c.stats != nullptr ? &c.stats->encode_s : nullptr, "encode", hidden_counter(c), &c.tp);
  return codec.encode(src, n, DType::kFloat32, ctx, out, cap);
}
inline Status timed_decode(const Context& c, const void* msg, size_t len, float* dst, size_t n, DecodeMode mode) {
  ScopedSeconds t(c.stats != nullptr ? &c.stats->decode_s : nullptr, "decode", hidden_counter(c), &c.tp);
  return decode(msg, len, dst, n, DType::kFloat32, mode);
}

}  // namespace gw::coll
