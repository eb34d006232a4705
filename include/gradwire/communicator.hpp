// C++ API for communicators: a group of ranks that run collectives together.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"
#include "gradwire/export.h"
#include "gradwire/status.hpp"
#include "gradwire/types.hpp"

namespace gw {

class DeviceEfState;
namespace coll {
class DeviceBackend;
class StreamMark;
}  // namespace coll

namespace transport {
class Transport;
}

// Values match gw_algo_t.
enum class Algo : uint8_t {
  kAuto = 0,
  kRing = 1,               // dense ring: reduce-scatter then all-gather
  kCompressedRing = 2,     // every hop decodes, adds and re-encodes
  kScatterReduce = 3,      // compressed all-to-all, owners reduce, encode once, all-gather
  kSparseAllgather = 4,    // every rank's message to every rank, summed in rank order
  kHierarchical = 5,       // dense inside nodes, the policy's algorithm between them
  kRecursiveDoubling = 6,  // dense, whole-buffer exchanges at distance 1, 2, 4, ...: log p steps
  kHalvingDoubling = 7,    // compressed recursive halving then doubling: log p steps each way
  kSparseDoubling = 8,     // sparse codecs: the sparse all-gather's sum in log p merges, dense when denser
  kRabenseifner = 9,       // dense: reduce-scatter by recursive halving, all-gather by doubling
};
GW_API const char* algo_name(Algo algo);
GW_API Result<Algo> parse_algo(const std::string& name);

// The pipelining unit's bounds (CommConfig::chunk_bytes, GW_CHUNK_BYTES, gw_config_t).
constexpr size_t kMinChunkBytes = 4096;
constexpr size_t kMaxChunkBytes = size_t{1} << 30;

struct CommConfig {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // every wait's bound
  size_t chunk_bytes = size_t{1} << 20;                          // pipelining unit
  size_t dense_threshold_bytes = size_t{64} << 10;               // smaller buffers go dense
  Algo algo = Algo::kAuto;                                       // GW_ALGO
  std::string codec_override;                                    // GW_CODEC
  Algo inter_algo = Algo::kAuto;  // GW_INTER_ALGO: the hierarchical all-reduce's inter-node algorithm

  // Defaults overridden by GW_TIMEOUT_S, GW_CHUNK_BYTES, GW_DENSE_THRESHOLD, GW_ALGO, GW_CODEC,
  // GW_INTER_ALGO.
  static Result<CommConfig> from_env();
};

// What a communicator's collectives did since it was made or its stats were reset. Time is
// wall time on the progress thread; encode includes error-feedback accumulation, decode
// includes validation; the rest of total_s is transfer (waiting, copies, dense reduction).
struct CommStats {
  uint64_t collectives = 0;  // collective calls finished, of every kind
  uint64_t allreduces = 0;   // of which all-reduces
  uint64_t bytes_sent = 0;   // payload bytes this rank posted to the transport
  uint64_t messages_sent = 0;
  double encode_s = 0;
  double decode_s = 0;
  double total_s = 0;
  Algo last_algo = Algo::kAuto;  // the algorithm the latest all-reduce ran
  double hidden_s = 0;           // of encode_s + decode_s, while this rank's sends were queued in the transport
  static constexpr size_t kAlgoSlots = 16;  // room for algorithms to come (gw_comm_stats_t is versioned by size)
  uint64_t algo_calls[kAlgoSlots] = {};     // all-reduces by the algorithm they ran, indexed by Algo
};

// A job's rendezvous ticket, as gw_unique_id_t: one process makes it (which starts the
// rendezvous root in that process) and hands the bytes to every rank by any channel.
struct UniqueId {
  unsigned char bytes[128];
};
GW_API Result<UniqueId> get_unique_id();

class GW_API Communicator {
 public:
  class Work;  // a queued call (submit, isend, irecv); test/wait/wait_for/on_complete below

  // Under mpirun, srun, torchrun, a PMI launcher or GW_RANK/GW_SIZE (README, "Launchers";
  // docs/configuration.md). Without a config, CommConfig::from_env().
  static Result<std::unique_ptr<Communicator>> from_env();
  static Result<std::unique_ptr<Communicator>> from_env(const CommConfig& config);
  // NCCL-style: every rank calls it with the same nranks and id and its own rank.
  static Result<std::unique_ptr<Communicator>> init_rank(int nranks, const UniqueId& id, int rank);
  static Result<std::unique_ptr<Communicator>> init_rank(int nranks, const UniqueId& id, int rank,
                                                         const CommConfig& config);
  // Over a transport that is already connected. transport::Transport is internal (not
  // installed): this is for gradwire's own tests and tools, which bring in-process ranks.
  static Result<std::unique_ptr<Communicator>> create(std::unique_ptr<transport::Transport> tp,
                                                      const CommConfig& config);
  // The same with the node of every rank (any labels, equal for ranks that share a node);
  // without it all ranks share one node.
  static Result<std::unique_ptr<Communicator>> create(std::unique_ptr<transport::Transport> tp,
                                                      const CommConfig& config, const std::vector<int>& node_of_rank);
  ~Communicator();

  int rank() const;
  int size() const;
  // Which ranks share a node (learned at init from host identities; see gw_comm_topology).
  int node_count() const;
  int node() const;
  int local_rank() const;
  int local_size() const;
  // The sticky error that broke this communicator, or OK: a failed call, or while idle what the
  // transport heard (a peer aborted or broke and said so, a peer on this host died).
  Status error() const;
  // Fails every pending and future operation; callable from any thread.
  void abort(const std::string& why);
  // Revokes the communicator (ULFM's MPIX_Comm_revoke): every pending and later call fails
  // with kRevoked, here and, within milliseconds, on every rank still reachable. Any thread.
  void revoke();
  // After a failure (a dead or frozen peer, a revoke, an abort), every survivor calls it: they
  // agree on who is alive, a rank silent for the config's timeout counted out, and each gets a
  // communicator over them on the same transport (no new rendezvous), ranks renumbered 0..m-1
  // in the old order. A healthy communicator is revoked first. This one stays broken; destroy
  // it. EF states carry over (docs/architecture.md, "Recovery"). kRemote: this rank was left
  // out, or a survivor died before the new communicator was up (shrink again); kTimeout;
  // kUnsupported on a transport that cannot recover; kInvalidUsage when shrunk twice.
  Result<std::unique_ptr<Communicator>> shrink();

  // Which algorithm an all-reduce with these arguments runs (on_device: allreduce_device's).
  Algo choose_algo(size_t count, DType dtype, const Codec* codec, Algo requested, bool on_device = false) const;

  // recv = sum (or average) of every rank's send. codec null or "none": dense. With a lossy
  // codec the input is float32, and ef (optional, count elements) carries error feedback.
  // send == recv is in place.
  Status allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Codec* codec,
                   ErrorFeedback* ef, Algo algo = Algo::kAuto);
  // Every rank's message, concatenated in rank order into out (capacity bytes); lengths
  // (size() entries) receives each one's length.
  Status sparse_allgather(const void* msg, size_t len, void* out, size_t capacity, size_t* lengths);
  // dense (count float32) = sum over ranks, in rank order, of each rank's decoded message.
  Status sparse_allgather_dense(const void* msg, size_t len, float* dense, size_t count);
  // recv (size() * bytes) = every rank's send block in rank order.
  Status allgather(const void* send, void* recv, size_t bytes);
  Status broadcast(void* buf, size_t bytes, int root);
  Status barrier();

  // Dense collectives, NCCL-shaped (gradwire.h, "dense collectives"): host buffers, every
  // dtype and op. Counts are elements, sizes bytes. Size arrays have size() entries; displs
  // null means packed in rank order. Called from the progress thread (inside submit) they
  // run inline.
  Status reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op);
  // Reduce-scatter with blocks of any sizes (counts: size() entries; block r packed in rank
  // order in send, rank r's recv holds counts[r] elements), compressed or not. codec null:
  // the bytes travel raw and are reduced in dtype (every dtype and op). codec given (even
  // "none"): sum or avg of float32, float16 or bfloat16; each rank's contribution to each
  // block is encoded once and the owner adds them in float32; ef (optional, every element
  // of send) keeps what this rank's messages lost, per block, for its next call.
  Status reduce_scatterv(const void* send, void* recv, const size_t* counts, DType dtype, ReduceOp op, Codec* codec,
                         ErrorFeedback* ef);
  Status allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes, const size_t* displs);
  // All-gather on a compressed wire (quantized weights, ZeRO++'s qwZ): recv (size() * count
  // elements of dtype: float32, float16 or bfloat16) = every rank's send block, encoded once
  // by codec and decoded by every rank, its own block too, so that every rank holds the same
  // bits. send may be recv's own block (in place). codec null: the raw all-gather.
  Status allgather_compressed(const void* send, void* recv, size_t count, DType dtype, Codec* codec);
  Status alltoall(const void* send, void* recv, size_t bytes);
  Status alltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                   const size_t* recv_bytes, const size_t* recv_displs);
  Status gather(const void* send, void* recv, size_t bytes, int root);
  Status scatter(const void* send, void* recv, size_t bytes, int root);

  // Point-to-point: posted at once (not behind queued collectives), matched by (peer, tag) in
  // posting order; the work finishes when the bytes have moved. A receive of another size
  // than the message fails with kInvalidUsage.
  std::shared_ptr<Work> isend(const void* buf, size_t bytes, int peer, uint32_t tag);
  std::shared_ptr<Work> irecv(void* buf, size_t bytes, int peer, uint32_t tag);
  // Blocking: the calling thread posts the message and drives the transport until it is done
  // (unless a collective is queued or running, which serves it meanwhile).
  Status send(const void* buf, size_t bytes, int peer, uint32_t tag);
  Status recv(void* buf, size_t bytes, int peer, uint32_t tag);

  // The collectives on device buffers (docs/architecture.md, "Device buffers"): the work is
  // ordered after what the caller queued on stream (a cudaStream_t; null: the legacy default
  // stream) and is complete on return. ef is null or a device state. The codec runs on the
  // device; dense calls go through NCCL once enable_nccl succeeded, else through pinned
  // host memory.
  Status allreduce_device(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Codec* codec,
                          DeviceEfState* ef, Algo algo, void* stream);
  // reduce_scatterv on device buffers: float32; codec null is "none" (exact, sum or avg only);
  // ef null or a device state.
  Status reduce_scatterv_device(const void* send, void* recv, const size_t* counts, DType dtype, ReduceOp op,
                                Codec* codec, DeviceEfState* ef, void* stream);
  Status allgather_device(const void* send, void* recv, size_t bytes, void* stream);
  // allgather_compressed on device buffers: float32 with a codec (codec null: the raw one, any
  // dtype); the same bits as the host call.
  Status allgather_compressed_device(const void* send, void* recv, size_t count, DType dtype, Codec* codec,
                                     void* stream);
  Status broadcast_device(void* buf, size_t bytes, int root, void* stream);
  // The same, ordered after a point taken earlier with mark_stream (a non-blocking call takes
  // it in the caller's thread when the call is made, then runs later on the progress thread).
  using StreamPoint = std::shared_ptr<coll::StreamMark>;
  Result<StreamPoint> mark_stream(void* stream);
  Status allreduce_device(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Codec* codec,
                          DeviceEfState* ef, Algo algo, const StreamPoint& after);
  Status allgather_device(const void* send, void* recv, size_t bytes, const StreamPoint& after);
  Status allgather_compressed_device(const void* send, void* recv, size_t count, DType dtype, Codec* codec,
                                     const StreamPoint& after);
  Status broadcast_device(void* buf, size_t bytes, int root, const StreamPoint& after);
  Status reduce_scatterv_device(const void* send, void* recv, const size_t* counts, DType dtype, ReduceOp op,
                                Codec* codec, DeviceEfState* ef, const StreamPoint& after);
  // Enqueues on stream (a cudaStream_t) a wait until work (from submit) has finished, with any
  // result; the host does not wait. Nothing is enqueued when it has finished already.
  // kUnsupported for point-to-point work, which is not queued in call order.
  Status stream_wait(Work& work, void* stream);
  // Gives back the device scratch and pinned staging the device collectives keep between
  // calls (after every earlier call; the next device call allocates again).
  Status trim_device();
  // Every rank calls it: brings up NCCL on each rank's current CUDA device, rank 0's
  // ncclUniqueId reaching the others through this communicator. A failure on any rank fails
  // it on every rank (kUnsupported with the reason) and leaves the communicator as it was.
  Status enable_nccl();
  bool nccl_enabled() const;
  // Ok when device collectives can run (making the backend on the current device if there is
  // none yet), else why not: no CUDA in this build, no driver, no device.
  Status device_ready();
  // Replaces the accelerator behind the device collectives (by default the CUDA one, made on
  // first use). For tests, and for accelerators other than CUDA.
  Status use_device_backend(std::unique_ptr<coll::DeviceBackend> backend);

  // Counters of every call made before this one (it runs after them, in order).
  Result<CommStats> stats();
  // Zeroes the counters, after every call made before this one.
  Status reset_stats();

  // Where a call may run: kAnyThread on the calling (or waiting) thread when nothing else is
  // queued or running, else on the progress thread; kProgressThread always there (device
  // work: the CUDA backend binds its device to the thread that drives it).
  enum class Where { kAnyThread, kProgressThread };
  // Runs fn after every earlier call; the returned handle reports its status. This is how the
  // non-blocking C calls work. With kAnyThread, wait() runs fn itself when the progress thread
  // has not started it yet (no hand-off to it and back).
  std::shared_ptr<Work> submit(std::function<Status(Communicator&)> fn, Where where = Where::kProgressThread);
  static bool test(Work& work, Status* status);
  static Status wait(Work& work);
  // kTimeout (the work still pending) when it has not finished within timeout.
  static Status wait_for(Work& work, std::chrono::milliseconds timeout);
  // fn(status) runs once when the work finishes: on the progress thread, or at once here if
  // it already has. It must be quick and must not call the communicator.
  static void on_complete(Work& work, std::function<void(const Status&)> fn);

 private:
  struct Impl;
  struct AllreduceChoice {
    Codec* codec;  // the caller's, or GW_CODEC's
    Algo chosen;   // the policy's choice
    bool tuned;    // the tuner may replace it
    Algo flat;     // the choice on a flat layout (chosen, unless that is kHierarchical)
  };
  // Checks an all-reduce's arguments (ef_count: null without EF) and picks its algorithm
  // (hierarchical only on host buffers).
  Result<AllreduceChoice> check_allreduce(const void* send, const void* recv, size_t count, DType dtype, ReduceOp op,
                                          Codec* codec, const size_t* ef_count, Algo algo, bool on_device) const;
  // Where a device call starts: after a point taken earlier, or (after null) a point taken
  // on stream once the call's arguments are checked.
  struct DeviceOrder {
    void* stream;
    StreamPoint after;
    Result<StreamPoint> point(coll::DeviceBackend& dev) const;
  };
  Status allreduce_device_at(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Codec* codec,
                             DeviceEfState* ef, Algo algo, const DeviceOrder& order);
  Status allgather_device_at(const void* send, void* recv, size_t bytes, const DeviceOrder& order);
  Status allgather_compressed_device_at(const void* send, void* recv, size_t count, DType dtype, Codec* codec,
                                        const DeviceOrder& order);
  Status broadcast_device_at(void* buf, size_t bytes, int root, const DeviceOrder& order);
  Status reduce_scatterv_device_at(const void* send, void* recv, const size_t* counts, DType dtype, ReduceOp op,
                                   Codec* codec, DeviceEfState* ef, const DeviceOrder& order);
  explicit Communicator(std::unique_ptr<Impl> impl);
  // isend / irecv: queues the message for the progress thread to post; waiter: the calling
  // thread will wait for it at once and drive it itself (the progress thread is not woken).
  std::shared_ptr<Work> post_p2p(void* buf, size_t bytes, int peer, uint32_t tag, bool is_recv, bool waiter = false);
  // Runs fn after every earlier call and returns its result. collective: a call that every
  // rank makes (two threads doing that at once are refused and break the communicator).
  // kAnyThread: on the calling thread when nothing is queued or running (small blocking calls
  // would otherwise pay two thread wake-ups, most of their time).
  Status run(std::function<Status()> fn, bool collective = true, Where where = Where::kAnyThread);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gw
