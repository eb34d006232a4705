// A transport that forges every data message its rank sends (not the call check's), for the
// hostile-input tests of the compressed collectives: a wrong element count, a foreign codec,
// a cut-short message, or random bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "collectives/common/context.hpp"
#include "transport/local/local_transport.hpp"

namespace gw::test {

enum class Forgery { kCountOffByOne, kForeignCodec, kCutShort, kRandomBytes };

inline const char* forgery_name(Forgery f) {
  switch (f) {
    case Forgery::kCountOffByOne: return "count off by one";
    case Forgery::kForeignCodec: return "foreign codec";
    case Forgery::kCutShort: return "cut short";
    default: return "random bytes";
  }
}

// Every data message this rank sends (not the call check's) is forged as f says, in a copy.
class ForgingTransport final : public transport::ForwardingTransport {
 public:
  ForgingTransport(std::unique_ptr<transport::Transport> inner, Forgery f)
      : ForwardingTransport(*inner), owned_(std::move(inner)), f_(f) {}
  Status isend(int peer, uint64_t tag, const void* buf, size_t len, transport::Op& op) override {
    const uint64_t step = (tag >> coll::kChunkBits) & ((uint64_t{1} << coll::kStepBits) - 1);
    if (step == coll::kMaxSteps - 1 || len < 2) return inner_.isend(peer, tag, buf, len, op);
    const auto* b = static_cast<const uint8_t*>(buf);
    copies_.emplace_back(b, b + len);
    uint8_t* m = copies_.back().data();
    const bool message = len >= 64 && std::memcmp(m, "GWRE", 4) == 0;
    size_t out_len = len;
    switch (f_) {
      case Forgery::kCountOffByOne:
        if (message) m[8] = static_cast<uint8_t>(m[8] + 1);
        break;
      case Forgery::kForeignCodec:
        if (message) m[5] = static_cast<uint8_t>(m[5] == 3 ? 5 : 3);  // qsgd <-> topk
        break;
      case Forgery::kCutShort: out_len = len - 1; break;
      case Forgery::kRandomBytes:
        for (size_t i = 0; i < len; ++i) m[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
        break;
    }
    return inner_.isend(peer, tag, m, out_len, op);
  }

 private:
  std::unique_ptr<transport::Transport> owned_;
  Forgery f_;
  std::vector<std::vector<uint8_t>> copies_;  // alive until the transport goes
};

}  // namespace gw::test
