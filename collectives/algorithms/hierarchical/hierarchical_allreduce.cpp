// Hierarchical all-reduce: a dense, exact reduce-scatter among the ranks of each node leaves
// local rank l holding the node's sum of shard l; the ranks holding shard l on every node
// (one per node) all-reduce it with `inner` (any flat algorithm, compressed or not), so every
// local rank drives its own share of the node's inter-node traffic at once; a dense
// all-gather inside each node then hands every rank the whole result. Error feedback acts
// on the inter-node leg only, on this rank's shard of the EF state.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/algorithms/hierarchical/hierarchical_groups.hpp"
#include "collectives/algorithms/hierarchical/node_pipeline.hpp"
#include "collectives/algorithms/hierarchical/node_shm.hpp"
#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/reduce.hpp"

namespace gw::coll {
namespace {

// The fence after the segment's legs (NodeShm's set-up uses 3600-3602).

// Where the inter-node leg of a compressed call reads and leaves its data.
struct LegIo {
  bool summed_into_residual = false;  // the node's sum is in the EF residual, not at data
  NodePipeline* sparse = nullptr;     // leave the messages in the node's segment, not a sum at data
  int piece = 0;                      // which piece of the shard (its own EF view)
  uint64_t ef_step = 0;               // the caller's EF step when the call began
};

// The inter-node leg on len elements at data (this rank's shard, or piece io.piece of it,
// from element start of the whole buffer): kAvg sums here, the caller divides.
Status inter_leg(Context& across, const Topology& t, const HierarchicalArgs& a, uint8_t* data, uint64_t start,
                 uint64_t len, const LegIo& io) {
  const ReduceOp sum_op = a.op == ReduceOp::kAvg ? ReduceOp::kSum : a.op;
  if (dense_algorithm(a.inner) || a.codec == nullptr) return ring_allreduce(across, data, data, len, a.dtype, sum_op);
  const int N = t.nnodes;
  auto* f = reinterpret_cast<float*>(data);
  ErrorFeedback* ef = nullptr;
  if (a.ef != nullptr) {
    // The shard's residual is the caller's state's own memory at the shard (zero elsewhere),
    // so checkpoints and a later flat call see it where they expect it. A piece's view
    // persists while it covers the same memory: its owner-side residual is then reused.
    // Every piece starts from the call's step (their random streams differ by piece), and
    // the call advances the caller's step once.
    std::vector<ErrorFeedback>& views = *a.shard_efs;
    if (views.size() <= static_cast<size_t>(io.piece))
      views.resize(static_cast<size_t>(io.piece) + 1, ErrorFeedback(0));
    ef = &views[static_cast<size_t>(io.piece)];
    if (ef->residual() != a.ef->residual() + start || ef->count() != len) *ef = ErrorFeedback(*a.ef, start, len);
    ef->set_step(io.ef_step);
  }
  const float* in = io.summed_into_residual ? ef->residual() : f;
  if (io.sparse != nullptr) {
    const int me = t.local_rank;
    GW_RETURN_IF_ERROR(sparse_allgather_exchange(across, in, len, *a.codec, ef, io.sparse->message(me, 0),
                                                 io.sparse->message_cap(), io.sparse->message_lengths(me), nullptr)
                           .with_context("inter-node leg"));
    if (ef != nullptr) a.ef->set_step(ef->step());
    return Status::ok();
  }
  const AlgorithmRow* row = find_algorithm(a.inner);
  if (row == nullptr || row->host == nullptr) row = find_algorithm(Algo::kScatterReduce);
  const Status s = row->host(across, HostAllreduce{in, f, len, DType::kFloat32, sum_op, a.codec, ef});
  GW_RETURN_IF_ERROR(s.with_context("inter-node leg"));
  if (ef != nullptr) {
    // The owner's re-encoding error goes back into this rank's own residual at the same
    // elements: it reaches the sum with the next contribution, and no state stays here.
    const size_t olen = ef->owner_count();
    const Partition inner_part{len, static_cast<uint64_t>(N)};
    const uint64_t owned = owner_segment(a.inner, t.node, N);
    if (olen > 0 && olen == inner_part.length(owned)) fold_owner_residual(*ef, inner_part.start(owned), olen);
    a.ef->set_step(ef->step());
  }
  return Status::ok();
}

// The inter-node transport of a pipelined call: its waits do the node's background work.
class PumpingTransport final : public transport::ForwardingTransport {
 public:
  PumpingTransport(transport::Transport& inner, NodePipeline& pipe) : ForwardingTransport(inner), pipe_(pipe) {}
  bool progress() override {
    const bool moved = inner_.progress();
    return pipe_.pump() || moved;
  }
  void wait_for_events(transport::Clock::time_point deadline) override {
    if (!pipe_.pump()) inner_.wait_for_events(deadline);
  }

 private:
  NodePipeline& pipe_;
};

}  // namespace

Status hierarchical_allreduce(Context& c, const Topology& t, const HierarchicalArgs& a) {
  const size_t es = dtype_size(a.dtype);
  const int L = t.local_size, N = t.nnodes;
  HierarchicalGroups g(c, t, a.n);
  const Partition& part = g.part;
  const uint64_t start = g.start, len = g.len;
  auto* out = static_cast<uint8_t*>(a.recv);
  uint8_t* shard = out + start * es;

  // A residual left by a flat compressed call covers elements outside this rank's shard: it
  // joins this call's input once, exactly (flush_ef), and the state keeps only the shard's
  // part, which the inter-node leg fills again. With the node's segment the pipeline does it
  // on the way (flush_residual); through the transport, a copy of the input has it added.
  const void* src = a.send;
  std::vector<float> flushed;

  // A sparse codec's sum across nodes is a few scattered elements: each shard's messages go
  // to every local rank through the segment, and each decodes them into its own output.
  const bool dense = dense_algorithm(a.inner) || a.codec == nullptr;
  const bool sparse_results = !dense && a.inner == Algo::kSparseAllgather && a.codec->spec().is_sparse();
  const size_t msg_cap = sparse_results ? a.codec->max_encoded_bytes(part.length(0), DType::kFloat32) : 0;
  uint8_t* seg = nullptr;
  if (a.node_shm != nullptr && a.n > 0) {
    // Every local rank must size and read the segment alike: the call must match first.
    GW_RETURN_IF_ERROR(c.verify_all_calls());
    size_t slots = 0, areas = 0, bytes = 0;
    const bool overflow =
        __builtin_mul_overflow(a.n * es, static_cast<size_t>(L), &slots) || slots > SIZE_MAX - 64 ||
        (sparse_results &&
         __builtin_mul_overflow(NodePipeline::message_area_bytes(N, msg_cap), static_cast<size_t>(L), &areas)) ||
        __builtin_add_overflow(NodePipeline::header_bytes(L) + NodePipeline::slots_bytes(L, a.n, es), areas, &bytes);
    if (overflow) return invalid_argument("a node segment for " + std::to_string(a.n) + " elements overflows size_t");
    GW_ASSIGN_OR_RETURN(seg, a.node_shm->map(g.in_node, bytes));
  }
  if (seg != nullptr) {
    // The shard is cut into pieces, each a separate inter-node all-reduce in its own tag
    // range (and, when lossy, its own random streams and EF view), so that the copies and
    // reductions inside the node run in the links' waits. Sparse results keep the shard
    // whole: top-k selects from the shard, and each shard's messages are decoded whole.
    const uint32_t stride = 2 * static_cast<uint32_t>(N);
    const int pieces =
        sparse_results ? 1
                       : NodePipeline::pieces_for(part.length(0) * es, static_cast<int>(kHierInterSteps.size / stride));
    NodePipeline pipe(c, seg, L, t.local_rank, a.n, a.dtype, a.op, src, a.recv, c.seq + 1, pieces);
    LegIo io;
    io.ef_step = a.ef != nullptr ? a.ef->step() : 0;
    if (!dense && a.ef != nullptr) {
      pipe.accumulate_into(a.ef->residual() + start);
      io.summed_into_residual = true;
      if (a.flush_ef) pipe.flush_residual(a.ef->residual());
    }
    if (sparse_results) {
      pipe.sparse_results(N, msg_cap, a.op == ReduceOp::kAvg ? c.size : 1);
      io.sparse = &pipe;
    }
    PumpingTransport pumping(g.across_tp, pipe);
    const Status ran = pipe.run([&](int k, uint8_t* data, uint64_t plen) -> Status {
      Context x = in_group(c, pumping, t.node, N, kHierInterSteps.base + static_cast<uint32_t>(k) * stride);
      x.piece = pieces > 1 ? static_cast<uint32_t>(k) + 1 : 0;
      LegIo piece_io = io;
      piece_io.piece = k;
      GW_RETURN_IF_ERROR(inter_leg(x, t, a, data, start + pipe.piece_offset(k), plen, piece_io));
      if (a.op == ReduceOp::kAvg && io.sparse == nullptr) divide(data, plen, a.dtype, c.size);
      return Status::ok();
    });
    GW_RETURN_IF_ERROR(ran);
    Context fence = in_group(c, g.node_tp, t.local_rank, L, kHierFenceSteps.base);
    return barrier(fence);  // nobody writes the slots again before everyone has read them
  }

  // Without shared memory, through the transport: reduce-scatter, inter-node leg, all-gather.
  if (a.flush_ef && a.n > 0) {
    flushed.assign(static_cast<const float*>(a.send), static_cast<const float*>(a.send) + a.n);
    reduce_into(flushed.data(), a.ef->residual(), a.n, DType::kFloat32, ReduceOp::kSum);
    std::memset(a.ef->residual(), 0, a.n * sizeof(float));
    src = flushed.data();
  }
  GW_RETURN_IF_ERROR(ring_reduce_scatter(g.in_node, src, shard, part, a.dtype, a.op));
  LegIo io;
  io.ef_step = a.ef != nullptr ? a.ef->step() : 0;
  GW_RETURN_IF_ERROR(inter_leg(g.across, t, a, shard, start, len, io));
  if (a.op == ReduceOp::kAvg) divide(shard, len, a.dtype, c.size);
  return g.gather_shards(shard, out, es);
}

}  // namespace gw::coll
