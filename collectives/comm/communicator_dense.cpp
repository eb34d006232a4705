// The dense, NCCL-shaped collectives of the communicator (host memory): reduce,
// reduce-scatter, variable all-gather, all-to-all (fixed and variable), gather and scatter.
// Arguments are checked here, before anything is queued: an argument error leaves every rank
// where it was and the communicator usable. Size arrays are copied before the call is queued.
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/comm/communicator_impl.hpp"

namespace gw {

using namespace comm_detail;

namespace {

CallDescriptor reduction_call(CallKind kind, size_t count, DType dtype, ReduceOp op, int root) {
  CallDescriptor d = call(kind, count, root);
  d.dtype = static_cast<uint8_t>(dtype);
  d.op = static_cast<uint8_t>(op);
  return d;
}

Status check_root(int root, int size) {
  if (root < 0 || root >= size) {
    return invalid_argument("root " + std::to_string(root) + " is out of range (the communicator has " +
                            std::to_string(size) + " ranks)");
  }
  return Status::ok();
}

Status check_reduction(DType dtype, ReduceOp op) {
  if (!collective_dtype_valid(static_cast<int>(dtype))) {
    return invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::kMax)) {
    return invalid_argument("op " + std::to_string(static_cast<int>(op)) + " is not a gw_red_op_t");
  }
  return Status::ok();
}

Status not_null(const void* p, bool needed, const char* name) {
  return needed && p == nullptr ? invalid_argument(std::string(name) + " is null") : Status::ok();
}

// Copies a size array of p entries and lays out its blocks: displs given, or packed in rank
// order. Refuses sizes and ends no buffer can have.
Status layout(const char* what, const size_t* bytes, const size_t* displs, int p, std::vector<uint64_t>* len,
              std::vector<uint64_t>* off, uint64_t* total) {
  if (bytes == nullptr) return invalid_argument(std::string(what) + " is null");
  len->assign(bytes, bytes + p);
  off->resize(static_cast<size_t>(p));
  uint64_t end = 0, packed = 0;
  for (int r = 0; r < p; ++r) {
    const std::string name = std::string(what) + "[" + std::to_string(r) + "]";
    GW_RETURN_IF_ERROR(check_size(name.c_str(), (*len)[r], 1, "bytes"));
    (*off)[r] = displs != nullptr ? displs[r] : packed;
    if (__builtin_add_overflow(packed, (*len)[r], &packed)) {  // 2^16 ranks of 2^48 bytes could
      return invalid_argument(std::string(what) + " add up to more than 2^64 bytes");
    }
    uint64_t block_end = 0;
    if (__builtin_add_overflow((*off)[r], (*len)[r], &block_end) || block_end > kMaxBufferBytes) {
      return invalid_argument(name + " at displacement " + std::to_string((*off)[r]) + " ends beyond any buffer");
    }
    end = block_end > end ? block_end : end;
  }
  *total = end;
  return Status::ok();
}

}  // namespace

Status Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root) {
  GW_RETURN_IF_ERROR(check_reduction(dtype, op));
  GW_RETURN_IF_ERROR(check_root(root, size()));
  GW_RETURN_IF_ERROR(check_size("count", count, dtype_size(dtype), dtype_name(dtype)));
  GW_RETURN_IF_ERROR(not_null(send, count > 0, "sendbuf"));
  GW_RETURN_IF_ERROR(not_null(recv, count > 0 && rank() == root, "recvbuf"));
  return run([=]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::reduce(c, send, recv, count, dtype, op, root); },
                             reduction_call(CallKind::kReduce, count, dtype, op, root));
  });
}

Status Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  GW_RETURN_IF_ERROR(check_reduction(dtype, op));
  GW_RETURN_IF_ERROR(check_size("sendbuf (nranks * recvcount elements)", recv_count,
                                dtype_size(dtype) * static_cast<uint64_t>(size()), "elements per rank"));
  GW_RETURN_IF_ERROR(not_null(send, recv_count > 0, "sendbuf"));
  GW_RETURN_IF_ERROR(not_null(recv, recv_count > 0, "recvbuf"));
  return run([=]() -> Status {
    return impl_->collective(
        [&](coll::Context& c) { return coll::reduce_scatter(c, send, recv, recv_count, dtype, op); },
        reduction_call(CallKind::kReduceScatter, recv_count, dtype, op, -1));
  });
}

Status Communicator::allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                                const size_t* displs) {
  std::vector<uint64_t> len, off;
  uint64_t end = 0;
  GW_RETURN_IF_ERROR(layout("recvbytes", recv_bytes, displs, size(), &len, &off, &end));
  if (len[rank()] != send_bytes) {
    return invalid_argument("sendbytes is " + std::to_string(send_bytes) + " but recvbytes[" + std::to_string(rank()) +
                            "] (this rank's block) is " + std::to_string(len[rank()]));
  }
  GW_RETURN_IF_ERROR(not_null(send, send_bytes > 0, "sendbuf"));
  GW_RETURN_IF_ERROR(not_null(recv, end > 0, "recvbuf"));
  uint64_t total = 0;
  for (uint64_t l : len) total += l;
  CallDescriptor d = call(CallKind::kAllgatherv, total);
  d.sizes = coll::size_digest(len.data(), len.size());
  return run([=, len = std::move(len), off = std::move(off)]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::allgatherv(c, send, recv, off.data(), len.data()); },
                             d);
  });
}

Status Communicator::alltoall(const void* send, void* recv, size_t bytes) {
  GW_RETURN_IF_ERROR(check_size("sendbuf (nranks blocks)", bytes, static_cast<uint64_t>(size()), "bytes per rank"));
  GW_RETURN_IF_ERROR(not_null(send, bytes > 0, "sendbuf"));
  GW_RETURN_IF_ERROR(not_null(recv, bytes > 0, "recvbuf"));
  return run([=]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::alltoall(c, send, recv, bytes); },
                             call(CallKind::kAlltoall, bytes));
  });
}

Status Communicator::alltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                               const size_t* recv_bytes, const size_t* recv_displs) {
  std::vector<uint64_t> slen, soff, rlen, roff;
  uint64_t send_end = 0, recv_end = 0;
  GW_RETURN_IF_ERROR(layout("sendbytes", send_bytes, send_displs, size(), &slen, &soff, &send_end));
  GW_RETURN_IF_ERROR(layout("recvbytes", recv_bytes, recv_displs, size(), &rlen, &roff, &recv_end));
  GW_RETURN_IF_ERROR(not_null(send, send_end > 0, "sendbuf"));
  GW_RETURN_IF_ERROR(not_null(recv, recv_end > 0, "recvbuf"));
  return run(
      [=, slen = std::move(slen), soff = std::move(soff), rlen = std::move(rlen), roff = std::move(roff)]() -> Status {
        return impl_->collective(
            [&](coll::Context& c) {
              return coll::alltoallv(c, send, slen.data(), soff.data(), recv, rlen.data(), roff.data());
            },
            call(CallKind::kAlltoallv));
      });
}

Status Communicator::gather(const void* send, void* recv, size_t bytes, int root) {
  GW_RETURN_IF_ERROR(check_root(root, size()));
  GW_RETURN_IF_ERROR(check_size("recvbuf (nranks blocks)", bytes, static_cast<uint64_t>(size()), "bytes per rank"));
  GW_RETURN_IF_ERROR(not_null(send, bytes > 0, "sendbuf"));
  GW_RETURN_IF_ERROR(not_null(recv, bytes > 0 && rank() == root, "recvbuf"));
  return run([=]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::gather(c, send, recv, bytes, root); },
                             call(CallKind::kGather, bytes, root));
  });
}

Status Communicator::scatter(const void* send, void* recv, size_t bytes, int root) {
  GW_RETURN_IF_ERROR(check_root(root, size()));
  GW_RETURN_IF_ERROR(check_size("sendbuf (nranks blocks)", bytes, static_cast<uint64_t>(size()), "bytes per rank"));
  GW_RETURN_IF_ERROR(not_null(send, bytes > 0 && rank() == root, "sendbuf"));
  GW_RETURN_IF_ERROR(not_null(recv, bytes > 0, "recvbuf"));
  return run([=]() -> Status {
    return impl_->collective([&](coll::Context& c) { return coll::scatter(c, send, recv, bytes, root); },
                             call(CallKind::kScatter, bytes, root));
  });
}

}  // namespace gw
