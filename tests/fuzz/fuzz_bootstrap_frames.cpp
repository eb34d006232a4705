// libFuzzer harness: every parser of bytes the bootstrap receives from the network
// (transport/bootstrap/frames.hpp; the protocol is documented in root_server.cpp).
//
// Input: any bytes. Each input is read every way a peer's bytes can be read:
//   - as what a connection sent the root: parse_hello, parse_auth (and verify_auth);
//   - as the stream a rank reads from its root: reply frames one after another, each header
//     checked for a job of several sizes, each payload parsed by its kind (challenge, proof,
//     progress, error, table, and the table's MAC);
//   - as a bare table payload (parse_table, verify_table) for the rank count it announces.
//
// Invariants (any violation aborts):
//   - a hello or auth frame accepted whole is exactly the input, and every shorter prefix of
//     it is "need more" (never accepted, never rejected);
//   - an auth frame's fields re-encoded with a token verify with that token and not with
//     another, and parse back to the same fields;
//   - a reply header that passes check_reply_header announces a payload within its kind's
//     bounds, and a payload parser never accepts a length the header check refused;
//   - a table that parses re-encodes to the same bytes; its MAC, recomputed, verifies;
//   - an error frame's text has no control characters.
//
// Seeds: tests/fuzz/corpus/bootstrap_frames/, written by the encoders
// (tests/bootstrap/test_bootstrap_frames.cpp, test SeedCorpus, with GW_WRITE_FUZZ_CORPUS=1).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/hmac_sha256.hpp"

namespace {

namespace frames = gw::bootstrap::frames;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_bootstrap_frames: invariant violated: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

const uint8_t kToken[frames::kTokenBytes] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const uint8_t kOtherToken[frames::kTokenBytes] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17};
const uint8_t kRootNonce[frames::kNonceBytes] = {0xa0, 0xa1, 0xa2};
const uint8_t kRankNonce[frames::kNonceBytes] = {0xb0, 0xb1, 0xb2};

// Prefix lengths worth checking: the first bytes one by one, then the last few.
template <typename Parse>
void check_prefixes(const uint8_t* p, size_t n, Parse parse, const char* what) {
  for (size_t k = 0; k < n; ++k) {
    if (k > 64 && k + 8 < n) continue;
    check(parse(p, k) == frames::Verdict::kNeedMore, what);
  }
}

void root_side(const uint8_t* p, size_t n) {
  const frames::Hello h = frames::parse_hello(p, n);
  if (h.verdict == frames::Verdict::kBad) check(!h.why.empty(), "a rejected hello says why");
  if (h.verdict == frames::Verdict::kOk && h.version == frames::kVersion) {
    check(n == frames::kHelloBytes, "an accepted hello is exactly 40 bytes");
    check(std::memcmp(h.nonce, p + 8, frames::kNonceBytes) == 0, "the hello's nonce is its bytes 8..40");
    check_prefixes(
        p, n, [](const uint8_t* q, size_t k) { return frames::parse_hello(q, k).verdict; },
        "a strict prefix of a hello is incomplete");
  }

  const frames::Auth a = frames::parse_auth(p, n);
  if (a.verdict == frames::Verdict::kBad) check(!a.why.empty(), "a rejected auth frame says why");
  if (a.verdict != frames::Verdict::kOk) return;
  check(a.size == n, "an accepted auth frame is the whole input");
  check(a.blob_len <= frames::kMaxBlob && a.size == frames::kAuthFixed + a.blob_len + frames::kMacBytes,
        "an accepted auth frame's size follows its blob_len");
  check_prefixes(
      p, n, [](const uint8_t* q, size_t k) { return frames::parse_auth(q, k).verdict; },
      "a strict prefix of an auth frame is incomplete");
  (void)frames::verify_auth(kToken, kRootNonce, kRankNonce, p, a.size);

  // The same fields, encoded by a rank holding kToken.
  const std::string blob(reinterpret_cast<const char*>(p) + frames::kAuthFixed, a.blob_len);
  const std::string again = frames::encode_auth(kToken, kRootNonce, kRankNonce, a.rank, a.nranks, blob);
  const auto* q = reinterpret_cast<const uint8_t*>(again.data());
  const frames::Auth b = frames::parse_auth(q, again.size());
  check(b.verdict == frames::Verdict::kOk && b.rank == a.rank && b.nranks == a.nranks && b.blob_len == a.blob_len,
        "an auth frame re-encoded parses to the same fields");
  check(std::memcmp(q, p, frames::kAuthFixed + a.blob_len) == 0, "re-encoding keeps the bytes before the MAC");
  check(frames::verify_auth(kToken, kRootNonce, kRankNonce, q, again.size()), "a genuine auth frame verifies");
  check(!frames::verify_auth(kOtherToken, kRootNonce, kRankNonce, q, again.size()), "another token does not verify");
  check(!frames::verify_auth(kToken, kRankNonce, kRootNonce, q, again.size()), "swapped nonces do not verify");
}

void table_payload(const uint8_t* p, uint64_t len, uint32_t nranks) {
  std::vector<std::string> blobs;
  std::string why;
  uint8_t key[frames::kMacBytes];
  frames::session_key(kToken, kRootNonce, kRankNonce, key);
  (void)frames::verify_table(key, p, len);
  if (!frames::parse_table(p, len, nranks, &blobs, &why)) {
    check(!why.empty(), "a rejected table says why");
    return;
  }
  check(blobs.size() == nranks, "a table has one entry per rank");
  const std::string frame = frames::encode_table(blobs);
  check(frame.size() == frames::kReplyHeader + len - frames::kMacBytes &&
            std::memcmp(frame.data() + frames::kReplyHeader, p, static_cast<size_t>(len) - frames::kMacBytes) == 0,
        "a table re-encodes to the same bytes");
  const std::string tagged = frames::encode_table(blobs, key);
  check(frames::verify_table(key, reinterpret_cast<const uint8_t*>(tagged.data()) + frames::kReplyHeader,
                             tagged.size() - frames::kReplyHeader),
        "a table with its recomputed MAC verifies");
}

void payload(const frames::ReplyHeader& h, const uint8_t* p, uint64_t len, uint32_t nranks) {
  std::string why;
  switch (h.kind) {
    case frames::kChallenge:
    case frames::kProof: {
      uint8_t nonce[frames::kNonceBytes];
      check(frames::parse_nonce_payload(p, len, nonce, &why), "a checked challenge or proof parses");
      break;
    }
    case frames::kProgress: {
      frames::Progress pr;
      if (frames::parse_progress(p, len, nranks, &pr, &why)) {
        check(pr.nranks == nranks && pr.arrived <= nranks, "progress fits the job");
      }
      break;
    }
    case frames::kError: {
      frames::Error e;
      check(frames::parse_error(p, len, &e, &why), "a checked error frame parses");
      check(e.text.size() == len - frames::kErrorPayloadFixed, "the error text is the rest of the payload");
      for (char c : e.text) check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f, "no control characters");
      break;
    }
    case frames::kTable: table_payload(p, len, nranks); break;
    default: fail("check_reply_header passed an unknown kind");
  }
}

// The stream a rank reads: frames one after another, as long as they are whole.
void rank_side(const uint8_t* p, size_t n, uint32_t nranks) {
  while (n >= frames::kReplyHeader) {
    const frames::ReplyHeader h = frames::parse_reply_header(p);
    std::string why;
    const frames::HeaderProblem problem = frames::check_reply_header(h, nranks, &why);
    p += frames::kReplyHeader;
    n -= frames::kReplyHeader;
    if (problem != frames::HeaderProblem::kNone) {
      check(!why.empty(), "a refused header says why");
      // The payload parsers refuse what the header check refused for its length.
      if (problem == frames::HeaderProblem::kBadLength && h.payload_len <= n) {
        std::string w;
        uint8_t nonce[frames::kNonceBytes];
        frames::Progress pr;
        frames::Error e;
        std::vector<std::string> t;
        if (h.kind == frames::kChallenge || h.kind == frames::kProof) {
          check(!frames::parse_nonce_payload(p, h.payload_len, nonce, &w), "nonce length");
        } else if (h.kind == frames::kProgress) {
          check(!frames::parse_progress(p, h.payload_len, nranks, &pr, &w), "progress length");
        } else if (h.kind == frames::kError) {
          check(!frames::parse_error(p, h.payload_len, &e, &w), "error length");
        } else if (h.kind == frames::kTable) {
          check(!frames::parse_table(p, h.payload_len, nranks, &t, &w), "table length");
        }
      }
      return;
    }
    check(h.payload_len <= frames::max_table_payload(nranks) || h.kind != frames::kTable, "table bound");
    check(h.kind == frames::kTable || h.payload_len <= frames::kErrorPayloadFixed + frames::kMaxErrorText,
          "small frames stay small");
    if (h.payload_len > n) return;  // a rank would wait for the rest
    payload(h, p, h.payload_len, nranks);
    p += h.payload_len;
    n -= static_cast<size_t>(h.payload_len);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  root_side(data, size);
  for (uint32_t nranks : {1u, 2u, 3u, 8u}) rank_side(data, size, nranks);
  if (size >= 4) {
    uint32_t announced = frames::get_u32(data);
    if (announced == 0 || announced > frames::kMaxRanks) announced = 1;
    table_payload(data, size, announced);
  }
  return 0;
}
