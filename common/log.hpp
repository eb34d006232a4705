// Logging in the manner of NCCL_DEBUG (docs/configuration.md, "Diagnostics"):
//   GW_DEBUG=NONE|VERSION|WARN|INFO|TRACE   (WARN when unset; VERSION prints only the banner)
//   GW_DEBUG_SUBSYS=INIT,COLL,... or ^TUNE,... (which INFO/TRACE lines; WARN is never filtered)
//   GW_DEBUG_FILE=path with %h (host) and %p (pid)   (else stderr)
// Each line reads "2026-01-31 12:00:00.123456 host:pid:rank gradwire LEVEL SUBSYS message".
#pragma once

#include <cstdint>

namespace gw::log {

enum class Level : int { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kTrace = 4 };

// One bit each; the names GW_DEBUG_SUBSYS takes are in log.cpp (kSubsysNames).
enum Subsys : uint32_t {
  kInit = 1u << 0,       // communicator and library set-up, versions
  kBootstrap = 1u << 1,  // rendezvous, launcher environment, unique ids
  kTransport = 1u << 2,  // UCX workers, endpoints, connections, peers
  kColl = 1u << 3,       // collective calls and their algorithms
  kP2p = 1u << 4,        // point-to-point sends and receives
  kTune = 1u << 5,       // the policy and the tuner's measured choices
  kCodec = 1u << 6,      // codecs and error feedback
  kNccl = 1u << 7,       // the NCCL path for device buffers
  kEnv = 1u << 8,        // environment variables
  kAll = ~0u,
};

Level level();
inline bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(level()); }
// Whether a line of this level and subsystem is printed (WARN lines are, whatever the subsystem).
bool enabled(Level l, Subsys s);
// The rank shown in this process's lines (-1 until a communicator knows it).
void set_rank(int rank);
void write(Level l, Subsys s, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// Once per process, when its first communicator or unique id is made: the version banner
// (GW_DEBUG=VERSION, INFO or TRACE) and a warning for each unknown GW_* variable.
void on_first_init();
// "gradwire 0.1.0 (CUDA no, NCCL module no); UCX 1.13.1; NCCL 2.21.5 (loaded)": what is built
// and what this process runs with. NCCL appears only when the process has loaded it.
const char* version_banner();

namespace detail {
void write_banner(const char* text);  // at VERSION, INFO and TRACE
}

}  // namespace gw::log

#define GW_LOG(lvl, sub, ...)                                               \
  do {                                                                      \
    if (::gw::log::enabled(::gw::log::Level::lvl, ::gw::log::sub))          \
      ::gw::log::write(::gw::log::Level::lvl, ::gw::log::sub, __VA_ARGS__); \
  } while (0)
#define GW_WARN(sub, ...) GW_LOG(kWarn, sub, __VA_ARGS__)
#define GW_INFO(sub, ...) GW_LOG(kInfo, sub, __VA_ARGS__)
#define GW_TRACE(sub, ...) GW_LOG(kTrace, sub, __VA_ARGS__)
