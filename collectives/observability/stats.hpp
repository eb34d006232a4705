// Per-communicator statistics for perf tools (gw_comm_get_stats): bytes this rank handed to
// the transport, and the time its collectives spent encoding, decoding and in total. Written
// on the progress thread only, and read there too (the communicator runs the read as work),
// so nothing here is atomic. Cheap: a counter per send and two clock reads per encode or
// decode call (one per chunk, not per element).
#pragma once

#include <chrono>
#include <cstdint>

#include "collectives/observability/timeline.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"
#include "transport/transport.hpp"

namespace gw::coll {

using CommStats = gw::CommStats;  // declared in the public communicator.hpp

// Adds the time of a scope to a counter (no-op without one) and, with a name, records it as
// a span of the timeline being recorded (GW_TIMELINE).
// With hidden and tp, the time also goes to *hidden when tp still held sends of this rank
// (posted, not yet handed to the kernel or the wire) both when the scope began and when it
// ended: compute the link did not wait for. A lower bound of the overlap (bytes already in
// the kernel's socket buffer count as sent).
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* acc, const char* span = nullptr, double* hidden = nullptr,
                         const transport::Transport* tp = nullptr)
      : acc_(acc), span_(span != nullptr ? Timeline::current() : nullptr), name_(span), hidden_(hidden), tp_(tp) {
    if (acc_ != nullptr || span_ != nullptr) t0_ = std::chrono::steady_clock::now();
    if (hidden_ != nullptr && tp_ != nullptr) sending_at_start_ = tp_->sends_in_flight();
  }
  ~ScopedSeconds() {
    if (acc_ == nullptr && span_ == nullptr) return;
    const auto t1 = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0_).count();
    if (acc_ != nullptr) *acc_ += dt;
    if (sending_at_start_ && tp_->sends_in_flight()) *hidden_ += dt;
    if (span_ != nullptr) span_->span(name_, name_, t0_, t1);
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* acc_;
  Timeline* span_;
  const char* name_;
  double* hidden_;
  const transport::Transport* tp_;
  bool sending_at_start_ = false;
  std::chrono::steady_clock::time_point t0_;
};

// A transport that counts what is sent through it and forwards everything to the real one.
class CountingTransport final : public transport::ForwardingTransport {
 public:
  CountingTransport(transport::Transport& inner, CommStats& stats) : ForwardingTransport(inner), stats_(stats) {}
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, transport::Op& op) override {
    stats_.bytes_sent += len;
    ++stats_.messages_sent;
    return inner_.isend(peer, tag, buf, len, op);
  }
  Status isend_with_head(int peer, uint64_t tag, const void* head, size_t head_len, const void* buf, size_t len,
                         transport::Op& op) override {
    // The head is a call descriptor (the dense ring's first message), which the statistics
    // leave out as they do the check's own messages: a message with nothing behind it is not
    // counted either.
    stats_.bytes_sent += len;
    if (len > 0) ++stats_.messages_sent;
    return inner_.isend_with_head(peer, tag, head, head_len, buf, len, op);
  }

 private:
  CommStats& stats_;
};

}  // namespace gw::coll
