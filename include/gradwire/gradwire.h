/*
 * gradwire C ABI.
 *
 * Every function returns a gw_result_t. On failure, gw_get_last_error() returns a message
 * naming what was wrong; the message is thread-local and stays valid until the next gradwire
 * call on the same thread. No C++ exception ever crosses this interface.
 *
 * Thread safety: distinct handles may be used from distinct threads at once. One gw_codec_t
 * or gw_ef_state_t must not be used by two threads at the same time (both hold scratch
 * memory that encode reuses). gw_decode and gw_message_info hold no state and are safe
 * from any thread.
 *
 * Communicators: every collective call may come from any thread; calls on one communicator
 * run one after another, in the order they were made, on the communicator's progress
 * thread, and every rank must make the same calls in the same order. A codec or EF state
 * passed to a collective belongs to it until the call (or its request) completes.
 * gw_comm_abort may be called from any thread at any time. gw_comm_destroy must not race
 * with other calls on the same communicator.
 */
#ifndef GRADWIRE_GRADWIRE_H_
#define GRADWIRE_GRADWIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "gradwire/export.h"
#include "gradwire/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C lets a caller pass any integer as an enum; C++ gives an enum without a fixed type only
 * the values of its range, so a bad value would be undefined behaviour before the library
 * could reject it. The fixed type matches what C compilers choose for these enums. */
#ifdef __cplusplus
#define GW_ENUM_TYPE : unsigned int
#else
#define GW_ENUM_TYPE
#endif

typedef enum gw_result GW_ENUM_TYPE {
  GW_SUCCESS = 0,
  GW_ERR_INVALID_ARGUMENT = 1, /* a caller's argument is wrong (null, zero, out of range) */
  GW_ERR_INVALID_MESSAGE = 2,  /* wire bytes failed validation (truncated, forged, corrupt) */
  GW_ERR_UNSUPPORTED = 3,      /* valid request this build or codec cannot serve */
  GW_ERR_OUT_OF_MEMORY = 4,
  GW_ERR_BUFFER_TOO_SMALL = 5, /* output capacity below what is needed */
  GW_ERR_INTERNAL = 6,         /* a gradwire bug: please report it */
  GW_ERR_SYSTEM = 7,           /* an operating-system or library call failed */
  GW_ERR_REMOTE = 8,           /* a peer failed or closed the connection */
  GW_ERR_TIMEOUT = 9,
  GW_ERR_ABORTED = 10,
  GW_ERR_CUDA = 11,
  GW_ERR_INVALID_USAGE = 12, /* the ranks' calls do not match, or two threads used one communicator at once */
  GW_ERR_REVOKED = 13,       /* the communicator was revoked (gw_comm_revoke on some rank): shrink it to go on */
  GW_NUM_RESULTS = 14
} gw_result_t;

/* Codecs take the three floating-point types (lossy codecs float32 only); the dense
 * collectives take all of them (bool travels as GW_UINT8). */
typedef enum gw_dtype GW_ENUM_TYPE {
  GW_FLOAT32 = 1,
  GW_FLOAT16 = 2,
  GW_BFLOAT16 = 3,
  GW_FLOAT64 = 4,
  GW_INT8 = 5,
  GW_UINT8 = 6,
  GW_INT32 = 7,
  GW_INT64 = 8
} gw_dtype_t;

typedef enum gw_decode_mode GW_ENUM_TYPE {
  GW_DECODE_OVERWRITE = 0,  /* dst = decoded */
  GW_DECODE_ACCUMULATE = 1, /* dst += decoded */
  GW_DECODE_SUBTRACT = 2    /* dst -= decoded */
} gw_decode_mode_t;

typedef enum gw_codec_id GW_ENUM_TYPE {
  GW_CODEC_NONE = 0,
  GW_CODEC_FP16 = 1,
  GW_CODEC_BF16 = 2,
  GW_CODEC_QSGD = 3,
  GW_CODEC_SIGN = 4,
  GW_CODEC_TOPK = 5,
  GW_CODEC_DGC = 6,
  GW_CODEC_RANDOMK = 7
} gw_codec_id_t;

/* What a message's header says, checked against its payload. */
typedef struct gw_message_info_s {
  gw_codec_id_t codec;
  gw_dtype_t dtype;     /* element type of the tensor that was encoded */
  uint64_t count;       /* elements the message decodes to */
  uint64_t nnz;         /* elements carried (count for dense codecs, k for sparse ones) */
  uint64_t total_bytes; /* header plus payload */
} gw_message_info_t;

/* Compressed all-reduces take GW_SUM and GW_AVG; dense reductions take every op. GW_AVG on
 * integers is the sum divided by the rank count, rounded toward zero. Integer sums and
 * products wrap around (two's complement), as NCCL's do. */
typedef enum gw_red_op GW_ENUM_TYPE { GW_SUM = 0, GW_AVG = 1, GW_PROD = 2, GW_MIN = 3, GW_MAX = 4 } gw_red_op_t;

typedef enum gw_algo GW_ENUM_TYPE {
  GW_ALGO_AUTO = 0,               /* the policy: dense when small or uncompressed, else by codec */
  GW_ALGO_RING = 1,               /* dense ring: reduce-scatter then all-gather */
  GW_ALGO_COMPRESSED_RING = 2,    /* every hop decodes, adds and re-encodes */
  GW_ALGO_SCATTER_REDUCE = 3,     /* compressed all-to-all, owners encode the sum once */
  GW_ALGO_SPARSE_ALLGATHER = 4,   /* every rank's message to every rank, summed in rank order */
  GW_ALGO_HIERARCHICAL = 5,       /* dense inside each node, the policy's algorithm between nodes
                                     (one all-reduce per local rank); flat where the layout does
                                     not allow it (see gw_comm_topology) */
  GW_ALGO_RECURSIVE_DOUBLING = 6, /* dense, whole-buffer exchanges at distance 1, 2, 4, ...:
                                     log p steps; the policy's dense choice for small buffers */
  GW_ALGO_HALVING_DOUBLING = 7,   /* compressed recursive halving then doubling: 2 log p messages
                                     per rank, log p + 1 compressions per element; the policy's
                                     compressed choice on many ranks (host buffers) */
  GW_ALGO_SPARSE_DOUBLING = 8,    /* sparse codecs (topk, dgc, randomk): the sparse all-gather's
                                     exact sum of every rank's message in log p exchanges of
                                     merged messages, sent dense from the step their union is
                                     denser (SparCML); host buffers */
  GW_ALGO_RABENSEIFNER = 9        /* dense: reduce-scatter by recursive halving, all-gather by
                                     recursive doubling: the ring's bytes in 2 log p steps; the
                                     policy's dense choice for mid-sized buffers at scale (host) */
} gw_algo_t;

typedef struct gw_codec_s* gw_codec_t;
typedef struct gw_ef_state_s* gw_ef_state_t;
typedef struct gw_comm_s* gw_comm_t;
typedef struct gw_request_s* gw_request_t;

#define GW_UNIQUE_ID_BYTES 128
typedef struct gw_unique_id {
  char internal[GW_UNIQUE_ID_BYTES];
} gw_unique_id_t;

/* Communicator options. Initialise with GW_CONFIG_INITIALIZER, then set what you need; a
 * zero or negative field means "the default, or its environment variable". */
typedef struct gw_config {
  size_t size;                     /* sizeof(gw_config_t): lets the struct grow without breaking the ABI */
  unsigned int magic;              /* GW_CONFIG_MAGIC */
  unsigned int version;            /* GW_VERSION_CODE of the header compiled against */
  double timeout_s;                /* bound on every wait; GW_TIMEOUT_S, default 300 */
  size_t chunk_bytes;              /* pipelining unit; GW_CHUNK_BYTES, default 1 MiB */
  long long dense_threshold_bytes; /* all-reduces below this go dense; GW_DENSE_THRESHOLD, default 64 KiB; -1 default */
} gw_config_t;

#define GW_CONFIG_MAGIC 0x67776366u
#define GW_CONFIG_INITIALIZER \
  { sizeof(gw_config_t), GW_CONFIG_MAGIC, GW_VERSION_CODE, 0.0, 0, -1 }

/* ---- errors and version ---- */
GW_API const char* gw_get_error_string(gw_result_t result);
GW_API const char* gw_get_last_error(void);
/* GW_VERSION_CODE of the library actually loaded. */
GW_API gw_result_t gw_get_version(int* version);
/* One line: this library's version and what it was built with, the UCX it runs on, and NCCL's
 * version when the process has NCCL loaded, e.g. "gradwire 0.1.0 (CUDA no, NCCL module no);
 * UCX 1.13.1". The GW_DEBUG=VERSION banner. Valid on this thread until its next call. */
GW_API const char* gw_get_build_info(void);

/* ---- codecs ----
 * spec: "none", "fp16", "bf16", "qsgd:bits=4,bucket=512", "sign:bucket=512",
 * "topk:ratio=0.01" or "topk:k=1000", "dgc:ratio=0.001", "randomk:ratio=0.01,seed=7";
 * "fp16:rounding=stochastic,seed=S" and "bf16:rounding=stochastic" round each value up or
 * down with the probabilities that make it unbiased (the message is an ordinary fp16/bf16
 * one); any of them may add ",ef=1" (a hint for collectives that own EF state). */
GW_API gw_result_t gw_codec_create(const char* spec, gw_codec_t* codec);
GW_API gw_result_t gw_codec_destroy(gw_codec_t codec);
/* Canonical spec string of the codec, NUL-terminated; fails if capacity is too small. */
GW_API gw_result_t gw_codec_spec(gw_codec_t codec, char* buf, size_t capacity);
GW_API gw_result_t gw_codec_id(gw_codec_t codec, gw_codec_id_t* id);
/* Bytes that an encode of count elements of dtype can write at most. */
GW_API gw_result_t gw_codec_max_encoded_bytes(gw_codec_t codec, size_t count, gw_dtype_t dtype, size_t* bytes);

/* The codecs this library has, for listing them: index runs from 0 to gw_codec_count() - 1, in
 * order of id. Codec ids 200 to 254 are reserved for codecs that tests define. */
#define GW_CODEC_CAP_LOSSY 0x1u      /* a decode may differ from the input */
#define GW_CODEC_CAP_EF 0x2u         /* error feedback (ef=1) is meaningful */
#define GW_CODEC_CAP_SPARSE 0x4u     /* keeps k of n elements (ratio= or k=) */
#define GW_CODEC_CAP_INDICES 0x8u    /* messages carry the kept elements' indices */
#define GW_CODEC_CAP_ANY_DTYPE 0x10u /* takes float16 and bfloat16 too, not float32 only */
#define GW_CODEC_CAP_DEVICE 0x20u    /* gw_encode_device / gw_decode_device serve it in this build */
typedef struct gw_codec_info_s {
  const char* name; /* as in a spec; static storage */
  gw_codec_id_t id;
  uint32_t caps;    /* GW_CODEC_CAP_* */
  const char* keys; /* spec keys besides "ef", comma-separated ("" when none); static storage */
} gw_codec_info_t;
GW_API size_t gw_codec_count(void);
GW_API gw_result_t gw_codec_info(size_t index, gw_codec_info_t* info);

/*
 * Encodes count elements of src into dst (capacity bytes) and sets *written.
 * step and rank key the random stream (stochastic rounding, sampling, random-k indices):
 * ranks that pass the same step get the same random-k indices.
 * With ef non-NULL, encodes src + residual, stores the new residual and advances the
 * state's step; ef must have been created for count elements. Lossy codecs take
 * GW_FLOAT32 input; none, fp16 and bf16 take any dtype.
 */
GW_API gw_result_t gw_encode(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype, uint64_t step,
                             uint32_t rank, gw_ef_state_t ef, void* dst, size_t capacity, size_t* written);

/* Decodes a message of len bytes into dst (count elements of dtype). The message is
 * untrusted: every length, count and index is checked before memory is touched. */
GW_API gw_result_t gw_decode(const void* msg, size_t len, void* dst, size_t count, gw_dtype_t dtype,
                             gw_decode_mode_t mode);
GW_API gw_result_t gw_message_info(const void* msg, size_t len, gw_message_info_t* info);

/* ---- error feedback ----
 * The residual (fp32, zeroed at creation) of one gradient buffer, and its step counter. */
GW_API gw_result_t gw_ef_state_create(size_t count, gw_ef_state_t* ef);
GW_API gw_result_t gw_ef_state_destroy(gw_ef_state_t ef);
GW_API gw_result_t gw_ef_state_reset(gw_ef_state_t ef);
GW_API gw_result_t gw_ef_state_count(gw_ef_state_t ef, size_t* count);
GW_API gw_result_t gw_ef_state_step(gw_ef_state_t ef, uint64_t* step);
/* Copies the residual (count floats) out. */
GW_API gw_result_t gw_ef_state_get_residual(gw_ef_state_t ef, float* out, size_t count);
/* Restores a saved state (a resumed job): copies count floats (the state's count) into the
 * residual, host or device, and sets the step counter. Not while a collective uses ef. */
GW_API gw_result_t gw_ef_state_set_residual(gw_ef_state_t ef, const float* in, size_t count);
GW_API gw_result_t gw_ef_state_set_step(gw_ef_state_t ef, uint64_t step);
/* The whole state (residual, the owner-side residual some collectives keep, step) as one
 * self-describing blob for a checkpoint. buf NULL: *bytes = the size it needs. A host state's
 * blob loads into a device state of the same count and back. Loaded bytes are untrusted:
 * GW_ERR_INVALID_MESSAGE when they are not a blob, GW_ERR_INVALID_ARGUMENT when the count
 * differs; the state is untouched on error. */
GW_API gw_result_t gw_ef_state_save(gw_ef_state_t ef, void* buf, size_t capacity, size_t* bytes);
GW_API gw_result_t gw_ef_state_load(gw_ef_state_t ef, const void* buf, size_t len);

/* ---- codecs on CUDA device memory ----
 * The same messages as gw_encode / gw_decode, bit for bit, computed by CUDA kernels on
 * device buffers. stream is a cudaStream_t (NULL: the legacy default stream). Libraries built
 * without CUDA return GW_ERR_UNSUPPORTED from every function here. */

/* Number of usable CUDA devices. GW_ERR_CUDA (with the runtime's reason) when the CUDA
 * runtime cannot be used, e.g. no driver; GW_ERR_UNSUPPORTED when built without CUDA. */
GW_API gw_result_t gw_cuda_device_count(int* count);

/* An error-feedback state whose residual (count floats, zeroed) lives in memory of the
 * current CUDA device. gw_ef_state_destroy, _reset, _count, _step and _get_residual take it
 * (get_residual copies to host memory); gw_encode refuses it, the collectives on device
 * buffers take it. */
GW_API gw_result_t gw_ef_state_create_device(size_t count, gw_ef_state_t* ef);

/* gw_encode for device memory: src and dst are device pointers (dst 8-byte aligned), ef is
 * NULL or a device state. Work is enqueued on stream; *written is valid on return. The
 * message is complete when stream reaches this point. dgc's length depends on the data and
 * only the device learns it, so for dgc this waits for stream (gw_encode_device_async does
 * not). Scratch memory is stream-ordered (a pool per device that keeps what it was given,
 * so a steady loop allocates nothing from the driver); one codec may encode on several
 * streams at once, an ef state only on one at a time. */
GW_API gw_result_t gw_encode_device(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype, uint64_t step,
                                    uint32_t rank, gw_ef_state_t ef, void* dst, size_t capacity, size_t* written,
                                    void* stream);
/* gw_encode_device that never waits: *max_written is the message's length for every codec
 * but dgc, and for dgc the most it can be. The exact length is in the message's header when
 * stream reaches this point: copy the first 56 bytes (or *max_written) to the host and call
 * gw_message_length. */
GW_API gw_result_t gw_encode_device_async(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype,
                                          uint64_t step, uint32_t rank, gw_ef_state_t ef, void* dst, size_t capacity,
                                          size_t* max_written, void* stream);
/* The length (header plus payload) that a message's header states, from a host copy of at
 * least its first 56 bytes (len). Checks the magic and version only: gw_message_info and
 * gw_decode check the rest against the whole message. */
GW_API gw_result_t gw_message_length(const void* msg, size_t len, uint64_t* total_bytes);

/* gw_decode for a message in device memory into dst (device). The message is untrusted: it
 * is checked before dst is touched, and on error dst is untouched. A topk or dgc message is
 * checked (header and indices) and applied on the device, applied only if the device's own
 * check passed; the call waits for stream once, for the header and that verdict (the other
 * codecs' decode is enqueued after it and not waited for). */
GW_API gw_result_t gw_decode_device(const void* msg, size_t len, void* dst, size_t count, gw_dtype_t dtype,
                                    gw_decode_mode_t mode, void* stream);

/* ---- communicators ----
 * NCCL-style: one process calls gw_get_unique_id (this starts a rendezvous service in
 * that process), the id reaches every rank by any channel, and every rank calls
 * gw_comm_init_rank. Or gw_comm_init_from_env under mpirun, srun or torchrun (see README).
 * config may be NULL for defaults. */
GW_API gw_result_t gw_get_unique_id(gw_unique_id_t* id);
GW_API gw_result_t gw_comm_init_rank(gw_comm_t* comm, int nranks, gw_unique_id_t id, int rank,
                                     const gw_config_t* config);
GW_API gw_result_t gw_comm_init_from_env(gw_comm_t* comm, const gw_config_t* config);
/* Bootstrap through a channel the caller already has (a torch.distributed Store, MPI, a key
 * value store): allgather(user, sendbuf, recvbuf, bytes) must give recvbuf (nranks * bytes)
 * every rank's sendbuf block in rank order, with the same bytes on every rank, and return
 * GW_SUCCESS (anything else fails the init with that code). It is called a few times, from
 * the calling thread, before this returns; no port is opened for the rendezvous. */
typedef gw_result_t (*gw_allgather_fn)(void* user, const void* sendbuf, void* recvbuf, size_t bytes);
GW_API gw_result_t gw_comm_init_with_allgather(gw_comm_t* comm, int nranks, int rank, gw_allgather_fn allgather,
                                               void* user, const gw_config_t* config);
/* Finishes queued work (failing it if the communicator is broken) and frees everything. */
GW_API gw_result_t gw_comm_destroy(gw_comm_t comm);
/* Fails every pending and future call with GW_ERR_ABORTED; any thread. */
GW_API gw_result_t gw_comm_abort(gw_comm_t comm);
/* Recovery after a lost rank (ULFM-style; docs/architecture.md, "Recovery").
 * gw_comm_revoke: every pending and later call on comm fails with GW_ERR_REVOKED, here and,
 * within milliseconds, on every rank still reachable. Any thread.
 * gw_comm_shrink: after a failure (a dead or frozen peer, a revoke, an abort; a healthy comm is
 * revoked first), every survivor calls it. They agree on who is alive (a rank silent for the
 * config's timeout_s is counted out; a rank that dies during the agreement does not stop it)
 * and each gets *newcomm over the agreed ranks, on the same transport without a new
 * rendezvous, renumbered 0..m-1 in the old order. comm stays broken: destroy it. EF states
 * used on comm carry over as they are; owner-side residuals of the old layout are folded back
 * by the first call that uses them. Errors (then *newcomm is NULL): GW_ERR_REMOTE when this
 * rank was left out or a survivor died before the new communicator was up (shrink comm
 * again), GW_ERR_TIMEOUT, GW_ERR_UNSUPPORTED on a transport that cannot recover,
 * GW_ERR_INVALID_USAGE when comm was shrunk already. */
GW_API gw_result_t gw_comm_revoke(gw_comm_t comm);
GW_API gw_result_t gw_comm_shrink(gw_comm_t comm, gw_comm_t* newcomm);
GW_API gw_result_t gw_comm_rank(gw_comm_t comm, int* rank);
GW_API gw_result_t gw_comm_size(gw_comm_t comm, int* size);
/* Which ranks share a node, as learned at init from every rank's host identity (hostname,
 * boot id and network namespace, or GW_HOST_ID): the number of nodes, this rank's node (0 to
 * node_count - 1, numbered by their lowest rank), its index among its node's ranks (in rank
 * order) and how many ranks its node holds. No pointer may be NULL. */
GW_API gw_result_t gw_comm_topology(gw_comm_t comm, int* node_count, int* node, int* local_rank, int* local_size);
/* GW_SUCCESS while healthy; else the error that broke the communicator (a dead peer, a
 * timeout, an abort), found by a call or, while the communicator is idle, by its progress
 * thread (a peer that aborted or broke tells this rank within milliseconds; a dead peer on
 * this host is seen within ~20 ms). A broken communicator fails every call: destroy it, or
 * shrink it (gw_comm_shrink) to go on with the ranks still alive. */
GW_API gw_result_t gw_comm_get_async_error(gw_comm_t comm, gw_result_t* error);

/* What a communicator's collectives did since it was created or its stats were reset; for
 * perf tools. Times are wall time on the communicator's progress thread: encode_s includes
 * error-feedback accumulation, decode_s includes validation, and total_s minus both is
 * transfer (waiting on the network, copies, dense reduction). Set size first (the struct
 * may grow; the library fills only the first size bytes). */
typedef struct gw_comm_stats {
  size_t size;          /* sizeof(gw_comm_stats_t) */
  uint64_t collectives; /* collective calls finished, of every kind */
  uint64_t allreduces;  /* of which all-reduces */
  uint64_t bytes_sent;  /* payload bytes this rank posted to the transport */
  uint64_t messages_sent;
  double encode_s;
  double decode_s;
  double total_s;
  gw_algo_t last_algo; /* the algorithm the latest all-reduce ran (never GW_ALGO_AUTO once one ran) */
  double hidden_s;     /* of encode_s + decode_s, the time during which sends of this rank were
                          still queued in the transport (compute overlapped with transfer; a
                          lower bound: bytes in the kernel's socket buffer count as sent) */
  /* All-reduces by the algorithm they ran, indexed by gw_algo_t (slot GW_ALGO_AUTO and those
   * past the last algorithm stay 0): tells a perf tool whether its timed calls all ran one. */
  uint64_t algo_calls[16];
} gw_comm_stats_t;

/* The counters, after every call made on comm before this one. */
GW_API gw_result_t gw_comm_get_stats(gw_comm_t comm, gw_comm_stats_t* stats);
/* Zeroes the counters, after every call made on comm before this one. */
GW_API gw_result_t gw_comm_reset_stats(gw_comm_t comm);

/* recvbuf = sum (GW_SUM) or mean (GW_AVG) over ranks of sendbuf; sendbuf == recvbuf is in
 * place. codec NULL (or "none") is a dense all-reduce; a lossy codec needs GW_FLOAT32 and may
 * take ef, an EF state of count elements owned by this buffer. Device buffers run on the
 * device (see "collectives on CUDA device buffers" below). */
GW_API gw_result_t gw_allreduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef);
/* The same with the algorithm chosen by the caller (GW_ALGO_AUTO: the policy). */
GW_API gw_result_t gw_allreduce_ex(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                   gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo);
/* Non-blocking all-reduce: returns at once with a request; buffers, codec and ef stay in use
 * until gw_test reports done or gw_wait returns. */
GW_API gw_result_t gw_iallreduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                 gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo,
                                 gw_request_t* request);
/* *done = 1 when the request has finished; it is then freed and its result returned. */
GW_API gw_result_t gw_test(gw_request_t request, int* done);
/* Waits for the request, frees it and returns its result. */
GW_API gw_result_t gw_wait(gw_request_t request);
/* Waits at most timeout_s seconds: GW_ERR_TIMEOUT (the request still pending and valid, the
 * communicator untouched) when it has not finished by then; else as gw_wait. */
GW_API gw_result_t gw_wait_for(gw_request_t request, double timeout_s);
/* fn(user, result, message) runs once when the request finishes, on the communicator's
 * progress thread (or at once in this thread if it already has); message is the error's
 * text ("" on success) and lives only during the call. fn must be quick and must not call
 * gradwire. The request must still be freed by gw_test or gw_wait. At most one per request. */
typedef void (*gw_complete_fn)(void* user, gw_result_t result, const char* message);
GW_API gw_result_t gw_request_on_complete(gw_request_t request, gw_complete_fn fn, void* user);
/* The algorithm the policy picks for these arguments on this communicator. Where the
 * static policy would compress (GW_ALGO_AUTO, no GW_ALGO), each (codec, count, dtype) times
 * up to three candidates (the compressed algorithms that fit the codec and the dense ring)
 * over its first calls, runs the one that was clearly (10%) faster on the slowest rank, and
 * keeps timing to revisit that choice; this reports the current choice (before the first
 * decision: the static one, or GW_LINK_GBPS's estimate). GW_TUNE=0 turns measuring off. */
GW_API gw_result_t gw_allreduce_algo(gw_comm_t comm, size_t count, gw_dtype_t dtype, gw_codec_t codec, gw_algo_t* algo);
/* The same for gw_allreduce_device: device calls are timed apart from host calls, run
 * hierarchically on hierarchical layouts as host calls do, except dense calls once NCCL is
 * enabled (NCCL's all-reduce), and have no compressed ring. Needs no device. */
GW_API gw_result_t gw_allreduce_algo_device(gw_comm_t comm, size_t count, gw_dtype_t dtype, gw_codec_t codec,
                                            gw_algo_t* algo);

/* ---- reduce-scatter with compression (sharded data parallelism: FSDP2, ZeRO) ----
 * Block r of sendbuf (recvcounts[r] elements, blocks packed in rank order) is reduced over
 * ranks into rank r's recvbuf (recvcounts[r] elements). Every rank passes the same
 * recvcounts (any sizes, zeros included), dtype, op and codec spec; calls that differ fail
 * with GW_ERR_INVALID_USAGE on every rank. recvbuf may be its block of sendbuf (in place).
 * codec NULL: the bytes travel raw and are reduced in dtype (every dtype and op; the same
 * results as gw_reduce_scatter). codec given (even "none"): GW_SUM or GW_AVG of
 * GW_FLOAT32, GW_FLOAT16 or GW_BFLOAT16 (device buffers: GW_FLOAT32); every rank's
 * contribution to each other block is encoded once (float16 and bfloat16 inputs are
 * widened first for codecs that take float32 only) and sent straight to the block's owner,
 * which adds the contributions in float32, in rank order, and rounds the result to dtype
 * once. ef (optional: a state of every element of sendbuf, kept by the caller from call to
 * call) is error feedback on the sender's side: what this rank's messages to each owner
 * lost is added to its next contribution to that owner; its own block is never compressed
 * (that part of the residual stays zero). An EF state serves one kind of call (an
 * all-reduce state is not a reduce-scatter state). Device buffers (or a device EF state)
 * run on the device, ordered on the legacy default stream; the _device calls take the
 * stream; there codec NULL takes float32 GW_SUM or GW_AVG and runs as "none" (exact).
 * Non-blocking twins return a request; buffers, codec and ef stay in use until it
 * finishes (recvcounts is copied at the call). */
GW_API gw_result_t gw_reduce_scatterv(gw_comm_t comm, const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                      gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef);
GW_API gw_result_t gw_ireduce_scatterv(gw_comm_t comm, const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                       gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                       gw_request_t* request);
/* Equal blocks: gw_reduce_scatterv with every recvcounts[r] = recvcount (sendbuf holds
 * nranks * recvcount elements). */
GW_API gw_result_t gw_reduce_scatter_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                                gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef);
GW_API gw_result_t gw_ireduce_scatter_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                                 gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                                 gw_request_t* request);
GW_API gw_result_t gw_reduce_scatterv_device(gw_comm_t comm, const void* sendbuf, void* recvbuf,
                                             const size_t* recvcounts, gw_dtype_t dtype, gw_red_op_t op,
                                             gw_codec_t codec, gw_ef_state_t ef, void* stream);
GW_API gw_result_t gw_ireduce_scatterv_device(gw_comm_t comm, const void* sendbuf, void* recvbuf,
                                              const size_t* recvcounts, gw_dtype_t dtype, gw_red_op_t op,
                                              gw_codec_t codec, gw_ef_state_t ef, void* stream, gw_request_t* request);

/* All-gather on a compressed wire (quantized weights: ZeRO++'s qwZ, FSDP's parameter
 * all-gather). recvbuf (nranks * count elements of dtype) = every rank's sendbuf (count
 * elements) in rank order, each block encoded once by its rank with codec and decoded by
 * every rank, its own block included, so that every rank holds the same bits (block `rank`
 * is the decode of sendbuf, not sendbuf itself). dtype: GW_FLOAT32, GW_FLOAT16 or
 * GW_BFLOAT16 (widened to float32 for codecs that take float32 only, and rounded back to
 * nearest). sendbuf may be block `rank` of recvbuf (in place). Every rank passes the same
 * count, dtype and codec spec; calls that differ fail with GW_ERR_INVALID_USAGE on every
 * rank. A block whose message does not decode to count elements of this codec fails the
 * call with GW_ERR_INVALID_MESSAGE naming the rank it came from. codec NULL: the raw
 * all-gather (gw_allgather of count elements; any dtype; device buffers too). For weights,
 * "qsgd:bits=8,rounding=nearest,bucket=256" is blockwise int8 (min and scale per 256);
 * "bf16" halves float32. Device buffers (GW_FLOAT32 with a codec) give the host's bits, the
 * plain calls on the legacy default stream, the _device calls on stream. The non-blocking
 * twins return a request; the buffers and codec stay in use until it finishes. */
GW_API gw_result_t gw_allgather_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                           gw_dtype_t dtype, gw_codec_t codec);
GW_API gw_result_t gw_iallgather_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                            gw_dtype_t dtype, gw_codec_t codec, gw_request_t* request);
GW_API gw_result_t gw_allgather_compressed_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                                  gw_dtype_t dtype, gw_codec_t codec, void* stream);
GW_API gw_result_t gw_iallgather_compressed_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                                   gw_dtype_t dtype, gw_codec_t codec, void* stream,
                                                   gw_request_t* request);

/* Every rank's message (any length, e.g. a sparse encoding) to every rank. The messages are
 * concatenated in rank order into recvbuf (capacity bytes); lengths (nranks entries)
 * receives each one's length. */
GW_API gw_result_t gw_sparse_allgather(gw_comm_t comm, const void* msg, size_t len, void* recvbuf, size_t capacity,
                                       size_t* lengths);
/* dense (count float32) = the sum, in rank order, of every rank's decoded message. */
GW_API gw_result_t gw_sparse_allgather_dense(gw_comm_t comm, const void* msg, size_t len, float* dense, size_t count);
/* recvbuf (nranks * bytes) = every rank's sendbuf block in rank order. */
GW_API gw_result_t gw_allgather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes);
GW_API gw_result_t gw_broadcast(gw_comm_t comm, void* buf, size_t bytes, int root);
GW_API gw_result_t gw_barrier(gw_comm_t comm);

/* ---- dense collectives, NCCL-shaped ----
 * Host buffers, any dtype, every op; sendbuf may equal recvbuf where the shapes allow (in
 * place). Sizes are elements (count) for reductions and bytes for data movement. Calls whose
 * arguments differ between ranks (count, dtype, op, root, sizes) fail with
 * GW_ERR_INVALID_USAGE on every rank. Each has a non-blocking twin (gw_i...) that returns a
 * request at once; buffers and size arrays given to it are used until it finishes (size
 * arrays are copied at the call). */
/* recvbuf (root only; ignored elsewhere, may be NULL) = op over ranks of sendbuf. */
GW_API gw_result_t gw_reduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                             gw_red_op_t op, int root);
/* recvbuf (recvcount elements) = op over ranks of block `rank` of sendbuf (nranks * recvcount
 * elements). In place: recvbuf == sendbuf + rank * recvcount elements. */
GW_API gw_result_t gw_reduce_scatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                     gw_dtype_t dtype, gw_red_op_t op);
/* Variable all-gather: rank r's sendbytes land at recvbuf + displs[r], recvbytes[r] long
 * (recvbytes[rank] == sendbytes). displs NULL: packed in rank order. */
GW_API gw_result_t gw_allgatherv(gw_comm_t comm, const void* sendbuf, size_t sendbytes, void* recvbuf,
                                 const size_t* recvbytes, const size_t* displs);
/* Block r of sendbuf (bytes each) goes to rank r; block r of recvbuf comes from rank r. */
GW_API gw_result_t gw_alltoall(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes);
/* Variable all-to-all: sendbytes[r] bytes at sendbuf + sdispls[r] go to rank r, which must
 * expect exactly that many (its recvbytes[rank]); displs NULL: packed in rank order. */
GW_API gw_result_t gw_alltoallv(gw_comm_t comm, const void* sendbuf, const size_t* sendbytes, const size_t* sdispls,
                                void* recvbuf, const size_t* recvbytes, const size_t* rdispls);
/* recvbuf (root: nranks * bytes; elsewhere ignored, may be NULL) = every rank's sendbuf. */
GW_API gw_result_t gw_gather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root);
/* recvbuf (bytes) = block `rank` of root's sendbuf (nranks * bytes; ignored elsewhere). */
GW_API gw_result_t gw_scatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root);

GW_API gw_result_t gw_ireduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                              gw_red_op_t op, int root, gw_request_t* request);
GW_API gw_result_t gw_ireduce_scatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                      gw_dtype_t dtype, gw_red_op_t op, gw_request_t* request);
GW_API gw_result_t gw_iallgather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes,
                                 gw_request_t* request);
GW_API gw_result_t gw_iallgatherv(gw_comm_t comm, const void* sendbuf, size_t sendbytes, void* recvbuf,
                                  const size_t* recvbytes, const size_t* displs, gw_request_t* request);
GW_API gw_result_t gw_ibroadcast(gw_comm_t comm, void* buf, size_t bytes, int root, gw_request_t* request);
GW_API gw_result_t gw_ialltoall(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes,
                                gw_request_t* request);
GW_API gw_result_t gw_ialltoallv(gw_comm_t comm, const void* sendbuf, const size_t* sendbytes, const size_t* sdispls,
                                 void* recvbuf, const size_t* recvbytes, const size_t* rdispls, gw_request_t* request);
GW_API gw_result_t gw_igather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root,
                              gw_request_t* request);
GW_API gw_result_t gw_iscatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root,
                               gw_request_t* request);
GW_API gw_result_t gw_ibarrier(gw_comm_t comm, gw_request_t* request);

/* ---- point-to-point ----
 * Messages between two ranks, matched by (peer, tag) in the order they were posted; they
 * are not collective and do not wait behind other calls: a send and a receive both post at
 * once and finish when the bytes have moved (or the timeout passes, which breaks the
 * communicator). A receive must name the exact size: a message of another size fails it
 * with GW_ERR_INVALID_USAGE (the message is dropped, the send succeeds and the communicator
 * stays usable). Any tag value is allowed; peer may be the calling rank (post the receive or
 * use gw_isend, since a blocking send to oneself waits for its receive). */
GW_API gw_result_t gw_send(gw_comm_t comm, const void* buf, size_t bytes, int peer, uint32_t tag);
GW_API gw_result_t gw_recv(gw_comm_t comm, void* buf, size_t bytes, int peer, uint32_t tag);
GW_API gw_result_t gw_isend(gw_comm_t comm, const void* buf, size_t bytes, int peer, uint32_t tag,
                            gw_request_t* request);
GW_API gw_result_t gw_irecv(gw_comm_t comm, void* buf, size_t bytes, int peer, uint32_t tag, gw_request_t* request);

/* ---- collectives on CUDA device buffers ----
 * gw_allreduce, gw_allreduce_ex, gw_iallreduce, gw_allgather and gw_broadcast recognise
 * device memory (cudaMalloc or managed; with a device EF state, gw_ef_state_create_device)
 * and run on the device as below, ordered on the legacy default stream; every buffer of one
 * call must be device memory, or every one host memory. The _device calls take the stream.
 *
 * stream is a cudaStream_t (NULL: the legacy default stream). The collective starts after the
 * work queued on stream before the call (an event, not a host wait) and is complete, in device
 * memory, when the call returns (gw_iallreduce_device: when gw_test or gw_wait reports it).
 * Codecs encode and decode on the device; messages cross the transport from pinned host
 * memory, checked there before they are copied up; device copies overlap the transfers of
 * other chunks. Dense calls (codec none, small or non-float32 tensors, the tuner's choice)
 * go through NCCL after gw_comm_enable_nccl, else through pinned host memory. The device
 * is the one current when the communicator's first device call (or gw_comm_enable_nccl) ran;
 * buffers on another device are refused. compressed_ring runs on host buffers only.
 * Libraries built without CUDA return GW_ERR_UNSUPPORTED. */
GW_API gw_result_t gw_allreduce_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                       gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                       gw_algo_t algo, void* stream);
GW_API gw_result_t gw_iallreduce_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                        gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                        gw_algo_t algo, void* stream, gw_request_t* request);
GW_API gw_result_t gw_allgather_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, void* stream);
GW_API gw_result_t gw_broadcast_device(gw_comm_t comm, void* buf, size_t bytes, int root, void* stream);
GW_API gw_result_t gw_iallgather_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, void* stream,
                                        gw_request_t* request);
GW_API gw_result_t gw_ibroadcast_device(gw_comm_t comm, void* buf, size_t bytes, int root, void* stream,
                                        gw_request_t* request);

/* ---- stream order of non-blocking device calls ----
 * A non-blocking device call (gw_iallreduce_device, gw_iallgather_device, gw_ibroadcast_device)
 * takes its point on stream when it is called, in the calling thread: it starts after the work
 * queued there before the call, whatever the caller queues afterwards (an event, no host wait).
 *
 * gw_request_stream_wait enqueues on stream (a cudaStream_t; NULL: the legacy default stream)
 * a wait until the request has finished, so work queued there afterwards sees the call's
 * results, and the host does not wait (a stream memory operation on a word of pinned memory
 * the library signals as calls finish; a one-thread polling kernel where the driver has no
 * stream memory operations). The stream goes on when the request finishes with any result,
 * success or error, and when the communicator is destroyed: a stream never waits forever. So
 * a failed call lets the stream run on over unfinished buffers: learn the result from
 * gw_test / gw_wait / gw_request_on_complete as always. Call it before gw_test or gw_wait
 * reports the request finished (they free it); on a request that has finished it enqueues
 * nothing. Collective requests only: GW_ERR_UNSUPPORTED for point-to-point ones. */
GW_API gw_result_t gw_request_stream_wait(gw_request_t request, void* stream);

/* Device memory gradwire allocates from now on (collective and codec scratch, EF residuals)
 * comes from alloc and goes back through free, e.g. an application's caching allocator (the
 * torch backend hands it torch's). alloc returns NULL when it cannot; stream is the stream the
 * memory is first used on (NULL: the legacy default stream). Both NULL: gradwire's own pools
 * again. Memory is always given back to the allocator that gave it. Process-wide. */
typedef void* (*gw_device_alloc_fn)(size_t bytes, int device, void* stream, void* user);
typedef void (*gw_device_free_fn)(void* ptr, int device, void* stream, void* user);
GW_API gw_result_t gw_set_device_allocator(gw_device_alloc_fn alloc, gw_device_free_fn free_fn, void* user);

/* Gives back the device scratch and pinned staging memory the device collectives keep between
 * calls (it runs after every earlier call; the next device call allocates again). What
 * gradwire holds between calls on a communicator: per device collective in use, scratch up to
 * the largest message it carried (a few chunks, at most the buffer's size) and as much pinned
 * staging; per device EF state, its residual and owner-side residual (docs/architecture.md,
 * "Device memory"). */
GW_API gw_result_t gw_comm_trim(gw_comm_t comm);

/* Collective: every rank brings up NCCL on its current CUDA device; rank 0's ncclUniqueId
 * reaches the others through this communicator. NCCL is loaded at run time: $GW_NCCL_LIBRARY,
 * else libnccl.so.2 on the loader path, else the CUDA toolkit's found at build time. When
 * any rank cannot (no NCCL, no device, init failed), every rank gets GW_ERR_UNSUPPORTED with
 * the reason, and the communicator works on as before (dense device calls staged through host
 * memory). GW_ERR_TIMEOUT when a rank stopped answering during NCCL's init. */
GW_API gw_result_t gw_comm_enable_nccl(gw_comm_t comm);
/* *enabled = 1 once gw_comm_enable_nccl succeeded on this communicator. */
GW_API gw_result_t gw_comm_nccl_enabled(gw_comm_t comm, int* enabled);

#ifdef __cplusplus
}
#endif

#endif /* GRADWIRE_GRADWIRE_H_ */
