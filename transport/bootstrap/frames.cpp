#include "transport/bootstrap/frames.hpp"

#include <cstring>

#include "transport/bootstrap/hmac_sha256.hpp"

namespace gw::bootstrap::frames {
namespace {

// Domain labels: every MAC keyed with the token starts with one, so no MAC can stand in for
// another (a rank's MAC is never a root's proof).
constexpr char kRankLabel[] = "gw-rank";
constexpr char kRootLabel[] = "gw-root";
constexpr char kSessionLabel[] = "gw-session";
constexpr char kTableLabel[] = "gw-table";

template <size_t N>
void label(HmacSha256& h, const char (&s)[N]) {
  h.update(s, N - 1);  // without the terminating NUL
}

std::string reply(uint16_t kind, uint64_t payload_len) {
  std::string out(kReplyHeader, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kReplyMagic, 4);
  put_u16(p + 4, kVersion);
  put_u16(p + 6, kind);
  put_u64(p + 8, payload_len);
  return out;
}

void append_u32(std::string& s, uint32_t v) {
  uint8_t b[4];
  put_u32(b, v);
  s.append(reinterpret_cast<const char*>(b), 4);
}

void append(std::string& s, const uint8_t* p, size_t n) { s.append(reinterpret_cast<const char*>(p), n); }

// Whether the first min(n, 4) bytes match the magic.
bool magic_prefix(const uint8_t* p, size_t n, const uint8_t magic[4]) {
  return std::memcmp(p, magic, n < 4 ? n : 4) == 0;
}

void rank_mac(const uint8_t token[kTokenBytes], const uint8_t root_nonce[kNonceBytes],
              const uint8_t rank_nonce[kNonceBytes], const uint8_t* frame, size_t n, uint8_t out[kMacBytes]) {
  HmacSha256 h(token, kTokenBytes);
  label(h, kRankLabel);
  h.update(root_nonce, kNonceBytes);
  h.update(rank_nonce, kNonceBytes);
  h.update(frame, n);
  h.final(out);
}

bool fail(std::string* why, const std::string& text) {
  if (why != nullptr) *why = text;
  return false;
}

}  // namespace

// ---- rank -> root --------------------------------------------------------------------------

std::string encode_hello(const uint8_t nonce[kNonceBytes], uint16_t version) {
  std::string out(kHelloBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kHelloMagic, 4);
  put_u16(p + 4, version);
  put_u16(p + 6, 0);
  std::memcpy(p + 8, nonce, kNonceBytes);
  return out;
}

Hello parse_hello(const uint8_t* p, size_t n) {
  Hello h;
  if (!magic_prefix(p, n, kHelloMagic)) {
    h.verdict = Verdict::kBad;
    h.why = "bad magic (not a gradwire rank)";
    return h;
  }
  if (n < kHelloPrefix) return h;
  h.version = get_u16(p + 4);
  if (h.version != kVersion) {
    h.verdict = Verdict::kOk;
    return h;
  }
  if (n < kHelloBytes) return h;
  if (n > kHelloBytes) {
    h.verdict = Verdict::kBad;
    h.why = "sent bytes past its hello before the challenge";
    return h;
  }
  std::memcpy(h.nonce, p + 8, kNonceBytes);
  h.verdict = Verdict::kOk;
  return h;
}

std::string encode_auth(const uint8_t token[kTokenBytes], const uint8_t root_nonce[kNonceBytes],
                        const uint8_t rank_nonce[kNonceBytes], uint32_t rank, uint32_t nranks,
                        const std::string& blob) {
  std::string out(kAuthFixed, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kAuthMagic, 4);
  put_u32(p + 4, rank);
  put_u32(p + 8, nranks);
  put_u32(p + 12, static_cast<uint32_t>(blob.size()));
  out.reserve(kAuthFixed + blob.size() + kMacBytes);
  out += blob;
  uint8_t mac[kMacBytes];
  rank_mac(token, root_nonce, rank_nonce, reinterpret_cast<const uint8_t*>(out.data()), out.size(), mac);
  append(out, mac, sizeof mac);
  return out;
}

Auth parse_auth(const uint8_t* p, size_t n) {
  Auth a;
  if (!magic_prefix(p, n, kAuthMagic)) {
    a.verdict = Verdict::kBad;
    a.why = "bad magic in its auth frame";
    return a;
  }
  if (n < kAuthFixed) return a;
  a.rank = get_u32(p + 4);
  a.nranks = get_u32(p + 8);
  a.blob_len = get_u32(p + 12);
  if (a.blob_len > kMaxBlob) {
    a.verdict = Verdict::kBad;
    a.why = "an auth frame announcing a " + std::to_string(a.blob_len) + "-byte blob (the limit is " +
            std::to_string(kMaxBlob) + ")";
    return a;
  }
  a.size = kAuthFixed + a.blob_len + kMacBytes;
  if (n < a.size) return a;
  if (n > a.size) {
    a.verdict = Verdict::kBad;
    a.why = "sent bytes past its auth frame";
    return a;
  }
  a.verdict = Verdict::kOk;
  return a;
}

bool verify_auth(const uint8_t token[kTokenBytes], const uint8_t root_nonce[kNonceBytes],
                 const uint8_t rank_nonce[kNonceBytes], const uint8_t* p, size_t size) {
  if (size < kAuthFixed + kMacBytes) return false;
  uint8_t mac[kMacBytes];
  rank_mac(token, root_nonce, rank_nonce, p, size - kMacBytes, mac);
  return equal_constant_time(mac, auth_mac(p, size), kMacBytes);
}

// ---- root -> rank --------------------------------------------------------------------------

ReplyHeader parse_reply_header(const uint8_t* p) {
  ReplyHeader h{};
  std::memcpy(h.magic, p, 4);
  h.version = get_u16(p + 4);
  h.kind = get_u16(p + 6);
  h.payload_len = get_u64(p + 8);
  return h;
}

HeaderProblem check_reply_header(const ReplyHeader& h, uint32_t nranks, std::string* why) {
  if (std::memcmp(h.magic, kReplyMagic, 4) != 0) {
    fail(why, "a reply with a bad magic (is something other than a gradwire root listening there?)");
    return HeaderProblem::kBadMagic;
  }
  if (h.version != kVersion) {
    fail(why, "a reply in protocol version " + std::to_string(h.version) + " (this library speaks " +
                  std::to_string(kVersion) + ")");
    return HeaderProblem::kBadVersion;
  }
  const uint64_t len = h.payload_len;
  const auto bad_length = [&](const char* what) {
    fail(why, std::string(what) + " of " + std::to_string(len) + " bytes");
    return HeaderProblem::kBadLength;
  };
  switch (h.kind) {
    case kChallenge: return len == kNonceBytes ? HeaderProblem::kNone : bad_length("a challenge");
    case kProof: return len == kMacBytes ? HeaderProblem::kNone : bad_length("a proof");
    case kProgress: return len == kProgressPayload ? HeaderProblem::kNone : bad_length("a progress frame");
    case kError:
      return len >= kErrorPayloadFixed && len <= kErrorPayloadFixed + kMaxErrorText ? HeaderProblem::kNone
                                                                                    : bad_length("an error frame");
    case kTable:
      if (nranks == 0 || nranks > kMaxRanks || len < min_table_payload(nranks) || len > max_table_payload(nranks)) {
        fail(why, "a table of " + std::to_string(len) + " bytes, impossible for " + std::to_string(nranks) + " ranks");
        return HeaderProblem::kBadLength;
      }
      return HeaderProblem::kNone;
    default: fail(why, "a reply of unknown kind " + std::to_string(h.kind)); return HeaderProblem::kUnknownKind;
  }
}

std::string encode_challenge(const uint8_t root_nonce[kNonceBytes]) {
  std::string out = reply(kChallenge, kNonceBytes);
  append(out, root_nonce, kNonceBytes);
  return out;
}

void root_proof(const uint8_t token[kTokenBytes], const uint8_t rank_nonce[kNonceBytes],
                const uint8_t root_nonce[kNonceBytes], const uint8_t rank_mac_bytes[kMacBytes],
                uint8_t out[kMacBytes]) {
  HmacSha256 h(token, kTokenBytes);
  label(h, kRootLabel);
  h.update(rank_nonce, kNonceBytes);
  h.update(root_nonce, kNonceBytes);
  h.update(rank_mac_bytes, kMacBytes);
  h.final(out);
}

std::string encode_proof(const uint8_t token[kTokenBytes], const uint8_t rank_nonce[kNonceBytes],
                         const uint8_t root_nonce[kNonceBytes], const uint8_t rank_mac_bytes[kMacBytes]) {
  uint8_t proof[kMacBytes];
  root_proof(token, rank_nonce, root_nonce, rank_mac_bytes, proof);
  std::string out = reply(kProof, kMacBytes);
  append(out, proof, sizeof proof);
  return out;
}

void session_key(const uint8_t token[kTokenBytes], const uint8_t root_nonce[kNonceBytes],
                 const uint8_t rank_nonce[kNonceBytes], uint8_t out[kMacBytes]) {
  HmacSha256 h(token, kTokenBytes);
  label(h, kSessionLabel);
  h.update(root_nonce, kNonceBytes);
  h.update(rank_nonce, kNonceBytes);
  h.final(out);
}

std::string encode_table(const std::vector<std::string>& blobs) {
  uint64_t payload = 4;
  for (const auto& b : blobs) payload += 4 + b.size();
  std::string out = reply(kTable, payload + kMacBytes);
  out.reserve(kReplyHeader + payload + kMacBytes);
  append_u32(out, static_cast<uint32_t>(blobs.size()));
  for (const auto& b : blobs) {
    append_u32(out, static_cast<uint32_t>(b.size()));
    out += b;
  }
  return out;
}

void table_digest(const std::string& table_frame, uint8_t out[kMacBytes]) {
  const size_t skip = table_frame.size() < kReplyHeader ? table_frame.size() : kReplyHeader;
  sha256(table_frame.data() + skip, table_frame.size() - skip, out);
}

std::string table_mac(const uint8_t key[kMacBytes], const uint8_t digest[kMacBytes]) {
  HmacSha256 h(key, kMacBytes);
  label(h, kTableLabel);
  h.update(digest, kMacBytes);
  uint8_t mac[kMacBytes];
  h.final(mac);
  return std::string(reinterpret_cast<const char*>(mac), sizeof mac);
}

std::string encode_table(const std::vector<std::string>& blobs, const uint8_t key[kMacBytes]) {
  std::string out = encode_table(blobs);
  uint8_t digest[kMacBytes];
  table_digest(out, digest);
  return out + table_mac(key, digest);
}

std::string encode_error(uint32_t code, uint32_t arrived, uint32_t nranks, const std::string& text) {
  const std::string t = text.substr(0, kMaxErrorText);
  std::string out = reply(kError, kErrorPayloadFixed + t.size());
  append_u32(out, code);
  append_u32(out, arrived);
  append_u32(out, nranks);
  out += t;
  return out;
}

std::string encode_progress(uint32_t arrived, uint32_t nranks) {
  std::string out = reply(kProgress, kProgressPayload);
  append_u32(out, arrived);
  append_u32(out, nranks);
  return out;
}

bool parse_nonce_payload(const uint8_t* p, uint64_t len, uint8_t out[kNonceBytes], std::string* why) {
  if (len != kNonceBytes) return fail(why, "a nonce or proof of " + std::to_string(len) + " bytes");
  std::memcpy(out, p, kNonceBytes);
  return true;
}

bool parse_progress(const uint8_t* p, uint64_t len, uint32_t nranks, Progress* out, std::string* why) {
  if (len != kProgressPayload) return fail(why, "a progress frame of " + std::to_string(len) + " bytes");
  const uint32_t arrived = get_u32(p), n = get_u32(p + 4);
  if (n != nranks || arrived > n) {
    return fail(why, "progress " + std::to_string(arrived) + " of " + std::to_string(n) + " for a job of " +
                         std::to_string(nranks));
  }
  out->arrived = arrived;
  out->nranks = n;
  return true;
}

bool parse_error(const uint8_t* p, uint64_t len, Error* out, std::string* why) {
  if (len < kErrorPayloadFixed || len > kErrorPayloadFixed + kMaxErrorText) {
    return fail(why, "an error frame of " + std::to_string(len) + " bytes");
  }
  out->code = get_u32(p);
  out->arrived = get_u32(p + 4);
  out->nranks = get_u32(p + 8);
  out->text.assign(reinterpret_cast<const char*>(p) + kErrorPayloadFixed,
                   static_cast<size_t>(len) - kErrorPayloadFixed);
  for (char& ch : out->text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) ch = ' ';  // no control characters into logs
  }
  return true;
}

bool verify_table(const uint8_t key[kMacBytes], const uint8_t* p, uint64_t len) {
  if (len < 4 + kMacBytes) return false;
  const size_t body = static_cast<size_t>(len) - kMacBytes;
  uint8_t digest[kMacBytes];
  sha256(p, body, digest);
  const std::string mac = table_mac(key, digest);
  return equal_constant_time(reinterpret_cast<const uint8_t*>(mac.data()), p + body, kMacBytes);
}

bool parse_table(const uint8_t* p, uint64_t len, uint32_t nranks, std::vector<std::string>* out, std::string* why) {
  if (nranks == 0 || nranks > kMaxRanks || len < min_table_payload(nranks) || len > max_table_payload(nranks)) {
    return fail(why,
                "a table of " + std::to_string(len) + " bytes, impossible for " + std::to_string(nranks) + " ranks");
  }
  const uint64_t body = len - kMacBytes;
  const uint32_t count = get_u32(p);
  if (count != nranks) {
    return fail(why, "a table of " + std::to_string(count) + " ranks for a job of " + std::to_string(nranks));
  }
  std::vector<std::string> table(nranks);
  uint64_t used = 4;
  for (uint32_t r = 0; r < nranks; ++r) {
    if (used + 4 > body) return fail(why, "a table that ends before the entry for rank " + std::to_string(r));
    const uint32_t n = get_u32(p + used);
    used += 4;
    if (n > kMaxBlob || n > body - used) {
      return fail(why, "a table entry of " + std::to_string(n) + " bytes for rank " + std::to_string(r));
    }
    table[r].assign(reinterpret_cast<const char*>(p + used), n);
    used += n;
  }
  if (used != body) return fail(why, "a table with " + std::to_string(body - used) + " trailing bytes");
  *out = std::move(table);
  return true;
}

}  // namespace gw::bootstrap::frames
