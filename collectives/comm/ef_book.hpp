// What the communicator knows about the error-feedback states its all-reduces were given
// (gw::ErrorFeedback on host buffers, DeviceEfState on device buffers), kept in one place:
// for each state, keyed by its address, whether a compressed call left a residual that no
// dense call has sent yet, whether the hierarchical path or a flat call filled it last, and
// which flat algorithm filled its owner-side residual. The rules that read these are the
// methods below. Progress thread only.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <vector>

#include "gradwire/communicator.hpp"
#include "gradwire/ef_state.hpp"
#include "gradwire/status.hpp"

namespace gw {
class DeviceEfState;
}

namespace gw::coll {

class DeviceBackend;

class EfBook {
 public:
  // A dense call that the tuner decided sends ef's residual first when a compressed call
  // filled it and no dense call has sent it since: no gradient stays behind.
  bool needs_flush(const void* ef) const;
  // After an all-reduce on ef ran `ran`, whatever its outcome: a compressed call fills the
  // residual; a dense call that flushed it (flushed) leaves it empty.
  void after_allreduce(const void* ef, Algo ran, bool flushed);

  // A residual filled by a flat compressed call covers elements outside this rank's shard:
  // the first hierarchical call after one sends it whole (hierarchical_allreduce.cpp's
  // flush_ef). Whether the hierarchical path filled ef's residual last:
  bool hier_filled(const void* ef) const;
  void mark_hier_filled(const void* ef);  // a hierarchical call with EF on ef succeeded
  void mark_flat_filled(const void* ef);  // a flat compressed call runs on ef

  // Host states, before a compressed ring, scatter-reduce or hierarchical call (next) with
  // ef on n elements: an owner-side residual that another of them left belongs to another
  // segment (the tuner weighs them against each other). It is the error of the sum this rank
  // encoded for that segment, so it moves into this rank's own residual there and reaches the
  // sum with the next contribution: nothing is lost or applied to the wrong elements.
  // The same holds across a shrink: the layout (rank of p) that filled the owner-side residual
  // is kept with it, so the first call on the shrunk communicator folds it back from there.
  void rehome_owner_residual(ErrorFeedback& ef, Algo next, size_t n, int rank, int p);
  // The same for a device state before a device scatter-reduce (the only device algorithm
  // with an owner-side residual), on the device backend's stream; an owner residual of
  // another layout (a shrink changed rank or size) would otherwise be dropped or, when its
  // length happened to match, added to the wrong elements.
  Status rehome_device_owner_residual(DeviceEfState& ef, DeviceBackend& dev, size_t n, int rank, int p);
  // What a shrunk communicator starts from: every state's entry, with the layout it was
  // filled in (no residual moves until a call uses the state).
  EfBook inherited() const;

  // The hierarchical all-reduce's views of a caller's state (hierarchical_allreduce.cpp), one
  // per piece of this rank's shard. Scratch, not per state: a call sets a view's step and
  // folds its owner-side residual back into the caller's state before it returns, so no
  // view carries anything from one call to the next.
  std::vector<ErrorFeedback>* hier_views() { return &hier_views_; }

 private:
  struct Entry {
    bool unflushed = false;         // a compressed call filled the residual; no dense call sent it
    bool hier_filled = false;       // the hierarchical path filled the residual last
    Algo owner_algo = Algo::kAuto;  // the call that last filled the owner residual (kAuto: none)
    int owner_rank = -1;            // ...on this rank of owner_p (another communicator's, after a shrink)
    int owner_p = 0;
  };
  const Entry* find(const void* ef) const;

  std::unordered_map<const void*, Entry> states_;
  std::vector<ErrorFeedback> hier_views_;
};

}  // namespace gw::coll
