// Whole-buffer blocking read and write on a pipe or socket, for the forking launchers (perf
// --np and the multi-process tests) that hand a unique id or an address to their children.
// Header-only, so that tools linked only to the public library can use it too.
#pragma once

#include <unistd.h>

#include <cstddef>

namespace gw::bootstrap {

inline bool write_all(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// False on end of file or error before n bytes arrived.
inline bool read_all(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace gw::bootstrap
