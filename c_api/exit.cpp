#include "c_api/exit.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace gw::capi {
namespace {

struct Open {
  std::mutex mu;
  std::vector<gw_comm_s*> handles;  // in order of creation
  pid_t owner = 0;                  // the process that made them
};

// Never destroyed: the exit handler may run after static destructors of this library.
Open& open_handles() {
  static Open* o = new Open;
  return *o;
}

void close_open_at_exit() {
  Open& o = open_handles();
  // A forked child inherits the list but not the communicators' threads: it must leave them be.
  if (getpid() != o.owner) return;
  for (;;) {
    gw_comm_s* h = nullptr;
    {
      std::lock_guard<std::mutex> lock(o.mu);
      if (o.handles.empty()) return;
      h = o.handles.back();
      o.handles.pop_back();
    }
    h->comm.reset();  // the destructor: queued work finishes, the transport says goodbye
  }
}

}  // namespace

gw_comm_s* adopt(std::unique_ptr<Communicator> comm) {
  Open& o = open_handles();
  auto* h = new gw_comm_s{std::move(comm)};
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(close_open_at_exit); });
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.owner != getpid()) {
    o.handles.clear();  // a forked child's own list starts empty
    o.owner = getpid();
  }
  o.handles.push_back(h);
  return h;
}

void release(gw_comm_s* handle) {
  if (handle == nullptr) return;
  {
    Open& o = open_handles();
    std::lock_guard<std::mutex> lock(o.mu);
    auto it = std::find(o.handles.begin(), o.handles.end(), handle);
    if (it != o.handles.end()) o.handles.erase(it);
  }
  delete handle;
}

}  // namespace gw::capi
