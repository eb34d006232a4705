#include "collectives/observability/timeline.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.hpp"

namespace gw::coll {

namespace {
thread_local Timeline* t_current = nullptr;
}

std::string Timeline::path_from_env(int rank, int nranks) {
  const char* env = std::getenv("GW_TIMELINE");
  if (env == nullptr || *env == '\0') return {};
  std::string in(env), out;
  bool has_rank = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 1 < in.size() && (in[i + 1] == 'r' || in[i + 1] == 'p')) {
      out += in[i + 1] == 'r' ? std::to_string(rank) : std::to_string(getpid());
      has_rank = has_rank || in[i + 1] == 'r';
      ++i;
    } else {
      out += in[i];
    }
  }
  if (!has_rank && nranks > 1) {
    const size_t slash = out.rfind('/');
    const size_t dot = out.rfind('.');
    const std::string tag = ".rank" + std::to_string(rank);
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
      out.insert(dot, tag);
    } else {
      out += tag;
    }
  }
  return out;
}

Timeline::Timeline(std::string path, int rank) : path_(std::move(path)), rank_(rank), origin_(Clock::now()) {}

void Timeline::span(const char* name, const char* cat, Clock::time_point t0, Clock::time_point t1, std::string args) {
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  const auto ns = [&](Clock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
  events_.push_back(Event{name, cat, ns(t0 - origin_), ns(t1 - t0), std::move(args)});
}

Status Timeline::write() const {
  if (path_.empty()) return Status::ok();
  FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    return Status(Code::kSystem, "GW_TIMELINE: cannot write " + path_ + ": " + std::strerror(errno));
  }
  // Chrome's trace format counts in microseconds; fractions keep the nanoseconds.
  std::fprintf(f,
               "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"rank\": %d, \"dropped_events\": %llu},\n"
               "\"traceEvents\": [\n",
               rank_, static_cast<unsigned long long>(dropped_));
  std::fprintf(f,
               "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"gradwire rank %d\"}}",
               rank_, rank_);
  for (const Event& e : events_) {
    std::fprintf(f,
                 ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"ts\": %.3f, "
                 "\"dur\": %.3f, \"args\": {%s}}",
                 e.name, e.cat, rank_, static_cast<double>(e.ts_ns) / 1e3, static_cast<double>(e.dur_ns) / 1e3,
                 e.args.c_str());
  }
  std::fprintf(f, "\n]}\n");
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok) return Status(Code::kSystem, "GW_TIMELINE: writing " + path_ + " failed");
  GW_INFO(kColl, "timeline of %zu spans written to %s", events_.size(), path_.c_str());
  return Status::ok();
}

Timeline* Timeline::current() { return t_current; }

Timeline::Active::Active(Timeline* t) : prev_(t_current) { t_current = (t != nullptr && t->enabled()) ? t : nullptr; }

Timeline::Active::~Active() { t_current = prev_; }

}  // namespace gw::coll
