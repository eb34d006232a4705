// A stand-in for a node's NCCL communicator between forked test processes, so the
// hierarchical all-reduce's NCCL legs run where there is no GPU: a shared-memory file per
// node with one slot per local rank and a barrier counter. In each collective every rank
// writes its input to its slot, waits for all, reads what it needs, and waits for all again
// (nobody overwrites a slot another still reads). Float32 sums only, in local rank order;
// a peer missing for 30 s is an error, not a hang.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "tests/host_device_backend.hpp"

namespace gw::test {

class ShmNodeNccl final : public NodeCollectives {
 public:
  // Every local rank opens path (one per node and test run) before any of them uses it.
  static std::shared_ptr<ShmNodeNccl> open(const std::string& path, int size, int rank, size_t slot_bytes) {
    const size_t total = kHeader + static_cast<size_t>(size) * slot_bytes;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0) return nullptr;
    if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
      ::close(fd);
      return nullptr;
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return nullptr;
    return std::shared_ptr<ShmNodeNccl>(new ShmNodeNccl(static_cast<uint8_t*>(p), total, size, rank, slot_bytes));
  }
  ~ShmNodeNccl() override { munmap(base_, total_); }

  int size() const override { return size_; }
  Status error() const override { return error_; }

  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) override {
    const size_t bytes = recv_count * sizeof(float);
    const bool ok =
        dtype == DType::kFloat32 && op == ReduceOp::kSum && bytes * static_cast<size_t>(size_) <= slot_bytes_;
    if (!ok) fail(invalid_argument("shm node NCCL: float32 sums that fit a slot only"));
    if (ok && bytes > 0) std::memcpy(slot(rank_), send, bytes * static_cast<size_t>(size_));
    barrier();
    if (ok) {
      auto* out = static_cast<float*>(recv);
      const size_t at = static_cast<size_t>(rank_) * recv_count;
      for (size_t i = 0; i < recv_count; ++i) {
        float v = reinterpret_cast<const float*>(slot(0))[at + i];
        for (int r = 1; r < size_; ++r) v += reinterpret_cast<const float*>(slot(r))[at + i];
        out[i] = v;
      }
    }
    barrier();
  }

  void allgather(const void* send, void* recv, size_t bytes) override {
    const bool ok = bytes <= slot_bytes_;
    if (!ok) fail(invalid_argument("shm node NCCL: all-gather block larger than a slot"));
    if (ok && bytes > 0) std::memcpy(slot(rank_), send, bytes);
    barrier();
    for (int r = 0; ok && r < size_; ++r) {
      if (bytes > 0) std::memcpy(static_cast<uint8_t*>(recv) + static_cast<size_t>(r) * bytes, slot(r), bytes);
    }
    barrier();
  }

 private:
  static constexpr size_t kHeader = 64;
  ShmNodeNccl(uint8_t* base, size_t total, int size, int rank, size_t slot_bytes)
      : base_(base), total_(total), size_(size), rank_(rank), slot_bytes_(slot_bytes) {}
  uint8_t* slot(int r) const { return base_ + kHeader + static_cast<size_t>(r) * slot_bytes_; }
  void fail(Status s) {
    if (error_.is_ok()) error_ = std::move(s);
  }
  void barrier() {
    auto* arrived = reinterpret_cast<std::atomic<uint64_t>*>(base_);  // zero-filled file: 0
    const uint64_t target = ++generation_ * static_cast<uint64_t>(size_);
    arrived->fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (arrived->load() < target) {
      if (std::chrono::steady_clock::now() > give_up) {
        fail(Status(Code::kTimeout, "shm node NCCL: a local peer never arrived"));
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  uint8_t* base_;
  size_t total_;
  int size_;
  int rank_;
  size_t slot_bytes_;
  uint64_t generation_ = 0;
  Status error_;
};

}  // namespace gw::test
