#include "transport/recovery/agreement.hpp"

#include <cstring>
#include <initializer_list>
#include <utility>

namespace gw::transport {
namespace {

constexpr uint8_t kMagic[4] = {'G', 'W', 'A', 'G'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHeader = 20;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// t + d, saturating at time_point::max() (suspect_after may be huge: "never").
Clock::time_point later(Clock::time_point t, Clock::duration d) {
  if (d <= Clock::duration::zero()) return t;
  if (t > Clock::time_point::max() - d) return Clock::time_point::max();
  return t + d;
}

const char* kind_name(int kind) {
  switch (kind) {
    case 1: return "STATE";
    case 2: return "COLLECT";
    case 3: return "DECIDE";
    case 4: return "DECIDED";
    case 5: return "EXCLUDED";
    default: return "?";
  }
}

}  // namespace

Agreement::Agreement(int rank, int size, uint32_t epoch, std::vector<bool> dead, Clock::duration suspect_after,
                     Clock::time_point now)
    : epoch_(epoch), suspect_after_(suspect_after < Clock::duration::zero() ? Clock::duration::zero() : suspect_after) {
  const bool valid = size >= 1 && size <= kMaxRanks && rank >= 0 && rank < size;
  if (valid) {
    rank_ = rank;
    size_ = size;
  }
  const size_t bytes = (static_cast<size_t>(size_) + 7) / 8;
  suspects_.assign(bytes, 0);
  dead_.assign(bytes, 0);
  reported_.assign(bytes, 0);
  notify_.assign(bytes, 0);
  overruled_.assign(bytes, 0);
  if (!valid) {
    reject("arguments: rank " + std::to_string(rank) + " of size " + std::to_string(size) + " (size must be 1.." +
           std::to_string(kMaxRanks) + ", rank below it)");
    outcome_ = Outcome::kExcluded;
    excluded_why_ = "invalid arguments (" + last_rejection_ + ")";
    return;
  }
  for (int r = 0; r < size_ && static_cast<size_t>(r) < dead.size(); ++r) {
    if (r != rank_ && dead[r]) {
      put(dead_, r);
      suspect(r);
    }
  }
  step(now);
}

std::vector<Agreement::Send> Agreement::take_sends() {
  std::vector<Send> out;
  out.swap(sends_);
  return out;
}

bool Agreement::suspect(int r) {
  if (r == rank_ || test(suspects_, r)) return false;
  put(suspects_, r);
  ++suspect_count_;
  return true;
}

void Agreement::reject(std::string why) {
  ++rejected_;
  last_rejection_ = std::move(why);
}

// Checks every field of an untrusted message. Returns false (and says why, unless the message
// is merely of another epoch) when it must be dropped.
bool Agreement::parse(int from, const void* data, size_t len, Message& m) {
  if (from < 0 || from >= size_) {
    reject("from: rank " + std::to_string(from) + " is outside the group of " + std::to_string(size_));
    return false;
  }
  if (from == rank_) {
    reject("from: a message from this rank itself (" + std::to_string(from) + ")");
    return false;
  }
  if (data == nullptr && len != 0) {
    reject("data: null with length " + std::to_string(len));
    return false;
  }
  const std::string where = " (from rank " + std::to_string(from) + ")";
  if (len < kHeader) {
    reject("length: " + std::to_string(len) + " bytes, shorter than the " + std::to_string(kHeader) + "-byte header" +
           where);
    return false;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  if (std::memcmp(p, kMagic, 4) != 0) {
    reject("magic: not \"GWAG\"" + where);
    return false;
  }
  if (p[4] != kVersion) {
    reject("version: " + std::to_string(p[4]) + ", expected " + std::to_string(kVersion) + where);
    return false;
  }
  const uint32_t epoch = get_u32(p + 8);
  if (epoch != epoch_) {
    ++stale_;  // a late message of an earlier recovery, or an early one of the next
    return false;
  }
  const uint8_t kind = p[5];
  if (kind < kState || kind > kExcludedMsg) {
    reject("kind: " + std::to_string(kind) + " is none of STATE..EXCLUDED (1..5)" + where);
    return false;
  }
  const std::string what = std::string(kind_name(kind)) + where;
  if (p[6] != 0 || p[7] != 0) {
    reject("reserved: not zero in " + what);
    return false;
  }
  const uint32_t size = get_u32(p + 16);
  if (size != static_cast<uint32_t>(size_)) {
    reject("size: " + std::to_string(size) + " in " + what + ", the group has " + std::to_string(size_));
    return false;
  }
  const size_t nb = suspects_.size();
  if (len != kHeader + 2 * nb) {
    reject("length: " + std::to_string(len) + " bytes in " + what + ", expected " + std::to_string(kHeader + 2 * nb));
    return false;
  }
  const uint32_t round = get_u32(p + 12);
  if (round >= size) {
    reject("round: " + std::to_string(round) + " in " + what + " is outside the group of " + std::to_string(size_));
    return false;
  }
  m.kind = static_cast<Kind>(kind);
  m.round = static_cast<int>(round);
  m.suspects.assign(p + kHeader, p + kHeader + nb);
  m.set.assign(p + kHeader + nb, p + kHeader + 2 * nb);
  const int pad = static_cast<int>(nb * 8) - size_;
  const auto pad_mask = static_cast<uint8_t>(0xffu << (8 - pad));
  if (pad > 0 && (m.suspects[nb - 1] & pad_mask) != 0) {
    reject("suspects: bits set past the group's size in " + what);
    return false;
  }
  if (pad > 0 && (m.set[nb - 1] & pad_mask) != 0) {
    reject("set: bits set past the group's size in " + what);
    return false;
  }
  if (test(m.suspects, from)) {
    reject("suspects: the sender suspects itself in " + what);
    return false;
  }
  bool set_empty = true;
  bool overlap = false;
  for (size_t i = 0; i < nb; ++i) {
    set_empty = set_empty && m.set[i] == 0;
    overlap = overlap || (m.set[i] & m.suspects[i]) != 0;
  }
  // The ranks below `below` must all be suspected by the sender (a coordinator suspects every
  // rank below it).
  auto covers_below = [&](int below) {
    Bits need(nb, 0);
    for (int i = 0; i < below / 8; ++i) need[i] = 0xff;
    if (below % 8 != 0) need[below / 8] = static_cast<uint8_t>((1u << (below % 8)) - 1);
    for (size_t i = 0; i < nb; ++i) {
      if ((need[i] & ~m.suspects[i]) != 0) return false;
    }
    return true;
  };
  if (m.kind == kState || m.kind == kCollect) {
    if (!set_empty) {
      reject("set: not empty in " + what);
      return false;
    }
    if (m.kind == kState && m.round >= from) {
      reject("round: " + std::to_string(round) + " in " + what + ", a rank reports to a coordinator below it");
      return false;
    }
    if (m.kind == kState && m.round != rank_) {
      reject("round: " + std::to_string(round) + " in " + what + ", which reports to a coordinator; this is rank " +
             std::to_string(rank_));
      return false;
    }
    if (m.kind == kCollect && m.round != from) {
      reject("round: " + std::to_string(round) + " in " + what + ", a coordinator's round is its own rank");
      return false;
    }
    if (!covers_below(m.round)) {
      reject("suspects: " + what + " for coordinator " + std::to_string(round) +
             " does not suspect every rank below it");
      return false;
    }
    return true;
  }
  if (set_empty) {
    reject("set: empty in " + what);
    return false;
  }
  if (overlap) {
    reject("set: overlaps the sender's suspects in " + what);
    return false;
  }
  for (size_t i = 0; i < nb; ++i) {
    uint8_t others = static_cast<uint8_t>(~m.set[i]);
    if (i == nb - 1 && pad > 0) others = static_cast<uint8_t>(others & ~pad_mask);
    if (static_cast<size_t>(from >> 3) == i) others = static_cast<uint8_t>(others & ~(1u << (from & 7)));
    if (m.suspects[i] != others) {
      reject("suspects: not every non-member but the sender in " + what);
      return false;
    }
  }
  const int lowest = lowest_in(m.set);  // the set is not empty
  if (m.round != lowest) {
    reject("round: " + std::to_string(round) + " in " + what + ", but the set's lowest member (who decided it) is " +
           std::to_string(lowest));
    return false;
  }
  if (m.kind == kExcludedMsg && test(m.set, rank_)) {
    reject("set: names the receiver (rank " + std::to_string(rank_) + ") as a member in " + what);
    return false;
  }
  return true;
}

void Agreement::queue(int peer, Kind kind, int round, const Bits& suspects, const Bits& set) {
  const size_t nb = suspects_.size();
  std::vector<uint8_t> b(kHeader + 2 * nb, 0);
  std::memcpy(b.data(), kMagic, 4);
  b[4] = kVersion;
  b[5] = kind;
  put_u32(b.data() + 8, epoch_);
  put_u32(b.data() + 12, static_cast<uint32_t>(round));
  put_u32(b.data() + 16, static_cast<uint32_t>(size_));
  std::memcpy(b.data() + kHeader, suspects.data(), nb);
  std::memcpy(b.data() + kHeader + nb, set.data(), nb);
  sends_.push_back(Send{peer, std::move(b)});
}

void Agreement::queue_decision(int peer, Kind kind, const Decision& d) {
  Bits others = complement(d.set);
  others[rank_ >> 3] = static_cast<uint8_t>(others[rank_ >> 3] & ~(1u << (rank_ & 7)));
  queue(peer, kind, d.round, others, d.set);
}

// The ranks of the group not in b.
Agreement::Bits Agreement::complement(const Bits& b) const {
  Bits c(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i) c[i] = static_cast<uint8_t>(~b[i]);
  if (size_ % 8 != 0) c.back() = static_cast<uint8_t>(c.back() & ((1u << (size_ % 8)) - 1));
  return c;
}

// The lowest rank in b, or size_ if none.
int Agreement::lowest_in(const Bits& b) const {
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] == 0) continue;
    int r = static_cast<int>(i * 8);
    while (!test(b, r)) ++r;
    return r;
  }
  return size_;
}

void Agreement::on_message(int from, const void* data, size_t len, Clock::time_point now) {
  Message m;
  if (!parse(from, data, len, m)) return;
  if (outcome_ != Outcome::kRunning) {
    handle_after_outcome(from, m);
    return;
  }
  if (m.kind == kDecide || m.kind == kDecided || m.kind == kExcludedMsg) {
    Decision d{m.round, std::move(m.set)};
    if (test(suspects_, from)) {
      // Taking it could break the promise made to the coordinator we reported to (see the
      // header); remembered instead.
      if (remember(from, d, foreign_)) put(notify_, from);
      return;
    }
    if (coordinating_ && m.kind == kDecided) {
      // A report: that rank holds a decision. Once every report is in, the latest round's is
      // the one to take.
      if (!remember(from, d, reported_best_)) return;
      put(reported_, from);
      step(now);
      return;
    }
    if (second_set(from, d)) return;
    conclude(std::move(d), from, coordinating_);
    return;
  }
  if (test(suspects_, from)) return;  // a suspect's STATE or COLLECT: it is being counted out
  if (test(m.suspects, rank_)) {
    outcome_ = Outcome::kExcluded;
    excluded_why_ = "rank " + std::to_string(from) + " suspects this rank";
    return;
  }
  for (size_t i = 0; i < suspects_.size(); ++i) {  // m.suspects does not hold this rank
    const auto fresh = static_cast<uint8_t>(m.suspects[i] & ~suspects_[i]);
    if (fresh == 0) continue;
    suspects_[i] = static_cast<uint8_t>(suspects_[i] | fresh);
    for (uint8_t v = fresh; v != 0; v = static_cast<uint8_t>(v & (v - 1))) ++suspect_count_;
  }
  if (m.kind == kState) put(reported_, from);  // round == rank_: we are its coordinator now
  const bool sent = step(now);
  if (m.kind == kCollect && outcome_ == Outcome::kRunning && !(sent && coordinator_ == from)) {
    queue(from, kState, from, suspects_, Bits(suspects_.size(), 0));
  }
}

void Agreement::handle_after_outcome(int from, const Message& m) {
  if (m.kind == kState || m.kind == kCollect) {
    if (decision_.round >= 0) queue_decision(from, kDecided, decision_);
    return;
  }
  Decision d{m.round, m.set};
  if (decision_.round < 0) {  // excluded before learning a set: now we know it
    decision_ = std::move(d);
    members_.clear();
    for (int r = 0; r < size_; ++r) {
      if (test(decision_.set, r)) members_.push_back(r);
    }
    return;
  }
  if (d.set == decision_.set) return;
  if (d.round == decision_.round) {
    reject("set: a second, different set decided in round " + std::to_string(d.round) + " (" + kind_name(m.kind) +
           " from rank " + std::to_string(from) + ")");
    return;
  }
  ++conflicts_;
  if (d.round < decision_.round) {
    // Ours overrules it: the sender and whoever holds it must hear (unless it is the late
    // DECIDE of a coordinator seen dead since: nobody live took that one instead of ours).
    Bits told(suspects_.size(), 0);
    const bool dead = test(dead_, from);
    overrule(d, dead ? -1 : from, !dead, told);
    return;
  }
  lose_to(std::move(d), from);
}

// Sends our decision to `from` and, unless done for lo's round before (or !broadcast), to
// every member of lo, a set ours overrules: a rank that took lo turns kExcluded on hearing.
void Agreement::overrule(const Decision& lo, int from, bool broadcast, Bits& told) {
  if (from >= 0 && !test(told, from) && !test(dead_, from)) {
    queue_decision(from, kDecided, decision_);
    put(told, from);
  }
  if (!broadcast || test(overruled_, lo.round)) return;
  put(overruled_, lo.round);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !test(lo.set, r) || test(told, r) || test(dead_, r)) continue;
    queue_decision(r, kDecided, decision_);
    put(told, r);
  }
}

// Whether d contradicts a decision heard before: one round decides one set (a rejection).
bool Agreement::second_set(int from, const Decision& d) {
  for (const Decision* o : {&foreign_, &reported_best_}) {
    if (o->round == d.round && o->set != d.set) {
      reject("set: a second, different set decided in round " + std::to_string(d.round) + " (from rank " +
             std::to_string(from) + ")");
      return true;
    }
  }
  return false;
}

// Keeps d in best if its round is later. False (a rejection) for a second set of a round.
bool Agreement::remember(int from, const Decision& d, Decision& best) {
  if (second_set(from, d)) return false;
  if (d.round > best.round) best = d;
  return true;
}

void Agreement::conclude(Decision d, int from, bool forward) {
  Decision overruled;
  if (foreign_.round > d.round && foreign_.set != d.set) {
    overruled = std::move(d);
    d = foreign_;  // a later round's decision, heard from a suspect: it wins over d
    ++conflicts_;
  }
  decision_ = std::move(d);
  members_.clear();
  for (int r = 0; r < size_; ++r) {
    if (test(decision_.set, r)) members_.push_back(r);
  }
  wait_deadline_ = Clock::time_point::max();
  collect_deadline_ = Clock::time_point::max();
  if (test(decision_.set, rank_)) {
    outcome_ = Outcome::kDecided;
  } else {
    outcome_ = Outcome::kExcluded;
    excluded_why_ = "not a member of the set decided in round " + std::to_string(decision_.round);
  }
  Bits told(suspects_.size(), 0);
  announce(forward, told);
  if (overruled.round >= 0) overrule(overruled, from, true, told);
  for (int r = 0; r < size_; ++r) {
    if (test(notify_, r) && !test(told, r) && !test(dead_, r)) queue_decision(r, kDecided, decision_);
  }
}

// DECIDE to the other members (a coordinator), EXCLUDED to the non-members (every rank that
// decides: a rank holding a conflicting set hears of it); never to this rank or to ranks seen
// dead.
void Agreement::announce(bool to_members, Bits& told) {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || test(dead_, r)) continue;
    const bool member = test(decision_.set, r);
    if (member && !to_members) continue;
    queue_decision(r, member ? kDecide : kExcludedMsg, decision_);
    put(told, r);
  }
}

void Agreement::lose_to(Decision winner, int from) {
  const Decision old = std::move(decision_);
  const int old_round = old.round;
  decision_ = std::move(winner);
  members_.clear();
  for (int r = 0; r < size_; ++r) {
    if (test(decision_.set, r)) members_.push_back(r);
  }
  if (outcome_ == Outcome::kDecided) {
    excluded_why_ = "this rank took the set decided in round " + std::to_string(old_round) + ", overruled by round " +
                    std::to_string(decision_.round) + "'s";
  }
  outcome_ = Outcome::kExcluded;
  // Whoever took our old set from us (or with us) must hear of the later one.
  Bits told(suspects_.size(), 0);
  if (from >= 0) put(told, from);
  overrule(old, -1, true, told);
}

void Agreement::on_dead(int peer, Clock::time_point now) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    reject("on_dead: rank " + std::to_string(peer) + " is not a peer of rank " + std::to_string(rank_) + " of " +
           std::to_string(size_));
    return;
  }
  put(dead_, peer);
  if (outcome_ != Outcome::kRunning) return;
  suspect(peer);
  step(now);
}

void Agreement::on_tick(Clock::time_point now) {
  if (outcome_ != Outcome::kRunning) return;
  if (coordinating_) {
    if (now >= collect_deadline_) {
      for (int r = 0; r < size_; ++r) {
        if (!test(reported_, r)) suspect(r);  // suspect() skips this rank
      }
    }
  } else if (coordinator_ >= 0 && now >= wait_deadline_) {
    suspect(coordinator_);
  }
  step(now);
}

Clock::time_point Agreement::next_deadline() const {
  if (outcome_ != Outcome::kRunning) return Clock::time_point::max();
  return coordinating_ ? collect_deadline_ : wait_deadline_;
}

// Re-evaluates after an event: who coordinates, what to send, whether to decide. Returns
// whether a STATE went to the coordinator.
bool Agreement::step(Clock::time_point now) {
  if (outcome_ != Outcome::kRunning) return false;
  const int c = lowest_in(complement(suspects_));  // rank_ at the latest
  if (c == rank_) {
    const Bits none(suspects_.size(), 0);
    if (!coordinating_) {
      coordinating_ = true;
      coordinator_ = rank_;
      wait_deadline_ = Clock::time_point::max();
      collect_deadline_ = later(now, suspect_after_);
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ && !test(suspects_, r)) queue(r, kCollect, rank_, suspects_, none);
      }
    }
    for (size_t i = 0; i < suspects_.size(); ++i) {  // every non-suspect reported?
      auto waiting = static_cast<uint8_t>(~(suspects_[i] | reported_[i]));
      if (i == static_cast<size_t>(rank_ >> 3)) waiting = static_cast<uint8_t>(waiting & ~(1u << (rank_ & 7)));
      if (i == suspects_.size() - 1 && size_ % 8 != 0) {
        waiting = static_cast<uint8_t>(waiting & ((1u << (size_ % 8)) - 1));
      }
      if (waiting != 0) return false;
    }
    if (reported_best_.round >= 0) {
      conclude(reported_best_, -1, true);  // some rank took a decision already: it stands
      return false;
    }
    Decision d;
    d.round = rank_;
    d.set = complement(suspects_);
    conclude(std::move(d), -1, true);
    return false;
  }
  if (c != coordinator_) {
    coordinator_ = c;
    const Clock::duration wait =
        suspect_after_ > Clock::duration::max() / 2 ? Clock::duration::max() : 2 * suspect_after_;
    wait_deadline_ = later(now, wait);
  } else if (suspect_count_ == state_suspects_) {
    return false;
  }
  state_suspects_ = suspect_count_;
  queue(c, kState, c, suspects_, Bits(suspects_.size(), 0));
  return true;
}

std::string Agreement::ranks_text(const Bits& b) const {
  std::string s = "{";
  int ranges = 0;
  int count = 0;
  for (int r = 0; r < size_; ++r) {
    if (!test(b, r)) continue;
    int e = r;
    while (e + 1 < size_ && test(b, e + 1)) ++e;
    count += e - r + 1;
    if (ranges < 32) {
      if (ranges > 0) s += ",";
      s += std::to_string(r);
      if (e > r) s += "-" + std::to_string(e);
    }
    ++ranges;
    r = e;
  }
  if (ranges > 32) s += ",...";
  s += "}";
  if (ranges > 32) s += " (" + std::to_string(count) + " ranks)";
  return s;
}

std::string Agreement::describe() const {
  std::string s = "agreement of rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ", epoch " +
                  std::to_string(epoch_) + ": ";
  if (outcome_ == Outcome::kRunning) {
    s += "running, coordinator " + std::to_string(coordinator_);
    if (coordinating_) {
      int waiting = 0;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ && !test(suspects_, r) && !test(reported_, r)) ++waiting;
      }
      s += " (this rank, waiting for " + std::to_string(waiting) + " reports)";
    }
  } else if (outcome_ == Outcome::kDecided) {
    s += "decided " + ranks_text(decision_.set) + " (round " + std::to_string(decision_.round) + ")";
  } else {
    s += "excluded: " + excluded_why_;
    if (decision_.round >= 0) s += "; the group is " + ranks_text(decision_.set);
  }
  s += ", suspects " + ranks_text(suspects_);
  if (conflicts_ > 0) s += ", " + std::to_string(conflicts_) + " conflicting decisions seen";
  return s;
}

}  // namespace gw::transport
