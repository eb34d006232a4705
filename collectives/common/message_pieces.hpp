// A variable-length message of at most cap bytes sent as fixed pieces: each at most a
// pipelining chunk, so that it goes eagerly into a receive posted for it (a larger message
// waits for a rendezvous handshake, which a receiver busy encoding answers only when it is
// done). Every sender posts all pieces of the cap, those past its message's end empty, so
// senders and receivers agree on the count without exchanging lengths.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/common/context.hpp"

namespace gw::coll {

struct MessagePieces {
  size_t piece;
  uint32_t count;

  static MessagePieces for_cap(size_t cap, size_t chunk_bytes) {
    const size_t piece = std::max<size_t>({chunk_bytes, (cap + kMaxChunks - 2) / (kMaxChunks - 1), 1});
    return MessagePieces{piece, static_cast<uint32_t>(std::max<size_t>(1, (cap + piece - 1) / piece))};
  }
  size_t offset(uint32_t j) const { return static_cast<size_t>(j) * piece; }
  // Bytes of piece j of a message of total bytes.
  size_t length(size_t total, uint32_t j) const {
    const size_t start = offset(j);
    return start >= total ? 0 : std::min(piece, total - start);
  }
  // The length of rank r's message from its finished pieces ops[0..count), which must be full
  // pieces, then at most one short one, then empty ones: anything else leaves a gap of stale
  // bytes inside the message.
  Result<size_t> assembled(const transport::Op* ops, size_t cap, int r) const {
    size_t total = 0;
    bool ended = false;
    for (uint32_t j = 0; j < count; ++j) {
      if (ended && ops[j].bytes > 0) {
        return Status(Code::kRemote, "rank " + std::to_string(r) + " sent piece " + std::to_string(j) +
                                         " of its message after a short one");
      }
      ended = ended || ops[j].bytes < length(cap, j);
      total += ops[j].bytes;
    }
    return total;
  }
};

}  // namespace gw::coll
