// Point-to-point messages. They do not wait behind the ordered queue of collectives: a caller
// adds one to Impl::p2p_new and the progress thread posts it at its next round (idle, between
// work items, or between a running collective's transport rounds), then watches its op. A
// message's work finishes when its op does, not when it is posted, so a send and a receive
// posted back to back on two ranks cannot deadlock however large they are.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "collectives/comm/communicator_impl.hpp"
#include "collectives/common/context.hpp"
#include "gradwire/communicator.hpp"

namespace gw {

using comm_detail::P2pMessage;

namespace {

std::string describe(const P2pMessage& m) {
  return std::string(m.is_recv ? "receive of " : "send of ") + std::to_string(m.bytes) + " bytes " +
         (m.is_recv ? "from" : "to") + " rank " + std::to_string(m.peer) + " with tag " + std::to_string(m.tag);
}

std::shared_ptr<Communicator::Work> finished_work(Status s) {
  auto w = std::make_shared<Communicator::Work>(nullptr);
  w->finish(std::move(s));
  return w;
}

// What a finished op means for its message.
Status outcome(const P2pMessage& m, int my_rank) {
  const transport::Op& op = *m.op;
  if (op.current() == transport::OpState::kFailed) {
    if (m.is_recv && transport::is_truncation(op.status)) {
      return invalid_usage("rank " + std::to_string(m.peer) + " sent more than " + std::to_string(m.bytes) +
                           " bytes with tag " + std::to_string(m.tag) + ", this rank expected " +
                           std::to_string(m.bytes) + " (the message was dropped)");
    }
    return op.status;
  }
  if (m.is_recv && op.bytes != m.bytes) {
    return invalid_usage("rank " + std::to_string(m.peer) + " sent " + std::to_string(op.bytes) + " bytes with tag " +
                         std::to_string(m.tag) + ", rank " + std::to_string(my_rank) + " expected " +
                         std::to_string(m.bytes));
  }
  return Status::ok();
}

}  // namespace

std::shared_ptr<Communicator::Work> Communicator::isend(const void* buf, size_t bytes, int peer, uint32_t tag) {
  // The transport's isend only reads the buffer.
  return post_p2p(const_cast<void*>(buf), bytes, peer, tag, /*is_recv=*/false);
}

std::shared_ptr<Communicator::Work> Communicator::irecv(void* buf, size_t bytes, int peer, uint32_t tag) {
  return post_p2p(buf, bytes, peer, tag, /*is_recv=*/true);
}

// The message is counted in p2p_waiters when it is posted, so drive_p2p_until must run for
// it whatever happens meanwhile (it uncounts it): not through wait(), which skips it once a
// collective's rounds have finished the message and cleared its owner.
Status Communicator::send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  auto w = post_p2p(const_cast<void*>(buf), bytes, peer, tag, /*is_recv=*/false, /*waiter=*/true);
  if (w->waiter_counted) impl_->drive_p2p_until(*w);
  return w->wait();
}

Status Communicator::recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  auto w = post_p2p(buf, bytes, peer, tag, /*is_recv=*/true, /*waiter=*/true);
  if (w->waiter_counted) impl_->drive_p2p_until(*w);
  return w->wait();
}

std::shared_ptr<Communicator::Work> Communicator::post_p2p(void* buf, size_t bytes, int peer, uint32_t tag,
                                                           bool is_recv, bool waiter) {
  if (Status s = comm_detail::check_p2p_args(buf, bytes, peer, size()); !s.is_ok()) return finished_work(s);
  auto m = std::make_unique<P2pMessage>();
  m->is_recv = is_recv;
  m->buf = buf;
  m->bytes = bytes;
  m->peer = peer;
  m->tag = tag;
  m->work = std::make_shared<Work>(nullptr);
  m->work->owner = this;  // a waiter may drive it (Impl::drive_p2p_until)
  m->work->p2p = true;
  auto w = m->work;
  w->waiter_counted = waiter;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->p2p_new.push_back(std::move(m));
    if (waiter) ++impl_->p2p_waiters;  // the idle progress thread leaves it to the caller
  }
  if (!waiter) impl_->cv.notify_all();
  return w;
}

void Communicator::Impl::drive_p2p_until(Work& w) {
  if (!w.waiter_counted) {
    std::lock_guard<std::mutex> lock(mu);
    ++p2p_waiters;  // the idle progress thread leaves the messages to us meanwhile
  }
  // Someone else driving briefly (the progress thread's idle round) is waited out; a
  // collective it runs serves the message between its rounds, so then the waiter sleeps.
  const auto patience = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  while (!w.test(nullptr)) {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping || !queue.empty()) break;  // the progress thread serves it
      busy = running;
      if (!busy) running = true;
    }
    if (busy) {
      if (std::chrono::steady_clock::now() > patience) break;
      std::this_thread::yield();
      continue;
    }
    const Driving here(*this);
    bool moved = tp->progress();
    moved = serve_p2p() || moved;
    if (!moved && !w.test(nullptr)) tp->wait_for_events(transport::Clock::now() + comm_detail::kP2pNap);
  }
  bool left = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    --p2p_waiters;
    w.waiter_counted = false;
    left = !p2p_new.empty() || !p2p_posted.empty();
  }
  if (left) cv.notify_all();
}

Status Communicator::wait_for(Work& work, std::chrono::milliseconds timeout) {
  Status s;
  if (work.wait_for(timeout, &s)) return s;
  return Status(Code::kTimeout,
                "the work has not finished within " + std::to_string(timeout.count()) + " ms (it is still pending)");
}

void Communicator::on_complete(Work& work, std::function<void(const Status&)> fn) {
  if (fn) work.on_complete(std::move(fn));
}

bool Communicator::Impl::serve_p2p() {
  if (serving_p2p) return false;  // a work's callback reached a transport round: not again
  serving_p2p = true;
  bool moved = false;
  std::deque<std::unique_ptr<P2pMessage>> fresh;
  Status broken_now;
  {
    std::lock_guard<std::mutex> lock(mu);
    fresh.swap(p2p_new);
    broken_now = broken;
  }
  const auto now = transport::Clock::now();
  for (auto& m : fresh) {
    moved = true;
    if (!broken_now.is_ok()) {
      m->work->finish(broken_now);
      continue;
    }
    m->op = std::make_unique<transport::Op>();
    m->deadline = now + config.timeout;
    const uint64_t tag = coll::p2p_tag(m->tag);
    const Status posted = m->is_recv ? tp->irecv(m->peer, tag, m->buf, m->bytes, *m->op)
                                     : tp->isend(m->peer, tag, m->buf, m->bytes, *m->op);
    GW_TRACE(kP2p, "p2p: posted %s: %s", describe(*m).c_str(), posted.is_ok() ? "ok" : posted.to_string().c_str());
    // A refused post leaves the op idle (nothing for the transport to own); a failed one is
    // finished: either way the message is over.
    if (!posted.is_ok() && !m->op->finished()) {
      m->work->finish(posted);
      continue;
    }
    p2p_posted.push_back(std::move(m));
  }
  Status timed_out;
  for (size_t i = 0; i < p2p_posted.size();) {
    P2pMessage& m = *p2p_posted[i];
    if (m.op->finished()) {
      moved = true;
      const Status s = outcome(m, tp->rank());
      if (!s.is_ok() && s.code() != Code::kInvalidUsage) {
        // A transport failure (dead peer, abort) is sticky in the transport: the communicator
        // is broken too, so gw_comm_get_async_error says so.
        const Status sticky = tp->error();
        if (!sticky.is_ok()) break_with(sticky);
      }
      GW_TRACE(kP2p, "p2p: %s finished: %s", describe(m).c_str(), s.is_ok() ? "ok" : s.to_string().c_str());
      std::unique_ptr<P2pMessage> done = std::move(p2p_posted[i]);
      p2p_posted[i] = std::move(p2p_posted.back());
      p2p_posted.pop_back();
      done->work->finish(s);
      continue;
    }
    if (timed_out.is_ok() && now >= m.deadline) {
      const double secs = std::chrono::duration<double>(config.timeout).count();
      char t[32];
      std::snprintf(t, sizeof t, "%.3g", secs);
      timed_out = Status(Code::kTimeout, "the " + describe(m) + " did not finish within the timeout (" + t +
                                             " s); the communicator is broken (the transport still owns the buffer)");
    }
    ++i;
  }
  serving_p2p = false;
  if (!timed_out.is_ok()) {
    // UCX still owns the buffer: only aborting the transport takes it back. The abort fails
    // every pending op with this reason; the next round finishes their messages.
    break_with(timed_out);
    moved = true;
  }
  return moved;
}

void Communicator::Impl::fail_p2p(const Status& why) {
  std::deque<std::unique_ptr<P2pMessage>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu);
    fresh.swap(p2p_new);
  }
  for (auto& m : fresh) m->work->finish(why);
  for (auto& m : p2p_posted) {
    m->work->finish(m->op != nullptr && m->op->finished() ? outcome(*m, tp->rank()) : why);
  }
  p2p_posted.clear();
}

void Communicator::Impl::close_p2p() {
  while (tp->progress()) {}
  serve_p2p();
  bool posted = false;
  for (auto& m : p2p_posted) posted = posted || !m->op->finished();
  const Status why(Code::kAborted, "the communicator was destroyed before the message finished");
  if (posted) {
    // The transport owns their buffers until it lets go of them: aborting it fails every
    // pending op and detaches it, so nothing writes a caller's buffer after the destroy.
    break_with(why);
    const auto until = transport::Clock::now() + std::chrono::seconds(1);
    for (;;) {
      tp->progress();
      bool pending = false;
      for (auto& m : p2p_posted) pending = pending || !m->op->finished();
      if (!pending || transport::Clock::now() > until) break;
      tp->wait_for_events(transport::Clock::now() + std::chrono::milliseconds(1));
    }
    for (auto& m : p2p_posted) {
      if (m->op->finished()) continue;
      // Never freed: the transport may still hold its address.
      GW_WARN(kP2p, "p2p: the %s is still pending in the transport at destroy", describe(*m).c_str());
      (void)m->op.release();
    }
  }
  const Status broken_now = broken_status();
  fail_p2p(broken_now.is_ok() ? why : broken_now);
}

}  // namespace gw
