/* gradwire's stand-in accelerator: device collectives and stream order without a GPU.
 *
 * For testing an integration's stream handling (the torch backend's tests use it) on
 * machines with no GPU. "Device memory" is host memory from gw_standin_malloc; a stream is a
 * worker thread that runs what is enqueued on it in order, each item after a random delay of
 * up to max_delay_us, so code that reads a result before it waited for it reads stale bytes.
 * A stream handle is what the device calls take as their void* stream (NULL: a process-wide
 * default stream). After gw_comm_use_standin, a communicator's _device calls run on the
 * stand-in: their buffers must be stand-in memory and their EF states stand-in states. Codecs
 * are the host codecs (the CUDA kernels give the same bytes). Not for production: it is slow
 * by design. */
#ifndef GRADWIRE_STANDIN_H_
#define GRADWIRE_STANDIN_H_

#include "gradwire/gradwire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gw_standin_stream_s* gw_standin_stream_t;
typedef void (*gw_standin_fn)(void* arg);

/* max_delay_us in [0, 1000000]; seed seeds the delays. */
GW_API gw_result_t gw_standin_stream_create(int max_delay_us, uint64_t seed, gw_standin_stream_t* stream);
/* Runs what is queued, then destroys the stream. */
GW_API gw_result_t gw_standin_stream_destroy(gw_standin_stream_t stream);
/* fn(arg) runs on the stream's thread after everything enqueued before it. */
GW_API gw_result_t gw_standin_stream_enqueue(gw_standin_stream_t stream, gw_standin_fn fn, void* arg);
/* dst and src: any memory, copied in stream order. */
GW_API gw_result_t gw_standin_memcpy_async(void* dst, const void* src, size_t bytes, gw_standin_stream_t stream);
/* Host waits until everything enqueued so far has run. */
GW_API gw_result_t gw_standin_stream_synchronize(gw_standin_stream_t stream);
/* *idle = 1 when everything enqueued so far has run. */
GW_API gw_result_t gw_standin_stream_query(gw_standin_stream_t stream, int* idle);
/* An event: *event = the stream's position now; gw_standin_stream_wait_event makes another
 * stream wait (in its order, not the host) until the first has reached it. */
GW_API gw_result_t gw_standin_event_record(gw_standin_stream_t stream, uint64_t* event);
GW_API gw_result_t gw_standin_stream_wait_event(gw_standin_stream_t waiter, gw_standin_stream_t stream, uint64_t event);
GW_API gw_result_t gw_standin_event_synchronize(gw_standin_stream_t stream, uint64_t event);

/* Stand-in device memory (filled with 0xA5 bytes); *ptr is 8-byte aligned or better. */
GW_API gw_result_t gw_standin_malloc(size_t bytes, void** ptr);
GW_API gw_result_t gw_standin_free(void* ptr);
/* *yes = 1 when [ptr, ptr + bytes) lies inside one stand-in allocation. */
GW_API gw_result_t gw_standin_contains(const void* ptr, size_t bytes, int* yes);
/* The calling thread's current stand-in stream (the stand-in's torch.cuda.current_stream):
 * integrations read it to order their calls; NULL when the thread set none. */
GW_API gw_result_t gw_standin_set_current_stream(gw_standin_stream_t stream);
GW_API gw_result_t gw_standin_current_stream(gw_standin_stream_t* stream);
/* Bytes of stand-in memory allocated now, process-wide (gradwire's scratch included). */
GW_API gw_result_t gw_standin_live_bytes(size_t* bytes);

/* Collective: the communicator's device calls run on the stand-in from now on (every rank
 * calls it before its first device call). max_delay_us and seed shape its own stream. */
GW_API gw_result_t gw_comm_use_standin(gw_comm_t comm, int max_delay_us, uint64_t seed);
/* An EF state whose residual is stand-in memory (gw_ef_state_* calls take it as they take a
 * device state). */
GW_API gw_result_t gw_standin_ef_state_create(size_t count, gw_ef_state_t* ef);

#ifdef __cplusplus
}
#endif

#endif /* GRADWIRE_STANDIN_H_ */
