// What every lossy all-reduce, on host or device buffers, follows about its random streams
// and its error-feedback state. A host algorithm and its device twin take these from here
// rather than computing them, so that their messages cannot drift apart.
#pragma once

#include <cstdint>
#include <cstring>

#include "collectives/common/context.hpp"
#include "gradwire/communicator.hpp"
#include "gradwire/ef_state.hpp"

namespace gw::coll {

// The step a call's random streams are keyed by: the EF state's step when there is one (a
// restored checkpoint replays the same bits), else the call's sequence number; the piece of
// a call cut into pieces (Context::piece) is mixed in, so that pieces draw different words.
// Ef: ErrorFeedback or DeviceEfState.
template <class Ef>
uint64_t call_stream_step(const Context& c, const Ef* ef) {
  return c.stream_step(ef != nullptr ? ef->step() : c.seq);
}

// Every message of a call is keyed from the step the state had when the call began; the
// state advances once, when the call has succeeded (a failed call leaves it where it was).
template <class Ef>
void advance_after_call(Ef* ef) {
  if (ef != nullptr) ef->advance();
}

// The segment (of a partition into p) whose owner-side residual rank keeps in a compressed
// all-reduce that has one: scatter-reduce owns segment rank, the compressed ring rank + 1.
inline uint64_t owner_segment(Algo a, int rank, int p) {
  return static_cast<uint64_t>(a == Algo::kCompressedRing ? (rank + 1) % p : rank);
}

// Moves ef's owner-side residual (len floats) into ef's residual from element start, and
// clears it: the error of a sum this rank encoded reaches that sum again with this rank's
// next contribution. (The device backend's fold_owner is the same on device memory.)
inline void fold_owner_residual(ErrorFeedback& ef, uint64_t start, size_t len) {
  float* res = ef.residual() + start;
  float* own = ef.owner_residual(len);
  for (size_t i = 0; i < len; ++i) res[i] += own[i];
  if (len > 0) std::memset(own, 0, len * sizeof(float));
}

}  // namespace gw::coll
