#include "common/log.hpp"

#include <fcntl.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace gw::log {
namespace {

struct SubsysName {
  const char* name;
  Subsys bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit}, {"BOOTSTRAP", kBootstrap}, {"TRANSPORT", kTransport}, {"COLL", kColl}, {"P2P", kP2p},
    {"TUNE", kTune}, {"CODEC", kCodec},         {"NCCL", kNccl},           {"ENV", kEnv},   {"ALL", kAll},
};

std::atomic<int> g_rank{-1};

// What GW_DEBUG, GW_DEBUG_SUBSYS and GW_DEBUG_FILE say, read once. Complaints about the
// values themselves are kept until the first line can be written.
struct Settings {
  Level level = Level::kWarn;
  uint32_t mask = kAll;
  int fd = 2;
  std::string complaints;  // lines to write once, at WARN
};

Level parse_level(const char* v, std::string& complaints) {
  if (v == nullptr || *v == '\0') return Level::kWarn;
  static const struct {
    const char* name;
    Level level;
  } kLevels[] = {{"NONE", Level::kNone},
                 {"VERSION", Level::kVersion},
                 {"WARN", Level::kWarn},
                 {"INFO", Level::kInfo},
                 {"TRACE", Level::kTrace}};
  for (const auto& l : kLevels) {
    if (strcasecmp(v, l.name) == 0) return l.level;
  }
  complaints += "GW_DEBUG='" + std::string(v) + "' is not NONE, VERSION, WARN, INFO or TRACE; using WARN\n";
  return Level::kWarn;
}

// NCCL's rule: names separated by commas; a leading '^' turns the list into the subsystems
// left out.
uint32_t parse_mask(const char* v, std::string& complaints) {
  if (v == nullptr || *v == '\0') return kAll;
  std::string s(v);
  const bool invert = s[0] == '^';
  if (invert) s.erase(0, 1);
  uint32_t mask = 0;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    const std::string name = s.substr(start, end - start);
    bool known = false;
    for (const SubsysName& n : kSubsysNames) {
      if (strcasecmp(name.c_str(), n.name) == 0) {
        mask |= n.bit;
        known = true;
      }
    }
    if (!known && !name.empty()) {
      complaints += "GW_DEBUG_SUBSYS: unknown subsystem '" + name +
                    "' ignored (known: INIT, BOOTSTRAP, TRANSPORT, COLL, P2P, TUNE, CODEC, NCCL, ENV, ALL)\n";
    }
    start = end + 1;
  }
  return invert ? ~mask : mask;
}

std::string host_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  char* dot = std::strchr(host, '.');
  if (dot != nullptr) *dot = '\0';
  return host;
}

// %h: the host, %p: the pid, %%: a percent sign.
std::string expand_path(const char* pattern) {
  std::string out;
  for (const char* p = pattern; *p != '\0'; ++p) {
    if (p[0] == '%' && p[1] == 'h') {
      out += host_name();
      ++p;
    } else if (p[0] == '%' && p[1] == 'p') {
      out += std::to_string(getpid());
      ++p;
    } else if (p[0] == '%' && p[1] == '%') {
      out += '%';
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

Settings read_settings() {
  Settings s;
  s.level = parse_level(std::getenv("GW_DEBUG"), s.complaints);
  s.mask = parse_mask(std::getenv("GW_DEBUG_SUBSYS"), s.complaints);
  const char* file = std::getenv("GW_DEBUG_FILE");
  if (file != nullptr && *file != '\0' && s.level != Level::kNone) {
    const std::string path = expand_path(file);
    // Appended to, never truncated: ranks that share one file keep each other's lines.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      s.fd = fd;
    } else {
      s.complaints += "GW_DEBUG_FILE: cannot open '" + path + "' (" + std::strerror(errno) + "); logging to stderr\n";
    }
  }
  return s;
}

const Settings& settings() {
  static const Settings s = read_settings();
  return s;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::kVersion: return "VERSION";
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kTrace: return "TRACE";
    default: return "";
  }
}

const char* subsys_name(Subsys s) {
  for (const SubsysName& n : kSubsysNames) {
    if (n.bit == s) return n.name;
  }
  return "ALL";
}

// One write per line so that ranks sharing a terminal or a file do not interleave mid-line.
void emit(int fd, const char* level, const char* subsys, const char* text) {
  static const std::string host = host_name();
  char stamp[40] = "";
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm parts{};
  localtime_r(&tv.tv_sec, &parts);
  const size_t k = std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &parts);
  std::snprintf(stamp + k, sizeof stamp - k, ".%06ld", static_cast<long>(tv.tv_usec));
  char line[1280];
  int n = std::snprintf(line, sizeof line, "%s %s:%d:%d gradwire %s %s %s", stamp, host.c_str(),
                        static_cast<int>(getpid()), g_rank.load(), level, subsys, text);
  if (n < 0) return;
  size_t len = static_cast<size_t>(n);
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  ssize_t ignored = ::write(fd, line, len);
  (void)ignored;
}

// The settings' own complaints, once, before the first line (or at the first init).
void flush_complaints() {
  static std::once_flag once;
  std::call_once(once, [] {
    const Settings& s = settings();
    if (s.level < Level::kWarn || s.complaints.empty()) return;
    size_t start = 0;
    while (start < s.complaints.size()) {
      const size_t end = s.complaints.find('\n', start);
      emit(s.fd, "WARN", "ENV", s.complaints.substr(start, end - start).c_str());
      start = end + 1;
    }
  });
}

}  // namespace

Level level() { return settings().level; }

bool enabled(Level l, Subsys s) {
  const Settings& st = settings();
  if (static_cast<int>(l) > static_cast<int>(st.level)) return false;
  return l <= Level::kWarn || (st.mask & s) != 0;
}

void set_rank(int rank) { g_rank.store(rank); }

void write(Level l, Subsys s, const char* fmt, ...) {
  flush_complaints();
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  const int m = std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  emit(settings().fd, level_name(l), subsys_name(s), text);
}

namespace detail {
void write_banner(const char* text) {
  flush_complaints();
  // NCCL's rule: VERSION prints the banner alone, INFO and TRACE print it first; WARN does not.
  if (level() == Level::kVersion || level() >= Level::kInfo) emit(settings().fd, "VERSION", "INIT", text);
}
}  // namespace detail

}  // namespace gw::log
