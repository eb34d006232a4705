// All-to-all, fixed and variable: every receive is posted, then every send (to rank + 1,
// rank + 2, ... so that no rank is everyone's first target), each message cut into chunks.
// The variable one first learns whether the ranks' sizes agree (each sender's size to its
// receiver, then a dissemination exchange of the first disagreement found), so that a
// mismatch fails on every rank before any data moves.
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/host/algorithms.hpp"
#include "collectives/algorithms/scratch_slots.hpp"

namespace gw::coll {
namespace {

constexpr uint32_t kSizeStep = 0;   // alltoallv: each sender's sizes
constexpr uint32_t kAgreeStep = 1;  // alltoallv: steps 1 .. 11, the dissemination rounds
constexpr uint32_t kDataStep = 16;  // the data

// Moves the data once every size is known to agree: block r of send (sbytes[r] bytes at
// soff[r]) to rank r, and rbytes[r] bytes from rank r to roff[r] of recv.
Status exchange(Context& c, const uint8_t* send, const uint64_t* sbytes, const uint64_t* soff, uint8_t* recv,
                const uint64_t* rbytes, const uint64_t* roff) {
  const int p = c.size;
  if (rbytes[c.rank] > 0 && recv + roff[c.rank] != send + soff[c.rank]) {
    std::memmove(recv + roff[c.rank], send + soff[c.rank], rbytes[c.rank]);
  }
  // Each message is chunked by its own length, which both its ends know.
  auto chunking = [&](uint64_t len) { return Chunking::for_segment(len, c.chunk_bytes, 1); };
  std::vector<size_t> sfirst(static_cast<size_t>(p) + 1, 0), rfirst(static_cast<size_t>(p) + 1, 0);
  for (int r = 0; r < p; ++r) {
    const bool self = r == c.rank;
    sfirst[r + 1] = sfirst[r] + (self ? 0 : chunking(sbytes[r]).count(sbytes[r]));
    rfirst[r + 1] = rfirst[r] + (self ? 0 : chunking(rbytes[r]).count(rbytes[r]));
  }
  transport::Op* sends = c.scratch.sends.get(sfirst[p]);
  transport::Op* recvs = c.scratch.recvs.get(rfirst[p]);
  for (int i = 1; i < p; ++i) {
    const int r = c.wrap(c.rank - i);
    const Chunking ch = chunking(rbytes[r]);
    for (uint32_t k = 0; k < ch.count(rbytes[r]); ++k) {
      GW_RETURN_IF_ERROR(c.tp.irecv(r, c.tag(kDataStep, k), recv + roff[r] + ch.offset(k), ch.length(rbytes[r], k),
                                    recvs[rfirst[r] + k]));
    }
  }
  for (int i = 1; i < p; ++i) {
    const int r = c.wrap(c.rank + i);
    const Chunking ch = chunking(sbytes[r]);
    for (uint32_t k = 0; k < ch.count(sbytes[r]); ++k) {
      GW_RETURN_IF_ERROR(c.tp.isend(r, c.tag(kDataStep, k), send + soff[r] + ch.offset(k), ch.length(sbytes[r], k),
                                    sends[sfirst[r] + k]));
    }
  }
  for (int i = 1; i < p; ++i) {
    const int r = c.wrap(c.rank - i);
    const Chunking ch = chunking(rbytes[r]);
    for (uint32_t k = 0; k < ch.count(rbytes[r]); ++k) {
      transport::Op& got = recvs[rfirst[r] + k];
      GW_RETURN_IF_ERROR(c.wait(got));
      if (got.bytes != ch.length(rbytes[r], k)) {
        return Status(Code::kRemote, "all-to-all: rank " + std::to_string(r) + " sent " + std::to_string(got.bytes) +
                                         " bytes for chunk " + std::to_string(k) + ", expected " +
                                         std::to_string(ch.length(rbytes[r], k)));
      }
    }
  }
  return c.wait_all(sends, sfirst[p]);
}

// The first size disagreement a rank knows of: receiver == kNone when none.
struct Finding {
  uint64_t receiver, sender, sent, expected;
  static constexpr uint64_t kNone = ~uint64_t{0};
  bool before(const Finding& o) const { return receiver != o.receiver ? receiver < o.receiver : sender < o.sender; }
};

// Every rank ends with the first (lowest receiver, then sender) disagreement of all ranks'.
Status agree_on_sizes(Context& c, const uint64_t* sbytes, const uint64_t* rbytes, Finding* first) {
  const int p = c.size;
  std::vector<uint64_t> told(static_cast<size_t>(p), 0);  // what each sender says it sends here
  transport::Op* sends = c.scratch.sends.get(static_cast<size_t>(p));
  transport::Op* recvs = c.scratch.recvs.get(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    if (r != c.rank) GW_RETURN_IF_ERROR(c.tp.irecv(r, c.tag(kSizeStep, 0), &told[r], sizeof(uint64_t), recvs[r]));
  }
  for (int r = 0; r < p; ++r) {
    if (r != c.rank) GW_RETURN_IF_ERROR(c.tp.isend(r, c.tag(kSizeStep, 0), &sbytes[r], sizeof(uint64_t), sends[r]));
  }
  told[c.rank] = sbytes[c.rank];
  Finding mine{Finding::kNone, 0, 0, 0};
  for (int r = 0; r < p; ++r) {
    if (r != c.rank) {
      GW_RETURN_IF_ERROR(c.wait(recvs[r]));
      if (recvs[r].bytes != sizeof(uint64_t)) {
        return Status(Code::kRemote, "all-to-all: rank " + std::to_string(r) + " sent a size message of " +
                                         std::to_string(recvs[r].bytes) + " bytes");
      }
    }
    if (mine.receiver == Finding::kNone && told[r] != rbytes[r]) {
      mine = Finding{static_cast<uint64_t>(c.rank), static_cast<uint64_t>(r), told[r], rbytes[r]};
    }
  }
  GW_RETURN_IF_ERROR(c.wait_all(sends, static_cast<size_t>(p)));
  // Dissemination: after round j every rank knows the findings of the 2^(j+1) ranks before it.
  Finding in[2];
  uint32_t round = 0;
  for (int dist = 1; dist < p; dist *= 2, ++round) {
    GW_RETURN_IF_ERROR(
        c.tp.irecv(c.wrap(c.rank - dist), c.tag(kAgreeStep + round, 0), &in[round % 2], sizeof(Finding), recvs[0]));
    Finding out = mine;
    GW_RETURN_IF_ERROR(
        c.tp.isend(c.wrap(c.rank + dist), c.tag(kAgreeStep + round, 0), &out, sizeof(Finding), sends[0]));
    GW_RETURN_IF_ERROR(c.wait(recvs[0]));
    GW_RETURN_IF_ERROR(c.wait(sends[0]));
    if (recvs[0].bytes != sizeof(Finding)) {
      return Status(Code::kRemote, "all-to-all: rank " + std::to_string(c.wrap(c.rank - dist)) +
                                       " sent a size agreement of " + std::to_string(recvs[0].bytes) + " bytes");
    }
    if (in[round % 2].before(mine)) mine = in[round % 2];
  }
  *first = mine;
  return Status::ok();
}

}  // namespace

Status alltoall(Context& c, const void* send, void* recv, size_t bytes) {
  const auto p = static_cast<size_t>(c.size);
  uint64_t* off = c.scratch.bytes.get<uint64_t>(kLayoutOffsetsSlot, p);
  uint64_t* len = c.scratch.bytes.get<uint64_t>(kLayoutLengthsSlot, p);
  for (size_t r = 0; r < p; ++r) {
    off[r] = r * bytes;
    len[r] = bytes;
  }
  return exchange(c, static_cast<const uint8_t*>(send), len, off, static_cast<uint8_t*>(recv), len, off);
}

Status alltoallv(Context& c, const void* send, const uint64_t* sbytes, const uint64_t* soff, void* recv,
                 const uint64_t* rbytes, const uint64_t* roff) {
  if (c.size > 1 || sbytes[0] != rbytes[0]) {
    Finding first{Finding::kNone, 0, 0, 0};
    if (c.size > 1) {
      GW_RETURN_IF_ERROR(agree_on_sizes(c, sbytes, rbytes, &first));
    } else {
      first = Finding{0, 0, sbytes[0], rbytes[0]};
    }
    if (first.receiver != Finding::kNone) {
      return invalid_usage("alltoallv sizes differ between ranks: rank " + std::to_string(first.sender) + " sends " +
                           std::to_string(first.sent) + " bytes to rank " + std::to_string(first.receiver) +
                           ", which expects " + std::to_string(first.expected) + " (its recvbytes[" +
                           std::to_string(first.sender) + "])");
    }
  }
  return exchange(c, static_cast<const uint8_t*>(send), sbytes, soff, static_cast<uint8_t*>(recv), rbytes, roff);
}

}  // namespace gw::coll
