// The communicator half of the C ABI.
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>

#include "collectives/comm_init.hpp"
#include "compressors/c_api_handles.hpp"
#include "compressors/c_api_support.hpp"
#include "compressors/device_memory.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/gradwire.h"
#include "transport/bootstrap/bootstrap.hpp"


struct gw_comm_s {
  std::unique_ptr<gw::Communicator> comm;
};

struct gw_request_s {
  std::shared_ptr<gw::Communicator::Work> work;
};

namespace {

using gw::Status;
using gw::capi::guard;
using gw::capi::null_arg;

static_assert(sizeof(gw_unique_id_t) == gw::bootstrap::kUniqueIdBytes, "unique id sizes differ");

gw::Result<gw::CommConfig> merge_config(const gw_config_t* config) {
  GW_ASSIGN_OR_RETURN(gw::CommConfig c, gw::CommConfig::from_env());
  if (config == nullptr) return c;
  if (config->magic != GW_CONFIG_MAGIC) return gw::invalid_argument("config was not set up with GW_CONFIG_INITIALIZER (bad magic)");
  if (config->size < sizeof(gw_config_t) || config->size > 4096) {
    return gw::invalid_argument("config->size " + std::to_string(config->size) + " is not sizeof(gw_config_t)");
  }
  if (config->timeout_s < 0 || config->timeout_s > 1e7) return gw::invalid_argument("config->timeout_s is out of range");
  if (config->timeout_s > 0) c.timeout = std::chrono::milliseconds(static_cast<int64_t>(config->timeout_s * 1000.0));
  if (config->chunk_bytes > 0) {
    if (config->chunk_bytes < 4096) return gw::invalid_argument("config->chunk_bytes is below 4096");
    c.chunk_bytes = config->chunk_bytes;
  }
  if (config->dense_threshold_bytes >= 0) c.dense_threshold_bytes = static_cast<size_t>(config->dense_threshold_bytes);
  return c;
}

Status check_comm(gw_comm_t comm) { return comm == nullptr ? null_arg("comm") : Status::ok(); }

Status check_enum_args(gw_dtype_t dtype, gw_red_op_t op, gw_algo_t algo) {
  if (!gw::dtype_valid(static_cast<int>(dtype))) return gw::invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  if (op != GW_SUM && op != GW_AVG) return gw::invalid_argument("op " + std::to_string(static_cast<int>(op)) + " is not a gw_red_op_t");
  if (static_cast<int>(algo) < 0 || algo > GW_ALGO_SPARSE_ALLGATHER) {
    return gw::invalid_argument("algo " + std::to_string(static_cast<int>(algo)) + " is not a gw_algo_t");
  }
  return Status::ok();
}

// The message collectives take host buffers: a device pointer would be read by the CPU, so
// it is refused with a message instead.
Status check_host_buffers(std::initializer_list<const void*> bufs) {
  for (const void* b : bufs) {
    if (gw::is_device_memory(b)) {
      return gw::unsupported("a buffer is CUDA device memory; the message collectives take host buffers (encode on "
                             "the GPU with gw_encode_device and copy the message, or use gw_allreduce on the gradient)");
    }
  }
  return Status::ok();
}

// The device collectives keep their residual on the device.
Status check_device_ef(gw_ef_state_t ef) {
  if (ef != nullptr && !ef->device) {
    return gw::invalid_argument("ef is a host state (gw_ef_state_create); device collectives take a device state "
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

// Runs an all-reduce where its buffers are (device calls ordered on stream).
Status allreduce_where(gw::Communicator& cm, bool device, const void* sendbuf, void* recvbuf, size_t count,
                       gw_dtype_t dtype, gw_red_op_t op, gw::Codec* codec, gw_ef_state_t ef, gw_algo_t algo,
                       void* stream) {
  const auto dt = static_cast<gw::DType>(dtype);
  const auto ro = static_cast<gw::ReduceOp>(op);
  const auto al = static_cast<gw::Algo>(algo);
  if (device) {
    return cm.allreduce_device(sendbuf, recvbuf, count, dt, ro, codec, ef != nullptr ? ef->device.get() : nullptr, al,
                               stream);
  }
  return cm.allreduce(sendbuf, recvbuf, count, dt, ro, codec, ef != nullptr ? &ef->ef : nullptr, al);
}

// gw_iallreduce and gw_iallreduce_device: the request runs allreduce_where on the progress thread.
Status submit_allreduce(gw_comm_t comm, bool device, const void* sendbuf, void* recvbuf, size_t count,
                        gw_dtype_t dtype, gw_red_op_t op, gw_codec_t codec, gw_ef_state_t ef, gw_algo_t algo,
                        void* stream, gw_request_t* request) {
  // Checked here: on the progress thread a CUDA error would break the communicator.
  if (device) GW_RETURN_IF_ERROR(comm->comm->device_ready());
  gw::Codec* c = codec_of(codec);
  auto work = comm->comm->submit([=](gw::Communicator& cm) {
    return allreduce_where(cm, device, sendbuf, recvbuf, count, dtype, op, c, ef, algo, stream);
  });
  *request = new gw_request_s{std::move(work)};
  return Status::ok();
}

}  // namespace

extern "C" {

gw_result_t gw_get_unique_id(gw_unique_id_t* id) {
  return guard("gw_get_unique_id", [&]() -> Status {
    if (id == nullptr) return null_arg("id");
    gw::bootstrap::RootOptions options;
    GW_ASSIGN_OR_RETURN(gw::CommConfig cfg, gw::CommConfig::from_env());
    options.timeout = cfg.timeout;
    GW_ASSIGN_OR_RETURN(gw::bootstrap::UniqueId uid, gw::bootstrap::create_unique_id(options));
    std::memcpy(id->internal, uid.bytes, sizeof uid.bytes);
    return Status::ok();
  });
}

gw_result_t gw_comm_init_rank(gw_comm_t* comm, int nranks, gw_unique_id_t id, int rank, const gw_config_t* config) {
  return guard("gw_comm_init_rank", [&]() -> Status {
    if (comm == nullptr) return null_arg("comm");
    *comm = nullptr;
    GW_ASSIGN_OR_RETURN(gw::CommConfig cfg, merge_config(config));
    gw::bootstrap::UniqueId uid;
    std::memcpy(uid.bytes, id.internal, sizeof uid.bytes);
    GW_RETURN_IF_ERROR(gw::bootstrap::validate_unique_id(uid));
    auto exchange = [&](const std::string& blob) {
      return gw::bootstrap::rendezvous(uid, rank, nranks, blob, cfg.timeout);
    };
    auto made = gw::coll::init_communicator(rank, nranks, exchange, cfg);
    if (!made.is_ok()) return made.status();
    *comm = new gw_comm_s{std::move(made).value()};
    return Status::ok();
  });
}

gw_result_t gw_comm_init_from_env(gw_comm_t* comm, const gw_config_t* config) {
  return guard("gw_comm_init_from_env", [&]() -> Status {
    if (comm == nullptr) return null_arg("comm");
    *comm = nullptr;
    GW_ASSIGN_OR_RETURN(gw::CommConfig cfg, merge_config(config));
    GW_ASSIGN_OR_RETURN(gw::bootstrap::LaunchEnv env, gw::bootstrap::read_launch_env());
    auto exchange = [&](const std::string& blob) { return gw::bootstrap::rendezvous_from_env(env, blob, cfg.timeout); };
    auto made = gw::coll::init_communicator(env.rank, env.size, exchange, cfg);
    if (!made.is_ok()) return made.status();
    *comm = new gw_comm_s{std::move(made).value()};
    return Status::ok();
  });
}

gw_result_t gw_comm_destroy(gw_comm_t comm) {
  return guard("gw_comm_destroy", [&]() -> Status {
    delete comm;
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
    *algo = static_cast<gw_algo_t>(comm->comm->choose_algo(count, static_cast<gw::DType>(dtype),
                                                           codec != nullptr ? codec->codec.get() : nullptr, gw::Algo::kAuto));
    return Status::ok();
  });
}

gw_result_t gw_sparse_allgather(gw_comm_t comm, const void* msg, size_t len, void* recvbuf, size_t capacity, size_t* lengths) {
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

}  // extern "C"
