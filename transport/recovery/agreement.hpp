// The survivors of a failed group agree on who is alive (what gw_comm_shrink runs, like ULFM's
// MPIX_Comm_shrink): a pure state machine, no transport, no clock of its own. The caller feeds
// it messages, deaths and ticks, sends what take_sends() returns, and stops waiting once
// outcome() is no longer kRunning. It keeps answering afterwards (late peers get the decision).
//
// Protocol: one coordinator phase, with decided answers and exclusion notices.
// - Every rank keeps `suspects`, which only grows and never holds itself: dead[] at
//   construction, on_dead() (certain), timeouts (a frozen rank looks dead), and the suspects
//   every STATE and COLLECT carries. The coordinator is the lowest non-suspect.
// - A participant sends STATE to its coordinator whenever that changes or its suspects grow,
//   and answers COLLECT with STATE. It waits 2 * suspect_after for a decision (restarted when
//   the coordinator changes), then suspects the coordinator. STATE or COLLECT from a rank
//   that suspects this one excludes this one (suspicion is contagious).
// - A coordinator sends COLLECT to every non-suspect and waits for a report from each (ranks
//   newly suspected need not report); suspect_after after it became coordinator (a fixed
//   deadline: later suspicions do not restart it) it suspects those that did not report. If a
//   report was DECIDED, it takes the latest round's set; else members = its non-suspects. Then
//   DECIDE to each other member, EXCLUDED to each non-member.
// - A decision's round is the rank that made it: always its set's lowest member.
// - Decided and excluded ranks answer STATE and COLLECT with DECIDED(set).
//
// Changes to the protocol as first drafted, each needed by a case the simulator in
// tests/test_agreement.cpp found:
// 1. An undecided rank ignores DECIDE, DECIDED and EXCLUDED from a rank it suspects (the
//    draft took them from anyone). Having reported to coordinator c it suspects every rank
//    below c; taking a decision of one of those (a DECIDE still in flight from a coordinator
//    that crashed) would give a second set beside the one c decides from that report. Such a
//    decision is remembered: its sender is told ours, and one of a later round wins over it.
// 2. Two different sets can only come from false suspicions (timeouts). The later round wins
//    (the draft kept the first set and counted a rejection): a rank holding the earlier set
//    turns kExcluded when it hears of the later one; and a rank that sees a set lose (its
//    own or another) sends the winner to the loser's members, once per round, so that the
//    news does not depend on one rank that may crash. Two sets of one round are a protocol
//    violation: rejected.
// 3. Every rank that decides sends EXCLUDED to the non-members, not only the coordinator, so
//    a conflicting set is found even when the coordinator that decided it crashed before its
//    notices left. A coordinator takes a reported decision once all reports are in (the latest
//    round's), not the first one that arrives.
// 4. Nothing is sent to ranks this rank saw die (dead[], on_dead()).
//
// Guarantees:
// - Agreement: the live ranks whose outcome is kDecided hold the same members once the
//   messages between them have been delivered. kExcluded is final, but a rank may hold
//   kDecided and later turn kExcluded (after a false suspicion let two coordinators decide):
//   the caller must treat that as having been expelled from the new group. Without false
//   suspicions this follows from change 1; with them it rests on the notices of changes 2
//   and 3 (checked over millions of simulated runs, not proven): crashes of every rank that
//   knows of a conflict, each at the wrong moment, could still leave two sets standing.
// - If no rank is falsely suspected (every rank that goes silent has died, messages take well
//   under suspect_after, all ranks start within it), no live rank is excluded: every live
//   rank decides the same set, and is in it.
// - A timeout means "silent too long", not "dead": the rank is counted out and, if it lives,
//   is excluded once it hears from the group.
// - A rank that died after it reported may be a member (so may a coordinator that died after
//   deciding): the caller finds out when it connects. No rank every rank knew dead at the
//   start is a member. Every live rank finishes within about (size + 1) * 2 * suspect_after
//   after the last failure, plus message delays.
//
// Wire format (little-endian), exactly 20 + 2 * ceil(size / 8) bytes:
//   "GWAG", u8 version = 1, u8 kind (STATE 1, COLLECT 2, DECIDE 3, DECIDED 4, EXCLUDED 5),
//   u16 reserved = 0, u32 epoch, u32 round, u32 size, suspects bitmap, set bitmap (bit r of
//   byte r / 8 is rank r; bits past size are 0). STATE's round is its coordinator (below the
//   sender), COLLECT's its sender; both carry an empty set and suspect every rank below the
//   round. A decision's round is its set's lowest member, and its suspects are every
//   non-member but the sender. Everything is checked; a bad message is counted (rejected(),
//   last_rejection(), naming the field) and changes nothing. A message of another epoch is
//   dropped and counted apart (dropped_stale()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace gw::transport {

class Agreement {
 public:
  struct Send {
    int peer;
    std::vector<uint8_t> bytes;
  };
  enum class Outcome { kRunning, kDecided, kExcluded };

  // rank of size (1 <= size <= 65536); epoch: the new epoch, carried in every message (messages
  // of another epoch are dropped). dead[r]: ranks this rank already knows are dead (dead[rank]
  // is ignored; missing entries are false). suspect_after: how long a silent rank is waited for
  // before it is counted out. Invalid arguments give an agreement that is kExcluded at once
  // (last_rejection() says why).
  Agreement(int rank, int size, uint32_t epoch, std::vector<bool> dead, Clock::duration suspect_after,
            Clock::time_point now);

  // Messages to send now (after construction and after every event); the queue is emptied.
  std::vector<Send> take_sends();
  // A message from rank `from`; the bytes are untrusted.
  void on_message(int from, const void* data, size_t len, Clock::time_point now);
  // The transport saw peer die (certain).
  void on_dead(int peer, Clock::time_point now);
  // Fires the timeouts that are due.
  void on_tick(Clock::time_point now);
  // When on_tick next has something to do (time_point::max() if nothing).
  Clock::time_point next_deadline() const;

  Outcome outcome() const { return outcome_; }
  // Once decided or excluded: the agreed group, sorted global ranks (empty when this rank was
  // excluded without learning the group's set).
  const std::vector<int>& members() const { return members_; }
  // One line for error messages: outcome, coordinator, suspects.
  std::string describe() const;

  // Invalid messages (and calls) are counted and described, never trusted.
  size_t rejected() const { return rejected_; }
  const std::string& last_rejection() const { return last_rejection_; }
  // Well-formed messages of another epoch, dropped.
  size_t dropped_stale() const { return stale_; }

 private:
  enum Kind : uint8_t { kState = 1, kCollect = 2, kDecide = 3, kDecided = 4, kExcludedMsg = 5 };
  using Bits = std::vector<uint8_t>;  // ceil(size / 8) bytes, bit r of byte r / 8 is rank r
  struct Decision {
    int round = -1;  // the rank that decided it: the set's lowest member; -1 when none
    Bits set;
  };
  struct Message {
    Kind kind;
    int round;
    Bits suspects;
    Bits set;
  };

  bool test(const Bits& b, int r) const { return ((b[r >> 3] >> (r & 7)) & 1) != 0; }
  void put(Bits& b, int r) const { b[r >> 3] = static_cast<uint8_t>(b[r >> 3] | (1u << (r & 7))); }
  bool suspect(int r);  // whether it is new
  Bits complement(const Bits& b) const;
  int lowest_in(const Bits& b) const;
  bool parse(int from, const void* data, size_t len, Message& m);
  void reject(std::string why);
  void queue(int peer, Kind kind, int round, const Bits& suspects, const Bits& set);
  void queue_decision(int peer, Kind kind, const Decision& d);
  void handle_after_outcome(int from, const Message& m);
  bool second_set(int from, const Decision& d);
  bool remember(int from, const Decision& d, Decision& best);
  void conclude(Decision d, int from, bool forward);
  void lose_to(Decision winner, int from);
  void overrule(const Decision& lo, int from, bool broadcast, Bits& told);
  void announce(bool to_members, Bits& told);
  bool step(Clock::time_point now);
  std::string ranks_text(const Bits& b) const;

  int rank_ = 0;
  int size_ = 1;
  uint32_t epoch_ = 0;
  Clock::duration suspect_after_{};
  Bits suspects_;
  Bits dead_;               // seen die: no notices go there
  Bits reported_;           // while coordinating: who sent STATE
  Bits notify_;             // ranks whose decisions were ignored (suspected senders): told ours later
  Bits overruled_;          // rounds whose sets' members were told a later round's set
  Decision foreign_;        // the latest-round decision among those
  Decision reported_best_;  // while coordinating: the latest-round decision reported (DECIDED)
  int coordinator_ = -1;
  bool coordinating_ = false;
  size_t state_suspects_ = 0;  // suspects counted when the last STATE went to coordinator_
  size_t suspect_count_ = 0;
  Clock::time_point wait_deadline_ = Clock::time_point::max();
  Clock::time_point collect_deadline_ = Clock::time_point::max();
  Outcome outcome_ = Outcome::kRunning;
  Decision decision_;  // kDecided: ours; kExcluded: the winning set when known
  std::string excluded_why_;
  std::vector<int> members_;
  std::vector<Send> sends_;
  size_t rejected_ = 0;
  size_t stale_ = 0;
  size_t conflicts_ = 0;
  std::string last_rejection_;
};

}  // namespace gw::transport
