// The communicator half of the C ABI.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c_api/exit.hpp"
#include "c_api/handles.hpp"
#include "c_api/support.hpp"
#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/checks/argument_checks.hpp"
#include "collectives/comm/comm_init.hpp"
#include "common/log.hpp"
#include "compressors/device_memory.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/gradwire.h"
#include "transport/bootstrap/bootstrap.hpp"

struct gw_request_s {
  std::shared_ptr<gw::Communicator::Work> work;
  gw::Communicator* comm = nullptr;  // the communicator that queued it
  bool has_callback = false;         // gw_request_on_complete was called (at most once)
};

namespace {

using gw::Status;
using gw::capi::guard;
using gw::capi::null_arg;

static_assert(sizeof(gw_unique_id_t) == gw::bootstrap::kUniqueIdBytes, "unique id sizes differ");

gw::Result<gw::CommConfig> merge_config(const gw_config_t* config) {
  GW_ASSIGN_OR_RETURN(gw::CommConfig c, gw::CommConfig::from_env());
  if (config == nullptr) return c;
  if (config->magic != GW_CONFIG_MAGIC)
    return gw::invalid_argument("config was not set up with GW_CONFIG_INITIALIZER (bad magic)");
  if (config->size < sizeof(gw_config_t) || config->size > 4096) {
    return gw::invalid_argument("config->size " + std::to_string(config->size) + " is not sizeof(gw_config_t)");
  }
  // A config from a newer header may carry fields this library cannot read: refused, not guessed.
  if (config->version == 0 || config->version > GW_VERSION_CODE) {
    return gw::invalid_argument("config->version " + std::to_string(config->version) +
                                " is not a version this library knows (it is " + std::to_string(GW_VERSION_CODE) +
                                "; set the config up with GW_CONFIG_INITIALIZER)");
  }
  if (!std::isfinite(config->timeout_s) || config->timeout_s < 0 || config->timeout_s > 1e7) {
    return gw::invalid_argument("config->timeout_s " + std::to_string(config->timeout_s) +
                                " is not a number of seconds in [0, 1e7] (0: GW_TIMEOUT_S or the default)");
  }
  if (config->timeout_s > 0) {
    if (config->timeout_s < 0.001) {
      return gw::invalid_argument("config->timeout_s " + std::to_string(config->timeout_s) +
                                  " is below a millisecond (0: GW_TIMEOUT_S or the default)");
    }
    c.timeout = std::chrono::milliseconds(static_cast<int64_t>(config->timeout_s * 1000.0));
  }
  if (config->chunk_bytes > 0) {
    if (config->chunk_bytes < gw::kMinChunkBytes || config->chunk_bytes > gw::kMaxChunkBytes) {
      return gw::invalid_argument("config->chunk_bytes " + std::to_string(config->chunk_bytes) + " is not in [" +
                                  std::to_string(gw::kMinChunkBytes) + ", " + std::to_string(gw::kMaxChunkBytes) +
                                  "] (0: GW_CHUNK_BYTES or the default)");
    }
    c.chunk_bytes = config->chunk_bytes;
  }
  if (config->dense_threshold_bytes < -1) {
    return gw::invalid_argument("config->dense_threshold_bytes " + std::to_string(config->dense_threshold_bytes) +
                                " is negative (-1: GW_DENSE_THRESHOLD or the default)");
  }
  if (config->dense_threshold_bytes >= 0) c.dense_threshold_bytes = static_cast<size_t>(config->dense_threshold_bytes);
  return c;
}

Status check_comm(gw_comm_t comm) {
  if (comm == nullptr) return null_arg("comm");
  if (comm->comm == nullptr) {
    return Status(gw::Code::kInvalidUsage, "the communicator was closed when the process began to exit");
  }
  return Status::ok();
}

Status check_dtype_op(gw_dtype_t dtype, gw_red_op_t op) {
  if (!gw::collective_dtype_valid(static_cast<int>(dtype))) {
    return gw::invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  if (static_cast<unsigned>(op) > static_cast<unsigned>(GW_MAX)) {
    return gw::invalid_argument("op " + std::to_string(static_cast<int>(op)) + " is not a gw_red_op_t");
  }
  return Status::ok();
}

// Enum ranges only: which dtype and op a codec or algorithm takes is the C++ layer's check.
Status check_enum_args(gw_dtype_t dtype, gw_red_op_t op, gw_algo_t algo) {
  GW_RETURN_IF_ERROR(check_dtype_op(dtype, op));
  if (!gw::coll::algo_value_known(static_cast<int>(algo))) {
    return gw::invalid_argument("algo " + std::to_string(static_cast<int>(algo)) + " is not a gw_algo_t");
  }
  return Status::ok();
}

// Calls that take host buffers only: a device pointer would be read by the CPU, so it is
// refused with a message (hint: where device buffers can go instead).
Status check_host_buffers(std::initializer_list<const void*> bufs, const char* hint) {
  for (const void* b : bufs) {
    if (gw::is_device_memory(b)) {
      return gw::unsupported(std::string("a buffer is CUDA device memory; this call takes host buffers (") + hint +
                             ")");
    }
  }
  return Status::ok();
}

// The message collectives.
Status check_host_buffers(std::initializer_list<const void*> bufs) {
  return check_host_buffers(bufs,
                            "encode on the GPU with gw_encode_device and copy the message, or use gw_allreduce "
                            "on the gradient");
}

// The dense collectives and point-to-point messages.
Status check_host_only(std::initializer_list<const void*> bufs) {
  return check_host_buffers(bufs, "device buffers go through gw_allreduce, gw_allgather and gw_broadcast");
}

Status check_request(gw_request_t* request) {
  if (request == nullptr) return null_arg("request");
  *request = nullptr;
  return Status::ok();
}

// A size array (nranks entries) owned by a non-blocking call: copied at the call, since the
// caller may reuse its array once the call returns. Null stays null (the C++ call names it).
struct SizeArray {
  std::vector<size_t> v;
  bool null = true;
  SizeArray(const size_t* p, int n) : null(p == nullptr) {
    if (p != nullptr) v.assign(p, p + n);
  }
  const size_t* get() const { return null ? nullptr : v.data(); }
};

// A non-blocking call: fn runs after every earlier call, on the progress thread or, for host
// calls the progress thread has not started when gw_wait comes, on the waiting thread.
template <class F>
Status submit_call(gw_comm_t comm, gw_request_t* request, F&& fn,
                   gw::Communicator::Where where = gw::Communicator::Where::kAnyThread) {
  auto work = comm->comm->submit(std::forward<F>(fn), where);
  *request = new gw_request_s{std::move(work), comm->comm.get()};
  return Status::ok();
}

// A non-blocking device call: its point on the caller's stream is taken here, in the caller's
// thread (mark_stream also reports a missing device backend), and fn(cm, point) runs later on
// the progress thread.
template <class F>
Status submit_device_call(gw_comm_t comm, void* stream, gw_request_t* request, F&& fn) {
  GW_ASSIGN_OR_RETURN(gw::Communicator::StreamPoint after, comm->comm->mark_stream(stream));
  return submit_call(
      comm, request, [after, fn = std::forward<F>(fn)](gw::Communicator& cm) { return fn(cm, after); },
      gw::Communicator::Where::kProgressThread);
}

// Whether a call is the non-blocking twin (holding its request out-pointer) or blocking.
struct Async {
  gw_request_t* request = nullptr;
  bool on = false;
  Async() = default;
  explicit Async(gw_request_t* r) : request(r), on(true) {}
};

// The shared body of a call and its non-blocking twin, after the checks both make: the
// non-blocking one checks its request pointer and queues fn; the blocking one runs it here.
template <class F>
Status run_or_submit(gw_comm_t comm, const Async& async, F&& fn) {
  if (!async.on) return fn(*comm->comm);
  return submit_call(comm, async.request, std::forward<F>(fn));
}

// Checks every dense call and point-to-point message makes first: comm, then (non-blocking)
// the request pointer, then that no buffer is device memory.
Status check_comm_and_request(gw_comm_t comm, const Async& async) {
  GW_RETURN_IF_ERROR(check_comm(comm));
  return async.on ? check_request(async.request) : Status::ok();
}

Status check_call(gw_comm_t comm, const Async& async, std::initializer_list<const void*> bufs) {
  GW_RETURN_IF_ERROR(check_comm_and_request(comm, async));
  return check_host_only(bufs);
}

// check_call for a reduction: the dtype and op come before the buffers' memory.
Status check_reduction_call(gw_comm_t comm, const Async& async, gw_dtype_t dtype, gw_red_op_t op,
                            std::initializer_list<const void*> bufs) {
  GW_RETURN_IF_ERROR(check_comm_and_request(comm, async));
  GW_RETURN_IF_ERROR(check_dtype_op(dtype, op));
  return check_host_only(bufs);
}

Status p2p_call(gw_comm_t comm, void* buf, size_t bytes, int peer, uint32_t tag, bool is_recv, const Async& async) {
  GW_RETURN_IF_ERROR(check_call(comm, async, {buf}));
  GW_RETURN_IF_ERROR(gw::comm_detail::check_p2p_args(buf, bytes, peer, comm->comm->size()));
  if (!async.on) return is_recv ? comm->comm->recv(buf, bytes, peer, tag) : comm->comm->send(buf, bytes, peer, tag);
  auto work = is_recv ? comm->comm->irecv(buf, bytes, peer, tag) : comm->comm->isend(buf, bytes, peer, tag);
  *async.request = new gw_request_s{std::move(work), comm->comm.get()};
  return Status::ok();
}

Status reduce_call(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype, gw_red_op_t op,
                   int root, const Async& async) {
  GW_RETURN_IF_ERROR(check_reduction_call(comm, async, dtype, op, {sendbuf, recvbuf}));
  const auto dt = static_cast<gw::DType>(dtype);
  const auto ro = static_cast<gw::ReduceOp>(op);
  return run_or_submit(comm, async,
                       [=](gw::Communicator& c) { return c.reduce(sendbuf, recvbuf, count, dt, ro, root); });
}

Status reduce_scatter_call(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount, gw_dtype_t dtype,
                           gw_red_op_t op, const Async& async) {
  GW_RETURN_IF_ERROR(check_reduction_call(comm, async, dtype, op, {sendbuf, recvbuf}));
  const auto dt = static_cast<gw::DType>(dtype);
  const auto ro = static_cast<gw::ReduceOp>(op);
  return run_or_submit(comm, async,
                       [=](gw::Communicator& c) { return c.reduce_scatter(sendbuf, recvbuf, recvcount, dt, ro); });
}

Status allgatherv_call(gw_comm_t comm, const void* sendbuf, size_t sendbytes, void* recvbuf, const size_t* recvbytes,
                       const size_t* displs, const Async& async) {
  GW_RETURN_IF_ERROR(check_call(comm, async, {sendbuf, recvbuf}));
  if (!async.on) return comm->comm->allgatherv(sendbuf, sendbytes, recvbuf, recvbytes, displs);
  const int n = comm->comm->size();
  auto sizes = std::make_shared<SizeArray>(recvbytes, n);
  auto offsets = std::make_shared<SizeArray>(displs, n);
  return submit_call(comm, async.request, [=](gw::Communicator& c) {
    return c.allgatherv(sendbuf, sendbytes, recvbuf, sizes->get(), offsets->get());
  });
}

Status alltoall_call(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, const Async& async) {
  GW_RETURN_IF_ERROR(check_call(comm, async, {sendbuf, recvbuf}));
  return run_or_submit(comm, async, [=](gw::Communicator& c) { return c.alltoall(sendbuf, recvbuf, bytes); });
}

Status alltoallv_call(gw_comm_t comm, const void* sendbuf, const size_t* sendbytes, const size_t* sdispls,
                      void* recvbuf, const size_t* recvbytes, const size_t* rdispls, const Async& async) {
  GW_RETURN_IF_ERROR(check_call(comm, async, {sendbuf, recvbuf}));
  if (!async.on) return comm->comm->alltoallv(sendbuf, sendbytes, sdispls, recvbuf, recvbytes, rdispls);
  const int n = comm->comm->size();
  auto ss = std::make_shared<SizeArray>(sendbytes, n);
  auto sd = std::make_shared<SizeArray>(sdispls, n);
  auto rs = std::make_shared<SizeArray>(recvbytes, n);
  auto rd = std::make_shared<SizeArray>(rdispls, n);
  return submit_call(comm, async.request, [=](gw::Communicator& c) {
    return c.alltoallv(sendbuf, ss->get(), sd->get(), recvbuf, rs->get(), rd->get());
  });
}

// gather (scatter: false) or scatter (true).
Status gather_call(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root, bool scatter,
                   const Async& async) {
  GW_RETURN_IF_ERROR(check_call(comm, async, {sendbuf, recvbuf}));
  return run_or_submit(comm, async, [=](gw::Communicator& c) {
    return scatter ? c.scatter(sendbuf, recvbuf, bytes, root) : c.gather(sendbuf, recvbuf, bytes, root);
  });
}

gw_result_t code_of(const Status& s) { return static_cast<gw_result_t>(s.code()); }

// gw_comm_init_with_allgather: the address exchange over the caller's fixed-size all-gather.
// Two rounds: every rank's blob length (8 bytes, little-endian), then every blob padded to
// the longest. What comes back is untrusted: every length is checked, and this rank's own
// block must come back as it was sent.
constexpr uint64_t kMaxBlobBytes = uint64_t{1} << 20;  // UCX worker addresses are a few KiB

gw::Result<std::vector<std::string>> allgather_blobs(gw_allgather_fn fn, void* user, int rank, int nranks,
                                                     const std::string& blob) {
  const auto n = static_cast<size_t>(nranks);
  auto call = [&](const void* send, void* recv, size_t bytes, const char* what) -> Status {
    const gw_result_t r = fn(user, send, recv, bytes);
    if (r == GW_SUCCESS) return Status::ok();
    const int code = static_cast<int>(r);
    const std::string text =
        "the allgather callback failed (" +
        std::string(code > 0 && code < static_cast<int>(GW_NUM_RESULTS) ? gw_get_error_string(r) : "an unknown code") +
        ", " + std::to_string(code) + ") while exchanging " + what;
    if (code > 0 && code < static_cast<int>(GW_NUM_RESULTS)) return Status(static_cast<gw::Code>(code), text);
    return Status(gw::Code::kSystem, text);
  };
  auto malformed = [](const std::string& what) {
    return Status(gw::Code::kInvalidMessage, "the allgather callback returned malformed data: " + what);
  };
  uint8_t mine[8];
  const uint64_t len = blob.size();
  for (int i = 0; i < 8; ++i) mine[i] = static_cast<uint8_t>(len >> (8 * i));
  std::vector<uint8_t> lens(8 * n);
  GW_RETURN_IF_ERROR(call(mine, lens.data(), sizeof mine, "address lengths"));
  std::vector<uint64_t> got(n);
  uint64_t longest = 0;
  for (size_t r = 0; r < n; ++r) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(lens[8 * r + static_cast<size_t>(i)]) << (8 * i);
    if (v == 0 || v > kMaxBlobBytes) {
      return malformed("rank " + std::to_string(r) + "'s address length " + std::to_string(v) + " is not in [1, " +
                       std::to_string(kMaxBlobBytes) + "]");
    }
    got[r] = v;
    if (v > longest) longest = v;
  }
  if (got[static_cast<size_t>(rank)] != len) {
    return malformed("this rank's own block came back changed (is the rank order right?)");
  }
  const auto width = static_cast<size_t>(longest);
  std::vector<char> padded(width, '\0'), all(width * n);
  std::memcpy(padded.data(), blob.data(), blob.size());
  GW_RETURN_IF_ERROR(call(padded.data(), all.data(), width, "addresses"));
  if (std::memcmp(all.data() + width * static_cast<size_t>(rank), padded.data(), width) != 0) {
    return malformed("this rank's own address came back changed (is the rank order right?)");
  }
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r) out[r].assign(all.data() + width * r, static_cast<size_t>(got[r]));
  return out;
}

// The device collectives keep their residual on the device.
Status check_device_ef(gw_ef_state_t ef) {
  if (ef != nullptr && !ef->device) {
    return gw::invalid_argument(
        "ef is a host state (gw_ef_state_create); device collectives take a device state "
        "(gw_ef_state_create_device)");
  }
  return Status::ok();
}

struct Buffer {
  const void* ptr;
  const char* name;
};

// Whether a collective runs on device buffers: when any buffer (or the EF state) is device
// memory, all must be; a mix is the caller's mistake, named.
gw::Result<bool> on_device(std::initializer_list<Buffer> bufs, gw_ef_state_t ef) {
  const char* host = nullptr;
  const char* device = nullptr;
  for (const Buffer& b : bufs) {
    if (b.ptr == nullptr) continue;
    (gw::is_device_memory(b.ptr) ? device : host) = b.name;
  }
  if (ef != nullptr) (ef->device ? device : host) = ef->device ? "ef (a device state)" : "ef (a host state)";
  if (host != nullptr && device != nullptr) {
    return gw::invalid_argument(std::string(device) + " is CUDA device memory but " + host +
                                " is host memory; a collective takes one or the other");
  }
  return device != nullptr;
}

gw::Codec* codec_of(gw_codec_t codec) { return codec != nullptr ? codec->codec.get() : nullptr; }

// Runs an all-reduce where its buffers are (device calls ordered after the point `after` on
// the caller's stream, or, without one, on stream now).
Status allreduce_where(gw::Communicator& cm, bool device, const void* sendbuf, void* recvbuf, size_t count,
                       gw_dtype_t dtype, gw_red_op_t op, gw::Codec* codec, gw_ef_state_t ef, gw_algo_t algo,
                       void* stream, const gw::Communicator::StreamPoint& after = nullptr) {
  const auto dt = static_cast<gw::DType>(dtype);
  const auto ro = static_cast<gw::ReduceOp>(op);
  const auto al = static_cast<gw::Algo>(algo);
  if (device) {
    gw::DeviceEfState* dev_ef = ef != nullptr ? ef->device.get() : nullptr;
    if (after != nullptr) return cm.allreduce_device(sendbuf, recvbuf, count, dt, ro, codec, dev_ef, al, after);
    return cm.allreduce_device(sendbuf, recvbuf, count, dt, ro, codec, dev_ef, al, stream);
  }
  return cm.allreduce(sendbuf, recvbuf, count, dt, ro, codec, ef != nullptr ? &ef->ef : nullptr, al);
}

// gw_iallreduce and gw_iallreduce_device: the request runs allreduce_where on the progress thread.
Status submit_allreduce(gw_comm_t comm, bool device, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                        gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo, void* stream,
                        gw_request_t* request) {
  // Checked here: on the progress thread a CUDA error would break the communicator. The
  // point on the caller's stream is taken now, in the caller's thread: the call starts after
  // what the caller queued before it, not after what it queues while the call waits its turn.
  gw::Communicator::StreamPoint after;
  if (device) {
    GW_ASSIGN_OR_RETURN(after, comm->comm->mark_stream(stream));
  }
  gw::Codec* c = codec_of(codec);
  auto work = comm->comm->submit(
      [=](gw::Communicator& cm) {
        return allreduce_where(cm, device, sendbuf, recvbuf, count, dtype, op, c, ef, algo, stream, after);
      },
      device ? gw::Communicator::Where::kProgressThread : gw::Communicator::Where::kAnyThread);
  *request = new gw_request_s{std::move(work), comm->comm.get()};
  return Status::ok();
}

// gw_reduce_scatterv, gw_reduce_scatter_compressed and their non-blocking and _device twins.
// The counts are copied here (equal blocks: recvcount, else the recvcounts array), so that
// a non-blocking call does not read the caller's array later.
struct ScatterArgs {
  const void* sendbuf;
  void* recvbuf;
  const size_t* recvcounts;  // null: every block is *recvcount
  const size_t* recvcount;
  gw_dtype_t dtype;
  gw_red_op_t op;
  gw_codec_t codec;
  gw_ef_state_t ef;
};
struct DeviceChoice {
  bool explicit_device = false;  // a _device call, on stream
  void* stream = nullptr;
};

Status reduce_scatterv_call(gw_comm_t comm, const ScatterArgs& a, const DeviceChoice& where, const Async& async) {
  GW_RETURN_IF_ERROR(check_comm_and_request(comm, async));
  GW_RETURN_IF_ERROR(check_dtype_op(a.dtype, a.op));
  bool device = where.explicit_device;
  if (device) {
    GW_RETURN_IF_ERROR(check_device_ef(a.ef));
  } else {
    GW_ASSIGN_OR_RETURN(device, on_device({{a.sendbuf, "sendbuf"}, {a.recvbuf, "recvbuf"}}, a.ef));
  }
  const auto n = static_cast<size_t>(comm->comm->size());
  auto counts = std::make_shared<std::vector<size_t>>();
  if (a.recvcount != nullptr) {
    counts->assign(n, *a.recvcount);
  } else if (a.recvcounts == nullptr) {
    return null_arg("recvcounts");
  } else {
    counts->assign(a.recvcounts, a.recvcounts + n);
  }
  const auto dt = static_cast<gw::DType>(a.dtype);
  const auto ro = static_cast<gw::ReduceOp>(a.op);
  gw::Codec* codec = codec_of(a.codec);
  const void* send = a.sendbuf;
  void* recv = a.recvbuf;
  gw_ef_state_t ef = a.ef;
  void* stream = where.stream;
  auto run = [=](gw::Communicator& cm, const gw::Communicator::StreamPoint& after) -> Status {
    if (!device)
      return cm.reduce_scatterv(send, recv, counts->data(), dt, ro, codec, ef != nullptr ? &ef->ef : nullptr);
    gw::DeviceEfState* dev_ef = ef != nullptr ? ef->device.get() : nullptr;
    if (after != nullptr) return cm.reduce_scatterv_device(send, recv, counts->data(), dt, ro, codec, dev_ef, after);
    return cm.reduce_scatterv_device(send, recv, counts->data(), dt, ro, codec, dev_ef, stream);
  };
  if (!async.on) return run(*comm->comm, nullptr);
  if (device) return submit_device_call(comm, stream, async.request, run);
  return submit_call(comm, async.request, [run](gw::Communicator& cm) { return run(cm, nullptr); });
}

// gw_allgather_compressed, its non-blocking twin and their _device forms (on stream; the
// plain calls recognise device buffers and order them on the legacy default stream).
Status allgather_compressed_call(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                 gw_codec_t codec, const DeviceChoice& where, const Async& async) {
  GW_RETURN_IF_ERROR(check_comm_and_request(comm, async));
  gw::Codec* c = codec_of(codec);
  const auto dt = static_cast<gw::DType>(dtype);
  GW_RETURN_IF_ERROR(
      gw::comm_detail::check_allgather_compressed(sendbuf, recvbuf, count, comm->comm->size(), dt, c != nullptr));
  bool device = where.explicit_device;
  if (!device) {
    GW_ASSIGN_OR_RETURN(device, on_device({{sendbuf, "sendbuf"}, {recvbuf, "recvbuf"}}, nullptr));
  }
  void* stream = where.stream;
  auto run = [=](gw::Communicator& cm, const gw::Communicator::StreamPoint& after) -> Status {
    if (!device) return cm.allgather_compressed(sendbuf, recvbuf, count, dt, c);
    if (after != nullptr) return cm.allgather_compressed_device(sendbuf, recvbuf, count, dt, c, after);
    return cm.allgather_compressed_device(sendbuf, recvbuf, count, dt, c, stream);
  };
  if (!async.on) return run(*comm->comm, nullptr);
  if (device) return submit_device_call(comm, stream, async.request, run);
  return submit_call(comm, async.request, [run](gw::Communicator& cm) { return run(cm, nullptr); });
}

}  // namespace

extern "C" {

const char* gw_get_build_info(void) { return gw::log::version_banner(); }

gw_result_t gw_get_unique_id(gw_unique_id_t* id) {
  return guard("gw_get_unique_id", [&]() -> Status {
    if (id == nullptr) return null_arg("id");
    GW_ASSIGN_OR_RETURN(gw::UniqueId uid, gw::get_unique_id());
    std::memcpy(id->internal, uid.bytes, sizeof uid.bytes);
    return Status::ok();
  });
}

gw_result_t gw_comm_init_rank(gw_comm_t* comm, int nranks, gw_unique_id_t id, int rank, const gw_config_t* config) {
  return guard("gw_comm_init_rank", [&]() -> Status {
    if (comm == nullptr) return null_arg("comm");
    *comm = nullptr;
    GW_ASSIGN_OR_RETURN(gw::CommConfig cfg, merge_config(config));
    gw::UniqueId uid;
    std::memcpy(uid.bytes, id.internal, sizeof uid.bytes);
    auto made = gw::Communicator::init_rank(nranks, uid, rank, cfg);
    if (!made.is_ok()) return made.status();
    *comm = gw::capi::adopt(std::move(made).value());
    return Status::ok();
  });
}

gw_result_t gw_comm_init_from_env(gw_comm_t* comm, const gw_config_t* config) {
  return guard("gw_comm_init_from_env", [&]() -> Status {
    if (comm == nullptr) return null_arg("comm");
    *comm = nullptr;
    GW_ASSIGN_OR_RETURN(gw::CommConfig cfg, merge_config(config));
    auto made = gw::Communicator::from_env(cfg);
    if (!made.is_ok()) return made.status();
    *comm = gw::capi::adopt(std::move(made).value());
    return Status::ok();
  });
}

gw_result_t gw_comm_destroy(gw_comm_t comm) {
  return guard("gw_comm_destroy", [&]() -> Status {
    gw::capi::release(comm);
    return Status::ok();
  });
}

gw_result_t gw_comm_abort(gw_comm_t comm) {
  return guard("gw_comm_abort", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    comm->comm->abort("gw_comm_abort was called");
    return Status::ok();
  });
}

gw_result_t gw_comm_revoke(gw_comm_t comm) {
  return guard("gw_comm_revoke", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    comm->comm->revoke();
    return Status::ok();
  });
}

gw_result_t gw_comm_shrink(gw_comm_t comm, gw_comm_t* newcomm) {
  return guard("gw_comm_shrink", [&]() -> Status {
    if (newcomm == nullptr) return null_arg("newcomm");
    *newcomm = nullptr;
    GW_RETURN_IF_ERROR(check_comm(comm));
    auto made = comm->comm->shrink();
    if (!made.is_ok()) return made.status();
    *newcomm = gw::capi::adopt(std::move(made).value());
    return Status::ok();
  });
}

gw_result_t gw_comm_rank(gw_comm_t comm, int* rank) {
  return guard("gw_comm_rank", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (rank == nullptr) return null_arg("rank");
    *rank = comm->comm->rank();
    return Status::ok();
  });
}

gw_result_t gw_comm_size(gw_comm_t comm, int* size) {
  return guard("gw_comm_size", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (size == nullptr) return null_arg("size");
    *size = comm->comm->size();
    return Status::ok();
  });
}

gw_result_t gw_comm_topology(gw_comm_t comm, int* node_count, int* node, int* local_rank, int* local_size) {
  return guard("gw_comm_topology", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (node_count == nullptr) return null_arg("node_count");
    if (node == nullptr) return null_arg("node");
    if (local_rank == nullptr) return null_arg("local_rank");
    if (local_size == nullptr) return null_arg("local_size");
    *node_count = comm->comm->node_count();
    *node = comm->comm->node();
    *local_rank = comm->comm->local_rank();
    *local_size = comm->comm->local_size();
    return Status::ok();
  });
}

gw_result_t gw_comm_get_async_error(gw_comm_t comm, gw_result_t* error) {
  return guard("gw_comm_get_async_error", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (error == nullptr) return null_arg("error");
    const Status s = comm->comm->error();
    *error = static_cast<gw_result_t>(s.code());
    return Status::ok();
  });
}

gw_result_t gw_comm_get_stats(gw_comm_t comm, gw_comm_stats_t* stats) {
  return guard("gw_comm_get_stats", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (stats == nullptr) return null_arg("stats");
    if (stats->size < offsetof(gw_comm_stats_t, collectives) + sizeof(uint64_t) || stats->size > 4096) {
      return gw::invalid_argument("stats->size " + std::to_string(stats->size) + " is not sizeof(gw_comm_stats_t)");
    }
    GW_ASSIGN_OR_RETURN(gw::CommStats s, comm->comm->stats());
    gw_comm_stats_t out;
    std::memset(&out, 0, sizeof out);
    out.size = stats->size;
    out.collectives = s.collectives;
    out.allreduces = s.allreduces;
    out.bytes_sent = s.bytes_sent;
    out.messages_sent = s.messages_sent;
    out.encode_s = s.encode_s;
    out.decode_s = s.decode_s;
    out.total_s = s.total_s;
    out.last_algo = static_cast<gw_algo_t>(s.last_algo);
    out.hidden_s = s.hidden_s;
    static_assert(sizeof out.algo_calls == sizeof s.algo_calls, "gw_comm_stats_t.algo_calls is CommStats::algo_calls");
    std::memcpy(out.algo_calls, s.algo_calls, sizeof out.algo_calls);
    std::memcpy(stats, &out, stats->size < sizeof out ? stats->size : sizeof out);
    return Status::ok();
  });
}

gw_result_t gw_comm_reset_stats(gw_comm_t comm) {
  return guard("gw_comm_reset_stats", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    return comm->comm->reset_stats();
  });
}

gw_result_t gw_allreduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                         gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef) {
  return gw_allreduce_ex(comm, sendbuf, recvbuf, count, dtype, op, codec, ef, GW_ALGO_AUTO);
}

gw_result_t gw_allreduce_ex(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                            gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo) {
  return guard("gw_allreduce", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_enum_args(dtype, op, algo));
    GW_ASSIGN_OR_RETURN(bool device, on_device({{sendbuf, "sendbuf"}, {recvbuf, "recvbuf"}}, ef));
    return allreduce_where(*comm->comm, device, sendbuf, recvbuf, count, dtype, op, codec_of(codec), ef, algo, nullptr);
  });
}

gw_result_t gw_iallreduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                          gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo, gw_request_t* request) {
  return guard("gw_iallreduce", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (request == nullptr) return null_arg("request");
    *request = nullptr;
    GW_RETURN_IF_ERROR(check_enum_args(dtype, op, algo));
    GW_ASSIGN_OR_RETURN(bool device, on_device({{sendbuf, "sendbuf"}, {recvbuf, "recvbuf"}}, ef));
    return submit_allreduce(comm, device, sendbuf, recvbuf, count, dtype, op, codec, ef, algo, nullptr, request);
  });
}

gw_result_t gw_allreduce_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo, void* stream) {
  return guard("gw_allreduce_device", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_enum_args(dtype, op, algo));
    GW_RETURN_IF_ERROR(check_device_ef(ef));
    return allreduce_where(*comm->comm, true, sendbuf, recvbuf, count, dtype, op, codec_of(codec), ef, algo, stream);
  });
}

gw_result_t gw_iallreduce_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                 gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo, void* stream,
                                 gw_request_t* request) {
  return guard("gw_iallreduce_device", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (request == nullptr) return null_arg("request");
    *request = nullptr;
    GW_RETURN_IF_ERROR(check_enum_args(dtype, op, algo));
    GW_RETURN_IF_ERROR(check_device_ef(ef));
    return submit_allreduce(comm, true, sendbuf, recvbuf, count, dtype, op, codec, ef, algo, stream, request);
  });
}

gw_result_t gw_iallgather_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, void* stream,
                                 gw_request_t* request) {
  return guard("gw_iallgather_device", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_request(request));
    return submit_device_call(comm, stream, request,
                              [=](gw::Communicator& cm, const gw::Communicator::StreamPoint& after) {
                                return cm.allgather_device(sendbuf, recvbuf, bytes, after);
                              });
  });
}

gw_result_t gw_ibroadcast_device(gw_comm_t comm, void* buf, size_t bytes, int root, void* stream,
                                 gw_request_t* request) {
  return guard("gw_ibroadcast_device", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_request(request));
    return submit_device_call(comm, stream, request,
                              [=](gw::Communicator& cm, const gw::Communicator::StreamPoint& after) {
                                return cm.broadcast_device(buf, bytes, root, after);
                              });
  });
}

gw_result_t gw_request_stream_wait(gw_request_t request, void* stream) {
  return guard("gw_request_stream_wait", [&]() -> Status {
    if (request == nullptr) return null_arg("request");
    if (request->comm == nullptr) {
      return gw::unsupported("this request cannot be waited for on a stream (it was refused when it was made)");
    }
    return request->comm->stream_wait(*request->work, stream);
  });
}

gw_result_t gw_comm_trim(gw_comm_t comm) {
  return guard("gw_comm_trim", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    return comm->comm->trim_device();
  });
}

gw_result_t gw_comm_enable_nccl(gw_comm_t comm) {
  return guard("gw_comm_enable_nccl", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    return comm->comm->enable_nccl();
  });
}

gw_result_t gw_comm_nccl_enabled(gw_comm_t comm, int* enabled) {
  return guard("gw_comm_nccl_enabled", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (enabled == nullptr) return null_arg("enabled");
    *enabled = comm->comm->nccl_enabled() ? 1 : 0;
    return Status::ok();
  });
}

gw_result_t gw_test(gw_request_t request, int* done) {
  return guard("gw_test", [&]() -> Status {
    if (request == nullptr) return null_arg("request");
    if (done == nullptr) return null_arg("done");
    Status result;
    *done = gw::Communicator::test(*request->work, &result) ? 1 : 0;
    if (*done) delete request;
    return result;
  });
}

gw_result_t gw_wait(gw_request_t request) {
  return guard("gw_wait", [&]() -> Status {
    if (request == nullptr) return null_arg("request");
    const Status result = gw::Communicator::wait(*request->work);
    delete request;
    return result;
  });
}

gw_result_t gw_allreduce_algo(gw_comm_t comm, size_t count, gw_dtype_t dtype, gw_codec_t codec, gw_algo_t* algo) {
  return guard("gw_allreduce_algo", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (algo == nullptr) return null_arg("algo");
    GW_RETURN_IF_ERROR(check_enum_args(dtype, GW_SUM, GW_ALGO_AUTO));
    *algo = static_cast<gw_algo_t>(comm->comm->choose_algo(
        count, static_cast<gw::DType>(dtype), codec != nullptr ? codec->codec.get() : nullptr, gw::Algo::kAuto));
    return Status::ok();
  });
}

gw_result_t gw_allreduce_algo_device(gw_comm_t comm, size_t count, gw_dtype_t dtype, gw_codec_t codec,
                                     gw_algo_t* algo) {
  return guard("gw_allreduce_algo_device", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    if (algo == nullptr) return null_arg("algo");
    GW_RETURN_IF_ERROR(check_enum_args(dtype, GW_SUM, GW_ALGO_AUTO));
    *algo = static_cast<gw_algo_t>(comm->comm->choose_algo(count, static_cast<gw::DType>(dtype),
                                                           codec != nullptr ? codec->codec.get() : nullptr,
                                                           gw::Algo::kAuto, /*on_device=*/true));
    return Status::ok();
  });
}

gw_result_t gw_sparse_allgather(gw_comm_t comm, const void* msg, size_t len, void* recvbuf, size_t capacity,
                                size_t* lengths) {
  return guard("gw_sparse_allgather", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_host_buffers({msg, recvbuf}));
    return comm->comm->sparse_allgather(msg, len, recvbuf, capacity, lengths);
  });
}

gw_result_t gw_sparse_allgather_dense(gw_comm_t comm, const void* msg, size_t len, float* dense, size_t count) {
  return guard("gw_sparse_allgather_dense", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_host_buffers({msg, dense}));
    return comm->comm->sparse_allgather_dense(msg, len, dense, count);
  });
}

gw_result_t gw_allgather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes) {
  return guard("gw_allgather", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_ASSIGN_OR_RETURN(bool device, on_device({{sendbuf, "sendbuf"}, {recvbuf, "recvbuf"}}, nullptr));
    if (device) return comm->comm->allgather_device(sendbuf, recvbuf, bytes, nullptr);
    return comm->comm->allgather(sendbuf, recvbuf, bytes);
  });
}

gw_result_t gw_allgather_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                    gw_codec_t codec) {
  return guard("gw_allgather_compressed", [&]() -> Status {
    return allgather_compressed_call(comm, sendbuf, recvbuf, count, dtype, codec, DeviceChoice{}, Async{});
  });
}

gw_result_t gw_iallgather_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                                     gw_codec_t codec, gw_request_t* request) {
  return guard("gw_iallgather_compressed", [&]() -> Status {
    return allgather_compressed_call(comm, sendbuf, recvbuf, count, dtype, codec, DeviceChoice{}, Async{request});
  });
}

gw_result_t gw_allgather_compressed_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                           gw_dtype_t dtype, gw_codec_t codec, void* stream) {
  return guard("gw_allgather_compressed_device", [&]() -> Status {
    return allgather_compressed_call(comm, sendbuf, recvbuf, count, dtype, codec, DeviceChoice{true, stream}, Async{});
  });
}

gw_result_t gw_iallgather_compressed_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                            gw_dtype_t dtype, gw_codec_t codec, void* stream, gw_request_t* request) {
  return guard("gw_iallgather_compressed_device", [&]() -> Status {
    return allgather_compressed_call(comm, sendbuf, recvbuf, count, dtype, codec, DeviceChoice{true, stream},
                                     Async{request});
  });
}

gw_result_t gw_broadcast(gw_comm_t comm, void* buf, size_t bytes, int root) {
  return guard("gw_broadcast", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_ASSIGN_OR_RETURN(bool device, on_device({{buf, "buf"}}, nullptr));
    if (device) return comm->comm->broadcast_device(buf, bytes, root, nullptr);
    return comm->comm->broadcast(buf, bytes, root);
  });
}

gw_result_t gw_allgather_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, void* stream) {
  return guard("gw_allgather_device", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    return comm->comm->allgather_device(sendbuf, recvbuf, bytes, stream);
  });
}

gw_result_t gw_broadcast_device(gw_comm_t comm, void* buf, size_t bytes, int root, void* stream) {
  return guard("gw_broadcast_device", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    return comm->comm->broadcast_device(buf, bytes, root, stream);
  });
}

gw_result_t gw_barrier(gw_comm_t comm) {
  return guard("gw_barrier", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    return comm->comm->barrier();
  });
}

gw_result_t gw_comm_init_with_allgather(gw_comm_t* comm, int nranks, int rank, gw_allgather_fn allgather, void* user,
                                        const gw_config_t* config) {
  return guard("gw_comm_init_with_allgather", [&]() -> Status {
    if (comm == nullptr) return null_arg("comm");
    *comm = nullptr;
    if (allgather == nullptr) return null_arg("allgather");
    GW_ASSIGN_OR_RETURN(gw::CommConfig cfg, merge_config(config));
    auto exchange = [&](const std::string& blob) { return allgather_blobs(allgather, user, rank, nranks, blob); };
    auto made = gw::coll::init_communicator(rank, nranks, exchange, cfg);
    if (!made.is_ok()) return made.status();
    *comm = gw::capi::adopt(std::move(made).value());
    return Status::ok();
  });
}

gw_result_t gw_wait_for(gw_request_t request, double timeout_s) {
  return guard("gw_wait_for", [&]() -> Status {
    if (request == nullptr) return null_arg("request");
    if (!(timeout_s >= 0)) return gw::invalid_argument("timeout_s must be zero or more");
    // Beyond a year is forever (and keeps the conversion in range).
    const double capped = timeout_s < 3.2e7 ? timeout_s : 3.2e7;
    const auto ms = std::chrono::milliseconds(static_cast<int64_t>(capped * 1000.0 + 0.5));
    const Status waited = gw::Communicator::wait_for(*request->work, ms);
    Status result;
    if (!gw::Communicator::test(*request->work, &result)) {
      return Status(gw::Code::kTimeout, "the request has not finished within " + std::to_string(timeout_s) +
                                            " s; it is still pending (wait again, or gw_test)");
    }
    (void)waited;
    delete request;
    return result;
  });
}

gw_result_t gw_request_on_complete(gw_request_t request, gw_complete_fn fn, void* user) {
  return guard("gw_request_on_complete", [&]() -> Status {
    if (request == nullptr) return null_arg("request");
    if (fn == nullptr) return null_arg("fn");
    if (request->has_callback) return gw::invalid_argument("the request already has a completion callback");
    request->has_callback = true;
    gw::Communicator::on_complete(
        *request->work, [fn, user](const Status& s) { fn(user, code_of(s), s.is_ok() ? "" : s.message().c_str()); });
    return Status::ok();
  });
}

// ---- point-to-point ----

gw_result_t gw_isend(gw_comm_t comm, const void* buf, size_t bytes, int peer, uint32_t tag, gw_request_t* request) {
  return guard("gw_isend", [&]() -> Status {
    return p2p_call(comm, const_cast<void*>(buf), bytes, peer, tag, /*is_recv=*/false, Async{request});
  });
}

gw_result_t gw_irecv(gw_comm_t comm, void* buf, size_t bytes, int peer, uint32_t tag, gw_request_t* request) {
  return guard("gw_irecv",
               [&]() -> Status { return p2p_call(comm, buf, bytes, peer, tag, /*is_recv=*/true, Async{request}); });
}

gw_result_t gw_send(gw_comm_t comm, const void* buf, size_t bytes, int peer, uint32_t tag) {
  return guard("gw_send", [&]() -> Status {
    return p2p_call(comm, const_cast<void*>(buf), bytes, peer, tag, /*is_recv=*/false, Async{});
  });
}

gw_result_t gw_recv(gw_comm_t comm, void* buf, size_t bytes, int peer, uint32_t tag) {
  return guard("gw_recv", [&]() -> Status { return p2p_call(comm, buf, bytes, peer, tag, /*is_recv=*/true, Async{}); });
}

// ---- dense collectives, blocking and non-blocking (one body each, in the anonymous namespace) ----

gw_result_t gw_reduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                      gw_red_op_t op, int root) {
  return guard("gw_reduce",
               [&]() -> Status { return reduce_call(comm, sendbuf, recvbuf, count, dtype, op, root, Async{}); });
}

gw_result_t gw_ireduce(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t count, gw_dtype_t dtype,
                       gw_red_op_t op, int root, gw_request_t* request) {
  return guard("gw_ireduce",
               [&]() -> Status { return reduce_call(comm, sendbuf, recvbuf, count, dtype, op, root, Async{request}); });
}

gw_result_t gw_reduce_scatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount, gw_dtype_t dtype,
                              gw_red_op_t op) {
  return guard("gw_reduce_scatter",
               [&]() -> Status { return reduce_scatter_call(comm, sendbuf, recvbuf, recvcount, dtype, op, Async{}); });
}

gw_result_t gw_ireduce_scatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount, gw_dtype_t dtype,
                               gw_red_op_t op, gw_request_t* request) {
  return guard("gw_ireduce_scatter", [&]() -> Status {
    return reduce_scatter_call(comm, sendbuf, recvbuf, recvcount, dtype, op, Async{request});
  });
}

gw_result_t gw_reduce_scatterv(gw_comm_t comm, const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                               gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef) {
  return guard("gw_reduce_scatterv", [&]() -> Status {
    return reduce_scatterv_call(comm, ScatterArgs{sendbuf, recvbuf, recvcounts, nullptr, dtype, op, codec, ef},
                                DeviceChoice{}, Async{});
  });
}

gw_result_t gw_ireduce_scatterv(gw_comm_t comm, const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                gw_request_t* request) {
  return guard("gw_ireduce_scatterv", [&]() -> Status {
    return reduce_scatterv_call(comm, ScatterArgs{sendbuf, recvbuf, recvcounts, nullptr, dtype, op, codec, ef},
                                DeviceChoice{}, Async{request});
  });
}

gw_result_t gw_reduce_scatter_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                         gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef) {
  return guard("gw_reduce_scatter_compressed", [&]() -> Status {
    return reduce_scatterv_call(comm, ScatterArgs{sendbuf, recvbuf, nullptr, &recvcount, dtype, op, codec, ef},
                                DeviceChoice{}, Async{});
  });
}

gw_result_t gw_ireduce_scatter_compressed(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                                          gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                          gw_request_t* request) {
  return guard("gw_ireduce_scatter_compressed", [&]() -> Status {
    return reduce_scatterv_call(comm, ScatterArgs{sendbuf, recvbuf, nullptr, &recvcount, dtype, op, codec, ef},
                                DeviceChoice{}, Async{request});
  });
}

gw_result_t gw_reduce_scatterv_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                      gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                      void* stream) {
  return guard("gw_reduce_scatterv_device", [&]() -> Status {
    return reduce_scatterv_call(comm, ScatterArgs{sendbuf, recvbuf, recvcounts, nullptr, dtype, op, codec, ef},
                                DeviceChoice{true, stream}, Async{});
  });
}

gw_result_t gw_ireduce_scatterv_device(gw_comm_t comm, const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                       gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef,
                                       void* stream, gw_request_t* request) {
  return guard("gw_ireduce_scatterv_device", [&]() -> Status {
    return reduce_scatterv_call(comm, ScatterArgs{sendbuf, recvbuf, recvcounts, nullptr, dtype, op, codec, ef},
                                DeviceChoice{true, stream}, Async{request});
  });
}

gw_result_t gw_allgatherv(gw_comm_t comm, const void* sendbuf, size_t sendbytes, void* recvbuf, const size_t* recvbytes,
                          const size_t* displs) {
  return guard("gw_allgatherv", [&]() -> Status {
    return allgatherv_call(comm, sendbuf, sendbytes, recvbuf, recvbytes, displs, Async{});
  });
}

gw_result_t gw_iallgatherv(gw_comm_t comm, const void* sendbuf, size_t sendbytes, void* recvbuf,
                           const size_t* recvbytes, const size_t* displs, gw_request_t* request) {
  return guard("gw_iallgatherv", [&]() -> Status {
    return allgatherv_call(comm, sendbuf, sendbytes, recvbuf, recvbytes, displs, Async{request});
  });
}

gw_result_t gw_alltoall(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes) {
  return guard("gw_alltoall", [&]() -> Status { return alltoall_call(comm, sendbuf, recvbuf, bytes, Async{}); });
}

gw_result_t gw_ialltoall(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, gw_request_t* request) {
  return guard("gw_ialltoall",
               [&]() -> Status { return alltoall_call(comm, sendbuf, recvbuf, bytes, Async{request}); });
}

gw_result_t gw_alltoallv(gw_comm_t comm, const void* sendbuf, const size_t* sendbytes, const size_t* sdispls,
                         void* recvbuf, const size_t* recvbytes, const size_t* rdispls) {
  return guard("gw_alltoallv", [&]() -> Status {
    return alltoallv_call(comm, sendbuf, sendbytes, sdispls, recvbuf, recvbytes, rdispls, Async{});
  });
}

gw_result_t gw_ialltoallv(gw_comm_t comm, const void* sendbuf, const size_t* sendbytes, const size_t* sdispls,
                          void* recvbuf, const size_t* recvbytes, const size_t* rdispls, gw_request_t* request) {
  return guard("gw_ialltoallv", [&]() -> Status {
    return alltoallv_call(comm, sendbuf, sendbytes, sdispls, recvbuf, recvbytes, rdispls, Async{request});
  });
}

gw_result_t gw_gather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root) {
  return guard("gw_gather",
               [&]() -> Status { return gather_call(comm, sendbuf, recvbuf, bytes, root, false, Async{}); });
}

gw_result_t gw_igather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root,
                       gw_request_t* request) {
  return guard("gw_igather",
               [&]() -> Status { return gather_call(comm, sendbuf, recvbuf, bytes, root, false, Async{request}); });
}

gw_result_t gw_scatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root) {
  return guard("gw_scatter",
               [&]() -> Status { return gather_call(comm, sendbuf, recvbuf, bytes, root, true, Async{}); });
}

gw_result_t gw_iscatter(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, int root,
                        gw_request_t* request) {
  return guard("gw_iscatter",
               [&]() -> Status { return gather_call(comm, sendbuf, recvbuf, bytes, root, true, Async{request}); });
}

// Non-blocking twins of calls whose blocking form also takes device buffers (above).

gw_result_t gw_iallgather(gw_comm_t comm, const void* sendbuf, void* recvbuf, size_t bytes, gw_request_t* request) {
  return guard("gw_iallgather", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_request(request));
    GW_RETURN_IF_ERROR(check_host_only({sendbuf, recvbuf}));
    return submit_call(comm, request, [=](gw::Communicator& c) { return c.allgather(sendbuf, recvbuf, bytes); });
  });
}

gw_result_t gw_ibroadcast(gw_comm_t comm, void* buf, size_t bytes, int root, gw_request_t* request) {
  return guard("gw_ibroadcast", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_request(request));
    GW_RETURN_IF_ERROR(check_host_only({buf}));
    return submit_call(comm, request, [=](gw::Communicator& c) { return c.broadcast(buf, bytes, root); });
  });
}

gw_result_t gw_ibarrier(gw_comm_t comm, gw_request_t* request) {
  return guard("gw_ibarrier", [&]() -> Status {
    GW_RETURN_IF_ERROR(check_comm(comm));
    GW_RETURN_IF_ERROR(check_request(request));
    return submit_call(comm, request, [](gw::Communicator& c) { return c.barrier(); });
  });
}

}  // extern "C"
