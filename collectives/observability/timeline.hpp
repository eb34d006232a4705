// GW_TIMELINE=path: a Chrome trace (JSON, opens in Perfetto or chrome://tracing) of every
// collective a communicator runs, with the encode, transfer (waiting on the network) and
// decode spans of each chunk inside it. One file per rank: "%r" in the path becomes the rank
// and "%p" the process id; a path with no "%r" gets ".rank<r>" before its extension when the
// communicator has more than one rank. Written when the communicator is destroyed.
//
// Recording costs two clock reads per span, on the progress thread only; the spans of one
// communicator are kept in memory up to kMaxEvents (later ones are counted, not kept).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gradwire/status.hpp"

namespace gw::coll {

class Timeline {
 public:
  static constexpr size_t kMaxEvents = size_t{1} << 21;

  // Empty when GW_TIMELINE is unset.
  static std::string path_from_env(int rank, int nranks);

  explicit Timeline(std::string path, int rank);
  bool enabled() const { return !path_.empty(); }

  using Clock = std::chrono::steady_clock;
  // A finished span: name ("encode", "transfer", "decode", or the collective's kind), its
  // category, and args as a JSON object body ("\"count\": 12") or empty.
  void span(const char* name, const char* cat, Clock::time_point t0, Clock::time_point t1, std::string args = {});
  // Writes the trace file; OK when disabled.
  Status write() const;

  // The timeline the progress thread is recording into, for the spans of the running
  // collective (set by Active, read by TimedSpan); null when none.
  static Timeline* current();
  class Active {
   public:
    explicit Active(Timeline* t);
    ~Active();
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;

   private:
    Timeline* prev_;
  };

 private:
  struct Event {
    const char* name;
    const char* cat;
    int64_t ts_ns;
    int64_t dur_ns;
    std::string args;
  };
  std::string path_;
  int rank_;
  Clock::time_point origin_;
  std::vector<Event> events_;
  uint64_t dropped_ = 0;
};

// Records its scope as a span of the current timeline (nothing when there is none).
class TimedSpan {
 public:
  TimedSpan(const char* name, const char* cat) : t_(Timeline::current()), name_(name), cat_(cat) {
    if (t_ != nullptr) t0_ = Timeline::Clock::now();
  }
  ~TimedSpan() {
    if (t_ != nullptr) t_->span(name_, cat_, t0_, Timeline::Clock::now());
  }
  TimedSpan(const TimedSpan&) = delete;
  TimedSpan& operator=(const TimedSpan&) = delete;

 private:
  Timeline* t_;
  const char* name_;
  const char* cat_;
  Timeline::Clock::time_point t0_;
};

}  // namespace gw::coll
