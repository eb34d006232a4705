// The survivors' agreement (transport/recovery/agreement.hpp): a discrete-event network
// simulator runs thousands of seeded scenarios (crashes mid-step with partial delivery,
// frozen ranks, late joiners, differing views of who is dead at the start) and checks
// termination, agreement, membership and validity; then every field of the wire format is
// corrupted in turn, and random bytes are thrown at it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "transport/recovery/agreement.hpp"

namespace gw::transport {
namespace {

using namespace std::chrono_literals;
using Dur = Clock::duration;
using Outcome = Agreement::Outcome;

constexpr uint32_t kEpoch = 3;
constexpr uint8_t kState = 1, kCollect = 2, kDecide = 3, kDecided = 4, kExcluded = 5;

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kRunning: return "running";
    case Outcome::kDecided: return "decided";
    case Outcome::kExcluded: return "excluded";
  }
  return "?";
}

std::string ranks_text(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "}";
}

// ---- The wire format, written out here from the header's description --------------------

struct Wire {
  uint8_t kind = kState;
  uint32_t epoch = kEpoch;
  uint32_t round = 0;
  uint32_t size = 0;
  std::vector<int> suspects;
  std::vector<int> set;
};

std::vector<uint8_t> encode(const Wire& w, uint32_t bitmap_ranks) {
  const size_t nb = (bitmap_ranks + 7) / 8;
  std::vector<uint8_t> b(20 + 2 * nb, 0);
  std::memcpy(b.data(), "GWAG", 4);
  b[4] = 1;
  b[5] = w.kind;
  for (int i = 0; i < 4; ++i) {
    b[8 + i] = static_cast<uint8_t>(w.epoch >> (8 * i));
    b[12 + i] = static_cast<uint8_t>(w.round >> (8 * i));
    b[16 + i] = static_cast<uint8_t>(w.size >> (8 * i));
  }
  for (int r : w.suspects) b[20 + r / 8] = static_cast<uint8_t>(b[20 + r / 8] | (1 << (r % 8)));
  for (int r : w.set) b[20 + nb + r / 8] = static_cast<uint8_t>(b[20 + nb + r / 8] | (1 << (r % 8)));
  return b;
}
std::vector<uint8_t> encode(const Wire& w) { return encode(w, w.size); }

struct Decoded {
  uint8_t kind = 0;
  uint32_t round = 0;
  std::vector<int> suspects;
  std::vector<int> set;
};

// Decodes a message the agreement sent (the test trusts these: they are checked elsewhere).
Decoded decode(const std::vector<uint8_t>& b, int size) {
  Decoded d;
  const size_t nb = (static_cast<size_t>(size) + 7) / 8;
  if (b.size() != 20 + 2 * nb) return d;
  d.kind = b[5];
  d.round = static_cast<uint32_t>(b[12] | (b[13] << 8) | (b[14] << 16) | (static_cast<uint32_t>(b[15]) << 24));
  for (int r = 0; r < size; ++r) {
    if ((b[20 + r / 8] >> (r % 8)) & 1) d.suspects.push_back(r);
    if ((b[20 + nb + r / 8] >> (r % 8)) & 1) d.set.push_back(r);
  }
  return d;
}

// ---- The simulator -------------------------------------------------------------------------

struct Freeze {
  int rank;
  Dur at;      // after the start of the run
  Dur length;  // Dur::max(): forever
};

struct Scenario {
  int size = 1;
  Dur suspect_after = 100ms;
  Dur min_delay = 100us;
  Dur max_delay = 5ms;
  Dur dead_delay_max = 10ms;            // the transport's on_dead after a crash
  std::vector<Dur> start;               // when each rank constructs its agreement
  std::vector<char> pre_dead;           // dead before the start
  std::vector<std::vector<bool>> view;  // view[r][k]: r knows at the start that k is dead
  std::vector<char> pre_dead_reported;  // whether on_dead(k) reaches ranks that did not know
  std::vector<int> crash_step;          // crash after this many events (0: construction); -1 never
  std::vector<char> crash_on_decide;    // crash at the step where it decides
  std::vector<Dur> freeze_on_decide;    // freeze (this long) right after it decides
  std::vector<Freeze> freezes;
  bool false_suspicion_possible = false;  // freezes, slow messages or late joiners
  std::string name;
};

enum class EvKind { kStart, kMsg, kDead, kFreeze, kResume, kTick };

struct Ev {
  Clock::time_point t;
  uint64_t seq = 0;
  EvKind kind = EvKind::kMsg;
  int to = -1;
  int from = -1;
  Dur length{};
  std::vector<uint8_t> bytes;
};

struct EvLater {
  bool operator()(const Ev& a, const Ev& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
};

struct Totals {
  size_t scenarios = 0;
  size_t messages = 0;
  size_t flips = 0;          // ranks that held kDecided and then turned kExcluded
  size_t excluded_live = 0;  // live ranks that ended kExcluded
  size_t decided_live = 0;
  size_t crashes = 0;
};

class Sim {
 public:
  Sim(Scenario sc, uint64_t seed, bool trace = false) : sc_(std::move(sc)), rng_(seed), trace_(trace) {
    ranks_.resize(sc_.size);
    due_at_.assign(sc_.size, Clock::time_point::max());
  }

  // Runs to quiescence and checks the properties; returns the first violation, or "".
  std::string run(Totals& totals);
  const std::string& trace() const { return log_; }

 private:
  struct Rank {
    std::unique_ptr<Agreement> ag;
    bool started = false;
    bool crashed = false;
    bool frozen = false;
    bool frozen_forever = false;
    std::vector<Ev> backlog;
    int steps = 0;
    Outcome last = Outcome::kRunning;
    std::vector<int> decided_members;
    bool ever_excluded = false;
    Clock::time_point terminal_at = Clock::time_point::max();
  };

  Dur uniform(Dur lo, Dur hi) {
    std::uniform_int_distribution<int64_t> d(lo.count(), hi.count());
    return Dur(d(rng_));
  }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  void push(Ev ev) {
    ev.seq = seq_++;
    q_.push(std::move(ev));
  }
  void fail(const std::string& why) {
    if (failure_.empty()) failure_ = sc_.name + ": " + why;
  }
  void note(const std::string& s) {
    if (log_.size() < 400000) log_ += std::to_string((now_ - t0_).count() / 1000) + "us " + s + "\n";
  }
  void dispatch(Ev& ev);
  void refresh(int r);
  void apply(int r, const Ev& ev);
  void drain(int r);

  Scenario sc_;
  std::mt19937_64 rng_;
  bool trace_;
  std::string log_;
  std::vector<Rank> ranks_;
  std::priority_queue<Ev, std::vector<Ev>, EvLater> q_;
  std::set<std::pair<Clock::time_point, int>> due_;  // the deadlines of the ranks that run
  std::vector<Clock::time_point> due_at_;
  uint64_t seq_ = 0;
  const Clock::time_point t0_ = Clock::time_point() + std::chrono::hours(1000);
  Clock::time_point now_ = t0_;
  Clock::time_point last_fault_ = t0_;
  std::string failure_;
  size_t messages_ = 0;
  size_t flips_ = 0;
};

void Sim::apply(int r, const Ev& ev) {
  Rank& s = ranks_[r];
  const Outcome before = s.ag ? s.ag->outcome() : Outcome::kRunning;
  uint8_t msg_kind = 0;
  switch (ev.kind) {
    case EvKind::kStart:
      s.ag = std::make_unique<Agreement>(r, sc_.size, kEpoch, sc_.view[r], sc_.suspect_after, now_);
      s.started = true;
      if (trace_) note("r" + std::to_string(r) + " start");
      break;
    case EvKind::kMsg:
      msg_kind = ev.bytes.size() > 5 ? ev.bytes[5] : 0;
      if (trace_)
        note("r" + std::to_string(r) + " <- r" + std::to_string(ev.from) + " kind " + std::to_string(msg_kind));
      s.ag->on_message(ev.from, ev.bytes.data(), ev.bytes.size(), now_);
      break;
    case EvKind::kDead:
      if (trace_) note("r" + std::to_string(r) + " on_dead(" + std::to_string(ev.from) + ")");
      s.ag->on_dead(ev.from, now_);
      break;
    case EvKind::kTick:
      if (trace_) note("r" + std::to_string(r) + " tick");
      s.ag->on_tick(now_);
      break;
    default: return;
  }
  std::vector<Agreement::Send> sends = s.ag->take_sends();
  ++s.steps;
  const Outcome after = s.ag->outcome();

  // A decided rank answers a late STATE or COLLECT with DECIDED(members).
  if (before == Outcome::kDecided && (msg_kind == kState || msg_kind == kCollect)) {
    bool answered = false;
    for (const auto& m : sends) {
      const Decoded d = decode(m.bytes, sc_.size);
      if (m.peer == ev.from && d.kind == kDecided && d.set == s.decided_members) answered = true;
    }
    if (!answered) fail("rank " + std::to_string(r) + " (decided) did not answer a late message with DECIDED");
  }
  if (s.last == Outcome::kExcluded && after != Outcome::kExcluded) {
    fail("rank " + std::to_string(r) + " left kExcluded");
  }
  if (s.last == Outcome::kDecided && after == Outcome::kDecided && s.ag->members() != s.decided_members) {
    fail("rank " + std::to_string(r) + " changed its decided members");
  }
  if (after == Outcome::kDecided && s.last != Outcome::kDecided) s.decided_members = s.ag->members();
  if (after == Outcome::kExcluded) s.ever_excluded = true;
  if (s.last == Outcome::kDecided && after == Outcome::kExcluded) ++flips_;
  if (after != Outcome::kRunning && s.terminal_at == Clock::time_point::max()) s.terminal_at = now_;
  if (trace_ && after != s.last) note("r" + std::to_string(r) + " -> " + outcome_name(after) + " " + s.ag->describe());
  s.last = after;

  const bool crash = sc_.crash_step[r] == s.steps - 1 ||
                     (sc_.crash_on_decide[r] && before == Outcome::kRunning && after == Outcome::kDecided);
  if (crash) {
    // What it sent at its last step leaves partly: none, all, a random subset, or a prefix.
    const int mode = std::uniform_int_distribution<int>(0, 3)(rng_);
    std::vector<Agreement::Send> kept;
    const size_t prefix = sends.empty() ? 0 : std::uniform_int_distribution<size_t>(0, sends.size())(rng_);
    for (size_t i = 0; i < sends.size(); ++i) {
      if (mode == 1 || (mode == 2 && coin(0.5)) || (mode == 3 && i < prefix)) kept.push_back(std::move(sends[i]));
    }
    sends = std::move(kept);
    s.crashed = true;
    s.backlog.clear();
    last_fault_ = std::max(last_fault_, now_);
    if (trace_) note("r" + std::to_string(r) + " CRASH, " + std::to_string(sends.size()) + " sends leave");
    for (int k = 0; k < sc_.size; ++k) {
      if (k == r || ranks_[k].crashed) continue;
      Ev d;
      d.t = now_ + uniform(0us, sc_.dead_delay_max);
      d.kind = EvKind::kDead;
      d.to = k;
      d.from = r;
      push(std::move(d));
    }
  }
  if (!crash && sc_.freeze_on_decide[r] != Dur::zero() && before == Outcome::kRunning && after == Outcome::kDecided) {
    Ev f;
    f.t = now_;
    f.kind = EvKind::kFreeze;
    f.to = r;
    f.length = sc_.freeze_on_decide[r];
    push(std::move(f));
  }
  for (auto& m : sends) {
    if (m.peer < 0 || m.peer >= sc_.size || m.peer == r) {
      fail("rank " + std::to_string(r) + " sent to rank " + std::to_string(m.peer));
      continue;
    }
    ++messages_;
    Ev e;
    e.t = now_ + uniform(sc_.min_delay, sc_.max_delay);
    e.kind = EvKind::kMsg;
    e.to = m.peer;
    e.from = r;
    e.bytes = std::move(m.bytes);
    push(std::move(e));
  }
  refresh(r);
}

// Re-files rank r's deadline after anything that may have changed it.
void Sim::refresh(int r) {
  const Rank& s = ranks_[r];
  if (due_at_[r] != Clock::time_point::max()) due_.erase({due_at_[r], r});
  due_at_[r] = s.started && !s.crashed && !s.frozen ? s.ag->next_deadline() : Clock::time_point::max();
  if (due_at_[r] != Clock::time_point::max()) due_.insert({due_at_[r], r});
}

void Sim::drain(int r) {
  Rank& s = ranks_[r];
  std::vector<Ev> pending;
  pending.swap(s.backlog);
  for (const Ev& ev : pending) {
    if (s.crashed) return;
    apply(r, ev);
  }
}

void Sim::dispatch(Ev& ev) {
  Rank& s = ranks_[ev.to];
  switch (ev.kind) {
    case EvKind::kStart:
      apply(ev.to, ev);
      if (!s.crashed) drain(ev.to);  // what arrived before it started
      return;
    case EvKind::kFreeze:
      if (s.crashed) return;
      if (!s.started) {  // freezes begin once the rank runs
        ev.t = t0_ + sc_.start[ev.to] + 1us;
        push(std::move(ev));
        return;
      }
      s.frozen = true;
      refresh(ev.to);
      if (trace_) note("r" + std::to_string(ev.to) + " FREEZE");
      if (ev.length == Dur::max()) {
        s.frozen_forever = true;
        last_fault_ = std::max(last_fault_, now_);
      } else {
        Ev resume;
        resume.t = now_ + ev.length;
        resume.kind = EvKind::kResume;
        resume.to = ev.to;
        last_fault_ = std::max(last_fault_, resume.t);
        push(std::move(resume));
      }
      return;
    case EvKind::kResume: {
      s.frozen = false;
      if (trace_) note("r" + std::to_string(ev.to) + " RESUME");
      // Deadlines that passed and messages that queued up: either may be seen first.
      Ev tick;
      tick.kind = EvKind::kTick;
      if (coin(0.5) && s.ag->next_deadline() <= now_) apply(ev.to, tick);
      if (!s.crashed) drain(ev.to);
      refresh(ev.to);
      return;
    }
    default:
      if (s.crashed) return;
      if (!s.started || s.frozen) {
        s.backlog.push_back(std::move(ev));
        return;
      }
      apply(ev.to, ev);
  }
}

std::string Sim::run(Totals& totals) {
  const int n = sc_.size;
  for (int r = 0; r < n; ++r) {
    if (sc_.pre_dead[r]) {
      ranks_[r].crashed = true;
      continue;
    }
    Ev st;
    st.t = t0_ + sc_.start[r];
    st.kind = EvKind::kStart;
    st.to = r;
    push(std::move(st));
    last_fault_ = std::max(last_fault_, st.t);
    // The transport reports ranks that were dead before the start to those that did not know.
    for (int k = 0; k < n; ++k) {
      if (!sc_.pre_dead[k] || sc_.view[r][k] || !sc_.pre_dead_reported[k]) continue;
      Ev d;
      d.t = t0_ + sc_.start[r] + uniform(0us, sc_.dead_delay_max);
      d.kind = EvKind::kDead;
      d.to = r;
      d.from = k;
      push(std::move(d));
    }
  }
  for (const Freeze& f : sc_.freezes) {
    Ev e;
    e.t = t0_ + f.at;
    e.kind = EvKind::kFreeze;
    e.to = f.rank;
    e.length = f.length;
    push(std::move(e));
  }
  size_t iterations = 0;
  while (failure_.empty()) {
    if (++iterations > 2000000) {
      fail("no quiescence after 2000000 events");
      break;
    }
    const int due = due_.empty() ? -1 : due_.begin()->second;
    const Clock::time_point deadline = due_.empty() ? Clock::time_point::max() : due_.begin()->first;
    if (due < 0 && q_.empty()) break;
    if (due >= 0 && (q_.empty() || deadline < q_.top().t)) {
      now_ = std::max(now_, deadline);
      Ev tick;
      tick.kind = EvKind::kTick;
      apply(due, tick);
      continue;
    }
    Ev ev = q_.top();
    q_.pop();
    now_ = std::max(now_, ev.t);
    dispatch(ev);
  }
  if (!failure_.empty()) return failure_;

  // Termination: every live rank that is not frozen for good has an outcome, in bounded time.
  const Dur step = 2 * sc_.suspect_after + 2 * sc_.max_delay;
  const Clock::time_point bound = last_fault_ + (n + 2) * step + sc_.dead_delay_max;
  std::vector<int> agreed;
  int agreed_by = -1;
  std::vector<char> crashed_ever(n, 0);
  for (int r = 0; r < n; ++r) crashed_ever[r] = ranks_[r].crashed;
  for (int r = 0; r < n; ++r) {
    const Rank& s = ranks_[r];
    if (s.started && s.ag->rejected() != 0) {
      return sc_.name + ": rank " + std::to_string(r) +
             " rejected a message of an honest peer: " + s.ag->last_rejection();
    }
    if (s.started && s.ag->outcome() == Outcome::kDecided) {
      const auto& m = s.ag->members();
      if (!std::binary_search(m.begin(), m.end(), r)) return sc_.name + ": decided rank not in its members";
      if (!std::is_sorted(m.begin(), m.end())) return sc_.name + ": members not sorted";
      for (int k : m) {
        if (sc_.pre_dead[k]) {
          return sc_.name + ": rank " + std::to_string(r) + " took rank " + std::to_string(k) +
                 ", dead before the start, as a member " + ranks_text(m);
        }
      }
    }
    if (s.crashed || s.frozen_forever) continue;
    if (s.ag->outcome() == Outcome::kRunning) {
      return sc_.name + ": rank " + std::to_string(r) + " never finished: " + s.ag->describe();
    }
    if (s.terminal_at > bound) {
      return sc_.name + ": rank " + std::to_string(r) + " finished only " +
             std::to_string((s.terminal_at - last_fault_) / 1ms) + " ms after the last failure";
    }
    if (s.ag->outcome() == Outcome::kDecided) {
      ++totals.decided_live;
      if (agreed_by < 0) {
        agreed = s.ag->members();
        agreed_by = r;
      } else if (s.ag->members() != agreed) {
        return sc_.name + ": disagreement: rank " + std::to_string(agreed_by) + " has " + ranks_text(agreed) +
               ", rank " + std::to_string(r) + " has " + ranks_text(s.ag->members());
      }
    } else {
      ++totals.excluded_live;
    }
  }
  // Validity: with no false suspicion, every rank that never crashed decided and is a member.
  if (!sc_.false_suspicion_possible) {
    for (int r = 0; r < n; ++r) {
      const Rank& s = ranks_[r];
      if (sc_.pre_dead[r] || crashed_ever[r]) continue;
      if (s.ever_excluded) return sc_.name + ": rank " + std::to_string(r) + " excluded: " + s.ag->describe();
      if (!std::binary_search(agreed.begin(), agreed.end(), r)) {
        return sc_.name + ": rank " + std::to_string(r) + " missing from " + ranks_text(agreed);
      }
    }
  }
  totals.messages += messages_;
  totals.flips += flips_;
  for (int r = 0; r < n; ++r) totals.crashes += ranks_[r].crashed && !sc_.pre_dead[r];
  ++totals.scenarios;
  return "";
}

// ---- Scenario generation ---------------------------------------------------------------

enum class Mode {
  kCrashes,      // crashes and dead-at-start only, messages fast: validity must hold
  kCoordinator,  // the coordinators crash as they decide, mid-broadcast
  kAnything,     // also frozen ranks (for a while or for good), late joiners, slow messages
};

Scenario make_scenario(int n, Mode mode, uint64_t seed) {
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(n));
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  auto coin = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; };
  auto dur = [&](Dur lo, Dur hi) { return Dur(std::uniform_int_distribution<int64_t>(lo.count(), hi.count())(g)); };
  Scenario sc;
  sc.size = n;
  sc.name = std::string(mode == Mode::kCrashes       ? "crashes"
                        : mode == Mode::kCoordinator ? "coordinator"
                                                     : "anything") +
            " n=" + std::to_string(n) + " seed=" + std::to_string(seed);
  sc.start.assign(n, Dur::zero());
  sc.pre_dead.assign(n, 0);
  sc.pre_dead_reported.assign(n, 1);
  sc.view.assign(n, std::vector<bool>(n, false));
  sc.crash_step.assign(n, -1);
  sc.crash_on_decide.assign(n, 0);
  sc.freeze_on_decide.assign(n, Dur::zero());
  for (int r = 0; r < n; ++r) sc.start[r] = dur(0us, 3ms);

  // Dead before the start: a few ranks (never all); each rank knows some of them.
  if (n > 1 && coin(0.6)) {
    const int k = uni(1, std::max(1, n / 3));
    for (int i = 0; i < k; ++i) sc.pre_dead[uni(0, n - 1)] = 1;
    if (std::count(sc.pre_dead.begin(), sc.pre_dead.end(), 1) == n) sc.pre_dead[uni(0, n - 1)] = 0;
    const double know = std::array<double, 4>{0.0, 0.5, 0.9, 1.0}[uni(0, 3)];
    for (int r = 0; r < n; ++r) {
      for (int k2 = 0; k2 < n; ++k2) sc.view[r][k2] = sc.pre_dead[k2] && coin(know);
    }
    for (int k2 = 0; k2 < n; ++k2) sc.pre_dead_reported[k2] = coin(0.8);
  }
  // Crashes after some number of steps.
  const int crashes = coin(0.2) ? 0 : uni(1, std::max(1, n / 2));
  for (int i = 0; i < crashes; ++i) sc.crash_step[uni(0, n - 1)] = uni(0, 2 * n + 4);
  if (mode == Mode::kCoordinator || (mode == Mode::kAnything && coin(0.5))) {
    // The lowest live ranks crash the moment they decide (the coordinators, usually): one, two
    // or three in a row.
    int told = uni(1, 3);
    for (int r = 0; r < n && told > 0; ++r) {
      if (sc.pre_dead[r]) continue;
      sc.crash_on_decide[r] = 1;
      sc.crash_step[r] = -1;
      --told;
    }
  } else {
    for (int r = 0; r < n; ++r) sc.crash_on_decide[r] = coin(0.05);
  }
  if (mode == Mode::kAnything) {
    sc.false_suspicion_possible = true;
    if (coin(0.2)) {
      for (int r = 0; r < n; ++r) {
        if (coin(0.3)) sc.start[r] = dur(0ms, 400ms);  // late joiners
      }
    }
    const int freezes = uni(0, 3);
    const Dur lengths[] = {5ms, 60ms, 150ms, 300ms, 1000ms, Dur::max()};
    for (int i = 0; i < freezes; ++i) {
      const int r = uni(0, n - 1);
      sc.freezes.push_back(Freeze{r, sc.start[r] + dur(0ms, 500ms), lengths[uni(0, 5)]});
    }
    for (int r = 0; r < n; ++r) {
      if (coin(0.1)) sc.freeze_on_decide[r] = lengths[uni(1, 5)];
    }
    if (coin(0.3)) sc.max_delay = dur(10ms, 150ms);  // as slow as suspect_after, or slower
    if (coin(0.3)) sc.dead_delay_max = dur(10ms, 300ms);
  }
  return sc;
}

struct SizePlan {
  int n;
  int count;
};

// Sanitizer builds run a fifth of the scenarios (still thousands), and no group above 1000.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kScenarioDivisor = 5;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
constexpr int kScenarioDivisor = 5;
#else
constexpr int kScenarioDivisor = 1;
#endif
#else
constexpr int kScenarioDivisor = 1;
#endif

// max_failures: at most this many ranks crash, and this many are dead at the start (large
// groups: each death is an on_dead() at every rank, and a STATE from each).
void run_mode(Mode mode, const std::vector<SizePlan>& plan, const char* label, int max_failures = -1) {
  Totals totals;
  const auto t0 = std::chrono::steady_clock::now();
  for (const SizePlan& p : plan) {
    const int count = p.n > 1000 && kScenarioDivisor > 1 ? 0 : std::max(1, p.count / (p.n > 1 ? kScenarioDivisor : 1));
    for (int i = 0; i < count; ++i) {
      const uint64_t seed = static_cast<uint64_t>(i) + 1;
      Scenario sc = make_scenario(p.n, mode, seed);
      if (max_failures >= 0) {
        int crashes = 0, dead = 0;
        for (int r = 0; r < p.n; ++r) {
          if ((sc.crash_step[r] >= 0 || sc.crash_on_decide[r]) && ++crashes > max_failures) {
            sc.crash_step[r] = -1;
            sc.crash_on_decide[r] = 0;
          }
          if (sc.pre_dead[r] && ++dead > max_failures) sc.pre_dead[r] = 0;
          if (!sc.pre_dead[r]) {
            for (int k = 0; k < p.n; ++k) sc.view[k][r] = false;
          }
        }
      }
      Sim sim(sc, seed);
      const std::string why = sim.run(totals);
      if (!why.empty()) {
        Sim again(sc, seed, true);
        Totals ignored;
        again.run(ignored);
        const std::string& log = again.trace();
        ADD_FAILURE() << why << "\ntrace (tail):\n" << log.substr(log.size() > 12000 ? log.size() - 12000 : 0);
        return;
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "[ agreement ] %s: %zu scenarios, %zu messages, %zu crashes, %zu live ranks decided, %zu live ranks "
      "excluded, %zu decided-then-excluded, %.2f s\n",
      label, totals.scenarios, totals.messages, totals.crashes, totals.decided_live, totals.excluded_live, totals.flips,
      secs);
}

TEST(Agreement, SimulatedCrashesKeepEveryLiveRank) {
  run_mode(Mode::kCrashes, {{1, 50}, {2, 4000}, {3, 4000}, {4, 4000}, {5, 4000}, {8, 4000}, {16, 2500}, {33, 1200}},
           "crashes only");
}

TEST(Agreement, SimulatedCoordinatorCrashesMidBroadcast) {
  run_mode(Mode::kCoordinator, {{2, 3000}, {3, 4000}, {4, 4000}, {5, 4000}, {8, 4000}, {16, 2500}, {33, 1200}},
           "coordinators crash as they decide");
}

TEST(Agreement, SimulatedLargeGroups) {
  run_mode(Mode::kCrashes, {{200, 10}, {1000, 3}, {4099, 1}}, "large groups, a few crashes", 6);
  run_mode(Mode::kCoordinator, {{200, 10}, {1000, 3}}, "large groups, coordinators crash as they decide", 6);
}

TEST(Agreement, SimulatedFreezesAndSlowPeersStillAgree) {
  run_mode(Mode::kAnything, {{1, 50}, {2, 8000}, {3, 8000}, {4, 8000}, {5, 8000}, {8, 8000}, {16, 5000}, {33, 2400}},
           "crashes, freezes, late joiners, slow messages");
}

// ---- Single agreements, driven by hand -----------------------------------------------------

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);

std::vector<bool> dead_view(int n, std::vector<int> dead) {
  std::vector<bool> v(n, false);
  for (int r : dead) v[r] = true;
  return v;
}

// The sends, decoded, in order.
struct Out {
  int peer;
  Decoded msg;
};
std::vector<Out> sent(Agreement& a, int size) {
  std::vector<Out> out;
  for (const auto& s : a.take_sends()) out.push_back(Out{s.peer, decode(s.bytes, size)});
  return out;
}

void feed(Agreement& a, int from, const Wire& w, Clock::time_point t = kT0) {
  const std::vector<uint8_t> b = encode(w);
  a.on_message(from, b.data(), b.size(), t);
}

Wire state(int n, int round, std::vector<int> suspects) {
  return Wire{kState, kEpoch, uint32_t(round), uint32_t(n), suspects, {}};
}
Wire collect(int n, int round, std::vector<int> suspects) {
  return Wire{kCollect, kEpoch, uint32_t(round), uint32_t(n), suspects, {}};
}
// A decision message as `from` sends it: suspects = every non-member but the sender.
Wire decision(uint8_t kind, int n, int from, std::vector<int> set) {
  Wire w{kind, kEpoch, uint32_t(set.front()), uint32_t(n), {}, set};
  for (int r = 0; r < n; ++r) {
    if (r != from && std::find(set.begin(), set.end(), r) == set.end()) w.suspects.push_back(r);
  }
  return w;
}

TEST(Agreement, OneRankDecidesAtConstruction) {
  Agreement a(0, 1, kEpoch, {}, 100ms, kT0);
  EXPECT_EQ(a.outcome(), Outcome::kDecided);
  EXPECT_EQ(a.members(), std::vector<int>({0}));
  EXPECT_TRUE(a.take_sends().empty());
  EXPECT_EQ(a.next_deadline(), Clock::time_point::max());
  EXPECT_NE(a.describe().find("decided {0}"), std::string::npos) << a.describe();
}

TEST(Agreement, EveryPeerKnownDeadDecidesAlone) {
  Agreement a(2, 4, kEpoch, dead_view(4, {0, 1, 3}), 100ms, kT0);
  EXPECT_EQ(a.outcome(), Outcome::kDecided);
  EXPECT_EQ(a.members(), std::vector<int>({2}));
  EXPECT_TRUE(a.take_sends().empty()) << "nothing goes to ranks known dead";
}

TEST(Agreement, InvalidArgumentsExcludeAtOnce) {
  for (auto [rank, size] : std::vector<std::pair<int, int>>{{0, 0}, {0, 65537}, {-1, 4}, {4, 4}, {0, -3}}) {
    Agreement a(rank, size, kEpoch, {}, 100ms, kT0);
    EXPECT_EQ(a.outcome(), Outcome::kExcluded) << rank << "/" << size;
    EXPECT_EQ(a.rejected(), 1u);
    EXPECT_EQ(a.last_rejection().rfind("arguments:", 0), 0u) << a.last_rejection();
    EXPECT_TRUE(a.take_sends().empty());
  }
  Agreement big(65535, 65536, kEpoch, {}, 100ms, kT0);  // the largest group is fine
  EXPECT_EQ(big.outcome(), Outcome::kRunning);
  EXPECT_EQ(big.rejected(), 0u);
}

TEST(Agreement, HappyPathMessageByMessage) {
  const int n = 3;
  Agreement r0(0, n, kEpoch, {}, 100ms, kT0), r1(1, n, kEpoch, {}, 100ms, kT0), r2(2, n, kEpoch, {}, 100ms, kT0);
  Agreement* ranks[] = {&r0, &r1, &r2};
  std::vector<std::pair<int, Agreement::Send>> wire;  // FIFO of (from, send)
  auto collect_sends = [&] {
    for (int r = 0; r < n; ++r) {
      for (auto& s : ranks[r]->take_sends()) wire.emplace_back(r, std::move(s));
    }
  };
  collect_sends();
  EXPECT_EQ(wire.size(), 4u);  // COLLECT 0->1, 0->2; STATE 1->0, 2->0
  int delivered = 0;
  while (!wire.empty() && delivered < 100) {
    auto [from, s] = std::move(wire.front());
    wire.erase(wire.begin());
    ranks[s.peer]->on_message(from, s.bytes.data(), s.bytes.size(), kT0 + 1ms);
    ++delivered;
    collect_sends();
  }
  for (Agreement* a : ranks) {
    EXPECT_EQ(a->outcome(), Outcome::kDecided) << a->describe();
    EXPECT_EQ(a->members(), std::vector<int>({0, 1, 2}));
    EXPECT_EQ(a->rejected(), 0u) << a->last_rejection();
    EXPECT_EQ(a->next_deadline(), Clock::time_point::max());
  }
}

TEST(Agreement, TimeoutsCountOutSilentRanks) {
  Agreement a(1, 3, kEpoch, {}, 100ms, kT0);
  auto out = sent(a, 3);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 0);
  EXPECT_EQ(out[0].msg.kind, kState);
  EXPECT_EQ(a.next_deadline(), kT0 + 200ms);  // a participant waits 2 * suspect_after
  a.on_tick(kT0 + 199ms);
  EXPECT_TRUE(a.take_sends().empty());
  a.on_tick(kT0 + 200ms);  // coordinator 0 is counted out: rank 1 collects
  out = sent(a, 3);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 2);
  EXPECT_EQ(out[0].msg.kind, kCollect);
  EXPECT_EQ(out[0].msg.suspects, std::vector<int>({0}));
  EXPECT_EQ(a.next_deadline(), kT0 + 300ms);
  EXPECT_EQ(a.outcome(), Outcome::kRunning);
  EXPECT_NE(a.describe().find("coordinator 1 (this rank, waiting for 1 reports)"), std::string::npos) << a.describe();
  a.on_tick(kT0 + 300ms);  // rank 2 never reported
  EXPECT_EQ(a.outcome(), Outcome::kDecided);
  EXPECT_EQ(a.members(), std::vector<int>({1}));
  out = sent(a, 3);
  ASSERT_EQ(out.size(), 2u);  // the non-members hear they are out
  for (const Out& o : out) {
    EXPECT_EQ(o.msg.kind, kExcluded);
    EXPECT_EQ(o.msg.set, std::vector<int>({1}));
  }
  // A rank counted out that reports late is told.
  feed(a, 2, state(3, 1, {0}), kT0 + 400ms);
  out = sent(a, 3);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 2);
  EXPECT_EQ(out[0].msg.kind, kDecided);
  EXPECT_EQ(out[0].msg.set, std::vector<int>({1}));
}

TEST(Agreement, LateStateAndCollectGetDecided) {
  const int n = 4;
  Agreement a(2, n, kEpoch, {}, 100ms, kT0);
  a.take_sends();
  feed(a, 0, collect(n, 0, {}));
  auto out = sent(a, n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 0);
  EXPECT_EQ(out[0].msg.kind, kState);
  feed(a, 0, decision(kDecide, n, 0, {0, 1, 2, 3}));
  ASSERT_EQ(a.outcome(), Outcome::kDecided);
  EXPECT_EQ(a.members(), std::vector<int>({0, 1, 2, 3}));
  EXPECT_TRUE(a.take_sends().empty());
  feed(a, 3, state(n, 2, {0, 1}));  // rank 3 thinks rank 2 coordinates
  out = sent(a, n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 3);
  EXPECT_EQ(out[0].msg.kind, kDecided);
  EXPECT_EQ(out[0].msg.set, std::vector<int>({0, 1, 2, 3}));
  EXPECT_TRUE(out[0].msg.suspects.empty());
  feed(a, 1, collect(n, 1, {0}));  // rank 1 collects after counting rank 0 out
  out = sent(a, n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 1);
  EXPECT_EQ(out[0].msg.kind, kDecided);
  EXPECT_EQ(a.outcome(), Outcome::kDecided);
  EXPECT_EQ(a.rejected(), 0u) << a.last_rejection();
}

TEST(Agreement, DecisionOfASuspectIsNotTaken) {
  const int n = 3;
  Agreement a(2, n, kEpoch, {}, 100ms, kT0);
  a.take_sends();
  a.on_tick(kT0 + 200ms);  // coordinator 0 silent: counted out, rank 1 next
  auto out = sent(a, n);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 1);
  EXPECT_EQ(out[0].msg.suspects, std::vector<int>({0}));
  // Rank 0's decision arrives after rank 2 promised rank 1: not taken.
  feed(a, 0, decision(kDecide, n, 0, {0, 1, 2}));
  EXPECT_EQ(a.outcome(), Outcome::kRunning);
  EXPECT_TRUE(a.take_sends().empty());
  feed(a, 1, decision(kDecide, n, 1, {1, 2}));
  EXPECT_EQ(a.outcome(), Outcome::kDecided);
  EXPECT_EQ(a.members(), std::vector<int>({1, 2}));
  out = sent(a, n);  // rank 0 hears the set that overrules its own
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, 0);
  EXPECT_EQ(out[0].msg.kind, kExcluded);
  EXPECT_EQ(out[0].msg.set, std::vector<int>({1, 2}));
  EXPECT_EQ(a.rejected(), 0u) << a.last_rejection();
}

TEST(Agreement, LaterRoundOverrulesEarlierSet) {
  const int n = 4;
  {  // holding round 0's set, rank 3 hears of round 1's: it is out, and tells its old set
    Agreement a(3, n, kEpoch, {}, 100ms, kT0);
    a.take_sends();
    feed(a, 0, decision(kDecide, n, 0, {0, 1, 2, 3}));
    ASSERT_EQ(a.outcome(), Outcome::kDecided);
    a.take_sends();
    feed(a, 2, decision(kDecided, n, 2, {1, 2, 3}));
    EXPECT_EQ(a.outcome(), Outcome::kExcluded);
    EXPECT_EQ(a.members(), std::vector<int>({1, 2, 3}));
    EXPECT_NE(a.describe().find("overruled by round 1"), std::string::npos) << a.describe();
    std::vector<int> told;
    for (const Out& o : sent(a, n)) {
      EXPECT_EQ(o.msg.kind, kDecided);
      EXPECT_EQ(o.msg.set, std::vector<int>({1, 2, 3}));
      told.push_back(o.peer);
    }
    EXPECT_EQ(told, std::vector<int>({0, 1}));
    // A late COLLECT: answered with the set that stands.
    feed(a, 1, collect(n, 1, {0}));
    auto out = sent(a, n);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].msg.set, std::vector<int>({1, 2, 3}));
  }
  {  // holding round 1's set, rank 3 answers round 0's DECIDE with its own
    Agreement a(3, n, kEpoch, {}, 100ms, kT0);
    a.take_sends();
    feed(a, 1, collect(n, 1, {0}));
    a.take_sends();
    feed(a, 1, decision(kDecide, n, 1, {1, 2, 3}));
    ASSERT_EQ(a.outcome(), Outcome::kDecided);
    a.take_sends();
    feed(a, 0, decision(kDecide, n, 0, {0, 1, 2, 3}));
    EXPECT_EQ(a.outcome(), Outcome::kDecided);
    std::vector<int> told;  // the sender, and every member of the set overruled
    for (const Out& o : sent(a, n)) {
      EXPECT_EQ(o.msg.kind, kDecided);
      EXPECT_EQ(o.msg.set, std::vector<int>({1, 2, 3}));
      told.push_back(o.peer);
    }
    EXPECT_EQ(told, std::vector<int>({0, 1, 2}));
    feed(a, 2, decision(kDecided, n, 2, {0, 1, 2, 3}));  // heard again: only the sender is told
    auto out = sent(a, n);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].peer, 2);
    EXPECT_EQ(a.rejected(), 0u);
    // A second, different set of round 1 is a protocol violation: rejected, nothing changes.
    feed(a, 2, decision(kDecided, n, 2, {1, 3}));
    EXPECT_EQ(a.outcome(), Outcome::kDecided);
    EXPECT_EQ(a.members(), std::vector<int>({1, 2, 3}));
    EXPECT_EQ(a.rejected(), 1u);
    EXPECT_EQ(a.last_rejection().rfind("set:", 0), 0u) << a.last_rejection();
  }
}

TEST(Agreement, SuspicionIsContagious) {
  const int n = 4;
  Agreement a(2, n, kEpoch, {}, 100ms, kT0);
  a.take_sends();
  feed(a, 1, collect(n, 1, {0, 2}));  // rank 1 counts rank 2 out
  EXPECT_EQ(a.outcome(), Outcome::kExcluded);
  EXPECT_TRUE(a.members().empty());
  EXPECT_TRUE(a.take_sends().empty());
  feed(a, 1, decision(kExcluded, n, 1, {1, 3}));  // the set, learnt later
  EXPECT_EQ(a.outcome(), Outcome::kExcluded);
  EXPECT_EQ(a.members(), std::vector<int>({1, 3}));
  EXPECT_EQ(a.rejected(), 0u) << a.last_rejection();
}

TEST(Agreement, SuspectsStateIsIgnored) {
  const int n = 4;
  Agreement a(1, n, kEpoch, dead_view(n, {3}), 100ms, kT0);
  a.take_sends();
  const std::string before = a.describe();
  feed(a, 3, state(n, 1, {0}));  // rank 3 is dead as far as rank 1 knows
  EXPECT_EQ(a.describe(), before);
  EXPECT_TRUE(a.take_sends().empty());
  EXPECT_EQ(a.rejected(), 0u);
}

// ---- Hostile bytes --------------------------------------------------------------------------

// Everything a message may change, to check that a rejected one changed nothing.
struct Snapshot {
  Outcome outcome;
  std::vector<int> members;
  std::string describe;
  Clock::time_point deadline;
  size_t stale;
  bool operator==(const Snapshot& o) const {
    return outcome == o.outcome && members == o.members && describe == o.describe && deadline == o.deadline &&
           stale == o.stale;
  }
};
Snapshot snapshot(const Agreement& a) {
  return Snapshot{a.outcome(), a.members(), a.describe(), a.next_deadline(), a.dropped_stale()};
}

// The receiver of the hostile messages: rank 2 of 11 (two bitmap bytes, five padding bits).
constexpr int kN = 11;
constexpr int kMe = 2;
std::unique_ptr<Agreement> receiver() {
  auto a = std::make_unique<Agreement>(kMe, kN, kEpoch, std::vector<bool>(kN, false), 100ms, kT0);
  a->take_sends();
  return a;
}

struct Base {
  const char* name;
  int from;
  Wire wire;
};
std::vector<Base> bases() {
  std::vector<int> all_but_0;
  for (int r = 1; r < kN; ++r) all_but_0.push_back(r);
  std::vector<int> out_2 = all_but_0;
  out_2.erase(std::find(out_2.begin(), out_2.end(), kMe));
  return {
      {"STATE", 5, state(kN, kMe, {0, 1})},
      {"COLLECT", 1, collect(kN, 1, {0})},
      {"DECIDE", 1, decision(kDecide, kN, 1, all_but_0)},
      {"DECIDED", 4, decision(kDecided, kN, 4, all_but_0)},
      {"EXCLUDED", 1, decision(kExcluded, kN, 1, out_2)},
  };
}

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void set_bit(std::vector<uint8_t>& b, size_t map, int r) {
  b[20 + map * 2 + r / 8] = static_cast<uint8_t>(b[20 + map * 2 + r / 8] | (1 << (r % 8)));
}
void clear_bit(std::vector<uint8_t>& b, size_t map, int r) {
  b[20 + map * 2 + r / 8] = static_cast<uint8_t>(b[20 + map * 2 + r / 8] & ~(1 << (r % 8)));
}

TEST(Agreement, HonestMessagesOfEveryKindAreAccepted) {
  for (const Base& b : bases()) {
    auto a = receiver();
    feed(*a, b.from, b.wire);
    EXPECT_EQ(a->rejected(), 0u) << b.name << ": " << a->last_rejection();
  }
}

struct Corruption {
  std::string field;  // what the rejection must name first
  std::string what;
  std::function<void(std::vector<uint8_t>&, int&)> apply;
};

std::vector<Corruption> corruptions(const Base& base) {
  std::vector<Corruption> c;
  for (int i = 0; i < 4; ++i) {
    c.push_back({"magic", "byte " + std::to_string(i), [i](auto& b, int&) { b[i] ^= 0x20; }});
  }
  for (int v : {0, 2, 255}) {
    c.push_back({"version", std::to_string(v), [v](auto& b, int&) { b[4] = static_cast<uint8_t>(v); }});
  }
  for (int v : {0, 6, 255}) {
    c.push_back({"kind", std::to_string(v), [v](auto& b, int&) { b[5] = static_cast<uint8_t>(v); }});
  }
  c.push_back({"reserved", "low byte", [](auto& b, int&) { b[6] = 1; }});
  c.push_back({"reserved", "high byte", [](auto& b, int&) { b[7] = 0x80; }});
  for (uint32_t v : {0u, 10u, 12u, 0xffffffffu}) {
    c.push_back({"size", std::to_string(v), [v](auto& b, int&) { put32(b, 16, v); }});
  }
  for (uint32_t v : {uint32_t(kN), 0xffffffffu}) {
    c.push_back({"round", std::to_string(v), [v](auto& b, int&) { put32(b, 12, v); }});
  }
  c.push_back({"length", "one byte short", [](auto& b, int&) { b.pop_back(); }});
  c.push_back({"length", "one byte long", [](auto& b, int&) { b.push_back(0); }});
  c.push_back({"length", "a whole bitmap long", [](auto& b, int&) { b.insert(b.end(), {0, 0}); }});
  c.push_back({"length", "header only", [](auto& b, int&) { b.resize(20); }});
  c.push_back({"length", "19 bytes", [](auto& b, int&) { b.resize(19); }});
  c.push_back({"length", "4 bytes", [](auto& b, int&) { b.resize(4); }});
  c.push_back({"length", "empty", [](auto& b, int&) { b.clear(); }});
  c.push_back({"suspects", "padding bit 11", [](auto& b, int&) { set_bit(b, 0, 11); }});
  c.push_back({"suspects", "padding bit 15", [](auto& b, int&) { set_bit(b, 0, 15); }});
  c.push_back({"set", "padding bit 13", [](auto& b, int&) { set_bit(b, 1, 13); }});
  c.push_back({"suspects", "the sender's own bit", [](auto& b, int& from) { set_bit(b, 0, from); }});
  for (int f : {-1, kN, kMe, -2147483647 - 1, 2147483647}) {
    c.push_back({"from", std::to_string(f), [f](auto&, int& from) { from = f; }});
  }
  const uint8_t kind = base.wire.kind;
  if (kind == kState || kind == kCollect) {
    c.push_back({"set", "a member in a " + std::string(base.name), [](auto& b, int&) { set_bit(b, 1, 7); }});
    c.push_back({"suspects", "rank 0 not suspected", [](auto& b, int&) { clear_bit(b, 0, 0); }});
  }
  if (kind == kState) {
    c.push_back({"round", "another coordinator", [](auto& b, int&) { put32(b, 12, 3); }});
    c.push_back({"round", "a sender below its coordinator", [](auto& b, int& from) {
                   from = 1;
                   clear_bit(b, 0, 1);
                 }});
  }
  if (kind == kCollect) {
    c.push_back({"round", "not the sender", [](auto& b, int&) { put32(b, 12, 0); }});
  }
  if (kind == kDecide || kind == kDecided || kind == kExcluded) {
    c.push_back({"set", "empty", [](auto& b, int&) {
                   b[22] = 0;
                   b[23] = 0;
                 }});
    c.push_back({"set", "a member the sender suspects", [](auto& b, int&) { set_bit(b, 1, 0); }});
    c.push_back({"suspects", "a non-member not suspected", [](auto& b, int&) { clear_bit(b, 0, 0); }});
    c.push_back({"round", "not the lowest member", [](auto& b, int&) { put32(b, 12, 3); }});
  }
  if (kind == kExcluded) {
    c.push_back({"set", "names the receiver", [](auto& b, int&) {
                   set_bit(b, 1, kMe);
                   clear_bit(b, 0, kMe);
                 }});
  }
  return c;
}

TEST(Agreement, EveryCorruptedFieldIsRejectedAndChangesNothing) {
  size_t cases = 0;
  for (const Base& base : bases()) {
    for (const Corruption& k : corruptions(base)) {
      auto a = receiver();
      const Snapshot before = snapshot(*a);
      std::vector<uint8_t> b = encode(base.wire);
      int from = base.from;
      k.apply(b, from);
      a->on_message(from, b.empty() ? nullptr : b.data(), b.size(), kT0 + 1ms);
      const std::string where = std::string(base.name) + ", " + k.field + " (" + k.what + ")";
      EXPECT_EQ(a->rejected(), 1u) << where;
      EXPECT_EQ(a->last_rejection().rfind(k.field + ":", 0), 0u) << where << ": " << a->last_rejection();
      EXPECT_TRUE(snapshot(*a) == before) << where << ": " << a->describe();
      EXPECT_TRUE(a->take_sends().empty()) << where;
      ++cases;
    }
  }
  // Null bytes with a length, and an on_dead() of no peer.
  auto a = receiver();
  const Snapshot before = snapshot(*a);
  a->on_message(3, nullptr, 28, kT0);
  EXPECT_EQ(a->last_rejection().rfind("data:", 0), 0u) << a->last_rejection();
  for (int p : {-1, kN, kMe}) a->on_dead(p, kT0);
  EXPECT_EQ(a->rejected(), 4u);
  EXPECT_EQ(a->last_rejection().rfind("on_dead:", 0), 0u) << a->last_rejection();
  EXPECT_TRUE(snapshot(*a) == before);
  std::printf("[ agreement ] %zu corrupted messages rejected\n", cases);
}

TEST(Agreement, OtherEpochsAreDroppedNotRejected) {
  for (const Base& base : bases()) {
    for (uint32_t e : {kEpoch - 1, kEpoch + 1, 0u, 0xffffffffu}) {
      auto a = receiver();
      Wire w = base.wire;
      w.epoch = e;
      const Snapshot before = snapshot(*a);
      feed(*a, base.from, w);
      EXPECT_EQ(a->rejected(), 0u) << base.name << " epoch " << e << ": " << a->last_rejection();
      EXPECT_EQ(a->dropped_stale(), 1u);
      Snapshot after = snapshot(*a);
      after.stale = before.stale;
      EXPECT_TRUE(after == before) << base.name;
      EXPECT_TRUE(a->take_sends().empty());
    }
  }
}

bool names_a_field(const std::string& why) {
  static const char* fields[] = {
      "from:", "data:", "length:", "magic:", "version:", "kind:", "reserved:", "size:", "round:", "suspects:", "set:"};
  for (const char* f : fields) {
    if (why.rfind(f, 0) == 0) return true;
  }
  return false;
}

// Random bytes and randomly damaged honest messages: never a crash, and what is rejected is
// rejected with a reason and changes nothing.
TEST(Agreement, FuzzedBytesNeverHurt) {
  std::mt19937_64 g(20240611);
  const std::vector<Base> honest = bases();
  size_t rejected = 0, stale = 0, taken = 0;
  for (int i = 0; i < 6000; ++i) {
    const Base& base = honest[g() % honest.size()];
    std::vector<uint8_t> b = encode(base.wire);
    int from = base.from;
    switch (i % 3) {
      case 0: {  // random bytes behind a plausible header, or none
        const size_t len = g() % 64;
        if (g() % 2)
          b.resize(std::min(b.size(), static_cast<size_t>(g() % 21)));
        else
          b.clear();
        while (b.size() < len) b.push_back(static_cast<uint8_t>(g()));
        break;
      }
      case 1: {  // a few flipped bits
        const int flips = 1 + static_cast<int>(g() % 4);
        for (int f = 0; f < flips; ++f) b[g() % b.size()] ^= static_cast<uint8_t>(1u << (g() % 8));
        break;
      }
      default: {  // random bytes in the bitmaps, maybe a length change, maybe another sender
        for (size_t j = 20; j < b.size(); ++j) {
          if (g() % 3 == 0) b[j] = static_cast<uint8_t>(g());
        }
        if (g() % 4 == 0) b.resize(g() % 30);
        if (g() % 4 == 0) from = static_cast<int>(g() % (kN + 2)) - 1;
      }
    }
    auto a = receiver();
    const Snapshot before = snapshot(*a);
    a->on_message(from, b.data(), b.size(), kT0 + 1ms);
    if (a->rejected() > 0) {
      ++rejected;
      ASSERT_EQ(a->rejected(), 1u);
      ASSERT_TRUE(names_a_field(a->last_rejection())) << a->last_rejection();
      ASSERT_TRUE(snapshot(*a) == before) << a->last_rejection();
      ASSERT_TRUE(a->take_sends().empty());
    } else if (a->dropped_stale() > 0) {
      ++stale;
    } else {
      ++taken;
      // Whatever it took, what it sends is well-formed for the peer.
      for (const auto& s : a->take_sends()) {
        ASSERT_TRUE(s.peer >= 0 && s.peer < kN && s.peer != kMe);
        ASSERT_EQ(s.bytes.size(), 24u);
      }
    }
  }
  std::printf("[ agreement ] fuzz: 6000 messages, %zu rejected, %zu of another epoch, %zu taken\n", rejected, stale,
              taken);
  EXPECT_GT(rejected, 4000u);
}

}  // namespace
}  // namespace gw::transport
