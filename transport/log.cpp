#include "transport/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace gw::log {
namespace {

std::atomic<int> g_rank{-1};

Level parse_level() {
  const char* v = std::getenv("GW_DEBUG");
  if (v == nullptr || *v == '\0') return Level::kWarn;
  if (strcasecmp(v, "NONE") == 0) return Level::kNone;
  if (strcasecmp(v, "INFO") == 0) return Level::kInfo;
  if (strcasecmp(v, "TRACE") == 0) return Level::kTrace;
  return Level::kWarn;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kTrace: return "TRACE";
    default: return "";
  }
}

}  // namespace

Level level() {
  static const Level l = parse_level();
  return l;
}

void set_rank(int rank) { g_rank.store(rank); }

void write(Level l, const char* fmt, ...) {
  static char host[64] = {0};
  static std::once_flag once;
  std::call_once(once, [] {
    if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    char* dot = std::strchr(host, '.');
    if (dot != nullptr) *dot = '\0';
  });
  char line[1024];
  int n = std::snprintf(line, sizeof line, "%s:%d:%d gradwire %s ", host, static_cast<int>(getpid()),
                        g_rank.load(), level_name(l));
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  const int m = std::vsnprintf(line + n, sizeof line - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m > 0 ? static_cast<size_t>(m) : 0);
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  // One write per line so that ranks sharing a terminal do not interleave mid-line.
  ssize_t ignored = ::write(2, line, len);
  (void)ignored;
}

}  // namespace gw::log
