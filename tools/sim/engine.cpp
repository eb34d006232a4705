#include "tools/sim/engine.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

namespace gw::sim {
namespace {

struct Message {
  int src;
  double complete;
};

struct Entity {
  uint64_t pc = 0;
  double t = 0;
  int waiting_on = -1;  // the peer it waits for, -1: not waiting
  bool queued = false;
  bool ended = false;
  double spun = 0;             // seconds spent polling for the current receive
  bool slept = false;          // stopped polling: pays a switch when woken
  std::vector<Message> inbox;  // in the order sent; taken oldest first per sender
};

// How long a rank polls for a message before it sleeps (the UCX transport's spin, kSpin in
// ucx_transport.cpp); only modelled when ranks share cores.
constexpr double kSpinS = 30e-6;
// Messages up to this size (call descriptors) use no port time of their own (kSend).
constexpr double kSmallMessageBytes = 512;

class Engine {
 public:
  Engine(const Schedule& s, const coll::CostModel& m, const Limits& l)
      : s_(s), m_(m), limits_(l), p_(s.ranks()), lanes_(s.lanes()), oversubscribed_(m.cores > 0 && p_ > m.cores) {
    entities_.resize(static_cast<size_t>(p_) * static_cast<size_t>(lanes_));
    out_free_.assign(static_cast<size_t>(p_), 0.0);
    in_free_.assign(static_cast<size_t>(p_), 0.0);
    core_free_.assign(static_cast<size_t>(p_), 0.0);
    finish_.assign(static_cast<size_t>(p_), 0.0);
    for (int c = 0; c < m_.cores; ++c) pool_.push(0.0);
  }

  Outcome run() {
    for (size_t e = 0; e < entities_.size(); ++e) enqueue(static_cast<uint32_t>(e), 0.0);
    while (!heap_.empty() && out_.error.empty()) {
      const auto [t, e] = heap_.top();
      heap_.pop();
      Entity& x = entities_[e];
      x.queued = false;
      x.t = std::max(x.t, t);
      step(e);
    }
    if (out_.error.empty()) {
      for (size_t e = 0; e < entities_.size(); ++e) {
        if (!entities_[e].ended) {
          out_.deadlock = true;
          out_.error = "rank " + std::to_string(e / static_cast<size_t>(lanes_)) + " lane " +
                       std::to_string(e % static_cast<size_t>(lanes_)) + " waits for rank " +
                       std::to_string(entities_[e].waiting_on) + " at operation " + std::to_string(entities_[e].pc);
          break;
        }
      }
    }
    for (double f : finish_) out_.seconds = std::max(out_.seconds, f);
    return out_;
  }

 private:
  void enqueue(uint32_t e, double t) {
    Entity& x = entities_[e];
    if (x.queued || x.ended) return;
    x.queued = true;
    heap_.emplace(t, e);
  }

  double cpu(int rank, double t, double d) {
    if (m_.cores <= 0) {
      double& f = core_free_[static_cast<size_t>(rank)];
      const double start = std::max(t, f);
      f = start + d;
      return f;
    }
    const double free = pool_.top();
    pool_.pop();
    const double end = std::max(t, free) + d;
    pool_.push(end);
    return end;
  }

  // Runs entity e from its time until it blocks, ends, or is later than the next in line.
  void step(uint32_t e) {
    Entity& x = entities_[e];
    const int rank = static_cast<int>(e / static_cast<uint32_t>(lanes_));
    const int lane = static_cast<int>(e % static_cast<uint32_t>(lanes_));
    for (;;) {
      const Op op = s_.op(rank, lane, x.pc);
      ++out_.events;
      switch (op.kind) {
        case Op::kEnd:
          x.ended = true;
          finish_[static_cast<size_t>(rank)] = std::max(finish_[static_cast<size_t>(rank)], x.t);
          return;
        case Op::kSkip: ++x.pc; continue;
        case Op::kWork: x.t = cpu(rank, x.t, op.amount); break;
        case Op::kSend: {
          x.t = cpu(rank, x.t, m_.message_cpu_s);
          const double wire = op.amount / m_.link_bytes_per_s;
          double complete = x.t + m_.latency_s + wire;
          // A message of a packet or two (a call descriptor) interleaves with bulk transfers
          // on both ports instead of queueing behind them (or holding a port, reserved in
          // the order sends are issued, against bulk that would arrive before it).
          if (op.amount > kSmallMessageBytes) {
            double& out = out_free_[static_cast<size_t>(rank)];
            const double start = std::max(x.t, out);
            out = start + wire;
            double& in = in_free_[static_cast<size_t>(op.peer)];
            complete = std::max(start + m_.latency_s, in) + wire;
            in = complete;
          }
          ++out_.messages;
          out_.bytes += op.amount;
          deliver(static_cast<uint32_t>(op.peer * lanes_ + (op.to_lane >= 0 ? op.to_lane : lane)), rank, complete);
          if (!out_.error.empty()) return;
          break;
        }
        case Op::kRecv: {
          auto& box = x.inbox;
          auto it = std::find_if(box.begin(), box.end(), [&](const Message& m) { return m.src == op.peer; });
          if (it == box.end()) {
            if (oversubscribed_ && x.spun < kSpinS) {  // polls, yielding its core to the others
              x.t = cpu(rank, x.t, m_.switch_s);
              x.spun += m_.switch_s;
              enqueue(e, x.t);
              return;
            }
            x.waiting_on = op.peer;
            x.slept = oversubscribed_;
            return;  // deliver() wakes it
          }
          x.waiting_on = -1;
          x.spun = 0;
          // A message completing later: wait for its time in line first, so that the core
          // this receive takes is not claimed ahead of work that comes earlier.
          if (it->complete > x.t) {
            x.t = it->complete;
            if (!heap_.empty() && x.t > heap_.top().first) {
              enqueue(e, x.t);
              return;
            }
          }
          if (x.slept) {  // woken: the core switches back to it
            x.slept = false;
            x.t = cpu(rank, x.t, m_.switch_s);
          }
          box.erase(it);
          --in_flight_;
          x.t = cpu(rank, x.t, m_.message_cpu_s);
          break;
        }
      }
      ++x.pc;
      // A send moves the rank's clock by its CPU time only: it runs on without yielding (a
      // port may then take its message up to message_cpu_s ahead of its turn).
      if (op.kind != Op::kSend && !heap_.empty() && x.t > heap_.top().first) {
        enqueue(e, x.t);
        return;
      }
    }
  }

  void deliver(uint32_t dst, int src, double complete) {
    Entity& d = entities_[dst];
    d.inbox.push_back(Message{src, complete});
    if (++in_flight_ > limits_.max_in_flight) {
      out_.error = "more than " + std::to_string(limits_.max_in_flight) +
                   " messages in flight at once (the schedule sends to every rank at once)";
      return;
    }
    if (d.waiting_on == src) {
      d.waiting_on = -1;
      enqueue(dst, std::max(d.t, complete));
    }
  }

  const Schedule& s_;
  const coll::CostModel& m_;
  Limits limits_;
  int p_;
  int lanes_;
  bool oversubscribed_;
  std::vector<Entity> entities_;
  std::vector<double> out_free_, in_free_, core_free_, finish_;
  std::priority_queue<double, std::vector<double>, std::greater<>> pool_;
  std::priority_queue<std::pair<double, uint32_t>, std::vector<std::pair<double, uint32_t>>, std::greater<>> heap_;
  uint64_t in_flight_ = 0;
  Outcome out_;
};

}  // namespace

Outcome simulate(const Schedule& s, const coll::CostModel& model, const Limits& limits) {
  if (s.ranks() < 1 || s.lanes() < 1) return Outcome{};
  return Engine(s, model, limits).run();
}

}  // namespace gw::sim
