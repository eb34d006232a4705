// Logging to stderr, set by GW_DEBUG=NONE|WARN|INFO|TRACE (WARN when unset). Each line reads
// "host:pid:rank gradwire LEVEL message", in the manner of NCCL_DEBUG.
#pragma once

#include <cstdarg>

namespace gw::log {

enum class Level : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

Level level();
inline bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(level()); }
// The rank shown in this process's lines (-1 until a communicator knows it).
void set_rank(int rank);
void write(Level l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace gw::log

#define GW_LOG(lvl, ...)                                                   \
  do {                                                                     \
    if (::gw::log::enabled(::gw::log::Level::lvl)) ::gw::log::write(::gw::log::Level::lvl, __VA_ARGS__); \
  } while (0)
#define GW_WARN(...) GW_LOG(kWarn, __VA_ARGS__)
#define GW_INFO(...) GW_LOG(kInfo, __VA_ARGS__)
#define GW_TRACE(...) GW_LOG(kTrace, __VA_ARGS__)
