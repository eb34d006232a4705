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

typedef enum gw_result {
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
  GW_NUM_RESULTS = 12
} gw_result_t;

typedef enum gw_dtype {
  GW_FLOAT32 = 1,
  GW_FLOAT16 = 2,
  GW_BFLOAT16 = 3
} gw_dtype_t;

typedef enum gw_decode_mode {
  GW_DECODE_OVERWRITE = 0,  /* dst = decoded */
  GW_DECODE_ACCUMULATE = 1, /* dst += decoded */
  GW_DECODE_SUBTRACT = 2    /* dst -= decoded */
} gw_decode_mode_t;

typedef enum gw_codec_id {
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

typedef struct gw_codec_s* gw_codec_t;
typedef struct gw_ef_state_s* gw_ef_state_t;

/* ---- errors and version ---- */
GW_API const char* gw_get_error_string(gw_result_t result);
GW_API const char* gw_get_last_error(void);
/* GW_VERSION_CODE of the library actually loaded. */
GW_API gw_result_t gw_get_version(int* version);

/* ---- codecs ----
 * spec: "none", "fp16", "bf16", "qsgd:bits=4,bucket=512", "sign:bucket=512",
 * "topk:ratio=0.01" or "topk:k=1000", "dgc:ratio=0.001", "randomk:ratio=0.01,seed=7";
 * any of them may add ",ef=1" (a hint for collectives that own EF state). */
GW_API gw_result_t gw_codec_create(const char* spec, gw_codec_t* codec);
GW_API gw_result_t gw_codec_destroy(gw_codec_t codec);
/* Canonical spec string of the codec, NUL-terminated; fails if capacity is too small. */
GW_API gw_result_t gw_codec_spec(gw_codec_t codec, char* buf, size_t capacity);
GW_API gw_result_t gw_codec_id(gw_codec_t codec, gw_codec_id_t* id);
/* Bytes that an encode of count elements of dtype can write at most. */
GW_API gw_result_t gw_codec_max_encoded_bytes(gw_codec_t codec, size_t count, gw_dtype_t dtype,
                                              size_t* bytes);

/*
 * Encodes count elements of src into dst (capacity bytes) and sets *written.
 * step and rank key the random stream (stochastic rounding, sampling, random-k indices):
 * ranks that pass the same step get the same random-k indices.
 * With ef non-NULL, encodes src + residual, stores the new residual and advances the
 * state's step; ef must have been created for count elements. Lossy codecs take
 * GW_FLOAT32 input; none, fp16 and bf16 take any dtype.
 */
GW_API gw_result_t gw_encode(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype,
                             uint64_t step, uint32_t rank, gw_ef_state_t ef, void* dst,
                             size_t capacity, size_t* written);

/* Decodes a message of len bytes into dst (count elements of dtype). The message is
 * untrusted: every length, count and index is checked before memory is touched. */
GW_API gw_result_t gw_decode(const void* msg, size_t len, void* dst, size_t count,
                             gw_dtype_t dtype, gw_decode_mode_t mode);
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

#ifdef __cplusplus
}
#endif

#endif /* GRADWIRE_GRADWIRE_H_ */
