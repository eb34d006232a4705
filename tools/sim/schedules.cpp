#include "tools/sim/schedules.hpp"

#include <algorithm>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/checks/call_descriptor.hpp"
#include "collectives/checks/check_graph.hpp"
#include "collectives/common/context.hpp"
#include "collectives/common/doubling.hpp"
#include "compressors/sparse_entries.hpp"

namespace gw::sim {
namespace {

using coll::Chunking;
using coll::Doubling;
using coll::Partition;

constexpr double kF = sizeof(float);
double fp32_bytes(uint64_t e) { return kF * static_cast<double>(e); }

// The rates one call works at, and the codec's bound on a message of e elements.
struct Costs {
  const Codec* codec;
  double enc_bps, dec_bps, reduce_bps, sparse_bps;
  Costs(const Call& c, const coll::CostModel& m)
      : codec(c.codec), reduce_bps(m.reduce_bytes_per_s), sparse_bps(m.sparse_sum_bytes_per_s) {
    const coll::CodecRates r = c.codec != nullptr ? m.rates(codec_name(c.codec->id())) : m.default_codec;
    enc_bps = r.encode_bytes_per_s;
    dec_bps = r.decode_bytes_per_s;
  }
  double encoded(uint64_t e) const {
    if (e == 0) return 0;
    return codec != nullptr ? static_cast<double>(codec->max_encoded_bytes(e, DType::kFloat32)) : fp32_bytes(e);
  }
  double encode(uint64_t e) const { return fp32_bytes(e) / enc_bps; }
  double decode(uint64_t e) const { return fp32_bytes(e) / dec_bps; }
  double reduce(uint64_t e) const { return fp32_bytes(e) / reduce_bps; }
};

int wrap(int v, int p) { return ((v % p) + p) % p; }

// The ring's step arithmetic (ring_allreduce.cpp, compressed_ring_allreduce.cpp): step s of
// rank r sends segment send(s) to r + 1 and receives recv(s) from r - 1, p - 1 reduce-scatter
// steps then p - 1 all-gather steps; chunk k of a segment is one lane's message.
struct RingSteps {
  int p;
  Partition part;
  Chunking chunks;
  RingSteps(const Call& c, size_t chunk_bytes)
      : p(c.ranks),
        part{c.count, static_cast<uint64_t>(c.ranks)},
        chunks(Chunking::for_segment(part.length(0), chunk_bytes, sizeof(float))) {}
  int lanes(uint64_t n) const {
    return p == 1 || n == 0 ? 1 : static_cast<int>(std::max<uint32_t>(1, chunks.count(part.length(0))));
  }
  int rs() const { return p - 1; }
  int steps() const { return 2 * (p - 1); }
  int send_seg(int r, int s) const { return s < rs() ? wrap(r - s, p) : wrap(r + 1 - (s - rs()), p); }
  int recv_seg(int r, int s) const { return s < rs() ? wrap(r - s - 1, p) : wrap(r - (s - rs()), p); }
  // Chunk k of seg, 0 when seg has no chunk k.
  uint64_t len(int seg, int k) const {
    const uint64_t l = part.length(static_cast<uint64_t>(seg));
    return static_cast<uint32_t>(k) < chunks.count(l) ? chunks.length(l, static_cast<uint32_t>(k)) : 0;
  }
};

// --- ring (ring_allreduce.cpp): p - 1 reduce-scatter then p - 1 all-gather steps, each
// segment cut into chunks that move on as soon as they are reduced: one lane per chunk.
class RingSchedule : public Schedule {
 public:
  RingSchedule(std::string name, const Call& c, const coll::CostModel& m, size_t chunk_bytes)
      : name_(std::move(name)), n_(c.count), ring_(c, chunk_bytes), costs_(c, m) {}
  std::string name() const override { return name_; }
  int ranks() const override { return ring_.p; }
  int lanes() const override { return ring_.lanes(n_); }
  Op op(int r, int k, uint64_t pc) const override {
    const int p = ring_.p;
    if (p == 1 || n_ == 0) return Op::end();
    if (pc == 0) {
      const uint64_t e0 = ring_.len(ring_.send_seg(r, 0), k);
      return e0 > 0 ? Op::send(wrap(r + 1, p), fp32_bytes(e0)) : Op::skip();
    }
    const uint64_t s64 = (pc - 1) / 3;
    if (s64 >= static_cast<uint64_t>(ring_.steps())) return Op::end();
    const int s = static_cast<int>(s64);
    const uint64_t e = ring_.len(ring_.recv_seg(r, s), k);
    switch ((pc - 1) % 3) {
      case 0: return e > 0 ? Op::recv(wrap(r - 1, p)) : Op::skip();
      case 1: return s < ring_.rs() ? Op::work(costs_.reduce(e)) : Op::skip();
      default: {
        const uint64_t next = s + 1 < ring_.steps() ? ring_.len(ring_.send_seg(r, s + 1), k) : 0;
        return next > 0 ? Op::send(wrap(r + 1, p), fp32_bytes(next)) : Op::skip();
      }
    }
  }

 private:
  std::string name_;
  uint64_t n_;
  RingSteps ring_;
  Costs costs_;
};

// --- compressed ring (compressed_ring_allreduce.cpp): every reduce-scatter hop decodes the
// partial sum, adds, re-encodes; the all-gather forwards each owner's message and decodes it.
class CompressedRingSchedule : public Schedule {
 public:
  CompressedRingSchedule(const Call& c, const coll::CostModel& m)
      : n_(c.count), ring_(c, c.chunk_bytes), costs_(c, m) {}
  std::string name() const override { return "compressed_ring"; }
  int ranks() const override { return ring_.p; }
  int lanes() const override { return ring_.lanes(n_); }
  Op op(int r, int k, uint64_t pc) const override {
    const int p = ring_.p;
    if (p == 1 || n_ == 0) return Op::end();
    const uint64_t e0 = ring_.len(ring_.send_seg(r, 0), k);
    if (pc == 0) return Op::work(costs_.encode(e0));
    if (pc == 1) return e0 > 0 ? Op::send(wrap(r + 1, p), costs_.encoded(e0)) : Op::skip();
    const uint64_t s64 = (pc - 2) / 3;
    if (s64 >= static_cast<uint64_t>(ring_.steps())) return Op::end();
    const int s = static_cast<int>(s64);
    const uint64_t e = ring_.len(ring_.recv_seg(r, s), k);
    if (e == 0) return Op::skip();
    switch ((pc - 2) % 3) {
      case 0: return Op::recv(wrap(r - 1, p));
      case 1:  // reduce-scatter: decode, add, encode for the next hop (the owner: its sum)
        return Op::work(costs_.decode(e) + (s < ring_.rs() ? costs_.encode(e) : 0));
      default:
        return s + 1 < ring_.steps() ? Op::send(wrap(r + 1, p), costs_.encoded(ring_.len(ring_.send_seg(r, s + 1), k)))
                                     : Op::skip();
    }
  }

 private:
  uint64_t n_;
  RingSteps ring_;
  Costs costs_;
};

// --- recursive doubling (recursive_doubling_allreduce.cpp): whole-buffer exchanges with the
// partners of doubling.hpp, folded ranks first handing in and last taking back.
class RecursiveDoublingSchedule : public Schedule {
 public:
  RecursiveDoublingSchedule(const Call& c, const coll::CostModel& m) : p_(c.ranks), n_(c.count), costs_(c, m) {}
  std::string name() const override { return "recursive_doubling"; }
  int ranks() const override { return p_; }
  Op op(int r, int, uint64_t pc) const override {
    if (p_ == 1 || n_ == 0) return Op::end();
    const Doubling d(r, p_);
    // Every message carries the sender's call descriptor at its head (check_graph.hpp), so its
    // buffer is copied behind it first (at about a sum's rate).
    const double bytes = fp32_bytes(n_) + coll::CallDescriptor::kFixedBytes;
    const double copy = costs_.reduce(n_);
    if (d.folded >= 0) {
      switch (pc) {
        case 0: return Op::work(copy);
        case 1: return Op::send(d.folded, bytes);
        case 2: return Op::recv(d.folded);
        default: return Op::end();
      }
    }
    uint64_t i = pc;
    if (d.takes >= 0) {
      if (i == 0) return Op::recv(d.takes);
      if (i == 1) return Op::work(costs_.reduce(n_));
      i -= 2;
    }
    const uint64_t k = i / 4;
    if (k < static_cast<uint64_t>(d.m)) {
      const int peer = d.partner(static_cast<int>(k));
      switch (i % 4) {
        case 0: return Op::work(copy);
        case 1: return Op::send(peer, bytes);
        case 2: return Op::recv(peer);
        default: return Op::work(costs_.reduce(n_));
      }
    }
    i -= 4 * static_cast<uint64_t>(d.m);
    if (d.takes >= 0 && i == 0) return Op::work(copy);
    if (d.takes >= 0 && i == 1) return Op::send(d.takes, bytes);
    return Op::end();
  }

 private:
  int p_;
  uint64_t n_;
  Costs costs_;
};

// --- Rabenseifner (rabenseifner_allreduce.cpp): dense recursive halving (each step's half
// sent straight from the buffer in chunks, the partner's chunks received and summed in
// order), then recursive doubling of the held segments (received in place); folded ranks
// hand their buffer in first and take the result back last, both in chunks.
// What halving-doubling and Rabenseifner share: p ranks over 2^m owners' segments, each
// step's range cut in chunks of the pipelining unit.
class OwnerSegmentsSchedule : public Schedule {
 public:
  OwnerSegmentsSchedule(const Call& c, const coll::CostModel& m)
      : p_(c.ranks),
        n_(c.count),
        chunk_bytes_(c.chunk_bytes),
        costs_(c, m),
        owners_(static_cast<uint64_t>(Doubling(0, c.ranks).pof2)),
        part_{c.count, owners_} {}
  int ranks() const override { return p_; }

 protected:
  uint64_t elems(uint64_t lo, uint64_t hi) const { return part_.start(hi) - part_.start(lo); }
  Chunking chunking(uint64_t e) const { return Chunking::for_segment(e, chunk_bytes_, sizeof(float)); }
  int p_;
  uint64_t n_;
  size_t chunk_bytes_;
  Costs costs_;
  uint64_t owners_;
  Partition part_;
};

class RabenseifnerSchedule : public OwnerSegmentsSchedule {
 public:
  RabenseifnerSchedule(const Call& c, const coll::CostModel& m) : OwnerSegmentsSchedule(c, m) {}
  std::string name() const override { return "rabenseifner"; }
  Op op(int r, int, uint64_t pc) const override {
    if (p_ == 1 || n_ == 0) return Op::end();
    const Doubling d(r, p_);
    uint64_t i = pc;
    Op op = Op::end();
    // e elements to peer as chunks, one send each.
    auto out_ops = [&](int peer, uint64_t e, uint64_t at, Op* o) {
      const Chunking ch = chunking(e);
      const uint64_t ops = e == 0 ? 0 : ch.count(e);
      if (at < ops) *o = Op::send(peer, fp32_bytes(ch.length(e, static_cast<uint32_t>(at))));
      return ops;
    };
    // e elements from peer as chunks: a receive each, then its sum where reduce.
    auto in_ops = [&](int peer, uint64_t e, bool reduce, uint64_t at, Op* o) {
      const Chunking ch = chunking(e);
      const uint64_t per = reduce ? 2 : 1;
      const uint64_t ops = e == 0 ? 0 : per * ch.count(e);
      if (at < ops) {
        *o = at % per == 0 ? Op::recv(peer) : Op::work(costs_.reduce(ch.length(e, static_cast<uint32_t>(at / per))));
      }
      return ops;
    };
    auto run = [&](uint64_t ops) {  // true: op is this position's
      if (i < ops) return true;
      i -= ops;
      return false;
    };
    if (d.folded >= 0) {
      if (run(out_ops(d.folded, n_, i, &op))) return op;
      if (run(in_ops(d.folded, n_, false, i, &op))) return op;
      return Op::end();
    }
    if (d.takes >= 0 && run(in_ops(d.takes, n_, true, i, &op))) return op;
    const uint64_t v = static_cast<uint64_t>(d.newrank);
    uint64_t lo = 0, hi = owners_;
    for (int k = 0; k < d.m; ++k) {
      const coll::HalvingStep h = coll::halving_step(d, k, lo, hi);
      const int peer = h.peer;
      const uint64_t sent = elems(h.send_lo, h.send_hi), kept = elems(h.keep_lo, h.keep_hi);
      if (run(out_ops(peer, sent, i, &op))) return op;
      if (k + 1 < d.m) {
        if (run(in_ops(peer, kept, true, i, &op))) return op;
      } else {
        // The last step: each chunk of this rank's segment goes back as soon as it is summed
        // (the first doubling step), and the partner's segment comes back in place.
        const Chunking ch = chunking(kept);
        const uint64_t ops = kept == 0 ? 0 : 3 * uint64_t{ch.count(kept)};
        if (i < ops) {
          const uint64_t len = ch.length(kept, static_cast<uint32_t>(i / 3));
          switch (i % 3) {
            case 0: return Op::recv(peer);
            case 1: return Op::work(costs_.reduce(len));
            default: return Op::send(peer, fp32_bytes(len));
          }
        }
        i -= ops;
        if (run(in_ops(peer, sent, false, i, &op))) return op;
      }
      lo = h.keep_lo;
      hi = h.keep_hi;
    }
    for (int k = 1; k < d.m; ++k) {
      const uint64_t w = uint64_t{1} << k;
      const int peer = d.rank_of(static_cast<int>(v ^ w));
      const uint64_t mlo = v & ~(w - 1), plo = mlo ^ w;
      if (run(out_ops(peer, elems(mlo, mlo + w), i, &op))) return op;
      if (run(in_ops(peer, elems(plo, plo + w), false, i, &op))) return op;
    }
    if (d.takes >= 0 && run(out_ops(d.takes, n_, i, &op))) return op;
    return Op::end();
  }
};

// --- halving-doubling (halving_doubling_allreduce.cpp): compressed recursive halving to one
// owner segment per rank, each step's half (and the fold's whole buffer) cut in chunks that
// are encoded and sent one by one, then decoded in order; the owner's segment encoded once;
// doubling of owner bundles (8 bytes of length per owner and their messages); every owner's
// message decoded on every rank.
class HalvingDoublingSchedule : public OwnerSegmentsSchedule {
 public:
  HalvingDoublingSchedule(const Call& c, const coll::CostModel& m) : OwnerSegmentsSchedule(c, m) {
    // The bundle of owners [0, j): its bytes, prefix sums (every rank's bundles are ranges).
    bundle_.assign(owners_ + 1, 0.0);
    for (uint64_t j = 0; j < owners_; ++j) bundle_[j + 1] = bundle_[j] + 8 + costs_.encoded(part_.length(j));
  }
  std::string name() const override { return "halving_doubling"; }
  Op op(int r, int, uint64_t pc) const override {
    if (p_ == 1 || n_ == 0) return Op::end();
    const Doubling d(r, p_);
    auto bundle = [&](uint64_t lo, uint64_t hi) { return bundle_[hi] - bundle_[lo]; };
    const double decode_all = costs_.decode(n_);
    uint64_t i = pc;
    // e elements sent to peer as chunks: encode, send, chunk by chunk (2 ops each).
    auto out_ops = [&](int peer, uint64_t e, uint64_t at, Op* op) {
      const Chunking ch = chunking(e);
      const uint64_t ops = e == 0 ? 0 : 2 * uint64_t{ch.count(e)};
      if (at < ops) {
        const uint64_t len = ch.length(e, static_cast<uint32_t>(at / 2));
        *op = at % 2 == 0 ? Op::work(costs_.encode(len)) : Op::send(peer, costs_.encoded(len));
      }
      return ops;
    };
    // e elements taken in from peer as chunks: receive, decode, chunk by chunk.
    auto in_ops = [&](int peer, uint64_t e, uint64_t at, Op* op) {
      const Chunking ch = chunking(e);
      const uint64_t ops = e == 0 ? 0 : 2 * uint64_t{ch.count(e)};
      if (at < ops)
        *op = at % 2 == 0 ? Op::recv(peer) : Op::work(costs_.decode(ch.length(e, static_cast<uint32_t>(at / 2))));
      return ops;
    };
    Op op = Op::end();
    if (d.folded >= 0) {
      const uint64_t k = out_ops(d.folded, n_, i, &op);
      if (i < k) return op;
      i -= k;
      switch (i) {
        case 0: return Op::recv(d.folded);
        case 1: return Op::work(decode_all);
        default: return Op::end();
      }
    }
    if (d.takes >= 0) {
      const uint64_t k = in_ops(d.takes, n_, i, &op);
      if (i < k) return op;
      i -= k;
    }
    const uint64_t m = static_cast<uint64_t>(d.m);
    const uint64_t v = static_cast<uint64_t>(d.newrank);
    uint64_t lo = 0, hi = owners_;
    for (uint64_t k = 0; k < m; ++k) {  // halving step k: the half sent out, then the half kept in
      const coll::HalvingStep h = coll::halving_step(d, static_cast<int>(k), lo, hi);
      const int peer = h.peer;
      const uint64_t sent = elems(h.send_lo, h.send_hi), kept = elems(h.keep_lo, h.keep_hi);
      const uint64_t a = out_ops(peer, sent, i, &op);
      if (i < a) return op;
      i -= a;
      const uint64_t b = in_ops(peer, kept, i, &op);
      if (i < b) return op;
      i -= b;
      lo = h.keep_lo;
      hi = h.keep_hi;
    }
    if (i == 0) return Op::work(costs_.encode(part_.length(v)));  // the owner's segment, once
    i -= 1;
    if (i < 2 * m) {  // doubling step k: swap bundles of 2^k owners
      const uint64_t k = i / 2;
      const uint64_t w = uint64_t{1} << k;
      const uint64_t blo = v & ~(w - 1);
      const int peer = d.rank_of(static_cast<int>(v ^ w));
      return i % 2 == 0 ? Op::send(peer, bundle(blo, blo + w)) : Op::recv(peer);
    }
    i -= 2 * m;
    if (d.takes >= 0) {
      if (i == 0) return Op::send(d.takes, bundle(0, owners_));
      i -= 1;
    }
    if (i == 0) return Op::work(decode_all);
    return Op::end();
  }

 private:
  std::vector<double> bundle_;
};

// --- scatter-reduce (scatter_reduce_allreduce.cpp, its schedule in scatter_reduce_schedule.hpp):
// segments cut into chunks, every chunk of every other owner's segment encoded and sent at
// once (chunk-major, staggered from rank + 1), each own chunk decoded-added from every peer in
// rank order, its sum encoded once and sent to everyone, then every owner's chunks decoded.
class ScatterReduceSimSchedule : public Schedule {
 public:
  ScatterReduceSimSchedule(const Call& c, const coll::CostModel& m)
      : p_(c.ranks),
        n_(c.count),
        costs_(c, m),
        part_{c.count, static_cast<uint64_t>(c.ranks)},
        chunks_(Chunking::for_segment(part_.length(0), c.chunk_bytes, sizeof(float))),
        max_chunks_(chunks_.count(part_.length(0))) {}
  std::string name() const override { return "scatter_reduce"; }
  int ranks() const override { return p_; }
  Op op(int r, int, uint64_t pc) const override {
    if (n_ == 0) return Op::end();
    const uint64_t q = static_cast<uint64_t>(p_ - 1), kc = max_chunks_;
    auto len = [&](int seg, uint64_t k) -> uint64_t {  // 0: seg has no chunk k
      const uint64_t l = part_.length(static_cast<uint64_t>(seg));
      return k < chunks_.count(l) ? chunks_.length(l, static_cast<uint32_t>(k)) : 0;
    };
    auto in_order = [&](uint64_t i) { return static_cast<int>(i) < r ? static_cast<int>(i) : static_cast<int>(i) + 1; };
    uint64_t i = pc;
    if (i < 2 * kc * q) {  // contributions: (chunk, owner) pairs
      const uint64_t k = i / (2 * q), j = (i / 2) % q;
      const int owner = (r + 1 + static_cast<int>(j)) % p_;
      const uint64_t e = len(owner, k);
      if (e == 0) return Op::skip();
      return i % 2 == 0 ? Op::work(costs_.encode(e)) : Op::send(owner, costs_.encoded(e));
    }
    i -= 2 * kc * q;
    const uint64_t per_own = 3 * q + 2;
    if (i < kc * per_own) {  // own chunk k: p - 1 contributions, encode, p - 1 sends, own decode
      const uint64_t k = i / per_own, j = i % per_own;
      const uint64_t e = len(r, k);
      if (e == 0) return Op::skip();
      if (j < 2 * q) return j % 2 == 0 ? Op::recv(in_order(j / 2)) : Op::work(costs_.decode(e));
      if (j == 2 * q) return Op::work(costs_.encode(e));
      if (j < 3 * q + 1) return Op::send((r + 1 + static_cast<int>(j - 2 * q - 1)) % p_, costs_.encoded(e));
      return Op::work(costs_.decode(e));
    }
    i -= kc * per_own;
    if (i < 2 * q * kc) {  // every other owner's chunks, decoded
      const uint64_t j = i / (2 * kc), k = (i / 2) % kc;
      const int owner = (r + 1 + static_cast<int>(j)) % p_;
      const uint64_t e = len(owner, k);
      if (e == 0) return Op::skip();
      return i % 2 == 0 ? Op::recv(owner) : Op::work(costs_.decode(e));
    }
    return Op::end();
  }

 private:
  int p_;
  uint64_t n_;
  Costs costs_;
  Partition part_;
  Chunking chunks_;
  uint64_t max_chunks_;
};

// --- sparse all-gather (sparse_allgather.cpp): the whole buffer encoded once and sent
// straight to every peer (staggered from rank + 1), every message summed in rank order.
class SparseAllgatherSchedule : public Schedule {
 public:
  SparseAllgatherSchedule(const Call& c, const coll::CostModel& m) : p_(c.ranks), n_(c.count), costs_(c, m) {}
  std::string name() const override { return "sparse_allgather"; }
  int ranks() const override { return p_; }
  Op op(int r, int, uint64_t pc) const override {
    if (n_ == 0) return Op::end();
    const uint64_t q = static_cast<uint64_t>(p_ - 1);
    auto in_order = [&](uint64_t i) { return static_cast<int>(i) < r ? static_cast<int>(i) : static_cast<int>(i) + 1; };
    const double msg = costs_.encoded(n_);
    uint64_t i = pc;
    if (i == 0) return Op::work(costs_.encode(n_));
    i -= 1;
    if (i < q) return Op::send((r + 1 + static_cast<int>(i)) % p_, msg);
    i -= q;
    if (i < 2 * q) return i % 2 == 0 ? Op::recv(in_order(i / 2)) : Op::work(msg / costs_.sparse_bps);
    i -= 2 * q;
    if (i == 0) return Op::work(msg / costs_.sparse_bps);  // its own
    return Op::end();
  }

 private:
  int p_;
  uint64_t n_;
  Costs costs_;
};

// --- sparse doubling (sparse_doubling_allreduce.cpp): recursive doubling's exchanges of the
// merged messages, folded ranks first handing in and last taking back. A rank's message holds
// its group's entries: the schedule takes the ranks' indices to be as disjoint as they can be
// (every group's union min(ranks x k, n) entries, what test_sim's inputs give), sent as
// pairs while those are smaller than a dense message, with the call descriptor at the head.
class SparseDoublingSchedule : public Schedule {
 public:
  SparseDoublingSchedule(const Call& c, const coll::CostModel& m)
      : p_(c.ranks),
        n_(c.count),
        k_(c.codec->spec().k_for(c.count)),
        head_(static_cast<double>(coll::CallDescriptor::kFixedBytes + c.codec->spec().to_string().size())),
        costs_(c, m) {}
  std::string name() const override { return "sparse_doubling"; }
  int ranks() const override { return p_; }
  Op op(int r, int, uint64_t pc) const override {
    if (n_ == 0) return Op::end();
    const Doubling d(r, p_);
    const double descriptor = p_ > 1 ? head_ : 0;
    uint64_t i = pc;
    if (i == 0) return Op::work(costs_.encode(n_) + merge(1));  // encode, and the message rewritten
    i -= 1;
    if (d.folded >= 0) {
      switch (i) {
        case 0: return Op::send(d.folded, descriptor + bytes(1));
        case 1: return Op::recv(d.folded);
        case 2: return Op::work(costs_.reduce(n_));  // the sum written out
        default: return Op::end();
      }
    }
    if (d.takes >= 0) {
      if (i == 0) return Op::recv(d.takes);
      if (i == 1) return Op::work(merge(2));
      i -= 2;
    }
    const uint64_t j = i / 3;
    if (j < static_cast<uint64_t>(d.m)) {
      const int peer = d.partner(static_cast<int>(j));
      switch (i % 3) {
        case 0: return Op::send(peer, descriptor + bytes(group(d, static_cast<int>(j))));
        case 1: return Op::recv(peer);
        default: return Op::work(merge(group(d, static_cast<int>(j) + 1)));
      }
    }
    i -= 3 * static_cast<uint64_t>(d.m);
    if (d.takes >= 0) {
      if (i == 0) return Op::send(d.takes, descriptor + bytes(static_cast<uint64_t>(p_)));
      i -= 1;
    }
    if (i == 0) return Op::work(costs_.reduce(n_));
    return Op::end();
  }

 private:
  // Ranks whose entries the group of this rank holds after j exchanges (the 2^j numbers that
  // share its high bits, the ones below extra counting their folded neighbour too).
  static uint64_t group(const Doubling& d, int j) {
    const int lo = d.newrank & ~((1 << j) - 1), hi = lo + (1 << j);
    return static_cast<uint64_t>((hi - lo) + std::max(0, std::min(hi, d.extra) - lo));
  }
  uint64_t entries(uint64_t ranks) const { return std::min(n_, ranks * k_); }
  double bytes(uint64_t ranks) const { return static_cast<double>(detail::entries_message_bytes(n_, entries(ranks))); }
  // Merging into a message of so many ranks' entries: both read and the union written.
  double merge(uint64_t ranks) const {
    return detail::pairs_smaller(n_, entries(ranks)) ? 2 * bytes(ranks) / costs_.sparse_bps : costs_.reduce(n_);
  }
  int p_;
  uint64_t n_;
  uint64_t k_;
  double head_;
  Costs costs_;
};

// --- NCCL's tree: a double binary tree (each half of the buffer on its own tree, a rank
// that is a leaf in one is inner in the other), chunks reduced up to the root and broadcast
// down, the up and down phases on lanes of their own as NCCL runs them on separate channels.
class NcclTreeSchedule : public Schedule {
 public:
  static constexpr size_t kChunkBytes = size_t{512} << 10;
  NcclTreeSchedule(const Call& c, const coll::CostModel& m) : p_(c.ranks), n_(c.count), costs_(c, m) {
    half_[0] = n_ / 2;
    half_[1] = n_ - half_[0];
    chunk_elems_ = kChunkBytes / sizeof(float);
  }
  std::string name() const override { return "nccl_tree"; }
  int ranks() const override { return p_; }
  int lanes() const override { return 4; }  // tree t: up (2t), down (2t + 1)

  struct Node {
    int up = -1, down[2] = {-1, -1};
  };
  // The binary tree over 0..p-1 in which a rank's level is its lowest set bit; the second
  // tree is the first mirrored (even p) or shifted by one (odd p).
  Node node(int tree, int r) const {
    const int v = tree == 0 ? r : (p_ % 2 == 0 ? p_ - 1 - r : wrap(r - 1, p_));
    Node nd = btree(v);
    auto back = [&](int x) { return x < 0 ? -1 : (tree == 0 ? x : (p_ % 2 == 0 ? p_ - 1 - x : wrap(x + 1, p_))); };
    return Node{back(nd.up), {back(nd.down[0]), back(nd.down[1])}};
  }
  Node btree(int r) const {
    Node nd;
    int bit = 1;
    while (bit < p_ && (bit & r) == 0) bit <<= 1;
    if (r == 0) {
      int top = 1;
      while (top * 2 < p_) top *= 2;
      nd.down[0] = p_ > 1 ? top : -1;
      if (nd.down[0] == 0) nd.down[0] = -1;
      return nd;
    }
    int up = (r ^ bit) | (bit << 1);
    if (up >= p_) up = r ^ bit;
    nd.up = up;
    int low = bit >> 1;
    if (low > 0) {
      nd.down[0] = r - low;
      int d1 = r + low;
      while (low > 0 && d1 >= p_) {
        low >>= 1;
        d1 = r + low;
      }
      nd.down[1] = low > 0 ? d1 : -1;
    }
    return nd;
  }

  Op op(int r, int lane, uint64_t pc) const override {
    if (p_ == 1 || n_ == 0) return Op::end();
    const int tree = lane / 2;
    const bool up = lane % 2 == 0;
    const uint64_t n = half_[tree];
    const uint64_t nchunks = (n + chunk_elems_ - 1) / chunk_elems_;
    const Node nd = node(tree, r);
    if (up) {
      const uint64_t c = pc / 6;
      if (c >= nchunks) return Op::end();
      const uint64_t e = std::min<uint64_t>(chunk_elems_, n - c * chunk_elems_);
      const double bytes = fp32_bytes(e);
      switch (pc % 6) {
        case 0: return nd.down[0] >= 0 ? Op::recv(nd.down[0]) : Op::skip();
        case 1: return nd.down[0] >= 0 ? Op::work(costs_.reduce(e)) : Op::skip();
        case 2: return nd.down[1] >= 0 ? Op::recv(nd.down[1]) : Op::skip();
        case 3: return nd.down[1] >= 0 ? Op::work(costs_.reduce(e)) : Op::skip();
        case 4:
          if (nd.up >= 0) return Op::send(nd.up, bytes);  // to the parent's up lane
          return nd.down[0] >= 0 ? Op::send(nd.down[0], bytes, lane + 1) : Op::skip();
        default: return nd.up < 0 && nd.down[1] >= 0 ? Op::send(nd.down[1], bytes, lane + 1) : Op::skip();
      }
    }
    if (nd.up < 0) return Op::end();  // the root's down phase runs on its up lane
    const uint64_t c = pc / 3;
    if (c >= nchunks) return Op::end();
    const uint64_t e = std::min<uint64_t>(chunk_elems_, n - c * chunk_elems_);
    const double bytes = fp32_bytes(e);
    switch (pc % 3) {
      case 0: return Op::recv(nd.up);
      case 1: return nd.down[0] >= 0 ? Op::send(nd.down[0], bytes) : Op::skip();
      default: return nd.down[1] >= 0 ? Op::send(nd.down[1], bytes) : Op::skip();
    }
  }

 private:
  int p_;
  uint64_t n_;
  Costs costs_;
  uint64_t half_[2];
  uint64_t chunk_elems_;
};

// --- the call check (call_check.cpp): beside an algorithm's own lanes, one more that sends
// this rank's descriptor to the peers its graph names and takes theirs, as messages of their
// own (carried descriptors ride in the data and cost nothing more).
class CheckedSchedule : public Schedule {
 public:
  CheckedSchedule(std::unique_ptr<Schedule> inner, coll::CheckGraph graph, double descriptor_bytes)
      : inner_(std::move(inner)), graph_(graph), bytes_(descriptor_bytes), lane_(inner_->lanes()) {}
  std::string name() const override { return inner_->name(); }
  int ranks() const override { return inner_->ranks(); }
  int lanes() const override { return lane_ + 1; }
  Op op(int r, int lane, uint64_t pc) const override {
    if (lane < lane_) return inner_->op(r, lane, pc);
    const int p = ranks();
    if (p == 1 || graph_ == coll::CheckGraph::kRingHead) return Op::end();  // it rides in the data
    if (graph_ == coll::CheckGraph::kAllPeers) {                            // every other rank, both ways
      const uint64_t q = static_cast<uint64_t>(p - 1);
      if (pc < q) return Op::send((r + 1 + static_cast<int>(pc)) % p, bytes_, lane_);
      if (pc < 2 * q) return Op::recv((r + 1 + static_cast<int>(pc - q)) % p);
      return Op::end();
    }
    // The ring edge, and for halving-doubling its partners, with messages of their own; each
    // peer once each way (CallCheck::add_out, add_in).
    int out[40], in[40], nout = 0, nin = 0;
    auto add = [&](int* list, int& n, int peer) {
      for (int i = 0; i < n; ++i) {
        if (list[i] == peer) return;
      }
      if (peer != r) list[n++] = peer;
    };
    add(out, nout, wrap(r + 1, p));
    add(in, nin, wrap(r - 1, p));
    if (graph_ == coll::CheckGraph::kPartners) {
      const Doubling d(r, p);
      for (int q : {d.folded, d.takes}) {
        if (q >= 0) add(out, nout, q), add(in, nin, q);
      }
      for (int k = 0; d.newrank >= 0 && k < d.m; ++k) add(out, nout, d.partner(k)), add(in, nin, d.partner(k));
    }
    const uint64_t uo = static_cast<uint64_t>(nout), ui = static_cast<uint64_t>(nin);
    if (pc < uo) return Op::send(out[pc], bytes_, lane_);
    if (pc < uo + ui) return Op::recv(in[pc - uo]);
    return Op::end();
  }

 private:
  std::unique_ptr<Schedule> inner_;
  coll::CheckGraph graph_;
  double bytes_;
  int lane_;
};

std::unique_ptr<Schedule> make_unchecked(const std::string& algo, const Call& call, const coll::CostModel& model) {
  Call dense = call;
  dense.codec = nullptr;
  if (algo == "ring") return std::make_unique<RingSchedule>("ring", dense, model, call.chunk_bytes);
  // NCCL's ring: the same ring, pipelined in its 512 KiB slices (NCCL_BUFFSIZE / NCCL_STEPS).
  if (algo == "nccl_ring") return std::make_unique<RingSchedule>("nccl_ring", dense, model, size_t{512} << 10);
  if (algo == "nccl_tree") return std::make_unique<NcclTreeSchedule>(dense, model);
  if (algo == "recursive_doubling") return std::make_unique<RecursiveDoublingSchedule>(dense, model);
  if (algo == "rabenseifner") return std::make_unique<RabenseifnerSchedule>(dense, model);
  if (algo == "compressed_ring") return std::make_unique<CompressedRingSchedule>(call, model);
  if (algo == "halving_doubling") return std::make_unique<HalvingDoublingSchedule>(call, model);
  if (algo == "scatter_reduce") return std::make_unique<ScatterReduceSimSchedule>(call, model);
  if (algo == "sparse_allgather") return std::make_unique<SparseAllgatherSchedule>(call, model);
  if (algo == "sparse_doubling") {
    if (!call.codec->spec().is_sparse()) return nullptr;
    return std::make_unique<SparseDoublingSchedule>(call, model);
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> schedule_names() {
  return {"ring",           "recursive_doubling", "rabenseifner",     "compressed_ring",
          "scatter_reduce", "halving_doubling",   "sparse_allgather", "sparse_doubling",
          "nccl_ring",      "nccl_tree"};
}

bool compressed_schedule(const std::string& algo) {
  return algo == "compressed_ring" || algo == "scatter_reduce" || algo == "halving_doubling" ||
         algo == "sparse_allgather" || algo == "sparse_doubling";
}

std::unique_ptr<Schedule> make_schedule(const std::string& algo, const Call& call, const coll::CostModel& model) {
  if (call.ranks < 1) return nullptr;
  if (compressed_schedule(algo) && call.codec == nullptr) return nullptr;
  std::unique_ptr<Schedule> s = make_unchecked(algo, call, model);
  if (s == nullptr || !call.checks || algo.rfind("nccl_", 0) == 0) return s;
  const coll::AlgorithmRow* row = coll::find_algorithm(algo);
  if (row == nullptr) return s;
  const double bytes = static_cast<double>(coll::CallDescriptor::kFixedBytes) +
                       (call.codec != nullptr ? static_cast<double>(call.codec->spec().to_string().size()) : 0.0);
  return std::make_unique<CheckedSchedule>(std::move(s), row->check, bytes);
}

}  // namespace gw::sim
